//! A moq-lite-05 client over raw QUIC or WebTransport: what the example client, the load
//! generator and the end-to-end tests use.
//!
//! [`Url`] parses `moqt://host:port/path?query` (raw QUIC) and `https://host:port/path?query`
//! (WebTransport over HTTP/3). [`connect`] opens a raw QUIC connection (ALPN `moq-lite-05`),
//! exchanges SETUP with the path and query, and starts a session that publishes a local origin's
//! broadcasts and/or mirrors the relay's announcements into another; [`connect_webtransport`]
//! does the same over WebTransport (ALPN `h3`, the path and query in the CONNECT, moq-lite-05
//! offered as the sub-protocol); [`dial`] picks by the URL's scheme.

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{Context as _, bail};
use moq_net::lite::Role;
use moq_net::lite::session::{self, PeerSetup, Session};
use moq_net::model::{OriginConsumer, OriginProducer};
use moq_net::transport::Transport;
use moq_quic::h3::{self, ConnectRequest};
use moq_quic::webtransport::{self, WebTransport};
use moq_quic::{Connection, Endpoint, Verification};

/// A `moqt://host[:port]/path[?query]` or `https://host[:port]/path[?query]` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
	/// `https://`: WebTransport over HTTP/3; `moqt://`: raw QUIC.
	pub webtransport: bool,
	/// The host name or address.
	pub host: String,
	/// The port (4443 when absent).
	pub port: u16,
	/// The path and query, starting with `/` (SETUP's `Path`).
	pub path: String,
}

impl Url {
	/// Parses a `moqt://` or `https://` URL (port 4443 when absent, the relay's default, for both).
	pub fn parse(text: &str) -> anyhow::Result<Self> {
		let (webtransport, rest) = if let Some(rest) = text.strip_prefix("moqt://") {
			(false, rest)
		} else if let Some(rest) = text.strip_prefix("https://") {
			(true, rest)
		} else {
			bail!("{text}: not a moqt:// or https:// URL");
		};
		let (authority, path) = match rest.find(['/', '?']) {
			Some(at) => (&rest[..at], &rest[at..]),
			None => (rest, "/"),
		};
		let path = if path.starts_with('?') {
			format!("/{path}")
		} else {
			path.to_owned()
		};
		let (host, port) = match authority.rsplit_once(':') {
			// An IPv6 literal is bracketed: `[::1]:4443`.
			Some((host, port)) if !port.contains(']') => (
				host,
				port.parse().with_context(|| format!("{text}: bad port {port:?}"))?,
			),
			_ => (authority, 4443),
		};
		let host = host.trim_start_matches('[').trim_end_matches(']');
		if host.is_empty() {
			bail!("{text}: no host");
		}
		Ok(Self {
			webtransport,
			host: host.to_owned(),
			port,
			path,
		})
	}

	/// The URL in one spelling: scheme, lower-case host (bracketed when IPv6), the port even when
	/// it is the default, then the path and query as given. Two spellings of one relay compare
	/// equal this way (`moqt://Relay:4443` and `moqt://relay/`).
	pub fn canonical(&self) -> String {
		let scheme = if self.webtransport { "https" } else { "moqt" };
		let host = self.host.to_ascii_lowercase();
		match host.contains(':') {
			true => format!("{scheme}://[{host}]:{}{}", self.port, self.path),
			false => format!("{scheme}://{host}:{}{}", self.port, self.path),
		}
	}

	/// The first address the host resolves to.
	pub fn resolve(&self) -> anyhow::Result<SocketAddr> {
		(self.host.as_str(), self.port)
			.to_socket_addrs()
			.with_context(|| format!("resolving {}", self.host))?
			.next()
			.with_context(|| format!("{} has no address", self.host))
	}
}

/// A running client session and its connection.
pub struct Client {
	/// The QUIC connection.
	pub connection: Connection,
	/// The moq-lite session.
	pub session: Session<Connection>,
	/// What the relay said in its SETUP.
	pub peer: PeerSetup,
}

