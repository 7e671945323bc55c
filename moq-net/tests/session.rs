//! Sessions over the in-memory transport: a publisher client, a relay, subscriber clients.
//!
//! The relay is an [`Origin`] with one session per connection: its publisher half serves the
//! origin to the peer, its subscriber half takes the peer's broadcasts into it. Clients are
//! sessions with their own local origins. Every wait is on the model or the transport; the
//! nextest timeout turns a lost wake into a failure.

use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use moq_net::coding::Encode;
use moq_net::lite::session::{self, Config, Session};
use moq_net::lite::{ControlType, DataType, FrameHeader, GroupHeader, Setup, Subscribe, Track};
use moq_net::model::{Origin, TrackConsumer};
use moq_net::test_support::{self, announced, frame, publish, take, typed};
use moq_net::transport::memory::{self, Memory};
use moq_net::transport::{RecvStream, RecvStreamExt, SendStream, SendStreamExt, Transport, TransportExt};
use moq_net::{BroadcastProducer, Path, Subscription, TrackProducer};

const RELAY_ID: u64 = 100;

/// Connects a client to the relay origin; returns (client session, relay-side session).
async fn connect(
	relay: &Origin,
	client: Config,
	publish: Option<&Origin>,
	subscribe: Option<&Origin>,
) -> (Session<Memory>, Session<Memory>) {
	connect_limited(relay, client, publish, subscribe, session::Limits::default()).await
}

/// [`connect`], with the relay's side of the session under `limits`.
async fn connect_limited(
	relay: &Origin,
	client: Config,
	publish: Option<&Origin>,
	subscribe: Option<&Origin>,
	limits: session::Limits,
) -> (Session<Memory>, Session<Memory>) {
	let (client_end, relay_end) = memory::pair();
	let relay_config = Config {
		origin: RELAY_ID,
		..Config::default()
	};
	let relay_end2 = relay_end.clone();
	let accept = kio::spawn(async move { session::setup(&relay_end2, &relay_config).await });
	let peer = session::setup(&client_end, &client).await.expect("client setup");
	let relay_peer = accept.await.unwrap().expect("relay setup");
	assert_eq!(peer.origin, RELAY_ID, "the relay sent its own SETUP");
	// The connection path roots the session.
	let path = relay_peer.path.as_deref().unwrap_or("");
	let root = Path::new(path.split('?').next().unwrap_or(""));
	let relay_side = session::start(
		relay_end,
		Config {
			origin: RELAY_ID,
			limits,
			..Config::default()
		},
		relay_peer,
		Some(relay.consumer().with_root(&root)),
		Some(relay.producer().with_root(&root)),
	);
	let client_side = session::start(
		client_end,
		client,
		peer,
		publish.map(|origin| origin.consumer()),
		subscribe.map(|origin| origin.producer()),
	);
	(client_side, relay_side)
}

fn client(origin: u64, path: &str) -> Config {
	Config {
		origin,
		path: Some(path.to_owned()),
		role: None,
		..Config::default()
	}
}

/// A publisher client's local broadcast `name` with one track "video".
fn local_broadcast(origin: &Origin, name: &str) -> (BroadcastProducer, TrackProducer, moq_net::model::Publication) {
	test_support::local_broadcast(origin, name, test_support::video(Duration::from_secs(7), 3))
}

/// A relay origin, a publisher client with broadcast `name` (one track "video") and a viewer
/// client mirroring the relay's announcements, both connected at `path`: the set-up most tests
/// here start from. The sessions live as long as it does.
struct Through {
	relay: Origin,
	_publisher: Origin,
	viewer: Origin,
	broadcast: BroadcastProducer,
	track: TrackProducer,
	_publication: moq_net::model::Publication,
	/// The publisher's client session and the relay's side of it.
	publishing: Option<(Session<Memory>, Session<Memory>)>,
	_watching: (Session<Memory>, Session<Memory>),
}

impl Through {
	async fn new(name: &str, path: &str) -> Self {
		let relay = Origin::new(RELAY_ID);
		let publisher = Origin::new(1);
		let (broadcast, track, publication) = local_broadcast(&publisher, name);
		let publishing = connect(&relay, client(1, path), Some(&publisher), None).await;
		let viewer = Origin::new(2);
		let watching = connect(&relay, client(2, path), None, Some(&viewer)).await;
		Self {
			relay,
			_publisher: publisher,
			viewer,
			broadcast,
			track,
			_publication: publication,
			publishing: Some(publishing),
			_watching: watching,
		}
	}

	/// The viewer's subscription to the broadcast's "video", once announced.
	async fn subscribe(&self, name: &str, subscription: Subscription) -> TrackConsumer {
		announced(&self.viewer, name)
			.await
			.subscribe_track("video", subscription)
			.unwrap()
	}
}

fn sub(priority: u8) -> Subscription {
	Subscription {
		priority,
		..Subscription::default()
	}
}

#[test]
fn publish_then_subscribe_through_a_relay() {
	kio::block_on(async {
		let through = Through::new("bbb", "/live").await;
		let viewer = &through.viewer;
		let track = through.track.clone();

		// Announced through the relay, under the connection path's root.
		let broadcast = announced(viewer, "bbb").await;
		let mut cursor = broadcast.subscribe_track("video", sub(1)).unwrap();
		// TRACK_INFO came from the publisher, through the relay.
		let info = cursor.info_known().await.unwrap();
		assert_eq!(
			(info.timescale, info.latency_max, info.priority, info.ordered),
			(1000, Duration::from_secs(7), 3, true)
		);

		// Demand reached the publisher.
		track.used().await;
		for seq in 0..5 {
			publish(&track, seq);
		}
		assert_eq!(take(&mut cursor, 5).await, (0..5).map(|s| (s, s)).collect::<Vec<_>>());
		// Frames keep their timestamps across both hops.
		publish(&track, 5);
		let mut group = cursor.recv_group().await.unwrap().unwrap();
		assert_eq!(group.read_frame().await.unwrap().unwrap(), frame(5));

		// SUBSCRIBE_END and FIN at finish: the viewer's cursor completes.
		track.finish().unwrap();
		assert!(cursor.recv_group().await.unwrap().is_none());
		assert_eq!(cursor.finished().await, Ok(6));
	});
}

/// Frames on either side of the size up to which a frame travels in one chunk with its header
/// (1,200 bytes), empty ones included, arrive whole, in order and with their timestamps, through
/// two hops.
#[test]
fn frames_of_every_size_arrive_whole_through_a_relay() {
	kio::block_on(async {
		let through = Through::new("sizes", "/live").await;
		let viewer = &through.viewer;
		let track = through.track.clone();

		let mut cursor = announced(viewer, "sizes")
			.await
			.subscribe_track("video", sub(1))
			.unwrap();
		track.used().await;
		let sizes = [0usize, 1, 1199, 1200, 1201, 5000, 0, 300];
		let payload = |i: usize, size: usize| -> Vec<u8> { (0..size).map(|b| (b * 7 + i) as u8).collect() };
		let frames: Vec<moq_net::model::Frame> = sizes
			.iter()
			.enumerate()
			.map(|(i, &size)| {
				moq_net::model::Frame::new(moq_net::model::Timestamp::new(i as u64 * 20, 1000), payload(i, size))
			})
			.collect();
		// All in one group, then each alone in a group of its own.
		let mut group = track.create_group(0).unwrap();
		for frame in &frames {
			group.write_frame(frame.clone()).unwrap();
		}
		group.finish().unwrap();
		for (i, frame) in frames.iter().enumerate() {
			let mut group = track.create_group(1 + i as u64).unwrap();
			group.write_frame(frame.clone()).unwrap();
			group.finish().unwrap();
		}
		let mut group = cursor.recv_group().await.unwrap().unwrap();
		for frame in &frames {
			assert_eq!(&group.read_frame().await.unwrap().unwrap(), frame);
		}
		assert!(group.read_frame().await.unwrap().is_none());
		for frame in &frames {
			let mut group = cursor.recv_group().await.unwrap().unwrap();
			assert_eq!(&group.read_frame().await.unwrap().unwrap(), frame);
		}
	});
}

