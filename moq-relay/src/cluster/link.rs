//! Keeping one peer's link up: dial, serve the session until it ends, wait the backoff, dial
//! again; one link per pair of relays.

use std::collections::HashMap;
use std::task::Poll;

use kio::sync::Consumer;
use kio::{Either, race};
use moq_client::{Backoff, Client, Url};
use moq_net::lite::session;
use tracing::{info, warn};

use super::{Dialer, STABLE};
use crate::connection::SHUTDOWN_CODE;

/// Keeps the link to `peer` up until shutdown.
///
/// One link per pair: two relays that dial each other (each listed the other, or one found the
/// other while their link was down) end up with two sessions, and the relay with the higher
/// origin id closes the one it dialled as soon as it sees the other (its peer's session toward
/// it, [`Cluster::inbound`](super::Cluster::inbound)), then dials again only once that one has
/// ended. Both ends apply the same rule, so they agree on the link they keep. With a fixed
/// `[cluster] id`, a peer that crashed and came back may find its old session still counted here
/// until it times out (the idle timeout): the relay then waits that long before dialling it
/// again, unless the peer dials first. The peer's id is the last one the URL answered with: a
/// name that reaches several relays in turn is taken for the last of them.
pub(super) async fn link(dialer: Dialer, peer: String) {
	let relay = &*dialer.relay;
	let Ok(url) = Url::parse(&peer) else {
		// Checked when the configuration was read.
		return;
	};
	let url = match &relay.cluster.config.token {
		Some(token) => url.with_token(token),
		None => url,
	};
	let own = relay.id();
	let mut backoff = Backoff::new(own ^ peer.bytes().fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b)));
	let inbound = relay.cluster.inbound.consume();
	// Of two links with peer `id`, ours is the one to give way (0: a peer that gives no origin id,
	// 03/04 or another implementation, is never taken for the twin of another such session).
	let yields = |id: u64| id != 0 && own > id;
	let shutdown = &dialer.shutdown;
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
		match race(dial(&dialer, &url), shutdown.closed()).await {
			Either::Right(()) => return,
			Either::Left(Err(err)) => warn!(peer, err = %format!("{err:#}"), "cluster peer unreachable"),
			Either::Left(Ok(session)) => {
				let id = session.peer().origin;
				if id == own {
					// A spelling of our own URL that canonical forms do not catch (a name for
					// an address of ours): nothing to link with.
					warn!(peer, "cluster peer is this relay: not dialling it");
					session.close(SHUTDOWN_CODE);
					return;
				}
				peer_id = Some(id);
				info!(peer, id, "cluster link up");
				let _up = relay.cluster.links.charge(1);
				// Ours is the link to drop if the peer's session toward us is open too.
				let twin = async {
					match yields(id) {
						true => inbound_open(&inbound, id, true).await,
						false => std::future::pending().await,
					}
				};
				match race(race(session.closed(), twin), shutdown.closed()).await {
					Either::Right(()) => {
						// Leaving the cluster: the peer withdraws our routes at once on Closed.
						let endpoint = session.endpoint().cloned().expect("cluster links dial QUIC");
						session.close(SHUTDOWN_CODE);
						drop(session);
						let _ = race(endpoint.drained(), kio::time::sleep(relay.shutdown_timeout)).await;
						return;
					}
					Either::Left(Either::Right(_)) => {
						info!(peer, id, "cluster peer linked toward us too: keeping its link");
						session.close(SHUTDOWN_CODE);
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

/// One attempt: a connection to the peer (from a socket of its own: replies to the relay's
/// shared port could reach another worker's socket), SETUP, and the session both ways over the
/// whole origin, as a cluster session.
async fn dial(dialer: &Dialer, url: &Url) -> anyhow::Result<moq_client::Session> {
	let relay = &*dialer.relay;
	let config = session::Config {
		origin: relay.id(),
		pool: Some(relay.pool.clone()),
		counters: Some(relay.counters.clone()),
		limits: relay.limits.cluster_session,
		cluster: true,
		linger: relay.cluster.config.linger,
		..session::Config::default()
	};
	Client::new()
		.session(config)
		.publish(relay.origin.consumer())
		.subscribe(relay.origin.producer())
		.verify(relay.cluster.verification.clone())
		.sockets(dialer.sockets.clone())
		.connect(url)
		.await
}
