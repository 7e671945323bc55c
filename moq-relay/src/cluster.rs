//! Cluster links: relays that share one origin across hosts.
//!
//! A relay dials each peer of `[cluster] connect` as a moq-lite client, with its cluster token
//! in the URL (`?jwt=`), and keeps the link up for ever (jittered backoff from 1 s to 10 s
//! between attempts). A link is one session both ways, marked as a cluster session on both ends
//! (the dialler knows it dialled a peer; the dialled relay knows from the token's `cluster`
//! claim):
//!
//! - each end announces to the other **only what its own clients publish**
//!   ([`OriginConsumer::announced_to_peer`](moq_net::model::OriginConsumer::announced_to_peer)),
//!   with the hop chain; routes learned from a peer are never passed on to another peer (the
//!   cluster's list of members aside, see Discovery below). A
//!   full mesh of origins, no transit: announce state per broadcast is one entry per relay,
//!   where re-announcing every learned route to every peer grows with the square of the relays;
//! - each end mirrors the other's announcements into its origin as cluster routes; a viewer's
//!   subscription there is forwarded upstream once per track, whatever the number of viewers
//!   (the track aggregates their demand);
//! - a path announced by several peers is served from the best route (a live one before one
//!   lingering after its publisher was lost, a local publisher, then the shortest hop chain, then
//!   the lower chain, so every relay picks the same upstream, then the newest), and fails over
//!   to the next when that one goes (`moq_net::model::origin`).
//!
//! The topology this needs: every relay that has publishers is linked with every relay that has
//! viewers of them (in practice, a full mesh). Transit (relays passing on what they learned,
//! with hop chains to stop loops) would let a chain or a star of links carry everything, at the
//! price of announce state and churn that grow with the relays times the links.
//!
//! A relay shutting down closes its links with Closed (25): its peers withdraw its routes at
//! once. A link lost abruptly (a crash, a partition: the connection times out) leaves its routes
//! announced for `[cluster] linger` before they are withdrawn.
//!
//! **Discovery.** A relay with `[cluster] node` (its own URL, as peers dial it) announces itself
//! to its peers at [`MEMBERS`]`/<the URL in hex>`, and every relay passes those announcements on
//! to its other peers (the one exception to "no transit",
//! [`Origin::set_transit`](moq_net::model::Origin::set_transit): one entry per
//! relay, hop chains stopping loops). A relay that hears of a member it has no link with dials it,
//! if it has no `node` of its own or its URL sorts first, and stops dialling it when the
//! announcement goes. Two relays that dial each other anyway keep one link: the one with the
//! higher origin id closes its own (`link`). So a relay given one peer (a seed) joins the
//! full mesh, and the mesh needs no list of every relay. Clients never see [`MEMBERS`] and cannot
//! publish under it ([`OriginConsumer::hide`](moq_net::model::OriginConsumer::hide)); only
//! cluster peers (holders of the cluster token) can name members, and at most
//! [`MAX_DISCOVERED`] are dialled. A member's name is resolved on the worker, a blocking lookup,
//! as a configured peer's is: node URLs should be addresses or names that resolve at once. A
//! member lost abruptly stays announced for the linger, as any route does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use anyhow::Context as _;
use kio::sync::Consumer;
use moq_net::lite::session;
use moq_net::model::Path;
use moq_quic::Verification;
use tracing::{info, warn};

use crate::client::{self, AnyClient, Url};
use crate::config::PeerTls;
use crate::server::{SHUTDOWN_CODE, Shared};
use kio::{Either, race};

/// The first delay before dialling a peer again.
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest delay between two attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// A link that stayed up this long starts its next backoff from [`BACKOFF_MIN`] again.
const STABLE: Duration = Duration::from_secs(30);

/// How a peer's certificate is checked.
pub fn verification(tls: &PeerTls) -> anyhow::Result<Verification> {
	Ok(match tls {
		PeerTls::Fingerprints(pins) => Verification::Fingerprints(pins.clone()),
		PeerTls::Roots(path) => {
			Verification::Roots(moq_quic::Certificate::roots_from_pem_file(path).context("reading the cluster roots")?)
		}
		PeerTls::Insecure => Verification::Disabled,
	})
}

/// Doubling delays between [`BACKOFF_MIN`] and [`BACKOFF_MAX`], each drawn from its upper half,
/// so relays that lost a peer together do not all dial it at the same instant.
#[derive(Debug)]
pub struct Backoff {
	next: Duration,
	state: u64,
}

