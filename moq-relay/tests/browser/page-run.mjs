// Drives headless Chromium through the relay's own page for moq-relay's page test (../browser.rs):
// `node page-run.mjs http://127.0.0.1:PORT/ SCREENSHOTS_DIR NATIVE_BROADCAST AUTH_URL TOKEN`. One
// page publishes the fake camera and microphone under a path, a second page finds it in the list
// and watches it (video decoded and shown, then audio once the sound is on), an MSF catalog
// published from the page is listed, the native broadcast's "seconds" track is read as text, the
// camera is watched again after a pause; a page with a bad token is refused. Then, on AUTH_URL (a
// relay that lets nobody in without a token): a page without a token is refused, and pages with
// TOKEN publish and watch. Prints one JSON line per step; saves a screenshot of each page.
import path from "node:path";
import puppeteer from "puppeteer-core";

const [url, shots, native, authUrl, token] = process.argv.slice(2);
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

// Counts what the browser's own decoders put out, whoever uses them: VideoFrames and AudioData
// handed to each decoder's output callback.
function countDecoderOutput() {
	window.decoded = { video: 0, audio: 0 };
	for (const [name, kind] of [["VideoDecoder", "video"], ["AudioDecoder", "audio"]]) {
		const Original = window[name];
		if (!Original) continue;
		window[name] = class extends Original {
			constructor(init) {
				super({
					...init,
					output: (data) => {
						window.decoded[kind] += 1;
						init.output(data);
					},
				});
			}
		};
	}
}

/** How many distinct colours a sample of `selector`'s canvas pixels has (1 for a blank canvas). */
function colours(page, selector) {
	return page.evaluate((selector) => {
		const canvas = document.querySelector(selector);
		if (!canvas || !canvas.width || !canvas.height) return 0;
		const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
		const seen = new Set();
		const step = Math.max(1, Math.floor(data.length / 4 / 4096)) * 4;
		for (let i = 0; i < data.length; i += step) seen.add(data.slice(i, i + 4).join());
		return seen.size;
	}, selector);
}

async function open(name, at = url) {
	const page = await browser.newPage();
	await page.evaluateOnNewDocument(countDecoderOutput);
	await page.setViewport({ width: 1280, height: 900 });
	page.on("console", (message) => {
		if (message.type() === "error" || message.type() === "warn") console.error(`[${name} ${message.type()}] ${message.text()}`);
	});
	page.on("pageerror", (error) => console.error(`[${name} error] ${error}`));
	await page.goto(at);
	await page.waitForFunction(() => window.relayPage?.connected === true, { timeout: 30000 });
	return page;
}

/** Opens a page at `at` and waits (at most 30 s) until its relay has refused a connection more
 * than before: how many more, and whether the page says it is connected. */
