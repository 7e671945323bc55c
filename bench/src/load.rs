//! The relay load generator: moq-lite publishers and subscribers over raw QUIC (`moqt://`),
//! WebTransport (`https://`) or QMux over WebSocket (`ws://`, a TCP connection each), each connection on
//! its own UDP socket (so a relay's workers share the load as they would with real clients), and
//! the accounting of what the subscribers got.
//!
//! A [`Plan`] names a [`Shape`] (who publishes what, who watches what), the frame rate and size,
//! and the windows. [`run`] connects every client (at most [`Plan::handshakes`] handshakes at
//! once, under a relay's per-address limit), waits until every subscription has received a frame
//! (the ramp), lets it settle, then measures a **steady window**: every frame carries its publish
//! time (microseconds on one monotonic clock, the first 8 bytes of the payload, little-endian), so
//! each subscriber measures its latency when it reads the frame; every group published in the
//! window is expected once by every subscription of its track. After a drain (late frames of the
//! window still count, with their latency) it returns a [`Report`]: frames delivered per second,
//! latency percentiles (µs), groups expected and present (loss), reconnects, and what the
//! clients' QUIC connections counted on the wire over the window ([`Wire`]).
//!
//! Groups are one frame each; the group sequence numbers the frame. A relay that skips a stale
//! group for a newer one (as moq relays may under congestion) shows it here as loss.
//!
//! [`Injection`] makes the publishers drop or delay known groups (counted as expected all the
//! same), which is how the accounting is tested against a live relay (`tests/load.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::{BufMut as _, BytesMut};
use kio::sync::{Consumer, Producer, Queue};
use kio::{Either, race};
use moq_client::{Client, Protocol, Url};
use moq_net::lite::session;
use moq_net::model::{
	Frame, GroupConsumer, Origin, OriginConsumer, Path, Subscription, Timestamp, TrackInfo, TrackProducer,
};
use moq_quic::Verification;

/// The track every load broadcast carries.
pub const TRACK: &str = "load";

/// Broadcasts one publishing connection announces in the many-broadcasts shape: under the
/// relay's default per-session announce limit (1,024).
pub const BROADCASTS_PER_PUBLISHER: usize = 1000;

/// Who publishes and who watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
	/// `broadcasts` broadcasts (one publisher connection each, one track), each watched by
	/// `subscribers` connections.
	Fanout {
		/// Broadcasts, each from its own connection.
		broadcasts: usize,
		/// Subscriber connections per broadcast.
		subscribers: usize,
	},
	/// `participants` connections, each publishing one broadcast and watching every other one.
	Chat {
		/// Participants.
		participants: usize,
	},
	/// `broadcasts` announced broadcasts ([`BROADCASTS_PER_PUBLISHER`] per publisher
	/// connection), of which the first `watched` carry frames, each watched by `subscribers`
	/// connections (which also receive every announcement).
	ManyBroadcasts {
		/// Announced broadcasts.
		broadcasts: usize,
		/// Of which live and watched.
		watched: usize,
		/// Subscriber connections per watched broadcast.
		subscribers: usize,
	},
}

impl Shape {
	/// The shape as [`parse`](Self::parse) reads it: `fanout:1x100`, `chat:20`,
	/// `many:5000/5x10`.
	pub fn label(&self) -> String {
		match self {
			Self::Fanout {
				broadcasts,
				subscribers,
			} => format!("fanout:{broadcasts}x{subscribers}"),
			Self::Chat { participants } => format!("chat:{participants}"),
			Self::ManyBroadcasts {
				broadcasts,
				watched,
				subscribers,
			} => format!("many:{broadcasts}/{watched}x{subscribers}"),
		}
	}

	/// `fanout:N` (one broadcast, N subscribers) or `fanout:BxN`; `chat:N`; `many:B/WxN` (B
	/// announced broadcasts, the first W live, N subscribers each).
	pub fn parse(text: &str) -> Result<Self, String> {
		let invalid = || format!("{text:?} is not a shape (fanout:100, fanout:2x50, chat:20, many:5000/5x10)");
		let number = |part: &str| part.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(invalid);
		let (kind, figures) = text.split_once(':').ok_or_else(invalid)?;
		match kind {
			"fanout" => {
				let (broadcasts, subscribers) = figures.split_once('x').unwrap_or(("1", figures));
				Ok(Self::Fanout {
					broadcasts: number(broadcasts)?,
					subscribers: number(subscribers)?,
				})
			}
			"chat" => Ok(Self::Chat {
				participants: number(figures)?.max(2),
			}),
			"many" => {
				let (broadcasts, rest) = figures.split_once('/').ok_or_else(invalid)?;
				let (watched, subscribers) = rest.split_once('x').ok_or_else(invalid)?;
				let (broadcasts, watched) = (number(broadcasts)?, number(watched)?);
				if watched > broadcasts {
					return Err(invalid());
				}
				Ok(Self::ManyBroadcasts {
					broadcasts,
					watched,
					subscribers: number(subscribers)?,
				})
			}
			_ => Err(invalid()),
		}
	}