impl Backoff {
	/// A backoff whose jitter is drawn from `seed`.
	pub fn new(seed: u64) -> Self {
		Self {
			next: BACKOFF_MIN,
			state: seed | 1,
		}
	}

	/// The delay before the next attempt.
	pub fn delay(&mut self) -> Duration {
		// xorshift64: jitter, not secrecy.
		self.state ^= self.state << 13;
		self.state ^= self.state >> 7;
		self.state ^= self.state << 17;
		let fraction = 0.5 + (self.state >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
		let delay = self.next.mul_f64(fraction);
		self.next = (self.next * 2).min(BACKOFF_MAX);
		delay
	}

	/// Starts again from [`BACKOFF_MIN`].
	pub fn reset(&mut self) {
		self.next = BACKOFF_MIN;
	}
}

/// Where the relays of a cluster announce themselves: `MEMBERS/<node URL in hex>`.
pub const MEMBERS: &str = ".cluster/members";

/// The longest node URL: its hex under [`MEMBERS`] must fit a path.
pub const MAX_NODE_URL: usize = 400;

/// Members a relay dials because it heard of them, at most: the peers that tell it of members
/// hold the cluster token, but a misconfigured one should not make every relay dial without
/// bound. Past it, further members are not dialled (and the relay says so), nor retried when
/// others go, until their announcement changes.
pub const MAX_DISCOVERED: usize = 256;

/// The path at which the relay reachable at `node` announces itself.
pub fn member_path(node: &str) -> Path {
	let hex: String = node.bytes().map(|b| format!("{b:02x}")).collect();
	Path::new(MEMBERS).join(&Path::new(&hex))
}

/// The node URL a path under [`MEMBERS`] (relative to it) names, in its one spelling
/// ([`Url::canonical`]), if it names one: lower-case hex of a URL, as [`member_path`] writes it.
fn member_url(relative: &Path) -> Option<String> {
	let hex = relative.as_str();
	let digits = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
	if hex.is_empty() || !digits || !hex.len().is_multiple_of(2) || hex.len() > 2 * MAX_NODE_URL {
		return None;
	}
	let bytes = (0..hex.len())
		.step_by(2)
		.map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
		.collect::<Option<Vec<u8>>>()?;
	let url = String::from_utf8(bytes).ok()?;
	Url::parse(&url).ok().map(|url| url.canonical())
}

/// Whether this relay dials the member at `url` it heard of through `hops` relays: not itself,
/// not a peer it dials already, not one it heard from directly (one of the two already dialled
/// the other), and only if it has no URL of its own or its own sorts first (the other dials
/// otherwise).
fn dials(own: Option<&str>, configured: &[String], url: &str, hops: usize) -> bool {
	own != Some(url) && !configured.iter().any(|peer| peer == url) && hops > 1 && own.is_none_or(|own| url > own)
}

/// Dials the members of the cluster this relay hears of and has no link with, for as long as
/// each is announced; until shutdown.
pub(crate) async fn discover(shared: Arc<Shared>, verification: Verification, shutdown: Consumer<()>) {
	let members = &shared.members;
	let mut cursor = shared.origin.consumer().announced(members);
	let mut dialling: HashMap<String, kio::JoinHandle<()>> = HashMap::new();
	loop {
		let update = match race(cursor.next(), shutdown.closed()).await {
			Either::Left(update) => update,
			Either::Right(()) => {
				// Each link closes itself at shutdown.
				for (_, task) in dialling {
					let _ = task.await;
				}
				return;
			}
		};
		let Some(url) = update.path.strip_prefix(members).as_ref().and_then(member_url) else {
			continue;
		};
		// A member whose route changed is heard going and coming back: it is gone only if nothing
		// is announced at its path any more.
		if update.broadcast.is_none() {
			if shared.origin.consumer().get_broadcast(&update.path).is_some() {
				continue;
			}
			if let Some(task) = dialling.remove(&url) {
				info!(peer = url, "cluster member gone");
				task.abort();
			}
			continue;
		}
		let hops = update.route.hops.len();
		if dialling.contains_key(&url) || !dials(shared.cluster.node.as_deref(), &shared.cluster.connect, &url, hops) {
			continue;
		}
		if dialling.len() >= MAX_DISCOVERED {
			warn!(
				peer = url,
				max = MAX_DISCOVERED,
				"cluster member not dialled: too many discovered"
			);
			continue;
		}
		info!(peer = url, "cluster member discovered");
		let task = kio::spawn(link(
			shared.clone(),
			url.clone(),
			verification.clone(),
			shutdown.clone(),
		));
		dialling.insert(url, task);
	}
}

/// `url` with the cluster token in its query.
fn with_token(url: &Url, token: Option<&str>) -> Url {
	let mut url = url.clone();
	if let Some(token) = token {
		let separator = if url.path.contains('?') { '&' } else { '?' };
		url.path = format!("{}{separator}jwt={token}", url.path);
	}
	url
}

/// Keeps the link to `peer` up until shutdown: dial, serve the session until it ends, wait the
/// backoff, dial again.
///
/// One link per pair: two relays that dial each other (each listed the other, or one found the
/// other while their link was down) end up with two sessions, and the relay with the higher
/// origin id closes the one it dialled as soon as it sees the other (its peer's session toward
/// it, [`Shared::inbound_peers`]), then dials again only once that one has ended. Both ends
/// apply the same rule, so they agree on the link they keep. With a fixed `[cluster] id`, a
/// peer that crashed and came back may find its old session still counted here until it times
/// out (the idle timeout): the relay then waits that long before dialling it again, unless the
/// peer dials first. The peer's id is the last one the URL answered with: a name that reaches
/// several relays in turn is taken for the last of them.
pub(crate) async fn link(shared: Arc<Shared>, peer: String, verification: Verification, shutdown: Consumer<()>) {
	let Ok(url) = Url::parse(&peer) else {
		// Checked when the configuration was read.
		return;
	};
	let url = with_token(&url, shared.cluster.token.as_deref());
	let mut backoff = Backoff::new(shared.relay_id ^ peer.bytes().fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b)));
	let inbound = shared.inbound_peers.consume();
	// Of two links with peer `id`, ours is the one to give way (0: a peer that gives no origin id,
	// 03/04 or another implementation, is never taken for the twin of another such session).
	let yields = |id: u64| id != 0 && shared.relay_id > id;
	// The peer's origin id, once a session told it.
	let mut peer_id = None;
	loop {
		// The peer's own session toward us is the pair's link: wait for it to end.
		if let Some(id) = peer_id.filter(|&id| yields(id))
			&& let Either::Right(()) = race(inbound_open(&inbound, id, false), shutdown.closed()).await
		{
			return;
		}
		let started = kio::time::now();
		match race(dial(&shared, &url, &verification), shutdown.closed()).await {
			Either::Right(()) => return,
			Either::Left(Err(err)) => warn!(peer, err = %format!("{err:#}"), "cluster peer unreachable"),
			Either::Left(Ok((client, endpoint))) => {
				let id = client.peer().origin;
				if id == shared.relay_id {
					// A spelling of our own URL that canonical forms do not catch (a name for
					// an address of ours): nothing to link with.
					warn!(peer, "cluster peer is this relay: not dialling it");
					client.close(SHUTDOWN_CODE);
					return;
				}
				peer_id = Some(id);
				info!(peer, id, "cluster link up");
				let _up = Counted::new(&shared.cluster_links);
				// Ours is the link to drop if the peer's session toward us is open too.
				let twin = async {
					match yields(id) {
						true => inbound_open(&inbound, id, true).await,
						false => std::future::pending().await,
					}
				};
				match race(race(client.closed(), twin), shutdown.closed()).await {
					Either::Right(()) => {
						// Leaving the cluster: the peer withdraws our routes at once on Closed.
						client.close(SHUTDOWN_CODE);
						drop(client);
						let _ = race(endpoint.drained(), kio::time::sleep(shared.shutdown_timeout)).await;
						return;
					}
					Either::Left(Either::Right(_)) => {
						info!(peer, id, "cluster peer linked toward us too: keeping its link");
						client.close(SHUTDOWN_CODE);
						continue;
					}
					Either::Left(Either::Left(code)) => warn!(peer, code, "cluster link lost"),
				}
				if kio::time::now() - started >= STABLE {
					backoff.reset();
				}
			}
		}
		if let Either::Right(()) = race(kio::time::sleep(backoff.delay()), shutdown.closed()).await {
			return;
		}
	}
}

