//! draft-14 sessions over the in-memory transport: a client publishing into a relay's origin and
//! another watching from it, version negotiation, and bad bytes on the control stream. Every wait
//! is on the model or the transport; the nextest timeout turns a lost wake into a failure.

use moq_net::coding::Encode;
use moq_net::ietf::message::{Message, Parameters};
use moq_net::ietf::session::{self, Session};
use moq_net::ietf::{DRAFT_14, Version, code};

const VERSION: Version = Version::Draft14;
use moq_net::lite::session::Config;
use moq_net::model::Origin;
use moq_net::test_support::{announced, local_broadcast, publish, take, video};
use moq_net::transport::memory::{self, Memory};
use moq_net::transport::{SendStreamExt, TransportExt};
use moq_net::{Path, Subscription};

/// Connects a draft-14 client to the relay origin: (client session, relay-side session).
async fn connect(
	version: Version,
	relay: &Origin,
	path: &str,
	publish: Option<&Origin>,
	subscribe: Option<&Origin>,
) -> (Session<Memory>, Session<Memory>) {
	let (client_end, relay_end) = memory::pair();
	let config = Config::default();
	let grant = session::initial_grant(&config, session::Side::Client);
	let relay_end2 = relay_end.clone();
	let accept = kio::spawn(async move { session::accept(&relay_end2, grant, version).await });
	let server_grant = session::initial_grant(&config, session::Side::Server);
	let (control, peer) = session::connect(&client_end, Some(path), server_grant, version)
		.await
		.expect("client setup");
	let (relay_control, relay_peer) = accept.await.unwrap().expect("relay setup");
	assert_eq!(relay_peer.path.as_deref(), Some(path));
	assert!(peer.max_request_id > 0, "the relay grants request ids");
	let root = Path::new(path);
	let relay_side = session::start(
		relay_end,
		relay_control,
		Config::default(),
		relay_peer,
		Some(relay.consumer().with_root(&root)),
		Some(relay.producer().with_root(&root)),
	);
	let client_side = session::start(
		client_end,
		control,
		Config::default(),
		peer,
		publish.map(Origin::consumer),
		subscribe.map(Origin::producer),
	);
	(client_side, relay_side)
}

#[test]
fn a_publisher_and_a_viewer_meet_through_the_relay() {
	for version in Version::ALL {
		kio::block_on(async {
			let relay = Origin::new(100);
			let publisher_origin = Origin::new(1);
			let info = video(std::time::Duration::from_secs(30), 0);
			let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "clock", info);
			let _publisher = connect(version, &relay, "demo", Some(&publisher_origin), None).await;
			// The relay asked for the publisher's namespaces and took them.
			announced(&relay, "demo/clock").await;

			let viewer_origin = Origin::new(2);
			let _viewer = connect(version, &relay, "demo", None, Some(&viewer_origin)).await;
			let mut cursor = announced(&viewer_origin, "clock")
				.await
				.subscribe_track("video", Subscription::default())
				.unwrap();
			// The viewer's SUBSCRIBE reached the relay, whose SUBSCRIBE reached the publisher.
			track.used().await;
			for sequence in 0..10 {
				publish(&track, sequence);
			}
			let got = take(&mut cursor, 10).await;
			assert_eq!(got, (0..10).map(|s| (s, s)).collect::<Vec<_>>(), "{version:?}");
		});
	}
}

#[test]
fn a_broadcast_that_ends_is_withdrawn_from_the_viewer() {
	kio::block_on(async {
		let relay = Origin::new(100);
		let publisher_origin = Origin::new(1);
		let (broadcast, _track, publication) =
			local_broadcast(&publisher_origin, "clock", video(std::time::Duration::from_secs(30), 0));
		let _publisher = connect(VERSION, &relay, "", Some(&publisher_origin), None).await;
		let viewer_origin = Origin::new(2);
		let _viewer = connect(VERSION, &relay, "", None, Some(&viewer_origin)).await;
		let seen = announced(&viewer_origin, "clock").await;
		drop(publication);
		broadcast.finish();
		// PUBLISH_NAMESPACE_DONE travelled publisher → relay → viewer.
		let _ = seen.closed().await;
	});
}

