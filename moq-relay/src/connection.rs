//! A connection's life, whatever carries it: admission, the transport's own opening (a raw QUIC
//! connection's SETUP, a WebTransport CONNECT), auth, then the session, scoped by the grant,
//! until it closes, its token expires or the relay shuts down.
//!
//! A transport is opened by a function of its own that returns an [`Opened`]: the transport,
//! the peer's SETUP, the grant and where it runs. Everything after that, [`serve_session`], is
//! one generic function: a new transport is one `open_*` function and one arm in
//! [`serve_connection`], or, for one that comes another way, a room of its own beside this one
//! (`qmux.rs`: QMux handed over by the TCP port's HTTP server).
//!
//! Refusals close the connection with the protocol's code: Unauthorized (6) for a bad or missing
//! token, Timeout (3) for a SETUP that does not come within `[limits] setup_timeout`, Unroutable
//! (30) past `--max-connections`. At shutdown, sessions close with [`SHUTDOWN_CODE`] (the
//! draft's NO_ERROR for an IETF session, which hears GOAWAY first and has half the shutdown
//! timeout to leave by itself).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use kio::sync::Consumer;
use kio::{Either, race};
use moq_net::ietf;
use moq_net::lite::session;
use moq_net::lite::{ErrorCode, Role, Version};
use moq_net::model::Path;
use moq_net::transport::Transport;
use moq_quic::{Connection, h3, webtransport};
use tracing::{debug, info, warn};

use crate::auth::Grant;
use crate::relay::{Relay, address_requester};

/// The code connections are closed with at shutdown: moq-lite's Closed (25).
pub const SHUTDOWN_CODE: u64 = 25;

/// One connection: SETUP, auth, the session, until it ends.
///
/// A connection's task lives as long as its session, so what it keeps across that await is
/// memory per connection: the handshake's futures are boxed (freed once the session is up) and
/// the session's future holds only the session's handle, its deadlines and its counters. Held
/// inline, the handshake's state and the session's arguments made this task 3.8 KB per
/// connection (dhat, fanout of 100 viewers).
pub(crate) async fn serve_connection(relay: Arc<Relay>, conn: Connection, worker: usize, shutdown: Consumer<()>) {
	let remote = conn.remote_address();
	relay.stats.connections.fetch_add(1, Ordering::Relaxed);
	let Some(slot) = relay.slots.admit(remote.ip(), conn.memory()) else {
		relay.stats.refused.fetch_add(1, Ordering::Relaxed);
		warn!(%remote, "too many connections");
		conn.close(ErrorCode::Unroutable.code(), "too many connections");
		return;
	};
	let alpn = conn.alpn().unwrap_or_default();
	// What the session may hold (its limits and its cache) is set once the grant says who it is.
	let config = session::Config {
		origin: relay.id(),
		counters: Some(relay.counters.clone()),
		version: Version::from_alpn(&alpn).unwrap_or_default(),
		linger: relay.cluster.config.linger,
		memory: conn.memory(),
		..session::Config::default()
	};
	let quic = conn.clone();
	let ends = Ends {
		shutdown,
		eviction: slot.eviction.clone(),
	};
	if alpn == h3::ALPN {
		if let Some(opened) = Box::pin(open_webtransport(&relay, conn, config, worker)).await {
			serve_session(&relay, opened, &|window| quic.set_receive_window(window), ends).await;
		}
	} else if let Some(opened) =
		Box::pin(open_quic(&relay, conn, config, worker, ietf::Version::from_alpn(&alpn))).await
	{
		serve_session(&relay, opened, &|window| quic.set_receive_window(window), ends).await;
	}
}

/// What ends a session besides itself and its token: the relay's shutdown, and its slot given
/// to another address's connection.
pub(crate) struct Ends {
	pub(crate) shutdown: Consumer<()>,
	pub(crate) eviction: Consumer<()>,
}

/// A peer's SETUP: moq-lite's, or an IETF draft's with the control stream it came on.
pub(crate) enum PeerSetup<T: Transport> {
	Lite(session::PeerSetup),
	Ietf(Box<ietf::session::Control<T>>, ietf::session::PeerSetup),
}

