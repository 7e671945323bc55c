//! Hostile peers end to end: what one connection can make the relay do to others, and hold.
//!
//! Each test attacks an in-process relay over real loopback QUIC with a raw client that writes
//! moq-lite bytes (or bare QUIC Initials, or idle TCP), then checks that a healthy publisher →
//! viewer pair on the same relay keeps receiving every group and that the relay's budget gauges
//! (from `/metrics`) stay under the configured limits; where the attacker holds something, that
//! once it is gone every charge is given back (`all_given_back`: a Reader that kept its partial
//! bytes' charge when dropped fails there). Each fails with its fix reverted (checked
//! one by one: the aggregate's "absent start means latest" and the publisher's cleared floor, the
//! path check, the handshake caps, the in-flight limit, the partial-bytes budget, the announce
//! budget, the SETUP close code, the HTTP per-address share and idle eviction, the pool's hard
//! cap, the connection's send buffer: 4,190,272 bytes queued without it, against 1 MiB; a stream's queue
//! ahead of the peer's credit); the second publisher's restore is checked on the model, where the gauge it waits for was
//! added with it (`tests/model.rs` in moq-net), and so is forgetting unknown track names
//! (`tests/session.rs`). The relay's resident memory under attack is measured on the real binary, in a
//! process of its own, by `memory.rs`.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use kio::net::TcpStream;
use kio::{Either, race};
use moq_net::lite::{ControlType, Subscribe, Track, session};
use moq_net::model::{Origin, Path, Route, Subscription, TrackInfo};
use moq_relay::limits::Limits;

const LIMIT: Duration = Duration::from_secs(20);

/// A client endpoint on another loopback address than [`endpoint`]'s (127.0.0.2): another
/// place, to the relay.
fn elsewhere() -> moq_quic::Endpoint {
	moq_quic::Endpoint::bind("127.0.0.2:0".parse().unwrap(), moq_quic::Config::new()).unwrap()
}

/// A relay on two workers under `limits`, with a 64 MiB cache.
fn relay_limited(limits: Limits) -> Relay {
	Relay::start_limited(2, limits, 64 << 20)
}

/// A relay on two workers whose session limits `adjust` changes from the defaults.
fn relay_with_session(adjust: impl FnOnce(&mut session::Limits)) -> Relay {
	let mut limits = Limits::default();
	adjust(&mut limits.session);
	relay_limited(limits)
}

/// Waits until what the attackers made the relay hold is given back, once they are gone: no
/// partial message or frame held, no stream queue, and `subscriptions` subscriptions served (the
/// healthy viewers'), each with at most its one newest group in flight. A charge an ended session
/// kept would fill its budget a little more at each attack, until the relay refused everyone.
async fn all_given_back(relay: &Relay, subscriptions: u64) {
	relay.metric_until(LIMIT, "moq_relay_partial_bytes", |n| n == 0).await;
	relay
		.metric_until(LIMIT, "moq_relay_stream_queued_bytes", |n| n == 0)
		.await;
	relay
		.metric_until(LIMIT, "moq_relay_udp_forward_queued_bytes", |n| n == 0)
		.await;
	relay
		.metric_until(LIMIT, "moq_relay_subscriptions", |n| n == subscriptions)
		.await;
	relay
		.metric_until(LIMIT, "moq_relay_groups_in_flight", |n| n <= subscriptions)
		.await;
}

fn subscribe_bytes(id: u64, broadcast: &str, track: &str, start: Option<u64>) -> Bytes {
	Bytes::from(typed(
		u64::from(ControlType::Subscribe),
		&Subscribe {
			id,
			broadcast: Path::new(broadcast),
			track: track.into(),
			priority: 0,
			ordered: false,
			latency_max: Duration::from_secs(10),
			start,
			end: None,
		},
	))
}

#[test]
fn a_future_start_then_a_disconnect_stops_nobody() {
	// Before: the merged demand kept the attacker's start (an absent start was "no opinion"), the
	// publisher raised its floor to it and never lowered it: every viewer, present and future,
	// received nothing more.
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		healthy.still_receives().await;
		let attacker = raw(&relay, &endpoint, true).await;
		let (mut send, recv) = attacker.open_bi().await.unwrap();
		send.write(subscribe_bytes(0, "bbb", "video", Some(1_000_000_000)))
			.await
			.unwrap();
		relay.metric_until(LIMIT, "moq_relay_subscriptions", |n| n >= 2).await;
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		drop((send, recv));
		attacker.close(0, "bye");
		relay.metric_until(LIMIT, "moq_relay_subscriptions", |n| n == 1).await;
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		// A viewer that comes after the attacker left receives too.
		let late_origin = Origin::new(9);
		let _late = viewer(&relay, &endpoint, "/", &late_origin).await.unwrap();
		let mut late = announced(&late_origin, "bbb")
			.await
			.subscribe_track("video", sub())
			.unwrap();
		healthy.still_receives().await;
		let seq = healthy.next;
		publish(&healthy.track, seq);
		healthy.next += 1;
		within(LIMIT, "the late viewer", async {
			loop {
				let (got, _) = take(&mut late, 1).await[0];
				if got == seq {
					break;
				}
			}
		})
		.await;
	});
	relay.stop().unwrap();
}

