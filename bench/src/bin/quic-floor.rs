//! `quic-floor`: what quinn-proto alone costs a relay per delivered frame, on the relay
//! benchmark's traffic, with no runtime, sockets or MoQ around it.
//!
//! ```text
//! cargo run --release -p bench --bin quic-floor -- --save          # 100 viewers at 5 and 50 fps, under callgrind
//! cargo run --release -p bench --bin quic-floor -- --fps 5 --viewers 400
//! cargo run --release -p bench --bin quic-floor -- --native        # one simulation (first rate and warm-up), its counts
//! ```
//!
//! The relay benchmark's callgrind mode (`bench --bin relay --callgrind`) counts every user-space
//! instruction of the relay per delivered frame; a profile then attributes them to quinn-proto,
//! packet protection, kio, moq-quic and moq-net, but inlining blurs the line (quinn-proto's
//! `poll_transmit` is inlined into moq-quic's connection turn, standard-library code into
//! whatever called it). This harness draws the line by construction: it runs the same traffic
//! through quinn-proto's `Endpoint` and `Connection` directly, in memory, on a simulated clock, and
//! counts only what the relay's side calls into quinn-proto (callgrind's `--toggle-collect` on
//! the one function every relay-side call goes through). What is left for a relay above that
//! floor is its runtime, its UDP I/O, its send scheduler and its MoQ session.
//!
//! # The traffic
//!
//! One relay endpoint and `--viewers` client endpoints (each its own endpoint, as the load
//! generator's connections each have their own socket), with moq-quic's server and client
//! configuration (`moq_quic::Config::with_server` / `with_client`: the relay's transport, TLS 1.3
//! on ring, CUBIC, MTU discovery as on a UDP socket, GSO batches of
//! [`moq_quic::DEFAULT_GSO_SEGMENTS`]). After the handshakes and `--warmup` frames, `--frames`
//! frames at the `--fps` rate (both lists: a row for each pair): for each frame the relay opens a
//! unidirectional stream to every viewer, gives it the group's priority (newer first, as the
//! relay does), writes one `--size`-byte chunk (the group header, the frame header and a 300-byte
//! payload are 310 bytes on the relay benchmark's traffic), finishes it and sends what
//! quinn-proto produces. Viewers read each stream to its end and grow the relay's stream
//! allowance as moq-quic clients do (16 at first, 128 once 32 streams have arrived), so the
//! MAX_STREAMS they send match the load generator's. Datagrams take `--latency-us` each way and
//! are never lost. No publisher: the relay's side starts at its streams to the viewers.
//!
//! # What is counted
//!
//! The relay side's calls, made as moq-quic's connection turn makes them: `Endpoint::handle` for
//! each datagram and `Connection::handle_event` for it, `handle_timeout` when a timer is due,
//! endpoint events, `poll` for events, the send window, `open`, `set_priority`, `write_chunks`
//! and `finish` of each frame's stream, `poll_transmit` until it has nothing, and `poll_timeout`
//! for the next deadline. Packet protection (ring through rustls) is inside those calls, so it is
//! counted, as are quinn-proto's allocations. Not counted: building the datagram's `BytesMut`
//! (the relay copies out of its receive ring into it), copying a transmit out, the chunk's bytes
//! (a clone of one shared `Bytes`), the simulation's own bookkeeping and the viewers. Everything
//! the relay side does while the measured window is open (`--frames` frame intervals from the
//! first measured frame) is divided by the frames delivered to viewers in it: the relay
//! benchmark's unit. Its window opens a 1 s settle after the ramp, so at 5 fps it holds a viewer's
//! streams from about the 6th on, most of them before the viewer's stream allowance grows; a
//! warm-up of 5 frames puts this window there, and one of 40 past the growth (the steady state).
//!
//! Also not here, and counted in the relay benchmark: the publisher's connection (the frames in,
//! a hundredth of a frame's quinn-proto cost per delivered frame) and what the real relay sends
//! beyond this traffic (its few extra datagrams and probes per frame). So the relay's count less
//! this floor is slightly more than what is not quinn-proto's.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::counter;
use bench::report::Table;
use bytes::{Bytes, BytesMut};
use moq_quic::{Certificate, Verification};
use quinn_proto::{
	ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, EcnCodepoint, Endpoint, EndpointConfig, Event,
	ServerConfig, StreamEvent, VarInt,
};

/// The function every relay-side call goes through while the window is open; callgrind counts
/// only inside it (`--toggle-collect`).
const COUNTED_FN: &str = "*quic_floor::relay_side*";

