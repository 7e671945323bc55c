//! moq-client: one client for every URL the relay serves, used by `moq-clock`, the load
//! generator, the relay's cluster links and the tests.
//!
//! A [`Client`] is a builder: what the session is (its origin id in hop chains, what it
//! publishes, where it mirrors the relay's announcements, what the relay may make it hold), how
//! the relay's certificate is trusted, and which sockets it dials from. [`Client::connect`] takes
//! a [`Url`] and returns a running [`Session`]:
//!
//! | URL | transport |
//! |---|---|
//! | `moqt://host:port/path?jwt=…` | raw QUIC (ALPN `moq-lite-05`; or an IETF draft's, `moq-00`, `moqt-15` or `moqt-16`, with [`Client::protocol`]), the path and query in SETUP |
//! | `https://host:port/path?jwt=…` | WebTransport over HTTP/3 (ALPN `h3`), the path and query in the CONNECT, `moq-lite-05` offered as the sub-protocol (or the draft's, with [`Client::protocol`]) |
//! | `http://host:port/path?jwt=…` | WebTransport too, pinning the certificate fetched from `http://host:port/certificate.sha256` |
//! | `ws://host:port/path?jwt=…` | QMux over a WebSocket on the relay's HTTP port (TCP), the path and query in the upgrade, `qmux-01.moq-lite-05` offered: where UDP cannot go |
//! | `wss://host:port/path?jwt=…` | the same under TLS (ALPN `http/1.1`), on the same port |
//! | `qmux://host:port/path?jwt=…` | QMux over TLS on that port (ALPN `qmux-01.moq-lite-05`), the path and query in SETUP |
//! | `tcp://host:port/path?jwt=…` | QMux in plaintext on that port (qmux-01, `moq-lite-05` named in its transport parameters), the path and query in SETUP |
//!
//! Over TLS on TCP the certificate is trusted as over QUIC.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use moq_client::{Client, Url};
//! use moq_net::model::Origin;
//!
//! let local = Origin::new(7);
//! let session = Client::new()
//!     .origin(local.id())
//!     .subscribe(local.producer())
//!     .connect(&Url::parse("http://localhost:4443/demo")?)
//!     .await?;
//! let code = session.closed().await;
//! # Ok(())
//! # }
//! ```
//!
//! A name is resolved on a thread of its own ([`Url::resolve`]): a slow resolver never stalls the
//! worker the client runs on. Each connection dials from a socket of its own unless the client is
//! given an [`Endpoint`] to share, or a simulated network to dial over ([`Sockets`]).

#![forbid(unsafe_code)]

mod backoff;
pub mod http;
mod url;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::Context as _;
pub use backoff::{BACKOFF_MAX, BACKOFF_MIN, Backoff};
use moq_net::ietf;
use moq_net::lite::Role;
use moq_net::lite::session::{self, PeerSetup};
use moq_net::model::{OriginConsumer, OriginProducer};
use moq_net::transport::Transport;
use moq_quic::byte_stream::{ByteStream, TlsStream};
use moq_quic::h3::{self, ConnectRequest};
use moq_quic::qmux::{self, QmuxConnection};
use moq_quic::tls::rustls::pki_types::ServerName;
use moq_quic::webtransport::{self, WebTransport};
use moq_quic::{Connection, Endpoint, Verification};
pub use url::{DEFAULT_PORT, Scheme, Url};

/// How the relay's certificate is trusted.
#[derive(Clone, Debug)]
pub enum Trust {
	/// As this says.
	Verify(Verification),
	/// Pinned to the SHA-256 the relay serves at `http://HOST:PORT/certificate.sha256`: for a
	/// relay with a generated certificate, on a network where plain HTTP to it cannot be
	/// tampered with (a local relay, a test).
	FetchFingerprint,
}

