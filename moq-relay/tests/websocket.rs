//! QMux over WebSocket end to end: native clients over `ws://` on the relay's TCP port beside
//! QUIC ones, the upgrades the relay refuses and why, and hostile WebSocket peers (bad frames,
//! a QMux violation, a reader that never reads, a throttled one), each beside a healthy QUIC pair
//! that must keep receiving.

mod common;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use kio::net::TcpStream;
use moq_client::Url;
use moq_net::model::{Frame, Origin, Subscription, Timestamp, TrackInfo};
use moq_quic::qmux::ws;

const LIMIT: Duration = Duration::from_secs(20);

fn ws_url(relay: &Relay, path: &str) -> Url {
	Url::parse(&format!("ws://127.0.0.1:{}{path}", relay.bound.http.unwrap().port())).unwrap()
}

/// A client over `ws://`, publishing `publish`'s broadcasts or mirroring into `subscribe`.
async fn ws_client(
	relay: &Relay,
	endpoint: &moq_quic::Endpoint,
	url: &Url,
	addr: SocketAddr,
	id: u64,
	publish: Option<&Origin>,
	subscribe: Option<&Origin>,
) -> anyhow::Result<moq_client::Session> {
	connect_client(
		endpoint,
		addr,
		url,
		&relay.verification(),
		id,
		publish.map(Origin::consumer),
		subscribe.map(Origin::producer),
	)
	.await
}

