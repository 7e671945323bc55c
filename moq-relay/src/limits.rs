//! What peers may make the relay hold: one options type that is both the `[limits]` table of the
//! config file and its flags, and the resolved limits the server applies.
//!
//! Adding a limit touches three places: a field of [`LimitOptions`] (its doc line is the flag's
//! help), its default in [`Limits::default`], and its use. Every limit is charged where the memory
//! is taken and shown in `/metrics`; the relay's README states what they add up to per
//! connection, measured.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{Size, Span};

/// The limits as flags and as the file's `[limits]` table: every field optional, so an absent
/// flag lets the file's value through and an absent key the default.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOptions {
	/// QUIC handshakes in progress at once, from everywhere; more are refused
	/// [file: `[limits] handshakes`] [default: 1024].
	#[arg(long = "max-handshakes", value_name = "N")]
	pub handshakes: Option<usize>,
	/// QUIC handshakes in progress at once from one IP address [file: `[limits] handshakes_per_ip`]
	/// [default: 32].
	#[arg(long = "max-handshakes-per-ip", value_name = "N")]
	pub handshakes_per_ip: Option<usize>,
	/// Handshakes in progress past which clients must first prove their address with a QUIC Retry
	/// [file: `[limits] retry_above`] [default: 64].
	#[arg(long = "retry-above", value_name = "N")]
	pub retry_above: Option<usize>,
	/// How long a QUIC handshake may take [file: `[limits] handshake_timeout`] [default: 10s].
	#[arg(long = "handshake-timeout", value_name = "DURATION")]
	pub handshake_timeout: Option<Span>,
	/// How long a connection may take, after its handshake, to send its SETUP; past it the relay
	/// closes it with Timeout (3) [file: `[limits] setup_timeout`] [default: 10s].
	#[arg(long = "setup-timeout", value_name = "DURATION")]
	pub setup_timeout: Option<Span>,
	/// Unread bytes a peer may leave on one QUIC stream [file: `[limits] stream_window`]
	/// [default: 1MiB].
	#[arg(long = "stream-window", value_name = "SIZE")]
	pub stream_window: Option<Size>,
	/// Unread bytes a peer may leave on one QUIC connection, over all its streams
	/// [file: `[limits] connection_window`] [default: 4MiB].
	#[arg(long = "connection-window", value_name = "SIZE")]
	pub connection_window: Option<Size>,
	/// Bytes the relay may hold queued for one connection's streams, all together, beyond what
	/// QUIC has taken in to send; writers wait past it (each stream also takes writes only while it
	/// holds less than QUIC has taken from it, between 4KiB and 256KiB, so a peer that grants no
	/// credit gets little prepared) [file: `[limits] send_buffer`] [default: 4MiB].
	#[arg(long = "send-buffer", value_name = "SIZE")]
	pub send_buffer: Option<Size>,
	/// Bytes of datagrams one worker may hold that another worker received for its connections
	/// (a client whose address changed, hashed to another worker's socket); more are dropped
	/// [file: `[limits] forward_queue`] [default: 1MiB].
	#[arg(long = "forward-queue", value_name = "SIZE")]
	pub forward_queue: Option<Size>,
	/// Streams of each direction a peer may have open on one connection. A connection starts
	/// with 16 and doubles the allowance each time the peer has half of it open, up to this;
	/// quinn-proto keeps about 40 bytes of state for each stream allowed
	/// [file: `[limits] streams`] [default: 256].
	#[arg(long = "max-streams", value_name = "N")]
	pub streams: Option<u32>,
	/// Broadcasts one session may announce at once; more are ignored
	/// [file: `[limits] announces`] [default: 1024].
	#[arg(long = "max-announces", value_name = "N")]
	pub announces: Option<usize>,
	/// Subscriptions one session may have open at once; more are refused with code 11
	/// [file: `[limits] subscriptions`] [default: 1024].
	#[arg(long = "max-subscriptions", value_name = "N")]
	pub subscriptions: Option<usize>,
	/// Tracks that may be asked at once of one publishing session's broadcasts, shared fairly by
	/// the addresses asking: past it, a new request takes the place of the oldest one whose
	/// subscribers left, or of the address holding the most, and is refused only when neither
	/// exists [file: `[limits] track_requests`] [default: 1024].
	#[arg(long = "max-track-requests", value_name = "N")]
	pub track_requests: Option<usize>,
	/// Group streams in flight per subscription; past it the oldest group of a lagging
	/// subscriber is dropped [file: `[limits] groups_in_flight`] [default: 64].
	#[arg(long = "max-groups-in-flight", value_name = "N")]
	pub groups_in_flight: Option<usize>,
	/// Bytes of messages and frames one session may have received in part
	/// [file: `[limits] partial_bytes`] [default: 8MiB].
	#[arg(long = "max-partial-bytes", value_name = "SIZE")]
	pub partial_bytes: Option<Size>,
	/// Requests one session may make per second (SUBSCRIBE, TRACK, FETCH, ANNOUNCE_REQUEST and any
	/// other stream it opens, and SUBSCRIBE_UPDATEs asking for history again), past
	/// --max-request-burst at once: later ones wait, none is refused; 0 paces nothing. Cluster
	/// peers are not paced [file: `[limits] request_rate`] [default: 64].
	#[arg(long = "max-request-rate", value_name = "N")]
	pub request_rate: Option<u32>,
	/// Requests one session may make at once before --max-request-rate paces them
	/// [file: `[limits] request_burst`] [default: 256].
	#[arg(long = "max-request-burst", value_name = "N")]
	pub request_burst: Option<u32>,
	/// Requests all sessions from one address (an IPv4 address, an IPv6 /64) may make per second
	/// together, past --max-address-request-burst at once, so that reconnecting or opening more
	/// connections buys no fresh burst; many viewers behind one NAT share it
	/// [file: `[limits] address_request_rate`] [default: 1024].
	#[arg(long = "max-address-request-rate", value_name = "N")]
	pub address_request_rate: Option<u32>,
	/// Requests all sessions from one address may make at once before
	/// --max-address-request-rate paces them [file: `[limits] address_request_burst`]
	/// [default: 4096].
	#[arg(long = "max-address-request-burst", value_name = "N")]
	pub address_request_burst: Option<u32>,
	/// The share of the cache one publishing session may fill [file: `[limits] session_cache`]
	/// [default: a quarter of --cache-size].
	#[arg(long = "session-cache", value_name = "SIZE")]
	pub session_cache: Option<Size>,
	/// Announcements, subscriptions and track requests a cluster peer's session may have at once,
	/// each (in place of --max-announces, --max-subscriptions and --max-track-requests: a peer
	/// carries a whole relay's broadcasts and demand) [file: `[limits] cluster_requests`]
	/// [default: 16384].
	#[arg(long = "max-cluster-requests", value_name = "N")]
	pub cluster_requests: Option<usize>,
	/// HTTP connections served at once [file: `[limits] http_connections`] [default: 256].
	#[arg(long = "max-http-connections", value_name = "N")]
	pub http_connections: Option<usize>,
	/// HTTP connections served at once from one IP address [file: `[limits] http_per_ip`]
	/// [default: 16].
	#[arg(long = "max-http-per-ip", value_name = "N")]
	pub http_per_ip: Option<usize>,
	/// How long an HTTP request head may take [file: `[limits] http_head_timeout`]
	/// [default: 3s].
	#[arg(long = "http-head-timeout", value_name = "DURATION")]
	pub http_head_timeout: Option<Span>,
	/// Bytes everything peers make the relay hold may add up to: the cache, each connection's
	/// state and receive window, what its streams queue and its sessions hold in part or queue
	/// for it. Addresses share it fairly: past its share (this over the addresses connected), an
	/// address's connections are refused more, and a new address always finds room
	/// [file: `[limits] memory`] [default: half the machine's memory, at least --cache-size plus
	/// 64MiB].
	#[arg(long = "max-memory", value_name = "SIZE")]
	pub memory: Option<Size>,
	/// The share of --max-memory an address may always hold, however many addresses are
	/// connected [file: `[limits] address_memory`] [default: 32MiB].
	#[arg(long = "address-memory", value_name = "SIZE")]
	pub address_memory: Option<Size>,
	/// The receive window a connection starts with; a session that may publish grows it to
	/// --connection-window, if its address's share of --max-memory has room
	/// [file: `[limits] initial_window`] [default: 64KiB].
	#[arg(long = "initial-window", value_name = "SIZE")]
	pub initial_window: Option<Size>,
	/// Bytes of announcement updates one session may hold queued for a peer that does not read
	/// them; past it the request is reset with BoundsExceeded (11), and the peer asks again
	/// [file: `[limits] announce_queue`] [default: 1MiB].
	#[arg(long = "announce-queue", value_name = "SIZE")]
	pub announce_queue: Option<Size>,
}