#[test]
fn the_connection_path_roots_the_session() {
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let publisher = Origin::new(1);
		let (_b, _t, _p) = local_broadcast(&publisher, "cam");
		let (_c, _r) = connect(&relay, client(1, "/room/alice?jwt=x"), Some(&publisher), None).await;
		let consumer = relay.consumer();
		let mut cursor = consumer.announced(&Path::default());
		let update = cursor.next().await;
		assert_eq!(
			update.path,
			Path::new("room/alice/cam"),
			"the query is not part of the root"
		);
	});
}

#[test]
fn a_subscriber_joining_mid_stream_starts_at_the_latest_group() {
	kio::block_on(async {
		let through = Through::new("bbb", "").await;
		let track = &through.track;
		let mut first = through.subscribe("bbb", sub(1)).await;
		track.used().await;
		for seq in 0..4 {
			publish(track, seq);
		}
		assert_eq!(take(&mut first, 4).await.len(), 4);

		let late = Origin::new(3);
		let (_lc, _lr) = connect(&through.relay, client(3, ""), None, Some(&late)).await;
		let mut second = announced(&late, "bbb").await.subscribe_track("video", sub(1)).unwrap();
		// The relay already holds 0..=3: the late viewer starts at 3, the latest.
		let got = take(&mut second, 1).await;
		assert_eq!(got, vec![(3, 3)]);
		publish(track, 4);
		assert_eq!(take(&mut second, 1).await, vec![(4, 4)]);
		assert_eq!(take(&mut first, 1).await, vec![(4, 4)]);
	});
}

#[test]
fn downstream_demand_aggregates_into_one_upstream_subscription_and_cancels() {
	kio::block_on(async {
		let through = Through::new("bbb", "").await;
		let track = &through.track;
		let b = Origin::new(3);
		let (_bc, _br) = connect(&through.relay, client(3, ""), None, Some(&b)).await;
		let mut seen = 0;
		let low = through.subscribe("bbb", sub(1)).await;
		let demand = track.subscription_changed(&mut seen).await.unwrap();
		assert_eq!(demand.priority, 1);
		let high = announced(&b, "bbb").await.subscribe_track("video", sub(5)).unwrap();
		// One upstream subscription carrying the maximum: a SUBSCRIBE_UPDATE, not a second one.
		loop {
			if track
				.subscription_changed(&mut seen)
				.await
				.is_some_and(|d| d.priority == 5)
			{
				break;
			}
		}
		drop(high);
		loop {
			if track
				.subscription_changed(&mut seen)
				.await
				.is_some_and(|d| d.priority == 1)
			{
				break;
			}
		}
		drop(low);
		// The last downstream subscriber left: the relay FINs its upstream subscription.
		track.unused().await;
		assert_eq!(track.subscription(), None);
	});
}

#[test]
fn a_viewer_after_a_pause_gets_the_publishers_fresh_numbering_not_the_stale_cache() {
	// The public JavaScript publisher serves each subscription from a track of its own, numbered
	// from 0: a relay that kept a track's cache after its last subscriber left would serve a
	// viewer who came back the stale group 0 (a page's empty first catalog, say) and refuse the
	// fresh group 0 as a duplicate.
	kio::block_on(async {
		let through = Through::new("bbb", "").await;
		let viewer = &through.viewer;
		let broadcast = &through.broadcast;
		let track = through.track.clone();

		let mirrored = announced(viewer, "bbb").await;

		let mut first = mirrored.subscribe_track("video", sub(1)).unwrap();
		track.used().await;
		publish(&track, 0);
		publish(&track, 1);
		assert_eq!(take(&mut first, 2).await, vec![(0, 0), (1, 1)]);
		drop(first);
		// The relay cancelled its upstream subscription; the publisher numbers the next one
		// afresh, from a new track.
		track.unused().await;
		broadcast.remove_track(&track);
		let fresh = broadcast.create_track("video", track.info()).unwrap();

		let mut second = mirrored.subscribe_track("video", sub(1)).unwrap();
		fresh.used().await;
		let mut group = fresh.create_group(0).unwrap();
		group.write_frame(frame(7)).unwrap();
		group.finish().unwrap();
		assert_eq!(
			take(&mut second, 1).await,
			vec![(0, 7)],
			"the fresh group, not the stale one"
		);
		publish(&fresh, 1);
		assert_eq!(take(&mut second, 1).await, vec![(1, 1)]);
	});
}

#[test]
fn a_broadcast_is_never_reflected_back_to_the_peer_it_came_from() {
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		// A bidirectional client: publishes "bbb", and takes what the relay announces.
		let local = Origin::new(1);
		let (_b, _t, _p) = local_broadcast(&local, "bbb");
		let (_c, _r) = connect(&relay, client(1, ""), Some(&local), Some(&local)).await;
		let other = Origin::new(2);
		let (_b2, _t2, _p2) = local_broadcast(&other, "ccc");
		let (_c2, _r2) = connect(&relay, client(2, ""), Some(&other), None).await;
		// The client sees "ccc" come back from the relay, never its own "bbb".
		let ccc = announced(&local, "ccc").await;
		assert!(!ccc.is_closed());
		let mut cursor = local.consumer().announced(&Path::default());
		let mut paths = Vec::new();
		while let Some(update) = cursor.try_next() {
			paths.push((update.path.to_string(), update.route.hops));
		}
		assert_eq!(
			paths,
			vec![("bbb".to_owned(), vec![]), ("ccc".to_owned(), vec![2, RELAY_ID])]
		);
	});
}

#[test]
fn a_publisher_that_disconnects_ends_its_broadcast_for_subscribers() {
	kio::block_on(async {
		let mut through = Through::new("bbb", "").await;
		let viewer = &through.viewer;
		let track = through.track.clone();
		let (p_client, p_relay) = through.publishing.take().unwrap();

		let broadcast = announced(viewer, "bbb").await;
		let mut cursor = broadcast.subscribe_track("video", sub(1)).unwrap();
		track.used().await;
		publish(&track, 0);
		assert_eq!(take(&mut cursor, 1).await, vec![(0, 0)]);
		drop(p_client);
		drop(p_relay);
		assert!(cursor.recv_group().await.is_err(), "the track ended with an error");
		let mut updates = viewer.consumer().announced(&Path::default());
		// The viewer's mirror of "bbb" went away (it may have been seen and then unannounced).
		let mut present = false;
		while let Some(update) = updates.try_next() {
			present = update.broadcast.is_some();
		}
		if present {
			let update = updates.next().await;
			assert!(update.broadcast.is_none());
		}
	});
}

