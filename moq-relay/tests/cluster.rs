//! Relays linked into one cluster over loopback QUIC: a broadcast published on one relay reaches
//! viewers on the others through one upstream subscription per link, announcements never loop
//! or pass through a third relay, a relay that leaves takes its routes with it, and a relay
//! without the cluster token is not a peer.

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::*;
use moq_client::Session;
use moq_net::Path;
use moq_net::model::{Origin, Route};
use moq_relay::auth::{self, Anonymous, AuthConfig};
use moq_relay::config::{Cluster, PeerTls};
use serde_json::json;

const KEY: &[u8] = b"a cluster test secret, 32+ bytes long";
const LIMIT: Duration = Duration::from_secs(20);

/// Tokens verified with `keys`; clients need none (anonymous access everywhere).
fn open_auth(keys: &KeyFile) -> AuthConfig {
	AuthConfig {
		key_file: Some(keys.0.clone()),
		anonymous: Anonymous::everything(),
	}
}

fn cluster_token() -> String {
	let exp = SystemTime::now()
		.duration_since(SystemTime::UNIX_EPOCH)
		.unwrap()
		.as_secs()
		+ 600;
	auth::sign_hs256(&json!({"cluster": true, "exp": exp}), KEY)
}

fn peer_url(relay: &Relay) -> String {
	format!("moqt://localhost:{}/", relay.bound.quic.port())
}

/// A relay with origin id `id` that dials `peers` with the cluster token.
fn member(keys: &KeyFile, id: u64, peers: &[&Relay], linger: Duration) -> Relay {
	let fingerprints = peers
		.iter()
		.map(|peer| moq_quic::tls::parse_fingerprint(&peer.bound.fingerprint).unwrap())
		.collect();
	Relay::start_cluster(
		open_auth(keys),
		Cluster {
			connect: peers.iter().map(|peer| peer_url(peer)).collect(),
			token: Some(cluster_token()),
			id: Some(id),
			linger,
			tls: PeerTls::Fingerprints(fingerprints),
			..Cluster::default()
		},
	)
}

/// The route of the first announcement of `path` a viewer of `origin` hears.
async fn announced_route(origin: &Origin, path: &str) -> Route {
	let mut cursor = origin.consumer().announced(&Path::default());
	loop {
		let update = cursor.next().await;
		if update.path == Path::new(path) && update.broadcast.is_some() {
			return update.route;
		}
	}
}

/// Waits until `path` is unannounced in `origin`.
async fn gone(origin: &Origin, path: &str) {
	// The cursor first: a change after the check still wakes it.
	let mut cursor = origin.consumer().announced(&Path::default());
	while origin.consumer().get_broadcast(&Path::new(path)).is_some() {
		cursor.next().await;
	}
}

/// A client on `relay` publishing `origin`'s broadcasts, with its endpoint.
async fn publishing(relay: &Relay, origin: &Origin) -> (Session, moq_quic::Endpoint) {
	let endpoint = endpoint(relay);
	let client = within(LIMIT, "a publisher's session", publisher(relay, &endpoint, "/", origin))
		.await
		.unwrap();
	(client, endpoint)
}

/// A client on `relay` mirroring its announcements into a new origin `id`, with its endpoint.
async fn watching(relay: &Relay, id: u64) -> (Origin, Session, moq_quic::Endpoint) {
	let origin = Origin::new(id);
	let endpoint = endpoint(relay);
	let client = within(LIMIT, "a viewer's session", viewer(relay, &endpoint, "/", &origin))
		.await
		.unwrap();
	(origin, client, endpoint)
}

/// Waits until the publisher's session serves a subscription to `track`: only then does a group
/// written reach the viewers (the upstream subscription starts at the latest group when it
/// arrives, so a group written before that would be skipped). The gauge of subscriptions on the
/// publisher's relay is not enough: it counts the request that causes the upstream one.
async fn asked(track: &moq_net::TrackProducer) {
	within(LIMIT, "the publisher to be asked for the track", track.used()).await;
}

