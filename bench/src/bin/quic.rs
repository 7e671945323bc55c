//! QUIC bulk throughput over loopback: a client endpoint sends N bytes on unidirectional streams
//! to a server endpoint, both driven by kio, with GSO and GRO each on and off.
//!
//! ```text
//! cargo run --release -p bench --bin quic                     # measure, print, write bench/results/throughput.{md,json}
//! cargo run --release -p bench --bin quic -- --bytes 64MiB --repeats 1 --streams 4
//! cargo run -p bench --bin quic -- smoke                      # tiny run, no numbers (the default when unoptimized)
//! ```
//!
//! What the figures taught so far is in docs/quic-throughput.md.
//!
//! Two **placements**: the endpoints on two pinned kio workers (client on worker 0, server on
//! worker 1), and both on one pinned worker (the thread-per-core layout, where sender and receiver
//! share a CPU). Four **variants**: GSO at quinn's batch of [`moq_quic::DEFAULT_GSO_SEGMENTS`]
//! datagrams per `sendmsg` or at 1 (off), and `UDP_GRO` on or off; each setting applies to both
//! endpoints. Each run is a fresh runtime, endpoints, TLS 1.3 handshake (ring) and connection with
//! moq-quic's default transport (CUBIC, MTU discovery from 1200 bytes); the measured interval
//! starts once both ends have completed the handshake and the other worker is parked, and ends
//! when the server has read the last byte. The receiver checks every byte against the sender's
//! pattern (a `memcmp` per chunk, counted in the CPU time: about 1% of it in a `perf` profile).
//! Every configuration runs five times, in interleaved rounds (load on a shared machine drifts
//! over seconds; interleaving spreads it over all configurations); the tables show the run with
//! the median goodput of each, and then every run.
//!
//! What is printed, and where each figure comes from:
//!
//! - **goodput**: stream bytes read by the server over the wall-clock interval, in MB/s (10^6
//!   bytes). The machine is a shared VM: wall time moves with what else runs.
//! - **CPU-seconds per GB**: `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)` ([`kio::process_cpu_time`])
//!   over the interval, user + system time of every thread of the process (both endpoints, and
//!   the loopback path's kernel work done in their context), per 10^9 stream bytes.
//! - **datagrams and `sendmsg`s**: [`Endpoint::stats`] (datagrams produced by quinn-proto and
//!   queued; transmits, one message each) and [`Endpoint::udp_stats`] (kio's socket counters:
//!   successful sends, the `sendmmsg` calls that carried most of them outside the ring, GRO
//!   trains received and the datagrams in them, receive-ring `ENOBUFS`). `io_uring_enter` per
//!   datagram does not count those `sendmmsg` calls; the I/O table prints them beside it.
//! - **`io_uring_enter` calls**: kio's per-worker ring counter (`kio::stats().ring.enters`,
//!   [`kio::Runtime::stats`] for the other worker), summed over the workers, divided by every
//!   datagram both endpoints sent (client data + server ACKs). (`kio::io_counters()` holds
//!   resource counters, not enters.)
//! - **workers on a CPU, waited for a CPU**: each worker thread's `sum_exec_runtime` and
//!   `run_delay` from `/proc/thread-self/schedstat`. The first says whether a side was saturated;
//!   the second is the time it was runnable while other load held its (pinned) CPU, so a run's
//!   exposure to the shared machine is printed next to its figures.
//! - **lost packets, congestion events, cwnd, RTT**: quinn-proto's `ConnectionStats::path` of the
//!   client.
//! - **kernel receive-buffer drops**: `RcvbufErrors` of `/proc/net/snmp`, system-wide (other
//!   processes' drops count too; it is not per socket).
//! - **longest read gap**: the longest interval between two reads of one stream on the server,
//!   by the worker's clock; a stall (a retransmission timeout) shows here.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bench::report::Table;
use bench::timed::{cpu_time, median_by, settle};
use bytes::Bytes;
use kio::sync::Queue;
use kio::time::Deadline;
use kio::{Builder, Runtime};
use moq_quic::{Certificate, Config, Connection, Endpoint, RecvStream, Verification};