	/// Subscribers per live track (what the relay fans out to), for plots.
	pub fn fanout(&self) -> usize {
		match *self {
			Self::Fanout { subscribers, .. } | Self::ManyBroadcasts { subscribers, .. } => subscribers,
			Self::Chat { participants } => participants - 1,
		}
	}

	/// The connections, and the live tracks (indices into the per-track counters).
	fn layout(&self) -> (Vec<ConnectionSpec>, usize) {
		let mut connections = Vec::new();
		match *self {
			Self::Fanout {
				broadcasts,
				subscribers,
			} => {
				for b in 0..broadcasts {
					connections.push(ConnectionSpec::publishing(vec![(format!("b{b}"), Some(b))]));
				}
				for b in 0..broadcasts {
					for _ in 0..subscribers {
						connections.push(ConnectionSpec::watching(vec![(format!("b{b}"), b)]));
					}
				}
				(connections, broadcasts)
			}
			Self::Chat { participants } => {
				for p in 0..participants {
					let watch = (0..participants)
						.filter(|&other| other != p)
						.map(|other| (format!("p{other}"), other))
						.collect();
					connections.push(ConnectionSpec {
						publish: vec![(format!("p{p}"), Some(p))],
						watch,
					});
				}
				(connections, participants)
			}
			Self::ManyBroadcasts {
				broadcasts,
				watched,
				subscribers,
			} => {
				let all: Vec<_> = (0..broadcasts)
					.map(|b| (format!("m{b}"), (b < watched).then_some(b)))
					.collect();
				for chunk in all.chunks(BROADCASTS_PER_PUBLISHER) {
					connections.push(ConnectionSpec::publishing(chunk.to_vec()));
				}
				for w in 0..watched.min(broadcasts) {
					for _ in 0..subscribers {
						connections.push(ConnectionSpec::watching(vec![(format!("m{w}"), w)]));
					}
				}
				(connections, watched.min(broadcasts))
			}
		}
	}
}

/// What one client connection does.
#[derive(Clone, Debug)]
struct ConnectionSpec {
	/// Broadcasts it publishes, each with its live track's index (none: announced only).
	publish: Vec<(String, Option<usize>)>,
	/// Broadcasts it watches, with their track's index.
	watch: Vec<(String, usize)>,
}

impl ConnectionSpec {
	fn publishing(publish: Vec<(String, Option<usize>)>) -> Self {
		Self {
			publish,
			watch: Vec::new(),
		}
	}

	fn watching(watch: Vec<(String, usize)>) -> Self {
		Self {
			publish: Vec::new(),
			watch,
		}
	}
}

/// Groups the publishers drop or hold back on purpose, to check the accounting: a dropped group
/// is never written but counts as expected; a delayed one is written `delay` late (and, since a
/// track's groups are written in order, so are the ones due meanwhile).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injection {
	/// Drop every group whose sequence is a multiple of this (0: none).
	pub drop_every: u64,
	/// Delay every group whose sequence is a multiple of this (0: none).
	pub delay_every: u64,
	/// How long.
	pub delay: Duration,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
	/// Who publishes and who watches.
	pub shape: Shape,
	/// Groups (of one frame) per second on each live track.
	pub fps: u32,
	/// Bytes per frame (at least 8: the publish time).
	pub size: usize,
	/// The measured window.
	pub steady: Duration,
	/// Between the end of the ramp and the window.
	pub settle: Duration,
	/// After the window, for its last frames to arrive.
	pub drain: Duration,
	/// How long the ramp may take before the run fails.
	pub ramp_timeout: Duration,
	/// QUIC handshakes in progress at once.
	pub handshakes: usize,
	/// kio workers of the load generator.
	pub workers: usize,
	/// Print a progress line each second to stderr.
	pub progress: bool,
	/// Drops and delays on purpose.
	pub inject: Injection,
	/// The protocol over raw QUIC (`moqt://`): moq-lite-05, or an IETF draft.
	pub protocol: Protocol,
}

impl Plan {
	/// `shape` at `fps` groups per second of `size`-byte frames, with a 10 s window.
	pub fn new(shape: Shape, fps: u32, size: usize) -> Self {
		Self {
			shape,
			fps,
			size,
			steady: Duration::from_secs(10),
			settle: Duration::from_secs(1),
			drain: Duration::from_secs(1),
			ramp_timeout: Duration::from_secs(60),
			handshakes: 16,
			workers: 1,
			progress: false,
			inject: Injection::default(),
			protocol: Protocol::Lite,
		}
	}
}