/// Where connections are dialled from.
#[derive(Clone, Default)]
pub enum Sockets {
	/// A UDP socket of its own for each connection, on an ephemeral port of the relay's address
	/// family: replies come back to the socket that sent, whatever worker of a relay answers.
	#[default]
	Own,
	/// One endpoint for every connection (a test dialling many).
	Shared(Endpoint),
	/// An endpoint of its own for each connection on moq-quic's simulated network, at this
	/// address (ports counted up from 5000).
	Simulated(moq_quic::sim::Network, IpAddr),
}

/// A client: what its sessions are, and how it reaches relays. Cheap to clone.
#[derive(Clone)]
pub struct Client {
	config: session::Config,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
	trust: Trust,
	sockets: Sockets,
	idle_timeout: Option<Duration>,
	protocol: Protocol,
}

/// Which protocol a client speaks over raw QUIC (`moqt://`, the ALPN) and WebTransport
/// (`https://`, the sub-protocol).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
	/// moq-lite-05 (ALPN `moq-lite-05`).
	#[default]
	Lite,
	/// IETF moq-transport draft-14 (ALPN `moq-00`, the version chosen in CLIENT_SETUP).
	Draft14,
	/// IETF moq-transport draft-15 (ALPN `moqt-15`).
	Draft15,
	/// IETF moq-transport draft-16 (ALPN `moqt-16`).
	Draft16,
}

impl Protocol {
	/// The IETF draft, if it is one.
	fn ietf(self) -> Option<ietf::Version> {
		match self {
			Self::Lite => None,
			Self::Draft14 => Some(ietf::Version::Draft14),
			Self::Draft15 => Some(ietf::Version::Draft15),
			Self::Draft16 => Some(ietf::Version::Draft16),
		}
	}
}

impl std::str::FromStr for Protocol {
	type Err = String;

	/// `moq-lite-05`, or `moq-transport-14` to `-16` (the public clients' names).
	fn from_str(text: &str) -> Result<Self, String> {
		match text {
			"moq-lite-05" | "lite" => Ok(Self::Lite),
			"moq-transport-14" | "draft-14" => Ok(Self::Draft14),
			"moq-transport-15" | "draft-15" => Ok(Self::Draft15),
			"moq-transport-16" | "draft-16" => Ok(Self::Draft16),
			other => Err(format!("{other}: not moq-lite-05, or moq-transport-14 to -16")),
		}
	}
}

impl Default for Client {
	fn default() -> Self {
		Self::new()
	}
}

impl Client {
	/// A client that neither publishes nor subscribes yet, with the default session limits,
	/// trusting the certificate the relay serves over HTTP ([`Trust::FetchFingerprint`]), each
	/// connection on a socket of its own.
	pub fn new() -> Self {
		Self {
			config: session::Config::default(),
			publish: None,
			subscribe: None,
			trust: Trust::FetchFingerprint,
			sockets: Sockets::Own,
			idle_timeout: None,
			protocol: Protocol::Lite,
		}
	}

	/// Speaks `protocol` over raw QUIC (`moqt://` URLs; the others are moq-lite's).
	pub fn protocol(mut self, protocol: Protocol) -> Self {
		self.protocol = protocol;
		self
	}

	/// This client's id in hop chains (0: none).
	pub fn origin(mut self, id: u64) -> Self {
		self.config.origin = id;
		self
	}

	/// Publishes `origin`'s broadcasts to the relay.
	pub fn publish(mut self, origin: OriginConsumer) -> Self {
		self.publish = Some(origin);
		self
	}

	/// Mirrors the relay's announcements into `origin`.
	pub fn subscribe(mut self, origin: OriginProducer) -> Self {
		self.subscribe = Some(origin);
		self
	}

	/// What the relay may make a session hold (the announcements it mirrors, say).
	pub fn limits(mut self, limits: session::Limits) -> Self {
		self.config.limits = limits;
		self
	}

	/// The whole session configuration (a relay linking with a cluster peer: its pool, counters,
	/// limits and linger); its `path` and `role` are still set by [`connect`](Self::connect).
	pub fn session(mut self, config: session::Config) -> Self {
		self.config = config;
		self
	}

