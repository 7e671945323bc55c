//! A moq-lite-05 client over raw QUIC: what the example client and the end-to-end tests use.
//!
//! [`Url`] parses `moqt://host:port/path?query`; [`connect`] opens the QUIC connection (ALPN
//! `moq-lite-05`), exchanges SETUP with the path and query, and starts a session that publishes
//! a local origin's broadcasts and/or mirrors the relay's announcements into another.

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{Context as _, bail};
use moq_net::lite::Role;
use moq_net::lite::session::{self, PeerSetup, Session};
use moq_net::model::{OriginConsumer, OriginProducer};
use moq_quic::{Connection, Endpoint, Verification};

/// A `moqt://host[:port]/path[?query]` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
	/// The host name or address.
	pub host: String,
	/// The port (4443 when absent).
	pub port: u16,
	/// The path and query, starting with `/` (SETUP's `Path`).
	pub path: String,
}

impl Url {
	/// Parses a `moqt://` URL.
	pub fn parse(text: &str) -> anyhow::Result<Self> {
		let Some(rest) = text.strip_prefix("moqt://") else {
			bail!("{text}: not a moqt:// URL");
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
			host: host.to_owned(),
			port,
			path,
		})
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
	let client = moq_quic::Config::new().with_client(verification, &[moq_quic::ALPN_MOQ_LITE_05])?;
	let connection = endpoint.connect_with(client.client.expect("just configured"), addr, &url.host)?;
	connection.established().await.context("QUIC handshake")?;
	// Say what this client does, so a relay does not ask a viewer for its announcements.
	let role = match (&publish, &subscribe) {
		(Some(_), None) => Some(Role::Publisher),
		(None, Some(_)) => Some(Role::Subscriber),
		_ => None,
	};
	let config = session::Config {
		origin,
		path: Some(url.path.clone()),
		role,
		..session::Config::default()
	};
	let peer = session::setup(&connection, &config).await.context("SETUP")?;
	let session = session::start(connection.clone(), config, peer.clone(), publish, subscribe);
	Ok(Client {
		connection,
		session,
		peer,
	})
}

/// An endpoint for clients, on an ephemeral port of the address family of `relay`.
pub fn endpoint(relay: SocketAddr) -> anyhow::Result<Endpoint> {
	let local: SocketAddr = if relay.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
		.parse()
		.expect("a valid address");
	Endpoint::bind(local, moq_quic::Config::new()).context("binding a UDP socket")
}

#[cfg(test)]
mod tests {
	use super::*;

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
		assert!(Url::parse("https://x/").is_err());
		assert!(Url::parse("moqt://:4443/").is_err());
		assert!(Url::parse("moqt://x:port/").is_err());
	}
}