/// The resolved limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
	/// See [`LimitOptions::handshakes`] and the others of the same name.
	pub quic: moq_quic::Limits,
	/// How long a connection may take to send its SETUP.
	pub setup_timeout: Duration,
	/// Unread bytes per stream.
	pub stream_window: u32,
	/// Unread bytes per connection.
	pub connection_window: u32,
	/// Queued bytes per connection's send streams.
	pub send_buffer: usize,
	/// Bytes of datagrams forwarded to a worker and not yet handled, per worker.
	pub forward_queue: usize,
	/// Streams per direction per connection.
	pub streams: u32,
	/// Per session.
	pub session: moq_net::lite::session::Limits,
	/// Per cluster peer's session.
	pub cluster_session: moq_net::lite::session::Limits,
	/// Requests per second of all sessions from one address (not cluster peers').
	pub address_request_rate: u32,
	/// Requests at once of all sessions from one address.
	pub address_request_burst: u32,
	/// Cache bytes per publishing session; `None` for a quarter of the cache.
	pub session_cache: Option<u64>,
	/// HTTP connections at once.
	pub http_connections: usize,
	/// HTTP connections at once per address.
	pub http_per_ip: usize,
	/// HTTP request head deadline.
	pub http_head_timeout: Duration,
	/// What everything peers make the relay hold may add up to; `None` for the default, which
	/// depends on the machine ([`Limits::memory_for`]).
	pub memory: Option<u64>,
	/// The least share of `memory` an address may hold.
	pub address_memory: u64,
	/// The receive window connections start with.
	pub initial_window: u32,
}