/// The relay benchmark's callgrind results (`bench/results/`), whose fanout 1x100 rows this
/// harness's relay-like row is compared with: the whole relay's user-space instructions per
/// delivered frame at 5 fps with 300-byte frames, this tree's relay and [`START`].
const RELAY_RESULTS: &str = "relay-callgrind.md";
/// The load line that says a relay results file measured the shape this harness imitates.
const RELAY_LOAD: &str = "Load: 5 fps of one-frame groups of 300 bytes";
/// The commit the relay efficiency issue measures against (its bar: half this commit's count).
const START: &str = "7ac85c2";

/// The viewers' stream allowance: moq-quic's client starts at `INITIAL_STREAMS` and goes straight
/// to `CHURN_ALLOWANCE` once twice that many streams have arrived.
const INITIAL_ALLOWANCE: u64 = moq_quic::INITIAL_STREAMS as u64;
const CHURN_ALLOWANCE: u64 = moq_quic::CHURN_ALLOWANCE;

/// Warm-up frames like the relay benchmark's at 5 fps: its window opens a 1 s settle (5 groups)
/// after every subscription has received its first group, so the window holds a viewer's streams
/// from about the 6th on, most of them before its allowance grows.
const RELAY_LIKE_WARMUP: u64 = 5;
/// Warm-up frames past the allowance's growth (at 32 streams): the steady state, a MAX_STREAMS
/// every 16 streams.
const STEADY_WARMUP: u64 = 40;

/// What one simulation runs.
#[derive(Clone, Debug)]
struct Sim {
	viewers: usize,
	fps: u32,
	warmup: u64,
	frames: u64,
	size: usize,
	latency: Duration,
}

impl Sim {
	/// The arguments that make a child run this simulation.
	fn child_args(&self) -> Vec<String> {
		[
			"--child",
			"--viewers",
			&self.viewers.to_string(),
			"--fps",
			&self.fps.to_string(),
			"--warmup",
			&self.warmup.to_string(),
			"--frames",
			&self.frames.to_string(),
			"--size",
			&self.size.to_string(),
			"--latency-us",
			&self.latency.as_micros().to_string(),
		]
		.map(str::to_owned)
		.to_vec()
	}

	/// Whether this is the relay benchmark's callgrind shape and window.
	fn is_relay_like(&self) -> bool {
		self.viewers == 100 && self.fps == 5 && self.size == 310 && self.warmup == RELAY_LIKE_WARMUP
	}
}

#[derive(Clone, Debug)]
struct Args {
	viewers: usize,
	/// Frame rates and warm-ups to measure, a row for each pair.
	rates: Vec<u32>,
	warmups: Vec<u64>,
	frames: u64,
	size: usize,
	latency: Duration,
	runs: usize,
	native: bool,
	save: bool,
	child: bool,
}

impl Args {
	fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
		let mut out = Self {
			viewers: 100,
			rates: vec![5, 50],
			warmups: vec![RELAY_LIKE_WARMUP, STEADY_WARMUP],
			frames: 50,
			size: 310,
			latency: Duration::from_micros(50),
			runs: 3,
			native: false,
			save: false,
			child: false,
		};
		while let Some(arg) = args.next() {
			let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
			match arg.as_str() {
				"--viewers" => out.viewers = number(&value("--viewers")?)?,
				"--fps" => out.rates = counter::parse_list(&value("--fps")?, "frame rate")?,
				"--warmup" => out.warmups = counter::parse_list(&value("--warmup")?, "warm-up")?,
				"--frames" => out.frames = number(&value("--frames")?)?,
				"--size" => out.size = number(&value("--size")?)?,
				"--latency-us" => out.latency = Duration::from_micros(number(&value("--latency-us")?)?),
				"--runs" => out.runs = number(&value("--runs")?)?,
				"--native" => out.native = true,
				"--save" => out.save = true,
				"--child" => out.child = true,
				"-h" | "--help" => return Err(HELP.to_owned()),
				other => return Err(format!("unknown argument {other:?}\n{HELP}")),
			}
		}
		// Viewers' ports count up from VIEWER_BASE_PORT, and a frame's sequence is an i32 priority.
		let in_range = (1..=MAX_VIEWERS).contains(&out.viewers)
			&& !out.rates.is_empty()
			&& out.rates.iter().all(|fps| (1..=1000).contains(fps))
			&& !out.warmups.is_empty()
			&& out.warmups.iter().all(|w| *w <= MAX_FRAMES)
			&& (1..=MAX_FRAMES).contains(&out.frames)
			&& out.size > 0
			&& out.runs > 0;
		if !in_range {
			return Err(format!(
				"--viewers 1..={MAX_VIEWERS}, --fps 1..=1000, --frames 1..={MAX_FRAMES}, --warmup \
				 ..={MAX_FRAMES}, and a positive --size and --runs"
			));
		}
		Ok(out)
	}

	/// The simulation of one row.
	fn sim(&self, fps: u32, warmup: u64) -> Sim {
		Sim {
			viewers: self.viewers,
			fps,
			warmup,
			frames: self.frames,
			size: self.size,
			latency: self.latency,
		}
	}
}