	/// How the relay's certificate is trusted.
	pub fn trust(mut self, trust: Trust) -> Self {
		self.trust = trust;
		self
	}

	/// Trusts what `verification` says.
	pub fn verify(self, verification: Verification) -> Self {
		self.trust(Trust::Verify(verification))
	}

	/// Where connections are dialled from.
	pub fn sockets(mut self, sockets: Sockets) -> Self {
		self.sockets = sockets;
		self
	}

	/// Dials every connection from `endpoint`.
	pub fn endpoint(self, endpoint: Endpoint) -> Self {
		self.sockets(Sockets::Shared(endpoint))
	}

	/// How long a relay may stay silent before its connections are taken for gone (the QUIC idle
	/// timeout, keep-alives at a third of it); moq-quic's default otherwise. Applies to sockets
	/// the client binds, not to a shared endpoint.
	pub fn idle_timeout(mut self, idle: Duration) -> Self {
		self.idle_timeout = Some(idle);
		self
	}

	/// Connects to the relay at `url` (its host resolved off the worker) and starts the session.
	pub async fn connect(&self, url: &Url) -> anyhow::Result<Session> {
		let addr = url.resolve().await?;
		self.connect_to(url, addr).await
	}

	/// Connects to `addr` as `url` says (the URL's host is the TLS server name).
	pub async fn connect_to(&self, url: &Url, addr: SocketAddr) -> anyhow::Result<Session> {
		let verification = match (&self.trust, url.scheme) {
			(Trust::Verify(verification), Scheme::Moqt | Scheme::Https | Scheme::Wss | Scheme::Qmux) => {
				verification.clone()
			}
			(_, Scheme::Ws | Scheme::Tcp) => Verification::Disabled,
			(Trust::FetchFingerprint, _) | (_, Scheme::Http) => fetch_fingerprint(addr).await?,
		};
		if url.scheme.is_qmux() {
			return self.connect_qmux(url, addr, &verification).await;
		}
		let endpoint = self.endpoint_for(addr)?;
		let alpn = match (url.scheme, self.protocol.ietf()) {
			(Scheme::Moqt, None) => moq_quic::ALPN_MOQ_LITE_05,
			(Scheme::Moqt, Some(version)) => version.alpn(),
			_ => h3::ALPN,
		};
		let connection = handshake(&endpoint, addr, url, &verification, alpn).await?;
		let (peer, protocol, inner) = match url.scheme {
			Scheme::Moqt if self.protocol.ietf().is_some() => {
				let version = self.protocol.ietf().expect("a draft");
				let (session, peer) = self.start_ietf(&connection, Some(&url.path), version).await?;
				let protocol = String::from_utf8_lossy(alpn).into_owned();
				(peer, Some(protocol), Inner::Ietf { connection, session })
			}
			Scheme::Moqt => {
				let (session, peer) = self.start(&connection, Some(url.path.clone())).await?;
				let protocol = String::from_utf8_lossy(alpn).into_owned();
				(peer, Some(protocol), Inner::Quic { connection, session })
			}
			_ => {
				// The sub-protocol names the protocol, as the ALPN does over raw QUIC.
				let offered = match self.protocol.ietf() {
					Some(version) => version.alpn(),
					None => moq_quic::ALPN_MOQ_LITE_05,
				};
				let request = ConnectRequest {
					authority: url.authority(),
					path: url.path.clone(),
					protocols: vec![String::from_utf8_lossy(offered).into_owned()],
					origin: None,
				};
				let (transport, response) = webtransport::connect(&connection, &request)
					.await
					.context("WebTransport CONNECT")?;
				match self.protocol.ietf() {
					Some(version) => {
						// The CONNECT carried the path.
						let (session, peer) = self.start_ietf(&transport, None, version).await?;
						(peer, response.protocol, Inner::IetfWebTransport { transport, session })
					}
					None => {
						let (session, peer) = self.start(&transport, None).await?;
						(peer, response.protocol, Inner::WebTransport { transport, session })
					}
				}
			}
		};
		Ok(Session {
			peer,
			protocol,
			inner,
			endpoint: Some(endpoint),
		})
	}