/// Connects to `addr` as `url` says, verifying the relay with `verification`; publishes
/// `publish`'s broadcasts and mirrors the relay's announcements into `subscribe`. `origin` is
/// this client's id in hop chains.
pub async fn connect(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	origin: u64,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
) -> anyhow::Result<Client> {
	let sides = Sides::new(origin, publish, subscribe, session::Limits::default());
	connect_raw(endpoint, addr, url, verification, sides).await
}

/// A running client session over WebTransport.
pub struct WebTransportClient {
	/// The WebTransport session (and through it, the QUIC connection).
	pub transport: WebTransport,
	/// The moq-lite session.
	pub session: Session<WebTransport>,
	/// What the relay said in its SETUP.
	pub peer: PeerSetup,
	/// The sub-protocol the relay chose, if any.
	pub protocol: Option<String>,
}

/// Connects over WebTransport (ALPN `h3`) to `addr` as `url` says: the URL's path and query go in
/// the CONNECT, moq-lite-05 is offered as the sub-protocol, then SETUP as over raw QUIC.
pub async fn connect_webtransport(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	origin: u64,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
) -> anyhow::Result<WebTransportClient> {
	let sides = Sides::new(origin, publish, subscribe, session::Limits::default());
	connect_wt(endpoint, addr, url, verification, sides).await
}

/// What a client session is: its configuration (its id in hop chains, what the relay may make it
/// hold, ...), what it publishes, and where it mirrors the relay's announcements.
struct Sides {
	config: session::Config,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
}

impl Sides {
	fn new(
		origin: u64,
		publish: Option<OriginConsumer>,
		subscribe: Option<OriginProducer>,
		limits: session::Limits,
	) -> Self {
		let config = session::Config {
			origin,
			limits,
			..session::Config::default()
		};
		Self {
			config,
			publish,
			subscribe,
		}
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
		self,
		transport: &T,
		path: Option<String>,
	) -> anyhow::Result<(Session<T>, PeerSetup)> {
		let config = self.config(path);
		let peer = session::setup(transport, &config).await.context("SETUP")?;
		let session = session::start(transport.clone(), config, peer.clone(), self.publish, self.subscribe);
		Ok((session, peer))
	}
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

async fn connect_raw(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	sides: Sides,
) -> anyhow::Result<Client> {
	let connection = handshake(endpoint, addr, url, verification, moq_quic::ALPN_MOQ_LITE_05).await?;
	let (session, peer) = sides.start(&connection, Some(url.path.clone())).await?;
	Ok(Client {
		connection,
		session,
		peer,
	})
}

async fn connect_wt(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	sides: Sides,
) -> anyhow::Result<WebTransportClient> {
	let connection = handshake(endpoint, addr, url, verification, h3::ALPN).await?;
	let authority = if url.host.contains(':') {
		format!("[{}]:{}", url.host, url.port)
	} else {
		format!("{}:{}", url.host, url.port)
	};
	let request = ConnectRequest {
		authority,
		path: url.path.clone(),
		protocols: vec![String::from_utf8_lossy(moq_quic::ALPN_MOQ_LITE_05).into_owned()],
		origin: None,
	};
	let (transport, response) = webtransport::connect(&connection, &request)
		.await
		.context("WebTransport CONNECT")?;
	let (session, peer) = sides.start(&transport, None).await?;
	Ok(WebTransportClient {
		transport,
		session,
		peer,
		protocol: response.protocol,
	})
}

/// A session over either transport.
pub enum AnyClient {
	/// Raw QUIC.
	Quic(Client),
	/// WebTransport.
	WebTransport(WebTransportClient),
}

impl AnyClient {
	/// Waits for the session to end; its code.
	pub async fn closed(&self) -> u64 {
		match self {
			Self::Quic(client) => client.session.closed().await,
			Self::WebTransport(client) => client.session.closed().await,
		}
	}

	/// What the relay said in its SETUP.
	pub fn peer(&self) -> &PeerSetup {
		match self {
			Self::Quic(client) => &client.peer,
			Self::WebTransport(client) => &client.peer,
		}
	}