/// A raw peer: sends our own bytes to the relay after a valid SETUP exchange.
async fn raw_peer(relay: &Origin) -> (Memory, Session<Memory>) {
	raw_peer_limited(relay, session::Limits::default()).await
}

/// [`raw_peer`], with the relay's side of the session under `limits`.
async fn raw_peer_limited(relay: &Origin, limits: session::Limits) -> (Memory, Session<Memory>) {
	let (raw, relay_end) = memory::pair();
	let relay_config = Config {
		origin: RELAY_ID,
		..Config::default()
	};
	let relay_end2 = relay_end.clone();
	let accept = kio::spawn(async move { session::setup(&relay_end2, &relay_config).await });
	let mut setup = raw.open_uni().await.unwrap();
	let mut bytes = Vec::new();
	u64::from(DataType::Setup).encode(&mut bytes);
	Setup::new().with_origin(77).encode(&mut bytes);
	setup.write(Bytes::from(bytes)).await.unwrap();
	setup.finish().unwrap();
	let peer = accept.await.unwrap().unwrap();
	let relay_side = session::start(
		relay_end,
		Config {
			origin: RELAY_ID,
			limits,
			..Config::default()
		},
		peer,
		Some(relay.consumer()),
		Some(relay.producer()),
	);
	(raw, relay_side)
}

/// A healthy viewer of "bbb" through the relay, to prove bad input elsewhere leaves it alone.
struct Healthy {
	track: TrackProducer,
	cursor: TrackConsumer,
	next: u64,
	_keep: Vec<Box<dyn std::any::Any>>,
}

impl Healthy {
	async fn new(relay: &Origin) -> Self {
		let publisher = Origin::new(1);
		let (b, track, p) = local_broadcast(&publisher, "bbb");
		let (pc, pr) = connect(relay, client(1, ""), Some(&publisher), None).await;
		let viewer = Origin::new(2);
		let (vc, vr) = connect(relay, client(2, ""), None, Some(&viewer)).await;
		let cursor = announced(&viewer, "bbb")
			.await
			.subscribe_track("video", sub(1))
			.unwrap();
		track.used().await;
		let keep: Vec<Box<dyn std::any::Any>> = vec![
			Box::new(b),
			Box::new(p),
			Box::new(pc),
			Box::new(pr),
			Box::new(vc),
			Box::new(vr),
			Box::new(publisher),
			Box::new(viewer),
		];
		Self {
			track,
			cursor,
			next: 0,
			_keep: keep,
		}
	}

	/// One more group end to end.
	async fn still_receives(&mut self) {
		publish(&self.track, self.next);
		assert_eq!(take(&mut self.cursor, 1).await, vec![(self.next, self.next)]);
		self.next += 1;
	}
}

async fn send_bi(raw: &Memory, bytes: Vec<u8>, fin: bool) -> (memory::MemorySend, memory::MemoryRecv) {
	let (mut send, recv) = raw.open_bi().await.unwrap();
	send.write(Bytes::from(bytes)).await.unwrap();
	if fin {
		send.finish().unwrap();
	}
	(send, recv)
}

/// Runs one bad-input case: the raw connection must close with `code`, and the healthy viewer
/// must keep receiving before and after.
async fn bad_input(case: impl AsyncFnOnce(&Memory), code: u64) {
	let relay = Origin::new(RELAY_ID);
	let mut healthy = Healthy::new(&relay).await;
	healthy.still_receives().await;
	let (raw, _relay_side) = raw_peer(&relay).await;
	case(&raw).await;
	assert_eq!(raw.closed().await, code);
	healthy.still_receives().await;
	healthy.still_receives().await;
}

#[test]
fn a_malformed_message_closes_only_the_offender() {
	kio::block_on(bad_input(
		async |raw| {
			// SUBSCRIBE whose declared length runs past its fields: Long, Decode (5).
			let mut bytes = Vec::new();
			u64::from(ControlType::Subscribe).encode(&mut bytes);
			bytes.extend_from_slice(&[0x03, 0x00, 0x00, 0x00]);
			let _keep = send_bi(raw, bytes, false).await;
			std::mem::forget(_keep);
		},
		5,
	));
}

#[test]
fn an_over_long_path_closes_only_the_offender() {
	kio::block_on(bad_input(
		async |raw| {
			// 40 segments: BoundsExceeded (11).
			let mut body = Vec::new();
			let path = vec!["a"; 40].join("/");
			path.as_str().encode(&mut body);
			"video".encode(&mut body);
			let mut bytes = Vec::new();
			u64::from(ControlType::Track).encode(&mut bytes);
			(body.len() as u64).encode(&mut bytes);
			bytes.extend_from_slice(&body);
			std::mem::forget(send_bi(raw, bytes, false).await);
		},
		11,
	));
}

#[test]
fn a_premature_fin_closes_only_the_offender() {
	kio::block_on(bad_input(
		async |raw| {
			// Half a TRACK, then FIN: the stream ended inside a message, Decode (5).
			let bytes = typed(
				u64::from(ControlType::Track),
				&Track {
					broadcast: Path::new("bbb"),
					track: "video".into(),
				},
			);
			std::mem::forget(send_bi(raw, bytes[..4].to_vec(), true).await);
		},
		5,
	));
}

#[test]
fn an_unknown_subscribe_id_closes_only_the_offender() {
	kio::block_on(bad_input(
		async |raw| {
			let mut send = raw.open_uni().await.unwrap();
			let bytes = typed(
				u64::from(DataType::Group),
				&GroupHeader {
					subscribe_id: 999,
					sequence: 0,
				},
			);
			send.write(Bytes::from(bytes)).await.unwrap();
			std::mem::forget(send);
		},
		15,
	));
}

#[test]
fn an_oversized_frame_closes_only_the_offender() {
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let mut healthy = Healthy::new(&relay).await;
		// A publisher that answers a real subscription with a frame over the cap.
		let publisher = Origin::new(5);
		let (_b, track, _p) = local_broadcast(&publisher, "evil");
		let (evil, relay_end) = memory::pair();
		let relay_config = Config {
			origin: RELAY_ID,
			..Config::default()
		};
		let relay_end2 = relay_end.clone();
		let accept = kio::spawn(async move { session::setup(&relay_end2, &relay_config).await });
		let peer = session::setup(&evil, &client(5, "")).await.unwrap();
		let relay_peer = accept.await.unwrap().unwrap();
		let _relay_side = session::start(
			relay_end,
			Config {
				origin: RELAY_ID,
				..Config::default()
			},
			relay_peer,
			Some(relay.consumer()),
			Some(relay.producer()),
		);
		let _evil_session = session::start(evil.clone(), client(5, ""), peer, Some(publisher.consumer()), None);
		let viewer = Origin::new(6);
		let (_vc, _vr) = connect(&relay, client(6, ""), None, Some(&viewer)).await;
		let _cursor = announced(&viewer, "evil")
			.await
			.subscribe_track("video", sub(1))
			.unwrap();
		track.used().await;
		// Forge the group stream by hand (the model itself would refuse such a frame).
		let mut send = evil.open_uni().await.unwrap();
		send.write(Bytes::from(test_support::oversized_group(0))).await.unwrap();
		assert_eq!(evil.closed().await, 27);
		healthy.still_receives().await;
	});
}