	/// QMux to the relay's TCP port at `addr`, as `url`'s scheme says: over a WebSocket (the
	/// upgrade offering moq-lite-05 on qmux-01, -02 and -00), over TLS, or in plaintext; the
	/// connection's driver on this worker, then SETUP and the session.
	async fn connect_qmux(&self, url: &Url, addr: SocketAddr, verification: &Verification) -> anyhow::Result<Session> {
		let stream = kio::net::TcpStream::connect(addr)
			.await
			.with_context(|| format!("connecting to {addr}"))?;
		let name =
			|| ServerName::try_from(url.host.clone()).with_context(|| format!("{}: not a TLS server name", url.host));
		let tls = |alpn: &[&[u8]]| moq_quic::tls::tcp_client_config(verification, alpn).context("TLS");
		// Each driver runs on this worker from its connection's start.
		let upgrade = async |stream: ByteStream| {
			let protocols = ["qmux-01.moq-lite-05", "qmux-02.moq-lite-05", "qmux-00.moq-lite-05"];
			let config = qmux::Config::default();
			let opened = qmux::connect_websocket(stream, &url.authority(), &url.path, &protocols, config).await;
			let (conn, driver) = opened.context("WebSocket upgrade")?;
			anyhow::Ok((conn, kio::spawn(driver)))
		};
		let ((conn, driver), path) = match url.scheme {
			Scheme::Ws => (upgrade(stream.into()).await?, None),
			Scheme::Wss => {
				let tls = TlsStream::connect(stream, name()?, tls(&[b"http/1.1"])?).await;
				(upgrade(ByteStream::Tls(Box::new(tls.context("TLS")?))).await?, None)
			}
			Scheme::Qmux => {
				let tls = tls(&[b"qmux-01.moq-lite-05", b"qmux-02.moq-lite-05"])?;
				let opened = qmux::connect_tls(stream, name()?, tls, qmux::Config::default()).await;
				let (conn, driver) = opened.context("QMux over TLS")?;
				((conn, kio::spawn(driver)), Some(url.path.clone()))
			}
			_ => {
				let mut config = qmux::Config::default();
				config.params.application_protocols = vec!["moq-lite-05".to_owned()];
				let (conn, driver) = qmux::connect_tcp(stream, config)?;
				((conn, kio::spawn(driver)), Some(url.path.clone()))
			}
		};
		if conn.negotiated().await.is_none() {
			anyhow::bail!("{url}: no application protocol in common");
		}
		let (session, peer) = self.start(&conn, path).await?;
		Ok(Session {
			peer,
			protocol: conn.protocol(),
			inner: Inner::Qmux {
				conn,
				session,
				_driver: driver,
				transport: match url.scheme {
					Scheme::Ws => "websocket",
					Scheme::Wss => "websocket-tls",
					Scheme::Qmux => "qmux-tls",
					_ => "qmux-tcp",
				},
			},
			endpoint: None,
		})
	}

	fn endpoint_for(&self, relay: SocketAddr) -> anyhow::Result<Endpoint> {
		let config = match self.idle_timeout {
			Some(idle) => moq_quic::Config::new().with_idle_timeout(idle),
			None => moq_quic::Config::new(),
		};
		Ok(match &self.sockets {
			Sockets::Shared(endpoint) => endpoint.clone(),
			Sockets::Own => bind(relay, config)?,
			Sockets::Simulated(network, ip) => {
				let local = SocketAddr::new(*ip, network.free_port(*ip, 5000));
				Endpoint::simulated(network, local, config)
			}
		})
	}

	/// The session's configuration; `path` is SETUP's (raw QUIC only: over WebTransport the
	/// CONNECT carries it).
	fn config(&self, path: Option<String>) -> session::Config {
		// Say what this client does, so a relay does not ask a viewer for its announcements.
		let role = match (&self.publish, &self.subscribe) {
			(Some(_), None) => Some(Role::Publisher),
			(None, Some(_)) => Some(Role::Subscriber),
			_ => None,
		};
		session::Config {
			path,
			role,
			..self.config.clone()
		}
	}