#[test]
fn websocket_and_quic_clients_watch_each_other() {
	let relay = Relay::start(1);
	let http = relay.bound.http.unwrap();
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let url = ws_url(&relay, "/");

		// A publisher over WebSocket, a viewer over QUIC.
		let ws_origin = Origin::new(1);
		let (_ws_broadcast, ws_track, _ws_publication) = local_broadcast(&ws_origin, "from-ws");
		let ws_publisher = within(
			LIMIT,
			"the ws publisher",
			ws_client(&relay, &endpoint, &url, http, 1, Some(&ws_origin), None),
		)
		.await
		.unwrap();
		assert_eq!(ws_publisher.transport(), "websocket");
		assert_eq!(ws_publisher.protocol(), Some("moq-lite-05"));
		assert_eq!(ws_publisher.qmux().unwrap().version(), moq_quic::qmux::Version::Qmux01);
		let quic_viewer_origin = Origin::new(2);
		let _quic_viewer = viewer(&relay, &endpoint, "/", &quic_viewer_origin).await.unwrap();
		let mut cursor = within(LIMIT, "from-ws announced", announced(&quic_viewer_origin, "from-ws"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		ws_track.used().await;
		for sequence in 0..20 {
			publish(&ws_track, sequence);
		}
		let got = within(LIMIT, "ws → quic", take(&mut cursor, 20)).await;
		assert_eq!(got, (0..20).map(|s| (s, s)).collect::<Vec<_>>());

		// A publisher over QUIC, a viewer over WebSocket.
		let quic_origin = Origin::new(3);
		let (_quic_broadcast, quic_track, _quic_publication) = local_broadcast(&quic_origin, "from-quic");
		let _quic_publisher = publisher(&relay, &endpoint, "/", &quic_origin).await.unwrap();
		let ws_viewer_origin = Origin::new(4);
		let _ws_viewer = within(
			LIMIT,
			"the ws viewer",
			ws_client(&relay, &endpoint, &url, http, 4, None, Some(&ws_viewer_origin)),
		)
		.await
		.unwrap();
		let mut cursor = within(LIMIT, "from-quic announced", announced(&ws_viewer_origin, "from-quic"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		quic_track.used().await;
		for sequence in 0..20 {
			publish(&quic_track, sequence);
		}
		let got = within(LIMIT, "quic → ws", take(&mut cursor, 20)).await;
		assert_eq!(got, (0..20).map(|s| (s, s)).collect::<Vec<_>>());

		assert_eq!(
			relay
				.metric("moq_relay_qmux_sessions_total{transport=\"websocket\"}")
				.await,
			2
		);
	});
}

/// Sends `request` on a fresh TCP connection to `addr` and reads the answer's head, a byte at a
/// time (so what follows it, a switched connection's frames, stays in the socket): the
/// connection, and the head.
async fn upgrade(addr: SocketAddr, request: &str) -> (TcpStream, String) {
	let mut stream = TcpStream::connect(addr).await.unwrap();
	stream.write_all(request.as_bytes()).await.unwrap();
	let mut answer = Vec::new();
	let mut byte = [0u8; 1];
	while !answer.ends_with(b"\r\n\r\n") {
		let n = within(LIMIT, "the answer", stream.read(&mut byte)).await.unwrap();
		assert_eq!(
			n,
			1,
			"the relay closed without an answer: {:?}",
			String::from_utf8_lossy(&answer)
		);
		answer.push(byte[0]);
	}
	(stream, String::from_utf8_lossy(&answer).into_owned())
}

/// The head of the answer to `request` on a fresh connection to `addr`.
async fn upgrade_answer(addr: SocketAddr, request: &str) -> String {
	upgrade(addr, request).await.1
}

fn upgrade_request(target: &str, protocols: &str) -> String {
	format!(
		"GET {target} HTTP/1.1\r\nhost: relay\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nsec-websocket-protocol: {protocols}\r\n\r\n"
	)
}

#[test]
fn upgrades_the_relay_cannot_serve_are_answered_with_a_status() {
	let key = b"websocket-test-key-of-32-bytes!!";
	let keys = KeyFile::hs256("websocket", key);
	let auth = moq_relay::auth::AuthConfig {
		key_file: Some(keys.0.clone()),
		anonymous: moq_relay::auth::Anonymous::none(),
	};
	let relay = Relay::start_with(1, auth);
	let http = relay.bound.http.unwrap();
	runtime().block_on(async {
		// Nothing in common: only the legacy format and an application we do not speak.
		let answer = upgrade_answer(http, &upgrade_request("/", "webtransport, qmux-01.moqt-17")).await;
		assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
		// No token, on a relay that lets nobody in without one: as a WebTransport CONNECT would be.
		let answer = upgrade_answer(http, &upgrade_request("/", "qmux-01.moq-lite-05")).await;
		assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
		// With one: switched, to the one we prefer, and the key answered as RFC 6455 says.
		let claims = serde_json::json!({"root": "", "get": [""], "put": [""], "exp": 4_000_000_000u64});
		let token = moq_relay::auth::sign_hs256(&claims, key);
		let answer = upgrade_answer(
			http,
			&upgrade_request(&format!("/?jwt={token}"), "qmux-00.moq-lite-05, qmux-01.moq-lite-05"),
		)
		.await;
		assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
		let lower = answer.to_ascii_lowercase();
		assert!(
			lower.contains("sec-websocket-protocol: qmux-01.moq-lite-05\r\n"),
			"{answer}"
		);
		assert!(
			lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n"),
			"{answer}"
		);
	});
}

/// A WebSocket switched to `qmux-01.moq-lite-05`, the 101 read.
async fn switched(relay: &Relay) -> TcpStream {
	let request = upgrade_request("/", "qmux-01.moq-lite-05");
	let (stream, answer) = upgrade(relay.bound.http.unwrap(), &request).await;
	assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
	stream
}

/// What a WebSocket's server sends until it closes: the close frame's status, and whether a
/// binary message carried a QMux CONNECTION_CLOSE (0x1c) with `code` before it.
async fn close_of(stream: &mut TcpStream) -> (u16, Option<u64>) {
	let mut decoder = ws::Decoder::new(false);
	let mut transport_close = None;
	let mut chunk = vec![0u8; 16 << 10];
	loop {
		while let Some(event) = decoder.next_event().expect("the relay's frames read") {
			match event {
				ws::Event::Message(mut body) => {
					while !body.is_empty() {
						match moq_quic::qmux::frame::decode(&mut body) {
							Ok(moq_quic::qmux::frame::Frame::Close {
								application: false,
								code,
								..
							}) => transport_close = Some(code),
							Ok(_) => {}
							Err(_) => break,
						}
					}
				}
				ws::Event::Close(status) => return (status.unwrap_or(0), transport_close),
				_ => {}
			}
		}
		let room = decoder.room().min(chunk.len());
		let n = within(LIMIT, "the relay's close", stream.read(&mut chunk[..room]))
			.await
			.unwrap();
		assert!(n > 0, "the socket ended without a WebSocket close");
		decoder.push(&chunk[..n]);
	}
}

/// A client frame: FIN, `opcode`, masked with `mask` (none: unmasked, which a server refuses).
fn frame(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
	let mut out = Vec::new();
	ws::encode(opcode, payload, mask, &mut out);
	out
}

#[test]
fn bad_websocket_frames_and_qmux_violations_close_that_connection_only() {
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		healthy.still_receives().await;
		let mask = Some([1, 2, 3, 4]);
		let cases: [(&str, Vec<u8>, u16, Option<u64>); 5] = [
			(
				"an unmasked frame",
				frame(ws::opcode::BINARY, b"x", None),
				ws::status::PROTOCOL_ERROR,
				None,
			),
			(
				"a text message",
				frame(ws::opcode::TEXT, b"hello", mask),
				ws::status::UNSUPPORTED_DATA,
				None,
			),
			(
				"a frame of 2^40 bytes",
				{
					let mut header = vec![0x82, 0xff];
					header.extend_from_slice(&(1u64 << 40).to_be_bytes());
					header.extend_from_slice(&[1, 2, 3, 4]);
					header
				},
				ws::status::TOO_BIG,
				None,
			),
			(
				"a reserved opcode",
				frame(0x3, b"", mask),
				ws::status::PROTOCOL_ERROR,
				None,
			),
			// STREAM (0x0e) before the transport parameters.
			(
				"a stream frame first",
				frame(ws::opcode::BINARY, &[0x0e, 0x00, 0x00, 0x01, b'x'], mask),
				ws::status::NORMAL,
				Some(moq_quic::qmux::code::PROTOCOL_VIOLATION),
			),
		];
		for (what, bytes, status, qmux_code) in cases {
			let mut stream = switched(&relay).await;
			stream.write_all(&bytes).await.unwrap();
			let (got_status, got_code) = close_of(&mut stream).await;
			assert_eq!(got_status, status, "{what}: the WebSocket close status");
			if qmux_code.is_some() {
				assert_eq!(got_code, qmux_code, "{what}: the QMux close");
			}
			healthy.still_receives().await;
		}
		// Every one of them is gone: their slots and memory given back.
		relay.metric_until(LIMIT, "moq_relay_connections", |n| n == 2).await;
	});
}