#[test]
fn an_unknown_stream_type_resets_only_that_stream() {
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let mut healthy = Healthy::new(&relay).await;
		let (raw, _relay_side) = raw_peer(&relay).await;
		let (_send, mut recv) = send_bi(&raw, vec![0x2a], false).await;
		let reset = kio::wait(|w| recv.poll_read(w)).await;
		assert_eq!(reset, Err(moq_net::transport::TransportError::Reset(10)));
		// The session is still open: a valid TRACK on it is answered.
		let (_send, mut recv) = send_bi(
			&raw,
			typed(
				u64::from(ControlType::Track),
				&Track {
					broadcast: Path::new("bbb"),
					track: "video".into(),
				},
			),
			true,
		)
		.await;
		let info = kio::wait(|w| recv.poll_read(w)).await.unwrap().unwrap();
		assert_eq!(info[0] as usize, info.len() - 1, "a TRACK_INFO message");
		healthy.still_receives().await;
	});
}

#[test]
fn an_invalid_setup_closes_the_connection() {
	kio::block_on(async {
		let (raw, relay_end) = memory::pair();
		let accept = kio::spawn(async move { session::setup(&relay_end, &Config::default()).await });
		let mut setup = raw.open_uni().await.unwrap();
		// SETUP with a duplicate parameter: Decode (5).
		setup
			.write(Bytes::from_static(test_support::DUPLICATE_PARAMETER_SETUP))
			.await
			.unwrap();
		setup.finish().unwrap();
		assert!(accept.await.unwrap().is_err());
		assert_eq!(raw.closed().await, 5);
	});
}

#[test]
fn a_duplicate_subscribe_id_closes_only_the_offender() {
	kio::block_on(bad_input(
		async |raw| {
			let subscribe = test_support::subscribe(4, "bbb", "video");
			let bytes = typed(u64::from(ControlType::Subscribe), &subscribe);
			std::mem::forget(send_bi(raw, bytes.clone(), false).await);
			std::mem::forget(send_bi(raw, bytes, false).await);
		},
		12,
	));
}

#[test]
fn sessions_on_different_workers_share_one_origin() {
	let rt = kio::Builder::new().workers(2).pin(false).build().unwrap();
	let relay = Origin::new(RELAY_ID);
	let publisher_relay = relay.clone();
	let done = kio::sync::Queue::<()>::bounded(1);
	let viewer_done = done.clone();
	// The publisher and its relay-side session live on worker 1; the viewer on worker 0.
	let remote = rt.spawn_on(1, move || async move {
		let publisher = Origin::new(1);
		let (_b, track, _p) = local_broadcast(&publisher, "bbb");
		let (_pc, _pr) = connect(&publisher_relay, client(1, ""), Some(&publisher), None).await;
		track.used().await;
		for seq in 0..20 {
			publish(&track, seq);
			kio::yield_now().await;
		}
		track.finish().unwrap();
		// Stay connected until the viewer has read the end.
		done.pop().await;
	});
	let got = rt.block_on(async {
		let viewer = Origin::new(2);
		let (_vc, _vr) = connect(&relay, client(2, ""), None, Some(&viewer)).await;
		let mut cursor = announced(&viewer, "bbb")
			.await
			.subscribe_track("video", sub(1))
			.unwrap();
		let mut got = Vec::new();
		while let Some(mut group) = cursor.recv_group().await.unwrap() {
			let frame = group.read_frame().await.unwrap().unwrap();
			got.push((group.sequence(), frame.timestamp.value));
		}
		drop(cursor);
		viewer_done.try_push(()).unwrap();
		remote.await.unwrap();
		got
	});
	assert!(!got.is_empty());
	assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "in order: {got:?}");
	assert_eq!(got.last().map(|g| g.0), Some(19));
}

#[test]
fn fetch_serves_a_cached_group_and_resets_an_unknown_one() {
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let (_b, track, _p) = local_broadcast(&relay, "bbb");
		for seq in 0..3 {
			publish(&track, seq);
		}
		let (raw, _relay_side) = raw_peer(&relay).await;
		let fetch = |group| moq_net::lite::Fetch {
			broadcast: Path::new("bbb"),
			track: "video".into(),
			priority: 0,
			group,
		};
		let (_send, mut recv) = send_bi(&raw, typed(u64::from(ControlType::Fetch), &fetch(1)), true).await;
		let mut bytes = Vec::new();
		while let Some(chunk) = kio::wait(|w| recv.poll_read(w)).await.unwrap() {
			bytes.extend_from_slice(&chunk);
		}
		// One frame, its timestamp from a zero baseline: 33 ms at timescale 1000, then 8 bytes.
		let mut expected = Vec::new();
		FrameHeader {
			timestamp_delta: 33,
			size: 8,
		}
		.encode(&mut expected);
		expected.extend_from_slice(&1u64.to_le_bytes());
		assert_eq!(bytes, expected);
		let (_send, mut recv) = send_bi(&raw, typed(u64::from(ControlType::Fetch), &fetch(9)), true).await;
		assert_eq!(
			kio::wait(|w| recv.poll_read(w)).await,
			Err(moq_net::transport::TransportError::Reset(13))
		);
	});
}

#[test]
fn track_names_asked_of_a_peers_broadcast_are_forgotten() {
	// Before: every name asked for stayed recorded on the mirrored broadcast for its life, so a
	// peer asking for a million names made the relay keep a million tracks.
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let publisher_origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "bbb");
		let (_publisher, _relay_side) = connect(&relay, client(1, "/"), Some(&publisher_origin), None).await;
		let mirrored = announced(&relay, "bbb").await;
		let mut video = mirrored.subscribe_track("video", Subscription::default()).unwrap();
		for i in 0..200 {
			let mut unknown = mirrored.track(&format!("no-such-track-{i}")).unwrap();
			assert!(unknown.recv_group().await.is_err(), "refused upstream");
		}
		// Each refused track is forgotten once its request ends.
		while mirrored.tracks() > 1 {
			kio::yield_now().await;
		}
		track.used().await;
		publish(&track, 0);
		assert_eq!(take(&mut video, 1).await, vec![(0, 0)]);
	});
}

/// A publisher session on the relay whose broadcasts "bbb" and "ccc" each have a track "video"
/// and leave every other name unanswered (a handler that never answers), with `track_requests`.
struct SlowPublisher {
	relay: Origin,
	video: [TrackProducer; 2],
	unanswered: Vec<TrackProducer>,
	broadcasts: [BroadcastProducer; 2],
	_keep: Vec<Box<dyn std::any::Any>>,
}

