//! A four-relay cluster on moq-quic's simulated network, on a paused clock: deterministic, and
//! minutes of traffic in a fraction of a second. Every link loses 1% of its datagrams; then the
//! cluster is split in two for a minute (long enough for QUIC's idle timeout to end the links
//! across the cut and the linger to pass) and healed. After the heal, every viewer must have every
//! group the publisher wrote since, and no relay may hold a route twice or through a third relay.
//!
//! The simulated relays are `moq_relay::cluster::sim::SimCluster`: the relay's own accept loop,
//! sessions and cluster links, with simulated endpoints in place of its sockets (shared with the
//! control-plane benchmark).

mod common;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use moq_client::Url;
use moq_net::model::{Origin, Route};
use moq_net::{Path, Subscription};
use moq_quic::Endpoint;
use moq_quic::sim::{Network, SimConfig};
use moq_relay::cluster::sim::{SimCluster, relay_addr, relay_id, relay_ip};

use common::{connect_client, local_broadcast, publish, within};

const RELAYS: usize = 4;
const LINGER: Duration = Duration::from_secs(5);

fn runtime() -> kio::Runtime {
	kio::Builder::single().paused_clock(true).build().unwrap()
}

/// What one viewer saw.
#[derive(Default)]
struct Seen {
	groups: BTreeSet<u64>,
	/// Announcements of the broadcast heard (each after the previous one went).
	announced: Cell<u32>,
	/// The route of the latest announcement.
	route: RefCell<Route>,
}

/// A viewer: whenever "bbb" is announced, subscribes to its video from the group after the last
/// one it has, and records every group.
async fn watch(origin: Origin, seen: Rc<RefCell<Seen>>) {
	let mut cursor = origin.consumer().announced(&Path::default());
	loop {
		let update = cursor.next().await;
		let Some(broadcast) = update.broadcast.filter(|_| update.path == Path::new("bbb")) else {
			continue;
		};
		{
			let seen = seen.borrow();
			seen.announced.set(seen.announced.get() + 1);
			*seen.route.borrow_mut() = update.route.clone();
		}
		let start = seen.borrow().groups.last().map(|last| last + 1);
		let Ok(mut track) = broadcast.subscribe_track(
			"video",
			Subscription {
				start,
				..Subscription::default()
			},
		) else {
			continue;
		};
		// Until the broadcast ends or is replaced.
		while let Ok(Some(mut group)) = track.recv_group().await {
			if let Ok(Some(_)) = group.read_frame().await {
				seen.borrow_mut().groups.insert(group.sequence());
			}
		}
	}
}