const MAX_VIEWERS: usize = 10_000;
const MAX_FRAMES: u64 = 100_000;

const HELP: &str = "quic-floor [--viewers 100] [--fps 5,50] [--warmup 5,40] [--frames 50] [--size 310] \
                    [--latency-us 50] [--runs 3] [--native] [--save]";

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
	text.parse().map_err(|_| format!("not a number: {text:?}"))
}

/// The relay side's calls go through here while the window is open, and only then.
#[inline(never)]
fn relay_side<R>(f: impl FnOnce() -> R) -> R {
	f()
}

/// Runs `f` counted if `counted`.
fn maybe_counted<R>(counted: bool, f: impl FnOnce() -> R) -> R {
	if counted { relay_side(f) } else { f() }
}

/// Who a datagram is for.
#[derive(Clone, Copy, Debug)]
enum To {
	Relay,
	Viewer(usize),
}

/// A datagram on its way.
struct Datagram {
	at: Instant,
	to: To,
	from: SocketAddr,
	ecn: Option<EcnCodepoint>,
	data: BytesMut,
}

/// The network: datagrams in flight, in delivery order. Every datagram takes the same latency
/// and the clock only moves forward, so the order they were sent in is the order they arrive in.
struct Net {
	queue: VecDeque<Datagram>,
	latency: Duration,
	relay_addr: SocketAddr,
}

impl Net {
	/// Queues what `transmit` put in `buf`, split into its datagrams.
	fn send(&mut self, now: Instant, from: SocketAddr, transmit: &quinn_proto::Transmit, buf: &[u8]) {
		let to = if transmit.destination == self.relay_addr {
			To::Relay
		} else {
			To::Viewer(viewer_index(transmit.destination))
		};
		let segment = transmit.segment_size.unwrap_or(transmit.size);
		for datagram in buf[..transmit.size].chunks(segment) {
			self.queue.push_back(Datagram {
				at: now + self.latency,
				to,
				from,
				ecn: transmit.ecn,
				data: BytesMut::from(datagram),
			});
		}
	}
}

const VIEWER_BASE_PORT: u16 = 10_000;

fn viewer_addr(i: usize) -> SocketAddr {
	SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), VIEWER_BASE_PORT + i as u16)
}

fn viewer_index(addr: SocketAddr) -> usize {
	usize::from(addr.port() - VIEWER_BASE_PORT)
}

/// The relay: one endpoint, a connection per viewer.
struct Relay {
	endpoint: Endpoint,
	addr: SocketAddr,
	conns: Vec<Option<RelayConn>>,
	buf: Vec<u8>,
	/// Datagrams the relay sent while the window was open.
	sent: u64,
	/// Datagrams the relay received while the window was open.
	received: u64,
}

struct RelayConn {
	proto: Connection,
	timer: Option<Instant>,
}

impl Relay {
	/// One datagram in: the endpoint routes it, the connection takes it, and the connection turns.
	fn receive(&mut self, counted: bool, now: Instant, net: &mut Net, datagram: Datagram) {
		if counted {
			self.received += 1;
		}
		let Datagram { from, ecn, data, .. } = datagram;
		let local = Some(self.addr.ip());
		let event = maybe_counted(counted, || {
			self.buf.clear();
			self.endpoint.handle(now, from, local, ecn, data, &mut self.buf)
		});
		let handle = match event {
			Some(DatagramEvent::ConnectionEvent(handle, event)) => {
				let conn = self.conns[handle.0].as_mut().expect("a routed datagram's connection");
				maybe_counted(counted, || conn.proto.handle_event(event));
				handle
			}
			Some(DatagramEvent::NewConnection(incoming)) => {
				let accepted = maybe_counted(counted, || {
					self.buf.clear();
					self.endpoint.accept(incoming, now, &mut self.buf, None).ok()
				});
				let Some((handle, proto)) = accepted else {
					return;
				};
				if self.conns.len() <= handle.0 {
					self.conns.resize_with(handle.0 + 1, || None);
				}
				self.conns[handle.0] = Some(RelayConn { proto, timer: None });
				handle
			}
			Some(DatagramEvent::Response(transmit)) => {
				net.send(now, self.addr, &transmit, &self.buf);
				return;
			}
			None => return,
		};
		self.turn(counted, now, net, handle);
	}

