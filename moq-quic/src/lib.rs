//! QUIC on quinn-proto, driven by kio's io_uring UDP sockets, with our own send scheduler.
//!
//! # Layers
//!
//! - [`Endpoint`] (`endpoint.rs`): per worker, one UDP socket (`SO_REUSEPORT`, so every worker
//!   binds the same port) and one `quinn_proto::Endpoint`; a receiver task feeds GRO trains to it a
//!   datagram at a time and a sender task turns produced transmits into GSO `sendmsg`s.
//! - [`Connection`] (`connection.rs`): one driver task per connection, running quinn-proto's
//!   state machine in the order that avoids stalls; streams and datagrams for the application.
//! - [`scheduler`]: what enters quinn-proto next — strict priority levels, a deficit round robin
//!   of send groups per level threaded through a slab (O(1) reprioritize and retire), streams
//!   within a group.
//! - [`tls`]: rustls 0.23 with an explicit `ring` provider, TLS 1.3 only; self-signed ECDSA P-256
//!   certificates of at most 14 days and their SHA-256 fingerprints; verification by roots, by a
//!   pinned fingerprint, or explicitly disabled.
//! - [`byte_stream`]: TCP in the clear or under TLS (rustls on a kio TCP stream), what QMux and
//!   the relay's HTTP server run on.
//! - [`Router`] (`route.rs`): hands a datagram that reached the wrong worker (a client whose
//!   address changed) to the worker that holds its connection, named in the connection id.
//! - [`nat`]: a NAT on loopback that rebinds on demand, for tests of that.
//! - [`sim`]: an in-memory network on the worker's (paused) clock with seeded loss, jitter and a
//!   rate-limited bottleneck, so the same driver is tested deterministically.
//! - `moq`: moq-net's `Transport` for [`Connection`], for [`webtransport`] (WebTransport over
//!   HTTP/3, [`h3`] sans-io) and for [`qmux`] (QUIC's streams over a WebSocket, for clients
//!   without UDP: a sans-io core and a driver on kio's TCP).
//!
//! Everything of a connection lives on the worker that owns its endpoint: handles are `!Send`.

#![forbid(unsafe_code)]

pub mod byte_stream;
mod connection;
mod endpoint;
pub mod h3;
mod idhash;
pub mod limits;
mod moq;
pub mod nat;
pub mod qmux;
mod route;
pub mod scheduler;
pub mod sim;
mod stream;
pub mod tls;
pub mod webtransport;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

pub use connection::{CHURN_ALLOWANCE, Connection, StreamError, TX_DATAGRAM_BUDGET};
pub use endpoint::{Endpoint, EndpointStats};
pub use limits::{HandshakeBudget, HandshakeStats, Limits};
pub use moq::{MoqRecv, MoqSend, WtRecv, WtSend, closed_code, qmux_closed_code};
pub use quinn_proto::{ConnectionError, Dir, StreamId, TransportConfig, VarInt};
pub use route::{Router, RouterStats};
pub use stream::{RecvStream, SendStream};
pub use tls::{Certificate, ServerCertificate, Verification};

/// The ALPN of moq-lite-05 over raw QUIC.
pub const ALPN_MOQ_LITE_05: &[u8] = b"moq-lite-05";

/// Datagrams per GSO batch by default: quinn's figure ("benchmarks have shown numbers around 10
/// are a good compromise"), the batch `poll_transmit` fills at once.
pub const DEFAULT_GSO_SEGMENTS: usize = 10;

/// Kernel socket buffers (each way) by default. The kernel's default receive buffer (208 KiB
/// here) overflowed in the loopback bulk benchmark and every lost packet was dropped there
/// (0.05–1% of datagrams); 4 MiB lost none and, with the 16 KiB scheduler quantum, took two
/// workers from 343 to 493 MB/s (`benches/results/throughput.md`). The kernel may cap it
/// (`net.core.rmem_max`) unless the process may force it (`CAP_NET_ADMIN`).
pub const DEFAULT_SOCKET_BUFFER: usize = 4 << 20;

