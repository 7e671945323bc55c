// The browser side of moq-relay's browser tests (../browser.rs), bundled by run.mjs with esbuild:
// the unmodified public @moq/net client, driven through `window.moq`.
import { Broadcast, Connection, Path } from "@moq/net";
import * as Lite from "@moq/lite";

// Connects over WebTransport, pinning the relay's certificate by its SHA-256 (hex). No WebSocket
// fallback: the relay serves WebTransport, and a race with a fallback would make runs differ.
// In the WebSocket runs (`run.mjs ... websocket`) the page has no WebTransport at all, and the
// client is called as an application would call it, with no options: it finds WebSocket alone.
async function connect(url, fingerprint) {
	if (typeof WebTransport === "undefined") {
		return await Connection.connect(new URL(url));
	}
	return await Connection.connect(new URL(url), {
		webtransport: { serverCertificateHashes: [{ algorithm: "sha-256", value: fingerprint }] },
		websocket: { enabled: false },
	});
}

// Publishes broadcast `name` with track "seq": a group of one frame (its sequence, as text)
// every `interval` ms, until `stop`.
function publish(conn, name, interval) {
	const broadcast = new Broadcast.Producer();
	const track = broadcast.createTrack("seq");
	conn.publish(Path.from(name), broadcast);
	const timer = setInterval(() => {
		const group = track.appendGroup();
		group.writeString(String(group.sequence));
		group.close();
	}, interval);
	return {
		stop() {
			clearInterval(timer);
			broadcast.close();
		},
	};
}

// Publishes broadcast `name` with track "seconds" in the clock format `moq-clock subscribe`
// reads: one group, its first frame a "YYYY-MM-DD HH:MM:" prefix, then a frame "00", "01", ...
// every `interval` ms (a fast clock).
function publishClock(conn, name, interval) {
	const broadcast = new Broadcast.Producer();
	const track = broadcast.createTrack("seconds");
	conn.publish(Path.from(name), broadcast);
	const group = track.appendGroup();
	group.writeString("2026-12-01 18:10:");
	let second = 0;
	const timer = setInterval(() => {
		group.writeString(String(second % 60).padStart(2, "0"));
		second += 1;
	}, interval);
	return {
		stop() {
			clearInterval(timer);
			group.close();
			broadcast.close();
		},
	};
}

// Waits for broadcast `name` to be announced, then reads `count` groups of its track "seq":
// [sequence, first frame as text, when recvGroup returned it (ms)] each.
async function watch(conn, name, count) {
	const announced = conn.announced(Path.empty());
	for (;;) {
		const event = await announced.next();
		if (!event) throw new Error("announcements ended before " + name);
		if (event.path === name && event.active) break;
	}
	announced.close();
	// Ordered: the relay then sends older groups first, so they arrive in sequence (unordered,
	// newer ones go first, and two groups in flight at the start may arrive newest first).
	const subscriber = conn.consume(Path.from(name)).subscribe("seq", { ordered: true });
	const got = [];
	while (got.length < count) {
		const group = await subscriber.recvGroup();
		if (!group) throw new Error("the track ended after " + got.length + " groups");
		const arrived = performance.now();
		got.push([group.sequence, await group.readString(), arrived]);
	}
	subscriber.close();
	return got;
}