impl SlowPublisher {
	async fn new(track_requests: usize) -> Self {
		let relay = Origin::new(RELAY_ID);
		let publisher_origin = Origin::new(1);
		let (bbb, bbb_video, bbb_publication) = local_broadcast(&publisher_origin, "bbb");
		let (ccc, ccc_video, ccc_publication) = local_broadcast(&publisher_origin, "ccc");
		bbb.serve_requests();
		ccc.serve_requests();
		let limits = session::Limits {
			track_requests,
			..session::Limits::default()
		};
		let (publisher, relay_side) =
			connect_limited(&relay, client(1, "/"), Some(&publisher_origin), None, limits).await;
		announced(&relay, "bbb").await;
		announced(&relay, "ccc").await;
		Self {
			relay,
			video: [bbb_video, ccc_video],
			unanswered: Vec::new(),
			broadcasts: [bbb, ccc],
			_keep: vec![
				Box::new(publisher),
				Box::new(relay_side),
				Box::new(bbb_publication),
				Box::new(ccc_publication),
				Box::new(publisher_origin),
			],
		}
	}

	/// The relay's broadcast `name`, asking as `requester` (`None`: as the application).
	fn asking_as(&self, requester: Option<u64>, name: &str) -> moq_net::model::BroadcastConsumer {
		let consumer = self.relay.consumer();
		let consumer = match requester {
			Some(id) => consumer.requesting_as(id),
			None => consumer,
		};
		consumer.broadcast(&Path::new(name)).unwrap()
	}

	/// Waits until the publisher has heard `count` more names it will never answer, on "bbb".
	async fn heard(&mut self, count: usize) {
		for _ in 0..count {
			self.unanswered
				.push(self.broadcasts[0].requested_track().await.unwrap());
		}
	}

	/// Waits until `cursor`'s track is refused (true), or the publisher hears another name on
	/// either broadcast, which means it was not (false).
	async fn refused(&mut self, cursor: &TrackConsumer) -> bool {
		let broadcasts = &self.broadcasts;
		let heard = kio::wait(|waiter| {
			if let Poll::Ready(refused) = given_up(cursor, waiter) {
				return Poll::Ready(Err(refused));
			}
			for broadcast in broadcasts {
				if let Poll::Ready(track) = broadcast.poll_requested_track(waiter) {
					return Poll::Ready(Ok(track));
				}
			}
			Poll::Pending
		})
		.await;
		match heard {
			Err(refused) => refused,
			Ok(track) => {
				self.unanswered.extend(track);
				false
			}
		}
	}
}

/// Ready with whether `cursor`'s track was given up (BoundsExceeded) or got its info; pending
/// otherwise.
fn given_up(cursor: &TrackConsumer, waiter: &kio::Waiter) -> Poll<bool> {
	cursor
		.poll_info_known(waiter)
		.map(|info| info == Err(moq_net::model::Error::BoundsExceeded))
}

/// Asserts `cursor`'s track still waits for its info: neither answered nor given up.
fn still_asked(cursor: &TrackConsumer) {
	let waiter = kio::Waiter::new(std::task::Waker::noop().clone());
	assert!(
		cursor.poll_info_known(&waiter).is_pending(),
		"{} was given up",
		cursor.name()
	);
}

/// Asserts `cursor`'s track was given up already (the request that took its place was served
/// after it was, so by then it has been).
fn was_given_up(cursor: &TrackConsumer) {
	let waiter = kio::Waiter::new(std::task::Waker::noop().clone());
	assert_eq!(
		given_up(cursor, &waiter),
		Poll::Ready(true),
		"{} was not given up",
		cursor.name()
	);
}

#[test]
fn names_whose_subscribers_left_give_way_to_a_new_request() {
	// Before: once a publisher's session had `track_requests` tracks asked of it, every further
	// request was refused, whoever made it: names viewers subscribed to and left kept every other
	// viewer from the publisher's real tracks for as long as they lingered.
	kio::block_on(async {
		let mut slow = SlowPublisher::new(4).await;
		let bbb = slow.asking_as(None, "bbb");
		let mut gone: Vec<TrackConsumer> = (0..4)
			.map(|i| bbb.subscribe_track(&format!("slow-{i}"), sub(0)).unwrap())
			.collect();
		slow.heard(4).await;
		// The subscribers of the first two leave (their cursors stay, to see what becomes of
		// them); the other two stay subscribed.
		let kept = gone.split_off(2);
		for cursor in &mut gone {
			cursor.unsubscribe();
		}
		// A subscription to the real track takes the place of the oldest that nobody watches.
		let mut video = bbb.subscribe_track("video", sub(0)).unwrap();
		assert!(video.info_known().await.is_ok(), "refused");
		slow.video[0].used().await;
		publish(&slow.video[0], 0);
		assert_eq!(take(&mut video, 1).await, vec![(0, 0)]);
		was_given_up(&gone[0]);
		still_asked(&gone[1]);
		// A TRACK alone (a viewer between its TRACK and its SUBSCRIBE) is not left, and neither
		// are the watched names: the next request goes in place of the second abandoned one, and
		// the one after is refused (everything is the application's: nobody holds two more).
		let asked = bbb.track("slow-asked").unwrap();
		slow.heard(1).await;
		was_given_up(&gone[1]);
		let another = bbb.subscribe_track("another", sub(0)).unwrap();
		assert!(slow.refused(&another).await, "another took a place");
		still_asked(&asked);
		for cursor in &kept {
			still_asked(cursor);
		}
	});
}

#[test]
fn a_track_asked_for_again_while_it_lingers_is_not_the_first_to_go() {
	// Before: a viewer returning to a track it had left sends TRACK, then SUBSCRIBE; between the
	// two the lingering track still counted as abandoned, so under pressure a new request took
	// its place and the viewer's TRACK was answered with BoundsExceeded.
	kio::block_on(async {
		let mut slow = SlowPublisher::new(3).await;
		let bbb = slow.asking_as(Some(100), "bbb");
		let mut left: Vec<TrackConsumer> = (0..2)
			.map(|i| bbb.subscribe_track(&format!("slow-{i}"), sub(0)).unwrap())
			.collect();
		slow.heard(2).await;
		for cursor in &mut left {
			cursor.unsubscribe();
		}
		// The viewer of the older one comes back: its TRACK finds the track lingering.
		let returning = slow.asking_as(Some(100), "bbb").track("slow-0").unwrap();
		let third = bbb.subscribe_track("slow-2", sub(0)).unwrap();
		slow.heard(1).await;
		// The next request takes the place of the one nobody came back to.
		let video = slow
			.asking_as(Some(200), "bbb")
			.subscribe_track("video", sub(0))
			.unwrap();
		assert!(video.info_known().await.is_ok(), "refused");
		was_given_up(&left[1]);
		still_asked(&returning);
		still_asked(&third);
		// Its SUBSCRIBE then finds it where it was; once that viewer leaves too, the track is
		// abandoned again and the first to go.
		let mut watching = slow
			.asking_as(Some(100), "bbb")
			.subscribe_track("slow-0", sub(0))
			.unwrap();
		still_asked(&left[0]);
		watching.unsubscribe();
		let next = slow
			.asking_as(Some(200), "bbb")
			.subscribe_track("slow-3", sub(0))
			.unwrap();
		assert!(!slow.refused(&next).await, "refused");
		was_given_up(&left[0]);
	});
}

/// On a paused clock: a relay whose broadcast "bbb" has group 0 of its "video", and a raw peer
/// whose requests it paces at `rate` a second past `burst`.
fn paced(rate: u32, burst: u32, test: impl AsyncFnOnce(&Memory)) {
	let runtime = kio::Builder::single().paused_clock(true).build().unwrap();
	runtime.block_on(async {
		let relay = Origin::new(RELAY_ID);
		let (_broadcast, track, _publication) = local_broadcast(&relay, "bbb");
		publish(&track, 0);
		let limits = session::Limits {
			request_rate: rate,
			request_burst: burst,
			..session::Limits::default()
		};
		let (raw, _relay_side) = raw_peer_limited(&relay, limits).await;
		test(&raw).await;
	});
}