impl<T: Transport> From<session::PeerSetup> for PeerSetup<T> {
	fn from(setup: session::PeerSetup) -> Self {
		Self::Lite(setup)
	}
}

/// A running session of either protocol.
enum Running<T: Transport + 'static> {
	Lite(session::Session<T>),
	Ietf(ietf::session::Session<T>),
}

impl<T: Transport + 'static> Running<T> {
	async fn closed(&self) -> u64 {
		match self {
			Self::Lite(session) => session.closed().await,
			Self::Ietf(session) => session.closed().await,
		}
	}

	/// Closes with moq-lite's `code`, or for a draft's session the draft's code that means it.
	fn close(&self, code: u64) {
		match self {
			Self::Lite(session) => session.close(code),
			Self::Ietf(session) => session.close(ietf_code(code)),
		}
	}
}

/// The draft's session code for moq-lite's `code` (the relay closes sessions with moq-lite's).
fn ietf_code(code: u64) -> u64 {
	match ErrorCode::from_code(code) {
		ErrorCode::Closed | ErrorCode::Cancel => ietf::code::NO_ERROR,
		ErrorCode::Unauthorized => ietf::code::UNAUTHORIZED,
		ErrorCode::Timeout => ietf::code::CONTROL_MESSAGE_TIMEOUT,
		_ => ietf::code::INTERNAL_ERROR,
	}
}

/// An authorized peer, its SETUP done: what [`serve_session`] starts.
pub(crate) struct Opened<T: Transport> {
	pub(crate) transport: T,
	pub(crate) config: session::Config,
	pub(crate) peer: PeerSetup<T>,
	pub(crate) grant: Grant,
	pub(crate) link: Link,
}

/// A raw QUIC connection: SETUP, moq-lite's or (`draft`, the ALPN's) an IETF draft's
/// CLIENT_SETUP on its control stream; the path is in it (the draft's PATH parameter), then auth.
async fn open_quic(
	relay: &Relay,
	conn: Connection,
	config: session::Config,
	worker: usize,
	draft: Option<ietf::Version>,
) -> Option<Opened<Connection>> {
	let remote = conn.remote_address();
	let deadline = kio::time::now() + relay.limits.setup_timeout;
	let (path, peer, unauthorized) = match draft {
		None => {
			let peer = setup_by(&conn, &config, deadline, remote).await?;
			(peer.path.clone(), PeerSetup::Lite(peer), ErrorCode::Unauthorized.code())
		}
		Some(version) => {
			let grant_ids = ietf::session::initial_grant(&config, ietf::session::Side::Client);
			let (control, peer) = ietf_setup_by(&conn, grant_ids, version, deadline, remote).await?;
			(
				peer.path.clone(),
				PeerSetup::Ietf(Box::new(control), peer),
				ietf::code::UNAUTHORIZED,
			)
		}
	};
	// A draft's client may give its token as AUTHORIZATION_TOKEN rather than in the path.
	let token = match &peer {
		PeerSetup::Ietf(_, setup) => setup.token.as_deref(),
		PeerSetup::Lite(_) => None,
	};
	let Some(grant) = authorize(relay, &path.unwrap_or_default(), token, remote) else {
		conn.close(unauthorized, "unauthorized");
		return None;
	};
	let link = Link {
		remote,
		worker,
		transport: "quic",
	};
	Some(Opened {
		transport: conn,
		config,
		peer,
		grant,
		link,
	})
}