/// Once the publisher is asked for `track`, writes the groups `written` (each frame its
/// sequence) and checks that `cursor` then reads the groups `read`, in order.
async fn delivered(
	track: &moq_net::TrackProducer,
	cursor: &mut moq_net::TrackConsumer,
	written: std::ops::Range<u64>,
	read: std::ops::Range<u64>,
	what: &str,
) {
	asked(track).await;
	for seq in written {
		publish(track, seq);
	}
	let got = within(LIMIT, what, take(cursor, (read.end - read.start) as usize)).await;
	assert_eq!(got, read.map(|seq| (seq, seq)).collect::<Vec<_>>(), "{what}");
}

/// The "video" track of the broadcast at `path`, once `origin` hears it announced.
async fn video(origin: &Origin, path: &str) -> moq_net::TrackConsumer {
	within(LIMIT, "the announcement", announced(origin, path))
		.await
		.subscribe_track("video", sub())
		.unwrap()
}

#[test]
fn a_broadcast_on_relay_a_reaches_viewers_on_b_and_c_through_one_subscription_per_link() {
	let keys = KeyFile::hs256("cluster-fanout", KEY);
	let a = member(&keys, 10, &[], Duration::from_secs(5));
	let b = member(&keys, 20, &[&a], Duration::from_secs(5));
	let c = member(&keys, 30, &[&a, &b], Duration::from_secs(5));
	runtime().block_on(async {
		// Every link is up: B→A, C→A, C→B (A and B also count the sessions of those that dialled).
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		c.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 2).await;
		a.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 2).await;
		b.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 1).await;

		let publisher_origin = Origin::new(7);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "bbb");
		let _publisher = publishing(&a, &publisher_origin).await;

		// Three viewers on B, one on C.
		let mut viewers = Vec::new();
		for (relay, id) in [(&b, 101), (&b, 102), (&b, 103), (&c, 104)] {
			let viewer = watching(relay, id).await;
			let route = within(LIMIT, "the announcement", announced_route(&viewer.0, "bbb")).await;
			viewers.push((viewer, route));
		}
		// Hop chains: publisher 7, relay A (10), the viewer's relay; never through a third relay.
		assert_eq!(viewers[0].1.hops, vec![7, 10, 20]);
		assert_eq!(viewers[3].1.hops, vec![7, 10, 30]);

		let mut cursors = Vec::new();
		for ((origin, ..), _) in &viewers {
			cursors.push(video(origin, "bbb").await);
		}
		// Demand reached A through both links before the first group is written.
		a.metric_until(LIMIT, "moq_relay_subscriptions", |n| n == 2).await;
		asked(&track).await;
		for seq in 0..20 {
			publish(&track, seq);
		}
		for cursor in &mut cursors {
			let got = within(LIMIT, "every group", take(cursor, 20)).await;
			assert_eq!(got, (0..20).map(|seq| (seq, seq)).collect::<Vec<_>>());
		}
		// One upstream subscription per link however many viewers: A serves B's link and C's link,
		// B serves its three viewers, C its one (and B's link to C carries nothing of it).
		assert_eq!(a.metric("moq_relay_subscriptions").await, 2);
		assert_eq!(b.metric("moq_relay_subscriptions").await, 3);
		assert_eq!(c.metric("moq_relay_subscriptions").await, 1);
		// Nothing was announced twice or looped: each relay holds the broadcast once, no backups.
		for relay in [&a, &b, &c] {
			assert_eq!(relay.metric("moq_relay_broadcasts").await, 1);
			assert_eq!(relay.metric("moq_relay_broadcast_backups").await, 0);
		}
	});
}