#[test]
fn a_second_publisher_takes_a_path_only_while_it_is_there() {
	// Before: the second session's announcement replaced the first for good; when it left the
	// path was empty (broadcasts 0) though the first publisher was still publishing.
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let first_origin = Origin::new(1);
		let (_first_broadcast, track, _first_pub) = local_broadcast(&first_origin, "bbb");
		let _first = publisher(&relay, &endpoint, "/", &first_origin).await.unwrap();
		let viewer_origin = Origin::new(2);
		let _viewer = viewer(&relay, &endpoint, "/", &viewer_origin).await.unwrap();
		announced(&viewer_origin, "bbb").await;
		let attacker_origin = Origin::new(3);
		let (_evil_broadcast, _evil_track, _evil_pub) = local_broadcast(&attacker_origin, "bbb");
		let attacker = publisher(&relay, &endpoint, "/", &attacker_origin).await.unwrap();
		relay
			.metric_until(LIMIT, "moq_relay_broadcast_backups", |n| n == 1)
			.await;
		drop(attacker);
		relay
			.metric_until(LIMIT, "moq_relay_broadcast_backups", |n| n == 0)
			.await;
		assert_eq!(relay.metric("moq_relay_broadcasts").await, 1, "the first is back");
		// A viewer watches the first publisher again. Its announcements are coalesced per path (it
		// sees what is there now, not every change), so until its view has caught up it may still
		// hold the attacker's ended broadcast: subscribe to what it sees until demand reaches the
		// first publisher.
		let mut cursor = within(LIMIT, "demand reaches the first publisher", async {
			loop {
				let broadcast = announced(&viewer_origin, "bbb").await;
				if let Ok(cursor) = broadcast.subscribe_track("video", sub())
					&& let Either::Left(()) = race(track.used(), kio::time::sleep(Duration::from_millis(250))).await
				{
					return cursor;
				}
				kio::time::sleep(Duration::from_millis(20)).await;
			}
		})
		.await;
		for seq in 0..3 {
			publish(&track, seq);
			assert_eq!(within(LIMIT, "group", take(&mut cursor, 1)).await, vec![(seq, seq)]);
		}
	});
	relay.stop().unwrap();
}

#[test]
fn a_deep_path_under_a_root_never_breaks_root_watchers() {
	// Before: a legal 32-segment suffix published under `/demo` was 33 segments seen from `/`;
	// encoding it failed and reset the ANNOUNCE stream of every root-level watcher.
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let watcher_origin = Origin::new(2);
		let _watcher = viewer(&relay, &endpoint, "/", &watcher_origin).await.unwrap();
		let deep_origin = Origin::new(3);
		let producer = deep_origin.producer();
		let deep = vec!["s"; 32].join("/");
		let _deep = producer.create_broadcast(&Path::new(&deep), Route::default()).unwrap();
		// Announced after the deep one on the same stream (paths go in order): its arrival at the
		// watcher shows the relay has dealt with the deep one.
		let _after = producer.create_broadcast(&Path::new("zz"), Route::default()).unwrap();
		let _deep_publisher = publisher(&relay, &endpoint, "/demo", &deep_origin).await.unwrap();
		within(LIMIT, "demo/zz", announced(&watcher_origin, "demo/zz")).await;
		// The watcher's announcements still flow: a broadcast announced now reaches it, and plays.
		let origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "bbb");
		let _publisher = publisher(&relay, &endpoint, "/", &origin).await.unwrap();
		let mut cursor = within(LIMIT, "bbb", announced(&watcher_origin, "bbb"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		publish(&track, 0);
		assert_eq!(within(LIMIT, "group", take(&mut cursor, 1)).await, vec![(0, 0)]);
		assert!(
			watcher_origin
				.consumer()
				.get_broadcast(&Path::new(&format!("demo/{deep}")))
				.is_none()
		);
	});
	relay.stop().unwrap();
}