// The older public client, `@moq/lite` 0.2.2: it offers moq-lite-04 and -03 only (no 05).
const lite04 = {
	async connect(url, fingerprint) {
		const hash = new Uint8Array(fingerprint.match(/../g).map((byte) => parseInt(byte, 16)));
		return await Lite.Connection.connect(new URL(url), {
			webtransport: { serverCertificateHashes: [{ algorithm: "sha-256", value: hash }] },
			websocket: { enabled: false },
		});
	},
	// Serves broadcast `name`: each track asked for gets a group of one frame (its sequence, as
	// text) every `interval` ms.
	publish(conn, name, interval) {
		const broadcast = new Lite.Broadcast();
		conn.publish(Lite.Path.from(name), broadcast);
		const timers = [];
		(async () => {
			for (;;) {
				const request = await broadcast.requested();
				if (!request) return;
				timers.push(
					setInterval(() => {
						const group = request.track.appendGroup();
						group.writeString(String(group.sequence));
						group.close();
					}, interval),
				);
			}
		})();
		return {
			stop() {
				for (const timer of timers) clearInterval(timer);
				broadcast.close();
			},
		};
	},
	async watch(conn, name, count) {
		const announced = conn.announced(Lite.Path.empty());
		for (;;) {
			const entry = await announced.next();
			if (!entry) throw new Error("announcements ended before " + name);
			if (entry.path === name && entry.active) break;
		}
		announced.close();
		const track = conn.consume(Lite.Path.from(name)).subscribe("seq", 0);
		const got = [];
		while (got.length < count) {
			const group = await track.recvGroup();
			if (!group) throw new Error("the track ended after " + got.length + " groups");
			const arrived = performance.now();
			got.push([group.sequence, await group.readString(), arrived]);
		}
		track.close();
		return got;
	},
};

window.moq = {
	// A browser publisher and a browser viewer, on two connections through the relay.
	async browserToBrowser(url, fingerprint, count) {
		const publisher = await connect(url, fingerprint);
		const viewer = await connect(url, fingerprint);
		const running = publish(publisher, "web-b2b", 20);
		try {
			return { version: publisher.version, got: await watch(viewer, "web-b2b", count) };
		} finally {
			running.stop();
			publisher.close();
			viewer.close();
		}
	},
	// A browser viewer of a native publisher's broadcast.
	async watchNative(url, fingerprint, name, count) {
		const viewer = await connect(url, fingerprint);
		try {
			return { version: viewer.version, got: await watch(viewer, name, count) };
		} finally {
			viewer.close();
		}
	},
	// Browser publishers for a native viewer, `@moq/net` (as `name`) and, given `name04`,
	// `@moq/lite` on moq-lite-04; they run until `stop`.
	async publishForNative(url, fingerprint, name, name04) {
		const publisher = await connect(url, fingerprint);
		const running = publish(publisher, name, 20);
		const publisher04 = name04 ? await lite04.connect(url, fingerprint) : undefined;
		const running04 = publisher04 ? lite04.publish(publisher04, name04, 20) : undefined;
		const clock = publishClock(publisher, "webclock", 100);
		this.stop = () => {
			clock.stop();
			running.stop();
			publisher.close();
			running04?.stop();
			publisher04?.close();
		};
		return { version: publisher.version, version04: publisher04?.version };
	},
	// A viewer of `moq-clock publish`: the first `count` frames of its track "seconds" (the
	// clock format: a group per minute, its first frame the "YYYY-MM-DD HH:MM:" prefix, then a
	// frame per second, "SS").
	async watchClock(url, fingerprint, name, count) {
		const viewer = await connect(url, fingerprint);
		try {
			const announced = viewer.announced(Path.empty());
			for (;;) {
				const event = await announced.next();
				if (!event) throw new Error("announcements ended before " + name);
				if (event.path === name && event.active) break;
			}
			announced.close();
			const subscriber = viewer.consume(Path.from(name)).subscribe("seconds");
			const group = await subscriber.recvGroup();
			if (!group) throw new Error("the clock track ended");
			const frames = [];
			while (frames.length < count) {
				const frame = await group.readString();
				if (frame === undefined) throw new Error("the minute's group ended");
				frames.push(frame);
			}
			subscriber.close();
			return { version: viewer.version, frames };
		} finally {
			viewer.close();
		}
	},
	// A `@moq/lite` (moq-lite-04) viewer of a native publisher's broadcast.
	async watchNative04(url, fingerprint, name, count) {
		const viewer = await lite04.connect(url, fingerprint);
		try {
			return { version: viewer.version, got: await lite04.watch(viewer, name, count) };
		} finally {
			viewer.close();
		}
	},
};