#[test]
fn the_publisher_leaving_ends_the_broadcast_everywhere_and_a_lost_one_lingers_first() {
	let keys = KeyFile::hs256("cluster-leave", KEY);
	let linger = Duration::from_millis(1500);
	let a = member(&keys, 10, &[], linger);
	let b = member(&keys, 20, &[&a], linger);
	let c = member(&keys, 30, &[&a, &b], linger);
	runtime().block_on(async {
		c.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 2).await;
		let watchers = [watching(&b, 101).await, watching(&c, 102).await];

		// A publisher that says goodbye: its broadcast ends at once on every relay.
		let publisher_origin = Origin::new(7);
		let (_broadcast, _track, _publication) = local_broadcast(&publisher_origin, "clean");
		let (publisher_client, _endpoint) = publishing(&a, &publisher_origin).await;
		for (origin, ..) in &watchers {
			within(LIMIT, "the announcement", announced(origin, "clean")).await;
		}
		let closed = Instant::now();
		publisher_client.close(0);
		for (origin, ..) in &watchers {
			within(LIMIT, "the end", gone(origin, "clean")).await;
		}
		assert!(closed.elapsed() < linger, "a goodbye does not linger");

		// A publisher lost abruptly (its connection fails: code 4, as an idle timeout reads):
		// its broadcast stays announced for the linger, then goes everywhere.
		let (_broadcast, _track, _publication) = local_broadcast(&publisher_origin, "lost");
		let (publisher_client, _endpoint) = publishing(&a, &publisher_origin).await;
		for (origin, ..) in &watchers {
			within(LIMIT, "the announcement", announced(origin, "lost")).await;
		}
		let lost = Instant::now();
		publisher_client.connection().close(4, "gone");
		for (origin, ..) in &watchers {
			within(LIMIT, "the end", gone(origin, "lost")).await;
		}
		assert!(lost.elapsed() >= linger, "withdrawn after {:?}", lost.elapsed());
		for relay in [&a, &b, &c] {
			relay.metric_until(LIMIT, "moq_relay_broadcasts", |n| n == 0).await;
		}
	});
}

#[test]
fn a_publisher_that_reconnects_within_the_linger_takes_its_path_over() {
	let keys = KeyFile::hs256("cluster-reconnect", KEY);
	let a = member(&keys, 10, &[], Duration::from_secs(30));
	let b = member(&keys, 20, &[&a], Duration::from_secs(30));
	runtime().block_on(async {
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		let (viewer_origin, _viewer, _endpoint) = watching(&b, 101).await;

		let publisher_origin = Origin::new(7);
		let (_broadcast, _track, _publication) = local_broadcast(&publisher_origin, "cam");
		let (first, _first_endpoint) = publishing(&a, &publisher_origin).await;
		within(LIMIT, "the announcement", announced(&viewer_origin, "cam")).await;
		first.connection().close(4, "lost");
		drop(first);

		// The same publisher, again, on a new connection, long before the 30 s linger is over.
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "cam");
		let _second = publishing(&a, &publisher_origin).await;
		// Relay A serves the new publication (the newer of two equal routes), and B's viewer,
		// asking again, gets its groups.
		let mut seq = 0;
		within(LIMIT, "groups from the new publication", async {
			loop {
				let mut cursor = video(&viewer_origin, "cam").await;
				// The lingering broadcast has no groups to give; the new one does.
				seq += 1;
				publish(&track, seq);
				if let Ok(Ok(Some(_))) = next_group_within(&mut cursor, Duration::from_millis(500)).await {
					return;
				}
			}
		})
		.await;
		assert_eq!(b.metric("moq_relay_broadcasts").await, 1);
	});
}