#[test]
fn a_client_without_draft_14_is_refused_and_bad_control_bytes_close_the_session() {
	kio::block_on(async {
		let config = Config::default();
		// CLIENT_SETUP offering only draft-15's number.
		let (client_end, relay_end) = memory::pair();
		let accept = kio::spawn(async move { session::accept(&relay_end, 100, Version::Draft14).await.err() });
		let (mut send, _recv) = client_end.open_bi().await.unwrap();
		let mut hello = Vec::new();
		Message::ClientSetup {
			versions: vec![0xff00_000f],
			params: Parameters::default(),
		}
		.encode(&mut hello);
		send.write(hello.into()).await.unwrap();
		assert_eq!(
			accept.await.unwrap(),
			Some(session::Error::Protocol(
				code::VERSION_NEGOTIATION_FAILED,
				"no version in common"
			))
		);

		// A session whose peer sends bytes that are no message closes with PROTOCOL_VIOLATION.
		let (client_end, relay_end) = memory::pair();
		let grant = session::initial_grant(&config, session::Side::Client);
		let relay_end2 = relay_end.clone();
		let accept = kio::spawn(async move { session::accept(&relay_end2, grant, VERSION).await });
		let (mut send, _recv) = client_end.open_bi().await.unwrap();
		let mut hello = Vec::new();
		Message::ClientSetup {
			versions: vec![DRAFT_14],
			params: Parameters::default().with_int(0x2, 100),
		}
		.encode(&mut hello);
		send.write(hello.into()).await.unwrap();
		let (control, peer) = accept.await.unwrap().unwrap();
		let relay = Origin::new(100);
		let _session = session::start(relay_end.clone(), control, config, peer, Some(relay.consumer()), None);
		// A SUBSCRIBE whose forward byte is 7.
		send.write(vec![0x03, 0x00, 0x08, 0x00, 0x00, 0x01, 0x61, 0x80, 0x00, 0x07, 0x02].into())
			.await
			.unwrap();
		assert_eq!(relay_end.closed().await, code::PROTOCOL_VIOLATION);
	});
}

/// Reads control messages from `recv` until one `matches`.
async fn read_until<R: moq_net::transport::RecvStream>(
	recv: &mut R,
	buf: &mut Vec<u8>,
	matches: impl Fn(&Message) -> bool,
) -> Message {
	read_until_in(VERSION, recv, buf, matches).await
}

#[test]
fn objects_left_unfinished_on_many_streams_hold_at_most_the_partial_budget() {
	use moq_net::ietf::data::{ObjectHeader, SubgroupHeader, SubgroupId};
	use moq_net::ietf::message::{Namespace, SubscribeOk};
	use moq_net::lite::session::{Counters, Limits};
	use std::sync::Arc;

	kio::block_on(async {
		let relay = Origin::new(100);
		let counters = Arc::new(Counters::default());
		let budget = 1 << 20;
		let config = Config {
			limits: Limits {
				partial_bytes: budget,
				..Limits::default()
			},
			counters: Some(counters.clone()),
			..Config::default()
		};
		// The hostile peer, by hand: its SETUP, then a namespace.
		let (peer_end, _relay_end, mut send, mut recv, _session) = hostile_peer(&relay, config).await;
		let mut out = Vec::new();
		Message::PublishNamespace {
			request_id: 0,
			namespace: Namespace(vec!["x".into()]),
			params: Parameters::default(),
		}
		.encode(&mut out);
		send.write(out.into()).await.unwrap();
		// A viewer asks for a track of it: the relay SUBSCRIBEs, and the peer answers.
		let cursor = announced(&relay, "x")
			.await
			.subscribe_track("t", Subscription::default())
			.unwrap();
		let mut buf = Vec::new();
		let Message::Subscribe(subscribe) =
			read_until(&mut recv, &mut buf, |m| matches!(m, Message::Subscribe(_))).await
		else {
			unreachable!()
		};
		let mut out = Vec::new();
		Message::SubscribeOk(SubscribeOk {
			request_id: subscribe.request_id,
			track_alias: 9,
			expires: 0,
			group_order: 2,
			largest: None,
			params: Parameters::default(),
		})
		.encode(&mut out);
		send.write(out.into()).await.unwrap();
		// Eight streams, each an object of 1 MiB of which half comes: 4 MiB the relay would hold.
		let mut streams = Vec::new();
		for group in 0..8 {
			let mut stream = peer_end.open_uni().await.unwrap();
			let mut head = Vec::new();
			SubgroupHeader {
				track_alias: 9,
				group,
				subgroup: SubgroupId::Zero,
				publisher_priority: Some(0),
				extensions: false,
				end_of_group: true,
			}
			.encode(&mut head);
			ObjectHeader {
				id_delta: 0,
				extensions: None,
				length: 1 << 20,
				status: 0,
			}
			.emit(&mut head)
			.unwrap();
			stream.write(head.into()).await.unwrap();
			stream.write(vec![7u8; 512 << 10].into()).await.unwrap();
			streams.push(stream);
		}
		// Past the budget, streams are stopped: those left hold it at most. (Polled, as which
		// streams the relay reads first is its own business.)
		let stopped = loop {
			let mut stopped = 0;
			for stream in &mut streams {
				if let kio::Either::Left(_) = kio::race(stream.stopped(), std::future::ready(())).await {
					stopped += 1;
				}
			}
			if stopped >= 6 {
				break stopped;
			}
			kio::time::sleep(std::time::Duration::from_millis(10)).await;
		};
		assert!(stopped <= 7, "one stream at least fits the budget");
		assert!(
			counters.partial_bytes.used() <= budget,
			"{} held",
			counters.partial_bytes.used()
		);
		drop(cursor);
	});
}

