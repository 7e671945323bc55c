//! The workloads, what one operation is in each, and the meter every runtime's code uses.

use std::time::{Duration, Instant};

use stats_alloc::INSTRUMENTED_SYSTEM;

/// UDP payload size: a QUIC-sized datagram.
pub const DATAGRAM: usize = 1200;
/// Datagrams a bulk sender may have unacknowledged: 64 take about 150 KB of a receive buffer (the
/// kernel charges each 1200-byte datagram its whole buffer, about 2.3 KB), under Linux's default
/// 208 KB, so loopback drops nothing whatever the runtime (at 128 glommio's receiver fell behind
/// and a lost datagram stalled the run).
pub const WINDOW: u64 = 64;
/// A bulk receiver acknowledges every this many datagrams (the cumulative count, 8 bytes).
pub const ACK_EVERY: u64 = 16;
/// Datagrams per send in the GSO row: one acknowledgement's worth, 19,200 bytes in one `sendmsg`.
pub const TRAIN: u64 = ACK_EVERY;
/// A GRO receiver's buffer: a whole train, whatever the kernel coalesces (UDP's largest payload).
pub const GRO_BUFFER: usize = 65_535;
/// Live timers in the timer row.
pub const TIMERS: u64 = 10_000;
/// Connections of the many-connections echo row.
pub const CONNECTIONS: u64 = 100;

/// A workload. Every runtime runs it on one thread (the thread-per-core layout), both ends in
/// the same process, over loopback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Row {
	/// One 1200-byte datagram out and its echo back: an operation is a round trip.
	#[value(name = "udp-ping-pong")]
	UdpPingPong,
	/// 1200-byte datagrams one way with a 64-datagram window, acknowledged every 16, no GSO: an
	/// operation is a datagram delivered.
	#[value(name = "udp-bulk")]
	UdpBulk,
	/// The same traffic with segmentation offload: the sender hands over trains of 16 datagrams
	/// (GSO, one send each) and the receiver takes them coalesced (GRO): an operation is a
	/// datagram delivered.
	#[value(name = "udp-bulk-gso")]
	UdpBulkGso,
	/// TCP echo of 64-byte messages over one connection: an operation is a round trip.
	#[value(name = "tcp-echo-64")]
	TcpEcho64,
	/// TCP echo of 16 KiB messages over one connection: an operation is a round trip.
	#[value(name = "tcp-echo-16k")]
	TcpEcho16k,
	/// TCP echo of 64-byte messages over 100 connections at once: an operation is a round trip.
	#[value(name = "tcp-echo-64x100")]
	TcpEcho64x100,
	/// TCP echo of 16 KiB messages over 100 connections at once: an operation is a round trip.
	#[value(name = "tcp-echo-16kx100")]
	TcpEcho16kx100,
	/// Spawn a task and join it, one after the other: an operation is a spawn and its join.
	#[value(name = "spawn-join")]
	SpawnJoin,
	/// 10,000 live timers of 1 ms, each re-armed as it fires: an operation is a timer firing.
	#[value(name = "timers")]
	Timers,
	/// A task waits for a one-shot channel that a plain thread completes, one after another: an
	/// operation is a wake that crosses threads (and the runtime's park and unpark around it).
	#[value(name = "cross-thread-wake")]
	CrossThreadWake,
	/// QUIC on loopback, both endpoints on the runtime: 256 MiB over one stream, written in
	/// 64 KiB pieces: an operation is a MiB delivered.
	#[value(name = "quic-256mib")]
	Quic256MiB,
	/// QUIC on loopback: 1,000 unidirectional streams of 1 KiB each, opened one after another:
	/// an operation is a stream delivered.
	#[value(name = "quic-1000-streams")]
	Quic1000Streams,
}

impl Row {
	/// Every row, in the order of the results.
	pub const ALL: [Self; 12] = [
		Self::UdpPingPong,
		Self::UdpBulk,
		Self::UdpBulkGso,
		Self::TcpEcho64,
		Self::TcpEcho16k,
		Self::TcpEcho64x100,
		Self::TcpEcho16kx100,
		Self::SpawnJoin,
		Self::Timers,
		Self::CrossThreadWake,
		Self::Quic256MiB,
		Self::Quic1000Streams,
	];

