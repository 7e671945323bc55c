//! The URLs a relay answers at, and how a name becomes an address without blocking a worker.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use anyhow::{Context as _, bail};

/// The port a URL without one means: the relay's default, for every scheme.
pub const DEFAULT_PORT: u16 = 4443;

/// How a URL reaches the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
	/// `moqt://`: raw QUIC, the path and query in SETUP.
	Moqt,
	/// `https://`: WebTransport over HTTP/3, the path and query in the CONNECT.
	Https,
	/// `http://`: WebTransport too, pinning the certificate the relay serves at
	/// `http://HOST:PORT/certificate.sha256` (a relay with a generated certificate).
	Http,
	/// `ws://`: QMux over a WebSocket on the relay's HTTP port, the path and query in the
	/// upgrade request: for where UDP cannot go.
	Ws,
	/// `wss://`: the same over TLS, on the same port.
	Wss,
	/// `qmux://`: QMux over TLS on the relay's TCP port (ALPN `qmux-01.moq-lite-05`), the path
	/// and query in SETUP.
	Qmux,
	/// `tcp://`: QMux in plaintext on the relay's TCP port (the public clients' `tcp://`), the
	/// path and query in SETUP.
	Tcp,
}

impl Scheme {
	/// The scheme's name, without `://`.
	pub fn as_str(self) -> &'static str {
		match self {
			Self::Moqt => "moqt",
			Self::Https => "https",
			Self::Http => "http",
			Self::Ws => "ws",
			Self::Wss => "wss",
			Self::Qmux => "qmux",
			Self::Tcp => "tcp",
		}
	}

	/// Whether the session runs over QMux on TCP.
	pub fn is_qmux(self) -> bool {
		matches!(self, Self::Ws | Self::Wss | Self::Qmux | Self::Tcp)
	}

	/// Whether the session runs over WebTransport.
	pub fn is_webtransport(self) -> bool {
		matches!(self, Self::Https | Self::Http)
	}
}

/// A relay URL: `moqt://host[:port]/path[?query]`, `https://…`, `http://…`, `ws://…`, `wss://…`,
/// `qmux://…` or `tcp://…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
	/// How to reach the relay.
	pub scheme: Scheme,
	/// The host name or address (an IPv6 literal without its brackets).
	pub host: String,
	/// The port ([`DEFAULT_PORT`] when absent).
	pub port: u16,
	/// The path and query, starting with `/` (SETUP's `Path`, or the CONNECT's).
	pub path: String,
}

impl Url {
	/// Parses a URL of one of the [`Scheme`]s.
	pub fn parse(text: &str) -> anyhow::Result<Self> {
		let schemes = [
			Scheme::Moqt,
			Scheme::Https,
			Scheme::Http,
			Scheme::Wss,
			Scheme::Ws,
			Scheme::Qmux,
			Scheme::Tcp,
		];
		let (scheme, rest) = schemes
			.into_iter()
			.find_map(|scheme| Some((scheme, text.strip_prefix(scheme.as_str())?.strip_prefix("://")?)))
			.with_context(|| {
				format!("{text}: not a moqt://, https://, http://, ws://, wss://, qmux:// or tcp:// URL")
			})?;
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
			_ => (authority, DEFAULT_PORT),
		};
		let host = host.trim_start_matches('[').trim_end_matches(']');
		if host.is_empty() {
			bail!("{text}: no host");
		}
		Ok(Self {
			scheme,
			host: host.to_owned(),
			port,
			path,
		})
	}

	/// The host and port as an authority: `host:port`, an IPv6 literal bracketed.
	pub fn authority(&self) -> String {
		match self.host.contains(':') {
			true => format!("[{}]:{}", self.host, self.port),
			false => format!("{}:{}", self.host, self.port),
		}
	}

	/// The URL in one spelling: scheme, lower-case host (bracketed when IPv6), the port even when
	/// it is the default, then the path and query as given. Two spellings of one relay compare
	/// equal this way (`moqt://Relay:4443` and `moqt://relay/`).
	pub fn canonical(&self) -> String {
		let url = Self {
			host: self.host.to_ascii_lowercase(),
			..self.clone()
		};
		url.to_string()
	}

	/// `url` with `token` added to its query as `jwt=`.
	pub fn with_token(mut self, token: &str) -> Self {
		let separator = if self.path.contains('?') { '&' } else { '?' };
		self.path = format!("{}{separator}jwt={token}", self.path);
		self
	}

	/// The first address the host resolves to. A name is looked up on a thread of its own, so
	/// a slow resolver never holds a kio worker (and every task on it); an address is taken as
	/// it is.
	pub async fn resolve(&self) -> anyhow::Result<SocketAddr> {
		if let Ok(ip) = self.host.parse::<IpAddr>() {
			return Ok(SocketAddr::new(ip, self.port));
		}
		let answer = kio::sync::Queue::bounded(1);
		let (host, port, sender) = (self.host.clone(), self.port, answer.clone());
		std::thread::Builder::new()
			.name("moq-resolve".into())
			.spawn(move || {
				let first = (host.as_str(), port).to_socket_addrs().map(|mut all| all.next());
				let _ = sender.try_push(first);
			})
			.context("starting a name lookup")?;
		match answer.pop().await {
			Some(Ok(Some(addr))) => Ok(addr),
			Some(Ok(None)) => bail!("{} has no address", self.host),
			Some(Err(err)) => Err(err).with_context(|| format!("resolving {}", self.host)),
			None => bail!("the lookup of {} ended without an answer", self.host),
		}
	}
}