#[test]
fn a_session_that_ends_withdraws_what_its_peer_published() {
	kio::block_on(async {
		let relay = Origin::new(100);
		let publisher_origin = Origin::new(1);
		let info = video(std::time::Duration::from_secs(30), 0);
		let (_broadcast, _track, _publication) = local_broadcast(&publisher_origin, "clock", info);
		let (_client, relay_side) = connect(VERSION, &relay, "", Some(&publisher_origin), None).await;
		let seen = announced(&relay, "clock").await;
		// The relay's side ends (its connection went): the peer's namespace goes with it, and the
		// tasks that served it (they held the session's state) with it.
		drop(relay_side);
		let _ = seen.closed().await;
	});
}

/// A hand-driven peer: its end, the relay's end, its control stream's two halves, and the
/// relay's session with it.
type HostilePeer = (
	Memory,
	Memory,
	<Memory as moq_net::transport::Transport>::SendHalf,
	<Memory as moq_net::transport::Transport>::RecvHalf,
	Session<Memory>,
);

/// A draft-14 peer (see [`hostile_peer_in`]) of a relay session that only takes in.
async fn hostile_peer(relay: &Origin, config: Config) -> HostilePeer {
	hostile_peer_in(VERSION, relay, config, false).await
}

/// A hostile peer of `version`, its CLIENT_SETUP written by hand, and the relay's session with
/// it (which subscribes into `relay`, and publishes from it if `publish`), with `config`.
async fn hostile_peer_in(version: Version, relay: &Origin, config: Config, publish: bool) -> HostilePeer {
	let (peer_end, relay_end) = memory::pair();
	let grant = session::initial_grant(&config, session::Side::Client);
	let relay_end2 = relay_end.clone();
	let accept = kio::spawn(async move { session::accept(&relay_end2, grant, version).await });
	let (mut send, recv) = peer_end.open_bi().await.unwrap();
	let mut out = Vec::new();
	let versions = match version {
		Version::Draft14 => vec![DRAFT_14],
		_ => Vec::new(),
	};
	Message::ClientSetup {
		versions,
		params: Parameters::default().with_int(0x2, 100),
	}
	.encode_for(version, &mut out)
	.unwrap();
	send.write(out.into()).await.unwrap();
	let (control, peer) = accept.await.unwrap().unwrap();
	let publish = publish.then(|| relay.consumer());
	let session = session::start(
		relay_end.clone(),
		control,
		config,
		peer,
		publish,
		Some(relay.producer()),
	);
	(peer_end, relay_end, send, recv, session)
}

#[test]
fn a_control_message_held_in_part_is_charged_and_given_back() {
	use moq_net::lite::session::{Counters, Limits};
	use std::sync::Arc;

	kio::block_on(async {
		let relay = Origin::new(100);
		let counters = Arc::new(Counters::default());
		let config = Config {
			counters: Some(counters.clone()),
			..Config::default()
		};
		let (_peer_end, relay_end, mut send, _recv, session) = hostile_peer(&relay, config).await;
		// A PUBLISH_NAMESPACE said to be 60,000 bytes long, of which 30,000 come.
		let mut head = vec![0x06, 0xea, 0x60];
		head.extend_from_slice(&[0u8; 30_000]);
		send.write(head.into()).await.unwrap();
		let mut turns = 0;
		while counters.partial_bytes.used() < 30_000 {
			turns += 1;
			assert!(turns < 10_000, "the half message was never charged");
			kio::yield_now().await;
		}
		// The session ends: what it held is given back.
		drop(session);
		assert!(relay_end.closed().await == code::NO_ERROR);
		let mut turns = 0;
		while counters.partial_bytes.used() != 0 {
			turns += 1;
			assert!(turns < 10_000, "{} still held", counters.partial_bytes.used());
			kio::yield_now().await;
		}

		// With a budget smaller than the message, the session closes rather than hold it.
		let config = Config {
			limits: Limits {
				partial_bytes: 16 << 10,
				..Limits::default()
			},
			counters: Some(counters.clone()),
			..Config::default()
		};
		let (_peer_end, relay_end, mut send, _recv, _session) = hostile_peer(&relay, config).await;
		let mut head = vec![0x06, 0xea, 0x60];
		head.extend_from_slice(&[0u8; 30_000]);
		send.write(head.into()).await.unwrap();
		assert_eq!(relay_end.closed().await, code::INTERNAL_ERROR);
		assert!(counters.partial_bytes.used() <= 16 << 10);
	});
}

#[test]
fn an_upstream_subscribe_left_unanswered_fails_its_viewers_in_time() {
	use moq_net::ietf::message::Namespace;

	let runtime = kio::Builder::single().paused_clock(true).build().unwrap();
	runtime.block_on(async {
		let relay = Origin::new(100);
		let (_peer_end, _relay_end, mut send, mut recv, _session) = hostile_peer(&relay, Config::default()).await;
		let mut out = Vec::new();
		Message::PublishNamespace {
			request_id: 0,
			namespace: Namespace(vec!["x".into()]),
			params: Parameters::default(),
		}
		.encode(&mut out);
		send.write(out.into()).await.unwrap();
		let mut cursor = announced(&relay, "x")
			.await
			.subscribe_track("t", Subscription::default())
			.unwrap();
		let mut buf = Vec::new();
		read_until(&mut recv, &mut buf, |m| matches!(m, Message::Subscribe(_))).await;
		// The peer never answers; the paused clock runs on to the relay's deadline.
		let start = kio::time::now();
		let ended = cursor.next_group().await;
		assert!(ended.is_err(), "the viewer learns the track failed: {ended:?}");
		let waited = kio::time::now() - start;
		assert!(
			waited >= std::time::Duration::from_secs(10) && waited < std::time::Duration::from_secs(11),
			"failed after {waited:?}"
		);
	});
}