/// Subscribes to "bbb"/"video" from group 0 and waits for that group's stream.
async fn subscribe_from_0(raw: &Memory) -> (memory::MemorySend, memory::MemoryRecv) {
	let subscribe = Subscribe {
		start: Some(0),
		..test_support::subscribe(1, "bbb", "video")
	};
	let streams = send_bi(raw, typed(u64::from(ControlType::Subscribe), &subscribe), false).await;
	assert_eq!(next_group_stream(raw).await, 0);
	streams
}

/// Writes SUBSCRIBE_UPDATEs that move the start to each of `starts` in turn.
async fn move_start(send: &mut memory::MemorySend, starts: &[u64]) {
	for &start in starts {
		let update = moq_net::lite::SubscribeUpdate {
			priority: 0,
			ordered: false,
			latency_max: Duration::ZERO,
			start: Some(start),
			end: None,
		};
		let mut bytes = Vec::new();
		update.encode(&mut bytes);
		send.write(Bytes::from(bytes)).await.unwrap();
	}
}

#[test]
fn a_peers_requests_past_its_burst_wait_for_its_rate() {
	// Before: a peer could make requests as fast as it could write them, each a task and its
	// state (and a SUBSCRIBE with history up to 64 group streams), cancel them and ask again.
	paced(10, 4, async |raw| {
		let start = kio::time::now();
		// Twelve TRACK requests at once: four answered at once, then one every 100 ms.
		let request = typed(
			u64::from(ControlType::Track),
			&Track {
				broadcast: "bbb".into(),
				track: "video".into(),
			},
		);
		let mut streams = Vec::new();
		for _ in 0..12 {
			streams.push(send_bi(raw, request.clone(), true).await);
		}
		let mut answered = Vec::new();
		for (_send, mut recv) in streams {
			assert!(recv.read().await.unwrap().is_some(), "the track's info");
			answered.push(kio::time::now() - start);
		}
		assert!(answered[..4].iter().all(Duration::is_zero), "{answered:?}");
		for (k, at) in answered.iter().enumerate().skip(4) {
			let due = Duration::from_millis(100 * (k as u64 - 3));
			assert!(
				*at >= due && *at < due + Duration::from_millis(50),
				"request {k} at {at:?}"
			);
		}

		// History asked for again is paced like a request: the SUBSCRIBE waits its turn, and its
		// rewind 100 ms more.
		let (mut send, _recv) = subscribe_from_0(raw).await;
		let subscribed = kio::time::now();
		move_start(&mut send, &[1, 0]).await;
		assert_eq!(next_group_stream(raw).await, 0, "group 0 again");
		let rewound = kio::time::now() - subscribed;
		// One turn: the update that raised the start was not paced (two turns would be 200 ms).
		assert!(
			rewound >= Duration::from_millis(100) && rewound < Duration::from_millis(150),
			"rewound after {rewound:?}"
		);
	});
}

#[test]
fn a_publishers_track_requests_are_shared_fairly_among_the_peers_asking() {
	// Before: one viewer subscribing to names a publisher is slow to answer took every track
	// request of its session, and every other viewer was refused, on all its broadcasts.
	kio::block_on(async {
		let mut slow = SlowPublisher::new(6).await;
		let (greedy, fair) = (Some(100), Some(200));
		// The greedy peer is first on the real track, then asks for five names never answered.
		let mut greedy_video = slow.asking_as(greedy, "bbb").subscribe_track("video", sub(0)).unwrap();
		assert!(greedy_video.info_known().await.is_ok());
		let names: Vec<TrackConsumer> = (0..5)
			.map(|i| {
				let bbb = slow.asking_as(greedy, "bbb");
				bbb.subscribe_track(&format!("slow-{i}"), sub(0)).unwrap()
			})
			.collect();
		slow.heard(5).await;
		// The other peer watches the same real track (no request of its own: it is shared now)...
		let mut fair_video = slow.asking_as(fair, "bbb").subscribe_track("video", sub(0)).unwrap();
		// ...and asks for the other broadcast's: the budget is the session's, over both, so it
		// takes the place of one of the greedy peer's names (the newest: none is answered), not of
		// the track it shares.
		let mut other = slow.asking_as(fair, "ccc").subscribe_track("video", sub(0)).unwrap();
		assert!(other.info_known().await.is_ok(), "refused");
		was_given_up(&names[4]);
		slow.video[0].used().await;
		slow.video[1].used().await;
		publish(&slow.video[0], 0);
		publish(&slow.video[1], 0);
		assert_eq!(take(&mut greedy_video, 1).await, vec![(0, 0)]);
		assert_eq!(take(&mut fair_video, 1).await, vec![(0, 0)]);
		assert_eq!(take(&mut other, 1).await, vec![(0, 0)]);
		// Its next request goes too (4 against 1 before it), but not a third (3 against 2): a
		// request is given up only for a peer holding two fewer, or the two would take each
		// other's place in turn.
		let ccc = slow.asking_as(fair, "ccc");
		let second = ccc.subscribe_track("slow-fair", sub(0)).unwrap();
		assert!(!slow.refused(&second).await, "the second was refused");
		was_given_up(&names[3]);
		let third = ccc.subscribe_track("another", sub(0)).unwrap();
		assert!(
			slow.refused(&third).await,
			"a third request took the greedy peer's place"
		);
		for kept in &names[..3] {
			still_asked(kept);
		}
	});
}

#[test]
fn two_peers_asking_for_the_same_names_cannot_pin_them() {
	// Found in review: a track subscribed to for two requesters was nobody's and never went, so
	// two peers subscribing to the same names a publisher never answers took its whole budget.
	// Now each counts half of every such track.
	kio::block_on(async {
		let mut slow = SlowPublisher::new(5).await;
		let names: Vec<[TrackConsumer; 2]> = (0..4)
			.map(|i| {
				let name = format!("slow-{i}");
				[Some(100), Some(101)].map(|peer| {
					let bbb = slow.asking_as(peer, "bbb");
					bbb.subscribe_track(&name, sub(0)).unwrap()
				})
			})
			.collect();
		slow.heard(4).await;
		// The first also watches a real track, alone: newer and less shared than the names, but
		// answered, so it outlasts them.
		let ccc = slow.asking_as(Some(100), "ccc");
		let mut watched = ccc.subscribe_track("video", sub(0)).unwrap();
		assert!(watched.info_known().await.is_ok());
		// The first holds 3, the second 2; a third peer holds none, and its request takes the
		// place of the newest name they share.
		let bbb = slow.asking_as(Some(200), "bbb");
		let mut video = bbb.subscribe_track("video", sub(0)).unwrap();
		assert!(video.info_known().await.is_ok(), "refused");
		was_given_up(&names[3][0]);
		was_given_up(&names[3][1]);
		for kept in &names[..3] {
			still_asked(&kept[0]);
		}
		for (track, cursor) in [(&slow.video[0], &mut video), (&slow.video[1], &mut watched)] {
			track.used().await;
			publish(track, 0);
			assert_eq!(take(cursor, 1).await, vec![(0, 0)]);
		}
	});
}