#[test]
fn half_open_handshakes_are_capped_per_address_and_in_total() {
	// Before: no cap and no address validation; thousands of Initials from one socket each kept
	// a connection for the idle timeout (hundreds of MB).
	let limits = Limits {
		quic: moq_quic::Limits {
			handshakes: 256,
			handshakes_per_ip: 32,
			retry_above: 64,
			handshake_timeout: Duration::from_secs(2),
		},
		..Limits::default()
	};
	let relay = relay_limited(limits);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		healthy.still_receives().await;
		initials(&relay, "127.0.0.2".parse().unwrap(), 3000);
		let refused = relay
			.metric_until(LIMIT, "moq_relay_handshakes_refused_total", |n| n > 2000)
			.await;
		let held = relay.metric("moq_relay_handshakes").await;
		assert!(held <= 32, "{held} handshakes from one address");
		// Many addresses: past 64 in progress, each must prove its address first (Retry), and a
		// client that never answers costs nothing.
		for i in 0..16u8 {
			initials(&relay, IpAddr::from([127, 0, 1, i]), 40);
		}
		let retries = relay
			.metric_until(LIMIT, "moq_relay_handshake_retries_total", |n| n > 0)
			.await;
		let held = relay.metric("moq_relay_handshakes").await;
		assert!(held <= 64, "{held} handshakes in progress");
		println!("3,640 Initials: {refused} refused, {retries} retried, {held} held");
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		// Past the handshake timeout, every half-open handshake is gone.
		relay.metric_until(LIMIT, "moq_relay_handshakes", |n| n == 0).await;
	});
	relay.stop().unwrap();
}

#[test]
fn a_subscriber_that_never_reads_holds_a_bounded_number_of_groups() {
	// Before: every group spawned a task holding the group for as long as the subscriber did not
	// read, with no limit (1,024 streams open, then every further group waiting to open one).
	let relay = relay_with_session(|limits| limits.groups_in_flight = 16);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let stalled = raw(&relay, &endpoint, true).await;
		let (mut send, _recv) = stalled.open_bi().await.unwrap();
		send.write(subscribe_bytes(0, "bbb", "video", None)).await.unwrap();
		relay.metric_until(LIMIT, "moq_relay_subscriptions", |n| n >= 2).await;
		for _ in 0..1500 {
			healthy.still_receives().await;
		}
		let in_flight = relay.metric("moq_relay_groups_in_flight").await;
		assert!(in_flight <= 16 + 1, "{in_flight} groups in flight");
		assert!(relay.metric("moq_relay_budget_refusals_total").await > 0);
		// The groups the stalled subscriber lost have their reason in /metrics: reset at its
		// in-flight limit, or as stale; the healthy viewer lost none.
		let lost = async |reason: &str| {
			relay
				.metric(&format!("moq_relay_groups_lost_total{{reason=\"{reason}\"}}"))
				.await
		};
		let (limit, stale) = (lost("in_flight").await, lost("stale").await);
		println!("the stalled subscriber lost {limit} groups at its in-flight limit, {stale} as stale");
		// (What its connection's stream limit let through, about 1,000 groups, was sent.)
		assert!(limit + stale > 0, "{limit} + {stale} groups lost with a reason");
		for reason in ["ending", "cache", "aborted", "stopped", "refused"] {
			assert_eq!(lost(reason).await, 0, "none lost as {reason}");
		}
		let cache = relay.metric("moq_relay_cache_bytes").await;
		assert!(cache <= relay.metric("moq_relay_cache_capacity_bytes").await);
		drop((send, _recv, stalled));
		all_given_back(&relay, 1).await;
		healthy.still_receives().await;
	});
	relay.stop().unwrap();
}

#[test]
fn partial_messages_on_many_streams_are_bounded_by_the_session_budget() {
	// Before: each stream buffered its partial message or frame whole (up to 64 KiB per message,
	// 32 MiB per frame), for as many streams as the peer opened.
	let relay = relay_with_session(|limits| limits.partial_bytes = 1 << 20);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let attacker = raw(&relay, &endpoint, true).await;
		// 600 unfinished requests: 30 MB held if nothing charged it.
		let streams = unfinished_requests(&attacker, 600).await;
		let refusals = relay
			.metric_until(LIMIT, "moq_relay_budget_refusals_total", |n| n > 0)
			.await;
		let held = relay.metric("moq_relay_partial_bytes").await;
		assert!(held <= 1 << 20, "{held} partial bytes held");
		println!("30 MB of unfinished messages: {refusals} streams refused, {held} bytes held");
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		drop((streams, attacker));
		all_given_back(&relay, 1).await;
	});
	relay.stop().unwrap();
}

#[test]
fn track_names_asked_of_someone_elses_broadcast_are_bounded_and_forgotten() {
	// Before: every name asked for created a track on the publisher's broadcast, kept for the
	// broadcast's life, with an upstream request each and no limit.
	let relay = relay_with_session(|limits| limits.track_requests = 32);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let attacker = raw(&relay, &endpoint, true).await;
		let mut streams = Vec::new();
		for id in 0..500 {
			let (mut send, recv) = attacker.open_bi().await.unwrap();
			send.write(subscribe_bytes(id, "bbb", &format!("no-such-track-{id}"), None))
				.await
				.unwrap();
			streams.push((send, recv));
		}
		let peak = relay.metric("moq_relay_track_requests").await;
		assert!(peak <= 32, "{peak} track requests");
		// Every unknown name is refused upstream (NotFound) and its request ends: what is left is
		// the healthy viewer's own track. (That the names are forgotten is moq-net's
		// `track_names_asked_of_a_peers_broadcast_are_forgotten`.)
		relay.metric_until(LIMIT, "moq_relay_track_requests", |n| n == 1).await;
		relay.metric_until(LIMIT, "moq_relay_subscriptions", |n| n == 1).await;
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		drop(streams);
	});
	relay.stop().unwrap();
}