#[test]
fn a_cancelled_namespace_hears_no_done_and_others_do() {
	use moq_net::ietf::message::Namespace;

	kio::block_on(async {
		let relay = Origin::new(100);
		let (_peer_end, _relay_end, mut send, mut recv, _session) =
			hostile_peer_in(VERSION, &relay, Config::default(), true).await;
		let (a, _, a_publication) = local_broadcast(&relay, "a", video(std::time::Duration::from_secs(1), 0));
		let mut out = Vec::new();
		Message::SubscribeNamespace {
			request_id: 0,
			prefix: Namespace::default(),
			options: moq_net::ietf::message::subscribe_options::BOTH,
			params: Parameters::default(),
		}
		.encode(&mut out);
		send.write(out.into()).await.unwrap();
		let mut buf = Vec::new();
		let announced_a =
			|m: &Message| matches!(m, Message::PublishNamespace { namespace, .. } if namespace.0 == ["a"]);
		read_until(&mut recv, &mut buf, announced_a).await;
		// The peer will not take "a" (and cancels "z", which was never announced).
		let mut out = Vec::new();
		for name in ["a", "z"] {
			Message::PublishNamespaceCancel {
				namespace: Namespace(vec![name.into()]),
				code: 0x4,
				reason: String::new(),
			}
			.encode(&mut out);
		}
		send.write(out.into()).await.unwrap();
		let (b, _, b_publication) = local_broadcast(&relay, "b", video(std::time::Duration::from_secs(1), 0));
		let announced_b =
			|m: &Message| matches!(m, Message::PublishNamespace { namespace, .. } if namespace.0 == ["b"]);
		read_until(&mut recv, &mut buf, announced_b).await;
		// "a" ends, then "b": the first DONE the peer hears is b's.
		drop((a, a_publication));
		drop((b, b_publication));
		let done = read_until(&mut recv, &mut buf, |m| matches!(m, Message::PublishNamespaceDone(_))).await;
		assert_eq!(done, Message::PublishNamespaceDone(Namespace(vec!["b".into()])));
	});
}

/// Reads `version`'s messages from `recv` until one `matches`.
async fn read_until_in<R: moq_net::transport::RecvStream>(
	version: Version,
	recv: &mut R,
	buf: &mut Vec<u8>,
	matches: impl Fn(&Message) -> bool,
) -> Message {
	use moq_net::transport::RecvStreamExt;
	loop {
		let mut view = &buf[..];
		if let Ok(message) = Message::decode_for(&mut view, version) {
			let used = buf.len() - view.len();
			buf.drain(..used);
			if matches(&message) {
				return message;
			}
			continue;
		}
		let chunk = recv.read().await.unwrap().expect("the relay's stream");
		buf.extend_from_slice(&chunk);
	}
}

#[test]
fn a_draft_16_namespace_subscription_sees_namespaces_come_and_go_on_its_own_stream() {
	use moq_net::ietf::message::{Namespace, subscribe_options};

	let version = Version::Draft16;
	kio::block_on(async {
		let relay = Origin::new(100);
		let (peer_end, relay_end, mut control, _control_recv, _session) =
			hostile_peer_in(version, &relay, Config::default(), true).await;
		let (a, _, a_publication) = local_broadcast(&relay, "live/a", video(std::time::Duration::from_secs(1), 0));
		// SUBSCRIBE_NAMESPACE of "live", the first message of a stream of its own.
		let (mut send, mut recv) = peer_end.open_bi().await.unwrap();
		let mut out = Vec::new();
		Message::SubscribeNamespace {
			request_id: 0,
			prefix: Namespace(vec!["live".into()]),
			options: subscribe_options::NAMESPACE,
			params: Parameters::default(),
		}
		.encode_for(version, &mut out)
		.unwrap();
		send.write(out.into()).await.unwrap();
		let mut buf = Vec::new();
		let first = read_until_in(version, &mut recv, &mut buf, |_| true).await;
		assert!(matches!(first, Message::RequestOk { request_id: 0, .. }), "{first:?}");
		// What is under the prefix, by its fields after the prefix's; then what comes and goes.
		let suffix = |name: &str| Namespace(vec![name.into()]);
		let found = read_until_in(version, &mut recv, &mut buf, |_| true).await;
		assert_eq!(found, Message::Namespace(suffix("a")));
		let (b, _, b_publication) = local_broadcast(&relay, "live/b", video(std::time::Duration::from_secs(1), 0));
		let found = read_until_in(version, &mut recv, &mut buf, |_| true).await;
		assert_eq!(found, Message::Namespace(suffix("b")));
		drop((a, a_publication));
		let gone = read_until_in(version, &mut recv, &mut buf, |_| true).await;
		assert_eq!(gone, Message::NamespaceDone(suffix("a")));
		drop((b, b_publication));
		let gone = read_until_in(version, &mut recv, &mut buf, |_| true).await;
		assert_eq!(gone, Message::NamespaceDone(suffix("b")));
		// The peer ends its side: the subscription is over (the relay's side ends too), and the
		// session goes on.
		moq_net::transport::SendStream::finish(&mut send).unwrap();
		assert_eq!(moq_net::transport::RecvStreamExt::read(&mut recv).await.unwrap(), None);

		// On the control stream, draft-16's SUBSCRIBE_NAMESPACE is a protocol violation.
		let mut out = Vec::new();
		Message::SubscribeNamespace {
			request_id: 2,
			prefix: Namespace::default(),
			options: subscribe_options::NAMESPACE,
			params: Parameters::default(),
		}
		.encode_for(version, &mut out)
		.unwrap();
		control.write(out.into()).await.unwrap();
		assert_eq!(relay_end.closed().await, code::PROTOCOL_VIOLATION);
	});
}