/// A WebTransport connection (ALPN `h3`): the CONNECT's path and query play the part of the raw
/// SETUP's `Path`, checked before the session opens (a refusal is answered 403); moq-lite-05 is
/// chosen through the sub-protocol headers when the client offers it, then SETUP is exchanged
/// over the session as on raw QUIC. The SETUP timeout covers both the CONNECT and the SETUP.
async fn open_webtransport(
	relay: &Relay,
	conn: Connection,
	config: session::Config,
	worker: usize,
) -> Option<Opened<webtransport::WebTransport>> {
	let remote = conn.remote_address();
	let deadline = kio::time::now() + relay.limits.setup_timeout;
	let request = match race(webtransport::accept(&conn), kio::time::sleep_until(deadline)).await {
		Either::Left(Ok(request)) => request,
		Either::Left(Err(err)) => {
			debug!(%remote, %err, "no WebTransport session");
			return None;
		}
		Either::Right(()) => {
			debug!(%remote, "no CONNECT in time");
			conn.close(h3::code::REQUEST_REJECTED, "no CONNECT in time");
			return None;
		}
	};
	let Some(grant) = authorize(relay, &request.connect.path, None, remote) else {
		request.reject(
			403,
			h3::error_to_http3(ErrorCode::Unauthorized.code() as u32),
			"unauthorized",
		);
		return None;
	};
	// The first of the client's sub-protocols we speak (in the client's order): a moq-lite
	// version, or an IETF draft's; none offered means moq-lite-05 and its SETUP.
	let protocol = request
		.connect
		.protocols
		.iter()
		.find(|p| Version::from_alpn(p.as_bytes()).is_some() || ietf::Version::from_alpn(p.as_bytes()).is_some())
		.cloned();
	if let Some(version) = protocol.as_deref().and_then(|p| ietf::Version::from_alpn(p.as_bytes())) {
		let transport = request.accept(protocol.as_deref());
		let grant_ids = ietf::session::initial_grant(&config, ietf::session::Side::Client);
		let (control, peer) = ietf_setup_by(&transport, grant_ids, version, deadline, remote).await?;
		let link = Link {
			remote,
			worker,
			transport: "webtransport",
		};
		return Some(Opened {
			transport,
			config,
			peer: PeerSetup::Ietf(Box::new(control), peer),
			grant,
			link,
		});
	}
	let mut config = config;
	config.version = protocol
		.as_deref()
		.and_then(|p| Version::from_alpn(p.as_bytes()))
		.unwrap_or_default();
	if protocol.is_none() && !request.connect.protocols.is_empty() {
		debug!(%remote, offered = ?request.connect.protocols, "no sub-protocol in common");
	}
	let transport = request.accept(protocol.as_deref());
	let peer = setup_by(&transport, &config, deadline, remote).await?;
	let link = Link {
		remote,
		worker,
		transport: "webtransport",
	};
	Some(Opened {
		transport,
		config,
		peer: peer.into(),
		grant,
		link,
	})
}

/// An IETF client's CLIENT_SETUP over `transport` in `version`, answered, or `None` (logged;
/// closed with the draft's code) if it fails or has not come by `deadline`.
async fn ietf_setup_by<T: Transport>(
	transport: &T,
	grant_ids: u64,
	version: ietf::Version,
	deadline: Instant,
	remote: SocketAddr,
) -> Option<(ietf::session::Control<T>, ietf::session::PeerSetup)> {
	let accept = ietf::session::accept(transport, grant_ids, version);
	match race(accept, kio::time::sleep_until(deadline)).await {
		Either::Left(Ok(opened)) => Some(opened),
		Either::Left(Err(err)) => {
			debug!(%remote, %err, "ietf: setup failed");
			if let ietf::session::Error::Protocol(code, why) = err {
				transport.close(code, why);
			}
			None
		}
		Either::Right(()) => {
			debug!(%remote, "ietf: no CLIENT_SETUP in time");
			transport.close(ietf::code::CONTROL_MESSAGE_TIMEOUT, "setup timeout");
			None
		}
	}
}

/// The peer's SETUP over `transport`, or `None` (logged; closed with Timeout when late) if it
/// fails or has not come by `deadline`.
pub(crate) async fn setup_by<T: Transport>(
	transport: &T,
	config: &session::Config,
	deadline: Instant,
	remote: SocketAddr,
) -> Option<session::PeerSetup> {
	match race(session::setup(transport, config), kio::time::sleep_until(deadline)).await {
		Either::Left(Ok(peer)) => Some(peer),
		Either::Left(Err(err)) => {
			debug!(%remote, %err, "setup failed");
			None
		}
		Either::Right(()) => {
			debug!(%remote, "no SETUP in time");
			transport.close(ErrorCode::Timeout.code(), "setup timeout");
			None
		}
	}
}