#[test]
fn a_subscription_whose_rewind_waits_its_turn_still_hears_its_end() {
	// Found in review: a rewind waiting for its turn stopped reading the subscription's stream,
	// so the peer's FIN (and the subscription's charges) waited for the turn too.
	paced(10, 1, async |raw| {
		let (mut send, mut recv) = subscribe_from_0(raw).await;
		let start = kio::time::now();
		// A raise, then a rewind (whose turn is 100 ms away), then the end.
		move_start(&mut send, &[1, 0]).await;
		send.finish().unwrap();
		while recv.read().await.unwrap().is_some() {}
		let ended = kio::time::now() - start;
		assert!(ended < Duration::from_millis(100), "ended after {ended:?}");
	});
}

#[test]
fn a_peer_with_nothing_to_publish_announces_an_empty_set() {
	// Before: a session without an origin to publish refused ANNOUNCE_REQUEST with InvalidRole
	// (20), and the public relay ends the whole session on that refusal.
	kio::block_on(async {
		let (raw, client_end) = memory::pair();
		let config = client(9, "/");
		let accept = kio::spawn({
			let client_end = client_end.clone();
			let config = config.clone();
			async move { session::setup(&client_end, &config).await }
		});
		session::setup(&raw, &Config::default()).await.unwrap();
		let peer = accept.await.unwrap().unwrap();
		let viewer = Origin::new(9);
		let _session = session::start(client_end, config, peer, None, Some(viewer.producer()));
		let request = moq_net::lite::AnnounceRequest {
			prefix: Path::default(),
			exclude_hop: 0,
		};
		let (mut send, mut recv) = send_bi(&raw, typed(u64::from(ControlType::Announce), &request), false).await;
		let chunk = recv.read().await.unwrap().expect("an answer, not a reset");
		let ok = <moq_net::lite::AnnounceOk as moq_net::coding::Decode>::decode_exact(&chunk).unwrap();
		assert_eq!((ok.origin, ok.active), (9, 0), "the client's id, nothing announced");
		// The stream stays open for updates until we end it; then it ends cleanly.
		send.finish().unwrap();
		assert_eq!(recv.read().await, Ok(None));
	});
}

/// The sequence of the group on the next group stream the relay opens toward `raw` (its SETUP
/// stream is skipped).
async fn next_group_stream(raw: &Memory) -> u64 {
	loop {
		let mut recv = raw.accept_uni().await.unwrap();
		if let Some(sequence) = group_sequence(&mut recv).await {
			return sequence;
		}
	}
}

#[test]
fn an_update_that_keeps_the_start_sends_nothing_twice() {
	// Before: every SUBSCRIBE_UPDATE carrying a start rewound the cursor, so an update that only
	// changed the priority sent every cached group again (and a peer could repeat it to multiply
	// what the relay sends).
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let (_broadcast, track, _publication) = local_broadcast(&relay, "bbb");
		for seq in 0..3 {
			publish(&track, seq);
		}
		let (raw, _relay_side) = raw_peer(&relay).await;
		let subscribe = Subscribe {
			start: Some(0),
			..test_support::subscribe(1, "bbb", "video")
		};
		let (mut send, _recv) = send_bi(&raw, typed(u64::from(ControlType::Subscribe), &subscribe), false).await;
		let mut got: Vec<u64> = Vec::new();
		for _ in 0..3 {
			got.push(next_group_stream(&raw).await);
		}
		got.sort_unstable();
		assert_eq!(got, vec![0, 1, 2], "history from the start");
		let update = moq_net::lite::SubscribeUpdate {
			priority: 5,
			ordered: false,
			latency_max: Duration::ZERO,
			start: Some(0),
			end: None,
		};
		let mut bytes = Vec::new();
		update.encode(&mut bytes);
		send.write(Bytes::from(bytes)).await.unwrap();
		// Give the update time to be read before the next group (the relay serves in order).
		for _ in 0..10 {
			kio::yield_now().await;
		}
		publish(&track, 3);
		assert_eq!(next_group_stream(&raw).await, 3, "the new group, not an old one again");
	});
}

#[test]
fn an_update_behind_a_backlog_of_cached_groups_is_read_within_sixteen_groups() {
	// Found in review: once a subscription took a ready group before looking at its request
	// stream, a backlog of cached groups kept the cursor ready, and a SUBSCRIBE_UPDATE (or the
	// FIN) waited behind every one of them: here, all 100 groups went out before the update's end
	// of group 20 was read. The request stream is now read after at most 16 groups in a row.
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let (_broadcast, track, _publication) = local_broadcast(&relay, "bbb");
		for seq in 0..100 {
			publish(&track, seq);
		}
		let (raw, _relay_side) = raw_peer(&relay).await;
		let subscribe = Subscribe {
			start: Some(0),
			..test_support::subscribe(1, "bbb", "video")
		};
		let update = moq_net::lite::SubscribeUpdate {
			priority: 0,
			ordered: false,
			latency_max: Duration::ZERO,
			start: Some(0),
			end: Some(20),
		};
		// Both in one write: the update is there before the relay takes its first group.
		let mut bytes = typed(u64::from(ControlType::Subscribe), &subscribe);
		update.encode(&mut bytes);
		let (_send, _recv) = send_bi(&raw, bytes, false).await;
		// Group streams as they come, until group 20's; then every stream opened by then. The
		// relay takes a run of ready groups in one poll, so without the bound all 100 would
		// be open by the time group 20's is read.
		let mut sequences = Vec::new();
		while !sequences.contains(&20) {
			let mut stream = raw.accept_uni().await.unwrap();
			sequences.extend(group_sequence(&mut stream).await);
		}
		let opened = |waiter: &kio::Waiter| match raw.poll_accept_uni(waiter) {
			Poll::Ready(Ok(stream)) => Poll::Ready(Some(stream)),
			_ => Poll::Ready(None),
		};
		while let Some(mut stream) = kio::wait(opened).await {
			sequences.extend(group_sequence(&mut stream).await);
		}
		sequences.sort_unstable();
		assert_eq!(
			sequences,
			(0..=20).collect::<Vec<u64>>(),
			"up to the update's end, and no further"
		);
	});
}

/// The group sequence of a uni stream the relay opened, if it is a group stream.
async fn group_sequence(recv: &mut memory::MemoryRecv) -> Option<u64> {
	let mut bytes = Vec::new();
	loop {
		let mut buf = bytes.as_slice();
		match <DataType as moq_net::coding::Decode>::decode(&mut buf) {
			Ok(DataType::Group) => {
				if let Ok(header) = <GroupHeader as moq_net::coding::Decode>::decode(&mut buf) {
					return Some(header.sequence);
				}
			}
			Ok(_) => return None,
			Err(_) => {}
		}
		bytes.extend_from_slice(&recv.read().await.unwrap()?);
	}
}

