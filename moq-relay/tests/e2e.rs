//! End to end: real QUIC over loopback through an in-process relay on two workers.
//!
//! Clients run on the test's own kio runtime. The relay's `SO_REUSEPORT` group hashes a client's
//! address to one worker, so connections from one client endpoint (one UDP port) land on the
//! same worker, and a new endpoint lands on either.

mod common;

use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use common::*;
use kio::sync::Producer;
use moq_net::model::{Origin, Path};
use moq_quic::Endpoint;

/// Sessions open on each relay worker, read from `/metrics`.
async fn worker_sessions(relay: &Relay) -> Vec<u64> {
	let body = moq_client::http::get(relay.bound.http.unwrap(), "/metrics")
		.await
		.unwrap()
		.body;
	let mut sessions = Vec::new();
	for line in body.lines().filter(|l| l.starts_with("moq_relay_worker_sessions{")) {
		sessions.push(line.rsplit(' ').next().unwrap().parse().unwrap());
	}
	sessions
}

/// Sessions per worker once their total differs from `before`'s: the client's SETUP exchange can
/// end before the relay counts the session, so this polls `/metrics` until it has (bounded).
async fn sessions_after(relay: &Relay, before: &[u64]) -> Vec<u64> {
	let total: u64 = before.iter().sum();
	within(Duration::from_secs(10), "the relay counts the session", async {
		loop {
			let now = worker_sessions(relay).await;
			if now.iter().sum::<u64>() != total {
				return now;
			}
			kio::time::sleep(Duration::from_millis(5)).await;
		}
	})
	.await
}

/// The worker whose session count went up between `before` and `after`.
fn landed(before: &[u64], after: &[u64]) -> usize {
	let moved: Vec<usize> = (0..after.len()).filter(|&i| after[i] > before[i]).collect();
	assert_eq!(moved.len(), 1, "exactly one new session: {before:?} -> {after:?}");
	moved[0]
}

#[test]
fn one_publisher_and_a_hundred_subscribers_receive_every_group_in_order() {
	const VIEWERS: usize = 100;
	const GROUPS: u64 = 20;
	let relay = Relay::start(2);
	runtime().block_on(async {
		let publisher_endpoint = endpoint(&relay);
		let origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "bbb");
		let _publisher = publisher(&relay, &publisher_endpoint, "/live", &origin).await.unwrap();
		// Ten client sockets, ten connections each: spread over the relay's workers.
		let endpoints: Vec<Endpoint> = (0..10).map(|_| endpoint(&relay)).collect();
		let ready = Rc::new(Producer::new(0usize));
		let all_ready = ready.consume();
		let go = Rc::new(Producer::new(false));
		let mut viewers = Vec::new();
		for i in 0..VIEWERS {
			let endpoint = endpoints[i % endpoints.len()].clone();
			let viewer_origin = Origin::new(1000 + i as u64);
			let client = viewer(&relay, &endpoint, "/live", &viewer_origin).await.unwrap();
			let (ready, go) = (ready.clone(), go.consume());
			viewers.push(kio::spawn(async move {
				let mut cursor = announced(&viewer_origin, "bbb")
					.await
					.subscribe_track("video", sub())
					.unwrap();
				// Group 0 is the latest when the viewer joins; the rest are published after every
				// viewer has it.
				let mut got = take(&mut cursor, 1).await;
				*ready.write().unwrap() += 1;
				go.wait(|go| if *go { Poll::Ready(()) } else { Poll::Pending })
					.await
					.unwrap();
				got.extend(take(&mut cursor, GROUPS as usize).await);
				drop(client);
				got
			}));
		}
		track.used().await;
		publish(&track, 0);
		// Every viewer has group 0 before the rest go out.
		all_ready
			.wait(|n| if *n == VIEWERS { Poll::Ready(()) } else { Poll::Pending })
			.await
			.unwrap();
		*go.write().unwrap() = true;
		for seq in 1..=GROUPS {
			publish(&track, seq);
		}
		let expected: Vec<(u64, u64)> = (0..=GROUPS).map(|s| (s, s)).collect();
		for (i, viewer) in viewers.into_iter().enumerate() {
			assert_eq!(viewer.await.unwrap(), expected, "viewer {i}");
		}
	});
	relay.stop().unwrap();
}