const ALPN: &[u8] = b"bench/throughput";
/// Bytes per `SendStream::write`: an application writing 64 KiB buffers.
const WRITE: usize = 64 * 1024;
/// The sent pattern repeats every `PERIOD` bytes; a prime, so a chunk delivered at a wrong offset
/// (by any multiple of a packet or write size) fails the check.
const PERIOD: usize = 251;
const DEFAULT_BYTES: u64 = 256 << 20;
const SMOKE_BYTES: u64 = 4 << 20;
const REPEATS: usize = 5;
/// A run that has not finished by then has stalled: it fails with the counters so far.
const TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, PartialEq, Eq)]
struct Variant {
	gso: bool,
	gro: bool,
}

impl Variant {
	fn label(self) -> &'static str {
		match (self.gso, self.gro) {
			(true, true) => "GSO on, GRO on",
			(false, true) => "GSO off, GRO on",
			(true, false) => "GSO on, GRO off",
			(false, false) => "GSO off, GRO off",
		}
	}

	fn segments(self) -> usize {
		if self.gso { moq_quic::DEFAULT_GSO_SEGMENTS } else { 1 }
	}
}

const VARIANTS: [Variant; 4] = [
	Variant { gso: true, gro: true },
	Variant { gso: false, gro: true },
	Variant { gso: true, gro: false },
	Variant { gso: false, gro: false },
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
	/// Client on worker 0, server on worker 1, each pinned to its own CPU.
	Spread,
	/// Both on worker 0, pinned to one CPU.
	Shared,
}

impl Placement {
	fn label(self) -> &'static str {
		match self {
			Self::Spread => "2 workers",
			Self::Shared => "1 worker",
		}
	}

	fn workers(self) -> usize {
		match self {
			Self::Spread => 2,
			Self::Shared => 1,
		}
	}
}

/// An endpoint's counters over the measured interval.
#[derive(Clone, Copy, Default)]
struct Io {
	/// Datagrams produced (`EndpointStats::datagrams_out`).
	datagrams_out: u64,
	/// Transmits queued, one message each (`EndpointStats::transmits`).
	transmits: u64,
	/// Messages that went out, ring `sendmsg`s and `sendmmsg` messages (kio `UdpStats::sends`).
	sends: u64,
	/// `sendmmsg` calls: system calls outside the ring (kio `UdpStats::batches`).
	batches: u64,
	send_errors: u64,
	gso_fallbacks: u64,
	/// Receive completions (kio `UdpStats::trains`) and the datagrams in them.
	trains: u64,
	datagrams_in: u64,
	enobufs: u64,
	truncated: u64,
}

impl Io {
	fn of(endpoint: &Endpoint) -> Self {
		let stats = endpoint.stats();
		let udp = endpoint.udp_stats().expect("a UDP endpoint");
		Self {
			datagrams_out: stats.datagrams_out,
			transmits: stats.transmits,
			sends: udp.sends,
			batches: udp.batches,
			send_errors: stats.send_errors,
			gso_fallbacks: udp.gso_fallbacks,
			trains: udp.trains,
			datagrams_in: udp.datagrams,
			enobufs: udp.enobufs,
			truncated: udp.truncated,
		}
	}

	fn since(self, start: Self) -> Self {
		Self {
			datagrams_out: self.datagrams_out - start.datagrams_out,
			transmits: self.transmits - start.transmits,
			sends: self.sends - start.sends,
			batches: self.batches - start.batches,
			send_errors: self.send_errors - start.send_errors,
			gso_fallbacks: self.gso_fallbacks - start.gso_fallbacks,
			trains: self.trains - start.trains,
			datagrams_in: self.datagrams_in - start.datagrams_in,
			enobufs: self.enobufs - start.enobufs,
			truncated: self.truncated - start.truncated,
		}
	}

	fn per_transmit(&self) -> f64 {
		ratio(self.datagrams_out, self.transmits)
	}