impl Default for Limits {
	fn default() -> Self {
		Self {
			quic: moq_quic::Limits::default(),
			setup_timeout: Duration::from_secs(10),
			stream_window: moq_quic::DEFAULT_STREAM_RECEIVE_WINDOW,
			connection_window: moq_quic::DEFAULT_RECEIVE_WINDOW,
			send_buffer: moq_quic::DEFAULT_SEND_BUFFER,
			// About 700 full-size datagrams: a migrated connection's traffic in one worker's
			// turn, while a flood addressed to another worker's ids holds no more than this.
			forward_queue: 1 << 20,
			// quinn-proto sets up state for every stream a peer may open: allowing 1,024 each way
			// from the handshake on cost 170 KB per connection (handshake or idle), 256 cost 72 KB
			// (tests/memory.rs). Connections now start at 16 (moq_quic::INITIAL_STREAMS) and
			// grow to this on use; 256 concurrent group streams or requests is far more than a
			// publisher or viewer uses.
			streams: 256,
			session: moq_net::lite::session::Limits {
				// A request costs the relay a task and its state, and a SUBSCRIBE with history up
				// to 64 group streams and their first chunks; a viewer asks for a few tracks at a
				// time, a page of many players a few hundred at once. In instructions, the
				// sessions' side of one (moq-net over the in-memory transport, QUIC's per-stream
				// work not included; `cargo run --release -p bench --bin requests`): 32k for a name
				// asked upstream and refused, 52k for a cached track answered with its group.
				request_rate: 64,
				request_burst: 256,
				..moq_net::lite::session::Limits::default()
			},
			// A peer announces every broadcast its clients publish and asks once for every track
			// its viewers want; a relay with more than this many is one to split.
			cluster_session: cluster_limits(moq_net::lite::session::Limits::default(), 16_384),
			// Sixteen sessions' worth: a NAT with many viewers starting at once passes, and a peer
			// that reconnects for fresh bursts gets no more than this. At the rate, an address's
			// requests cost the sessions about 33-54 M instructions a second (see above).
			address_request_rate: 1024,
			address_request_burst: 4096,
			session_cache: None,
			http_connections: 256,
			http_per_ip: 16,
			http_head_timeout: Duration::from_secs(3),
			memory: None,
			address_memory: 32 << 20,
			// A viewer sends requests, a few hundred bytes each: 64 KiB is hundreds of them in
			// flight. A publisher grows it once its session says it may publish.
			initial_window: 64 << 10,
		}
	}
}

impl Limits {
	/// The memory ceiling: as configured, or half the machine's memory (`MemTotal`), and never
	/// less than the cache plus 64 MiB for connections.
	pub fn memory_for(&self, cache_size: u64) -> u64 {
		let floor = cache_size.saturating_add(64 << 20);
		match self.memory {
			Some(memory) => memory,
			None => machine_memory().map_or(1 << 30, |total| total / 2).max(floor),
		}
	}
}

/// The machine's memory (`MemTotal` in `/proc/meminfo`), if it can be read.
fn machine_memory() -> Option<u64> {
	let info = std::fs::read_to_string("/proc/meminfo").ok()?;
	let line = info.lines().find(|line| line.starts_with("MemTotal:"))?;
	let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
	Some(kib * 1024)
}