	/// The QUIC connection under the session.
	pub fn connection(&self) -> &Connection {
		match self {
			Self::Quic(client) => &client.connection,
			Self::WebTransport(client) => client.transport.connection(),
		}
	}

	/// Closes the session with `code`.
	pub fn close(&self, code: u64) {
		match self {
			Self::Quic(client) => client.session.close(code),
			Self::WebTransport(client) => client.session.close(code),
		}
	}
}

/// [`connect`] or [`connect_webtransport`], as the URL's scheme says.
pub async fn dial(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	origin: u64,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
) -> anyhow::Result<AnyClient> {
	let limits = session::Limits::default();
	dial_limited(endpoint, addr, url, verification, origin, publish, subscribe, limits).await
}

/// [`dial`], with what the relay may make this client hold (the announcements it mirrors, say)
/// as `limits` says.
#[allow(clippy::too_many_arguments)]
pub async fn dial_limited(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	origin: u64,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
	limits: session::Limits,
) -> anyhow::Result<AnyClient> {
	let sides = Sides::new(origin, publish, subscribe, limits);
	dial_sides(endpoint, addr, url, verification, sides).await
}

async fn dial_sides(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	sides: Sides,
) -> anyhow::Result<AnyClient> {
	Ok(if url.webtransport {
		AnyClient::WebTransport(connect_wt(endpoint, addr, url, verification, sides).await?)
	} else {
		AnyClient::Quic(connect_raw(endpoint, addr, url, verification, sides).await?)
	})
}

/// [`dial`] with a whole session configuration (its `path` and `role` are set here): what a
/// relay uses to link with a cluster peer.
pub async fn dial_configured(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	config: session::Config,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
) -> anyhow::Result<AnyClient> {
	let sides = Sides {
		config,
		publish,
		subscribe,
	};
	dial_sides(endpoint, addr, url, verification, sides).await
}

/// An endpoint for clients, on an ephemeral port of the address family of `relay`.
pub fn endpoint(relay: SocketAddr) -> anyhow::Result<Endpoint> {
	endpoint_with(relay, moq_quic::Config::new())
}

/// [`endpoint`] with `config` (its idle timeout goes to every connection dialled from it).
pub fn endpoint_with(relay: SocketAddr, config: moq_quic::Config) -> anyhow::Result<Endpoint> {
	let local: SocketAddr = if relay.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
		.parse()
		.expect("a valid address");
	Endpoint::bind(local, config).context("binding a UDP socket")
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn urls_have_one_canonical_spelling() {
		for (text, canonical) in [
			("moqt://Relay.Example", "moqt://relay.example:4443/"),
			("moqt://relay.example:4443/", "moqt://relay.example:4443/"),
			("https://[::1]:5000/x?jwt=a", "https://[::1]:5000/x?jwt=a"),
		] {
			assert_eq!(Url::parse(text).unwrap().canonical(), canonical, "{text}");
		}
	}

	#[test]
	fn urls_parse() {
		let url = Url::parse("moqt://localhost:4443/live/cam?jwt=abc").unwrap();
		assert_eq!(
			(url.host.as_str(), url.port, url.path.as_str()),
			("localhost", 4443, "/live/cam?jwt=abc")
		);
		let url = Url::parse("moqt://[::1]:5000").unwrap();
		assert_eq!((url.host.as_str(), url.port, url.path.as_str()), ("::1", 5000, "/"));
		let url = Url::parse("moqt://relay.example?jwt=x").unwrap();
		assert_eq!(
			(url.host.as_str(), url.port, url.path.as_str()),
			("relay.example", 4443, "/?jwt=x")
		);
		let url = Url::parse("https://localhost:4443/live?jwt=x").unwrap();
		assert!(url.webtransport);
		assert_eq!(
			(url.host.as_str(), url.port, url.path.as_str()),
			("localhost", 4443, "/live?jwt=x")
		);
		assert!(!Url::parse("moqt://x/").unwrap().webtransport);
		assert!(Url::parse("http://x/").is_err());
		assert!(Url::parse("moqt://:4443/").is_err());
		assert!(Url::parse("moqt://x:port/").is_err());
	}
}