/// Bytes of produced transmits (their buffers' capacity) an endpoint queues for its sender by
/// default before connections wait. A frame fanned out to N viewers on one worker queues N
/// transmits at once, one datagram each in a 1,500-byte buffer, so this is sized for hundreds:
/// at the 64 transmits it replaced, 36 of 100 viewers found the queue full and turned again once
/// the sender made room (0.4 connection turns per delivered frame more, counted at fanout 1x100
/// on one worker; with 200 viewers on a worker, every waiting connection woken each time the
/// sender took a batch of 32, the arithmetic gives 1.8). 1 MiB is about 700 such transmits, or 80
/// GSO trains of 13 KB.
pub const DEFAULT_SEND_QUEUE: usize = 1 << 20;

/// [`Config::send_buffer`] by default: sixteen streams' worth of 256 KiB, several seconds of a
/// video stream's groups, far more than quinn-proto takes in at once (about twice the congestion
/// window), so a connection that keeps up never waits for it.
pub const DEFAULT_SEND_BUFFER: usize = 4 << 20;

/// An endpoint's configuration.
#[derive(Clone)]
pub struct Config {
	/// quinn-proto's endpoint settings (connection ids, reset key, seed).
	pub endpoint: quinn_proto::EndpointConfig,
	/// Accept connections with this configuration; `None` refuses them.
	pub server: Option<quinn_proto::ServerConfig>,
	/// Connect with this configuration ([`Endpoint::connect`]).
	pub client: Option<quinn_proto::ClientConfig>,
	/// Datagrams per GSO send (1 turns GSO off).
	pub gso_segments: usize,
	/// Receive GRO trains.
	pub gro: bool,
	/// The socket's kernel receive and send buffers, in bytes.
	pub socket_buffer: usize,
	/// Handshakes in progress, shared by every endpoint made from this configuration.
	pub handshakes: Arc<HandshakeBudget>,
	/// Binds with `SO_REUSEPORT`, so every worker of a server binds the same port
	/// ([`with_shared_port`](Self::with_shared_port)).
	pub shared_port: bool,
	/// Streams of each direction the peer may have open at once, at most: a connection's allowance
	/// starts at what its transport configuration says ([`INITIAL_STREAMS`] for [`transport`] and
	/// [`windows`]) and doubles whenever the peer has half of it open, up to this
	/// ([`with_max_streams`](Self::with_max_streams)).
	pub max_streams: u32,
	/// A connection made with [`with_client`](Self::with_client) or
	/// [`with_server`](Self::with_server) after it ends when nothing arrives for this long
	/// ([`DEFAULT_IDLE_TIMEOUT`] unless [`with_idle_timeout`](Self::with_idle_timeout) says).
	pub idle_timeout: Duration,
	/// Bytes of produced transmits an endpoint queues for its sender before connections stop
	/// producing until it makes room ([`DEFAULT_SEND_QUEUE`] unless
	/// [`with_send_queue`](Self::with_send_queue) says). Connections that had to wait are
	/// counted ([`EndpointStats::send_queue_waits`]).
	pub send_queue: usize,
	/// Bytes a connection's send streams may hold queued, all streams together, before writers
	/// wait ([`DEFAULT_SEND_BUFFER`] unless [`with_send_buffer`](Self::with_send_buffer) says).
	/// Each stream also holds at most 256 KiB: without this, a peer that let the relay open many
	/// streams and never granted them credit made it queue 256 KiB on each.
	pub send_buffer: usize,
	/// The server's router and this endpoint's worker index in it, so a client whose address
	/// changes keeps its connection whichever worker its datagrams reach
	/// ([`with_router`](Self::with_router)).
	pub router: Option<(Arc<Router>, u8)>,
	/// Where an accepted connection's memory is charged, by its peer's address
	/// ([`with_memory`](Self::with_memory)).
	pub memory: Option<Arc<dyn MemoryAccounts>>,
	/// The connection receive window accepted connections start with, in bytes (what
	/// [`with_memory`](Self::with_memory) charges for it).
	pub server_window: u64,
}