/// A TCP proxy between a client and the relay that forwards both ways until `paused` is set,
/// then stops reading what the relay sends (the client's way on keeps going): a viewer that
/// stops reading, as the relay sees it. With `rate`, the relay's way carries at most that many
/// bytes per 10 ms instead.
struct Proxy {
	addr: SocketAddr,
	paused: Rc<Cell<bool>>,
}

/// One way of a proxied connection: what was read and not yet written.
#[derive(Default)]
struct Way {
	buf: Vec<u8>,
	len: usize,
	at: usize,
	done: bool,
	/// Reads done.
	reads: u64,
}

impl Way {
	/// Moves what it can from `from` to `to`; whether anything moved.
	fn pump(&mut self, waiter: &kio::Waiter, from: &mut TcpStream, to: &mut TcpStream, read: bool) -> bool {
		let mut moved = false;
		loop {
			if self.at < self.len {
				match to.poll_write(waiter, &self.buf[self.at..self.len]) {
					std::task::Poll::Ready(Ok(n)) => {
						self.at += n;
						moved = true;
						continue;
					}
					std::task::Poll::Ready(Err(_)) => self.done = true,
					std::task::Poll::Pending => {}
				}
				return moved;
			}
			// What the stream staged behind a send in flight goes once that send is done, if
			// something drives it: the flush does (and registers `waiter` for the send's end).
			if let std::task::Poll::Ready(Err(_)) = to.poll_flush(waiter) {
				self.done = true;
			}
			if self.done || !read {
				return moved;
			}
			match from.poll_read(waiter, &mut self.buf) {
				std::task::Poll::Ready(Ok(n)) if n > 0 => {
					(self.len, self.at) = (n, 0);
					self.reads += 1;
					moved = true;
				}
				std::task::Poll::Ready(_) => {
					self.done = true;
					return true;
				}
				std::task::Poll::Pending => return moved,
			}
		}
	}
}

