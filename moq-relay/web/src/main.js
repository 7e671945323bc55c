// The relay's own page: its live figures, the broadcasts it carries, a player, a plain track
// reader and a camera publisher. Served by the relay at / and connected back to it over
// WebTransport: from an http:// page the client fetches /certificate.sha256 and pins it. A
// `?jwt=` on the page's URL is passed on to every connection.
import "@moq/watch/element";
import "@moq/publish/element";
import * as Catalog from "@moq/hang/catalog";
import * as Msf from "@moq/msf";
import * as Moq from "@moq/net";

const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.search).get("jwt");

// What the page shows, for tests and the curious (`relayPage` in the console).
const state = {
	connected: false,
	broadcasts: new Map(), // path -> { format: "hang" | "hangz" | "msf" | undefined, tracks: string[] | undefined }
	figures: {}, // key -> latest value
	history: {}, // key -> the plotted samples, oldest first
	frames: [], // the last frames read by the track reader, as text
	watching: undefined, // the <moq-watch> element
	shown: 0, // video frames the player has shown (decoded, then presented)
	publishing: undefined, // the <moq-publish> element
	net: Moq, // the client library, for tests that publish from the page
	connect: () => connect(),
};
window.relayPage = state;

/**
 * The relay's URL for the moq clients, with the page's token. A page opened at `localhost`
 * reaches the relay at the address its own request did (the relay writes it in the page):
 * Chromium may try `::1` for WebTransport where HTTP fell back to `127.0.0.1`, and a relay
 * listening on one of them only would never answer.
 */
function relayUrl() {
	const url = new URL("/", location.href);
	const address = document.querySelector('meta[name="moq-relay-address"]')?.content;
	if (address && location.hostname === "localhost") url.hostname = address.includes(":") ? `[${address}]` : address;
	if (token) url.searchParams.set("jwt", token);
	return url;
}