/// Where accepted connections' memory is charged, by the peer's address (a server's memory
/// ceiling, shared fairly by addresses): see [`Config::with_memory`].
pub trait MemoryAccounts: Send + Sync {
	/// The budget a new connection from `ip` is charged to.
	fn account(&self, ip: IpAddr) -> kio::sync::Budget;

	/// `account(ip)` could not take `amount` for a new connection: whether to charge it anyway,
	/// over the budget, because room is being made (another connection closed to make it). By
	/// default, no: the connection is refused.
	fn make_room(&self, ip: IpAddr, amount: u64) -> bool {
		let _ = (ip, amount);
		false
	}
}

/// What an accepted connection costs before anything is in its windows or queues: quinn-proto's
/// state and our driver's (an idle established connection grew the relay's resident set by 28 KB,
/// a handshake in progress by 30 KB: `bench/results/relay-memory.md`), and the unread datagrams
/// quinn-proto may hold for it (64 KiB, [`transport`]).
pub const CONNECTION_COST: u64 = (32 << 10) + (64 << 10);

impl Config {
	/// An endpoint that neither accepts nor connects until configured.
	pub fn new() -> Self {
		Self {
			endpoint: quinn_proto::EndpointConfig::default(),
			server: None,
			client: None,
			gso_segments: DEFAULT_GSO_SEGMENTS,
			gro: true,
			socket_buffer: DEFAULT_SOCKET_BUFFER,
			handshakes: Arc::new(HandshakeBudget::new(Limits::default())),
			shared_port: false,
			max_streams: DEFAULT_MAX_STREAMS,
			idle_timeout: DEFAULT_IDLE_TIMEOUT,
			send_queue: DEFAULT_SEND_QUEUE,
			send_buffer: DEFAULT_SEND_BUFFER,
			router: None,
			memory: None,
			server_window: u64::from(DEFAULT_RECEIVE_WINDOW),
		}
	}

	/// Charges every accepted connection's memory to the budget `accounts` gives for its peer's
	/// address ([`MemoryAccounts::account`]): [`CONNECTION_COST`] and its receive window (the
	/// transport's connection window, to start with) from the handshake on, and what its streams
	/// queue to send. A connection the budget cannot take is refused at its first packet, as the
	/// handshake limits refuse, unless [`MemoryAccounts::make_room`] says room is being made.
	/// Send queues are bounded per connection by [`send_buffer`](Self::send_buffer) and counted
	/// in the address's budget without being refused by it (a writer waits only on its own
	/// connection): the application holds that budget by closing connections. Each connection's
	/// charges sit in a budget of its own under the address's ([`Connection::memory`]), which
	/// the application charges too (what its sessions hold) and can grow the receive window
	/// against ([`Connection::set_receive_window`]).
	pub fn with_memory(mut self, accounts: Arc<dyn MemoryAccounts>) -> Self {
		self.memory = Some(accounts);
		self
	}