/// Waits until a session of peer `id` toward us is open (`open`) or none is.
async fn inbound_open(inbound: &Consumer<HashMap<u64, usize>>, id: u64, open: bool) {
	let _ = inbound
		.wait(|peers| match peers.contains_key(&id) == open {
			true => Poll::Ready(()),
			false => Poll::Pending,
		})
		.await;
}

/// Counts a link as up in a gauge while it lives, however its task ends.
struct Counted<'a>(&'a AtomicU64);

impl<'a> Counted<'a> {
	fn new(gauge: &'a AtomicU64) -> Self {
		gauge.fetch_add(1, Ordering::Relaxed);
		Self(gauge)
	}
}

impl Drop for Counted<'_> {
	fn drop(&mut self) {
		self.0.fetch_sub(1, Ordering::Relaxed);
	}
}

/// One attempt: a QUIC connection to the peer, SETUP, and the session both ways over the whole
/// origin, as a cluster session.
async fn dial(
	shared: &Shared,
	url: &Url,
	verification: &Verification,
) -> anyhow::Result<(AnyClient, moq_quic::Endpoint)> {
	// A name is resolved on the worker (a blocking lookup): peers are few and dialled rarely.
	let addr: SocketAddr = url.resolve()?;
	// Its own socket: replies to the relay's shared port could reach another worker's socket.
	let endpoint = client::endpoint(addr)?;
	let config = session::Config {
		origin: shared.relay_id,
		pool: Some(shared.pool.clone()),
		counters: Some(shared.counters.clone()),
		limits: shared.limits.cluster_session,
		cluster: true,
		linger: shared.cluster.linger,
		..session::Config::default()
	};
	let client = client::dial_configured(
		&endpoint,
		addr,
		url,
		verification,
		config,
		Some(shared.origin.consumer()),
		Some(shared.origin.producer()),
	)
	.await?;
	Ok((client, endpoint))
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn backoff_doubles_to_its_cap_with_jitter_and_resets() {
		let mut backoff = Backoff::new(42);
		let delays: Vec<Duration> = (0..8).map(|_| backoff.delay()).collect();
		let caps = [1, 2, 4, 8, 10, 10, 10, 10].map(Duration::from_secs);
		for (delay, cap) in delays.iter().zip(caps) {
			assert!(
				*delay >= cap / 2 && *delay <= cap,
				"{delay:?} not in [{:?}, {cap:?}]",
				cap / 2
			);
		}
		assert!(delays[4..].windows(2).any(|w| w[0] != w[1]), "jittered: {delays:?}");
		backoff.reset();
		assert!(backoff.delay() <= BACKOFF_MIN);
	}

	#[test]
	fn members_are_named_by_their_urls_and_dialled_by_the_lower() {
		let url = "moqt://relay-b.example:4443/";
		let path = member_path(url);
		assert!(path.fits());
		let relative = path.strip_prefix(&Path::new(MEMBERS)).unwrap();
		assert_eq!(member_url(&relative).as_deref(), Some(url));
		for junk in ["", "6", "zz", "6d6f71", "ff00", "+6d", "6D6F"] {
			assert_eq!(member_url(&Path::new(junk)), None, "{junk:?}");
		}
		let configured = vec!["moqt://c:4443/".to_owned()];
		assert!(dials(Some("moqt://a:4443/"), &configured, "moqt://b:4443/", 2));
		assert!(!dials(Some("moqt://c:4443/"), &[], "moqt://b:4443/", 2), "b dials c");
		assert!(!dials(Some("moqt://b:4443/"), &[], "moqt://b:4443/", 2), "not itself");
		assert!(
			!dials(Some("moqt://a:4443/"), &configured, "moqt://c:4443/", 2),
			"already dialled"
		);
		assert!(
			!dials(Some("moqt://a:4443/"), &[], "moqt://b:4443/", 1),
			"heard directly: linked"
		);
		assert!(
			dials(None, &[], "moqt://b:4443/", 2),
			"a relay nobody can dial dials everyone"
		);
	}

	#[test]
	fn the_token_goes_in_the_query() {
		let url = Url::parse("moqt://peer:4443/").unwrap();
		assert_eq!(with_token(&url, Some("a.b.c")).path, "/?jwt=a.b.c");
		let url = Url::parse("moqt://peer:4443/x?cost=2").unwrap();
		assert_eq!(with_token(&url, Some("t")).path, "/x?cost=2&jwt=t");
		assert_eq!(with_token(&url, None).path, "/x?cost=2");
	}
}
