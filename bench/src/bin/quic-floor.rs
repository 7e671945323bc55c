//! `quic-floor`: what quinn-proto alone costs a relay per delivered frame, on the relay
//! benchmark's traffic, with no runtime, sockets or MoQ around it.
//!
//! ```text
//! cargo run --release -p bench --bin quic-floor -- --save          # 100 viewers at 5 and 50 fps, under callgrind
//! cargo run --release -p bench --bin quic-floor -- --fps 5 --viewers 400
//! cargo run --release -p bench --bin quic-floor -- --native        # the simulation alone (first rate), its counts
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
//! frames at each `--fps` rate (a run and a row each): for each frame the relay opens a
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
//! first measured frame) is divided by the frames delivered to viewers in it: the same unit and
//! window as the relay benchmark's callgrind mode.

#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
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

/// The relay benchmark's callgrind mode at this revision, for the table's last column: user-space
/// instructions per delivered frame of the whole relay (fanout 1x100, 5 fps,
/// `results/relay-callgrind.md`).
const RELAY_RESULTS: &str = "relay-callgrind.md";

/// A stream allowance a viewer starts with and what it grows to, and when: moq-quic's client
/// (`moq_quic::INITIAL_STREAMS`, and `CHURN_ALLOWANCE` once twice the allowance has arrived).
const INITIAL_ALLOWANCE: u64 = moq_quic::INITIAL_STREAMS as u64;
const CHURN_ALLOWANCE: u64 = 128;

#[derive(Clone, Debug)]
struct Args {
	viewers: usize,
	/// The frame rate the simulation runs at (a child's, or the first of `rates`).
	fps: u32,
	/// The frame rates to measure, a row each.
	rates: Vec<u32>,
	frames: u64,
	warmup: u64,
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
			fps: 5,
			rates: vec![5, 50],
			frames: 50,
			warmup: 10,
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
				"--fps" => {
					out.rates = counter::parse_list(&value("--fps")?, "frame rate")?;
					out.fps = out.rates.first().copied().unwrap_or(0);
				}
				"--frames" => out.frames = number(&value("--frames")?)?,
				"--warmup" => out.warmup = number(&value("--warmup")?)?,
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
		if out.viewers == 0
			|| out.rates.contains(&0)
			|| out.fps == 0
			|| out.frames == 0
			|| out.size == 0
			|| out.runs == 0
		{
			return Err("--viewers, --fps, --frames, --size and --runs must be positive".to_owned());
		}
		Ok(out)
	}

	/// The arguments that make a child run the same simulation.
	fn child_args(&self) -> Vec<String> {
		vec![
			"--child".to_owned(),
			"--viewers".to_owned(),
			self.viewers.to_string(),
			"--fps".to_owned(),
			self.fps.to_string(),
			"--frames".to_owned(),
			self.frames.to_string(),
			"--warmup".to_owned(),
			self.warmup.to_string(),
			"--size".to_owned(),
			self.size.to_string(),
			"--latency-us".to_owned(),
			self.latency.as_micros().to_string(),
		]
	}
}

const HELP: &str = "quic-floor [--viewers 100] [--fps 5,50] [--frames 50] [--warmup 10] [--size 310] \
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum To {
	Relay,
	Viewer(usize),
}

/// A datagram on its way.
struct Datagram {
	at: Instant,
	seq: u64,
	to: To,
	from: SocketAddr,
	ecn: Option<EcnCodepoint>,
	data: BytesMut,
}

impl PartialEq for Datagram {
	fn eq(&self, other: &Self) -> bool {
		(self.at, self.seq) == (other.at, other.seq)
	}
}
impl Eq for Datagram {}
impl PartialOrd for Datagram {
	fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
		Some(self.cmp(other))
	}
}
impl Ord for Datagram {
	fn cmp(&self, other: &Self) -> std::cmp::Ordering {
		(self.at, self.seq).cmp(&(other.at, other.seq))
	}
}

