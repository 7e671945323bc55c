//! UDP: kio's io_uring path against a plain blocking `std::net` loop, on the same traffic, in one
//! run.
//!
//! ```text
//! cargo run --release -p bench --bin udp -- [--save]   # measure, print; --save writes bench/results/udp.{md,json}
//! cargo run -p bench --bin udp -- smoke               # tiny run, no numbers (the default when unoptimized)
//! ```
//!
//! Two ends on loopback, in two **placements**: each end pinned to its own CPU (two kio workers,
//! sender on worker 0 and receiver on worker 1; or two std threads), and both ends pinned to one
//! CPU (one kio worker running both tasks, the thread-per-core layout; or two std threads). The
//! std sockets get the same 4 MiB buffers as kio's. Datagrams carry 1200 bytes (a QUIC-sized
//! payload).
//!
//! - **bulk**: the sender sends `BULK` datagrams; the receiver acknowledges every 256 with the
//!   cumulative count, and the sender keeps at most 2048 unacknowledged (so neither side
//!   overruns the 4 MiB receive buffer and nothing is lost: a lost datagram would show as a
//!   stall, which is counted and printed). std: one `send_to` and one `recv_from` per datagram.
//!   kio GSO/GRO: 54 datagrams per `sendmsg` (`UDP_SEGMENT`; 54 × 1200 bytes is the most one UDP
//!   send carries), received as GRO trains. kio no GSO (an ablation): the same trains, sent as 54
//!   `sendmsg` SQEs staged together.
//! - **ping-pong**: one datagram out, the echo back, `PINGS` times.
//!
//! **CPU time** is `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)` ([`kio::process_cpu_time`]): user +
//! system time of every thread of this process, i.e. both ends, including the kernel work of the
//! loopback path that runs in their context (softirq work handed to `ksoftirqd` would not be
//! counted; at these rates on loopback it runs inline). Datagrams per CPU-second is datagrams delivered over that time. `io_uring_enter` calls
//! are kio's per-worker counters, summed over both workers.

#![forbid(unsafe_code)]

use std::net::{SocketAddr, UdpSocket as StdUdp};
use std::task::Poll;
use std::time::{Duration, Instant};

use bench::report::Table;
use bench::timed::{cpu_time, median_by, settle};
use kio::net::{Transmit, UdpConfig, UdpSocket};
use kio::time::Deadline;
use kio::{Builder, Runtime};

const PAYLOAD: usize = 1200;
/// Datagrams per GSO train: as many 1200-byte datagrams as one UDP send may carry (65,507 bytes of
/// payload; 64 × 1200 is refused with `EMSGSIZE`).
const TRAIN: usize = 54;
const ACK_EVERY: u64 = 256;
const WINDOW: u64 = 2048;
const RCVBUF: usize = 4 << 20;
/// How long a sender waits for an acknowledgement before counting a stall and going on.
const STALL: Duration = Duration::from_millis(200);
const FIN: &[u8] = b"F";
const REPEATS: usize = 3;

#[derive(Clone, Copy)]
struct Scale {
	bulk: u64,
	pings: u64,
	repeats: usize,
}

#[derive(Clone, Debug)]
struct Measure {
	name: &'static str,
	placement: Placement,
	datagrams: u64,
	wall: Duration,
	cpu: Duration,
	/// kio only: `io_uring_enter` calls of both workers.
	enters: Option<u64>,
	/// kio bulk only: times the receive ran out of buffers (`ENOBUFS`) and was re-armed.
	enobufs: Option<u64>,
	stalls: u64,
}

impl Measure {
	fn per_cpu_second(&self) -> f64 {
		self.datagrams as f64 / self.cpu.as_secs_f64()
	}

	fn per_second(&self) -> f64 {
		self.datagrams as f64 / self.wall.as_secs_f64()
	}

	fn enters_per_datagram(&self) -> Option<f64> {
		self.enters.map(|e| e as f64 / self.datagrams as f64)
	}
}

/// A blocking std socket with a 4 MiB receive buffer (std cannot size it; kio sets it up, with
/// GRO off, and hands the fd over).
fn std_socket() -> StdUdp {
	let config = UdpConfig::new().gro(false).recv_buffer(RCVBUF).send_buffer(RCVBUF);
	let socket = UdpSocket::bind_with(local(), &config).unwrap();
	socket.into_std().unwrap()
}

/// Where the two ends run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Placement {
	/// Each end pinned to its own CPU: two kio workers, or two std threads.
	Spread,
	/// Both ends pinned to one CPU: one kio worker running both tasks, or two std threads.
	Shared,
}

impl Placement {
	fn cpu_of(self, end: usize) -> usize {
		match self {
			Self::Spread => end,
			Self::Shared => 0,
		}
	}

