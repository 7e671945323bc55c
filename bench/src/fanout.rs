//! Fan-out harnesses: one group in, one delivery out to every subscriber.
//!
//! **model**: one pinned kio worker. Each cycle publishes one finished one-frame group through a
//! [`TrackProducer`] to S subscriber tasks; each takes the group
//! ([`recv_group`](moq_net::TrackConsumer::recv_group)), reads its frame, and parks again. The
//! publisher waits (yielding) until all S deliveries of the cycle happened, so every cycle is the
//! live-reader shape: wake, poll, take one group, read one frame, re-register, park. Two warm-up
//! cycles run before the measured ones so waiter lists and records are in steady state.
//!
//! The figure of merit is the measured cost divided by cycles × S: instructions per delivered
//! group per subscriber. It includes the executor's share (wakes, scheduling, polls, the loop
//! turns and their user-space half of `io_uring_enter`).

use std::cell::Cell;
use std::rc::Rc;

use bytes::Bytes;
use moq_net::ietf;
use moq_net::lite::session::{self, Config};
use moq_net::model::Origin;
use moq_net::transport::memory;
use moq_net::{Frame, Path, Subscription, Timestamp, TrackInfo, TrackProducer};

use crate::counter::Meter;

/// Payload bytes per frame: a small media frame, shared (reference-counted) like real payloads.
pub const PAYLOAD: usize = 1200;

const WARM_UP: u64 = 2;

/// One pinned worker: both harnesses measure a single thread.
fn pinned_worker() -> kio::Runtime {
	kio::Builder::new()
		.workers(1)
		.pin(true)
		.build()
		.expect("a kio runtime starts")
}

/// Publishes `WARM_UP + cycles` finished one-frame groups on `track`, each once every subscriber
/// took the previous one (`delivered` reached the target), and meters the last `cycles`.
async fn publish_cycles(
	track: &TrackProducer,
	subscribers: usize,
	cycles: u64,
	delivered: &Cell<u64>,
	meter: &mut dyn Meter,
) {
	let payload = Bytes::from(vec![0x5a; PAYLOAD]);
	let mut target = 0;
	for cycle in 0..WARM_UP + cycles {
		if cycle == WARM_UP {
			meter.start();
		}
		let frame = Frame {
			timestamp: Timestamp::new(cycle, 1000),
			payload: payload.clone(),
		};
		track.write_frame(frame).expect("the track is open");
		target += subscribers as u64;
		while delivered.get() < target {
			kio::yield_now().await;
		}
	}
	meter.stop();
}

/// Runs the model fan-out with `subscribers` tasks for `cycles` measured cycles; returns the
/// number of deliveries measured.
pub fn model(subscribers: usize, cycles: u64, meter: &mut dyn Meter) -> u64 {
	let rt = pinned_worker();
	rt.block_on(async {
		let track = TrackProducer::new("bench", TrackInfo::default());
		let delivered = Rc::new(Cell::new(0u64));
		let readers: Vec<_> = (0..subscribers)
			.map(|_| {
				let mut cursor = track.consume();
				let delivered = delivered.clone();
				kio::spawn(async move {
					while let Ok(Some(mut group)) = cursor.recv_group().await {
						if let Ok(Some(frame)) = group.read_frame().await {
							std::hint::black_box(frame);
							delivered.set(delivered.get() + 1);
						}
					}
				})
			})
			.collect();
		// Let every reader park on the track before the first group.
		kio::yield_now().await;
		publish_cycles(&track, subscribers, cycles, &delivered, meter).await;
		track.finish().expect("the track is open");
		for reader in readers {
			reader.await.expect("readers end cleanly");
		}
		delivered.get() - WARM_UP * subscribers as u64
	})
}

/// The relay's origin id in the session harnesses.
const RELAY: u64 = 1;

/// A client end `id` with the SETUP exchange done (its configuration and what the relay said), and
/// its peer: a relay session on `relay`, started, over the in-memory transport.
async fn handshake(
	relay: &Origin,
	id: u64,
	role: Option<moq_net::lite::Role>,
) -> (
	memory::Memory,
	Config,
	session::PeerSetup,
	session::Session<memory::Memory>,
) {
	let (client, server) = memory::pair();
	let server_config = Config {
		origin: RELAY,
		..Config::default()
	};
	let accept = {
		let server = server.clone();
		let config = server_config.clone();
		kio::spawn(async move { session::setup(&server, &config).await })
	};
	let client_config = Config {
		origin: id,
		role,
		..Config::default()
	};
	let peer = session::setup(&client, &client_config).await.expect("client setup");
	let server_peer = accept.await.expect("setup task").expect("relay setup");
	let server_side = session::start(
		server,
		server_config,
		server_peer,
		Some(relay.consumer()),
		Some(relay.producer()),
	);
	(client, client_config, peer, server_side)
}