	fn per_train(&self) -> f64 {
		ratio(self.datagrams_in, self.trains)
	}
}

fn ratio(a: u64, b: u64) -> f64 {
	if b == 0 { f64::NAN } else { a as f64 / b as f64 }
}

/// What the server reports once it has read everything.
struct ServerReport {
	bytes: u64,
	end: Instant,
	longest_gap: Duration,
	io: Io,
	/// The server worker's thread, from the accept to the last read.
	thread: Sched,
}

/// A thread's time on a CPU and time spent runnable but waiting for one
/// (`/proc/thread-self/schedstat`: `sum_exec_runtime`, `run_delay`, in ns).
#[derive(Clone, Copy, Default)]
struct Sched {
	on_cpu: Duration,
	waiting: Duration,
}

impl Sched {
	fn now() -> Self {
		let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
		let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
		let (on_cpu, waiting) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
		Self {
			on_cpu: Duration::from_nanos(on_cpu),
			waiting: Duration::from_nanos(waiting),
		}
	}

	fn since(self, start: Self) -> Self {
		Self {
			on_cpu: self.on_cpu.saturating_sub(start.on_cpu),
			waiting: self.waiting.saturating_sub(start.waiting),
		}
	}
}

#[derive(Clone, Copy)]
struct Run {
	placement: Placement,
	variant: Variant,
	bytes: u64,
	wall: Duration,
	cpu: Duration,
	/// `io_uring_enter` calls of the client's and the server's worker (the same worker when
	/// shared: then all of them are in `client_enters`).
	client_enters: u64,
	server_enters: u64,
	client: Io,
	server: Io,
	lost_packets: u64,
	congestion_events: u64,
	rcvbuf_errors: Option<u64>,
	longest_gap: Duration,
	/// The client's congestion window and smoothed RTT at the end.
	cwnd: u64,
	rtt: Duration,
	/// Worker 0's thread (the client's; both endpoints' when shared) and, when spread, worker 1's
	/// (the server's).
	client_thread: Sched,
	server_thread: Option<Sched>,
}

impl Run {
	fn goodput(&self) -> f64 {
		self.bytes as f64 / 1e6 / self.wall.as_secs_f64()
	}

	fn cpu_per_gb(&self) -> f64 {
		self.cpu.as_secs_f64() / (self.bytes as f64 / 1e9)
	}

	fn enters(&self) -> u64 {
		self.client_enters + self.server_enters
	}

	fn datagrams(&self) -> u64 {
		self.client.datagrams_out + self.server.datagrams_out
	}

	fn enters_per_datagram(&self) -> f64 {
		ratio(self.enters(), self.datagrams())
	}

	/// Each worker's time on a CPU as a share of the wall-clock interval, and the time the
	/// workers spent waiting for a CPU (what other load on the machine took from this run).
	fn busy(&self) -> String {
		let share = |s: Sched| 100.0 * s.on_cpu.as_secs_f64() / self.wall.as_secs_f64();
		match self.server_thread {
			Some(server) => format!("{:.0}% + {:.0}%", share(self.client_thread), share(server)),
			None => format!("{:.0}%", share(self.client_thread)),
		}
	}

	fn waiting(&self) -> Duration {
		self.client_thread.waiting + self.server_thread.map_or(Duration::ZERO, |s| s.waiting)
	}
}

#[derive(Clone, Copy)]
struct Options {
	bytes: u64,
	streams: usize,
	repeats: usize,
	smoke: bool,
	placements: &'static [Placement],
	variants: &'static [Variant],
}

fn parse_size(text: &str) -> Option<u64> {
	let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
	let (number, unit) = text.split_at(split);
	let number: u64 = number.parse().ok()?;
	let scale = match unit.to_ascii_lowercase().as_str() {
		"" | "b" => 1,
		"kib" => 1 << 10,
		"mib" => 1 << 20,
		"gib" => 1 << 30,
		"kb" => 1_000,
		"mb" => 1_000_000,
		"gb" => 1_000_000_000,
		_ => return None,
	};
	number.checked_mul(scale)
}