#[test]
fn one_viewer_cannot_take_every_track_request_of_a_publisher() {
	// Before: a publisher's session refused every track request past `track_requests`, whoever
	// made it, so a viewer subscribing to names the publisher is slow to answer kept every other
	// viewer from its tracks for as long as it liked. Now the budget is shared fairly among the
	// addresses asking: another address's request takes the place of the greedy one's oldest,
	// and a second connection from the greedy address buys it nothing.
	let relay = relay_with_session(|limits| limits.track_requests = 32);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let origin = Origin::new(5);
		let (broadcast, track, _publication) = local_broadcast(&origin, "slow");
		// Names it does not have wait for a handler that never answers.
		broadcast.serve_requests();
		let _publisher = publisher(&relay, &endpoint, "/", &origin).await.unwrap();
		// The attacker, from another address than the viewer's (127.0.0.1).
		let elsewhere = elsewhere();
		let attacker = raw_to(&elsewhere, relay.bound.quic, &relay.verification(), true).await;
		let mut streams = Vec::new();
		for id in 0..32 {
			let (mut send, recv) = attacker.open_bi().await.unwrap();
			send.write(subscribe_bytes(id, "slow", &format!("never-{id}"), None))
				.await
				.unwrap();
			streams.push((send, recv));
		}
		let mut unanswered = Vec::new();
		for _ in 0..32 {
			unanswered.push(broadcast.requested_track().await.unwrap());
		}
		assert_eq!(relay.metric("moq_relay_track_requests").await, 32);

		// A second connection from the attacker's address asks for one more: refused, since
		// the address holds the most already.
		let second = raw_to(&elsewhere, relay.bound.quic, &relay.verification(), true).await;
		let (mut send, mut recv) = second.open_bi().await.unwrap();
		send.write(subscribe_bytes(0, "slow", "never-more", None))
			.await
			.unwrap();
		let refused = within(LIMIT, "the second connection's answer", recv.read()).await;
		assert!(matches!(refused, Err(moq_quic::StreamError::Reset(11))), "{refused:?}");

		let viewer_origin = Origin::new(6);
		let _viewer = viewer(&relay, &endpoint, "/", &viewer_origin).await.unwrap();
		let mirrored = announced(&viewer_origin, "slow").await;
		let mut video = mirrored.subscribe_track("video", sub()).unwrap();
		within(LIMIT, "the viewer's subscription upstream", track.used()).await;
		publish(&track, 0);
		let got = within(LIMIT, "the viewer's first group", take(&mut video, 1)).await;
		assert_eq!(got, vec![(0, 0)]);
		assert_eq!(relay.metric("moq_relay_track_requests").await, 32);
		drop((streams, unanswered, send, recv, second, attacker));
		relay.metric_until(LIMIT, "moq_relay_track_requests", |n| n == 1).await;
		all_given_back(&relay, 1).await;
	});
	relay.stop().unwrap();
}

#[test]
fn a_reconnect_buys_no_fresh_burst_of_requests() {
	// Found in review: each connection had a pace of its own, so a peer that spent its burst of
	// requests reconnected for another. Now every session from one address also keeps one pace
	// they share.
	let limits = Limits {
		address_request_rate: 1,
		address_request_burst: 4,
		..Limits::default()
	};
	let relay = relay_limited(limits);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let origin = Origin::new(5);
		let (_broadcast, _track, _publication) = local_broadcast(&origin, "fat");
		let _publisher = publisher(&relay, &endpoint, "/", &origin).await.unwrap();
		let request = Bytes::from(typed(
			u64::from(ControlType::Track),
			&Track {
				broadcast: Path::new("fat"),
				track: "video".into(),
			},
		));
		let elsewhere = elsewhere();
		let ask = async |conn: &moq_quic::Connection| {
			let (mut send, mut recv) = conn.open_bi().await.unwrap();
			send.write(request.clone()).await.unwrap();
			send.finish().unwrap();
			(send, recv.read().await)
		};
		// The burst, answered at once.
		let first = raw_to(&elsewhere, relay.bound.quic, &relay.verification(), true).await;
		for _ in 0..4 {
			let (_send, answer) = ask(&first).await;
			assert!(matches!(answer, Ok(Some(_))), "{answer:?}");
		}
		assert_eq!(relay.metric("moq_relay_requests_paced_total").await, 0);
		drop(first);
		// A new connection from the same address: its first request waits its turn.
		let second = raw_to(&elsewhere, relay.bound.quic, &relay.verification(), true).await;
		let (mut send, _recv) = second.open_bi().await.unwrap();
		send.write(request.clone()).await.unwrap();
		relay
			.metric_until(LIMIT, "moq_relay_requests_paced_total", |n| n >= 1)
			.await;
		drop((send, _recv, second));
	});
	relay.stop().unwrap();
}

