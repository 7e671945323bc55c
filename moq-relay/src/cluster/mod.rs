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
//! [`MAX_DISCOVERED`] are dialled. Names are resolved on a thread of their own, never on a
//! worker ([`moq_client::Url::resolve`]). A member lost abruptly stays announced for the linger,
//! as any route does.
//!
//! # The component
//!
//! `Cluster` owns what the cluster needs of a relay: its configuration, the gauges of links up
//! and peers' sessions open, and which peers' sessions are open toward this relay (what a link
//! waits on to keep one link of two). `Cluster::start` spawns a worker's share of the links
//! (and discovery, on worker 0), dialling through the [`Sockets`] the
//! caller gives: the kernel's for the relay, moq-quic's simulated network for [`sim`], which
//! runs the relay's own link, discovery and session code over it.
//!
//! - `link.rs`: keeping one peer's link up.
//! - `discovery.rs`: the members' paths and dialling the members heard of.
//! - `sim.rs`: a cluster of relays on a simulated network, for tests and the control-plane
//!   benchmark.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kio::sync::{Budget, Charge, Consumer, Producer};
use moq_client::Sockets;
use moq_net::model::{BroadcastProducer, Origin, Path, Publication, Route};
use moq_quic::Verification;

use crate::config::{self, PeerTls};
use crate::relay::Relay;

mod discovery;
mod link;
pub mod sim;

pub use discovery::{MAX_DISCOVERED, MAX_NODE_URL, MEMBERS, member_path};
pub use moq_client::{BACKOFF_MAX, BACKOFF_MIN, Backoff};

/// What the cluster needs of a relay (see the module docs).
pub(crate) struct Cluster {
	pub(crate) config: config::Cluster,
	/// How peers' certificates are checked.
	verification: Verification,
	/// Where the cluster's members are announced ([`MEMBERS`]).
	pub(crate) members: Path,
	/// Links to cluster peers this relay dialled that are up now.
	pub(crate) links: Budget,
	/// Sessions of cluster peers that dialled this relay, open now.
	pub(crate) sessions: Budget,
	/// Those sessions by the peer's origin id (how many of each): a relay that also dialled one of
	/// them keeps one link of the two ([`link`]).
	inbound: Producer<HashMap<u64, usize>>,
}

impl Cluster {
	pub(crate) fn new(config: &config::Cluster) -> anyhow::Result<Self> {
		Ok(Self {
			config: config.clone(),
			verification: verification(&config.tls)?,
			members: Path::new(MEMBERS),
			links: Budget::unlimited(),
			sessions: Budget::unlimited(),
			inbound: Producer::new(HashMap::new()),
		})
	}

	/// Makes `origin` a member's: the members' list passes from peer to peer, and this relay's
	/// own node URL, if it has one, is announced for as long as the returned membership lives.
	pub(crate) fn join(&self, origin: &Origin) -> anyhow::Result<Option<(BroadcastProducer, Publication)>> {
		origin.set_transit(&self.members);
		let Some(node) = &self.config.node else {
			return Ok(None);
		};
		let membership = origin
			.producer()
			.create_broadcast(&member_path(node), Route::default())
			.context("announcing this relay's node URL")?;
		Ok(Some(membership))
	}

	/// Spawns worker `index`'s share of the configured links, and on worker 0 the discovery of
	/// members; each task ends itself at shutdown. Links dial from `sockets`.
	pub(crate) fn start(
		relay: &Arc<Relay>,
		index: usize,
		sockets: &Sockets,
		shutdown: &Consumer<()>,
	) -> Vec<kio::JoinHandle<()>> {
		let dialer = Dialer {
			relay: relay.clone(),
			sockets: sockets.clone(),
			shutdown: shutdown.clone(),
		};
		let mut tasks: Vec<_> = (relay.cluster.config.connect.iter().enumerate())
			.filter(|(i, _)| i % kio::worker_count() == index)
			.map(|(_, peer)| kio::spawn(link::link(dialer.clone(), peer.clone())))
			.collect();
		if index == 0 {
			tasks.push(kio::spawn(discovery::discover(dialer)));
		}
		tasks
	}

	/// A cluster peer's session toward this relay, counted (under its origin id `peer`) while the
	/// returned guard lives.
	pub(crate) fn inbound(&self, peer: u64) -> Inbound<'_> {
		// A peer that gives no id (0: 03/04, or another implementation) says nothing about which
		// relay it is, so it is counted in the gauge only.
		if peer != 0
			&& let Ok(mut peers) = self.inbound.write()
		{
			*peers.entry(peer).or_default() += 1;
		}
		Inbound {
			cluster: self,
			peer,
			_session: self.sessions.charge(1),
		}
	}
}

/// A cluster peer's session open toward us (see [`Cluster::inbound`]).
pub(crate) struct Inbound<'a> {
	cluster: &'a Cluster,
	peer: u64,
	_session: Option<Charge>,
}

impl Drop for Inbound<'_> {
	fn drop(&mut self) {
		if let Ok(mut peers) = self.cluster.inbound.write()
			&& let Some(count) = peers.get_mut(&self.peer)
		{
			*count -= 1;
			if *count == 0 {
				peers.remove(&self.peer);
			}
		}
	}
}

/// What a link or discovery task dials with.
#[derive(Clone)]
struct Dialer {
	relay: Arc<Relay>,
	sockets: Sockets,
	shutdown: Consumer<()>,
}

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

/// A link that stayed up this long starts its next backoff from [`BACKOFF_MIN`] again.
const STABLE: Duration = Duration::from_secs(30);