fn options() -> Options {
	let mut args = std::env::args().skip(1);
	// `cargo test --all-targets` runs this unoptimized: a smoke run, no numbers.
	let mut options = Options {
		bytes: DEFAULT_BYTES,
		streams: 1,
		repeats: REPEATS,
		smoke: cfg!(debug_assertions),
		placements: &[Placement::Spread, Placement::Shared],
		variants: &VARIANTS,
	};
	let usage = "options: --bytes SIZE (e.g. 256MiB, 1GB) --streams N --repeats N --placement spread|shared|both \
		 --variant all|on|gso-off|gro-off|off, smoke";
	while let Some(arg) = args.next() {
		let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value; {usage}"));
		match arg.as_str() {
			// cargo bench passes it to every harness-less bench.
			"--bench" => {}
			"smoke" => options.smoke = true,
			"--bytes" => options.bytes = parse_size(&value()).unwrap_or_else(|| panic!("bad size; {usage}")),
			"--streams" => options.streams = value().parse().unwrap_or_else(|_| panic!("bad count; {usage}")),
			"--repeats" => options.repeats = value().parse().unwrap_or_else(|_| panic!("bad count; {usage}")),
			"--placement" => {
				options.placements = match value().as_str() {
					"spread" => &[Placement::Spread],
					"shared" => &[Placement::Shared],
					"both" => &[Placement::Spread, Placement::Shared],
					_ => panic!("bad placement; {usage}"),
				}
			}
			"--variant" => {
				options.variants = match value().as_str() {
					"all" => &VARIANTS,
					"on" => &VARIANTS[0..1],
					"gso-off" => &VARIANTS[1..2],
					"gro-off" => &VARIANTS[2..3],
					"off" => &VARIANTS[3..4],
					_ => panic!("bad variant; {usage}"),
				}
			}
			_ => panic!("unknown argument {arg}; {usage}"),
		}
	}
	if options.smoke {
		options.bytes = SMOKE_BYTES;
		options.repeats = 1;
	}
	options.streams = options.streams.max(1);
	options.repeats = options.repeats.max(1);
	assert!(options.bytes >= options.streams as u64, "fewer bytes than streams");
	options
}

/// `PERIOD` pattern bytes, then enough more that any `WRITE`-byte window starting in the first
/// period fits.
fn pattern() -> Bytes {
	(0..PERIOD + WRITE)
		.map(|i| (i % PERIOD) as u8 ^ 0x5A)
		.collect::<Vec<u8>>()
		.into()
}

/// Where in the pattern `offset` of stream `index` starts: shifted per stream, so data delivered
/// on the wrong stream fails the check too.
fn pattern_start(index: u64, offset: u64) -> usize {
	((offset + index * 7) % PERIOD as u64) as usize
}

fn local() -> SocketAddr {
	"127.0.0.1:0".parse().unwrap()
}

/// The system-wide UDP `RcvbufErrors` counter, if `/proc/net/snmp` has it.
fn rcvbuf_errors() -> Option<u64> {
	let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
	let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
	let (names, values) = (udp.next()?, udp.next()?);
	let column = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
	values.split_whitespace().nth(column)?.parse().ok()
}

/// `io_uring_enter` calls of worker 0 (this one) and of worker 1, if there is one.
fn enters(rt: &Runtime) -> (u64, u64) {
	let own = kio::stats().ring.enters;
	let other = if rt.workers() > 1 { rt.stats(1).ring.enters } else { 0 };
	(own, other)
}