#[test]
fn announcements_past_a_sessions_budget_are_ignored() {
	// Before: a session could announce without limit, each announcement kept in the origin.
	let relay = relay_with_session(|limits| limits.announces = 100);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let flood = Origin::new(7);
		let producer = flood.producer();
		let _broadcasts: Vec<_> = (0..2000)
			.map(|i| producer.create_broadcast(&Path::new(&format!("flood/{i}")), Route::default()))
			.collect();
		let _flooder = publisher(&relay, &endpoint, "/", &flood).await.unwrap();
		relay
			.metric_until(LIMIT, "moq_relay_budget_refusals_total", |n| n >= 1900)
			.await;
		assert_eq!(
			relay.metric("moq_relay_announces").await,
			100 + 1,
			"the flooder's 100 and bbb"
		);
		assert_eq!(relay.metric("moq_relay_broadcasts").await, 100 + 1);
		for _ in 0..3 {
			healthy.still_receives().await;
		}
	});
	relay.stop().unwrap();
}

#[test]
fn a_setup_stream_reset_closes_with_the_relays_code_not_the_peers() {
	// Before: a peer resetting its SETUP stream with code N had its connection closed with N.
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let conn = raw(&relay, &endpoint, false).await;
		let mut setup = conn.open_uni().await.unwrap();
		setup.write(Bytes::from_static(&[0x01])).await.unwrap();
		setup.reset(4242);
		assert_eq!(close_code(&conn).await, 4, "Transport (4), the relay's own code");
	});
	relay.stop().unwrap();
}

/// `GET /health` from the local address `from`; the status line, or the error.
async fn health_from(relay: &Relay, from: IpAddr) -> std::io::Result<String> {
	let mut stream = TcpStream::connect_from(SocketAddr::new(from, 0), relay.bound.http.unwrap()).await?;
	stream
		.write_all(b"GET /health HTTP/1.1\r\nconnection: close\r\n\r\n")
		.await?;
	let mut response = Vec::new();
	let mut chunk = [0u8; 512];
	loop {
		match stream.read(&mut chunk).await? {
			0 => break,
			n => response.extend_from_slice(&chunk[..n]),
		}
	}
	Ok(String::from_utf8_lossy(&response)
		.lines()
		.next()
		.unwrap_or("")
		.to_owned())
}

#[test]
fn idle_http_clients_cannot_take_every_slot() {
	// Before: a few hundred connections that said nothing held every slot; /health stopped
	// answering and clients could not fetch the certificate's fingerprint.
	let limits = Limits {
		http_connections: 32,
		http_per_ip: 16,
		..Limits::default()
	};
	let relay = Relay::start_limited(1, limits, 64 << 20);
	runtime().block_on(async {
		let http = relay.bound.http.unwrap();
		let mut idle = Vec::new();
		for i in 0..8u8 {
			for _ in 0..40 {
				if let Ok(stream) =
					TcpStream::connect_from(SocketAddr::new(IpAddr::from([127, 0, 2, i]), 0), http).await
				{
					idle.push(stream);
				}
			}
		}
		for from in ["127.0.0.1", "127.0.3.1", "127.0.3.2"] {
			let status = within(LIMIT, "health", health_from(&relay, from.parse().unwrap())).await;
			assert_eq!(status.unwrap(), "HTTP/1.1 200 OK", "from {from}");
		}
		drop(idle);
	});
	relay.stop().unwrap();
}

#[test]
fn the_cache_never_exceeds_its_budget_however_many_tracks_a_publisher_fills() {
	// Before: every track's latest group was kept outside the pool's control, so many tracks
	// exceeded the cache budget without bound.
	let relay = Relay::start_limited(2, Limits::default(), 4 << 20);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let origin = Origin::new(5);
		let (broadcast, _publication) = origin
			.producer()
			.create_broadcast(&Path::new("big"), Route::default())
			.unwrap();
		let _publisher = publisher(&relay, &endpoint, "/", &origin).await.unwrap();
		let viewer_origin = Origin::new(6);
		let _viewer = viewer(&relay, &endpoint, "/", &viewer_origin).await.unwrap();
		let remote = announced(&viewer_origin, "big").await;
		let mut cursors = Vec::new();
		let mut tracks = Vec::new();
		for i in 0..64 {
			let name = format!("t{i}");
			let track = broadcast.create_track(&name, TrackInfo::default()).unwrap();
			cursors.push(remote.subscribe_track(&name, Subscription::default()).unwrap());
			track.used().await;
			let mut group = track.create_group(0).unwrap();
			group
				.write_frame(moq_net::model::Frame::new(
					moq_net::model::Timestamp::new(0, 1000),
					vec![0u8; 256 << 10],
				))
				.unwrap();
			group.finish().unwrap();
			tracks.push(track);
		}
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		let cache = relay.metric("moq_relay_cache_bytes").await;
		assert!(cache <= 4 << 20, "{cache} cache bytes against a budget of 4 MiB");
	});
	relay.stop().unwrap();
}