#[test]
fn publishers_and_subscribers_on_different_workers() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "bbb");
		let before = worker_sessions(&relay).await;
		let publisher_endpoint = endpoint(&relay);
		let _publisher = publisher(&relay, &publisher_endpoint, "/live", &origin).await.unwrap();
		let mut sessions = sessions_after(&relay, &before).await;
		let publisher_worker = landed(&before, &sessions);
		// New client sockets until one lands on the other worker (each does with probability ½).
		let mut keep = Vec::new();
		let (viewer_origin, _viewer) = loop {
			assert!(keep.len() < 40, "no connection reached the other worker");
			let viewer_endpoint = endpoint(&relay);
			let viewer_origin = Origin::new(2 + keep.len() as u64);
			let client = viewer(&relay, &viewer_endpoint, "/live", &viewer_origin).await.unwrap();
			let now = sessions_after(&relay, &sessions).await;
			let worker = landed(&sessions, &now);
			sessions = now;
			if worker != publisher_worker {
				break (viewer_origin, (client, viewer_endpoint));
			}
			keep.push((client, viewer_endpoint));
		};
		let mut cursor = announced(&viewer_origin, "bbb")
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		for seq in 0..10 {
			publish(&track, seq);
		}
		assert_eq!(take(&mut cursor, 10).await, (0..10).map(|s| (s, s)).collect::<Vec<_>>());
	});
	relay.stop().unwrap();
}

#[test]
fn a_viewer_whose_address_changes_keeps_watching_whichever_worker_it_reaches() {
	// Before: the worker the viewer's new address hashed to did not know its connection and
	// answered with a stateless reset; the session ended and the viewer had to reconnect.
	let relay = Relay::start(2);
	runtime().block_on(async {
		let origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "bbb");
		let publisher_endpoint = endpoint(&relay);
		let _publisher = publisher(&relay, &publisher_endpoint, "/", &origin).await.unwrap();
		let mut nat = moq_quic::nat::Nat::new(relay.bound.quic);
		let viewer_endpoint = endpoint(&relay);
		let viewer_origin = Origin::new(2);
		let _viewer = connect_client(
			&viewer_endpoint,
			nat.addr(),
			&relay.url("/"),
			&relay.verification(),
			viewer_origin.id(),
			None,
			Some(viewer_origin.producer()),
		)
		.await
		.unwrap();
		let mut cursor = announced(&viewer_origin, "bbb")
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		publish(&track, 0);
		assert_eq!(take(&mut cursor, 1).await, vec![(0, 0)]);
		// New ports until one reaches the worker that does not hold the connection (each does
		// with probability ½); every group still arrives.
		let mut next = 1;
		while relay.metric("moq_relay_udp_forwarded_total").await == 0 {
			assert!(next <= 40, "40 new ports all reached the connection's own worker");
			// A NAT moves when a mapping has been idle, not between a challenge and its answer.
			within(Duration::from_secs(20), "the viewer's answer", nat.settle()).await;
			nat.rebind();
			publish(&track, next);
			let got = within(Duration::from_secs(20), "a group after a move", take(&mut cursor, 1)).await;
			assert_eq!(got, vec![(next, next)]);
			next += 1;
		}
		for seq in next..next + 3 {
			publish(&track, seq);
		}
		let got = within(Duration::from_secs(20), "groups on the new path", take(&mut cursor, 3)).await;
		assert_eq!(got, (next..next + 3).map(|s| (s, s)).collect::<Vec<_>>());
		assert_eq!(relay.metric("moq_relay_udp_forward_dropped_total").await, 0);
		assert_eq!(relay.metric("moq_relay_udp_forward_queue_limit").await, 1 << 20);
	});
	relay.stop().unwrap();
}

