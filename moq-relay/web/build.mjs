// Builds the relay's page script into dist/app.js, which the relay embeds in its binary (with
// src/index.html as it is): `npm ci && node build.mjs`. `node build.mjs --check` builds in memory and fails if
// dist/ differs from what it would write (CI runs it, so the committed bundle is always this
// source with the locked packages).
import { readFile, writeFile, mkdir } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const dir = path.dirname(fileURLToPath(import.meta.url));
const check = process.argv.includes("--check");

const bundle = await esbuild.build({
	entryPoints: [path.join(dir, "src/main.js")],
	bundle: true,
	format: "esm",
	target: "chrome120",
	minify: true,
	legalComments: "eof",
	write: false,
	logLevel: "error",
});
const script = bundle.outputFiles[0].text;
const target = path.join(dir, "dist/app.js");
if (check) {
	const committed = await readFile(target, "utf8").catch(() => undefined);
	if (committed !== script) {
		console.error("moq-relay/web/dist/app.js is not what build.mjs builds: run `npm ci && node build.mjs` in moq-relay/web and commit it");
		process.exit(1);
	}
} else {
	await mkdir(path.dirname(target), { recursive: true });
	await writeFile(target, script);
}