#[test]
fn four_relays_with_loss_and_a_healed_partition_deliver_every_group_written_after_the_heal() {
	runtime().block_on(async {
		let network = Network::new(SimConfig {
			latency: Duration::from_millis(10),
			jitter: Duration::from_millis(5),
			loss: 0.01,
			seed: 7,
			..SimConfig::default()
		});
		// Four relays, each linked with each.
		let cluster = SimCluster::start(&network, RELAYS, LINGER);
		let (origins, verification) = (&cluster.origins(), &cluster.verification);
		let mut tasks = Vec::new();

		// A publisher on relay 0; a viewer on each relay.
		let publisher_origin = Origin::new(7);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "bbb");
		let publisher_endpoint =
			Endpoint::simulated(&network, "10.0.1.1:5000".parse().unwrap(), moq_quic::Config::new());
		let url = Url::parse("moqt://localhost:4443/").unwrap();
		let _publisher = within(
			Duration::from_secs(30),
			"the publisher's session",
			connect_client(
				&publisher_endpoint,
				relay_addr(0),
				&url,
				verification,
				7,
				Some(publisher_origin.consumer()),
				None,
			),
		)
		.await
		.unwrap();
		let mut viewers = Vec::new();
		for i in 0..RELAYS {
			let origin = Origin::new(1000 + i as u64);
			let addr = SocketAddr::new(IpAddr::from([10, 0, 2, i as u8 + 1]), 5000);
			let endpoint = Endpoint::simulated(&network, addr, moq_quic::Config::new());
			let client = within(
				Duration::from_secs(30),
				"a viewer's session",
				connect_client(
					&endpoint,
					relay_addr(i),
					&url,
					verification,
					1000 + i as u64,
					None,
					Some(origin.producer()),
				),
			)
			.await
			.unwrap();
			let seen = Rc::new(RefCell::new(Seen::default()));
			tasks.push(kio::spawn(watch(origin, seen.clone())));
			viewers.push((endpoint, client, seen));
		}

		// A group every 100 ms from here on.
		let written = Rc::new(Cell::new(0u64));
		tasks.push(kio::spawn({
			let written = written.clone();
			async move {
				loop {
					publish(&track, written.get());
					written.set(written.get() + 1);
					kio::time::sleep(Duration::from_millis(100)).await;
				}
			}
		}));

		// Ten seconds of a healthy cluster: every viewer gets groups.
		kio::time::sleep(Duration::from_secs(10)).await;
		for (i, (_, _, seen)) in viewers.iter().enumerate() {
			assert!(
				seen.borrow().groups.len() > 50,
				"viewer {i} got {} groups",
				seen.borrow().groups.len()
			);
		}

		// Split {0, 1} from {2, 3} for a minute: the links across the cut time out (30 s), their
		// routes linger (5 s) and go; the viewers on 2 and 3 lose the broadcast.
		for a in [0, 1] {
			for b in [2, 3] {
				network.cut(relay_ip(a), relay_ip(b));
			}
		}
		kio::time::sleep(Duration::from_secs(60)).await;
		assert_eq!(origins[2].broadcasts(), 0, "relay 2 withdrew the route it lost");
		assert_eq!(origins[3].broadcasts(), 0, "relay 3 withdrew the route it lost");
		assert_eq!(origins[1].broadcasts(), 1, "relay 1 kept its route");
		network.heal();
		let healed_at = written.get();

		// Thirty seconds after the heal, every viewer has every group written since.
		kio::time::sleep(Duration::from_secs(30)).await;
		let last = written.get() - 1;
		within(Duration::from_secs(30), "the last groups", async {
			while viewers
				.iter()
				.any(|(_, _, seen)| seen.borrow().groups.last() < Some(&last))
			{
				kio::time::sleep(Duration::from_millis(100)).await;
			}
		})
		.await;
		for (i, (_, _, seen)) in viewers.iter().enumerate() {
			let seen = seen.borrow();
			let missing: Vec<u64> = (healed_at..=last).filter(|seq| !seen.groups.contains(seq)).collect();
			assert!(
				missing.is_empty(),
				"viewer {i} misses {missing:?} of {healed_at}..={last}"
			);
			// Never through a third relay: the publisher, relay 0, then the viewer's relay.
			let route = seen.route.borrow().hops.clone();
			let expected: Vec<u64> = match i {
				0 => vec![7, relay_id(0)],
				_ => vec![7, relay_id(0), relay_id(i)],
			};
			assert_eq!(route, expected, "viewer {i}'s route");
		}
		// The viewers across the cut heard the broadcast again after the heal; the others once.
		assert_eq!(viewers[0].2.borrow().announced.get(), 1);
		assert_eq!(viewers[1].2.borrow().announced.get(), 1);
		assert_eq!(viewers[2].2.borrow().announced.get(), 2);
		assert_eq!(viewers[3].2.borrow().announced.get(), 2);
		// Nothing is announced twice: each relay holds the broadcast once, with no backup route.
		for (i, origin) in origins.iter().enumerate() {
			assert_eq!((origin.broadcasts(), origin.backups()), (1, 0), "relay {i}");
		}
		let stats = network.stats();
		assert!(stats.lost > 0 && stats.cut > 0, "{stats:?}");
		for task in tasks {
			task.abort();
		}
	});
}