/// The load's flags, shared by `moq-load` and the relay benchmark.
#[derive(Clone, Debug, clap::Args)]
pub struct LoadOptions {
	/// Groups per second on each live track; each group is one frame.
	#[arg(long, default_value_t = 50)]
	pub fps: u32,
	/// Bytes per frame (at least 8: the first 8 carry the publish time).
	#[arg(long, default_value_t = 300)]
	pub size: usize,
	/// The measured (steady) window, after the ramp and the settle.
	#[arg(long, default_value = "10s", value_parser = parse_duration)]
	pub steady: Duration,
	/// Wait between the ramp (every subscription receiving) and the window.
	#[arg(long, default_value = "1s", value_parser = parse_duration)]
	pub settle: Duration,
	/// Wait after the window for its last frames (they count, with their latency).
	#[arg(long, default_value = "1s", value_parser = parse_duration)]
	pub drain: Duration,
	/// Give up if the ramp takes longer.
	#[arg(long, default_value = "60s", value_parser = parse_duration)]
	pub ramp_timeout: Duration,
	/// QUIC handshakes in progress at once (the relay limits them per address: 32 by default).
	#[arg(long, default_value_t = 16)]
	pub handshakes: usize,
	/// The protocol over raw QUIC (moqt:// URLs): moq-lite-05, or the IETF drafts
	/// moq-transport-14, -15 and -16.
	#[arg(long, value_name = "VERSION", default_value = "moq-lite-05")]
	pub version: Protocol,
	/// kio workers (threads) of the load generator; connections are spread over them.
	#[arg(long = "load-workers", default_value_t = 1)]
	pub workers: usize,
	/// For checking the accounting: publishers drop every group whose sequence is a multiple of
	/// N (it still counts as expected, so it shows as loss).
	#[arg(long, default_value_t = 0, value_name = "N")]
	pub inject_drop_every: u64,
	/// For checking the accounting: publishers hold back every group whose sequence is a
	/// multiple of N by --inject-delay.
	#[arg(long, default_value_t = 0, value_name = "N")]
	pub inject_delay_every: u64,
	/// See --inject-delay-every.
	#[arg(long, default_value = "0ms", value_parser = parse_duration)]
	pub inject_delay: Duration,
}

impl LoadOptions {
	/// The plan for `shape`.
	pub fn plan(&self, shape: Shape, progress: bool) -> Plan {
		Plan {
			shape,
			fps: self.fps,
			size: self.size,
			steady: self.steady,
			settle: self.settle,
			drain: self.drain,
			ramp_timeout: self.ramp_timeout,
			handshakes: self.handshakes,
			workers: self.workers,
			progress,
			inject: Injection {
				drop_every: self.inject_drop_every,
				delay_every: self.inject_delay_every,
				delay: self.inject_delay,
			},
			protocol: self.version,
		}
	}
}

/// A duration flag: `10s`, `500ms`, `1m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
	moq_relay::config::parse_duration(text)
}

/// Where the relay is.
#[derive(Clone, Debug)]
pub struct Target {
	/// Its QUIC address.
	pub addr: SocketAddr,
	/// Where publishers connect instead, when not `addr` (a relay upstream of it, to measure a
	/// hop).
	pub publish_addr: Option<SocketAddr>,
	/// The URL: the host (TLS server name) and the path every load broadcast goes under.
	pub url: Url,
	/// How its certificate is checked.
	pub verification: Verification,
}

/// Counters the load generator keeps current while it runs, for a harness that samples the relay
/// at the same moments.
#[derive(Debug, Default)]
pub struct Live {
	/// Frames read by subscribers, since the start.
	pub delivered: AtomicU64,
	/// Client connections whose session is up.
	pub connected: AtomicUsize,
	/// Sessions that ended and were dialled again.
	pub reconnects: AtomicU64,
	/// Failed connection attempts.
	pub failures: AtomicU64,
}

/// The phases a harness hears about, as they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
	/// Every client is connected and every subscription receives frames.
	Ramped,
	/// The steady window starts.
	SteadyStart,
	/// The steady window ends.
	SteadyEnd,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
	/// The shape's label.
	pub shape: String,
	/// Client connections.
	pub connections: usize,
	/// Subscriptions (a chat participant has one per other participant).
	pub subscriptions: usize,
	/// How long the ramp took.
	pub ramp: Duration,
	/// The measured window.
	pub steady: Duration,
	/// Frames of the window read by subscribers.
	pub delivered: u64,
	/// Groups published in the window, times the subscriptions of each one's track.
	pub expected: u64,
	/// Of those, how many some subscription read.
	pub present: u64,
	/// Subscriptions that missed at least one expected group (beyond injected drops), and of
	/// those, how many read nothing at all in the window.
	pub short_subscriptions: usize,
	/// See [`short_subscriptions`](Self::short_subscriptions).
	pub empty_subscriptions: usize,
	/// Groups the publishers dropped on purpose in the window ([`Injection`]), times subscriptions.
	pub injected_drops: u64,
	/// Latency of each delivered frame, microseconds: the 50th, 99th percentile and maximum.
	pub latency_p50_us: u64,
	/// See [`latency_p50_us`](Self::latency_p50_us).
	pub latency_p99_us: u64,
	/// See [`latency_p50_us`](Self::latency_p50_us).
	pub latency_max_us: u64,
	/// Sessions that ended and were dialled again.
	pub reconnects: u64,
	/// Failed connection attempts.
	pub failures: u64,
	/// What the clients' connections counted over the window.
	pub wire: Wire,
}