/// A raw subscriber on its own connection that grants 1 KiB per stream and 64 KiB in all, and
/// asks for `track` of broadcast `broadcast` from group 0; the returned streams keep it alive.
async fn stingy_subscriber(relay: &Relay, endpoint: &moq_quic::Endpoint) -> impl Sized {
	let mut client = moq_quic::Config::new()
		.with_client(&relay.verification(), &[moq_quic::ALPN_MOQ_LITE_05])
		.unwrap()
		.client
		.unwrap();
	client.transport_config(std::sync::Arc::new(moq_quic::windows(1024, 64 << 10)));
	let stingy = endpoint.connect_with(client, relay.bound.quic, "localhost").unwrap();
	stingy.established().await.unwrap();
	let config = session::Config {
		origin: 78,
		path: Some("/".into()),
		..session::Config::default()
	};
	session::setup(&stingy, &config).await.unwrap();
	let (mut send, recv) = stingy.open_bi().await.unwrap();
	send.write(subscribe_bytes(0, "fat", "video", Some(0))).await.unwrap();
	(send, recv, stingy)
}

/// Writes 16 groups of `frames` frames of `size` bytes each to `track`.
fn fill(track: &moq_net::model::TrackProducer, frames: usize, size: usize) {
	for seq in 0..16 {
		let mut group = track.create_group(seq).unwrap();
		for _ in 0..frames {
			group
				.write_frame(moq_net::model::Frame::new(
					moq_net::model::Timestamp::new(seq, 1000),
					vec![7; size],
				))
				.unwrap();
		}
		group.finish().unwrap();
	}
}

#[test]
fn datagrams_addressed_to_another_workers_ids_are_bounded_and_given_back() {
	// A peer can address made-up connection ids that name either worker: those that reach the
	// other worker's socket are handed over, at most limits.forward_queue bytes at a time, and
	// nothing stays held once the flood ends.
	const QUEUE: usize = 64 << 10;
	let limits = Limits {
		forward_queue: QUEUE,
		..Limits::default()
	};
	let relay = relay_limited(limits);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let flood = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
		let mut datagram = vec![0x5a; 1200];
		for i in 0..2000u32 {
			// A short header, then a destination id whose first byte names worker 0 or 1.
			datagram[0] = 0x40;
			datagram[1] = (i % 2) as u8;
			datagram[2..6].copy_from_slice(&i.to_be_bytes());
			let _ = flood.send_to(&datagram, relay.bound.quic);
		}
		let routed = relay
			.metric_until(LIMIT, "moq_relay_udp_forwarded_total", |n| n > 0)
			.await;
		let dropped = relay.metric("moq_relay_udp_forward_dropped_total").await;
		assert!(
			routed + dropped <= 1000,
			"{routed} forwarded and {dropped} dropped of 1,000"
		);
		assert_eq!(relay.metric("moq_relay_udp_forward_queue_limit").await, QUEUE as u64);
		healthy.still_receives().await;
		all_given_back(&relay, 1).await;
	});
	relay.stop().unwrap();
}

#[test]
fn a_subscriber_that_grants_no_credit_holds_at_most_the_send_buffer() {
	// Before: every group stream queued up to 256 KiB of frames, whatever credit the peer gave, so
	// a subscriber that let the relay open streams and granted them next to none made it hold 256
	// KiB per group in flight (64 per subscription, 256 subscriptions). Large frames (shared
	// with the cache, not copied) are still taken whole, one per write, so they fill the
	// connection's budget and no more.
	const BUFFER: usize = 1 << 20;
	let limits = Limits {
		send_buffer: BUFFER,
		..Limits::default()
	};
	let relay = relay_limited(limits);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let origin = Origin::new(5);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "fat");
		let _publisher = publisher(&relay, &endpoint, "/", &origin).await.unwrap();
		let stingy = stingy_subscriber(&relay, &endpoint).await;
		track.used().await;

		// 16 groups of one 256 KiB frame: 4 MiB for the subscriber's streams to queue.
		fill(&track, 1, 256 << 10);
		// The budget fills (the attack is on), and no more: the healthy pair's own queues are a
		// group of a few hundred bytes at a time.
		relay
			.metric_until(LIMIT, "moq_relay_stream_queued_bytes", |n| {
				n >= (BUFFER - (64 << 10)) as u64
			})
			.await;
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		let queued = relay
			.metric_until(LIMIT, "moq_relay_stream_queued_bytes", |n| {
				n >= (BUFFER - (64 << 10)) as u64
			})
			.await;
		assert!(queued <= (BUFFER + (16 << 10)) as u64, "{queued} bytes queued");
		assert_eq!(relay.metric("moq_relay_send_buffer_limit").await, BUFFER as u64);
		drop(stingy);
		all_given_back(&relay, 1).await;
	});
	relay.stop().unwrap();
}