impl Proxy {
	fn start(relay: SocketAddr, rate: Option<usize>) -> Self {
		let listener = kio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
		let addr = listener.local_addr();
		let paused = Rc::new(Cell::new(false));
		let pause = paused.clone();
		let _accept = kio::spawn(async move {
			while let Ok((mut client, _)) = listener.accept().await {
				let mut upstream = TcpStream::connect(relay).await.unwrap();
				let pause = pause.clone();
				let _pump = kio::spawn(async move {
					let mut up = Way {
						buf: vec![0; 16 << 10],
						..Way::default()
					};
					let mut down = Way {
						buf: vec![0; rate.unwrap_or(16 << 10)],
						..Way::default()
					};
					// The relay's way reads once a tick when throttled.
					let mut tick = kio::time::Deadline::new(Some(kio::time::now()));
					kio::wait(|waiter| {
						loop {
							let mut moved = up.pump(waiter, &mut client, &mut upstream, true);
							let due = rate.is_none() || tick.poll_elapsed(waiter).is_ready();
							let reads = down.reads;
							moved |= down.pump(waiter, &mut upstream, &mut client, due && !pause.get());
							if rate.is_some() && down.reads != reads {
								tick.set(Some(kio::time::now() + Duration::from_millis(10)));
							}
							if up.done && down.done {
								return std::task::Poll::Ready(());
							}
							if !moved {
								return std::task::Poll::Pending;
							}
						}
					})
					.await;
				});
			}
		});
		Self { addr, paused }
	}
}

#[test]
fn a_websocket_viewer_that_stops_reading_holds_a_bounded_queue() {
	let relay = Relay::start(1);
	let http = relay.bound.http.unwrap();
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		// A second broadcast, of large groups, for the viewer that will stop reading.
		let origin = Origin::new(5);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "large");
		let _publisher = publisher(&relay, &endpoint, "/", &origin).await.unwrap();
		let proxy = Proxy::start(http, None);
		let viewer_origin = Origin::new(7);
		let url = ws_url(&relay, "/");
		let _viewer = within(
			LIMIT,
			"the ws viewer",
			ws_client(&relay, &endpoint, &url, proxy.addr, 7, None, Some(&viewer_origin)),
		)
		.await
		.unwrap();
		let mut cursor = within(LIMIT, "large announced", announced(&viewer_origin, "large"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		publish(&track, 0);
		within(LIMIT, "the ws viewer's first group", take(&mut cursor, 1)).await;
		let before = held(&relay).await;
		proxy.paused.set(true);
		// 32 MiB of groups (64 KiB each) while the viewer reads nothing; the healthy pair's
		// viewer gets every one of its groups meanwhile.
		let payload = Bytes::from(vec![7u8; 64 << 10]);
		for sequence in 1..=512 {
			let mut group = track.create_group(sequence).unwrap();
			group
				.write_frame(Frame::new(Timestamp::new(sequence, 1000), payload.clone()))
				.unwrap();
			group.finish().unwrap();
			if sequence % 64 == 0 {
				healthy.still_receives().await;
			}
		}
		let after = held(&relay).await;
		// What the stalled connection may hold: its send buffer (4 MiB by default) beside what it
		// held before.
		let grew = after.saturating_sub(before);
		assert!(
			grew < (4 << 20) + (1 << 20),
			"the relay's memory grew {grew} bytes for a viewer that reads nothing"
		);
	});
}