	fn label(self) -> &'static str {
		match self {
			Self::Spread => "ends on 2 CPUs",
			Self::Shared => "ends on 1 CPU",
		}
	}
}

// ---- std::net ----

fn std_bulk(n: u64, placement: Placement) -> Measure {
	let rx = std_socket();
	let tx = std_socket();
	tx.set_read_timeout(Some(STALL)).unwrap();
	let to = rx.local_addr().unwrap();
	let (start, cpu0) = (Instant::now(), cpu_time());
	let receiver = std::thread::spawn(move || {
		kio::pin_current_thread(placement.cpu_of(1)).unwrap();
		let mut buf = vec![0u8; 2048];
		let mut count = 0u64;
		loop {
			let (len, from) = rx.recv_from(&mut buf).unwrap();
			if len == FIN.len() {
				return count;
			}
			count += 1;
			if count.is_multiple_of(ACK_EVERY) {
				rx.send_to(&count.to_le_bytes(), from).unwrap();
			}
		}
	});
	let sender = std::thread::spawn(move || {
		kio::pin_current_thread(placement.cpu_of(0)).unwrap();
		let payload = vec![0xA5u8; PAYLOAD];
		let (mut sent, mut acked, mut stalls) = (0u64, 0u64, 0u64);
		let mut ack = [0u8; 8];
		while sent < n {
			while sent - acked >= WINDOW {
				match tx.recv(&mut ack) {
					Ok(8) => acked = acked.max(u64::from_le_bytes(ack)),
					Ok(_) => {}
					Err(_) => {
						stalls += 1;
						acked = sent;
					}
				}
			}
			tx.send_to(&payload, to).unwrap();
			sent += 1;
		}
		tx.send_to(FIN, to).unwrap();
		stalls
	});
	let stalls = sender.join().unwrap();
	let datagrams = receiver.join().unwrap();
	Measure {
		name: "std bulk",
		placement,
		datagrams,
		wall: start.elapsed(),
		cpu: cpu_time() - cpu0,
		enters: None,
		enobufs: None,
		stalls,
	}
}

fn std_ping_pong(n: u64, placement: Placement) -> Measure {
	let server = std_socket();
	let client = std_socket();
	let to = server.local_addr().unwrap();
	let (start, cpu0) = (Instant::now(), cpu_time());
	let echo = std::thread::spawn(move || {
		kio::pin_current_thread(placement.cpu_of(1)).unwrap();
		let mut buf = vec![0u8; 2048];
		loop {
			let (len, from) = server.recv_from(&mut buf).unwrap();
			if len == FIN.len() {
				return;
			}
			server.send_to(&buf[..len], from).unwrap();
		}
	});
	let pinger = std::thread::spawn(move || {
		kio::pin_current_thread(placement.cpu_of(0)).unwrap();
		let payload = vec![0x5Au8; PAYLOAD];
		let mut buf = vec![0u8; 2048];
		for _ in 0..n {
			client.send_to(&payload, to).unwrap();
			let len = client.recv(&mut buf).unwrap();
			assert_eq!(len, PAYLOAD);
		}
		client.send_to(FIN, to).unwrap();
	});
	pinger.join().unwrap();
	echo.join().unwrap();
	Measure {
		name: "std ping-pong",
		placement,
		datagrams: 2 * n,
		wall: start.elapsed(),
		cpu: cpu_time() - cpu0,
		enters: None,
		enobufs: None,
		stalls: 0,
	}
}

// ---- kio ----

/// Spread: two pinned workers, the second end on worker 1. Shared: one pinned worker for both.
fn runtime(placement: Placement) -> (Runtime, usize) {
	let (workers, far) = match placement {
		Placement::Spread => (2, 1),
		Placement::Shared => (1, 0),
	};
	let rt = Builder::new().workers(workers).pin(true).build().expect("kio runtime");
	(rt, far)
}

fn local() -> SocketAddr {
	"127.0.0.1:0".parse().unwrap()
}

fn config() -> UdpConfig {
	UdpConfig::new()
		.recv_buffer(RCVBUF)
		.send_buffer(RCVBUF)
		.rx_buffers(64)
		.max_payload(PAYLOAD)
}

/// `io_uring_enter` calls of every worker so far.
fn enters(rt: &Runtime) -> u64 {
	kio::stats().ring.enters + (1..rt.workers()).map(|i| rt.stats(i).ring.enters).sum::<u64>()
}