/// A client session `id` (publishing `publish`, mirroring into `subscribe`) and its peer, a relay
/// session on `relay`, over the in-memory transport: (client side, relay side).
async fn connect(
	relay: &Origin,
	id: u64,
	publish: Option<&Origin>,
	subscribe: Option<&Origin>,
) -> (session::Session<memory::Memory>, session::Session<memory::Memory>) {
	// Clients say their role, as the relay's clients do: a viewer is not asked for
	// announcements.
	let role = match (publish.is_some(), subscribe.is_some()) {
		(true, false) => Some(moq_net::lite::Role::Publisher),
		(false, true) => Some(moq_net::lite::Role::Subscriber),
		_ => None,
	};
	let (client, config, peer, server_side) = handshake(relay, id, role).await;
	let client_side = session::start(
		client,
		config,
		peer,
		publish.map(Origin::consumer),
		subscribe.map(Origin::producer),
	);
	(client_side, server_side)
}

/// Broadcast `bench` with its track `t`, published into `relay` through a publisher session: the
/// track, and what keeps the publisher alive.
async fn publisher(relay: &Origin) -> (TrackProducer, impl Sized) {
	let publisher = Origin::new(2);
	let (broadcast, publication) = publisher
		.producer()
		.create_broadcast(&Path::new("bench"), Default::default())
		.expect("a broadcast");
	let track = broadcast.create_track("t", TrackInfo::default()).expect("a track");
	let sessions = connect(relay, 2, Some(&publisher), None).await;
	(track, (publisher, broadcast, publication, sessions))
}

/// What a viewer's request costs, the relay's session with it: each cycle a raw client (SETUP done,
/// no session of its own) opens a stream and sends a SUBSCRIBE for a track of a broadcast the relay
/// mirrors from a publisher session. `known`: the track the publisher has, whose cached group the
/// relay answers with at once (SUBSCRIBE_OK, then a group stream the client reads to its end), and
/// the client then ends the subscription (FIN) and reads the reply stream to its end. Otherwise a
/// new name each cycle: the relay asks the publisher's session for it upstream, is refused
/// (NotFound) and refuses the client, who reads to the refusal. Counts both sessions of the relay
/// (the client's and the publisher's), the publisher session's answer, and the client's few
/// writes and reads. Returns the requests measured.
pub fn requests(known: bool, cycles: u64, meter: &mut dyn Meter) -> u64 {
	use moq_net::coding::Encode;
	use moq_net::lite::{ControlType, Subscribe};
	use moq_net::transport::{RecvStreamExt, SendStream as _, SendStreamExt, TransportExt};

	let rt = pinned_worker();
	rt.block_on(async {
		let relay = Origin::new(RELAY);
		let (track, _publisher) = publisher(&relay).await;
		track
			.write_frame(Frame {
				timestamp: Timestamp::new(0, 1000),
				payload: Bytes::from(vec![0x5a; PAYLOAD]),
			})
			.expect("the track is open");
		let mut announced = relay.consumer().announced(&Path::default());
		while announced.next().await.broadcast.is_none() {}

		let (client, _config, _peer, _relay_side) = handshake(&relay, 3, Some(moq_net::lite::Role::Subscriber)).await;
		for cycle in 0..WARM_UP + cycles {
			if cycle == WARM_UP {
				meter.start();
			}
			let name = if known { "t".to_owned() } else { format!("x{cycle}") };
			let subscribe = Subscribe {
				id: cycle,
				broadcast: Path::new("bench"),
				track: name,
				priority: 0,
				ordered: false,
				latency_max: std::time::Duration::from_secs(10),
				start: None,
				end: None,
			};
			let mut request = Vec::new();
			u64::from(ControlType::Subscribe).encode(&mut request);
			subscribe.encode(&mut request);
			let (mut send, mut recv) = client.open_bi().await.expect("a stream");
			send.write(Bytes::from(request)).await.expect("the request is written");
			if known {
				let mut group = client.accept_uni().await.expect("the cached group");
				while let Ok(Some(_)) = group.read().await {}
				send.finish().expect("the subscription ends");
			}
			while let Ok(Some(_)) = recv.read().await {}
		}
		meter.stop();
		cycles
	})
}