/// Checks `url` (path and query), or `token` where the query carries none; the grant, or `None`
/// (counted and logged) when refused.
pub(crate) fn authorize(relay: &Relay, url: &str, token: Option<&str>, remote: SocketAddr) -> Option<Grant> {
	match relay.auth.verify_url_or_token(url, token, SystemTime::now()) {
		Ok(grant) => Some(grant),
		Err(err) => {
			relay.stats.refused.fetch_add(1, Ordering::Relaxed);
			info!(%remote, path = %escaped(url.split('?').next().unwrap_or("")), %err, "refused");
			None
		}
	}
}

/// Where a session runs: its peer, its worker, and the transport's name for the logs.
pub(crate) struct Link {
	pub(crate) remote: SocketAddr,
	pub(crate) worker: usize,
	pub(crate) transport: &'static str,
}

/// Runs an authorized session over `transport` (raw QUIC, WebTransport or QMux: every line here
/// is the same) until it closes, its token expires or the relay shuts down. A session that may
/// publish asks `grow_window` for the full receive window (false: its address's share of the
/// memory ceiling has no room). The session starts here; the future returned keeps only what it
/// waits on (see [`serve_connection`]).
pub(crate) fn serve_session<'a, T: Transport + Clone + 'static>(
	relay: &'a Relay,
	opened: Opened<T>,
	grow_window: &dyn Fn(u64) -> bool,
	ends: Ends,
) -> impl Future<Output = ()> + 'a {
	let Opened {
		transport,
		mut config,
		peer,
		grant,
		link: Link {
			remote,
			worker,
			transport: kind,
		},
	} = opened;
	let root: &Path = &grant.root;
	// What the peer may watch is what this session publishes to it, and the other way round.
	// A client neither sees nor announces the cluster's members; a peer does both.
	let (consumer, producer) = match grant.cluster {
		true => (relay.origin.consumer(), relay.origin.producer()),
		false => (
			relay.origin.consumer().hide(&relay.cluster.members),
			relay.origin.producer().hide(&relay.cluster.members),
		),
	};
	// A client's sessions share their address's pace and its share of a publisher's track
	// requests (moq-net's `Requests::make_room`), so more connections from one place buy neither.
	// A cluster peer asks for a whole relay, unpaced, as itself.
	let address = (!grant.cluster).then(|| address_requester(remote.ip()));
	let publish = (!grant.subscribe.is_empty()).then(|| {
		let publish = consumer.with_root(root).scope(&grant.subscribe);
		match address {
			Some(key) => publish.requesting_as(key),
			None => publish,
		}
	});
	// What a client publishes is its own: another identity cannot take a path it holds live,
	// and the same one (a publisher reconnecting) takes it over with its viewers.
	let owner = (!grant.cluster).then(|| publisher_identity(&grant, remote.ip()));
	let subscribe = (!grant.publish.is_empty()).then(|| {
		let subscribe = producer.with_root(root).scope(&grant.publish);
		match owner {
			Some(owner) => subscribe.owned_by(owner),
			None => subscribe,
		}
	});
	// A cluster peer carries a whole relay's broadcasts and demand: its own limits, the whole
	// cache, and only our own clients' routes announced to it. Any other session's ingest fills
	// at most its share of the cache.
	config.cluster = grant.cluster;
	if grant.cluster {
		config.limits = relay.limits.cluster_session;
		config.pool = Some(relay.pool.clone());
	} else {
		let share = relay.limits.session_cache.unwrap_or_else(|| relay.pool.capacity() / 4);
		config.limits = relay.limits.session;
		config.pool = Some(relay.pool.child(share));
		config.shared_pace = address.map(|key| relay.pace_for(key));
	}
	// A session that may publish gets the full receive window, if its address's share of the
	// memory ceiling has room for it; a viewer keeps the small one it started with.
	let (role, origin) = match &peer {
		PeerSetup::Lite(peer) => (peer.role, peer.origin),
		// A draft's SETUP says neither: it may do both, and is no relay of ours.
		PeerSetup::Ietf(..) => (Role::Both, 0),
	};
	if role != Role::Subscriber && (grant.cluster || !grant.publish.is_empty()) {
		let window = u64::from(relay.limits.connection_window);
		if !grow_window(window) {
			relay.stats.windows_refused.fetch_add(1, Ordering::Relaxed);
			debug!(%remote, "receive window not grown: the address holds its share of the memory ceiling");
		}
	}
	let cluster_session = grant.cluster.then(|| relay.cluster.inbound(origin));
	let worker_session = relay.stats.session(worker);
	info!(%remote, transport = kind, root = %escaped(root.as_str()), publish = grant.publish.len(), subscribe = grant.subscribe.len(), cluster = grant.cluster, "session");
	let session = match peer {
		PeerSetup::Lite(peer) => Running::Lite(session::start(transport, config, peer, publish, subscribe)),
		PeerSetup::Ietf(control, peer) => Running::Ietf(ietf::session::start(
			transport, *control, config, peer, publish, subscribe,
		)),
	};
	let expires = grant.remaining(SystemTime::now()).map(|left| kio::time::now() + left);
	let shutdown_timeout = relay.shutdown_timeout;
	async move {
		let _worker_session = worker_session;
		let _cluster_session = cluster_session;
		let expiry = async {
			match expires {
				Some(at) => kio::time::sleep_until(at).await,
				None => std::future::pending().await,
			}
		};
		let ended = race(
			race(session.closed(), expiry),
			race(ends.shutdown.closed(), ends.eviction.closed()),
		);
		match ended.await {
			Either::Left(Either::Left(code)) => debug!(%remote, code, "session closed"),
			Either::Left(Either::Right(())) => {
				info!(%remote, "token expired");
				session.close(ErrorCode::Unauthorized.code());
			}
			Either::Right(Either::Left(())) => {
				// A draft's client hears GOAWAY first, and has half the shutdown timeout to
				// leave on its own (to another relay, without a gap) before the close.
				if let Running::Ietf(ietf) = &session {
					ietf.go_away();
					let grace = kio::time::sleep(shutdown_timeout / 2);
					let _ = race(session.closed(), grace).await;
				}
				session.close(SHUTDOWN_CODE)
			}
			Either::Right(Either::Right(())) => {
				info!(%remote, "closed to make room for another address");
				session.close(ErrorCode::Unroutable.code());
			}
		}
		// The close reaches the peer before the session's tasks stop with it.
		drop(session);
	}
}