/// The next acknowledgement, or `None` after `STALL`.
async fn ack(tx: &UdpSocket) -> Option<u64> {
	let mut deadline = Deadline::new(Some(kio::time::now() + STALL));
	kio::wait(|w| {
		if let Poll::Ready(train) = tx.poll_recv(w) {
			let train = train.unwrap();
			let count = train
				.segments()
				.filter_map(|d| d.try_into().ok())
				.map(u64::from_le_bytes)
				.max();
			return Poll::Ready(count);
		}
		deadline.poll_elapsed(w).map(|()| None)
	})
	.await
}

fn kio_bulk(n: u64, gso: bool, placement: Placement) -> Measure {
	let (rt, far) = runtime(placement);
	let addr = kio::sync::Queue::bounded(1);
	let addr_tx = addr.clone();
	let receiver = rt.spawn_on(far, move || async move {
		let rx = UdpSocket::bind_with(local(), &config()).unwrap();
		addr_tx.try_push(rx.local_addr()).unwrap();
		let mut count = 0u64;
		let mut next_ack = ACK_EVERY;
		loop {
			let train = rx.recv().await.unwrap();
			if train.payload() == FIN {
				return (count, rx.stats().enobufs);
			}
			count += train.datagrams() as u64;
			if count >= next_ack {
				rx.send_to(&count.to_le_bytes(), train.peer()).await.unwrap();
				next_ack = (count / ACK_EVERY + 1) * ACK_EVERY;
			}
		}
	});
	let measure = rt.block_on(async {
		let to = addr.pop().await.unwrap();
		let tx = UdpSocket::bind_with(local(), &config()).unwrap();
		tx.set_gso_enabled(gso);
		let payload = vec![0xA5u8; PAYLOAD * TRAIN];
		settle(&rt).await;
		let (start, cpu0, enters0) = (Instant::now(), cpu_time(), enters(&rt));
		let (mut sent, mut acked, mut stalls) = (0u64, 0u64, 0u64);
		while sent < n {
			while sent - acked >= WINDOW {
				match ack(&tx).await {
					Some(count) => acked = acked.max(count),
					None => {
						stalls += 1;
						acked = sent;
					}
				}
			}
			let k = (n - sent).min(TRAIN as u64) as usize;
			let t = Transmit::new(to, &payload[..k * PAYLOAD]).segments(PAYLOAD);
			tx.send(&t).await.unwrap();
			sent += k as u64;
		}
		tx.send_to(FIN, to).await.unwrap();
		let (datagrams, enobufs) = receiver.await.unwrap();
		let (wall, cpu) = (start.elapsed(), cpu_time() - cpu0);
		settle(&rt).await;
		Measure {
			name: if gso { "kio bulk, GSO/GRO" } else { "kio bulk, no GSO" },
			placement,
			datagrams,
			wall,
			cpu,
			enters: Some(enters(&rt) - enters0),
			enobufs: Some(enobufs),
			stalls,
		}
	});
	drop(rt);
	measure
}

fn kio_ping_pong(n: u64, placement: Placement) -> Measure {
	let (rt, far) = runtime(placement);
	let addr = kio::sync::Queue::bounded(1);
	let addr_tx = addr.clone();
	let server = rt.spawn_on(far, move || async move {
		let socket = UdpSocket::bind_with(local(), &config()).unwrap();
		addr_tx.try_push(socket.local_addr()).unwrap();
		loop {
			let train = socket.recv().await.unwrap();
			if train.payload() == FIN {
				return;
			}
			for datagram in train.segments() {
				socket.send_to(datagram, train.peer()).await.unwrap();
			}
		}
	});
	let measure = rt.block_on(async {
		let to = addr.pop().await.unwrap();
		let client = UdpSocket::bind_with(local(), &config()).unwrap();
		let payload = vec![0x5Au8; PAYLOAD];
		settle(&rt).await;
		let (start, cpu0, enters0) = (Instant::now(), cpu_time(), enters(&rt));
		for _ in 0..n {
			client.send_to(&payload, to).await.unwrap();
			let train = client.recv().await.unwrap();
			assert_eq!(train.payload().len(), PAYLOAD);
		}
		client.send_to(FIN, to).await.unwrap();
		server.await.unwrap();
		let (wall, cpu) = (start.elapsed(), cpu_time() - cpu0);
		settle(&rt).await;
		Measure {
			name: "kio ping-pong",
			placement,
			datagrams: 2 * n,
			wall,
			cpu,
			enters: Some(enters(&rt) - enters0),
			enobufs: None,
			stalls: 0,
		}
	});
	drop(rt);
	measure
}

