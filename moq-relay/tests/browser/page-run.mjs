// Drives headless Chromium through the relay's own page for moq-relay's page test (../browser.rs):
// `node page-run.mjs http://127.0.0.1:PORT/ SCREENSHOTS_DIR NATIVE_BROADCAST`. One page publishes
// the fake camera and microphone under a path, a second page finds it in the list and watches
// it, and reads the native broadcast's "seconds" track as text; a page with a bad token is
// refused. Prints one JSON line per step; saves a screenshot of each page.
import path from "node:path";
import puppeteer from "puppeteer-core";

const [url, shots, native] = process.argv.slice(2);
const emit = (line) => console.log(JSON.stringify(line));
const PUBLISHED = "page/cam";

const browser = await puppeteer.launch({
	executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
	headless: true,
	args: [
		"--no-sandbox",
		"--disable-gpu",
		"--disable-dev-shm-usage",
		"--use-fake-device-for-media-stream",
		"--use-fake-ui-for-media-stream",
		"--autoplay-policy=no-user-gesture-required",
	],
});

async function open(name) {
	const page = await browser.newPage();
	await page.setViewport({ width: 1280, height: 900 });
	page.on("console", (message) => {
		if (message.type() === "error" || message.type() === "warn") console.error(`[${name} ${message.type()}] ${message.text()}`);
	});
	page.on("pageerror", (error) => console.error(`[${name} error] ${error}`));
	await page.goto(url);
	await page.waitForFunction(() => window.relayPage?.connected === true, { timeout: 30000 });
	return page;
}

try {
	// The publisher: type a path, press Publish (the camera and microphone are Chromium's fakes).
	const publisher = await open("publisher");
	await publisher.type("#publish-path", PUBLISHED);
	await publisher.click("#publish-button");
	await publisher.waitForFunction((p) => window.relayPage.broadcasts.has(p), { timeout: 30000 }, PUBLISHED);
	emit({ step: "published", path: PUBLISHED });

	// The viewer: the broadcast is in the list (with its catalog's tracks), and the player decodes it.
	const viewer = await open("viewer");
	await viewer.waitForFunction(
		(p) => window.relayPage.broadcasts.get(p)?.tracks?.length > 0,
		{ timeout: 30000 },
		PUBLISHED,
	);
	const tracks = await viewer.evaluate((p) => window.relayPage.broadcasts.get(p).tracks, PUBLISHED);
	await viewer.click(`#broadcasts li[data-path="${PUBLISHED}"] button`);
	await viewer.waitForFunction(() => (window.relayPage.decodedFrames() ?? 0) >= 30, { timeout: 60000 });
	const decoded = await viewer.evaluate(() => window.relayPage.decodedFrames());
	emit({ step: "watched", path: PUBLISHED, tracks, decoded });

	// The plots show the traffic.
	await viewer.waitForFunction(() => window.relayPage.figures.groups > 0 && window.relayPage.figures.bytes_out > 0, {
		timeout: 15000,
	});
	emit({ step: "figures", figures: await viewer.evaluate(() => window.relayPage.figures) });

	// The native publisher is listed, and its frames read as text in the plain track view.
	await viewer.waitForFunction((p) => window.relayPage.broadcasts.has(p), { timeout: 30000 }, native);
	await viewer.click(`#broadcasts li[data-path="${native}"] button:last-child`);
	await viewer.waitForFunction(() => window.relayPage.frames.length >= 3, { timeout: 30000 });
	emit({ step: "native", path: native, frames: await viewer.evaluate(() => window.relayPage.frames) });

	// A token on the page's URL goes with its connections: this relay refuses a bad one (even
	// though it lets anonymous clients in), and the page stays disconnected.
	const refused = async () => {
		const metrics = await (await fetch(new URL("/metrics", url))).text();
		return Number(metrics.match(/^moq_relay_refused_total (\d+)$/m)?.[1] ?? 0);
	};
	const before = await refused();
	const tokened = await browser.newPage();
	await tokened.goto(`${url}?jwt=not-a-token`);
	const deadline = Date.now() + 30000;
	while ((await refused()) === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
	const connected = await tokened.evaluate(() => window.relayPage?.connected);
	emit({ step: "token", refused: (await refused()) - before, connected });
	await tokened.close();

	await publisher.screenshot({ path: path.join(shots, "page-publish.png") });
	await viewer.screenshot({ path: path.join(shots, "page-watch.png") });
	emit({ step: "screenshots", dir: shots });
} catch (error) {
	emit({ error: String(error?.stack ?? error) });
	process.exitCode = 1;
} finally {
	await browser.close();
}