/// Reads one stream to its end, checking every byte; returns the bytes and the longest gap
/// between two reads.
async fn read_stream(mut recv: RecvStream, pattern: Rc<[u8]>) -> (u64, Duration) {
	let index = recv.id().index();
	let mut offset = 0u64;
	let mut last: Option<Instant> = None;
	let mut gap = Duration::ZERO;
	while let Some(chunk) = recv.read().await.expect("read") {
		// The worker's clock, read once per loop turn: cheaper than a clock call per packet, and
		// fine for gaps of milliseconds.
		let now = kio::time::now();
		if let Some(last) = last {
			gap = gap.max(now - last);
		}
		last = Some(now);
		for piece in chunk.chunks(WRITE) {
			let start = pattern_start(index, offset);
			assert!(
				piece == &pattern[start..start + piece.len()],
				"stream {index}: wrong data at offset {offset}"
			);
			offset += piece.len() as u64;
		}
	}
	(offset, gap)
}

/// The server: accepts one connection, says so, reads `streams` streams to their end, reports,
/// and keeps everything open until told to stop (so the client's last counters are not disturbed
/// by teardown).
async fn serve(
	config: Config,
	addr: Queue<SocketAddr>,
	accepted: Queue<()>,
	report: Queue<ServerReport>,
	stop: Queue<()>,
	streams: usize,
) {
	let endpoint = Endpoint::bind(local(), config).expect("bind the server");
	addr.try_push(endpoint.local_addr()).unwrap();
	let conn = endpoint.accept().await.expect("a connection");
	let (start, sched) = (Io::of(&endpoint), Sched::now());
	accepted.try_push(()).unwrap();
	let pattern: Rc<[u8]> = pattern().to_vec().into();
	let mut readers = Vec::with_capacity(streams);
	for _ in 0..streams {
		let recv = conn.accept_uni().await.expect("a stream");
		readers.push(kio::spawn(read_stream(recv, pattern.clone())));
	}
	let (mut bytes, mut longest_gap) = (0, Duration::ZERO);
	for reader in readers {
		let (n, gap) = reader.await.expect("a reader");
		bytes += n;
		longest_gap = longest_gap.max(gap);
	}
	let end = Instant::now();
	let io = Io::of(&endpoint).since(start);
	let thread = Sched::now().since(sched);
	let _ = report.try_push(ServerReport {
		bytes,
		end,
		longest_gap,
		io,
		thread,
	});
	stop.pop().await;
	drop(conn);
}

async fn write_stream(conn: Connection, bytes: u64, pattern: Bytes) {
	let mut send = conn.open_uni().await.expect("open a stream");
	let index = send.id().index();
	let mut offset = 0;
	while offset < bytes {
		let len = (bytes - offset).min(WRITE as u64) as usize;
		let start = pattern_start(index, offset);
		// A slice of the shared pattern: no copy on the application side, as with a real buffer.
		send.write(pattern.slice(start..start + len)).await.expect("write");
		offset += len as u64;
	}
	send.finish().expect("finish");
}