fn rows(measures: &[Measure]) -> Vec<Vec<String>> {
	measures
		.iter()
		.map(|m| {
			vec![
				m.placement.label().to_owned(),
				m.name.to_owned(),
				m.datagrams.to_string(),
				format!("{:.3}", m.wall.as_secs_f64()),
				format!("{:.3}", m.cpu.as_secs_f64()),
				format!("{:.0}", m.per_cpu_second()),
				format!("{:.0}", m.per_second()),
				m.enters_per_datagram()
					.map_or_else(|| "n/a (no ring)".into(), |e| format!("{e:.4}")),
				m.stalls.to_string(),
				m.enobufs.map_or_else(|| "-".into(), |e| e.to_string()),
			]
		})
		.collect()
}

struct Ratio {
	placement: Placement,
	traffic: &'static str,
	ratio: f64,
}

fn main() {
	let args: Vec<String> = std::env::args().skip(1).collect();
	// `cargo test --all-targets` runs this unoptimized: a smoke run, no numbers.
	let smoke = args.iter().any(|a| a == "smoke") || cfg!(debug_assertions);
	let scale = if smoke {
		Scale {
			bulk: 3000,
			pings: 100,
			repeats: 1,
		}
	} else {
		Scale {
			bulk: 500_000,
			pings: 25_000,
			repeats: REPEATS,
		}
	};
	let runs = |f: &dyn Fn() -> Measure| median_by((0..scale.repeats).map(|_| f()).collect(), Measure::per_cpu_second);
	let mut rows = Vec::new();
	let mut ratios = Vec::new();
	for placement in [Placement::Spread, Placement::Shared] {
		let std_bulk = runs(&|| std_bulk(scale.bulk, placement));
		let gso = runs(&|| kio_bulk(scale.bulk, true, placement));
		let no_gso = runs(&|| kio_bulk(scale.bulk, false, placement));
		let std_pp = runs(&|| std_ping_pong(scale.pings, placement));
		let kio_pp = runs(&|| kio_ping_pong(scale.pings, placement));
		for (traffic, kio, std) in [
			("bulk, GSO/GRO", &gso, &std_bulk),
			("bulk, no GSO", &no_gso, &std_bulk),
			("ping-pong", &kio_pp, &std_pp),
		] {
			ratios.push(Ratio {
				placement,
				traffic,
				ratio: kio.per_cpu_second() / std.per_cpu_second(),
			});
		}
		rows.extend([std_bulk, gso, no_gso, std_pp, kio_pp]);
	}
	for m in &rows {
		assert!(m.datagrams > 0, "{} delivered nothing", m.name);
	}
	if smoke {
		println!("udp bench smoke run: ok ({} scenarios)", rows.len());
		return;
	}
	let mut summary = String::new();
	for r in &ratios {
		summary += &format!(
			"- {}, {}: kio / std = **{:.2}x** datagrams per CPU-second\n",
			r.placement.label(),
			r.traffic,
			r.ratio
		);
	}
	for m in rows.iter().filter(|m| m.name == "kio bulk, GSO/GRO") {
		let e = m.enters_per_datagram().unwrap();
		summary += &format!(
			"- {}, kio bulk with GSO/GRO: **{e:.4} io_uring_enter calls per datagram** (target < 0.05: {})\n",
			m.placement.label(),
			if e < 0.05 { "met" } else { "NOT met" }
		);
	}
	let table = Table {
		name: "udp".into(),
		title: "UDP: kio (io_uring) against blocking std::net".into(),
		unit: "datagrams per CPU-second (and per wall-clock second)".into(),
		source: "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) (kio::process_cpu_time): user + system time of the \
			whole process, both ends and the loopback path's kernel work in their context; kio's per-worker \
			io_uring_enter counters"
			.into(),
		notes: format!(
			"`bench/src/bin/udp.rs` describes the traffic. {}. Loopback, {PAYLOAD}-byte datagrams, median of {} \
			 runs by datagrams per CPU-second. Two placements: each end pinned to its own CPU (kio: two workers; \
			 std: two threads), and both ends pinned to one CPU (kio: one worker running both tasks; std: two \
			 threads). Bulk: {} datagrams, acknowledged every {ACK_EVERY}, at most {WINDOW} in flight; kio sends \
			 trains of {TRAIN} (the most 1200-byte datagrams one UDP send carries). Ping-pong: {} round trips \
			 (2 datagrams each).",
			bench::report::system(),
			scale.repeats,
			scale.bulk,
			scale.pings
		),
		columns: [
			"placement",
			"scenario",
			"datagrams",
			"wall (s)",
			"CPU (s)",
			"datagrams/CPU-second",
			"datagrams/s (wall)",
			"io_uring_enter/datagram",
			"stalls",
			"rx ENOBUFS",
		]
		.map(String::from)
		.to_vec(),
		rows: self::rows(&rows),
		after: summary,
	};
	println!("{}", table.markdown(&bench::report::revision()));
	if std::env::args().any(|arg| arg == "--save") {
		table.save().expect("writing bench/results/udp.{md,json}");
	}
}