impl fmt::Display for Url {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		write!(f, "{}://{}{}", self.scheme.as_str(), self.authority(), self.path)
	}
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
			("http://LOCALHOST:80/", "http://localhost:80/"),
		] {
			assert_eq!(Url::parse(text).unwrap().canonical(), canonical, "{text}");
		}
	}

	#[test]
	fn urls_parse() {
		let url = Url::parse("moqt://localhost:4443/live/cam?jwt=abc").unwrap();
		assert_eq!(
			(url.scheme, url.host.as_str(), url.port, url.path.as_str()),
			(Scheme::Moqt, "localhost", 4443, "/live/cam?jwt=abc")
		);
		let url = Url::parse("moqt://[::1]:5000").unwrap();
		assert_eq!((url.host.as_str(), url.port, url.path.as_str()), ("::1", 5000, "/"));
		assert_eq!(url.authority(), "[::1]:5000");
		let url = Url::parse("moqt://relay.example?jwt=x").unwrap();
		assert_eq!(
			(url.host.as_str(), url.port, url.path.as_str()),
			("relay.example", 4443, "/?jwt=x")
		);
		let url = Url::parse("https://localhost:4443/live?jwt=x").unwrap();
		assert!(url.scheme.is_webtransport());
		assert_eq!(url.path, "/live?jwt=x");
		assert_eq!(Url::parse("http://x/").unwrap().scheme, Scheme::Http);
		assert!(!Url::parse("moqt://x/").unwrap().scheme.is_webtransport());
		assert!(Url::parse("ftp://x/").is_err());
		assert!(Url::parse("moqt:/x/").is_err());
		assert!(Url::parse("moqt://:4443/").is_err());
		assert!(Url::parse("moqt://x:port/").is_err());
	}

	#[test]
	fn the_token_goes_in_the_query() {
		let url = Url::parse("moqt://peer:4443/").unwrap();
		assert_eq!(url.with_token("a.b.c").path, "/?jwt=a.b.c");
		let url = Url::parse("moqt://peer:4443/x?cost=2").unwrap();
		assert_eq!(url.with_token("t").path, "/x?cost=2&jwt=t");
	}

	#[test]
	fn names_resolve_off_the_worker_and_addresses_as_they_are() {
		kio::block_on(async {
			let url = Url::parse("moqt://127.0.0.1:9/").unwrap();
			assert_eq!(url.resolve().await.unwrap(), "127.0.0.1:9".parse().unwrap());
			let url = Url::parse("moqt://localhost:9/").unwrap();
			assert!(url.resolve().await.unwrap().ip().is_loopback());
			let url = Url::parse("moqt://no-such-host.invalid:9/").unwrap();
			assert!(url.resolve().await.is_err());
		});
	}
}