/** Connects once, without the WebSocket fallback (the relay serves WebTransport only). */
function connect() {
	return Moq.Connection.connect(relayUrl(), { websocket: { enabled: false } });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// --- The relay's figures: /metrics every second, a minute of each as a small plot ---

const FIGURES = [
	{ key: "sessions", title: "sessions", metric: "moq_relay_sessions" },
	{ key: "broadcasts", title: "broadcasts", metric: "moq_relay_broadcasts" },
	{ key: "groups", title: "groups/s out", metric: "moq_relay_groups_out_total", rate: true },
	{ key: "bytes_out", title: "bytes/s out", metric: "moq_relay_bytes_out_total", rate: true },
	{ key: "bytes_in", title: "bytes/s in", metric: "moq_relay_bytes_in_total", rate: true },
	{ key: "cache", title: "cache bytes", metric: "moq_relay_cache_bytes" },
];
const HISTORY = 60;

function compact(value) {
	if (value >= 1e9) return `${(value / 1e9).toFixed(1)} G`;
	if (value >= 1e6) return `${(value / 1e6).toFixed(1)} M`;
	if (value >= 1e4) return `${(value / 1e3).toFixed(1)} k`;
	return String(Math.round(value));
}

function plot(figure) {
	const canvas = figure.canvas;
	const width = (canvas.width = canvas.clientWidth * devicePixelRatio);
	const height = (canvas.height = canvas.clientHeight * devicePixelRatio);
	const context = canvas.getContext("2d");
	context.clearRect(0, 0, width, height);
	const points = figure.history;
	if (points.length < 2) return;
	const max = Math.max(1, ...points);
	context.strokeStyle = "#2a7ae2";
	context.lineWidth = 2 * devicePixelRatio;
	context.beginPath();
	// The newest sample at the right edge, a minute of them across.
	points.forEach((value, i) => {
		const x = width - ((points.length - 1 - i) / (HISTORY - 1)) * width;
		const y = height - (value / max) * (height - 4) - 2;
		if (i === 0) context.moveTo(x, y);
		else context.lineTo(x, y);
	});
	context.stroke();
}

async function figures() {
	const plots = $("plots");
	for (const figure of FIGURES) {
		const box = document.createElement("div");
		box.className = "plot";
		box.dataset.figure = figure.key;
		box.innerHTML = `<span>${figure.title}</span> <b>–</b><canvas></canvas>`;
		plots.append(box);
		figure.value = box.querySelector("b");
		figure.canvas = box.querySelector("canvas");
		figure.history = [];
		state.history[figure.key] = figure.history;
	}
	let previous;
	for (;;) {
		try {
			const text = await (await fetch("/metrics", { cache: "no-store" })).text();
			const now = performance.now();
			const values = {};
			for (const line of text.split("\n")) {
				const [name, value] = line.split(" ");
				if (name && !name.startsWith("#") && !name.includes("{")) values[name] = Number(value);
			}
			for (const figure of FIGURES) {
				const raw = values[figure.metric];
				if (raw === undefined) continue;
				let value = raw;
				if (figure.rate) {
					if (!previous) continue;
					value = Math.max(0, (raw - previous.values[figure.metric]) / ((now - previous.at) / 1000));
				}
				state.figures[figure.key] = value;
				figure.value.textContent = compact(value);
				figure.history.push(value);
				if (figure.history.length > HISTORY) figure.history.shift();
				plot(figure);
			}
			previous = { at: now, values };
		} catch (error) {
			console.warn("metrics:", error);
		}
		await sleep(1000);
	}
}

// --- Broadcasts: the relay's announcements, each with the tracks its catalog names ---

// The catalogs the public publishers produce: hang's `catalog.json` (snapshots and merge-patch
// deltas), its DEFLATE-compressed sibling `catalog.json.z`, and MSF's `catalog`. A name's suffix
// (`.hang`, `.msf`) says which; otherwise each is asked for and the first to answer is the one.
const hang = (compression) => (track) => {
	const consumer = new Catalog.Consumer(track, { compression });
	return () => consumer.next().then((root) => root && hangNames(root));
};
const FORMATS = {
	hang: hang(false),
	hangz: hang(true),
	msf: (track) => () => Msf.fetch(track).then((catalog) => catalog && msfNames(catalog)),
};
const FORMAT_TRACKS = { hang: Catalog.TRACK, hangz: Catalog.TRACK_COMPRESSED, msf: "catalog" };

/** Track names of a hang catalog, each with its kind. */
function hangNames(root) {
	const names = [];
	for (const kind of ["video", "audio"]) {
		for (const name of Object.keys(root?.[kind]?.renditions ?? {})) names.push(`${name} (${kind})`);
	}
	return names;
}

/** Track names of an MSF catalog, each with its role. */
function msfNames(catalog) {
	return catalog.tracks.map((track) => (track.role ? `${track.name} (${track.role})` : track.name));
}

/** Follows the broadcast's catalog, if it has one, keeping `info` (its format and track list)
 * current until the broadcast or the connection ends. */
async function followCatalog(connection, path, info) {
	const broadcast = connection.consume(Moq.Path.from(path));
	const named = Catalog.detectFormat(path);
	const formats = named ? [named] : Object.keys(FORMATS);
	const tracks = [];
	try {
		for (const format of formats) tracks.push(broadcast.subscribe(FORMAT_TRACKS[format], 0));
		const readers = formats.map((format, i) => FORMATS[format](tracks[i]));
		// The first format whose catalog arrives; the tracks of the others are refused, end
		// without a frame (a relay that said SUBSCRIBE_OK before it asked upstream), or stay silent.
		const arrived = (read, i) =>
			read().then((names) => (names ? [i, names] : Promise.reject(new Error("ended without a catalog"))));
		const first = await Promise.any(readers.map(arrived));
		const [winner, names] = first;
		formats.forEach((_, i) => i !== winner && tracks[i].close());
		info.format = formats[winner];
		for (let next = names; next && state.broadcasts.get(path) === info; next = await readers[winner]()) {
			info.tracks = next;
			renderBroadcasts();
		}
	} catch {
		// No catalog in any format: a plain broadcast (its tracks can be read by name below).
	} finally {
		for (const track of tracks) track.close();
		broadcast.close();
	}
}

function renderBroadcasts() {
	const list = $("broadcasts");
	list.replaceChildren();
	for (const [path, info] of [...state.broadcasts].sort(([a], [b]) => a.localeCompare(b))) {
		const item = document.createElement("li");
		item.dataset.path = path;
		const name = document.createElement("code");
		name.textContent = path;
		const tracks = document.createElement("span");
		tracks.className = "tracks";
		tracks.textContent =
			info.tracks === undefined ? "no catalog" : `${info.format}: ${info.tracks.join(", ") || "no tracks"}`;
		const watch = document.createElement("button");
		watch.textContent = "watch";
		watch.onclick = () => startWatching(path);
		const frames = document.createElement("button");
		frames.textContent = "frames";
		frames.onclick = () => {
			$("track-broadcast").value = path;
			$("track-form").requestSubmit();
		};
		item.append(name, tracks, watch, frames);
		list.append(item);
	}
	$("no-broadcasts").hidden = state.broadcasts.size > 0;
}

async function broadcasts() {
	for (;;) {
		try {
			const connection = await connect();
			state.connected = true;
			$("status").textContent = "connected";
			$("status").className = "up";
			const announced = connection.announced(Moq.Path.empty());
			for (;;) {
				const entry = await announced.next();
				if (!entry) break;
				const path = String(entry.path);
				if (entry.active) {
					const info = { format: undefined, tracks: undefined };
					state.broadcasts.set(path, info);
					followCatalog(connection, path, info);
				} else {
					state.broadcasts.delete(path);
				}
				renderBroadcasts();
			}
			connection.close();
		} catch (error) {
			console.warn("announcements:", error);
		}
		state.connected = false;
		state.broadcasts.clear();
		renderBroadcasts();
		$("status").textContent = "reconnecting…";
		$("status").className = "";
		await sleep(2000);
	}
}

// --- The player: the public <moq-watch> element ---

let unwatch;
function startWatching(path) {
	unwatch?.();
	const watch = document.createElement("moq-watch");
	watch.setAttribute("url", relayUrl().toString());
	watch.setAttribute("name", path);
	const format = state.broadcasts.get(path)?.format;
	if (format) watch.setAttribute("catalog-format", format);
	// Sound off until asked for: a muted player does not fetch the audio at all.
	if (!$("watch-sound").checked) watch.setAttribute("muted", "");
	watch.setAttribute("visible", "always");
	const canvas = document.createElement("canvas");
	canvas.className = "video";
	watch.append(canvas);
	$("player").replaceChildren(watch);
	$("watch-name").textContent = path;
	state.watching = watch;
	// A frame is shown when the player presents one with a new timestamp.
	state.shown = 0;
	unwatch = watch.backend.video.timestamp.subscribe((timestamp) => {
		if (timestamp !== undefined) state.shown += 1;
	});
}

$("watch-sound").addEventListener("change", () => {
	if (state.watching) state.watching.muted = !$("watch-sound").checked;
});

/** What the player has received and shown. */
function playback() {
	const backend = state.watching?.backend;
	if (!backend) return undefined;
	return {
		shown: state.shown,
		videoBytes: backend.video.stats.peek()?.bytesReceived ?? 0,
		audioBytes: backend.audio.stats.peek()?.bytesReceived ?? 0,
	};
}
state.playback = playback;

setInterval(() => {
	const seen = playback();
	$("watch-stats").textContent = seen
		? `${seen.shown} frames shown · video ${compact(seen.videoBytes)}B · audio ${compact(seen.audioBytes)}B received`
		: "";
}, 1000);

// --- The plain track reader: frames as text ---

let reading;
$("track-form").addEventListener("submit", async (event) => {
	event.preventDefault();
	reading?.abort();
	const controller = new AbortController();
	reading = controller;
	const path = $("track-broadcast").value.trim();
	const name = $("track-name").value.trim();
	state.frames = [];
	$("frames").textContent = `waiting for ${path} / ${name}…`;
	try {
		const connection = await connect();
		controller.signal.addEventListener("abort", () => connection.close());
		const track = connection.consume(Moq.Path.from(path)).subscribe(name, 0);
		for (;;) {
			const frame = await track.readFrame();
			if (!frame || controller.signal.aborted) break;
			const text = new TextDecoder().decode(frame);
			const printable = /^[\t\n\r\x20-\x7e\u00a0-\uffff]*$/.test(text);
			state.frames.push(printable ? text : `${frame.length} bytes`);
			if (state.frames.length > 50) state.frames.shift();
			$("frames").textContent = state.frames.join("\n");
		}
	} catch (error) {
		if (!controller.signal.aborted) $("frames").textContent += `\n(${error})`;
	}
});

// --- The publisher: the public <moq-publish> element, the browser's camera and microphone ---

$("publish-form").addEventListener("submit", (event) => {
	event.preventDefault();
	const path = $("publish-path").value.trim();
	if (state.publishing) {
		state.publishing.remove();
		state.publishing = undefined;
		$("publish-button").textContent = "Publish";
		$("publish-status").textContent = "";
		return;
	}
	const publish = document.createElement("moq-publish");
	publish.setAttribute("url", relayUrl().toString());
	publish.setAttribute("name", path);
	publish.setAttribute("source", "camera");
	const preview = document.createElement("video");
	preview.muted = true;
	preview.autoplay = true;
	preview.playsInline = true;
	publish.append(preview);
	$("publisher").replaceChildren(publish);
	state.publishing = publish;
	$("publish-button").textContent = "Stop";
	$("publish-status").textContent = `publishing ${path}`;
});

figures();
broadcasts();