/// The network: datagrams in flight, in delivery order.
struct Net {
	queue: BinaryHeap<Reverse<Datagram>>,
	seq: u64,
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
			self.seq += 1;
			self.queue.push(Reverse(Datagram {
				at: now + self.latency,
				seq: self.seq,
				to,
				from,
				ecn: transmit.ecn,
				data: BytesMut::from(datagram),
			}));
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
	/// Datagrams produced and sent, the window's.
	sent: u64,
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
	fn frame(&mut self, counted: bool, now: Instant, net: &mut Net, chunk: &Bytes, priority: i32) {
		for index in 0..self.conns.len() {
			let Some(conn) = self.conns[index].as_mut() else {
				continue;
			};
			let mut chunks = [chunk.clone()];
			let opened = maybe_counted(counted, || {
				let id = conn.proto.streams().open(Dir::Uni)?;
				let mut stream = conn.proto.send_stream(id);
				stream.set_priority(priority).ok()?;
				stream.write_chunks(&mut chunks).ok()?;
				stream.finish().ok()
			});
			assert!(opened.is_some(), "the viewer's stream allowance ran out");
			self.turn(counted, now, net, ConnectionHandle(index));
		}
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
fn simulate(args: &Args) -> Result<Outcome, String> {
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
		queue: BinaryHeap::new(),
		seq: 0,
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
	let mut frames_sent = 0u64;
	let mut next_frame: Option<Instant> = None;
	let mut window: Option<(Instant, Instant)> = None;
	let mut delivered_before = 0;
	let mut delivered_after = None;
	// The handshakes must be done within this; the run then lasts its frames and a drain.
	let deadline = base + Duration::from_secs(30) + interval * (total_frames as u32 + 2);

	loop {
		let counted = window.is_some_and(|(from, to)| now >= from && now < to);
		// Everything due by now, datagrams first.
		while net.queue.peek().is_some_and(|d| d.0.at <= now) {
			let Reverse(datagram) = net.queue.pop().expect("peeked");
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
				window = Some((now, now + interval * args.frames as u32));
				delivered_before = viewers.iter().map(|v| v.frames).sum();
			}
			let counted = window.is_some_and(|(from, to)| now >= from && now < to);
			relay.frame(counted, now, &mut net, &chunk, frames_sent as i32);
			frames_sent += 1;
			next_frame = Some(at + interval);
		}
		if let Some((_, to)) = window
			&& now >= to
			&& delivered_after.is_none()
		{
			delivered_after = Some(viewers.iter().map(|v| v.frames).sum::<u64>());
		}
		if delivered_after.is_some() {
			break;
		}
		// On to the next thing due.
		let mut next = net.queue.peek().map(|d| d.0.at);
		let timers = relay
			.conns
			.iter()
			.flatten()
			.filter_map(|c| c.timer)
			.chain(viewers.iter().filter_map(|v| v.timer))
			.chain(next_frame.filter(|_| frames_sent < total_frames))
			.chain(window.map(|(_, to)| to));
		for at in timers {
			next = Some(next.map_or(at, |next: Instant| next.min(at)));
		}
		let next = next.ok_or("nothing left to happen")?.max(now);
		if next > deadline {
			return Err(format!(
				"the run did not finish: {} of {} viewers connected, {frames_sent} frames sent",
				viewers.iter().filter(|v| v.connected).count(),
				args.viewers
			));
		}
		now = next;
	}
	let lost = relay
		.conns
		.iter()
		.flatten()
		.map(|c| c.proto.stats().path.lost_packets)
		.sum();
	Ok(Outcome {
		delivered: delivered_after.unwrap_or(0) - delivered_before,
		sent: relay.sent,
		received: relay.received,
		lost,
	})
}

/// Runs the simulation under callgrind, counting the relay side only.
fn count(args: &Args) -> Result<(u64, Outcome), String> {
	let valgrind = [format!("--toggle-collect={COUNTED_FN}")];
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

/// The commit #15 (relay efficiency) measures against.
const START: &str = "7ac85c2";

/// Counts `args.runs` runs: the median instructions per delivered frame, the spread
/// ((max − min) / median) and the last run's outcome.
fn measure(args: &Args) -> Result<(f64, f64, Outcome), String> {
	// Each run has its own certificate and TLS randomness: counts differ by a fraction of a
	// percent between runs.
	let mut counts = Vec::with_capacity(args.runs);
	let mut outcome = Outcome::default();
	for _ in 0..args.runs {
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
		return match simulate(&args) {
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
	let mut at_relay_shape = None;
	for &fps in &args.rates {
		let args = Args { fps, ..args.clone() };
		let (per_frame, spread, outcome) = match measure(&args) {
			Ok(measured) => measured,
			Err(e) => {
				eprintln!("quic-floor: {e}");
				return ExitCode::FAILURE;
			}
		};
		eprintln!("quic-floor: {fps} fps: {per_frame:.0} instructions per delivered frame");
		if args.viewers == 100 && fps == 5 {
			at_relay_shape = Some(per_frame);
		}
		rows.push(vec![
			format!("fanout:1x{} at {fps} fps", args.viewers),
			format!("{per_frame:.0}"),
			format!("{:.1}", 100.0 * spread),
			format!("{:.3}", outcome.sent as f64 / outcome.delivered as f64),
			format!("{:.3}", outcome.received as f64 / outcome.delivered as f64),
			outcome.delivered.to_string(),
		]);
	}
	let rates: Vec<String> = args.rates.iter().map(u32::to_string).collect();
	let mut table = Table {
		name: "quic-floor".to_owned(),
		title: "quinn-proto's share of a delivered frame: the relay side of the relay benchmark's traffic, \
		        quinn-proto alone"
			.to_owned(),
		unit: "user-space instructions per delivered frame".to_owned(),
		source: format!("callgrind, `--toggle-collect={COUNTED_FN}`: only the relay side's calls into quinn-proto"),
		notes: format!(
			"`cargo run --release -p bench --bin quic-floor -- --viewers {} --fps {} --frames {} --warmup {} \
			 --size {} --latency-us {} --runs {}`. One relay endpoint and {} viewer endpoints in memory \
			 on a simulated clock ({} µs each way, no loss), moq-quic's server and client configuration, \
			 {} warm-up frames then {} measured, one {}-byte chunk per stream, a stream per frame per \
			 viewer; the median of {} runs (`spread` is (max − min)/median; datagrams are the last \
			 run's). What is counted and what is not is in the harness's module docs \
			 (`bench/src/bin/quic-floor.rs`).",
			args.viewers,
			rates.join(","),
			args.frames,
			args.warmup,
			args.size,
			args.latency.as_micros(),
			args.runs,
			args.viewers,
			args.latency.as_micros(),
			args.warmup,
			args.frames,
			args.size,
			args.runs
		),
		columns: vec![
			"shape".to_owned(),
			"instructions/frame".to_owned(),
			"spread %".to_owned(),
			"datagrams out/frame".to_owned(),
			"datagrams in/frame".to_owned(),
			"frames".to_owned(),
		],
		rows,
		after: String::new(),
	};
	if let (Some(relay), Some(per_frame)) = (relay_figures(), at_relay_shape) {
		table.after = format!(
			"The whole relay at 5 fps (`results/{RELAY_RESULTS}` at {}): {:.0} instructions per \
			 delivered frame, of which quinn-proto alone is {:.0}%; the rest, {:.0}, is the relay's \
			 runtime, UDP I/O, send scheduler and MoQ session.",
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
				 {:.0} per delivered frame above quinn-proto for all of that.",
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

	fn small() -> Args {
		Args {
			viewers: 4,
			fps: 50,
			frames: 10,
			warmup: 3,
			..Args::parse(std::iter::empty()).expect("defaults")
		}
	}

	#[test]
	fn every_viewer_reads_every_frame_of_the_window() {
		let outcome = simulate(&small()).expect("the simulation finishes");
		assert_eq!(outcome.delivered, 40, "4 viewers, 10 frames");
		assert_eq!(outcome.lost, 0);
		// A 310-byte frame fits one datagram; each frame is one stream, one packet or more.
		assert!(outcome.sent >= outcome.delivered, "{outcome:?}");
		assert!(outcome.received > 0, "the viewers acknowledge: {outcome:?}");
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