#[test]
fn a_subscriber_that_grants_no_credit_makes_the_relay_prepare_a_few_kib_per_stream() {
	// Before: small frames are copied with their headers into a chunk per frame, and each group
	// stream took 256 KiB of them ahead of the peer's credit: a subscriber asking for cached
	// groups of small frames, granting none, made the relay copy and queue the whole send buffer
	// (4 MiB) for a request of some 40 bytes, and again after every unsubscribe. Now a stream
	// takes chunks only a few KiB ahead of what the peer credited.
	const GROUPS: u64 = 16;
	const UNPROVEN_QUEUE: u64 = 4 << 10;
	const CHUNK: u64 = 1024 + 16;
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let origin = Origin::new(5);
		let (_broadcast, track, _publication) = local_broadcast(&origin, "fat");
		let _publisher = publisher(&relay, &endpoint, "/", &origin).await.unwrap();
		let stingy = stingy_subscriber(&relay, &endpoint).await;
		track.used().await;

		// 16 groups of 256 frames of 1 KiB: 4 MiB of chunks for the streams to take.
		fill(&track, 256, 1024);
		// Every stream is open and has taken its first chunks (the attack is on)...
		let floor = GROUPS * (UNPROVEN_QUEUE - CHUNK);
		relay
			.metric_until(LIMIT, "moq_relay_stream_queued_bytes", |n| n >= floor)
			.await;
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		// ...and a stream holds at most a chunk past the limit.
		let queued = relay
			.metric_until(LIMIT, "moq_relay_stream_queued_bytes", |n| n >= floor)
			.await;
		assert!(queued <= GROUPS * (UNPROVEN_QUEUE + CHUNK), "{queued} bytes queued");
		drop(stingy);
		all_given_back(&relay, 1).await;
	});
	relay.stop().unwrap();
}

#[test]
fn one_address_holding_every_connection_slot_does_not_lock_out_another() {
	let relay = Relay::run(moq_relay::config::Config {
		workers: 2,
		max_connections: Some(20),
		..moq_relay::config::Config::loopback()
	});
	runtime().block_on(async {
		let greedy = endpoint(&relay);
		let mut idle = Vec::new();
		for _ in 0..20 {
			idle.push(raw(&relay, &greedy, true).await);
		}
		relay.metric_until(LIMIT, "moq_relay_sessions", |n| n == 20).await;
		// Another address: a publisher and a viewer, each taking a slot from the greedy one.
		let elsewhere = elsewhere();
		let mut healthy = within(LIMIT, "the healthy pair", Healthy::new(&relay, &elsewhere)).await;
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		assert_eq!(relay.metric("moq_relay_evicted_total").await, 2);
		relay.metric_until(LIMIT, "moq_relay_connections", |n| n <= 20).await;
		// The greedy address, at its share now, cannot take a slot back.
		let refused = quic_to(
			&greedy,
			relay.bound.quic,
			&relay.verification(),
			moq_quic::ALPN_MOQ_LITE_05,
		)
		.await;
		assert_eq!(within(LIMIT, "the refusal", close_code(&refused)).await, 30);
		healthy.still_receives().await;
		drop(idle);
	});
	relay.stop().unwrap();
}

#[test]
fn many_sessions_of_one_address_stay_under_its_share_of_the_memory_ceiling() {
	const CEILING: u64 = 64 << 20;
	let limits = Limits {
		memory: Some(CEILING),
		..Limits::default()
	};
	let relay = Relay::start_limited(2, limits, 16 << 20);
	runtime().block_on(async {
		let elsewhere = elsewhere();
		let mut healthy = Healthy::new(&relay, &elsewhere).await;
		healthy.still_receives().await;
		// 60 sessions of one address, each leaving unfinished messages on 200 streams: 8 MiB of
		// partial input each (its session's budget), 480 MiB in all, if only sessions were bounded.
		// Each session may publish, so each also grows its receive window to 4 MiB: the address
		// reaches its share within a few sessions, and its later connections are refused.
		let greedy = endpoint(&relay);
		let mut attackers = Vec::new();
		let mut refused = 0;
		for _ in 0..60 {
			let config = session::Config {
				origin: 77,
				path: Some("/".into()),
				..session::Config::default()
			};
			let client = moq_quic::Config::new()
				.with_client(&relay.verification(), &[moq_quic::ALPN_MOQ_LITE_05])
				.unwrap();
			let conn = greedy
				.connect_with(client.client.unwrap(), relay.bound.quic, "localhost")
				.unwrap();
			// Past its share, the address's new connections are refused.
			if conn.established().await.is_err() || session::setup(&conn, &config).await.is_err() {
				refused += 1;
				continue;
			}
			let streams = unfinished_requests(&conn, 200).await;
			attackers.push((conn, streams));
			let held = relay.metric("moq_relay_memory_bytes").await;
			assert!(held <= CEILING, "{held} bytes charged against a ceiling of {CEILING}");
		}
		// Two addresses hold shares (the healthy pair's, the attacker's): half the ceiling each, at
		// most (scraping /metrics from a third makes the shares smaller, never larger).
		let share = CEILING / 2;
		let partial = relay.metric("moq_relay_partial_bytes").await;
		println!("60 sessions tried, {refused} refused: {partial} bytes held in part, an address's share {share}");
		assert!(
			partial <= share,
			"{partial} bytes of partial input, past the share {share}"
		);
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		drop(attackers);
		all_given_back(&relay, 1).await;
		healthy.still_receives().await;
	});
	relay.stop().unwrap();
}