#[test]
fn a_publisher_lost_on_a_that_comes_back_on_c_is_served_from_c_at_once() {
	let keys = KeyFile::hs256("cluster-move", KEY);
	// A linger longer than the test's bound: a relay that waited for it would fail it.
	let linger = Duration::from_secs(60);
	let a = member(&keys, 10, &[], linger);
	let b = member(&keys, 20, &[&a], linger);
	let c = member(&keys, 30, &[&a, &b], linger);
	runtime().block_on(async {
		c.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 2).await;
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		let (viewer_origin, _viewer, _endpoint) = watching(&b, 101).await;

		let publisher_origin = Origin::new(7);
		let (_broadcast, _track, _publication) = local_broadcast(&publisher_origin, "cam");
		let (first, _first_endpoint) = publishing(&a, &publisher_origin).await;
		let route = within(LIMIT, "the announcement", announced_route(&viewer_origin, "cam")).await;
		assert_eq!(route.hops, vec![7, 10, 20]);
		// Lost abruptly on A, which keeps it announced for the linger...
		let mut cursor = viewer_origin.consumer().announced(&Path::default());
		first.connection().close(4, "lost");
		drop(first);
		// ...and back on C: A's lingering route gives way to C's live one, A stops announcing a
		// path it now serves from a peer, and B switches to C's route without waiting.
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "cam");
		let _second = publishing(&c, &publisher_origin).await;
		let route = within(LIMIT, "C's route on B", async {
			loop {
				let update = cursor.next().await;
				if update.path == Path::new("cam") && update.route.hops.contains(&30) {
					return update.route;
				}
			}
		})
		.await;
		assert_eq!(route.hops, vec![7, 30, 20]);
		let mut cursor = video(&viewer_origin, "cam").await;
		delivered(&track, &mut cursor, 0..3, 0..3, "groups from C").await;
		assert_eq!(b.metric("moq_relay_broadcasts").await, 1);
	});
}

/// The next group of `cursor`, or `Err` after `limit`.
async fn next_group_within(
	cursor: &mut moq_net::TrackConsumer,
	limit: Duration,
) -> Result<Result<Option<moq_net::GroupConsumer>, moq_net::Error>, ()> {
	use kio::{Either, race};
	match race(cursor.recv_group(), kio::time::sleep(limit)).await {
		Either::Left(group) => Ok(group),
		Either::Right(()) => Err(()),
	}
}

#[test]
fn when_relay_b_goes_its_viewers_reconnect_to_c_and_continue() {
	let keys = KeyFile::hs256("cluster-failover", KEY);
	// A linger longer than the test's bound: a route that lingered instead of going would fail it.
	let linger = Duration::from_secs(60);
	let a = member(&keys, 10, &[], linger);
	let b = member(&keys, 20, &[&a], linger);
	let c = member(&keys, 30, &[&a, &b], linger);
	runtime().block_on(async {
		c.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 2).await;
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		let publisher_origin = Origin::new(7);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "bbb");
		let _publisher = publishing(&a, &publisher_origin).await;

		let (viewer_origin, on_b, _endpoint) = watching(&b, 101).await;
		let mut cursor = video(&viewer_origin, "bbb").await;
		a.metric_until(LIMIT, "moq_relay_subscriptions", |n| n == 1).await;
		delivered(&track, &mut cursor, 0..5, 0..5, "groups via B").await;
		// A publisher on B too, watched from C.
		let b_origin = Origin::new(8);
		let (_b_broadcast, _b_track, _b_publication) = local_broadcast(&b_origin, "on-b");
		let _on_b_publisher = publishing(&b, &b_origin).await;
		let (watcher_origin, _watcher, _watcher_endpoint) = watching(&c, 103).await;
		within(LIMIT, "B's broadcast on C", announced(&watcher_origin, "on-b")).await;

		// B leaves the cluster: its viewer's session ends, A and C drop their links to it, and
		// its routes go at once (a relay that leaves says so; nothing lingers).
		b.stop().unwrap();
		within(LIMIT, "the viewer's session to end", on_b.closed()).await;
		within(LIMIT, "B's broadcast to go from C", gone(&watcher_origin, "on-b")).await;
		a.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 1).await;
		a.metric_until(LIMIT, "moq_relay_subscriptions", |n| n == 0).await;
		// With nobody left downstream, A cancels its own subscription to the publisher.
		within(LIMIT, "A's upstream subscription to end", track.unused()).await;

		// The viewer reconnects to C and continues.
		let (viewer_origin, _on_c, _endpoint) = watching(&c, 102).await;
		let mut cursor = video(&viewer_origin, "bbb").await;
		a.metric_until(LIMIT, "moq_relay_subscriptions", |n| n == 1).await;
		// A new subscription starts at the latest group (4, from the cache), then every group since.
		delivered(&track, &mut cursor, 5..10, 4..10, "groups via C").await;
	});
}