#[test]
fn the_connection_path_roots_sessions() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let a = Origin::new(1);
		let (_ba, _ta, _pa) = local_broadcast(&a, "x");
		let _publisher_a = publisher(&relay, &endpoint, "/a", &a).await.unwrap();
		let b = Origin::new(2);
		let (_bb, _tb, _pb) = local_broadcast(&b, "y");
		let _publisher_b = publisher(&relay, &endpoint, "/b?token=ignored", &b).await.unwrap();

		// Under /a the broadcast is "x"; from the root it is "a/x".
		let under_a = Origin::new(3);
		let _viewer_a = viewer(&relay, &endpoint, "/a", &under_a).await.unwrap();
		announced(&under_a, "x").await;
		let at_root = Origin::new(4);
		let _viewer_root = viewer(&relay, &endpoint, "/", &at_root).await.unwrap();
		announced(&at_root, "a/x").await;
		announced(&at_root, "b/y").await;
		// Under /b only "y": the current set arrives whole, so "x" would be there by now.
		let under_b = Origin::new(5);
		let _viewer_b = viewer(&relay, &endpoint, "/b", &under_b).await.unwrap();
		announced(&under_b, "y").await;
		assert!(under_b.consumer().get_broadcast(&Path::new("x")).is_none());
		assert!(under_b.consumer().get_broadcast(&Path::new("a/x")).is_none());
		assert_eq!(under_b.broadcasts(), 1);
	});
	relay.stop().unwrap();
}

#[test]
fn a_subscriber_joining_mid_stream_starts_at_the_latest_group() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "bbb");
		let _publisher = publisher(&relay, &endpoint, "/live", &origin).await.unwrap();
		let early = Origin::new(2);
		let _early = viewer(&relay, &endpoint, "/live", &early).await.unwrap();
		let mut early_cursor = announced(&early, "bbb").await.subscribe_track("video", sub()).unwrap();
		track.used().await;
		for seq in 0..5 {
			publish(&track, seq);
		}
		assert_eq!(take(&mut early_cursor, 5).await.last(), Some(&(4, 4)));
		let late = Origin::new(3);
		let _late = viewer(&relay, &endpoint, "/live", &late).await.unwrap();
		let mut late_cursor = announced(&late, "bbb").await.subscribe_track("video", sub()).unwrap();
		assert_eq!(take(&mut late_cursor, 1).await, vec![(4, 4)], "the latest group first");
		publish(&track, 5);
		assert_eq!(take(&mut late_cursor, 1).await, vec![(5, 5)]);
		assert_eq!(take(&mut early_cursor, 1).await, vec![(5, 5)]);
	});
	relay.stop().unwrap();
}

#[test]
fn a_publisher_that_disconnects_ends_its_broadcast() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "bbb");
		let publisher_client = publisher(&relay, &endpoint, "/live", &origin).await.unwrap();
		let viewer_origin = Origin::new(2);
		let _viewer = viewer(&relay, &endpoint, "/live", &viewer_origin).await.unwrap();
		let mut cursor = announced(&viewer_origin, "bbb")
			.await
			.subscribe_track("video", sub())
			.unwrap();
		// A watcher hears of an unannouncement only of what it heard announced (updates are
		// coalesced per path): read the announcement first.
		let mut announcements = viewer_origin.consumer().announced(&Path::default());
		assert_eq!(announcements.next().await.path, Path::new("bbb"));
		track.used().await;
		publish(&track, 0);
		assert_eq!(take(&mut cursor, 1).await, vec![(0, 0)]);
		drop(publisher_client);
		// The viewer's track ends (not cleanly: its publisher is gone) ...
		assert!(!matches!(cursor.recv_group().await, Ok(Some(_))), "no more groups");
		// ... and the broadcast is unannounced.
		loop {
			let update = announcements.next().await;
			if update.path == Path::new("bbb") && update.broadcast.is_none() {
				break;
			}
		}
	});
	relay.stop().unwrap();
}