/// What the clients' QUIC connections counted over the steady window (quinn-proto's statistics,
/// read on each connection as the window starts and as it ends): what the relay put on the wire
/// for the frames it delivered, seen from the other end, so any relay can be compared.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wire {
	/// Datagrams the clients received: what the relay sent them.
	pub from_relay: u64,
	/// Datagrams the clients sent the relay.
	pub to_relay: u64,
	/// PING and IMMEDIATE_ACK frames the relay sent: quinn-proto sends one in each probe when a
	/// probe timeout (PTO) fires; other relays may also send keep-alives.
	pub relay_probes: u64,
	/// Connections counted: those up for the whole window (a session dialled again in it is left
	/// out, with its frames still counted in `delivered`; the table shows reconnects).
	pub connections: usize,
}

impl Wire {
	/// `connection`'s counters now (`connections` stays 0).
	fn sample(connection: &moq_quic::Connection) -> Self {
		let stats = connection.stats();
		Self {
			from_relay: stats.udp_rx.datagrams,
			to_relay: stats.udp_tx.datagrams,
			relay_probes: stats.frame_rx.ping + stats.frame_rx.immediate_ack,
			connections: 0,
		}
	}

	/// Adds one connection's counts between two samples.
	fn add(&mut self, before: Self, after: Self) {
		self.from_relay += after.from_relay.saturating_sub(before.from_relay);
		self.to_relay += after.to_relay.saturating_sub(before.to_relay);
		self.relay_probes += after.relay_probes.saturating_sub(before.relay_probes);
		self.connections += 1;
	}
}

/// Where the run is, for the tasks that count [`Wire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
	Ramp,
	Steady,
	Done,
}

impl Report {
	/// Expected groups that no subscription read.
	pub fn lost(&self) -> u64 {
		self.expected.saturating_sub(self.present)
	}

	/// Frames delivered per second in the window.
	pub fn frames_per_second(&self) -> f64 {
		self.delivered as f64 / self.steady.as_secs_f64().max(f64::MIN_POSITIVE)
	}

	/// `count` per frame delivered in the window.
	pub fn per_frame(&self, count: u64) -> f64 {
		count as f64 / self.delivered.max(1) as f64
	}

	/// One line for people.
	pub fn summary(&self) -> String {
		format!(
			"{}: {} connections, {} subscriptions; {:.0} frames/s delivered over {:.1} s; latency p50 {} µs, p99 {} µs, max {} µs; groups expected {}, present {}, lost {}{}{}; reconnects {}, failed connects {}; per delivered frame, {:.3} datagrams from the relay, {:.3} to it, {:.3} probes ({} connections counted)",
			self.shape,
			self.connections,
			self.subscriptions,
			self.frames_per_second(),
			self.steady.as_secs_f64(),
			self.latency_p50_us,
			self.latency_p99_us,
			self.latency_max_us,
			self.expected,
			self.present,
			self.lost(),
			if self.injected_drops > 0 {
				format!(" ({} dropped on purpose)", self.injected_drops)
			} else {
				String::new()
			},
			if self.short_subscriptions > 0 {
				format!(
					" ({} subscriptions short, {} of them read nothing)",
					self.short_subscriptions, self.empty_subscriptions
				)
			} else {
				String::new()
			},
			self.reconnects,
			self.failures,
			self.per_frame(self.wire.from_relay),
			self.per_frame(self.wire.to_relay),
			self.per_frame(self.wire.relay_probes),
			self.wire.connections,
		)
	}
}