	/// A frame: a stream to every viewer with one chunk, finished, then each connection's turn.
	fn frame(
		&mut self,
		counted: bool,
		now: Instant,
		net: &mut Net,
		chunk: &Bytes,
		priority: i32,
	) -> Result<(), String> {
		for index in 0..self.conns.len() {
			let Some(conn) = self.conns[index].as_mut() else {
				continue;
			};
			let mut chunks = [chunk.clone()];
			maybe_counted(counted, || {
				let id = conn
					.proto
					.streams()
					.open(Dir::Uni)
					.ok_or("the viewer's stream allowance ran out")?;
				let mut stream = conn.proto.send_stream(id);
				stream
					.set_priority(priority)
					.map_err(|_| "set_priority: the stream is closed")?;
				stream
					.write_chunks(&mut chunks)
					.map_err(|_| "write_chunks refused the frame")?;
				stream.finish().map_err(|_| "finish: the stream is closed")
			})
			.map_err(|e| format!("viewer connection {index}: {e}"))?;
			self.turn(counted, now, net, ConnectionHandle(index));
		}
		Ok(())
	}

	/// moq-quic's connection turn, without moq-quic: timers, endpoint events, events, the send
	/// window, and `poll_transmit` until it has nothing.
	fn turn(&mut self, counted: bool, now: Instant, net: &mut Net, handle: ConnectionHandle) {
		let Self {
			endpoint, conns, buf, ..
		} = self;
		let conn = conns[handle.0].as_mut().expect("a live connection");
		maybe_counted(counted, || {
			if conn.proto.poll_timeout().is_some_and(|at| at <= now) {
				conn.proto.handle_timeout(now);
			}
			while let Some(event) = conn.proto.poll_endpoint_events() {
				if let Some(back) = endpoint.handle_event(handle, event) {
					conn.proto.handle_event(back);
				}
			}
			while conn.proto.poll().is_some() {}
			let mtu = usize::from(conn.proto.current_mtu());
			let batch = moq_quic::DEFAULT_GSO_SEGMENTS * mtu;
			let window = conn.proto.congestion_state().window();
			conn.proto
				.set_send_window((2 * window + 2 * batch as u64).max(64 * 1024));
		});
		loop {
			let transmit = maybe_counted(counted, || {
				buf.clear();
				conn.proto.poll_transmit(now, moq_quic::DEFAULT_GSO_SEGMENTS, buf)
			});
			let Some(transmit) = transmit else {
				break;
			};
			if counted {
				self.sent += transmit.segment_size.map_or(1, |s| transmit.size.div_ceil(s)) as u64;
			}
			net.send(now, self.addr, &transmit, buf);
		}
		conn.timer = maybe_counted(counted, || conn.proto.poll_timeout());
	}
}

/// A viewer: its own endpoint and connection; reads every stream to its end.
struct Viewer {
	endpoint: Endpoint,
	addr: SocketAddr,
	proto: Connection,
	timer: Option<Instant>,
	buf: Vec<u8>,
	connected: bool,
	accepted: u64,
	/// Streams read to their end.
	frames: u64,
}

impl Viewer {
	fn receive(&mut self, now: Instant, net: &mut Net, datagram: Datagram) {
		self.buf.clear();
		let local = Some(self.addr.ip());
		match self
			.endpoint
			.handle(now, datagram.from, local, datagram.ecn, datagram.data, &mut self.buf)
		{
			Some(DatagramEvent::ConnectionEvent(_, event)) => self.proto.handle_event(event),
			Some(DatagramEvent::Response(transmit)) => {
				net.send(now, self.addr, &transmit, &self.buf);
				return;
			}
			_ => return,
		}
		self.turn(now, net);
	}