impl LimitOptions {
	/// The limits, defaults where nothing was given.
	pub fn resolve(self) -> Result<Limits, String> {
		let d = Limits::default();
		let window = |size: Option<Size>, default: u32, name: &str| match size {
			None => Ok(default),
			Some(Size(bytes)) => u32::try_from(bytes)
				.ok()
				.filter(|&b| b >= 1024)
				.ok_or_else(|| format!("{name}: {bytes} is not between 1KiB and 4GiB")),
		};
		let session = moq_net::lite::session::Limits {
			announces: self.announces.unwrap_or(d.session.announces),
			subscriptions: self.subscriptions.unwrap_or(d.session.subscriptions),
			track_requests: self.track_requests.unwrap_or(d.session.track_requests),
			groups_in_flight: self.groups_in_flight.unwrap_or(d.session.groups_in_flight).max(1),
			partial_bytes: self.partial_bytes.map_or(d.session.partial_bytes, |s| s.0),
			announce_queue: self.announce_queue.map_or(d.session.announce_queue, |s| s.0),
			request_rate: self.request_rate.unwrap_or(d.session.request_rate),
			request_burst: self.request_burst.unwrap_or(d.session.request_burst).max(1),
		};
		Ok(Limits {
			quic: moq_quic::Limits {
				handshakes: self.handshakes.unwrap_or(d.quic.handshakes),
				handshakes_per_ip: self.handshakes_per_ip.unwrap_or(d.quic.handshakes_per_ip),
				retry_above: self.retry_above.unwrap_or(d.quic.retry_above),
				handshake_timeout: self.handshake_timeout.map_or(d.quic.handshake_timeout, |s| s.0),
			},
			setup_timeout: self.setup_timeout.map_or(d.setup_timeout, |s| s.0),
			stream_window: window(self.stream_window, d.stream_window, "stream_window")?,
			connection_window: window(self.connection_window, d.connection_window, "connection_window")?,
			send_buffer: match self.send_buffer {
				None => d.send_buffer,
				Some(Size(bytes)) => usize::try_from(bytes)
					.ok()
					.filter(|&b| b >= 256 << 10)
					.ok_or_else(|| format!("send_buffer: {bytes} is below 256KiB, one stream's queue"))?,
			},
			forward_queue: self
				.forward_queue
				.map_or(Ok(d.forward_queue), |Size(bytes)| usize::try_from(bytes))
				.map_err(|_| "forward_queue: too large".to_owned())?,
			streams: self.streams.unwrap_or(d.streams),
			session,
			cluster_session: cluster_limits(session, self.cluster_requests.unwrap_or(d.cluster_session.announces)),
			address_request_rate: self.address_request_rate.unwrap_or(d.address_request_rate),
			address_request_burst: self.address_request_burst.unwrap_or(d.address_request_burst).max(1),
			session_cache: self.session_cache.map(|s| s.0),
			http_connections: self.http_connections.unwrap_or(d.http_connections).max(1),
			http_per_ip: self.http_per_ip.unwrap_or(d.http_per_ip).max(1),
			http_head_timeout: self.http_head_timeout.map_or(d.http_head_timeout, |s| s.0),
			memory: self.memory.map(|s| s.0),
			address_memory: self.address_memory.map_or(d.address_memory, |s| s.0),
			initial_window: window(self.initial_window, d.initial_window, "initial_window")?,
		})
	}
}

/// A cluster peer's session: `session`'s limits with `requests` announcements, subscriptions and
/// track requests, and its requests not paced (a peer asks for every viewer of its relay, and a
/// relay that restarts asks for all of them at once).
fn cluster_limits(session: moq_net::lite::session::Limits, requests: usize) -> moq_net::lite::session::Limits {
	moq_net::lite::session::Limits {
		announces: requests,
		subscriptions: requests,
		track_requests: requests,
		request_rate: 0,
		..session
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn the_file_fills_what_it_names_and_defaults_the_rest() {
		let file: LimitOptions =
			toml::from_str("handshakes = 10\nstream_window = \"64KiB\"\nhttp_head_timeout = 1.5").unwrap();
		let limits = file.resolve().unwrap();
		assert_eq!(limits.quic.handshakes, 10);
		assert_eq!(limits.stream_window, 64 << 10);
		assert_eq!(limits.http_head_timeout, Duration::from_millis(1500));
		assert_eq!(limits.session, Limits::default().session);
		assert!(
			toml::from_str::<LimitOptions>("handshake = 1").is_err(),
			"a typo is an error"
		);
	}

	#[test]
	fn requests_are_paced_for_every_session_but_a_cluster_peers() {
		let file: LimitOptions = toml::from_str("request_rate = 5\nrequest_burst = 0").unwrap();
		let limits = file.resolve().unwrap();
		assert_eq!(limits.session.request_rate, 5);
		assert_eq!(limits.session.request_burst, 1, "a burst of at least one request");
		assert_eq!(limits.cluster_session.request_rate, 0, "cluster peers are not paced");
		let file: LimitOptions = toml::from_str("address_request_rate = 7\naddress_request_burst = 9").unwrap();
		let limits = file.resolve().unwrap();
		assert_eq!((limits.address_request_rate, limits.address_request_burst), (7, 9));
		assert_eq!(limits.session.request_rate, Limits::default().session.request_rate);
	}
}