	/// Its name in the results and on the command line.
	pub fn name(self) -> &'static str {
		match self {
			Self::UdpPingPong => "udp-ping-pong",
			Self::UdpBulk => "udp-bulk",
			Self::UdpBulkGso => "udp-bulk-gso",
			Self::TcpEcho64 => "tcp-echo-64",
			Self::TcpEcho16k => "tcp-echo-16k",
			Self::TcpEcho64x100 => "tcp-echo-64x100",
			Self::TcpEcho16kx100 => "tcp-echo-16kx100",
			Self::SpawnJoin => "spawn-join",
			Self::Timers => "timers",
			Self::CrossThreadWake => "cross-thread-wake",
			Self::Quic256MiB => "quic-256mib",
			Self::Quic1000Streams => "quic-1000-streams",
		}
	}

	/// Operations per measurement: enough for tens of milliseconds of CPU on every runtime.
	pub fn ops(self) -> u64 {
		match self {
			Self::UdpPingPong => 20_000,
			Self::UdpBulk => 200_000,
			Self::UdpBulkGso => 1_000_000,
			Self::TcpEcho64 => 20_000,
			Self::TcpEcho16k => 5_000,
			Self::TcpEcho64x100 => 20_000,
			Self::TcpEcho16kx100 => 5_000,
			Self::SpawnJoin => 200_000,
			Self::Timers => 5 * TIMERS,
			Self::CrossThreadWake => 20_000,
			Self::Quic256MiB => 256,
			Self::Quic1000Streams => 1000,
		}
	}

	/// What one operation is, for the table.
	pub fn unit(self) -> &'static str {
		match self {
			Self::UdpPingPong | Self::TcpEcho64 | Self::TcpEcho16k | Self::TcpEcho64x100 | Self::TcpEcho16kx100 => {
				"round trip"
			}
			Self::UdpBulk | Self::UdpBulkGso => "datagram",
			Self::SpawnJoin => "spawn + join",
			Self::Timers => "timer firing",
			Self::CrossThreadWake => "wake",
			Self::Quic256MiB => "MiB",
			Self::Quic1000Streams => "stream",
		}
	}

	/// The message size of an echo row.
	pub fn message(self) -> usize {
		match self {
			Self::TcpEcho16k | Self::TcpEcho16kx100 => 16 << 10,
			_ => 64,
		}
	}

	/// Connections of an echo row.
	pub fn connections(self) -> u64 {
		match self {
			Self::TcpEcho64x100 | Self::TcpEcho16kx100 => CONNECTIONS,
			_ => 1,
		}
	}
}

/// Bytes a QUIC writer hands over at a time.
pub const QUIC_WRITE: usize = 64 << 10;
/// Bytes of each short stream.
pub const SHORT_STREAM: usize = 1024;
/// The ALPN both QUIC ends speak.
pub const QUIC_ALPN: &str = "bench";

/// What one measurement took.
#[derive(Clone, Copy, Debug, Default)]
pub struct Measured {
	/// User + system CPU time of the process over the work.
	pub cpu: Duration,
	/// Wall-clock time over the work.
	pub wall: Duration,
	/// Heap allocations over the work.
	pub allocations: u64,
}

/// Started before the work, stopped after it.
pub struct Meter {
	cpu: Duration,
	wall: Instant,
	allocations: usize,
}

impl Meter {
	/// Reads the clocks and the allocation count now.
	pub fn start() -> Self {
		Self {
			cpu: kio::process_cpu_time().expect("CLOCK_PROCESS_CPUTIME_ID"),
			wall: Instant::now(),
			allocations: INSTRUMENTED_SYSTEM.stats().allocations,
		}
	}

	/// What passed since [`start`](Self::start).
	pub fn stop(self) -> Measured {
		Measured {
			cpu: kio::process_cpu_time().expect("CLOCK_PROCESS_CPUTIME_ID") - self.cpu,
			wall: self.wall.elapsed(),
			allocations: (INSTRUMENTED_SYSTEM.stats().allocations - self.allocations) as u64,
		}
	}
}

/// The loopback address with any port.
pub fn loopback() -> std::net::SocketAddr {
	"127.0.0.1:0".parse().expect("a valid address")
}

/// A bulk row's sockets for the peers, bound to loopback: the sender and the receiver. With
/// `offload`, the sender's `UDP_SEGMENT` option is set to [`DATAGRAM`] (a send of a longer buffer
/// leaves as a train of datagrams of that size: none of the peers takes the size per send) and
/// the receiver's `UDP_GRO` is on (a read brings a train coalesced; every datagram of this row is
/// `DATAGRAM` bytes, so its length says how many). kio sets neither on the socket: it asks for
/// GSO per send, with a control message, and reads the GRO size from the reply's.
pub fn bulk_sockets(offload: bool) -> anyhow::Result<(std::net::UdpSocket, std::net::UdpSocket)> {
	use nix::sys::socket::{setsockopt, sockopt};
	let sender = std::net::UdpSocket::bind(loopback())?;
	let receiver = std::net::UdpSocket::bind(loopback())?;
	if offload {
		setsockopt(&sender, sockopt::UdpGsoSegment, &(DATAGRAM as i32))?;
		setsockopt(&receiver, sockopt::UdpGroSegment, &true)?;
	}
	Ok((sender, receiver))
}

/// Datagrams in what one read of a bulk receiver brought (a GRO train of `DATAGRAM`-byte ones).
pub fn datagrams_in(bytes: usize) -> u64 {
	bytes.div_ceil(DATAGRAM).max(1) as u64
}

/// How many datagrams a bulk sender sends next (one send), `sent` and `acked` so far of `ops`:
/// up to `train`, within the window.
pub fn next_send(ops: u64, sent: u64, acked: u64, train: u64) -> u64 {
	train.min(ops - sent).min(WINDOW - (sent - acked))
}

/// The cross-thread row, the same on every runtime: it uses only a `std` thread, a `std`
/// channel to it and a one-shot channel back, so what differs is each runtime's waker and park.
pub async fn cross_thread_wake(ops: u64) -> anyhow::Result<Measured> {
	use futures_channel::oneshot;
	let (to_helper, requests) = std::sync::mpsc::channel::<oneshot::Sender<()>>();
	let helper = std::thread::spawn(move || {
		while let Ok(reply) = requests.recv() {
			let _ = reply.send(());
		}
	});
	let meter = Meter::start();
	for _ in 0..ops {
		let (reply, answer) = oneshot::channel();
		to_helper.send(reply)?;
		answer.await?;
	}
	let measured = meter.stop();
	drop(to_helper);
	helper
		.join()
		.map_err(|_| anyhow::anyhow!("the helper thread panicked"))?;
	Ok(measured)
}