fn run(cert: &Certificate, placement: Placement, variant: Variant, options: Options) -> Run {
	let server_config = Config::new()
		.with_server(cert, &[ALPN])
		.unwrap()
		.with_gso_segments(variant.segments())
		.with_gro(variant.gro);
	let client_config = Config::new()
		.with_client(&Verification::Fingerprints(vec![cert.fingerprint()]), &[ALPN])
		.unwrap()
		.with_gso_segments(variant.segments())
		.with_gro(variant.gro);
	let rt = Builder::new()
		.workers(placement.workers())
		.pin(true)
		.build()
		.expect("a kio runtime");
	let far = placement.workers() - 1;
	let (addr, accepted, report, stop) = (
		Queue::bounded(1),
		Queue::bounded(1),
		Queue::bounded(1),
		Queue::bounded(1),
	);
	let server = {
		let (addr, accepted, report, stop) = (addr.clone(), accepted.clone(), report.clone(), stop.clone());
		let streams = options.streams;
		rt.spawn_on(far, move || serve(server_config, addr, accepted, report, stop, streams))
	};
	let result = rt.block_on(async {
		let to = addr.pop().await.unwrap();
		let endpoint = Endpoint::bind(local(), client_config).expect("bind the client");
		let conn = endpoint.connect(to, "localhost").expect("connect");
		conn.established().await.expect("handshake");
		accepted.pop().await.unwrap();
		settle(&rt).await;
		let (start, cpu0, enters0, io0, drops0, sched0) = (
			Instant::now(),
			cpu_time(),
			enters(&rt),
			Io::of(&endpoint),
			rcvbuf_errors(),
			Sched::now(),
		);

		let pattern = pattern();
		let share = options.bytes / options.streams as u64;
		let writers: Vec<_> = (0..options.streams)
			.map(|i| {
				// The first stream carries the remainder.
				let bytes = if i == 0 {
					options.bytes - share * (options.streams as u64 - 1)
				} else {
					share
				};
				kio::spawn(write_stream(conn.clone(), bytes, pattern.clone()))
			})
			.collect();

		let mut deadline = Deadline::new(Some(kio::time::now() + TIMEOUT));
		let done = kio::wait(|w| {
			if let Poll::Ready(r) = report.poll_pop(w) {
				return Poll::Ready(r);
			}
			deadline.poll_elapsed(w).map(|()| None)
		})
		.await;
		let Some(done) = done else {
			let path = conn.stats().path;
			panic!(
				"{} {}: no end after {TIMEOUT:?}: client sent {} datagrams, lost {}, cwnd {} bytes, rtt {:?}",
				placement.label(),
				variant.label(),
				endpoint.stats().datagrams_out - io0.datagrams_out,
				path.lost_packets,
				path.cwnd,
				path.rtt,
			);
		};
		let (cpu, client_thread) = (cpu_time() - cpu0, Sched::now().since(sched0));
		for writer in writers {
			writer.await.expect("a writer");
		}
		settle(&rt).await;
		let enters1 = enters(&rt);
		let path = conn.stats().path;
		let run = Run {
			placement,
			variant,
			bytes: done.bytes,
			wall: done.end - start,
			cpu,
			client_enters: enters1.0 - enters0.0,
			server_enters: enters1.1 - enters0.1,
			client: Io::of(&endpoint).since(io0),
			server: done.io,
			lost_packets: path.lost_packets,
			congestion_events: path.congestion_events,
			rcvbuf_errors: rcvbuf_errors().zip(drops0).map(|(b, a)| b - a),
			longest_gap: done.longest_gap,
			cwnd: path.cwnd,
			rtt: path.rtt,
			client_thread,
			server_thread: (placement == Placement::Spread).then_some(done.thread),
		};
		stop.try_push(()).unwrap();
		server.await.expect("the server");
		run
	});
	drop(rt);
	assert_eq!(
		result.bytes, options.bytes,
		"the server read a different number of bytes"
	);
	result
}

fn load() -> String {
	std::fs::read_to_string("/proc/loadavg")
		.map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
		.unwrap_or_else(|_| "?".into())
}

/// The median runs, one row each, as the results table has them.
fn throughput_rows(rows: &[Run]) -> Vec<Vec<String>> {
	rows.iter()
		.map(|r| {
			vec![
				r.placement.label().to_owned(),
				r.variant.label().to_owned(),
				format!("{:.1}", r.goodput()),
				format!("{:.3}", r.wall.as_secs_f64()),
				format!("{:.3}", r.cpu.as_secs_f64()),
				format!("{:.3}", r.cpu_per_gb()),
				r.busy(),
				format!("{:.0}", r.waiting().as_secs_f64() * 1e3),
				format!("{:.4}", r.enters_per_datagram()),
			]
		})
		.collect()
}

fn congestion_table(rows: &[Run]) -> String {
	let mut out = String::from(
		"| placement | variant | lost packets | congestion events | cwnd at end (kB) | smoothed RTT at end (µs) | longest read gap (ms) | kernel RcvbufErrors | server rx ENOBUFS |\n\
		 |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
	);
	for r in rows {
		out += &format!(
			"| {} | {} | {} | {} | {:.0} | {} | {:.1} | {} | {} |\n",
			r.placement.label(),
			r.variant.label(),
			r.lost_packets,
			r.congestion_events,
			r.cwnd as f64 / 1e3,
			r.rtt.as_micros(),
			r.longest_gap.as_secs_f64() * 1e3,
			r.rcvbuf_errors.map_or_else(|| "?".into(), |d| d.to_string()),
			r.server.enobufs,
		);
	}
	out
}