async function refusedPage(at) {
	const refused = async () => {
		const metrics = await (await fetch(new URL("/metrics", at))).text();
		return Number(metrics.match(/^moq_relay_refused_total (\d+)$/m)?.[1] ?? 0);
	};
	const before = await refused();
	const page = await browser.newPage();
	await page.goto(at);
	const deadline = Date.now() + 30000;
	while ((await refused()) === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
	const connected = await page.evaluate(() => window.relayPage?.connected);
	await page.close();
	return { refused: (await refused()) - before, connected };
}

/** Publishes the fake camera and microphone from `page` under `name`. */
async function publishCamera(page, name) {
	await page.type("#publish-path", name);
	await page.click("#publish-button");
	await page.waitForFunction((p) => window.relayPage.broadcasts.has(p), { timeout: 30000 }, name);
}

/** Watches `name` from `page` (it must be listed) until the decoders put out `frames` video frames
 * and the player has shown as many. */
async function watchCamera(page, name, frames) {
	await page.waitForFunction((p) => window.relayPage.broadcasts.get(p)?.tracks?.length > 0, { timeout: 30000 }, name);
	await page.click(`#broadcasts li[data-path="${name}"] button`);
	await page.waitForFunction(
		(n) => window.decoded.video >= n && (window.relayPage.playback()?.shown ?? 0) >= n,
		{ timeout: 60000 },
		frames,
	);
}

try {
	// The publisher: type a path, press Publish (the camera and microphone are Chromium's fakes).
	const publisher = await open("publisher");
	await publishCamera(publisher, PUBLISHED);
	emit({ step: "published", path: PUBLISHED });

	// The viewer: the broadcast is in the list (with its catalog's format and tracks), the
	// decoders put out video frames and the player shows them on its canvas; with the sound on,
	// the audio is fetched and decoded too.
	const viewer = await open("viewer");
	await watchCamera(viewer, PUBLISHED, 30);
	const listed = await viewer.evaluate((p) => window.relayPage.broadcasts.get(p), PUBLISHED);
	const video = await viewer.evaluate(() => ({ ...window.decoded, ...window.relayPage.playback() }));
	const picture = await colours(viewer, "#player canvas");
	await viewer.click("#watch-sound");
	await viewer
		.waitForFunction(() => window.decoded.audio >= 20, { timeout: 30000 })
		.catch(async (error) => {
			const seen = await viewer.evaluate(() =>
				JSON.stringify({ decoded: window.decoded, playback: window.relayPage.playback(), muted: window.relayPage.watching.muted, listed: [...window.relayPage.broadcasts], format: window.relayPage.watching.getAttribute("catalog-format"), paused: window.relayPage.watching.backend.paused.peek(), ctx: window.relayPage.watching.backend.audio.context.peek()?.state }),
			);
			throw new Error(`no audio decoded: ${seen}: ${error}`);
		});
	const sound = await viewer.evaluate(() => ({ ...window.decoded, ...window.relayPage.playback() }));
	emit({
		step: "watched",
		path: PUBLISHED,
		format: listed.format,
		tracks: listed.tracks,
		decoded: video.video,
		shown: video.shown,
		colours: picture,
		audio_decoded: sound.audio,
		audio_bytes: sound.audioBytes,
	});

	// The plots show the traffic: their latest figures, and a line drawn over their history.
	await viewer.waitForFunction(
		() => {
			const { figures, history } = window.relayPage;
			return figures.groups > 0 && figures.bytes_out > 0 && figures.cache > 0 && history.groups.length >= 3;
		},
		{ timeout: 15000 },
	);
	emit({
		step: "figures",
		figures: await viewer.evaluate(() => window.relayPage.figures),
		samples: await viewer.evaluate(() => window.relayPage.history.groups.length),
		drawn: await colours(viewer, '[data-figure="groups"] canvas'),
	});

	// An MSF catalog (no suffix on the name: the page finds the format by asking): its tracks are
	// listed with their roles.
	await viewer.evaluate(async () => {
		const { net } = window.relayPage;
		const connection = await window.relayPage.connect();
		const broadcast = new net.Broadcast();
		connection.publish(net.Path.from("page/msf-only"), broadcast);
		(async () => {
			for (;;) {
				const request = await broadcast.requested();
				if (!request) return;
				if (request.track.name !== "catalog") {
					request.track.close(new Error("not found"));
					continue;
				}
				request.track.writeJson({
					version: "draft-01",
					tracks: [
						{ name: "video0", packaging: "loc", role: "video", codec: "avc1.42e01f", isLive: true },
						{ name: "audio0", packaging: "loc", role: "audio", codec: "opus", isLive: true },
					],
				});
			}
		})();
		window.msfPublished = { connection, broadcast };
	});
	await viewer.waitForFunction(() => window.relayPage.broadcasts.get("page/msf-only")?.tracks?.length > 0, {
		timeout: 30000,
	});
	emit({ step: "msf", ...(await viewer.evaluate(() => window.relayPage.broadcasts.get("page/msf-only"))) });

	// The native publisher is listed, and its frames read as text in the plain track view.
	await viewer.waitForFunction((p) => window.relayPage.broadcasts.has(p), { timeout: 30000 }, native);
	await viewer.click(`#broadcasts li[data-path="${native}"] button:last-child`);
	await viewer.waitForFunction(() => window.relayPage.frames.length >= 3, { timeout: 30000 });
	emit({ step: "native", path: native, frames: await viewer.evaluate(() => window.relayPage.frames) });

	// Watching again after a pause: the viewer turns to another broadcast, the publisher's video
	// encoders stop once the relay has cancelled its subscription, and the camera is watched
	// again: a new upstream subscription, whose groups @moq/publish numbers from 0 again.
	await viewer.click(`#broadcasts li[data-path="${native}"] button`);
	// Polled on a timer: the publisher's page is in the background now, where Chromium runs no
	// animation frames, so puppeteer's default (once, then on every frame) saw the encoders stop
	// only if they had stopped before its first look (under load, 1 run in 6 timed out with both
	// encoders long stopped).
	try {
		await publisher.waitForFunction(
			() => {
				const { hd, sd } = window.relayPage.publishing.broadcast.video;
				return !hd.active.peek() && !sd.active.peek();
			},
			{ timeout: 30000, polling: 100 },
		);
	} catch (error) {
		// What was still served, and what the relay held, for whoever reads the failure.
		const active = await publisher.evaluate(() => {
			const { hd, sd } = window.relayPage.publishing.broadcast.video;
			return { hd: hd.active.peek(), sd: sd.active.peek() };
		});
		const metrics = await (await fetch(new URL("/metrics", url))).text();
		throw new Error(`${error}: encoders still active ${JSON.stringify(active)}; relay metrics:\n${metrics}`);
	}
	const before = await viewer.evaluate(() => window.decoded.video);
	await viewer.click(`#broadcasts li[data-path="${PUBLISHED}"] button`);
	await viewer.waitForFunction(
		(n) => window.decoded.video >= n && (window.relayPage.playback()?.shown ?? 0) >= 30,
		{ timeout: 30000 },
		before + 30,
	);
	emit({
		step: "rewatched",
		decoded: (await viewer.evaluate(() => window.decoded.video)) - before,
		shown: await viewer.evaluate(() => window.relayPage.playback().shown),
	});

	// A token on the page's URL goes with its connections: this relay refuses a bad one (even
	// though it lets anonymous clients in), and the page stays disconnected.
	const bad = await refusedPage(`${url}?jwt=not-a-token`);
	emit({ step: "token", ...bad });

	// A relay that lets nobody in without a token: the page without one stays disconnected, and
	// pages given one with ?jwt= publish and watch.
	const anonymous = await refusedPage(authUrl);
	const withToken = `${authUrl}?jwt=${token}`;
	const authPublisher = await open("token publisher", withToken);
	await publishCamera(authPublisher, "auth/cam");
	const authViewer = await open("token viewer", withToken);
	await watchCamera(authViewer, "auth/cam", 10);
	emit({
		step: "auth",
		anonymous_refused: anonymous.refused,
		anonymous_connected: anonymous.connected,
		decoded: await authViewer.evaluate(() => window.decoded.video),
	});
	await authViewer.close();
	await authPublisher.close();

	await publisher.screenshot({ path: path.join(shots, "page-publish.png") });
	await viewer.screenshot({ path: path.join(shots, "page-watch.png") });
	emit({ step: "screenshots", dir: shots });
} catch (error) {
	emit({ error: String(error?.stack ?? error) });
	process.exitCode = 1;
} finally {
	await browser.close();
}