#[test]
fn a_namespace_subscription_of_a_prefix_hears_whole_namespaces() {
	use moq_net::ietf::message::{Namespace, subscribe_options};

	kio::block_on(async {
		let relay = Origin::new(100);
		let (_peer_end, _relay_end, mut send, mut recv, _session) =
			hostile_peer_in(VERSION, &relay, Config::default(), true).await;
		let _a = local_broadcast(&relay, "live/a", video(std::time::Duration::from_secs(1), 0));
		let mut out = Vec::new();
		Message::SubscribeNamespace {
			request_id: 0,
			prefix: Namespace(vec!["live".into()]),
			options: subscribe_options::BOTH,
			params: Parameters::default(),
		}
		.encode(&mut out);
		send.write(out.into()).await.unwrap();
		let mut buf = Vec::new();
		let announced = read_until(&mut recv, &mut buf, |m| matches!(m, Message::PublishNamespace { .. })).await;
		let Message::PublishNamespace { namespace, .. } = announced else {
			unreachable!()
		};
		assert_eq!(namespace, Namespace(vec!["live".into(), "a".into()]));
	});
}

#[test]
fn fetches_and_track_status_are_served_from_the_cache() {
	use moq_net::ietf::message::{FetchKind, Filter, Location, Namespace, Subscribe};
	use moq_net::test_support::frame;

	for version in Version::ALL {
		kio::block_on(async {
			let relay = Origin::new(100);
			let (_broadcast, track, _publication) =
				local_broadcast(&relay, "live", video(std::time::Duration::from_secs(10), 0));
			// Groups 0 to 3 of two frames each, finished; group 4 open with one frame so far.
			for sequence in 0..4 {
				let mut group = track.create_group(sequence).unwrap();
				group.write_frame(frame(10 * sequence)).unwrap();
				group.write_frame(frame(10 * sequence + 1)).unwrap();
				group.finish().unwrap();
			}
			let mut open = track.create_group(4).unwrap();
			open.write_frame(frame(40)).unwrap();
			let (peer_end, _relay_end, mut send, mut recv, _session) =
				hostile_peer_in(version, &relay, Config::default(), true).await;
			let payload = |n: u64| n.to_le_bytes().to_vec();
			let write = |message: Message| {
				let mut out = Vec::new();
				message.encode_for(version, &mut out).unwrap();
				out
			};
			let mut buf = Vec::new();

			// Standalone: from group 1's second object to group 4, whole: what group 4 holds now.
			let fetch = Message::Fetch {
				request_id: 0,
				subscriber_priority: 0,
				group_order: 0,
				kind: FetchKind::Standalone {
					namespace: Namespace(vec!["live".into()]),
					name: "video".into(),
					start: Location { group: 1, object: 1 },
					end: Location { group: 4, object: 0 },
				},
				params: Parameters::default(),
			};
			send.write(write(fetch).into()).await.unwrap();
			let ok = read_until_in(version, &mut recv, &mut buf, |m| matches!(m, Message::FetchOk { .. })).await;
			let Message::FetchOk { request_id, end, .. } = ok else {
				unreachable!()
			};
			assert_eq!((request_id, end), (0, Location { group: 4, object: 1 }), "{version:?}");
			let (id, objects) = read_fetch_stream_or_skip(version, &peer_end).await;
			assert_eq!(id, Some(0), "the first stream is the FETCH's");
			let expected: Vec<_> = [(1, 1, 11), (2, 0, 20), (2, 1, 21), (3, 0, 30), (3, 1, 31), (4, 0, 40)]
				.into_iter()
				.map(|(g, o, n)| (g, o, payload(n)))
				.collect();
			assert_eq!(objects, expected, "{version:?}");

			// Joining: a subscription starts at the latest group (4), whole; two groups before it
			// come by FETCH.
			let subscribe_of = |request_id| Subscribe {
				request_id,
				namespace: Namespace(vec!["live".into()]),
				name: "video".into(),
				subscriber_priority: 0,
				group_order: 0,
				forward: true,
				filter: Filter::LargestObject,
				params: Parameters::default(),
			};
			send.write(write(Message::Subscribe(subscribe_of(2))).into())
				.await
				.unwrap();
			read_until_in(version, &mut recv, &mut buf, |m| matches!(m, Message::SubscribeOk(_))).await;
			let joining = |request_id, subscription| Message::Fetch {
				request_id,
				subscriber_priority: 0,
				group_order: 0,
				kind: FetchKind::Joining {
					relative: true,
					subscription,
					start: 2,
				},
				params: Parameters::default(),
			};
			send.write(write(joining(4, 2)).into()).await.unwrap();
			let ok = read_until_in(version, &mut recv, &mut buf, |m| matches!(m, Message::FetchOk { .. })).await;
			let Message::FetchOk { request_id, end, .. } = ok else {
				unreachable!()
			};
			assert_eq!((request_id, end), (4, Location { group: 3, object: 2 }), "{version:?}");
			// The subscription's own group stream comes too; the FETCH's is the one with its header.
			let (id, objects) = loop {
				let (id, objects) = read_fetch_stream_or_skip(version, &peer_end).await;
				if let Some(id) = id {
					break (id, objects);
				}
			};
			assert_eq!(id, 4);
			let groups: Vec<u64> = objects.iter().map(|(group, _, _)| *group).collect();
			assert_eq!(groups, [2, 2, 3, 3], "{version:?}");

			// A FETCH of every group there could be is a FETCH of the cache.
			let everything = Message::Fetch {
				request_id: 6,
				subscriber_priority: 0,
				group_order: 0,
				kind: FetchKind::Standalone {
					namespace: Namespace(vec!["live".into()]),
					name: "video".into(),
					start: Location { group: 0, object: 0 },
					end: Location {
						group: (1 << 62) - 1,
						object: 0,
					},
				},
				params: Parameters::default(),
			};
			send.write(write(everything).into()).await.unwrap();
			let ok = read_until_in(version, &mut recv, &mut buf, |m| matches!(m, Message::FetchOk { .. })).await;
			let Message::FetchOk { end, .. } = ok else {
				unreachable!()
			};
			assert_eq!(end, Location { group: 4, object: 1 }, "{version:?}");
			let (id, objects) = loop {
				if let (Some(id), objects) = read_fetch_stream_or_skip(version, &peer_end).await {
					break (id, objects);
				}
			};
			assert_eq!((id, objects.len()), (6, 9), "{version:?}");

			// TRACK_STATUS: the largest location cached, nothing subscribed; an unknown track is
			// refused.
			let status = |request_id, name: &str| {
				Message::TrackStatus(Subscribe {
					request_id,
					name: name.into(),
					..subscribe_of(request_id)
				})
			};
			send.write(write(status(8, "video")).into()).await.unwrap();
			let answer = read_until_in(version, &mut recv, &mut buf, |m| {
				matches!(m, Message::TrackStatusOk(_) | Message::RequestOk { request_id: 8, .. })
			})
			.await;
			let largest = match answer {
				Message::TrackStatusOk(ok) => ok.largest,
				Message::RequestOk { params, .. } => params
					.bytes(0x09)
					.map(|bytes| <Location as moq_net::coding::Decode>::decode(&mut &bytes[..]).unwrap()),
				_ => unreachable!(),
			};
			assert_eq!(largest, Some(Location { group: 4, object: 0 }), "{version:?}");
			send.write(write(status(10, "audio")).into()).await.unwrap();
			let refused = read_until_in(version, &mut recv, &mut buf, |m| {
				matches!(m, Message::TrackStatusError(_) | Message::SubscribeError(_))
			})
			.await;
			let (Message::TrackStatusError(error) | Message::SubscribeError(error)) = refused else {
				unreachable!()
			};
			assert_eq!(error.request_id, 10, "{version:?}");

			// A joining FETCH of a subscription that is not there.
			send.write(write(joining(12, 40)).into()).await.unwrap();
			let refused = read_until_in(version, &mut recv, &mut buf, |m| {
				matches!(m, Message::FetchError(_) | Message::SubscribeError(_))
			})
			.await;
			let (Message::FetchError(error) | Message::SubscribeError(error)) = refused else {
				unreachable!()
			};
			let code = match version {
				Version::Draft14 => 0x7,
				_ => 0x32,
			};
			assert_eq!((error.request_id, error.code), (12, code), "{version:?}");
			drop(open);
		});
	}
}