#[test]
fn slow_readers_of_the_page_script_from_many_addresses_leave_health_answering() {
	// Sixteen addresses, sixteen connections each (each address's cap, the table's 256 in all),
	// each asking for the page's script twenty times over and reading none of it.
	let relay = Relay::start(1);
	runtime().block_on(async {
		let http = relay.bound.http.unwrap();
		let mut slow = Vec::new();
		for address in 0..16u8 {
			for _ in 0..16 {
				let from = SocketAddr::new(IpAddr::from([127, 0, 4, address]), 0);
				if let Ok(mut stream) = TcpStream::connect_from(from, http).await {
					let requests = b"GET /app.js HTTP/1.1\r\nhost: relay\r\n\r\n".repeat(20);
					if stream.write_all(&requests).await.is_ok() {
						slow.push(stream);
					}
				}
			}
		}
		assert!(slow.len() >= 250, "{} slow readers", slow.len());
		// Every slot is taken by a connection busy writing a response nobody reads.
		for from in [
			"127.0.5.1",
			"127.0.5.2",
			"127.0.5.3",
			"127.0.5.4",
			"127.0.5.5",
			"127.0.5.6",
		] {
			let status = within(LIMIT, "health", health_from(&relay, from.parse().unwrap())).await;
			assert_eq!(status.unwrap(), "HTTP/1.1 200 OK", "from {from}");
		}
		drop(slow);
	});
	relay.stop().unwrap();
}

#[test]
fn another_identity_cannot_take_a_live_path() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		healthy.still_receives().await;
		// Another address announces the same path: refused, the viewers never hear of it.
		let intruder_origin = Origin::new(3);
		let (_b, _t, _p) = local_broadcast(&intruder_origin, "bbb");
		let elsewhere = elsewhere();
		let _intruder = publisher(&relay, &elsewhere, "/", &intruder_origin).await.unwrap();
		relay.metric_until(LIMIT, "moq_relay_sessions", |n| n == 3).await;
		for _ in 0..3 {
			healthy.still_receives().await;
		}
		assert_eq!(
			relay.metric("moq_relay_broadcast_backups").await,
			0,
			"not even as a backup"
		);
		assert_eq!(relay.metric("moq_relay_broadcasts").await, 1);
	});
	relay.stop().unwrap();
}

#[test]
fn a_reconnecting_publishers_viewers_keep_their_subscriptions() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let first_origin = Origin::new(1);
		let (_first_broadcast, first_track, _first_publication) = local_broadcast(&first_origin, "bbb");
		let first = publisher(&relay, &endpoint, "/", &first_origin).await.unwrap();
		let viewer_origin = Origin::new(2);
		let _viewer = viewer(&relay, &elsewhere(), "/", &viewer_origin).await.unwrap();
		let mut cursor = announced(&viewer_origin, "bbb")
			.await
			.subscribe_track("video", sub())
			.unwrap();
		first_track.used().await;
		for seq in 0..3 {
			publish(&first_track, seq);
			assert_eq!(within(LIMIT, "a group", take(&mut cursor, 1)).await, vec![(seq, seq)]);
		}
		// The publisher's connection is lost (no goodbye), and it comes back from the same address
		// with the same broadcast, numbering on.
		first.connection().close(4, "lost");
		drop(first);
		let second_origin = Origin::new(1);
		let (_second_broadcast, second_track, _second_publication) = local_broadcast(&second_origin, "bbb");
		let again = client_endpoint(relay.bound.quic);
		let _second = publisher(&relay, &again, "/", &second_origin).await.unwrap();
		within(
			LIMIT,
			"the viewer's demand reaches the new publisher",
			second_track.used(),
		)
		.await;
		// The same subscription, on the same cursor, carries on.
		for seq in 3..6 {
			publish(&second_track, seq);
			assert_eq!(within(LIMIT, "a group", take(&mut cursor, 1)).await, vec![(seq, seq)]);
		}
	});
	relay.stop().unwrap();
}