fn io_table(rows: &[Run]) -> String {
	let mut out = String::from(
		"| placement | variant | client datagrams out | client messages sent | client datagrams per message | server datagrams out (ACKs) | server datagrams per message | server GRO datagrams per train | client GRO datagrams per train | io_uring_enter (client worker + server worker) | sendmmsg (client + server) |\n\
		 |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
	);
	for r in rows {
		let enters = match r.placement {
			Placement::Spread => format!("{} + {}", r.client_enters, r.server_enters),
			Placement::Shared => format!("{} (one worker)", r.enters()),
		};
		out += &format!(
			"| {} | {} | {} | {} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {} | {} + {} |\n",
			r.placement.label(),
			r.variant.label(),
			r.client.datagrams_out,
			r.client.sends,
			r.client.per_transmit(),
			r.server.datagrams_out,
			r.server.per_transmit(),
			r.server.per_train(),
			r.client.per_train(),
			enters,
			r.client.batches,
			r.server.batches,
		);
	}
	out
}

fn runs_table(all: &[Run]) -> String {
	let mut out = String::from(
		"| placement | variant | goodput (MB/s) | CPU-s per GB | io_uring_enter per datagram | lost packets | waited for a CPU (ms) |\n\
		 |---|---|---:|---:|---:|---:|---:|\n",
	);
	for r in all {
		out += &format!(
			"| {} | {} | {:.1} | {:.3} | {:.4} | {} | {:.0} |\n",
			r.placement.label(),
			r.variant.label(),
			r.goodput(),
			r.cpu_per_gb(),
			r.enters_per_datagram(),
			r.lost_packets,
			r.waiting().as_secs_f64() * 1e3,
		);
	}
	out
}

fn check(r: &Run) {
	// Counters that must agree, or the figures above mean something else than they say.
	assert_eq!(r.client.send_errors + r.server.send_errors, 0, "send errors");
	assert_eq!(r.client.gso_fallbacks + r.server.gso_fallbacks, 0, "GSO fell back");
	assert_eq!(r.client.truncated + r.server.truncated, 0, "truncated trains");
}