	fn turn(&mut self, now: Instant, net: &mut Net) {
		if self.proto.poll_timeout().is_some_and(|at| at <= now) {
			self.proto.handle_timeout(now);
		}
		while let Some(event) = self.proto.poll_endpoint_events() {
			if let Some(back) = self.endpoint.handle_event(ConnectionHandle(0), event) {
				self.proto.handle_event(back);
			}
		}
		while let Some(event) = self.proto.poll() {
			match event {
				Event::Connected => self.connected = true,
				Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
					while let Some(id) = self.proto.streams().accept(Dir::Uni) {
						self.accepted += 1;
						self.read(id);
					}
					self.grow_allowance();
				}
				Event::Stream(StreamEvent::Readable { id }) => self.read(id),
				Event::ConnectionLost { reason } => panic!("a viewer lost its connection: {reason}"),
				_ => {}
			}
		}
		loop {
			self.buf.clear();
			let Some(transmit) = self
				.proto
				.poll_transmit(now, moq_quic::DEFAULT_GSO_SEGMENTS, &mut self.buf)
			else {
				break;
			};
			net.send(now, self.addr, &transmit, &self.buf);
		}
		self.timer = self.proto.poll_timeout();
	}

	fn read(&mut self, id: quinn_proto::StreamId) {
		let mut stream = self.proto.recv_stream(id);
		let Ok(mut chunks) = stream.read(true) else {
			return;
		};
		loop {
			match chunks.next(usize::MAX) {
				Ok(Some(_)) => {}
				Ok(None) => {
					self.frames += 1;
					break;
				}
				Err(_) => break,
			}
		}
		let _ = chunks.finalize();
	}

	/// moq-quic's client: straight to [`CHURN_ALLOWANCE`] once twice the first allowance has
	/// arrived.
	fn grow_allowance(&mut self) {
		if self.accepted >= 2 * INITIAL_ALLOWANCE && self.proto.max_concurrent_streams(Dir::Uni) < CHURN_ALLOWANCE {
			self.proto
				.set_max_concurrent_streams(Dir::Uni, VarInt::from_u64(CHURN_ALLOWANCE).expect("small"));
		}
	}
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Outcome {
	/// Frames the viewers read in the window.
	delivered: u64,
	/// Datagrams from the relay in the window.
	sent: u64,
	/// Datagrams to the relay in the window.
	received: u64,
	/// Packets the relay's connections declared lost, over the whole run.
	lost: u64,
}

impl Outcome {
	fn line(&self) -> String {
		format!(
			"delivered {} sent {} received {} lost {}",
			self.delivered, self.sent, self.received, self.lost
		)
	}

	fn parse(text: &str) -> Option<Self> {
		let line = text.lines().find(|line| line.starts_with("delivered "))?;
		let words: Vec<&str> = line.split_whitespace().collect();
		let field = |name: &str| -> Option<u64> {
			let at = words.iter().position(|w| *w == name)?;
			words.get(at + 1)?.parse().ok()
		};
		Some(Self {
			delivered: field("delivered")?,
			sent: field("sent")?,
			received: field("received")?,
			lost: field("lost")?,
		})
	}
}