/// The next uni stream: a FETCH's (its request id and objects), or another's (`None`, read to
/// its end and skipped).
async fn read_fetch_stream_or_skip(version: Version, peer: &Memory) -> (Option<u64>, Vec<(u64, u64, Vec<u8>)>) {
	use moq_net::coding::decode_varint;
	use moq_net::ietf::data::{FETCH_HEADER, FetchObject};
	use moq_net::transport::RecvStreamExt;
	let mut stream = peer.accept_uni().await.unwrap();
	let mut bytes = Vec::new();
	// A subgroup stream of the open group does not end: its first chunk tells it apart.
	let first = stream.read().await.unwrap().unwrap_or_default();
	bytes.extend_from_slice(&first);
	if bytes.first() != Some(&(FETCH_HEADER as u8)) {
		return (None, Vec::new());
	}
	while let Some(chunk) = stream.read().await.unwrap() {
		bytes.extend_from_slice(&chunk);
	}
	let mut buf = &bytes[..];
	decode_varint(&mut buf).unwrap();
	let request_id = decode_varint(&mut buf).unwrap();
	let mut objects = Vec::new();
	let mut previous: Option<FetchObject> = None;
	while !buf.is_empty() {
		let object = FetchObject::decode_for(&mut buf, version, previous.as_ref())
			.unwrap()
			.unwrap();
		let (payload, rest) = buf.split_at(object.length as usize);
		objects.push((object.group, object.object, payload.to_vec()));
		buf = rest;
		previous = Some(object);
	}
	(Some(request_id), objects)
}