	/// SETUP over `transport`, then the session.
	async fn start<T: Transport + Clone + 'static>(
		&self,
		transport: &T,
		path: Option<String>,
	) -> anyhow::Result<(session::Session<T>, PeerSetup)> {
		let config = self.config(path);
		let peer = session::setup(transport, &config).await.context("SETUP")?;
		let session = session::start(
			transport.clone(),
			config,
			peer.clone(),
			self.publish.clone(),
			self.subscribe.clone(),
		);
		Ok((session, peer))
	}

	/// A draft's CLIENT_SETUP over `transport` (with `path` where no CONNECT carried it), then
	/// the session.
	async fn start_ietf<T: Transport + Clone + 'static>(
		&self,
		transport: &T,
		path: Option<&str>,
		version: ietf::Version,
	) -> anyhow::Result<(ietf::session::Session<T>, PeerSetup)> {
		let config = self.config(None);
		let grant = ietf::session::initial_grant(&config, ietf::session::Side::Server);
		let (control, setup) = ietf::session::connect(transport, path, grant, version)
			.await
			.context("CLIENT_SETUP")?;
		let session = ietf::session::start(
			transport.clone(),
			control,
			config,
			setup,
			self.publish.clone(),
			self.subscribe.clone(),
		);
		// A draft's SETUP carries neither a role nor an origin id.
		let peer = PeerSetup {
			path: None,
			role: Role::Both,
			origin: 0,
		};
		Ok((session, peer))
	}
}

/// An endpoint to dial `relay` from, on an ephemeral port of its address family.
pub fn bind(relay: SocketAddr, config: moq_quic::Config) -> anyhow::Result<Endpoint> {
	let local: SocketAddr = match relay.is_ipv4() {
		true => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
		false => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
	};
	Endpoint::bind(local, config).context("binding a UDP socket")
}

/// A QUIC connection to `addr` offering `alpn`, its handshake done.
async fn handshake(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	alpn: &[u8],
) -> anyhow::Result<Connection> {
	let client = moq_quic::Config::new()
		.with_idle_timeout(endpoint.idle_timeout())
		.with_client(verification, &[alpn])?;
	let connection = endpoint.connect_with(client.client.expect("just configured"), addr, &url.host)?;
	connection.established().await.context("QUIC handshake")?;
	Ok(connection)
}

/// The certificate the relay at `addr` serves over HTTP, pinned.
pub async fn fetch_fingerprint(addr: SocketAddr) -> anyhow::Result<Verification> {
	let response = http::get(addr, "/certificate.sha256")
		.await
		.with_context(|| format!("fetching the fingerprint from http://{addr}/certificate.sha256"))?;
	let pin = moq_quic::tls::parse_fingerprint(response.body.trim())
		.with_context(|| format!("http://{addr}/certificate.sha256 is not 64 hex digits"))?;
	Ok(Verification::Fingerprints(vec![pin]))
}

/// A running session with a relay, over whichever transport its URL chose. Dropping it closes
/// the session.
pub struct Session {
	peer: PeerSetup,
	protocol: Option<String>,
	inner: Inner,
	/// The UDP endpoint a QUIC or WebTransport session was dialled from.
	endpoint: Option<Endpoint>,
}

enum Inner {
	Quic {
		connection: Connection,
		session: session::Session<Connection>,
	},
	/// An IETF moq-transport draft over raw QUIC.
	Ietf {
		connection: Connection,
		session: ietf::session::Session<Connection>,
	},
	WebTransport {
		transport: WebTransport,
		session: session::Session<WebTransport>,
	},
	/// An IETF moq-transport draft over WebTransport (its sub-protocol).
	IetfWebTransport {
		transport: WebTransport,
		session: ietf::session::Session<WebTransport>,
	},
	Qmux {
		conn: QmuxConnection,
		session: session::Session<QmuxConnection>,
		/// Ends with the connection (it closes when the session drops).
		_driver: kio::JoinHandle<()>,
		/// How it is carried, as the relay logs it.
		transport: &'static str,
	},
}