#[test]
fn over_a_throttled_websocket_newer_groups_overtake_and_old_ones_are_dropped() {
	let _ = tracing_subscriber::fmt()
		.with_env_filter(std::env::var("RUST_LOG").unwrap_or_default())
		.with_test_writer()
		.try_init();
	let relay = Relay::start(1);
	let http = relay.bound.http.unwrap();
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let origin = Origin::new(1);
		// A track whose groups are worth 200 ms: older ones are dropped, not sent late.
		let info = TrackInfo {
			latency_max: Duration::from_millis(200),
			..TrackInfo::default()
		};
		let (_broadcast, publication) = origin
			.producer()
			.create_broadcast(&moq_net::model::Path::new("live"), Default::default())
			.unwrap();
		let track = _broadcast.create_track("video", info).unwrap();
		let _publisher = publisher(&relay, &endpoint, "/", &origin).await.unwrap();
		// About 1.6 MB/s through the proxy, against 3.2 MB/s published.
		let proxy = Proxy::start(http, Some(16 << 10));
		let viewer_origin = Origin::new(2);
		let url = ws_url(&relay, "/");
		let _viewer = ws_client(&relay, &endpoint, &url, proxy.addr, 2, None, Some(&viewer_origin))
			.await
			.unwrap();
		let mut cursor = within(LIMIT, "live announced", announced(&viewer_origin, "live"))
			.await
			.subscribe_track("video", Subscription::default())
			.unwrap();
		track.used().await;
		let payload = Bytes::from(vec![1u8; 64 << 10]);
		let published = Rc::new(Cell::new(0));
		let latest = published.clone();
		let writer = kio::spawn(async move {
			for sequence in 0.. {
				let mut group = track.create_group(sequence).unwrap();
				group
					.write_frame(Frame::new(Timestamp::new(sequence, 1000), payload.clone()))
					.unwrap();
				group.finish().unwrap();
				latest.set(sequence);
				kio::time::sleep(Duration::from_millis(20)).await;
			}
		});
		let mut got = Vec::new();
		while got.len() < 60 {
			let mut group = within(LIMIT, "a group", cursor.recv_group()).await.unwrap().unwrap();
			if within(LIMIT, "its frame", group.read_frame()).await.is_ok() {
				got.push(group.sequence());
			}
		}
		let newest_published = published.get();
		writer.abort();
		drop(publication);
		// The viewer takes half of what is published: groups were skipped, not queued.
		let newest = *got.iter().max().unwrap();
		let span = newest - got[0] + 1;
		assert!(span > got.len() as u64 + 20, "groups were skipped: {got:?}");
		// It keeps up with the newest, where a queue of every group would fall further behind
		// with each one (60 groups in at half the rate: 60 behind, and growing): within 40
		// groups (800 ms, four times the track's latency, for a loaded machine) of the publisher.
		assert!(
			newest + 40 >= newest_published,
			"{newest} of {newest_published}: {got:?}"
		);
		// An older group sent after a newer one is at most a few latencies behind it: older ones
		// are dropped, not sent late.
		let mut seen = 0;
		for &sequence in &got {
			assert!(sequence + 30 >= seen, "group {sequence} after {seen}: {got:?}");
			seen = seen.max(sequence);
		}
		// And newer groups overtook older ones.
		assert!(
			got.windows(2).any(|w| w[1] < w[0]),
			"no group overtook another: {got:?}"
		);
	});
}

/// What connections hold: the memory charged, less the cache's part.
async fn held(relay: &Relay) -> u64 {
	relay.metric("moq_relay_memory_bytes").await - relay.metric("moq_relay_cache_bytes").await
}

/// Waits (at most [`LIMIT`]) until what connections hold satisfies `ok`.
async fn held_until(relay: &Relay, ok: impl Fn(u64) -> bool) -> u64 {
	let deadline = kio::time::now() + LIMIT;
	loop {
		let now = held(relay).await;
		if ok(now) {
			return now;
		}
		assert!(kio::time::now() < deadline, "connections still hold {now} bytes");
		kio::time::sleep(Duration::from_millis(50)).await;
	}
}

/// A client frame carrying QMux frames as one record body.
fn qmux_message(frames: &[moq_quic::qmux::frame::Frame]) -> Vec<u8> {
	let mut body = Vec::new();
	for frame in frames {
		frame.encode(&mut body);
	}
	frame(ws::opcode::BINARY, &body, Some([9, 8, 7, 6]))
}