#[test]
fn a_subscriber_that_never_reads_holds_at_most_its_groups_in_flight_and_others_keep_receiving() {
	use moq_net::Frame;
	use moq_net::ietf::message::{Filter, Namespace, Subscribe};
	use moq_net::lite::session::{Counters, GroupLoss, Limits};
	use std::sync::Arc;

	kio::block_on(async {
		let relay = Origin::new(100);
		let (_broadcast, track, _publication) =
			local_broadcast(&relay, "live", video(std::time::Duration::from_secs(60), 0));
		let counters = Arc::new(Counters::default());
		let limit = 4;
		let config = Config {
			limits: Limits {
				groups_in_flight: limit,
				..Limits::default()
			},
			counters: Some(counters.clone()),
			..Config::default()
		};
		// The hostile peer subscribes and never takes a stream: each group's stream stops at the
		// transport's window (a group is three frames, the third past it).
		let (peer_end, _relay_end, mut send, mut recv, _session) = hostile_peer_in(VERSION, &relay, config, true).await;
		let subscribe = Subscribe {
			request_id: 0,
			namespace: Namespace(vec!["live".into()]),
			name: "video".into(),
			subscriber_priority: 0,
			group_order: 0,
			forward: true,
			filter: Filter::LargestObject,
			params: Parameters::default(),
		};
		let mut out = Vec::new();
		Message::Subscribe(subscribe).encode(&mut out);
		send.write(out.into()).await.unwrap();
		let mut buf = Vec::new();
		read_until(&mut recv, &mut buf, |m| matches!(m, Message::SubscribeOk(_))).await;
		// A healthy draft-14 viewer of the same track, through its own session.
		let viewer = Origin::new(7);
		let _sessions = connect(VERSION, &relay, "/", None, Some(&viewer)).await;
		let mut cursor = announced(&viewer, "live")
			.await
			.subscribe_track("video", Subscription::default())
			.unwrap();
		let groups = 10u64;
		let big = bytes::Bytes::from(vec![7u8; memory::WINDOW * 3 / 5]);
		let publish_big = |sequence: u64| {
			let mut group = track.create_group(sequence).unwrap();
			for _ in 0..3 {
				group
					.write_frame(Frame::new(moq_net::Timestamp::new(sequence, 1000), big.clone()))
					.unwrap();
			}
			group.finish().unwrap();
		};
		let mut take_next = async || {
			let mut group = cursor.recv_group().await.unwrap().expect("a group");
			for _ in 0..3 {
				let frame = group.read_frame().await.unwrap().expect("its frame");
				assert_eq!(frame.payload.len(), big.len());
			}
			group.sequence()
		};
		// The first group once the healthy viewer's subscription is there, then the rest: it gets
		// every one.
		publish_big(0);
		assert_eq!(take_next().await, 0);
		for sequence in 1..groups {
			publish_big(sequence);
		}
		for sequence in 1..groups {
			assert_eq!(take_next().await, sequence);
		}
		// The stalled subscriber's streams: at most `limit` still open, the others reset as newer
		// groups came (or never opened).
		let mut turns = 0;
		while counters.lost(GroupLoss::InFlight) == 0 {
			turns += 1;
			assert!(turns < 100_000, "no group was reset");
			kio::yield_now().await;
		}
		let (mut open, mut reset) = (0, 0);
		while let kio::Either::Left(Ok(mut stream)) = kio::race(peer_end.accept_uni(), std::future::ready(())).await {
			use moq_net::transport::RecvStreamExt;
			loop {
				match kio::race(stream.read(), std::future::ready(())).await {
					kio::Either::Left(Ok(Some(_))) => continue,
					kio::Either::Left(Ok(None)) => panic!("a stalled group's stream ended whole"),
					kio::Either::Left(Err(_)) => reset += 1,
					kio::Either::Right(()) => open += 1,
				}
				break;
			}
		}
		assert!(open <= limit, "{open} streams held open");
		assert!(
			reset >= 1 && reset as u64 <= counters.lost(GroupLoss::InFlight),
			"{reset} reset"
		);
	});
}