#[test]
fn a_link_whose_peer_went_is_dialled_again_until_the_peer_is_back() {
	let keys = KeyFile::hs256("cluster-redial", KEY);
	let a = member(&keys, 10, &[], Duration::from_secs(5));
	let port = a.bound.quic.port();
	// B dials A by its address; A comes back with a new certificate, so B checks none.
	let b = Relay::start_cluster(
		open_auth(&keys),
		Cluster {
			connect: vec![peer_url(&a)],
			token: Some(cluster_token()),
			id: Some(20),
			tls: PeerTls::Insecure,
			..Cluster::default()
		},
	);
	runtime().block_on(async {
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
	});
	// A goes: B's link is down, and B dials again (and again) while nothing answers.
	a.stop().unwrap();
	runtime().block_on(async {
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 0).await;
	});
	// A is back on its port: the link comes up again, and carries a broadcast published on it.
	let listen = format!("127.0.0.1:{port}").parse().unwrap();
	let a = Relay::start_cluster_on(
		listen,
		open_auth(&keys),
		Cluster {
			id: Some(10),
			token: Some(cluster_token()),
			..Cluster::default()
		},
	);
	runtime().block_on(async {
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		a.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 1).await;
		let publisher_origin = Origin::new(7);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "bbb");
		let _publisher = publishing(&a, &publisher_origin).await;
		let (viewer_origin, _viewer, _endpoint) = watching(&b, 101).await;
		let mut cursor = video(&viewer_origin, "bbb").await;
		delivered(&track, &mut cursor, 0..3, 0..3, "groups over the new link").await;
	});
}

/// A UDP port nothing is bound to now (for a relay whose URL must be known before it starts).
fn free_port() -> u16 {
	std::net::UdpSocket::bind("127.0.0.1:0")
		.unwrap()
		.local_addr()
		.unwrap()
		.port()
}

#[test]
fn relays_given_one_seed_find_each_other_and_link_directly() {
	let keys = KeyFile::hs256("cluster-discovery", KEY);
	let [pa, pb, pc] = [free_port(), free_port(), free_port()];
	let url = |port: u16| format!("moqt://127.0.0.1:{port}/");
	// A is the seed; B and C know only A. Every relay says where it can be dialled.
	let node = |port: u16, connect: Vec<String>, id: u64| {
		Relay::start_cluster_on(
			format!("127.0.0.1:{port}").parse().unwrap(),
			open_auth(&keys),
			Cluster {
				connect,
				node: Some(url(port)),
				token: Some(cluster_token()),
				id: Some(id),
				tls: PeerTls::Insecure,
				..Cluster::default()
			},
		)
	};
	let a = node(pa, vec![], 10);
	let b = node(pb, vec![url(pa)], 20);
	let c = node(pc, vec![url(pa)], 30);
	runtime().block_on(async {
		// B and C dial A, hear of each other through it, and one of them dials the other.
		a.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 2).await;
		within(LIMIT, "a link between B and C", async {
			loop {
				let links = b.metric("moq_relay_cluster_links").await + c.metric("moq_relay_cluster_links").await;
				let sessions =
					b.metric("moq_relay_cluster_sessions").await + c.metric("moq_relay_cluster_sessions").await;
				if links == 3 && sessions == 1 {
					return;
				}
				kio::time::sleep(Duration::from_millis(20)).await;
			}
		})
		.await;
		// A broadcast on B reaches a viewer on C over that link: no relay passes on another's
		// broadcasts, so through A it could not.
		let publisher_origin = Origin::new(7);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "on-b");
		let _publisher = publishing(&b, &publisher_origin).await;
		let (viewer_origin, _viewer, _endpoint) = watching(&c, 101).await;
		let route = within(LIMIT, "the announcement", announced_route(&viewer_origin, "on-b")).await;
		assert_eq!(route.hops, vec![7, 20, 30]);
		let mut cursor = video(&viewer_origin, "on-b").await;
		delivered(&track, &mut cursor, 0..3, 0..3, "groups from B on C").await;
		// Clients see none of the members, and the gauges count media only.
		let (client_origin, _client, _client_endpoint) = watching(&a, 102).await;
		within(LIMIT, "the announcement on A", announced(&client_origin, "on-b")).await;
		let mut everything = client_origin.consumer().announced(&Path::default());
		while let Some(update) = everything.try_next() {
			assert!(!update.path.as_str().starts_with(".cluster"), "{:?}", update.path);
		}
		assert_eq!(a.metric("moq_relay_broadcasts").await, 1);
		assert_eq!(a.metric("moq_relay_broadcast_backups").await, 0);
	});
	// C leaves: B keeps its link to A only, and does not dial C again.
	c.stop().unwrap();
	runtime().block_on(async {
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		b.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 0).await;
	});
}

