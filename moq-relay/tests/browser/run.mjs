// Drives headless Chromium for moq-relay's browser tests (../browser.rs): bundles page.js with
// esbuild, serves it on 127.0.0.1, opens it, and runs the scenarios against the relay given as
// `node run.mjs https://127.0.0.1:PORT/ FINGERPRINT`. Prints one JSON line per scenario; after
// the last (a browser publisher for a native viewer) it waits for "stop" on stdin.
//
// `node run.mjs http://127.0.0.1:PORT/ - websocket` runs the WebSocket scenarios instead: the page
// has no WebTransport (removed before any script runs), so `@moq/net` connects over QMux on a
// WebSocket to the relay's TCP port.
import http from "node:http";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import puppeteer from "puppeteer-core";

const [relay, fingerprint, mode] = process.argv.slice(2);
const websocket = mode === "websocket";
const dir = path.dirname(fileURLToPath(import.meta.url));
const emit = (line) => console.log(JSON.stringify(line));

const bundle = await esbuild.build({
	entryPoints: [path.join(dir, "page.js")],
	bundle: true,
	format: "esm",
	target: "chrome120",
	write: false,
	logLevel: "error",
});
const script = bundle.outputFiles[0].text;
const html = '<!doctype html><meta charset="utf-8"><title>moq-relay browser test</title><script type="module" src="/page.js"></script>';
const server = http.createServer((request, response) => {
	const js = request.url === "/page.js";
	response.writeHead(200, { "content-type": js ? "text/javascript" : "text/html" });
	response.end(js ? script : html);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));

const browser = await puppeteer.launch({
	executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
	headless: true,
	args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
	const page = await browser.newPage();
	page.on("console", async (message) => {
		// Errors are handles: say what they hold.
		const args = await Promise.all(
			message.args().map((arg) => arg.evaluate((v) => (v instanceof Error ? `${v.name}: ${v.message}` : String(v))).catch(() => "?")),
		);
		console.error(`[page ${message.type()}] ${args.join(" ")}`);
	});
	page.on("pageerror", (error) => console.error(`[page error] ${error}`));
	if (websocket) {
		await page.evaluateOnNewDocument(() => {
			delete window.WebTransport;
		});
	}
	await page.goto(`http://127.0.0.1:${server.address().port}/`);
	await page.waitForFunction(() => window.moq !== undefined);

	if (websocket) {
		emit({ scenario: "no-webtransport", ...(await page.evaluate(() => ({ webtransport: typeof WebTransport }))) });
		emit({ scenario: "browser-to-browser", ...(await page.evaluate((u) => window.moq.browserToBrowser(u, "", 30), relay)) });
		emit({ scenario: "native-to-browser", ...(await page.evaluate((u) => window.moq.watchNative(u, "", "native", 30), relay)) });
		emit({ scenario: "browser-to-native", ...(await page.evaluate((u) => window.moq.publishForNative(u, "", "web"), relay)) });
	} else {
		await webTransportScenarios(page);
	}
	for await (const line of readline.createInterface({ input: process.stdin })) {
		if (line.trim() === "stop") break;
	}
	await page.evaluate(() => window.moq.stop());
} catch (error) {
	emit({ error: String(error?.stack ?? error) });
	process.exitCode = 1;
} finally {
	await browser.close();
	server.close();
}

async function webTransportScenarios(page) {
	emit({ scenario: "browser-to-browser", ...(await page.evaluate((u, f) => window.moq.browserToBrowser(u, f, 30), relay, fingerprint)) });
	emit({ scenario: "native-to-browser", ...(await page.evaluate((u, f) => window.moq.watchNative(u, f, "native", 30), relay, fingerprint)) });
	emit({ scenario: "moq-clock-to-browser", ...(await page.evaluate((u, f) => window.moq.watchClock(u, f, "clock", 3), relay, fingerprint)) });
	emit({ scenario: "native-to-lite04", ...(await page.evaluate((u, f) => window.moq.watchNative04(u, f, "native", 40), relay, fingerprint)) });
	emit({ scenario: "browser-to-native", ...(await page.evaluate((u, f) => window.moq.publishForNative(u, f, "web", "web04"), relay, fingerprint)) });
}
