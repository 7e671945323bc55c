// Builds the relay's page into dist/ (index.html and app.js), which the relay embeds in its
// binary: `npm ci && node build.mjs`. `node build.mjs --check` builds in memory and fails if
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
const outputs = {
	"app.js": bundle.outputFiles[0].text,
	"index.html": await readFile(path.join(dir, "src/index.html"), "utf8"),
};

let stale = [];
for (const [name, text] of Object.entries(outputs)) {
	const target = path.join(dir, "dist", name);
	if (check) {
		const committed = await readFile(target, "utf8").catch(() => undefined);
		if (committed !== text) stale.push(name);
	} else {
		await mkdir(path.dirname(target), { recursive: true });
		await writeFile(target, text);
	}
}
if (stale.length > 0) {
	console.error(`moq-relay/web/dist is not what build.mjs builds (${stale.join(", ")}): run \`npm ci && node build.mjs\` in moq-relay/web and commit dist/`);
	process.exit(1);
}