#[test]
fn a_subscribe_update_is_answered_from_draft_15_on() {
	use moq_net::ietf::message::Location;

	for version in [Version::Draft15, Version::Draft16] {
		kio::block_on(async {
			let relay = Origin::new(100);
			let (_peer_end, _relay_end, mut send, mut recv, _session) =
				hostile_peer_in(version, &relay, Config::default(), true).await;
			let update = Message::SubscribeUpdate {
				request_id: 0,
				subscription: 40,
				start: Location::default(),
				end_group: 0,
				subscriber_priority: 3,
				forward: true,
				params: Parameters::default(),
			};
			let mut out = Vec::new();
			update.encode_for(version, &mut out).unwrap();
			send.write(out.into()).await.unwrap();
			let mut buf = Vec::new();
			let answer = read_until_in(version, &mut recv, &mut buf, |m| {
				matches!(m, Message::SubscribeError(_))
			})
			.await;
			let Message::SubscribeError(error) = answer else {
				unreachable!()
			};
			let not_supported = moq_net::ietf::request_code::NOT_SUPPORTED;
			assert_eq!((error.request_id, error.code), (0, not_supported), "{version:?}");
		});
	}
}

#[test]
fn a_namespace_flood_is_held_to_the_session_s_announces() {
	use moq_net::ietf::message::Namespace;
	use moq_net::lite::session::Limits;

	kio::block_on(async {
		let relay = Origin::new(100);
		let config = Config {
			limits: Limits {
				announces: 3,
				..Limits::default()
			},
			..Config::default()
		};
		let (_peer_end, _relay_end, mut send, mut recv, _session) =
			hostile_peer_in(VERSION, &relay, config, false).await;
		let mut out = Vec::new();
		for index in 0..5u64 {
			Message::PublishNamespace {
				request_id: 2 * index,
				namespace: Namespace(vec![format!("flood{index}")]),
				params: Parameters::default(),
			}
			.encode(&mut out);
		}
		send.write(out.into()).await.unwrap();
		// Three taken, two refused: the origin holds three.
		let mut buf = Vec::new();
		let mut answers = Vec::new();
		while answers.len() < 5 {
			let answer = read_until(&mut recv, &mut buf, |m| {
				matches!(m, Message::PublishNamespaceOk(_) | Message::PublishNamespaceError(_))
			})
			.await;
			answers.push(match answer {
				Message::PublishNamespaceOk(id) => (id, true),
				Message::PublishNamespaceError(error) => (error.request_id, false),
				_ => unreachable!(),
			});
		}
		assert_eq!(answers, [(0, true), (2, true), (4, true), (6, false), (8, false)]);
		for index in 0..3 {
			announced(&relay, &format!("flood{index}")).await;
		}
		assert!(relay.consumer().broadcast(&Path::new("flood3")).is_err());
	});
}

#[test]
fn a_subscribe_before_its_announce_is_refused_and_one_after_it_is_served() {
	use moq_net::ietf::message::{Filter, Namespace, Subscribe};

	for version in Version::ALL {
		kio::block_on(async {
			let relay = Origin::new(100);
			let (_peer_end, _relay_end, mut send, mut recv, _session) =
				hostile_peer_in(version, &relay, Config::default(), true).await;
			let subscribe = |request_id| {
				Message::Subscribe(Subscribe {
					request_id,
					namespace: Namespace(vec!["later".into()]),
					name: "video".into(),
					subscriber_priority: 0,
					group_order: 0,
					forward: true,
					filter: Filter::LargestObject,
					params: Parameters::default(),
				})
			};
			let mut out = Vec::new();
			subscribe(0).encode_for(version, &mut out).unwrap();
			send.write(out.into()).await.unwrap();
			// Nothing is published there yet: refused at once (DOES_NOT_EXIST), not held.
			let mut buf = Vec::new();
			let refused = read_until_in(version, &mut recv, &mut buf, |m| {
				matches!(m, Message::SubscribeError(_))
			})
			.await;
			let Message::SubscribeError(error) = refused else {
				unreachable!()
			};
			let does_not_exist = match version {
				Version::Draft14 => 0x4,
				_ => 0x10,
			};
			assert_eq!((error.request_id, error.code), (0, does_not_exist), "{version:?}");
			// Announced, the same SUBSCRIBE is served.
			let _later = local_broadcast(&relay, "later", video(std::time::Duration::from_secs(1), 0));
			let mut out = Vec::new();
			subscribe(2).encode_for(version, &mut out).unwrap();
			send.write(out.into()).await.unwrap();
			let ok = read_until_in(version, &mut recv, &mut buf, |m| matches!(m, Message::SubscribeOk(_))).await;
			let Message::SubscribeOk(ok) = ok else { unreachable!() };
			assert_eq!(ok.request_id, 2, "{version:?}");
		});
	}
}