#[test]
fn groups_that_wait_for_stream_credit_open_in_the_order_they_came() {
	// Found by the relay's e2e fan-out test (a viewer got groups 19 and 20 before 15 to 18, one
	// debug run in 15): the connection's stream credit wakes every group waiting for it, and a
	// group task spawned while the credit was out, queued ahead of them, took the first stream.
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let (_broadcast, track, _publication) = local_broadcast(&relay, "bbb");
		let (raw, _relay_side) = raw_peer(&relay).await;
		raw.limit_uni(1);
		let subscribe = test_support::subscribe(1, "bbb", "video");
		let (_send, _recv) = send_bi(&raw, typed(u64::from(ControlType::Subscribe), &subscribe), false).await;
		track.used().await;
		publish(&track, 0);
		assert_eq!(next_group_stream(&raw).await, 0, "the one stream credit allows");
		// Out of credit: groups 1 to 3 wait for it.
		for seq in 1..=3 {
			publish(&track, seq);
		}
		kio::yield_now().await;
		// Then, as on a connection whose driver takes in the peer's MAX_STREAMS, the credit comes
		// from a task that runs after the subscription took 4 and 5 and before their tasks run:
		// tasks run in the order they were woken or spawned.
		publish(&track, 4);
		publish(&track, 5);
		let grant = kio::spawn({
			let raw = raw.clone();
			async move { raw.grant_uni(5) }
		});
		grant.await.unwrap();
		let mut opened = Vec::new();
		for _ in 1..=5 {
			opened.push(next_group_stream(&raw).await);
		}
		assert_eq!(opened, vec![1, 2, 3, 4, 5]);
	});
}

/// The next `M` on `recv`: decoded from `bytes` (what came before and is not used yet), reading
/// more as needed; what follows it stays in `bytes`.
async fn read_message<M: moq_net::coding::Decode>(recv: &mut memory::MemoryRecv, bytes: &mut Vec<u8>) -> M {
	loop {
		let mut buf = bytes.as_slice();
		if let Ok(message) = M::decode(&mut buf) {
			let used = bytes.len() - buf.len();
			bytes.drain(..used);
			return message;
		}
		bytes.extend_from_slice(&recv.read().await.unwrap().expect("more bytes"));
	}
}

fn datagram(subscribe_id: u64, sequence: u64, payload: u64) -> Bytes {
	let mut bytes = Vec::new();
	moq_net::lite::Datagram {
		subscribe_id,
		sequence,
		timestamp: sequence * 33,
		payload: Bytes::copy_from_slice(&payload.to_le_bytes()),
	}
	.encode(&mut bytes);
	Bytes::from(bytes)
}

#[test]
fn groups_in_datagrams_are_read_into_the_subscribed_track() {
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let (raw, _relay_side) = raw_peer(&relay).await;
		// The relay asks for announcements: one broadcast, "bbb".
		let (mut announce_send, mut announce_recv) = raw.accept_bi().await.unwrap();
		let mut bytes = Vec::new();
		assert_eq!(
			read_message::<ControlType>(&mut announce_recv, &mut bytes).await,
			ControlType::Announce
		);
		read_message::<moq_net::lite::AnnounceRequest>(&mut announce_recv, &mut bytes).await;
		let mut reply = Vec::new();
		moq_net::lite::AnnounceOk { origin: 77, active: 1 }.encode(&mut reply);
		moq_net::lite::Announce {
			status: moq_net::lite::AnnounceStatus::Active,
			suffix: Path::new("bbb"),
			hops: vec![],
		}
		.encode(&mut reply);
		announce_send.write(Bytes::from(reply)).await.unwrap();
		let mut cursor = announced(&relay, "bbb").await.subscribe_track("video", sub(0)).unwrap();
		// Its TRACK, answered with the track's info, then its SUBSCRIBE.
		let (mut track_send, mut track_recv) = raw.accept_bi().await.unwrap();
		let mut bytes = Vec::new();
		assert_eq!(
			read_message::<ControlType>(&mut track_recv, &mut bytes).await,
			ControlType::Track
		);
		read_message::<Track>(&mut track_recv, &mut bytes).await;
		let mut info = Vec::new();
		moq_net::lite::TrackInfo {
			priority: 0,
			ordered: false,
			latency_max: Duration::from_secs(5),
			timescale: 1000,
		}
		.encode(&mut info);
		track_send.write(Bytes::from(info)).await.unwrap();
		let (_subscribe_send, mut subscribe_recv) = raw.accept_bi().await.unwrap();
		let mut bytes = Vec::new();
		assert_eq!(
			read_message::<ControlType>(&mut subscribe_recv, &mut bytes).await,
			ControlType::Subscribe
		);
		let id = read_message::<Subscribe>(&mut subscribe_recv, &mut bytes).await.id;
		// Groups of one frame each, in datagrams; one for a subscription the relay does not have
		// is dropped, and the session goes on.
		raw.send_datagram(datagram(id, 0, 0)).unwrap();
		assert_eq!(take(&mut cursor, 1).await, vec![(0, 0)]);
		raw.send_datagram(datagram(id + 50, 1, 99)).unwrap();
		raw.send_datagram(datagram(id, 2, 2)).unwrap();
		let mut group = cursor.recv_group().await.unwrap().expect("a group");
		let frame = group.read_frame().await.unwrap().unwrap();
		assert_eq!(
			(group.sequence(), frame.timestamp),
			(2, moq_net::Timestamp::new(66, 1000))
		);
		assert_eq!(&frame.payload[..], &2u64.to_le_bytes());
		// A datagram that ends inside its header closes the session, as a bad stream does.
		raw.send_datagram(Bytes::from_static(&[0x40])).unwrap();
		assert_eq!(raw.closed().await, moq_net::coding::DecodeError::Short.code());
	});
}

#[test]
fn a_viewer_whose_announcements_overflow_asks_again_and_keeps_what_it_mirrors() {
	kio::block_on(async {
		let relay = Origin::new(RELAY_ID);
		let producer = relay.producer();
		let kept = producer
			.create_broadcast(&Path::new("kept"), Default::default())
			.unwrap();
		let gone = producer
			.create_broadcast(&Path::new("gone"), Default::default())
			.unwrap();
		// The relay's side queues at most a few updates for the viewer.
		let limits = session::Limits {
			announce_queue: 2 << 10,
			..session::Limits::default()
		};
		let viewer = Origin::new(2);
		let (_viewer_side, _relay_side) = connect_limited(&relay, client(2, "/"), None, Some(&viewer), limits).await;
		let kept_mirror = announced(&viewer, "kept").await;
		announced(&viewer, "gone").await;
		// A burst the viewer's queue cannot hold while it reads: the request is reset, and the
		// viewer asks again.
		drop(gone);
		let burst: Vec<_> = (0..40)
			.map(|i| {
				producer
					.create_broadcast(&Path::new(&format!("new/{i:02}")), Default::default())
					.unwrap()
			})
			.collect();
		for i in 0..40 {
			announced(&viewer, &format!("new/{i:02}")).await;
		}
		// What the new set lacks is over; what it has is the same broadcast as before.
		let consumer = viewer.consumer();
		let mut cursor = consumer.announced(&Path::new("gone"));
		while consumer.get_broadcast(&Path::new("gone")).is_some() {
			cursor.next().await;
		}
		let still = consumer
			.get_broadcast(&Path::new("kept"))
			.expect("kept is still mirrored");
		assert!(still.same(&kept_mirror), "the same mirror, not one made again");
		drop((kept, burst));
	});
}