/// Who a client publishes as: its token's subject, or without one its address (an IPv4 address,
/// an IPv6 /64), which a reconnecting publisher keeps unless its network changed.
fn publisher_identity(grant: &Grant, ip: std::net::IpAddr) -> u64 {
	use std::hash::{Hash, Hasher};
	match &grant.subject {
		Some(subject) => {
			// Hashed with fixed keys: the same subject is the same owner on every worker.
			let mut hasher = std::hash::DefaultHasher::new();
			subject.hash(&mut hasher);
			hasher.finish() & !(1 << 63)
		}
		None => address_requester(ip),
	}
}

/// `text` as a log field: peer-supplied strings are escaped (control characters, quotes and
/// non-ASCII as Rust escapes, cut at 256 characters), so a path with a newline cannot forge a log
/// line.
fn escaped(text: &str) -> String {
	let mut out: String = text.chars().take(256).flat_map(char::escape_default).collect();
	if text.chars().count() > 256 {
		out.push('…');
	}
	out
}

#[cfg(test)]
mod tests {
	use super::escaped;

	#[test]
	fn peer_strings_cannot_forge_log_lines() {
		let forged = "/live\n2026-12-01T00:00:00Z  INFO moq_relay: admin logged in";
		let line = escaped(forged);
		assert!(!line.contains('\n'));
		assert!(line.starts_with("/live\\n2026"));
		assert_eq!(escaped("/a?jwt=x"), "/a?jwt=x");
		assert_eq!(escaped(&"x".repeat(1000)).chars().count(), 257);
		assert_eq!(escaped("\u{1b}[31m"), "\\u{1b}[31m");
	}
}
