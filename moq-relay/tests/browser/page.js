// The browser side of moq-relay's browser tests (../browser.rs), bundled by run.mjs with esbuild:
// the unmodified public @moq/net client, driven through `window.moq`.
import { Broadcast, Connection, Path } from "@moq/net";

// Connects over WebTransport, pinning the relay's certificate by its SHA-256 (hex). No WebSocket
// fallback: the relay serves WebTransport, and a race with a fallback would make runs differ.
async function connect(url, fingerprint) {
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

// Waits for broadcast `name` to be announced, then reads `count` groups of its track "seq":
// [sequence, first frame as text] each.
async function watch(conn, name, count) {
	const announced = conn.announced(Path.empty());
	for (;;) {
		const event = await announced.next();
		if (!event) throw new Error("announcements ended before " + name);
		if (event.path === name && event.active) break;
	}
	announced.close();
	const subscriber = conn.consume(Path.from(name)).subscribe("seq");
	const got = [];
	while (got.length < count) {
		const group = await subscriber.recvGroup();
		if (!group) throw new Error("the track ended after " + got.length + " groups");
		got.push([group.sequence, await group.readString()]);
	}
	subscriber.close();
	return got;
}

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
	// A browser publisher for a native viewer; it runs until `stop`.
	async publishForNative(url, fingerprint, name) {
		const publisher = await connect(url, fingerprint);
		const running = publish(publisher, name, 20);
		this.stop = () => {
			running.stop();
			publisher.close();
		};
		return { version: publisher.version };
	},
};
