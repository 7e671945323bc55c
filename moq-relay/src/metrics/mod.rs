//! `/metrics`: [`Stats`] owns the relay's own counters and gauges, and renders the whole
//! Prometheus catalogue from them and from what the other rooms count (the sessions' budgets,
//! the cache pool, the QUIC endpoints, the handshake budget, the router, the certificate, the
//! runtime). Adding a metric is a field here, or a [`Sources`] entry, and a line of
//! `Stats::render`; [`prom`] writes the text format.

pub mod prom;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use kio::sync::{Budget, Charge};
use moq_net::lite::session::GroupLoss;
use moq_quic::{EndpointStats, HandshakeBudget, Router, ServerCertificate};

pub use prom::CONTENT_TYPE;
use prom::{Kind, Prom};

use crate::relay::Relay;

/// What the relay counts that no other room does.
pub struct Stats {
	/// QUIC connections accepted.
	pub(crate) connections: AtomicU64,
	/// Sessions started.
	pub(crate) sessions: AtomicU64,
	/// QMux connections on the TCP port, and sessions started over them, by carrier.
	qmux_connections: [AtomicU64; 4],
	qmux_sessions: [AtomicU64; 4],
	/// Sessions open on each worker (gauges).
	worker_sessions: Vec<Budget>,
	/// Connections refused (auth, limits).
	pub(crate) refused: AtomicU64,
	/// Sessions that may publish whose receive window was not grown: their address held its
	/// share of the memory ceiling.
	pub(crate) windows_refused: AtomicU64,
	/// Certificates put in service after the first, and changed files refused.
	pub(crate) certificate_reloads: AtomicU64,
	pub(crate) certificate_reload_failures: AtomicU64,
	/// Each worker's endpoint counters, refreshed every second by the worker.
	endpoints: Mutex<Vec<EndpointStats>>,
	sources: Sources,
}

/// What the server counts elsewhere, for `/metrics` to read: absent in a relay without sockets
/// (a simulated one).
#[derive(Default)]
pub struct Sources {
	/// The QUIC handshakes in progress, retried and refused.
	pub handshakes: Option<Arc<HandshakeBudget>>,
	/// Datagrams handed between workers.
	pub router: Option<Arc<Router>>,
	/// The certificate in service.
	pub certificate: Option<ServerCertificate>,
	/// Each worker's runtime counters.
	pub monitors: Vec<kio::Monitor>,
}

/// How a QMux connection reached the relay's TCP port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carried {
	WebSocket,
	SecureWebSocket,
	Tls,
	Tcp,
}

impl Carried {
	const ALL: [Self; 4] = [Self::WebSocket, Self::SecureWebSocket, Self::Tls, Self::Tcp];

	/// Its `transport` label, in logs and metrics.
	pub(crate) fn name(self) -> &'static str {
		match self {
			Self::WebSocket => "websocket",
			Self::SecureWebSocket => "websocket-tls",
			Self::Tls => "qmux-tls",
			Self::Tcp => "qmux-tcp",
		}
	}
}

impl Stats {
	/// Counts a QMux connection accepted.
	pub(crate) fn qmux_connection(&self, carried: Carried) {
		self.qmux_connections[carried as usize].fetch_add(1, Ordering::Relaxed);
	}

	/// Counts a session started over QMux.
	pub(crate) fn qmux_session(&self, carried: Carried) {
		self.qmux_sessions[carried as usize].fetch_add(1, Ordering::Relaxed);
	}

	pub(crate) fn new(workers: usize, sources: Sources) -> Self {
		Self {
			connections: AtomicU64::new(0),
			sessions: AtomicU64::new(0),
			qmux_connections: Default::default(),
			qmux_sessions: Default::default(),
			worker_sessions: (0..workers).map(|_| Budget::unlimited()).collect(),
			refused: AtomicU64::new(0),
			windows_refused: AtomicU64::new(0),
			certificate_reloads: AtomicU64::new(0),
			certificate_reload_failures: AtomicU64::new(0),
			endpoints: Mutex::new(vec![EndpointStats::default(); workers]),
			sources,
		}
	}

	/// Counts a session started on `worker`, open while the returned charge lives.
	pub(crate) fn session(&self, worker: usize) -> Option<Charge> {
		self.sessions.fetch_add(1, Ordering::Relaxed);
		self.worker_sessions[worker].charge(1)
	}