#[test]
fn two_relays_that_dial_each_other_keep_one_link() {
	let keys = KeyFile::hs256("cluster-twins", KEY);
	let [pa, pb] = [free_port(), free_port()];
	let url = |port: u16| format!("moqt://127.0.0.1:{port}/");
	// Each lists the other, and neither says where it is: both dial.
	let twin = |port: u16, peer: u16, id: u64| {
		Relay::start_cluster_on(
			format!("127.0.0.1:{port}").parse().unwrap(),
			open_auth(&keys),
			Cluster {
				connect: vec![url(peer)],
				token: Some(cluster_token()),
				id: Some(id),
				tls: PeerTls::Insecure,
				..Cluster::default()
			},
		)
	};
	let a = twin(pa, pb, 10);
	let b = twin(pb, pa, 20);
	runtime().block_on(async {
		// B, the higher id, closes the link it dialled once it sees A's, and waits: one link, A's.
		a.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		a.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 0).await;
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 0).await;
		b.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 1).await;
		// It carries broadcasts as any link does, and B's routes are heard once.
		let publisher_origin = Origin::new(7);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "bbb");
		let _publisher = publishing(&b, &publisher_origin).await;
		let (viewer_origin, _viewer, _endpoint) = watching(&a, 101).await;
		let mut cursor = video(&viewer_origin, "bbb").await;
		delivered(&track, &mut cursor, 0..3, 0..3, "groups over the one link").await;
		assert_eq!(a.metric("moq_relay_broadcast_backups").await, 0);
		assert_eq!(
			a.metric("moq_relay_cluster_links").await + b.metric("moq_relay_cluster_links").await,
			1
		);
	});
	// A goes and comes back: one link again, whichever of the two dialled it.
	a.stop().unwrap();
	let a = twin(pa, pb, 10);
	runtime().block_on(async {
		within(LIMIT, "one link again", async {
			loop {
				let links = a.metric("moq_relay_cluster_links").await + b.metric("moq_relay_cluster_links").await;
				let sessions =
					a.metric("moq_relay_cluster_sessions").await + b.metric("moq_relay_cluster_sessions").await;
				if links == 1 && sessions == 1 {
					return;
				}
				kio::time::sleep(Duration::from_millis(20)).await;
			}
		})
		.await;
	});
}