	/// Ends connections made by the next [`with_client`](Self::with_client) or
	/// [`with_server`](Self::with_server) after `idle` without anything from the peer (the
	/// negotiated timeout is the smaller of the two ends'), with keep-alives at a third of it (at
	/// most every 5 s): how soon a peer that vanished without a word (a crash, a lost route) is
	/// taken for gone.
	pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
		self.idle_timeout = idle;
		self
	}

	/// Bounds the bytes of transmits queued for the sender (see [`send_queue`](Self::send_queue)).
	pub fn with_send_queue(mut self, bytes: usize) -> Self {
		self.send_queue = bytes;
		self
	}

	/// Bounds the bytes a connection's streams hold queued (see [`send_buffer`](Self::send_buffer));
	/// at least one stream's worth.
	pub fn with_send_buffer(mut self, bytes: usize) -> Self {
		self.send_buffer = bytes.max(connection::STREAM_BUFFER);
		self
	}

	/// Makes the endpoint worker `worker` of `router`'s: the connection ids it issues name it, and
	/// it takes the datagrams other workers receive for them, and hands over theirs (see
	/// [`Router`]). For the endpoints of a server's workers, which share a port
	/// ([`with_shared_port`](Self::with_shared_port)).
	///
	/// # Panics
	///
	/// If `worker` is not one of `router`'s.
	pub fn with_router(mut self, router: Arc<Router>, worker: usize) -> Self {
		assert!(
			worker < router.workers(),
			"worker {worker} of a router for {}",
			router.workers()
		);
		self.router = Some((router, worker as u8));
		self
	}

	/// Caps the streams of each direction a peer may have open at once (see
	/// [`max_streams`](Self::max_streams)); below the transport's starting allowance, the
	/// allowance is lowered to it when the connection starts.
	pub fn with_max_streams(mut self, streams: u32) -> Self {
		self.max_streams = streams;
		self
	}

	/// Binds with `SO_REUSEPORT`: a server's workers each bind the same port and the kernel
	/// spreads clients over them by address. Only for that: off by default, because on Linux an
	/// ephemeral bind (port 0) with `SO_REUSEPORT` may be handed a port that another such socket
	/// of the same user already holds, and the two then split each other's datagrams. The relay
	/// load generator found it: with every client endpoint sharing, about 1 connection in 400
	/// lost its handshake or its session to a neighbour bound to the same port.
	pub fn with_shared_port(mut self, on: bool) -> Self {
		self.shared_port = on;
		self
	}

	/// Caps handshakes in progress (see [`limits`]).
	pub fn with_limits(mut self, limits: Limits) -> Self {
		self.handshakes = Arc::new(HandshakeBudget::new(limits));
		self
	}

	/// Gives accepted connections other receive windows ([`windows`]): `stream` bytes per stream,
	/// `connection` over all of them to start with; call after [`with_server`](Self::with_server).
	pub fn with_server_windows(mut self, stream: u32, connection: u32) -> Self {
		self.server_window = u64::from(connection);
		let transport = idle(windows(stream, connection), self.idle_timeout);
		self.with_server_transport(transport)
	}

	/// Sets the transport settings of accepted connections (a server's receive windows and stream
	/// limits, say); call after [`with_server`](Self::with_server).
	pub fn with_server_transport(mut self, transport: TransportConfig) -> Self {
		if let Some(server) = &mut self.server {
			server.transport_config(Arc::new(transport));
		}
		self
	}

	/// Accepts connections with `certificate`, offering `alpn`.
	pub fn with_server(self, certificate: &Certificate, alpn: &[&[u8]]) -> Result<Self, tls::TlsError> {
		self.with_server_certificate(&ServerCertificate::new(certificate.clone())?, alpn)
	}

	/// Accepts connections with the certificate `certificate` holds at each handshake (one that
	/// can be replaced while the endpoint serves), offering `alpn`.
	pub fn with_server_certificate(
		mut self,
		certificate: &ServerCertificate,
		alpn: &[&[u8]],
	) -> Result<Self, tls::TlsError> {
		let crypto = tls::server_crypto(certificate, alpn)?;
		let mut server = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
		server.transport_config(Arc::new(idle(transport(), self.idle_timeout)));
		self.server = Some(server);
		Ok(self)
	}

	/// Connects verifying servers as `verification` says, offering `alpn`.
	pub fn with_client(mut self, verification: &Verification, alpn: &[&[u8]]) -> Result<Self, tls::TlsError> {
		let crypto = tls::client_crypto(verification, alpn)?;
		let mut client = quinn_proto::ClientConfig::new(Arc::new(crypto));
		client.transport_config(Arc::new(idle(transport(), self.idle_timeout)));
		self.client = Some(client);
		Ok(self)
	}

	/// Sets the GSO batch (1 turns GSO off).
	pub fn with_gso_segments(mut self, segments: usize) -> Self {
		self.gso_segments = segments.clamp(1, kio::net::MAX_GSO_SEGMENTS);
		self
	}

	/// Turns GRO on or off.
	pub fn with_gro(mut self, on: bool) -> Self {
		self.gro = on;
		self
	}

	/// Seeds quinn-proto's random choices (connection ids), for reproducible simulations.
	pub fn with_seed(mut self, seed: [u8; 32]) -> Self {
		self.endpoint.rng_seed(Some(seed));
		self
	}
}

impl Default for Config {
	fn default() -> Self {
		Self::new()
	}
}