fn main() {
	let options = options();
	let cert = Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY).unwrap();
	let load_before = load();
	// Rounds outermost: load on the shared machine drifts over seconds, and interleaving spreads
	// it over every configuration instead of letting it land on one configuration's repeats.
	let mut all = Vec::new();
	for _ in 0..options.repeats {
		for &placement in options.placements {
			for &variant in options.variants {
				let r = run(&cert, placement, variant, options);
				check(&r);
				eprintln!(
					"{}, {}: {:.1} MB/s, {:.3} CPU-s/GB, {:.4} enters/datagram, {} lost, waited {:.0} ms for a CPU",
					placement.label(),
					variant.label(),
					r.goodput(),
					r.cpu_per_gb(),
					r.enters_per_datagram(),
					r.lost_packets,
					r.waiting().as_secs_f64() * 1e3,
				);
				all.push(r);
			}
		}
	}
	let mut medians = Vec::new();
	for &placement in options.placements {
		for &variant in options.variants {
			let runs = all
				.iter()
				.filter(|r| r.placement == placement && r.variant == variant)
				.copied()
				.collect();
			medians.push(median_by(runs, Run::goodput));
		}
	}
	all.sort_by_key(|r| {
		(
			options.placements.iter().position(|&p| p == r.placement),
			VARIANTS.iter().position(|&v| v == r.variant),
		)
	});
	if options.smoke {
		println!("throughput bench smoke run: ok ({} runs)", all.len());
		return;
	}
	let load_after = load();
	let notes = format!(
		"QUIC bulk transfer over loopback (moq-quic on kio, quinn-proto 0.11.19, rustls/ring): {} bytes ({:.1} MiB) \
		 client to server on {} unidirectional stream(s), written in {} KiB slices; GSO batch {} when on; \
		 median of {} interleaved rounds by goodput. `bench/src/bin/quic.rs` describes the set-up; \
		 docs/quic-throughput.md reads the figures. Placements: \"2 workers\" = client on kio worker 0 and server on \
		 worker 1, each pinned to its own CPU; \"1 worker\" = both endpoints on one pinned worker.\n\n\
		 - System: {} (a shared VM: wall-clock figures move with other load); load average before {load_before}, after {load_after}\n\
		 - Goodput: stream bytes read by the server / wall-clock time from the first write to the last read, MB = 10^6 bytes\n\
		 - CPU: `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)` (`kio::process_cpu_time`) over the same interval plus the tail until the \
		 client saw the end: user + system time of every thread, both endpoints; per GB = per 10^9 stream bytes\n\
		 - Workers on a CPU: each worker thread's `sum_exec_runtime` (`/proc/thread-self/schedstat`) / wall time (client worker + \
		 server worker when spread); waited for a CPU: their `run_delay`, time runnable but not running (other load's share)\n\
		 - io_uring_enter per datagram: `io_uring_enter` calls of every worker (kio `Stats::ring.enters`) / every datagram both \
		 endpoints sent (client data + server ACKs, `EndpointStats::datagrams_out`)\n\
		 - Datagrams per message (a datagram or a GSO train): `EndpointStats::datagrams_out / transmits`; messages sent = kio \
		 `UdpStats::sends` (ring `sendmsg`s and `sendmmsg` messages); sendmmsg = kio `UdpStats::batches`; GRO datagrams per \
		 train: kio `UdpStats::datagrams / trains` of the receiving socket\n\
		 - Lost packets, congestion events, cwnd, RTT: the client's quinn-proto `PathStats`; kernel RcvbufErrors: \
		 `/proc/net/snmp`, system-wide (datagrams or GRO trains dropped at a full socket receive buffer); server rx ENOBUFS: \
		 kio `UdpStats::enobufs` (the receive ring ran out of buffers and was re-armed; nothing is lost by it); longest read \
		 gap: longest interval between two reads of one stream on the server\n\n## Throughput and CPU (median runs)",
		options.bytes,
		options.bytes as f64 / f64::from(1 << 20),
		options.streams,
		WRITE / 1024,
		moq_quic::DEFAULT_GSO_SEGMENTS,
		options.repeats,
		bench::report::system(),
	);
	let after = format!(
		"## Loss and congestion (median runs)\n\n{}\n## I/O batching (median runs)\n\n{}\n## Every run\n\n{}",
		congestion_table(&medians),
		io_table(&medians),
		runs_table(&all)
	);
	let table = Table {
		name: "throughput".into(),
		title: "QUIC throughput over loopback".into(),
		unit: "MB/s (wall clock), CPU-seconds per GB, io_uring_enter per datagram".into(),
		source: "wall clock; clock_gettime(CLOCK_PROCESS_CPUTIME_ID) of the process; kio's ring counters; \
			quinn-proto PathStats; /proc/thread-self/schedstat"
			.into(),
		notes,
		columns: [
			"placement",
			"variant",
			"goodput (MB/s, wall)",
			"wall (s)",
			"CPU (s)",
			"CPU-s per GB",
			"workers on a CPU (% of wall)",
			"waited for a CPU (ms)",
			"io_uring_enter per datagram",
		]
		.map(String::from)
		.to_vec(),
		rows: throughput_rows(&medians),
		after,
	};
	println!("{}", table.markdown(&bench::report::revision()));
	// A partial matrix is an experiment: printed, not recorded over the full one.
	if options.placements.len() < 2 || options.variants.len() < VARIANTS.len() {
		return;
	}
	table.save().expect("writing bench/results/throughput.{md,json}");
	println!("wrote bench/results/throughput.md");
}