/// Our transport parameters, the first frame a QMux peer must send.
fn parameters() -> moq_quic::qmux::frame::Frame {
	let params = moq_quic::qmux::Config::default()
		.params
		.encode(moq_quic::qmux::Version::Qmux01);
	moq_quic::qmux::frame::Frame::TransportParameters(Bytes::from(params))
}

#[test]
fn a_qmux_peer_past_its_stream_or_data_limits_is_closed_with_the_limits_code() {
	use moq_quic::qmux::code;
	use moq_quic::qmux::frame::Frame;
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let before = held(&relay).await;
		let streams = u64::from(moq_relay::limits::Limits::default().streams);
		let window = u64::from(moq_relay::limits::Limits::default().stream_window);
		let cases = [
			(
				"a stream past the limit",
				// The client's bidirectional stream number `streams` (ids 0, 4, 8, ...): one too many.
				Frame::Stream {
					id: streams * 4,
					offset: Some(0),
					fin: false,
					data: Bytes::from_static(b"x"),
				},
				code::STREAM_LIMIT_ERROR,
			),
			(
				"data past the stream's window",
				Frame::Stream {
					id: 0,
					offset: Some(window),
					fin: false,
					data: Bytes::from_static(b"x"),
				},
				code::FLOW_CONTROL_ERROR,
			),
		];
		for (what, violation, expected) in cases {
			let mut stream = switched(&relay).await;
			stream
				.write_all(&qmux_message(&[parameters(), violation]))
				.await
				.unwrap();
			let (status, qmux_code) = close_of(&mut stream).await;
			assert_eq!(qmux_code, Some(expected), "{what}: the QMux close");
			assert_eq!(status, ws::status::NORMAL, "{what}: the WebSocket close");
			healthy.still_receives().await;
		}
		// Their slots and memory are given back.
		relay.metric_until(LIMIT, "moq_relay_connections", |n| n == 2).await;
		held_until(&relay, |n| n <= before + (64 << 10)).await;
	});
}

#[test]
fn a_flood_of_websockets_from_one_address_leaves_room_for_another() {
	let relay = Relay::run(moq_relay::config::Config {
		workers: 1,
		max_connections: Some(20),
		..moq_relay::config::Config::loopback()
	});
	let http = relay.bound.http.unwrap();
	runtime().block_on(async {
		let before = held(&relay).await;
		// One address (127.0.0.1) holds every slot with WebSocket sessions.
		let endpoint = endpoint(&relay);
		let url = ws_url(&relay, "/");
		let mut flood = Vec::new();
		for id in 0..20 {
			let session = within(
				LIMIT,
				"a flooding session",
				ws_client(&relay, &endpoint, &url, http, 100 + id, None, None),
			)
			.await
			.unwrap();
			flood.push(session);
		}
		relay.metric_until(LIMIT, "moq_relay_sessions", |n| n == 20).await;
		// Each is charged its cost at least.
		let flooded = held(&relay).await;
		assert!(
			flooded >= before + 20 * moq_quic::qmux::CONNECTION_COST,
			"{flooded} bytes charged for 20 connections"
		);
		// Another address gets in (a QUIC pair), taking two of the flood's slots.
		let elsewhere = moq_quic::Endpoint::bind("127.0.0.2:0".parse().unwrap(), moq_quic::Config::new()).unwrap();
		let mut healthy = within(LIMIT, "the healthy pair", Healthy::new(&relay, &elsewhere)).await;
		healthy.still_receives().await;
		assert_eq!(relay.metric("moq_relay_evicted_total").await, 2);
		// The flooding address, at its share, is refused another: 503 before any switch.
		let answer = upgrade_answer(http, &upgrade_request("/", "qmux-01.moq-lite-05")).await;
		assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
		healthy.still_receives().await;
		// Gone, they give back what they held.
		drop(flood);
		relay.metric_until(LIMIT, "moq_relay_connections", |n| n == 2).await;
		healthy.still_receives().await;
		drop(healthy);
		relay.metric_until(LIMIT, "moq_relay_connections", |n| n == 0).await;
		held_until(&relay, |n| n <= before + (64 << 10)).await;
	});
}