impl Session {
	/// Waits for the session to end; its code.
	pub async fn closed(&self) -> u64 {
		match &self.inner {
			Inner::Quic { session, .. } => session.closed().await,
			Inner::Ietf { session, .. } => session.closed().await,
			Inner::WebTransport { session, .. } => session.closed().await,
			Inner::IetfWebTransport { session, .. } => session.closed().await,
			Inner::Qmux { session, .. } => session.closed().await,
		}
	}

	/// Closes the session with `code`.
	pub fn close(&self, code: u64) {
		match &self.inner {
			Inner::Quic { session, .. } => session.close(code),
			Inner::Ietf { session, .. } => session.close(code),
			Inner::WebTransport { session, .. } => session.close(code),
			Inner::IetfWebTransport { session, .. } => session.close(code),
			Inner::Qmux { session, .. } => session.close(code),
		}
	}

	/// What the relay said in its SETUP.
	pub fn peer(&self) -> &PeerSetup {
		&self.peer
	}

	/// The application protocol the relay chose: the ALPN over raw QUIC, the sub-protocol over
	/// WebTransport (`None` if it chose none).
	pub fn protocol(&self) -> Option<&str> {
		self.protocol.as_deref()
	}

	/// The transport's name, as the relay logs it: `quic`, `webtransport`, or over QMux on TCP
	/// `websocket`, `websocket-tls`, `qmux-tls` or `qmux-tcp`.
	pub fn transport(&self) -> &'static str {
		match &self.inner {
			Inner::Quic { .. } | Inner::Ietf { .. } => "quic",
			Inner::WebTransport { .. } | Inner::IetfWebTransport { .. } => "webtransport",
			Inner::Qmux { transport, .. } => transport,
		}
	}

	/// The QUIC connection under the session.
	///
	/// # Panics
	///
	/// For a session over a WebSocket (`ws://`), which has none: see [`qmux`](Self::qmux).
	pub fn connection(&self) -> &Connection {
		match &self.inner {
			Inner::Quic { connection, .. } | Inner::Ietf { connection, .. } => connection,
			Inner::WebTransport { transport, .. } | Inner::IetfWebTransport { transport, .. } => transport.connection(),
			Inner::Qmux { .. } => panic!("a session over a WebSocket has no QUIC connection"),
		}
	}

	/// The QUIC connection under the session, if it has one (not over a WebSocket).
	pub fn quic_connection(&self) -> Option<&Connection> {
		match &self.inner {
			Inner::Quic { connection, .. } | Inner::Ietf { connection, .. } => Some(connection),
			Inner::WebTransport { transport, .. } | Inner::IetfWebTransport { transport, .. } => {
				Some(transport.connection())
			}
			Inner::Qmux { .. } => None,
		}
	}

	/// The QMux connection under a session over a WebSocket.
	pub fn qmux(&self) -> Option<&QmuxConnection> {
		match &self.inner {
			Inner::Qmux { conn, .. } => Some(conn),
			_ => None,
		}
	}

	/// The UDP endpoint the session was dialled from (none over a WebSocket): once the session is
	/// closed and dropped, its [`drained`](Endpoint::drained) says the close went out.
	pub fn endpoint(&self) -> Option<&Endpoint> {
		self.endpoint.as_ref()
	}

	/// The WebTransport session, if the session runs over one.
	pub fn webtransport(&self) -> Option<&WebTransport> {
		match &self.inner {
			Inner::WebTransport { transport, .. } | Inner::IetfWebTransport { transport, .. } => Some(transport),
			Inner::Quic { .. } | Inner::Ietf { .. } | Inner::Qmux { .. } => None,
		}
	}
}