/// The transport settings every connection starts with.
///
/// MoQ opens a stream per group. The peer may open [`INITIAL_STREAMS`] of each kind at first, and
/// the connection raises that as the peer uses it, up to [`Config::max_streams`]. Idle
/// connections time out after 30 s and keep-alives every 5 s keep a quiet subscriber's connection
/// up. What a peer can make us buffer is bounded: 1 MiB unread per stream and
/// [`DEFAULT_RECEIVE_WINDOW`] over the whole connection (quinn's default connection window is
/// unbounded), and 64 KiB of unread datagrams (quinn's default queues 1.25 MB; it drops the oldest
/// when full). The rest is quinn-proto's default (CUBIC, MTU discovery from 1,200 bytes).
pub fn transport() -> TransportConfig {
	windows(DEFAULT_STREAM_RECEIVE_WINDOW, DEFAULT_RECEIVE_WINDOW)
}

/// How long a connection lasts without anything from its peer, by default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Keep-alives at most this far apart: a quiet subscriber's connection stays up.
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// `transport` ending connections after `timeout` without anything from the peer, with
/// keep-alives at a third of it (at most every 5 s).
pub fn idle(mut transport: TransportConfig, timeout: Duration) -> TransportConfig {
	let timeout = timeout.clamp(Duration::from_millis(30), Duration::from_secs(3600));
	transport
		.max_idle_timeout(Some(
			timeout.try_into().expect("at most an hour is a valid idle timeout"),
		))
		.keep_alive_interval(Some(KEEP_ALIVE.min(timeout / 3)));
	transport
}

/// Unread bytes one stream may hold by default.
pub const DEFAULT_STREAM_RECEIVE_WINDOW: u32 = 1 << 20;
/// Unread bytes a whole connection may hold by default: several of the largest keyframes in
/// flight, small next to a relay's memory.
pub const DEFAULT_RECEIVE_WINDOW: u32 = 4 << 20;

/// The streams of each kind a peer may open when a connection starts. quinn-proto keeps a map
/// entry for every stream the peer may open, from the handshake on, and its maps never shrink:
/// allowing 256 from the start, the two maps were 34 KB of a relay's 99 KB per connection (dhat,
/// fanout of 100 viewers), for viewers that open one or two streams; at 32 they were 4.3 KB, at
/// 16 about 2 KB. A peer that needs more gets them within a round trip of
/// having half open (see [`Config::max_streams`]).
pub const INITIAL_STREAMS: u32 = 16;

/// [`Config::max_streams`] by default.
pub const DEFAULT_MAX_STREAMS: u32 = 1024;

/// [`transport`] with other receive windows (bytes).
pub fn windows(stream: u32, connection: u32) -> TransportConfig {
	let mut transport = TransportConfig::default();
	transport
		.max_concurrent_uni_streams(VarInt::from_u32(INITIAL_STREAMS))
		.max_concurrent_bidi_streams(VarInt::from_u32(INITIAL_STREAMS))
		.stream_receive_window(VarInt::from_u32(stream))
		// A connection window below the stream window caps every stream by it: a server that
		// grows windows later ([`Connection::set_receive_window`]) starts its connections small.
		.receive_window(VarInt::from_u32(connection))
		.datagram_receive_buffer_size(Some(64 << 10));
	idle(transport, DEFAULT_IDLE_TIMEOUT)
}

/// Why a connection could not be started.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
	/// The endpoint has no client configuration.
	NoClientConfig,
	/// quinn-proto refused.
	Proto(quinn_proto::ConnectError),
}

impl std::fmt::Display for ConnectError {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		match self {
			Self::NoClientConfig => f.write_str("the endpoint has no client configuration"),
			Self::Proto(_) => f.write_str("quinn-proto refused the connection"),
		}
	}
}

impl std::error::Error for ConnectError {
	fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
		match self {
			Self::Proto(err) => Some(err),
			Self::NoClientConfig => None,
		}
	}
}

impl From<quinn_proto::ConnectError> for ConnectError {
	fn from(e: quinn_proto::ConnectError) -> Self {
		Self::Proto(e)
	}
}