	/// Keeps worker `index`'s endpoint counters for `/metrics`.
	pub(crate) fn set_endpoint(&self, index: usize, stats: EndpointStats) {
		self.endpoints.lock().expect("stats lock")[index] = stats;
	}

	/// The Prometheus exposition of everything `relay` counts.
	pub(crate) fn render(&self, relay: &Relay) -> String {
		let mut prom = Prom::new();
		let endpoints = self.endpoints.lock().expect("stats lock").clone();
		let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
		let counters = &relay.counters;
		let limits = &relay.limits;
		let members = &relay.cluster.members;
		prom.counter(
			"moq_relay_connections_total",
			"QUIC connections accepted.",
			load(&self.connections),
		)
		.gauge(
			"moq_relay_connections",
			"QUIC connections open.",
			relay.connections_open(),
		)
		.counter(
			"moq_relay_sessions_total",
			"moq-lite sessions started.",
			load(&self.sessions),
		)
		.gauge(
			"moq_relay_sessions",
			"moq-lite sessions open.",
			self.worker_sessions.iter().map(Budget::used).sum::<u64>(),
		)
		.counter(
			"moq_relay_refused_total",
			"Connections refused (auth, limits).",
			load(&self.refused),
		)
		.counter(
			"moq_relay_evicted_total",
			"Connections closed to give their slot to an address holding less than its share (limits.max_connections).",
			load(&relay.slots.evicted),
		)
		.gauge(
			"moq_relay_memory_bytes",
			"Bytes charged to the memory ceiling: the cache, and every connection's state, window, queues and partial input (limits.memory).",
			relay.memory.total().used(),
		)
		.gauge(
			"moq_relay_memory_limit_bytes",
			"The memory ceiling (limits.memory).",
			relay.memory.total().capacity(),
		)
		.gauge(
			"moq_relay_memory_addresses",
			"Addresses holding a share of the memory ceiling.",
			relay.memory.keys() as u64,
		)
		.gauge(
			"moq_relay_memory_address_share_bytes",
			"What one address may hold of the memory ceiling now: the ceiling over the addresses, at least limits.address_memory.",
			relay.memory.share(),
		)
		.counter(
			"moq_relay_windows_refused_total",
			"Sessions that may publish whose receive window stayed small: their address held its share of the memory ceiling.",
			load(&self.windows_refused),
		)
		.gauge(
			"moq_relay_broadcasts",
			"Broadcasts announced in the origin (the cluster's members aside).",
			relay.origin.broadcasts_outside(members) as u64,
		)
		.counter(
			"moq_relay_groups_in_total",
			"Group streams received.",
			load(&counters.groups_in),
		)
		.counter(
			"moq_relay_groups_out_total",
			"Group streams sent.",
			load(&counters.groups_out),
		)
		.counter(
			"moq_relay_bytes_in_total",
			"Frame payload bytes received.",
			load(&counters.bytes_in),
		)
		.counter(
			"moq_relay_bytes_out_total",
			"Frame payload bytes sent.",
			load(&counters.bytes_out),
		)
		.gauge(
			"moq_relay_cache_bytes",
			"Bytes held by the track cache.",
			relay.pool.used(),
		)
		.gauge(
			"moq_relay_cache_capacity_bytes",
			"The track cache's byte budget.",
			relay.pool.capacity(),
		);
		if let Some(handshakes) = &self.sources.handshakes {
			let stats = handshakes.stats();
			prom.gauge(
				"moq_relay_handshakes",
				"QUIC handshakes in progress.",
				stats.in_progress,
			)
			.gauge(
				"moq_relay_handshakes_limit",
				"QUIC handshakes in progress allowed (limits.handshakes).",
				limits.quic.handshakes as u64,
			)
			.counter(
				"moq_relay_handshake_retries_total",
				"QUIC Retries sent to validate addresses.",
				stats.retries,
			)
			.counter(
				"moq_relay_handshakes_refused_total",
				"Connection attempts refused by the handshake limits.",
				stats.refused,
			);
		}
		prom.gauge(
			"moq_relay_announces",
			"Broadcasts sessions announce now (limits.announces per session).",
			counters.announces.used(),
		)
		.gauge(
			"moq_relay_cluster_links",
			"Links this relay dialled to cluster peers that are up now.",
			relay.cluster.links.used(),
		)
		.gauge(
			"moq_relay_cluster_sessions",
			"Cluster peers that dialled this relay, linked now.",
			relay.cluster.sessions.used(),
		)
		.gauge(
			"moq_relay_broadcast_backups",
			"Publications kept as backups behind the announced one (the cluster's members aside).",
			relay.origin.backups_outside(members) as u64,
		)
		.gauge(
			"moq_relay_subscriptions",
			"Subscriptions open toward the relay (limits.subscriptions per session).",
			counters.subscriptions.used(),
		)
		.gauge(
			"moq_relay_track_requests",
			"Tracks asked of publishing sessions now (limits.track_requests per session).",
			counters.track_requests.used(),
		)
		.gauge(
			"moq_relay_groups_in_flight",
			"Group streams in flight to subscribers (limits.groups_in_flight per subscription).",
			counters.groups_in_flight.used(),
		)
		.gauge(
			"moq_relay_partial_bytes",
			"Bytes of messages and frames received in part (limits.partial_bytes per session).",
			counters.partial_bytes.used(),
		)
		.gauge(
			"moq_relay_announce_queued_bytes",
			"Bytes of announcement updates queued for peers that have not read them (limits.announce_queue per session).",
			counters.announce_bytes.used(),
		)
		.gauge(
			"moq_relay_stream_queued_bytes",
			"Bytes queued on connections' send streams, not yet taken by QUIC (limits.send_buffer per connection).",
			endpoints.iter().map(|e| e.stream_queued).sum::<u64>(),
		)
		.gauge(
			"moq_relay_send_buffer_limit",
			"Bytes one connection's send streams may hold queued (limits.send_buffer).",
			limits.send_buffer as u64,
		)
		.gauge(
			"moq_relay_partial_bytes_limit",
			"Bytes of partial input one session may hold (limits.partial_bytes).",
			limits.session.partial_bytes,
		)
		.counter(
			"moq_relay_budget_refusals_total",
			"Requests, streams and groups refused or cut because a budget was spent.",
			load(&counters.budget_refusals),
		)
		.counter(
			"moq_relay_requests_paced_total",
			"Requests that waited for their session's request rate (limits.request_rate, past limits.request_burst).",
			load(&counters.requests_paced),
		)
		.gauge(
			"moq_relay_request_rate_limit",
			"Requests one session may make per second past its burst (limits.request_rate; 0 paces nothing).",
			u64::from(limits.session.request_rate),
		)
		.counter(
			"moq_relay_certificate_reloads_total",
			"Renewed TLS certificates put in service from the certificate files.",
			load(&self.certificate_reloads),
		)
		.counter(
			"moq_relay_certificate_reload_failures_total",
			"Changed or unreadable certificate files refused (the certificate in service stays).",
			load(&self.certificate_reload_failures),
		);
		let not_after = self.sources.certificate.as_ref().and_then(ServerCertificate::not_after);
		if let Some(seconds) = not_after.and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok()) {
			prom.gauge(
				"moq_relay_certificate_expiry_timestamp_seconds",
				"When the TLS certificate in service expires (its notAfter, Unix time).",
				seconds.as_secs(),
			);
		}
		if let Some(router) = &self.sources.router {
			let routed = router.stats();
			prom.counter(
				"moq_relay_udp_forwarded_total",
				"Datagrams a worker received for another worker's connection (a client whose address changed) and handed to it.",
				routed.forwarded,
			)
			.counter(
				"moq_relay_udp_forward_dropped_total",
				"Datagrams for another worker's connection dropped because its queue was full (limits.forward_queue).",
				routed.dropped,
			)
			.gauge(
				"moq_relay_udp_forward_queued_bytes",
				"Bytes of datagrams handed to workers and not yet handled (limits.forward_queue per worker).",
				routed.queued_bytes,
			)
			.gauge(
				"moq_relay_udp_forward_queue_limit",
				"Bytes of datagrams handed to one worker that it may hold (limits.forward_queue).",
				limits.forward_queue as u64,
			);
		}
		for (name, help, counts) in [
			(
				"moq_relay_qmux_connections_total",
				"QMux connections on the TCP port, by transport: websocket (ws://), websocket-tls (wss://), qmux-tls (ALPN qmux-*), qmux-tcp (plaintext, tcp://).",
				&self.qmux_connections,
			),
			(
				"moq_relay_qmux_sessions_total",
				"moq-lite sessions started over QMux on the TCP port, by transport (also counted in moq_relay_sessions_total).",
				&self.qmux_sessions,
			),
		] {
			let mut family = prom.family(name, help, Kind::Counter);
			for carried in Carried::ALL {
				family.sample(&[("transport", carried.name())], load(&counts[carried as usize]));
			}
		}
		let mut lost = prom.family(
			"moq_relay_groups_lost_total",
			"Groups not delivered whole, by reason: in_flight (reset to keep a subscription within limits.groups_in_flight), stale (superseded longer ago than the track's latency), ending (not sent within the latency after the subscription ended), cache (dropped from the cache by age or for room before the subscriber's turn), aborted (the group ended badly while sent), stopped (the subscriber stopped it), refused (a publisher's group the track already had or keeps no more).",
			Kind::Counter,
		);
		for why in GroupLoss::ALL {
			lost.sample(&[("reason", why.name())], counters.lost(why));
		}
		self.render_workers(&mut prom, &endpoints);
		prom.finish()
	}

	/// The families labelled by worker.
	fn render_workers(&self, prom: &mut Prom, endpoints: &[EndpointStats]) {
		let workers: Vec<String> = (0..endpoints.len()).map(|i| i.to_string()).collect();
		let mut family = |name: &str, help: &str, kind: Kind, value: &dyn Fn(usize) -> u64| {
			let mut family = prom.family(name, help, kind);
			for (i, worker) in workers.iter().enumerate() {
				family.sample(&[("worker", worker)], value(i));
			}
		};
		let endpoint = |i: usize| endpoints[i];
		family(
			"moq_relay_udp_datagrams_in_total",
			"UDP datagrams received.",
			Kind::Counter,
			&|i| endpoint(i).datagrams_in,
		);
		family(
			"moq_relay_udp_datagrams_out_total",
			"UDP datagrams sent.",
			Kind::Counter,
			&|i| endpoint(i).datagrams_out,
		);
		family(
			"moq_relay_udp_bytes_in_total",
			"UDP payload bytes received.",
			Kind::Counter,
			&|i| endpoint(i).bytes_in,
		);
		family(
			"moq_relay_udp_bytes_out_total",
			"UDP payload bytes sent.",
			Kind::Counter,
			&|i| endpoint(i).bytes_out,
		);
		family(
			"moq_relay_udp_sendmsg_total",
			"Messages handed to the kernel, each a datagram or a GSO train (up to 32 to a sendmmsg).",
			Kind::Counter,
			&|i| endpoint(i).transmits,
		);
		family(
			"moq_relay_udp_send_queue_waits_total",
			"Connection turns that found the worker's send queue full and waited for the sender.",
			Kind::Counter,
			&|i| endpoint(i).send_queue_waits,
		);
		family(
			"moq_relay_quic_connections",
			"QUIC connections open on the worker.",
			Kind::Gauge,
			&|i| endpoint(i).open,
		);
		family(
			"moq_relay_worker_sessions",
			"Sessions open on the worker.",
			Kind::Gauge,
			&|i| self.worker_sessions[i].used(),
		);
		let stats: Vec<kio::Stats> = self.sources.monitors.iter().map(kio::Monitor::stats).collect();
		let at = |i: usize| stats.get(i).copied().unwrap_or_default();
		family("kio_loop_turns_total", "Event loop turns.", Kind::Counter, &|i| {
			at(i).turns
		});
		family("kio_task_polls_total", "Task polls.", Kind::Counter, &|i| at(i).polls);
		family(
			"kio_parks_total",
			"Turns that parked in io_uring_enter.",
			Kind::Counter,
			&|i| at(i).parks,
		);
		family("kio_uring_enter_total", "io_uring_enter calls.", Kind::Counter, &|i| {
			at(i).ring.enters
		});
		family("kio_uring_submissions_total", "SQEs submitted.", Kind::Counter, &|i| {
			at(i).ring.submissions
		});
		family("kio_uring_completions_total", "CQEs reaped.", Kind::Counter, &|i| {
			at(i).ring.completions
		});
	}
}