#[test]
fn a_relay_that_dials_itself_stops() {
	let keys = KeyFile::hs256("cluster-self", KEY);
	let port = free_port();
	// Its own URL under a name, where its node (none here) could not say so.
	let relay = Relay::start_cluster_on(
		format!("127.0.0.1:{port}").parse().unwrap(),
		open_auth(&keys),
		Cluster {
			connect: vec![format!("moqt://localhost:{port}/")],
			token: Some(cluster_token()),
			id: Some(10),
			tls: PeerTls::Insecure,
			..Cluster::default()
		},
	);
	runtime().block_on(async {
		// The link reached this relay (a session was accepted from it), saw its own id, and went.
		relay.metric_until(LIMIT, "moq_relay_sessions_total", |n| n >= 1).await;
		relay.metric_until(LIMIT, "moq_relay_sessions", |n| n == 0).await;
		assert_eq!(relay.metric("moq_relay_cluster_links").await, 0);
	});
}

#[test]
fn a_link_over_webtransport_carries_broadcasts_as_one_over_raw_quic_does() {
	let keys = KeyFile::hs256("cluster-webtransport", KEY);
	let a = member(&keys, 10, &[], Duration::from_secs(5));
	let b = Relay::start_cluster(
		open_auth(&keys),
		Cluster {
			connect: vec![format!("https://localhost:{}/", a.bound.quic.port())],
			token: Some(cluster_token()),
			id: Some(20),
			tls: PeerTls::Fingerprints(vec![moq_quic::tls::parse_fingerprint(&a.bound.fingerprint).unwrap()]),
			..Cluster::default()
		},
	);
	runtime().block_on(async {
		b.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		a.metric_until(LIMIT, "moq_relay_cluster_sessions", |n| n == 1).await;
		let publisher_origin = Origin::new(7);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "bbb");
		let _publisher = publishing(&a, &publisher_origin).await;
		let (viewer_origin, _viewer, _endpoint) = watching(&b, 101).await;
		let route = within(LIMIT, "the announcement", announced_route(&viewer_origin, "bbb")).await;
		assert_eq!(route.hops, vec![7, 10, 20]);
		let mut cursor = video(&viewer_origin, "bbb").await;
		a.metric_until(LIMIT, "moq_relay_subscriptions", |n| n == 1).await;
		delivered(&track, &mut cursor, 0..10, 0..10, "every group").await;
	});
}

#[test]
fn a_relay_without_the_cluster_token_is_not_a_peer() {
	let keys = KeyFile::hs256("cluster-token", KEY);
	// A takes only tokens: no anonymous access.
	let a = Relay::start_cluster(
		AuthConfig {
			key_file: Some(keys.0.clone()),
			anonymous: Anonymous::none(),
		},
		Cluster {
			id: Some(10),
			..Cluster::default()
		},
	);
	let pin = moq_quic::tls::parse_fingerprint(&a.bound.fingerprint).unwrap();
	// B dials A without a token, C with a token that is not a cluster token.
	let b = Relay::start_cluster(
		open_auth(&keys),
		Cluster {
			connect: vec![peer_url(&a)],
			id: Some(20),
			tls: PeerTls::Fingerprints(vec![pin]),
			..Cluster::default()
		},
	);
	let client_token = auth::sign_hs256(&json!({"get": "", "put": ""}), KEY);
	let c = Relay::start_cluster(
		open_auth(&keys),
		Cluster {
			connect: vec![peer_url(&a)],
			token: Some(client_token),
			id: Some(30),
			tls: PeerTls::Fingerprints(vec![pin]),
			..Cluster::default()
		},
	);
	runtime().block_on(async {
		// B is refused; C links, but as a client, not as a peer.
		a.metric_until(LIMIT, "moq_relay_refused_total", |n| n >= 1).await;
		c.metric_until(LIMIT, "moq_relay_cluster_links", |n| n == 1).await;
		assert_eq!(a.metric("moq_relay_cluster_sessions").await, 0);
		assert_eq!(b.metric("moq_relay_cluster_links").await, 0);
	});
}