/// Runs the simulation; the relay side is counted in the window.
fn simulate(args: &Sim) -> Result<Outcome, String> {
	let certificate =
		Certificate::self_signed(&["localhost"], Duration::from_secs(24 * 3600)).map_err(|e| e.to_string())?;
	let alpn = [moq_quic::ALPN_MOQ_LITE_05];
	let mut server = moq_quic::Config::new()
		.with_server(&certificate, &alpn)
		.map_err(|e| e.to_string())?;
	let client = moq_quic::Config::new()
		.with_client(&Verification::Fingerprints(vec![certificate.fingerprint()]), &alpn)
		.map_err(|e| e.to_string())?;
	let server_config: ServerConfig = server.server.take().ok_or("no server configuration")?;
	let client_config: ClientConfig = client.client.ok_or("no client configuration")?;
	let endpoint_config: Arc<EndpointConfig> = Arc::new(server.endpoint);

	let base = Instant::now();
	let mut now = base;
	let relay_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4443);
	let mut net = Net {
		queue: VecDeque::new(),
		latency: args.latency,
		relay_addr,
	};
	let mut relay = Relay {
		endpoint: Endpoint::new(
			endpoint_config.clone(),
			Some(Arc::new(server_config)),
			true,
			Some([1; 32]),
		),
		addr: relay_addr,
		conns: Vec::new(),
		buf: Vec::new(),
		sent: 0,
		received: 0,
	};
	let mut viewers = Vec::with_capacity(args.viewers);
	for i in 0..args.viewers {
		let mut seed = [2; 32];
		seed[..8].copy_from_slice(&(i as u64).to_le_bytes());
		let mut endpoint = Endpoint::new(endpoint_config.clone(), None, true, Some(seed));
		let (handle, proto) = endpoint
			.connect(now, client_config.clone(), relay_addr, "localhost")
			.map_err(|e| e.to_string())?;
		assert_eq!(handle.0, 0, "one connection per viewer endpoint");
		viewers.push(Viewer {
			endpoint,
			addr: viewer_addr(i),
			proto,
			timer: None,
			buf: Vec::new(),
			connected: false,
			accepted: 0,
			frames: 0,
		});
	}
	for viewer in &mut viewers {
		viewer.turn(now, &mut net);
	}

	let interval = Duration::from_secs(1) / args.fps;
	let chunk = Bytes::from(vec![0x5a; args.size]);
	let total_frames = args.warmup + args.frames;
	let frames_in_window = u32::try_from(args.frames).map_err(|_| "too many frames")?;
	let mut frames_sent = 0u64;
	let mut next_frame: Option<Instant> = None;
	let mut window: Option<(Instant, Instant)> = None;
	let mut delivered_before = 0;
	// The handshakes must be done within this; then the frames take their intervals, and a spare.
	let deadline = base + Duration::from_secs(30) + interval * (total_frames as u32 + 2);

	let delivered_after = loop {
		let counted = window.is_some_and(|(from, to)| now >= from && now < to);
		// Datagrams before timers: a datagram that arrives with its timer due would have reset it.
		while net.queue.front().is_some_and(|d| d.at <= now) {
			let datagram = net.queue.pop_front().expect("looked at the front");
			match datagram.to {
				To::Relay => relay.receive(counted, now, &mut net, datagram),
				To::Viewer(i) => viewers[i].receive(now, &mut net, datagram),
			}
		}
		for index in 0..relay.conns.len() {
			if relay.conns[index]
				.as_ref()
				.and_then(|c| c.timer)
				.is_some_and(|at| at <= now)
			{
				relay.turn(counted, now, &mut net, ConnectionHandle(index));
			}
		}
		for viewer in &mut viewers {
			if viewer.timer.is_some_and(|at| at <= now) {
				viewer.turn(now, &mut net);
			}
		}
		if next_frame.is_none()
			&& viewers.iter().all(|v| v.connected)
			&& relay.conns.iter().flatten().count() == args.viewers
		{
			next_frame = Some(now + interval);
		}
		if let Some(at) = next_frame.filter(|at| *at <= now && frames_sent < total_frames) {
			if frames_sent == args.warmup {
				window = Some((now, now + interval * frames_in_window));
				delivered_before = viewers.iter().map(|v| v.frames).sum();
			}
			let counted = window.is_some_and(|(from, to)| now >= from && now < to);
			// Newer groups first, as the relay orders them (frames_sent ≤ MAX_FRAMES).
			relay.frame(counted, now, &mut net, &chunk, frames_sent as i32)?;
			frames_sent += 1;
			next_frame = Some(at + interval);
		}
		if window.is_some_and(|(_, to)| now >= to) {
			break viewers.iter().map(|v| v.frames).sum::<u64>();
		}
		// The clock jumps to the next thing due, as a paused runtime clock would.
		let next = net
			.queue
			.front()
			.map(|d| d.at)
			.into_iter()
			.chain(relay.conns.iter().flatten().filter_map(|c| c.timer))
			.chain(viewers.iter().filter_map(|v| v.timer))
			.chain(next_frame.filter(|_| frames_sent < total_frames))
			.chain(window.map(|(_, to)| to))
			.min()
			.ok_or("nothing left to happen")?
			.max(now);
		if next > deadline {
			return Err(format!(
				"the run did not finish: {} of {} viewers connected, {frames_sent} frames sent",
				viewers.iter().filter(|v| v.connected).count(),
				args.viewers
			));
		}
		now = next;
	};
	let lost = relay
		.conns
		.iter()
		.flatten()
		.map(|c| c.proto.stats().path.lost_packets)
		.sum();
	Ok(Outcome {
		delivered: delivered_after - delivered_before,
		sent: relay.sent,
		received: relay.received,
		lost,
	})
}

/// Runs the simulation under callgrind, counting the relay side only.
fn count(args: &Sim) -> Result<(u64, Outcome), String> {
	let valgrind = [
		"--collect-atstart=no".to_owned(),
		format!("--toggle-collect={COUNTED_FN}"),
	];
	let (total, stdout) = counter::callgrind_run_with(&valgrind, &args.child_args()).map_err(|e| e.to_string())?;
	let outcome = Outcome::parse(&stdout).ok_or_else(|| format!("the child printed no outcome: {stdout:?}"))?;
	Ok((total, outcome))
}

/// The relay benchmark's last callgrind figures, if its results are there: this tree's relay and
/// the starting commit of the efficiency issue (`START`), with the revision they were taken at.
fn relay_figures() -> Option<RelayFigures> {
	let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
		.join("results")
		.join(RELAY_RESULTS);
	let text = std::fs::read_to_string(path).ok()?;
	if !text.contains(RELAY_LOAD) {
		return None;
	}
	let revision = text
		.lines()
		.find_map(|l| l.strip_prefix("- revision: "))
		.map(|r| r.trim_matches('`').to_owned())?;
	// Rows are `| SHAPE | RELAY | instructions/frame | ...`, this tree's relay first.
	let rows: Vec<Vec<&str>> = text
		.lines()
		.filter(|l| l.starts_with("| fanout:1x100 "))
		.map(|l| l.split('|').map(str::trim).collect())
		.collect();
	let value = |row: &Vec<&str>| row.get(3).and_then(|c| c.replace(',', "").parse::<f64>().ok());
	let current = value(rows.first()?)?;
	let start = rows
		.iter()
		.find(|row| row.get(2).is_some_and(|r| r.contains(START)))
		.and_then(value);
	Some(RelayFigures {
		current,
		start,
		revision,
	})
}