/// Microseconds on the process's monotonic clock (from its first use).
pub fn now_us() -> u64 {
	static EPOCH: OnceLock<Instant> = OnceLock::new();
	EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// The steady window, in [`now_us`] microseconds; empty until the coordinator sets it.
#[derive(Debug)]
struct Window {
	start: AtomicU64,
	end: AtomicU64,
}

impl Window {
	fn contains(&self, at_us: u64) -> bool {
		self.start.load(Relaxed) <= at_us && at_us < self.end.load(Relaxed)
	}
}

/// What one subscription read in the window.
#[derive(Debug, Default)]
pub struct Tally {
	/// Sequences of the groups read (one frame each), in arrival order.
	pub groups: Vec<u64>,
	/// The latency of each frame read, microseconds.
	pub latencies: Vec<u32>,
}

impl Tally {
	/// Records a frame of group `sequence` published at `published_us`, read at `read_us`.
	pub fn record(&mut self, sequence: u64, published_us: u64, read_us: u64) {
		self.groups.push(sequence);
		self.latencies
			.push(read_us.saturating_sub(published_us).min(u64::from(u32::MAX)) as u32);
	}

	/// Distinct groups read.
	pub fn present(&self) -> u64 {
		let mut groups = self.groups.clone();
		groups.sort_unstable();
		groups.dedup();
		groups.len() as u64
	}
}

/// The `p`-th percentile (0 to 100, nearest rank) of sorted `values`; 0 when empty.
pub fn percentile(sorted: &[u32], p: f64) -> u64 {
	if sorted.is_empty() {
		return 0;
	}
	let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
	u64::from(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// State every client task shares.
struct Shared {
	target: Target,
	plan: Plan,
	window: Window,
	live: Arc<Live>,
	stop: Consumer<()>,
	/// Subscriptions that have read their first frame.
	ready: Producer<usize>,
	/// Handshake tokens: a client takes one to dial and puts it back when its session is up.
	handshakes: Queue<()>,
	/// Per live track: groups published in the window, and of those dropped on purpose.
	published: Vec<(AtomicU64, AtomicU64)>,
	/// Per subscription: its track and its tally.
	tallies: Mutex<Vec<(usize, Arc<Mutex<Tally>>)>>,
	/// Broadcasts announced in all (what a viewer may have to mirror).
	announced: usize,
	/// Set by the coordinator as the steady window starts and ends.
	phase: Producer<Phase>,
	/// The sum of every counted connection's [`Wire`].
	wire: Mutex<Wire>,
}

/// Runs `plan` against `target` on a runtime of its own; `live` is kept current and `events`
/// hears each phase as it starts. Fails if the ramp does not finish in time.
pub fn run(
	plan: &Plan,
	target: &Target,
	live: Arc<Live>,
	events: Option<mpsc::Sender<Event>>,
) -> anyhow::Result<Report> {
	if plan.size < 8 {
		bail!("frames must be at least 8 bytes (the publish time)");
	}
	if plan.fps == 0 {
		bail!("the frame rate must be at least 1 per second");
	}
	let runtime = kio::Builder::new()
		.workers(plan.workers.max(1))
		.build()
		.context("starting the load generator's runtime")?;
	let (connections, tracks) = plan.shape.layout();
	let stop = Producer::new(());
	let handshakes = Queue::bounded(plan.handshakes.max(1));
	for _ in 0..plan.handshakes.max(1) {
		let _ = handshakes.try_push(());
	}
	let shared = Arc::new(Shared {
		target: target.clone(),
		plan: plan.clone(),
		window: Window {
			start: AtomicU64::new(u64::MAX),
			end: AtomicU64::new(u64::MAX),
		},
		live,
		stop: stop.consume(),
		ready: Producer::new(0),
		handshakes,
		published: (0..tracks).map(|_| (AtomicU64::new(0), AtomicU64::new(0))).collect(),
		tallies: Mutex::new(Vec::new()),
		announced: connections.iter().map(|c| c.publish.len()).sum(),
		phase: Producer::new(Phase::Ramp),
		wire: Mutex::new(Wire::default()),
	});
	let workers = runtime.workers();
	let report = runtime.block_on(coordinate(shared, connections, workers, events));
	let _ = stop.close();
	report
}

async fn coordinate(
	shared: Arc<Shared>,
	connections: Vec<ConnectionSpec>,
	workers: usize,
	events: Option<mpsc::Sender<Event>>,
) -> anyhow::Result<Report> {
	let plan = &shared.plan;
	let count = connections.len();
	let subscriptions: usize = connections.iter().map(|c| c.watch.len()).sum();
	let started = Instant::now();
	let base_id = u64::from(std::process::id()) << 20;
	for (index, spec) in connections.into_iter().enumerate() {
		let shared = shared.clone();
		// Publishers first in the list, so they are dialled first; workers in turn.
		drop(kio::spawn_on(index % workers, move || {
			client_connection(shared, spec, base_id + index as u64 + 1)
		}));
	}
	let notify = |event| {
		if let Some(events) = &events {
			let _ = events.send(event);
		}
	};

	// The ramp: until every subscription has read a frame.
	let ready = shared.ready.consume();
	let deadline = kio::time::now() + plan.ramp_timeout;
	loop {
		let tick = kio::time::sleep(Duration::from_secs(1));
		match race(
			ready.wait(|&n| {
				if n >= subscriptions {
					Poll::Ready(())
				} else {
					Poll::Pending
				}
			}),
			tick,
		)
		.await
		{
			Either::Left(_) => break,
			Either::Right(()) => {
				let n = *ready.read();
				if plan.progress {
					eprintln!(
						"ramp {:.0} s: {}/{count} connected, {n}/{subscriptions} subscriptions receiving, {} failed connects",
						started.elapsed().as_secs_f64(),
						shared.live.connected.load(Relaxed),
						shared.live.failures.load(Relaxed),
					);
				}
				if kio::time::now() >= deadline {
					bail!(
						"the ramp did not finish in {:?}: {}/{count} connected, {n}/{subscriptions} subscriptions receiving, {} failed connects",
						plan.ramp_timeout,
						shared.live.connected.load(Relaxed),
						shared.live.failures.load(Relaxed),
					);
				}
			}
		}
	}
	let ramp = started.elapsed();
	notify(Event::Ramped);
	kio::time::sleep(plan.settle).await;

	// The window starts a little ahead, so every publisher sees its bounds before stamping a
	// frame inside it.
	let lead = Duration::from_millis(100);
	let start = now_us() + lead.as_micros() as u64;
	let end = start + plan.steady.as_micros() as u64;
	shared.window.start.store(start, Relaxed);
	shared.window.end.store(end, Relaxed);
	kio::time::sleep(lead).await;
	set_phase(&shared, Phase::Steady);
	notify(Event::SteadyStart);
	let mut last = (shared.live.delivered.load(Relaxed), now_us());
	while now_us() < end {
		let left = Duration::from_micros(end.saturating_sub(now_us()));
		kio::time::sleep(left.min(Duration::from_secs(1))).await;
		if plan.progress {
			let (delivered, at) = (shared.live.delivered.load(Relaxed), now_us());
			eprintln!(
				"steady {:.0}/{:.0} s: {:.0} frames/s delivered, {} connected, {} reconnects",
				(at.min(end) - start) as f64 / 1e6,
				plan.steady.as_secs_f64(),
				(delivered - last.0) as f64 / ((at - last.1) as f64 / 1e6),
				shared.live.connected.load(Relaxed),
				shared.live.reconnects.load(Relaxed),
			);
			last = (delivered, at);
		}
	}
	set_phase(&shared, Phase::Done);
	notify(Event::SteadyEnd);
	kio::time::sleep(plan.drain).await;

	let mut report = Report {
		shape: plan.shape.label(),
		connections: count,
		subscriptions,
		ramp,
		steady: plan.steady,
		reconnects: shared.live.reconnects.load(Relaxed),
		failures: shared.live.failures.load(Relaxed),
		wire: *shared.wire.lock().expect("no wire counter panics"),
		..Report::default()
	};
	let mut latencies = Vec::new();
	for (track, tally) in shared.tallies.lock().expect("no tally holder panics").iter() {
		let tally = tally.lock().expect("no tally holder panics");
		let (published, dropped) = &shared.published[*track];
		let (expected, present) = (published.load(Relaxed), tally.present());
		report.expected += expected;
		report.injected_drops += dropped.load(Relaxed);
		report.present += present;
		if present + dropped.load(Relaxed) < expected {
			report.short_subscriptions += 1;
			report.empty_subscriptions += usize::from(present == 0);
		}
		report.delivered += tally.latencies.len() as u64;
		latencies.extend_from_slice(&tally.latencies);
	}
	latencies.sort_unstable();
	report.latency_p50_us = percentile(&latencies, 50.0);
	report.latency_p99_us = percentile(&latencies, 99.0);
	report.latency_max_us = latencies.last().copied().map_or(0, u64::from);
	Ok(report)
}

/// One client connection: publishes its broadcasts (the tracks are written whether or not the
/// session is up) and watches its subscriptions, dialling again when the session ends.
async fn client_connection(shared: Arc<Shared>, spec: ConnectionSpec, id: u64) {
	let local = Origin::new(id);
	let mut producers = Vec::new();
	for (name, live) in &spec.publish {
		let Ok((broadcast, publication)) = local.producer().create_broadcast(&Path::new(name), Default::default())
		else {
			continue;
		};
		let info = TrackInfo {
			timescale: 1_000_000,
			latency_max: Duration::from_secs(2),
			..TrackInfo::default()
		};
		if let Some(track) = live
			&& let Ok(producer) = broadcast.create_track(TRACK, info)
		{
			drop(kio::spawn(publish_track(shared.clone(), producer, *track)));
		}
		producers.push((broadcast, publication));
	}
	let tallies: Vec<_> = spec
		.watch
		.iter()
		.map(|(name, track)| {
			let tally = Arc::new(Mutex::new(Tally::default()));
			shared
				.tallies
				.lock()
				.expect("no tally holder panics")
				.push((*track, tally.clone()));
			(Path::new(name), tally, Arc::new(AtomicU64::new(0)))
		})
		.collect();
	// Whether the last session was up (and ended): the next dial is a reconnect.
	let mut ended = false;
	while !shared.stop.is_closed() {
		if std::mem::take(&mut ended) {
			shared.live.reconnects.fetch_add(1, Relaxed);
		}
		let Some(()) = shared.handshakes.pop().await else {
			return;
		};
		let viewer = Origin::new(id);
		let addr = match (spec.publish.is_empty(), shared.target.publish_addr) {
			(false, Some(upstream)) => upstream,
			_ => shared.target.addr,
		};
		let connected = async {
			// A viewer mirrors every announcement under the URL's path: with the default limit
			// (1,024) the many-broadcasts shape would hide most broadcasts from it.
			let limits = session::Limits {
				announces: shared.announced.max(session::Limits::default().announces),
				..session::Limits::default()
			};
			let mut client = Client::new()
				.origin(id)
				.limits(limits)
				.protocol(shared.plan.protocol)
				.verify(shared.target.verification.clone());
			if !spec.publish.is_empty() {
				client = client.publish(local.consumer());
			}
			if !spec.watch.is_empty() {
				client = client.subscribe(viewer.producer());
			}
			client.connect_to(&shared.target.url, addr).await
		}
		.await;
		let _ = shared.handshakes.try_push(());
		let client = match connected {
			Ok(connected) => connected,
			Err(err) => {
				if shared.live.failures.fetch_add(1, Relaxed) == 0 {
					eprintln!("load: connecting: {err:#} (later failures are counted, not printed)");
				}
				// Back off a little before the next attempt, unless the run is over.
				if let Either::Right(()) =
					race(shared.stop.closed(), kio::time::sleep(Duration::from_millis(100))).await
				{
					continue;
				}
				return;
			}
		};
		shared.live.connected.fetch_add(1, Relaxed);
		let watchers: Vec<Pin<Box<dyn Future<Output = ()>>>> = tallies
			.iter()
			.map(|(name, tally, seen)| {
				Box::pin(watch(
					shared.clone(),
					viewer.consumer(),
					name.clone(),
					tally.clone(),
					seen.clone(),
				)) as Pin<Box<dyn Future<Output = ()>>>
			})
			.collect();
		let watching = async {
			// Over a WebSocket there are no QUIC datagrams to count.
			let wire = async {
				match client.quic_connection() {
					Some(connection) => count_wire(&shared, connection).await,
					None => std::future::pending().await,
				}
			};
			race(join_all(watchers), wire).await;
		};
		let session = race(client.closed(), watching);
		let outcome = race(shared.stop.closed(), session).await;
		shared.live.connected.fetch_sub(1, Relaxed);
		ended = true;
		match outcome {
			Either::Left(()) => {
				client.close(0);
				return;
			}
			Either::Right(Either::Left(code)) => {
				if shared.live.reconnects.load(Relaxed) == 0 {
					let noop = kio::Waiter::new(std::task::Waker::noop().clone());
					let why = match client.quic_connection().map(|c| c.poll_closed(&noop)) {
						Some(Poll::Ready(error)) => error.to_string(),
						Some(Poll::Pending) => "the connection is still open".into(),
						None => "a WebSocket session".into(),
					};
					eprintln!(
						"load: a session ended with code {code} ({why}); dialling again (later ends are counted, not printed)"
					);
				}
			}
			Either::Right(Either::Right(())) => {}
		}
	}
}

fn set_phase(shared: &Shared, phase: Phase) {
	if let Ok(mut current) = shared.phase.write() {
		*current = phase;
	}
}

/// Adds what `connection` counts over the steady window to the shared [`Wire`], if it is up when
/// the window starts; then waits forever (it runs beside the session and never ends it).
async fn count_wire(shared: &Shared, connection: &moq_quic::Connection) {
	let phase = shared.phase.consume();
	if *phase.read() == Phase::Ramp
		&& phase
			.wait(|&p| {
				if p == Phase::Ramp {
					Poll::Pending
				} else {
					Poll::Ready(())
				}
			})
			.await
			.is_ok()
	{
		let before = Wire::sample(connection);
		if phase
			.wait(|&p| {
				if p == Phase::Done {
					Poll::Ready(())
				} else {
					Poll::Pending
				}
			})
			.await
			.is_ok()
		{
			let after = Wire::sample(connection);
			shared.wire.lock().expect("no wire counter panics").add(before, after);
		}
	}
	std::future::pending().await
}

/// Writes one group of one frame per tick on `track` until the run stops.
async fn publish_track(shared: Arc<Shared>, track: TrackProducer, index: usize) {
	let period = Duration::from_secs(1) / shared.plan.fps;
	let inject = shared.plan.inject;
	let mut next = kio::time::now();
	let mut sequence = 0u64;
	while !shared.stop.is_closed() {
		let stamp = now_us();
		let in_window = shared.window.contains(stamp);
		let (published, dropped) = &shared.published[index];
		if in_window {
			published.fetch_add(1, Relaxed);
		}
		let drop_it = inject.drop_every > 0 && sequence.is_multiple_of(inject.drop_every);
		if drop_it && in_window {
			dropped.fetch_add(1, Relaxed);
		}
		if inject.delay_every > 0 && sequence.is_multiple_of(inject.delay_every) {
			kio::time::sleep(inject.delay).await;
		}
		if !drop_it {
			let mut payload = BytesMut::with_capacity(shared.plan.size);
			payload.put_u64_le(stamp);
			payload.put_bytes(0, shared.plan.size - 8);
			let Ok(mut group) = track.create_group(sequence) else {
				return;
			};
			if group
				.write_frame(Frame::new(Timestamp::new(stamp, 1_000_000), payload.freeze()))
				.is_err() || group.finish().is_err()
			{
				return;
			}
		}
		sequence += 1;
		next += period;
		if let Either::Left(()) = race(shared.stop.closed(), kio::time::sleep_until(next)).await {
			return;
		}
	}
}

/// Waits for `name`'s announcement, subscribes to its track and tallies every frame read.
/// `seen` counts the frames this subscription has read over every connection, so the first one
/// marks it ready exactly once.
async fn watch(
	shared: Arc<Shared>,
	viewer: OriginConsumer,
	name: Path,
	tally: Arc<Mutex<Tally>>,
	seen: Arc<AtomicU64>,
) {
	let mut cursor = viewer.announced(&Path::default());
	let broadcast = loop {
		let update = cursor.next().await;
		if update.path == name
			&& let Some(broadcast) = update.broadcast
		{
			break broadcast;
		}
	};
	let Ok(mut track) = broadcast.subscribe_track(TRACK, Subscription::default()) else {
		return;
	};
	// Groups are read concurrently, as a player would: a group whose stream is slow or stalled
	// does not hold back the ones after it (the generator must not add head-of-line blocking of
	// its own to what it measures).
	let mut reading: Vec<Pin<Box<dyn Future<Output = ()>>>> = Vec::new();
	let mut track_done = false;
	std::future::poll_fn(|cx| {
		while !track_done {
			let next = kio::Park::new().poll(cx, |waiter| track.poll_recv_group(waiter));
			match next {
				Poll::Ready(Ok(Some(group))) => {
					reading.push(Box::pin(read_group(shared.clone(), group, tally.clone(), seen.clone())))
				}
				Poll::Ready(_) => track_done = true,
				Poll::Pending => break,
			}
		}
		reading.retain_mut(|group| group.as_mut().poll(cx).is_pending());
		if track_done && reading.is_empty() {
			Poll::Ready(())
		} else {
			Poll::Pending
		}
	})
	.await;
}

/// Reads a group's frames, tallying each.
async fn read_group(shared: Arc<Shared>, mut group: GroupConsumer, tally: Arc<Mutex<Tally>>, seen: Arc<AtomicU64>) {
	let sequence = group.sequence();
	while let Ok(Some(frame)) = group.read_frame().await {
		let read = now_us();
		let Some(stamp) = frame.payload.get(..8) else { continue };
		let published = u64::from_le_bytes(stamp.try_into().expect("8 bytes"));
		shared.live.delivered.fetch_add(1, Relaxed);
		if seen.fetch_add(1, Relaxed) == 0
			&& let Ok(mut ready) = shared.ready.write()
		{
			*ready += 1;
		}
		if shared.window.contains(published) {
			tally
				.lock()
				.expect("no tally holder panics")
				.record(sequence, published, read);
		}
	}
}

/// Runs every future to its end; never ends when there are none (a publishing connection's
/// session lasts until it closes).
async fn join_all(mut futures: Vec<Pin<Box<dyn Future<Output = ()>>>>) {
	if futures.is_empty() {
		return std::future::pending().await;
	}
	std::future::poll_fn(|cx| {
		futures.retain_mut(|future| future.as_mut().poll(cx).is_pending());
		if futures.is_empty() {
			Poll::Ready(())
		} else {
			Poll::Pending
		}
	})
	.await;
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn percentiles_are_nearest_rank() {
		let sorted: Vec<u32> = (1..=100).collect();
		assert_eq!(percentile(&sorted, 50.0), 50);
		assert_eq!(percentile(&sorted, 99.0), 99);
		assert_eq!(percentile(&sorted, 100.0), 100);
		assert_eq!(percentile(&[7], 99.0), 7);
		assert_eq!(percentile(&[], 50.0), 0);
	}

	#[test]
	fn a_group_read_twice_is_present_once() {
		let mut tally = Tally::default();
		tally.record(3, 100, 150);
		tally.record(1, 100, 400);
		tally.record(3, 100, 900);
		assert_eq!(tally.present(), 2);
		assert_eq!(tally.latencies, [50, 300, 800]);
	}

	#[test]
	fn shapes_parse_and_print_alike() {
		for text in ["fanout:1x100", "fanout:3x7", "chat:20", "many:5000/5x10"] {
			assert_eq!(Shape::parse(text).unwrap().label(), text);
		}
		assert_eq!(Shape::parse("fanout:400").unwrap().label(), "fanout:1x400");
		for bad in ["fanout", "fanout:0", "chat:x", "many:5/6x1", "many:5x1", "mesh:3"] {
			assert!(Shape::parse(bad).is_err(), "{bad}");
		}
	}

	#[test]
	fn shapes_lay_out_their_connections() {
		let (connections, tracks) = Shape::Fanout {
			broadcasts: 2,
			subscribers: 3,
		}
		.layout();
		assert_eq!((connections.len(), tracks), (8, 2));
		assert_eq!(connections.iter().map(|c| c.watch.len()).sum::<usize>(), 6);

		let (connections, tracks) = Shape::Chat { participants: 4 }.layout();
		assert_eq!((connections.len(), tracks), (4, 4));
		assert!(connections.iter().all(|c| c.watch.len() == 3 && c.publish.len() == 1));
		assert!(connections[0].watch.iter().all(|(name, _)| name != "p0"));

		let (connections, tracks) = Shape::ManyBroadcasts {
			broadcasts: 2500,
			watched: 2,
			subscribers: 5,
		}
		.layout();
		// Three publishers (1,000 + 1,000 + 500 broadcasts), then 2 x 5 viewers.
		assert_eq!((connections.len(), tracks), (13, 2));
		assert_eq!(connections[2].publish.len(), 500);
		assert_eq!(
			connections[0].publish.iter().filter(|(_, live)| live.is_some()).count(),
			2
		);
	}
}