/// An IETF viewer session (draft `version`) mirroring into `subscribe`, and its peer, a relay
/// session on `relay`, over the in-memory transport: what keeps both alive.
async fn connect_ietf(relay: &Origin, version: ietf::Version, subscribe: &Origin) -> impl Sized + use<> {
	let (client, server) = memory::pair();
	let config = Config {
		origin: RELAY,
		..Config::default()
	};
	let grant = ietf::session::initial_grant(&config, ietf::session::Side::Client);
	let accept = {
		let server = server.clone();
		kio::spawn(async move { ietf::session::accept(&server, grant, version).await })
	};
	let server_grant = ietf::session::initial_grant(&config, ietf::session::Side::Server);
	let (control, peer) = ietf::session::connect(&client, Some("/"), server_grant, version)
		.await
		.expect("client setup");
	let (server_control, server_peer) = accept.await.expect("setup task").expect("relay setup");
	let server_side = ietf::session::start(
		server,
		server_control,
		config,
		server_peer,
		Some(relay.consumer()),
		Some(relay.producer()),
	);
	let client_side = ietf::session::start(
		client,
		control,
		Config::default(),
		peer,
		None,
		Some(subscribe.producer()),
	);
	(client_side, server_side)
}

/// Runs the session fan-out: a publisher session into a relay origin, and one viewer session out
/// of it per subscriber, all over the in-memory transport on one pinned worker. Each cycle
/// publishes one finished one-frame group; every viewer's application cursor takes it and reads
/// its frame. Returns the deliveries measured.
///
/// Per delivered group per subscriber this counts the relay's serving (a uni stream, the group
/// header, the frame), the viewer session's ingest (accept, decode, cache) and the viewer
/// application's read, plus the executor's share.
pub fn session(subscribers: usize, cycles: u64, meter: &mut dyn Meter) -> u64 {
	session_of(None, subscribers, cycles, meter)
}

/// [`session()`] with IETF viewers (draft `version`): the relay serves them subgroup streams (a
/// stream, the subgroup header, the object header, the payload); the publisher is moq-lite's.
pub fn session_ietf(version: ietf::Version, subscribers: usize, cycles: u64, meter: &mut dyn Meter) -> u64 {
	session_of(Some(version), subscribers, cycles, meter)
}

fn session_of(ietf: Option<ietf::Version>, subscribers: usize, cycles: u64, meter: &mut dyn Meter) -> u64 {
	let rt = pinned_worker();
	rt.block_on(async {
		let relay = Origin::new(RELAY);
		let (track, _publisher) = publisher(&relay).await;

		let delivered = Rc::new(Cell::new(0u64));
		let mut viewers: Vec<Box<dyn std::any::Any>> = Vec::new();
		let mut readers = Vec::new();
		for index in 0..subscribers {
			let local = Origin::new(10 + index as u64);
			match ietf {
				None => viewers.push(Box::new(connect(&relay, 10 + index as u64, None, Some(&local)).await)),
				Some(version) => viewers.push(Box::new(connect_ietf(&relay, version, &local).await)),
			}
			let delivered = delivered.clone();
			readers.push(kio::spawn(async move {
				let mut cursor = local.consumer().announced(&Path::default());
				let broadcast = loop {
					if let Some(broadcast) = cursor.next().await.broadcast {
						break broadcast;
					}
				};
				let mut track = broadcast
					.subscribe_track("t", Subscription::default())
					.expect("the track");
				while let Ok(Some(mut group)) = track.recv_group().await {
					if let Ok(Some(frame)) = group.read_frame().await {
						std::hint::black_box(frame);
						delivered.set(delivered.get() + 1);
					}
				}
			}));
		}
		// Demand reaches the publisher once the relay forwarded a subscription.
		track.used().await;
		publish_cycles(&track, subscribers, cycles, &delivered, meter).await;
		for reader in readers {
			reader.abort();
		}
		delivered.get() - WARM_UP * subscribers as u64
	})
}