struct RelayFigures {
	current: f64,
	start: Option<f64>,
	revision: String,
}

/// Counts `runs` runs: the median instructions per delivered frame, the spread
/// ((max − min) / median) and the last run's outcome.
fn measure(args: &Sim, runs: usize) -> Result<(f64, f64, Outcome), String> {
	// Each run has its own certificate and TLS randomness: counts differ by a fraction of a
	// percent between runs.
	let mut counts = Vec::with_capacity(runs);
	let mut outcome = Outcome::default();
	for _ in 0..runs {
		let (total, run) = count(args)?;
		let expected = args.frames * args.viewers as u64;
		if run.delivered != expected || run.lost != 0 {
			return Err(format!(
				"a run delivered {} of {expected} frames with {} lost packets; no figure",
				run.delivered, run.lost
			));
		}
		counts.push(total as f64 / run.delivered as f64);
		outcome = run;
	}
	let (low, high) = counts
		.iter()
		.fold((f64::MAX, f64::MIN), |(low, high), &c| (low.min(c), high.max(c)));
	let median = counter::median(&mut counts);
	Ok((median, (high - low) / median, outcome))
}

fn main() -> ExitCode {
	let args = match Args::parse(std::env::args().skip(1)) {
		Ok(args) => args,
		Err(e) => {
			eprintln!("quic-floor: {e}");
			return ExitCode::FAILURE;
		}
	};
	if args.child || args.native {
		// One simulation: a child's (its one rate and warm-up), or the first row's.
		return match simulate(&args.sim(args.rates[0], args.warmups[0])) {
			Ok(outcome) => {
				println!("{}", outcome.line());
				ExitCode::SUCCESS
			}
			Err(e) => {
				eprintln!("quic-floor: {e}");
				ExitCode::FAILURE
			}
		};
	}
	if !counter::valgrind_available() {
		eprintln!("quic-floor: needs valgrind (callgrind counts the relay side alone); --native runs the simulation");
		return ExitCode::FAILURE;
	}
	let mut rows = Vec::new();
	let mut relay_like = None;
	for &fps in &args.rates {
		for &warmup in &args.warmups {
			let sim = args.sim(fps, warmup);
			let (per_frame, spread, outcome) = match measure(&sim, args.runs) {
				Ok(measured) => measured,
				Err(e) => {
					eprintln!("quic-floor: {e}");
					return ExitCode::FAILURE;
				}
			};
			eprintln!(
				"quic-floor: {fps} fps, {warmup} warm-up frames: {per_frame:.0} instructions per delivered frame"
			);
			if sim.is_relay_like() {
				relay_like = Some(per_frame);
			}
			rows.push(vec![
				format!("fanout:1x{} at {fps} fps", args.viewers),
				warmup.to_string(),
				format!("{per_frame:.0}"),
				format!("{:.1}", 100.0 * spread),
				format!("{:.3}", outcome.sent as f64 / outcome.delivered as f64),
				format!("{:.3}", outcome.received as f64 / outcome.delivered as f64),
				outcome.delivered.to_string(),
			]);
		}
	}
	let list = |values: &[String]| values.join(",");
	let rates = list(&args.rates.iter().map(u32::to_string).collect::<Vec<_>>());
	let warmups = list(&args.warmups.iter().map(u64::to_string).collect::<Vec<_>>());
	let mut table = Table {
		name: "quic-floor".to_owned(),
		title: "quinn-proto's share of a delivered frame: the relay side of the relay benchmark's traffic, \
		        quinn-proto alone"
			.to_owned(),
		unit: "user-space instructions per delivered frame".to_owned(),
		source: format!("callgrind, `--toggle-collect={COUNTED_FN}`: only the relay side's calls into quinn-proto"),
		notes: format!(
			"`cargo run --release -p bench --bin quic-floor -- --viewers {viewers} --fps {rates} --warmup \
			 {warmups} --frames {frames} --size {size} --latency-us {latency} --runs {runs}`. One relay \
			 endpoint and {viewers} viewer endpoints in memory on a simulated clock ({latency} µs each \
			 way, no loss), moq-quic's server and client configuration, a stream per frame per viewer \
			 with one {size}-byte chunk; `warm-up` frames, then {frames} measured. A warm-up of \
			 {RELAY_LIKE_WARMUP} puts the window where the relay benchmark's is (most of it before the \
			 viewers' stream allowance grows from 16 to 128, with a MAX_STREAMS every few streams, \
			 each answered by an ACK sent alone); {STEADY_WARMUP} is the steady state after it. The \
			 median of {runs} runs (`spread` is (max − min)/median; datagrams are the last run's). \
			 What is counted and what is not is in the harness's module docs \
			 (`bench/src/bin/quic-floor.rs`).",
			viewers = args.viewers,
			frames = args.frames,
			size = args.size,
			latency = args.latency.as_micros(),
			runs = args.runs,
		),
		columns: [
			"shape",
			"warm-up",
			"instructions/frame",
			"spread %",
			"datagrams out/frame",
			"datagrams in/frame",
			"frames",
		]
		.map(str::to_owned)
		.to_vec(),
		rows,
		after: String::new(),
	};
	if let (Some(relay), Some(per_frame)) = (relay_figures(), relay_like) {
		table.after = format!(
			"The whole relay on that shape (`results/{RELAY_RESULTS}` at {}): {:.0} instructions per \
			 delivered frame, of which quinn-proto alone (the {RELAY_LIKE_WARMUP}-frame warm-up row) is \
			 {:.0}%. The rest, about {:.0}, is the relay's runtime, UDP I/O, send scheduler and MoQ \
			 session, and a few hundred of quinn-proto's own that this harness leaves out (the \
			 publisher's connection, about a hundredth of a frame's cost per delivered frame; the \
			 relay's few extra datagrams and probes per frame).",
			relay.revision,
			relay.current,
			100.0 * per_frame / relay.current,
			relay.current - per_frame
		);
		if let Some(start) = relay.start {
			let bar = start / 2.0;
			let _ = write!(
				table.after,
				" Half the start's count ({START}: {start:.0}), the efficiency bar, is {bar:.0}: it leaves \
				 about {:.0} per delivered frame above quinn-proto for all of that.",
				bar - per_frame
			);
		}
		table.after.push('\n');
	}
	print!("{}", table.markdown(&bench::report::revision()));
	if args.save
		&& let Err(e) = table.save()
	{
		eprintln!("quic-floor: saving: {e}");
		return ExitCode::FAILURE;
	}
	ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
	use super::*;

	fn small(fps: u32, warmup: u64, frames: u64) -> Sim {
		Sim {
			viewers: 4,
			frames,
			..Args::parse(std::iter::empty()).expect("defaults").sim(fps, warmup)
		}
	}

	#[test]
	fn every_viewer_reads_every_frame_of_the_window() {
		let outcome = simulate(&small(50, 3, 10)).expect("the simulation finishes");
		assert_eq!(outcome.delivered, 40, "4 viewers, 10 frames");
		assert_eq!(outcome.lost, 0);
		// A 310-byte frame fits one datagram; each frame is one stream, one packet or more.
		assert!(outcome.sent >= outcome.delivered, "{outcome:?}");
		assert!(outcome.received > 0, "the viewers acknowledge: {outcome:?}");
	}

	#[test]
	fn past_the_allowance_growth_the_relay_sends_fewer_acks_alone() {
		// Before the viewers' allowance grows, a MAX_STREAMS comes every few streams and the relay
		// answers each with an ACK of its own at 5 fps; after it, one every 16 streams.
		let early = simulate(&small(5, RELAY_LIKE_WARMUP, 20)).expect("the early window");
		let steady = simulate(&small(5, STEADY_WARMUP, 20)).expect("the steady window");
		let per_frame = |o: &Outcome| o.sent as f64 / o.delivered as f64;
		assert!(per_frame(&early) > per_frame(&steady), "{early:?} against {steady:?}");
		assert!(per_frame(&steady) < 1.1, "{steady:?}");
	}

	#[test]
	fn arguments_out_of_range_are_refused() {
		let parse = |args: &[&str]| Args::parse(args.iter().map(|a| (*a).to_owned()));
		assert!(parse(&["--fps", "5,50", "--warmup", "5,40"]).is_ok());
		assert!(parse(&["--viewers", "60000"]).is_err(), "ports would wrap");
		assert!(parse(&["--fps", "0"]).is_err());
		assert!(parse(&["--frames", "0"]).is_err());
		assert!(parse(&["--runs", "0"]).is_err());
	}

	#[test]
	fn the_outcome_line_reads_back() {
		let outcome = Outcome {
			delivered: 5000,
			sent: 6050,
			received: 5100,
			lost: 0,
		};
		assert_eq!(Outcome::parse(&format!("noise\n{}\n", outcome.line())), Some(outcome));
		assert_eq!(Outcome::parse("delivered x"), None);
	}
}
