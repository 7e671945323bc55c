//! The model's rules, one test each: cursors, eviction, demand, announcements, end propagation,
//! and wakes across kio workers. Time comes from kio's paused clock, so expiry is exact.

use std::task::Poll;
use std::time::Duration;

use kio::{Builder, Runtime};
use moq_net::model::{Origin, Update};
use moq_net::{
	BroadcastProducer, Error, Frame, GroupConsumer, Path, Pool, Route, Subscription, Timestamp, TrackConsumer,
	TrackInfo, TrackProducer,
};

fn paused() -> Runtime {
	Builder::single().paused_clock(true).build().unwrap()
}

fn frame(value: u64) -> Frame {
	Frame::new(Timestamp::new(value, 1000), value.to_le_bytes().to_vec())
}

fn track() -> TrackProducer {
	TrackProducer::new("video", TrackInfo::default())
}

/// Publishes a finished one-frame group with sequence `seq`.
fn publish(track: &TrackProducer, seq: u64) {
	let mut group = track.create_group(seq).unwrap();
	group.write_frame(frame(seq)).unwrap();
	group.finish().unwrap();
}

/// Sequences offered by `poll` until it would park.
fn drain(consumer: &mut TrackConsumer, next: bool) -> Vec<u64> {
	let waiter = kio::Waiter::<8>::new(std::task::Waker::noop().clone());
	let mut got = Vec::new();
	loop {
		let poll = if next {
			consumer.poll_next_group(&waiter)
		} else {
			consumer.poll_recv_group(&waiter)
		};
		match poll {
			Poll::Ready(Ok(Some(group))) => got.push(group.sequence()),
			_ => return got,
		}
	}
}

#[test]
fn recv_group_yields_every_group_once_in_arrival_order() {
	let track = track();
	let mut consumer = track.consume();
	for seq in [0, 2, 1, 5, 3] {
		publish(&track, seq);
	}
	assert_eq!(drain(&mut consumer, false), vec![0, 2, 1, 5, 3]);
	assert_eq!(drain(&mut consumer, false), Vec::<u64>::new(), "each group once");
	publish(&track, 4);
	assert_eq!(drain(&mut consumer, false), vec![4]);
}

#[test]
fn a_new_cursor_starts_at_the_latest_group() {
	let track = track();
	for seq in 0..5 {
		publish(&track, seq);
	}
	let mut consumer = track.consume();
	assert_eq!(drain(&mut consumer, false), vec![4]);
	assert_eq!(consumer.latest().map(|g| g.sequence()), Some(4));
}

#[test]
fn a_start_floor_rewinds_to_cached_groups_at_or_above_it() {
	let track = track();
	for seq in [0, 2, 3, 4, 5] {
		publish(&track, seq);
	}
	let mut consumer = track.consume();
	consumer.start_at(3);
	assert_eq!(drain(&mut consumer, false), vec![3, 4, 5]);
	publish(&track, 1); // late and below the floor
	publish(&track, 6);
	assert_eq!(drain(&mut consumer, false), vec![6]);
}

#[test]
fn groups_above_the_end_cap_are_held_and_re_offered_when_it_rises() {
	let track = track();
	let mut consumer = track.consume();
	consumer.end_at(Some(1));
	for seq in [0, 3, 1, 2] {
		publish(&track, seq);
	}
	assert_eq!(drain(&mut consumer, false), vec![0, 1]);
	consumer.end_at(Some(2));
	assert_eq!(drain(&mut consumer, false), vec![2]);
	consumer.end_at(None);
	assert_eq!(drain(&mut consumer, false), vec![3]);
}

#[test]
fn get_group_finds_a_cached_group_by_sequence() {
	let track = track();
	let consumer = track.consume();
	for seq in [3, 1, 2] {
		publish(&track, seq);
	}
	assert_eq!(consumer.get_group(1).map(|g| g.sequence()), Some(1));
	assert!(consumer.get_group(7).is_none());
}

#[test]
fn next_group_rises_and_skips_late_groups() {
	let track = track();
	let mut consumer = track.consume();
	publish(&track, 0);
	publish(&track, 3);
	assert_eq!(drain(&mut consumer, true), vec![0, 3]);
	publish(&track, 1); // late: below what was already yielded
	publish(&track, 5);
	assert_eq!(drain(&mut consumer, true), vec![5]);
}

#[test]
fn starting_over_forgets_every_group_and_sequence_and_cursors_follow_the_new_numbering() {
	paused().block_on(async {
		let pool = Pool::new(16 * 264);
		let track = TrackProducer::with_pool("catalog", TrackInfo::default(), pool.clone());
		let (mut arrivals, mut rising) = (track.consume(), track.consume());
		for seq in 0..4 {
			publish(&track, seq);
		}
		assert_eq!(drain(&mut arrivals, false), vec![0, 1, 2, 3]);
		assert_eq!(drain(&mut rising, true), vec![0, 1, 2, 3]);
		let mut held = arrivals.latest().unwrap();

		// Not while someone subscribes: that subscription goes on in the same numbering.
		let subscriber = track.subscribe(Subscription::default());
		assert!(!track.start_over());
		assert_eq!(track.consume().cached_sequences(), vec![0, 1, 2, 3]);
		drop(subscriber);
		assert!(track.start_over());
		assert_eq!(track.consume().cached_sequences(), Vec::<u64>::new());
		assert_eq!(
			pool.used(),
			264,
			"the forgotten groups gave their charge back, but for the one still held"
		);
		assert_eq!(
			held.read_frame().await.unwrap().unwrap(),
			frame(3),
			"a group already held stays readable"
		);
		drop(held);
		assert_eq!(pool.used(), 0, "and with its reader, that one's");
		// The same sequences again, from 0: neither refused as duplicates nor skipped as late,
		// by a cursor made before or after.
		let mut late = track.consume();
		publish(&track, 0);
		publish(&track, 1);
		assert_eq!(drain(&mut arrivals, false), vec![0, 1]);
		assert_eq!(drain(&mut rising, true), vec![0, 1]);
		assert_eq!(drain(&mut late, false), vec![0, 1]);
		assert_eq!(arrivals.skipped(), 0, "groups forgotten at a start-over were not lost");
		assert_eq!(
			track.append_group().unwrap().sequence(),
			2,
			"numbering goes on from the new groups"
		);

		// A finished track keeps what it has.
		track.finish().unwrap();
		assert!(track.start_over(), "nobody subscribes");
		assert_eq!(track.consume().cached_sequences(), vec![0, 1, 2]);
	});
}

#[test]
fn a_cursor_moved_after_a_start_over_forgets_what_it_held_of_the_old_numbering() {
	let track = track();
	let mut capped = track.consume();
	capped.start_at(0);
	capped.end_at(Some(1));
	for seq in 0..4 {
		publish(&track, seq);
	}
	assert_eq!(drain(&mut capped, false), vec![0, 1], "2 and 3 held above the cap");
	assert!(track.start_over());
	// Rewound (a subscriber's update) before it read again: the held 2 and 3 were the old ones.
	capped.start_at(0);
	publish(&track, 2);
	capped.end_at(Some(3));
	assert_eq!(drain(&mut capped, false), vec![2], "the new group 2, once");
}

#[test]
fn finish_and_abort_reach_every_consumer() {
	kio::block_on(async {
		let track = track();
		let cursors: Vec<TrackConsumer> = (0..3).map(|_| track.consume()).collect();
		let readers: Vec<_> = cursors
			.into_iter()
			.map(|mut cursor| {
				kio::spawn(async move {
					let mut seen = Vec::new();
					while let Some(group) = cursor.recv_group().await? {
						seen.push(group.sequence());
					}
					Ok::<_, Error>((seen, cursor.finished().await?))
				})
			})
			.collect();
		kio::yield_now().await;
		publish(&track, 0);
		publish(&track, 1);
		track.finish().unwrap();
		for reader in readers {
			assert_eq!(reader.await.unwrap(), Ok((vec![0, 1], 2)));
		}

		let track = TrackProducer::new("audio", TrackInfo::default());
		let mut cursors: Vec<TrackConsumer> = (0..3).map(|_| track.consume()).collect();
		let mut open = track.create_group(0).unwrap();
		let group_reader = cursors[0].recv_group().await.unwrap().unwrap();
		track.abort(Error::Aborted(7));
		for cursor in &mut cursors {
			assert_eq!(cursor.recv_group().await.unwrap_err(), Error::Aborted(7));
		}
		let mut group_reader: GroupConsumer = group_reader;
		assert_eq!(
			group_reader.read_frame().await.unwrap_err(),
			Error::Aborted(7),
			"open groups abort too"
		);
		assert!(open.write_frame(frame(1)).is_err());

		// Dropping the last producer without finishing is an abort.
		let track = TrackProducer::new("data", TrackInfo::default());
		let mut cursor = track.consume();
		drop(track);
		assert_eq!(cursor.recv_group().await.unwrap_err(), Error::Dropped);
	});
}

#[test]
fn finish_at_ahead_of_the_live_edge_completes_when_the_edge_reaches_it() {
	let track = track();
	let mut consumer = track.consume();
	publish(&track, 0);
	track.finish_at(3).unwrap();
	assert_eq!(track.create_group(3).err(), Some(Error::Finished));
	let waiter = kio::Waiter::<8>::new(std::task::Waker::noop().clone());
	assert_eq!(drain(&mut consumer, false), vec![0]);
	assert!(
		consumer.poll_recv_group(&waiter).is_pending(),
		"groups 1 and 2 may still come"
	);
	publish(&track, 1);
	publish(&track, 2);
	assert_eq!(drain(&mut consumer, false), vec![1, 2]);
	assert!(matches!(consumer.poll_recv_group(&waiter), Poll::Ready(Ok(None))));
}

#[test]
fn the_latest_group_is_never_evicted_and_old_groups_expire_on_the_clock() {
	paused().block_on(async {
		let info = TrackInfo {
			latency_max: Duration::from_secs(2),
			..TrackInfo::default()
		};
		let track = TrackProducer::new("video", info);
		let consumer = track.consume();
		publish(&track, 0);
		kio::time::advance(Duration::from_secs(1));
		publish(&track, 1);
		kio::time::advance(Duration::from_secs(5));
		// Expiry runs when the track writes: groups 0 and 1 are older than 2 s.
		publish(&track, 2);
		assert_eq!(consumer.cached_sequences(), vec![2]);
		// However long the track idles, the latest survives the next write's expiry pass.
		kio::time::advance(Duration::from_secs(60));
		publish(&track, 3);
		assert_eq!(consumer.cached_sequences(), vec![3], "2 expired, 3 is the latest");
		kio::time::advance(Duration::from_secs(60));
		publish(&track, 1); // a late group: 3 stays the latest, so it is kept
		assert_eq!(consumer.cached_sequences(), vec![1, 3]);
	});
}

#[test]
fn a_cursor_that_fell_behind_eviction_skips_to_what_is_cached() {
	paused().block_on(async {
		let info = TrackInfo {
			latency_max: Duration::from_secs(3),
			..TrackInfo::default()
		};
		let track = TrackProducer::new("video", info);
		let mut consumer = track.consume();
		for seq in 0..3 {
			publish(&track, seq);
			kio::time::advance(Duration::from_secs(2));
		}
		publish(&track, 3);
		assert_eq!(
			drain(&mut consumer, false),
			vec![2, 3],
			"0 and 1 expired before the cursor read them"
		);
		assert_eq!(consumer.skipped(), 2, "and it counts them as lost to the cache");
	});
}

#[test]
fn pool_pressure_evicts_the_stalest_groups_of_the_track_that_writes() {
	paused().block_on(async {
		// Each one-frame group charges 8 + 256 bytes: the pool holds three.
		let pool = Pool::new(3 * 264);
		let a = TrackProducer::with_pool("a", TrackInfo::default(), pool.clone());
		let b = TrackProducer::with_pool("b", TrackInfo::default(), pool.clone());
		let (a_view, b_view) = (a.consume(), b.consume());
		publish(&b, 0);
		kio::time::advance(Duration::from_millis(10));
		publish(&a, 0);
		kio::time::advance(Duration::from_millis(10));
		publish(&a, 1);
		assert_eq!(pool.used(), 3 * 264);
		kio::time::advance(Duration::from_millis(10));
		let mut early = a_view.clone();
		early.start_at(0);
		let mut a0 = early.recv_group().await.unwrap().unwrap();
		publish(&a, 2); // the pool is full: a pays first, its stalest non-latest group goes
		assert_eq!(
			b_view.cached_sequences(),
			vec![0],
			"the track that did not write kept its group"
		);
		assert_eq!(a_view.cached_sequences(), vec![1, 2]);
		assert_eq!(
			pool.used(),
			3 * 264,
			"never over budget: room is made before the charge"
		);
		publish(&a, 3);
		assert_eq!(a_view.cached_sequences(), vec![2, 3]);
		assert_eq!(b_view.cached_sequences(), vec![0]);
		assert!(!pool.is_over());
		// An evicted group's frames went with its charge, for whoever held it too.
		assert_eq!(a0.read_frame().await, Err(Error::Evicted));
	});
}

#[test]
fn readers_of_evicted_groups_hold_nothing_the_pool_gave_back() {
	// A subscriber that never reads keeps a reader of every group in flight; the publisher writes
	// groups larger than the pool lets the track keep. Before, eviction gave the pool its charge
	// back and left the frames with the readers: five groups of 100 KiB held against a pool of
	// three.
	paused().block_on(async {
		const GROUP: usize = 100 << 10;
		let pool = Pool::new(3 * (GROUP as u64 + 256));
		let track = TrackProducer::with_pool("video", TrackInfo::default(), pool.clone());
		let mut view = track.consume();
		view.start_at(0);
		let mut readers = Vec::new();
		for seq in 0..5u64 {
			let mut group = track.create_group(seq).unwrap();
			group
				.write_frame(Frame::new(Timestamp::new(seq, 1000), vec![seq as u8; GROUP]))
				.unwrap();
			group.finish().unwrap();
			readers.push(view.recv_group().await.unwrap().unwrap());
			kio::time::advance(Duration::from_millis(10));
		}
		assert_eq!(view.cached_sequences(), vec![2, 3, 4]);
		let mut held = 0;
		for reader in &mut readers {
			match reader.read_frame().await {
				Ok(Some(frame)) => held += frame.payload.len(),
				Err(Error::Evicted) => assert!(reader.sequence() < 2, "group {} evicted", reader.sequence()),
				other => panic!("group {}: {other:?}", reader.sequence()),
			}
		}
		assert_eq!(held, 3 * GROUP, "only what the pool still charges");
		assert!(held as u64 <= pool.used());
	});
}

#[test]
fn groups_of_a_track_that_ended_stay_readable_and_charged_while_read() {
	let pool = Pool::new(1 << 20);
	let track = TrackProducer::with_pool("video", TrackInfo::default(), pool.clone());
	let mut view = track.consume();
	view.start_at(0);
	publish(&track, 0);
	let mut reader = Builder::single()
		.build()
		.unwrap()
		.block_on(async { view.recv_group().await.unwrap().unwrap() });
	let charged = pool.used();
	assert!(charged > 0);
	// The publisher goes away: the track ends with an error.
	drop(track);
	drop(view);
	assert_eq!(pool.used(), charged, "held by a reader, still charged");
	Builder::single().build().unwrap().block_on(async {
		assert_eq!(reader.read_frame().await.unwrap(), Some(frame(0)));
	});
	drop(reader);
	assert_eq!(pool.used(), 0, "given back with the last reader");
}

#[test]
fn latest_groups_of_many_tracks_never_exceed_the_pool() {
	// Before, every track's latest group was kept whatever the pool said: a thousand tracks with
	// one group each held a thousand groups against a budget of three.
	let pool = Pool::new(3 * 264);
	let tracks: Vec<TrackProducer> = (0..1000)
		.map(|i| TrackProducer::with_pool(&format!("t{i}"), TrackInfo::default(), pool.clone()))
		.collect();
	let mut refused = 0;
	for track in &tracks {
		let mut group = track.create_group(0).unwrap();
		match group.write_frame(frame(0)) {
			Ok(()) => group.finish().unwrap(),
			Err(err) => {
				assert_eq!(err, Error::Evicted);
				refused += 1;
			}
		}
		assert!(pool.used() <= pool.capacity());
	}
	assert_eq!(refused, 997, "three latest groups fit; the rest are refused, not kept");
	drop(tracks);
	assert_eq!(pool.used(), 0);
}

#[test]
fn demand_aggregates_and_notifies_changes() {
	kio::block_on(async {
		let track = track();
		let mut seen = 0;
		let sub = |priority, start, end| Subscription {
			priority,
			ordered: true,
			latency_max: Duration::from_millis(u64::from(priority) * 100),
			start,
			end,
		};
		assert_eq!(track.subscription(), None);
		let a = track.subscribe(sub(1, Some(10), Some(20)));
		assert_eq!(
			track.subscription_changed(&mut seen).await,
			Some(sub(1, Some(10), Some(20)))
		);
		let mut b = track.subscribe(sub(5, Some(4), Some(8)));
		let total = track.subscription_changed(&mut seen).await.unwrap();
		assert_eq!((total.priority, total.start, total.end), (5, Some(4), Some(20)));
		assert_eq!(total.latency_max, Duration::from_millis(500));
		b.subscribe(sub(2, None, None));
		let total = track.subscription_changed(&mut seen).await.unwrap();
		assert_eq!(
			(total.priority, total.start, total.end),
			(2, None, None),
			"an open end wins, and so does the latest over a start the track has not reached"
		);
		drop(b);
		assert_eq!(
			track.subscription_changed(&mut seen).await,
			Some(sub(1, Some(10), Some(20)))
		);
		let unused = kio::spawn({
			let track = track.clone();
			async move { track.unused().await }
		});
		kio::yield_now().await;
		assert!(!unused.is_finished());
		drop(a);
		unused.await.unwrap();
		assert_eq!(track.subscription_changed(&mut seen).await, None);
		// A passive cursor is no demand.
		let _passive = track.consume();
		assert_eq!(track.subscription(), None);
		let used = kio::spawn({
			let track = track.clone();
			async move { track.used().await }
		});
		kio::yield_now().await;
		let _c = track.subscribe(Subscription::default());
		used.await.unwrap();
	});
}

#[test]
fn on_demand_tracks_are_served_by_the_handler_and_coalesced() {
	kio::block_on(async {
		let broadcast = BroadcastProducer::new();
		let consumer = broadcast.consume();
		assert_eq!(consumer.track("video").err(), Some(Error::NotFound), "no handler");
		broadcast.serve_requests();
		let mut first = consumer.subscribe_track("video", Subscription::default()).unwrap();
		let mut second = consumer.subscribe_track("video", Subscription::default()).unwrap();
		let request = broadcast.requested_track().await.unwrap();
		assert_eq!(request.name(), "video");
		// Its info is the handler's to give; consumers wait for it.
		let info = TrackInfo {
			timescale: 90_000,
			..TrackInfo::default()
		};
		let waiting = kio::spawn({
			let first = first.clone();
			async move { first.info_known().await }
		});
		kio::yield_now().await;
		assert!(!waiting.is_finished());
		request.set_info(info);
		assert_eq!(waiting.await.unwrap(), Ok(info));
		assert!(
			request.subscription().is_some(),
			"the request carries the subscribers' demand"
		);
		publish(&request, 0);
		assert_eq!(first.recv_group().await.unwrap().unwrap().sequence(), 0);
		assert_eq!(second.recv_group().await.unwrap().unwrap().sequence(), 0);
		let waiter = kio::Waiter::<8>::new(std::task::Waker::noop().clone());
		assert!(
			broadcast.poll_requested_track(&waiter).is_pending(),
			"coalesced into one request"
		);
		// A rejected request aborts the subscribers' track.
		let mut audio = consumer.track("audio").unwrap();
		broadcast.requested_track().await.unwrap().abort(Error::NotFound);
		assert_eq!(audio.recv_group().await.unwrap_err(), Error::NotFound);
	});
}

fn paths(updates: &[Update]) -> Vec<(String, bool)> {
	updates
		.iter()
		.map(|u| (u.path.to_string(), u.broadcast.is_some()))
		.collect()
}

fn ready(cursor: &mut moq_net::model::AnnounceCursor) -> Vec<Update> {
	std::iter::from_fn(|| cursor.try_next()).collect()
}

#[test]
fn announcements_are_the_current_set_then_live_updates_within_prefix_and_scope() {
	let origin = Origin::new(1);
	let producer = origin.producer();
	let (_a, _pa) = producer
		.create_broadcast(&Path::new("live/b"), Route::default())
		.unwrap();
	let (_b, _pb) = producer
		.create_broadcast(&Path::new("live/a"), Route::default())
		.unwrap();
	let (_c, _pc) = producer
		.create_broadcast(&Path::new("vod/x"), Route::default())
		.unwrap();
	let (_d, _pd) = producer
		.create_broadcast(&Path::new("liver/y"), Route::default())
		.unwrap();

	let consumer = origin.consumer();
	let mut live = consumer.announced(&Path::new("live"));
	assert_eq!(
		paths(&ready(&mut live)),
		vec![("live/a".into(), true), ("live/b".into(), true)],
		"sorted, by segment"
	);

	let (e, pe) = producer
		.create_broadcast(&Path::new("live/c"), Route::default())
		.unwrap();
	let (_f, _pf) = producer
		.create_broadcast(&Path::new("vod/z"), Route::default())
		.unwrap();
	assert_eq!(paths(&ready(&mut live)), vec![("live/c".into(), true)]);
	drop(pe);
	drop(e);
	assert_eq!(paths(&ready(&mut live)), vec![("live/c".into(), false)]);

	// Re-rooted: paths are relative to the root.
	let rooted = consumer.with_root(&Path::new("live"));
	let mut all = rooted.announced(&Path::default());
	assert_eq!(paths(&ready(&mut all)), vec![("a".into(), true), ("b".into(), true)]);
	assert!(rooted.get_broadcast(&Path::new("a")).is_some());

	// Scoped: only the allowed prefixes, and publishing outside them is refused.
	let scoped = consumer.scope(&[Path::new("vod")]);
	let mut vod = scoped.announced(&Path::default());
	assert_eq!(
		paths(&ready(&mut vod)),
		vec![("vod/x".into(), true), ("vod/z".into(), true)]
	);
	let scoped_producer = producer.with_root(&Path::new("room")).scope(&[Path::new("alice")]);
	let outside = scoped_producer.create_broadcast(&Path::new("bob/cam"), Route::default());
	assert_eq!(outside.err(), Some(Error::Unauthorized));
	let (_g, _pg) = scoped_producer
		.create_broadcast(&Path::new("alice/cam"), Route::default())
		.unwrap();
	assert!(consumer.get_broadcast(&Path::new("room/alice/cam")).is_some());
}

#[test]
fn replacing_a_path_announces_the_old_going_and_the_new_coming() {
	let origin = Origin::new(1);
	let producer = origin.producer();
	let mut cursor = origin.consumer().announced(&Path::default());
	let (_a, pa) = producer.create_broadcast(&Path::new("x"), Route::default()).unwrap();
	assert_eq!(paths(&ready(&mut cursor)), vec![("x".into(), true)]);
	let (_b, _pb) = producer.create_broadcast(&Path::new("x"), Route::default()).unwrap();
	assert_eq!(
		paths(&ready(&mut cursor)),
		vec![("x".into(), false), ("x".into(), true)]
	);
	drop(pa); // the replaced publication is a backup: its end changes nothing announced
	assert_eq!(paths(&ready(&mut cursor)), vec![]);
}

#[test]
fn hop_chains_prevent_reflection_and_loops() {
	let origin = Origin::new(1);
	let producer = origin.producer();
	let consumer = origin.consumer();
	let (_a, _pa) = producer
		.create_broadcast(&Path::new("from-peer-7"), Route::new(vec![9, 7]))
		.unwrap();
	let (_b, _pb) = producer
		.create_broadcast(&Path::new("local"), Route::new(vec![]))
		.unwrap();
	let mut to_peer_7 = consumer.announced_excluding(&Path::default(), 7);
	assert_eq!(
		paths(&ready(&mut to_peer_7)),
		vec![("local".into(), true)],
		"never reflected back to peer 7"
	);
	let mut to_peer_8 = consumer.announced_excluding(&Path::default(), 8);
	assert_eq!(ready(&mut to_peer_8).len(), 2);
	assert_eq!(ready(&mut to_peer_8).len(), 0);
	// A route that already passed through this origin is a loop.
	assert_eq!(
		producer
			.create_broadcast(&Path::new("loop"), Route::new(vec![3, 1]))
			.err(),
		Some(Error::Unauthorized)
	);
}

#[test]
fn the_best_route_is_announced_and_the_next_best_takes_over_when_it_goes() {
	let origin = Origin::new(1);
	let producer = origin.producer();
	let consumer = origin.consumer();
	let mut cursor = consumer.announced(&Path::default());
	// Which of the broadcasts is announced at "x" now.
	let announced = |candidates: &[&BroadcastProducer]| {
		let broadcast = origin.consumer().get_broadcast(&Path::new("x")).unwrap();
		candidates.iter().position(|b| b.consume().same(&broadcast))
	};
	// A peer's route through two relays, then a peer's route through one: the shorter wins.
	let far = BroadcastProducer::new();
	let p_far = producer
		.publish(&Path::new("x"), far.consume(), Route::cluster(vec![5, 6]))
		.unwrap();
	let near = BroadcastProducer::new();
	let p_near = producer
		.publish(&Path::new("x"), near.consume(), Route::cluster(vec![7]))
		.unwrap();
	assert_eq!(paths(&ready(&mut cursor)), vec![("x".into(), true)]);
	assert_eq!(announced(&[&far, &near]), Some(1));
	// A longer route that comes later is a backup: nobody hears of it.
	let later = BroadcastProducer::new();
	let p_later = producer
		.publish(&Path::new("x"), later.consume(), Route::cluster(vec![8, 9, 10]))
		.unwrap();
	assert_eq!(paths(&ready(&mut cursor)), vec![]);
	assert_eq!(announced(&[&far, &near, &later]), Some(1));
	// A local publisher beats every peer route, even with a longer chain.
	let local = BroadcastProducer::new();
	let p_local = producer
		.publish(&Path::new("x"), local.consume(), Route::new(vec![11, 12, 13, 14]))
		.unwrap();
	assert_eq!(
		paths(&ready(&mut cursor)),
		vec![("x".into(), false), ("x".into(), true)]
	);
	let all = [&far, &near, &later, &local];
	assert_eq!(announced(&all), Some(3));
	assert_eq!(origin.backups(), 3);
	// Failover, best first: local, near, far, later (the longest), then nothing; each switch is
	// heard as the path going and coming back.
	let switched = vec![("x".into(), false), ("x".into(), true)];
	drop(p_local);
	assert_eq!(announced(&all), Some(1));
	assert_eq!(paths(&ready(&mut cursor)), switched);
	drop(p_near);
	assert_eq!(announced(&all), Some(0));
	assert_eq!(paths(&ready(&mut cursor)), switched);
	drop(p_far);
	assert_eq!(announced(&all), Some(2));
	assert_eq!(paths(&ready(&mut cursor)), switched);
	assert_eq!(origin.backups(), 0);
	drop(p_later);
	assert!(consumer.get_broadcast(&Path::new("x")).is_none());
	assert_eq!(paths(&ready(&mut cursor)), vec![("x".into(), false)]);
}

#[test]
fn equal_cluster_routes_are_ranked_by_their_chains_whatever_order_they_arrive_in() {
	// Two relays hear the same two routes of "x" (published on two relays of the cluster) in
	// opposite orders: both serve the one with the lower chain.
	for order in [[0, 1], [1, 0]] {
		let origin = Origin::new(1);
		let routes = [Route::cluster(vec![7, 20]), Route::cluster(vec![8, 10])];
		let broadcasts = [BroadcastProducer::new(), BroadcastProducer::new()];
		let _publications: Vec<_> = order
			.iter()
			.map(|&i| {
				origin
					.producer()
					.publish(&Path::new("x"), broadcasts[i].consume(), routes[i].clone())
					.unwrap()
			})
			.collect();
		let served = origin.consumer().get_broadcast(&Path::new("x")).unwrap();
		assert!(served.same(&broadcasts[0].consume()), "order {order:?}");
	}
	// One chain heard twice (a publisher that came back through the same relays): the newer wins.
	let origin = Origin::new(1);
	let (old, new) = (BroadcastProducer::new(), BroadcastProducer::new());
	let _old = origin
		.producer()
		.publish(&Path::new("x"), old.consume(), Route::cluster(vec![7, 20]))
		.unwrap();
	let _new = origin
		.producer()
		.publish(&Path::new("x"), new.consume(), Route::cluster(vec![7, 20]))
		.unwrap();
	let served = origin.consumer().get_broadcast(&Path::new("x")).unwrap();
	assert!(served.same(&new.consume()));
	// Between two clients' routes, newer wins even with a higher chain: a publisher reconnecting
	// takes over from its stale twin.
	let origin = Origin::new(1);
	let (old, new) = (BroadcastProducer::new(), BroadcastProducer::new());
	let _old = origin
		.producer()
		.publish(&Path::new("x"), old.consume(), Route::new(vec![3]))
		.unwrap();
	let _new = origin
		.producer()
		.publish(&Path::new("x"), new.consume(), Route::new(vec![4]))
		.unwrap();
	let served = origin.consumer().get_broadcast(&Path::new("x")).unwrap();
	assert!(served.same(&new.consume()));
}

#[test]
fn a_lingering_publication_gives_way_to_any_live_one() {
	let origin = Origin::new(1);
	let producer = origin.producer();
	let mut cursor = origin.consumer().announced(&Path::default());
	let served = || origin.consumer().get_broadcast(&Path::new("x")).unwrap();
	// The best route (the lower chain) and a backup.
	let (best, backup) = (BroadcastProducer::new(), BroadcastProducer::new());
	let p_best = producer
		.publish(&Path::new("x"), best.consume(), Route::cluster(vec![7, 10]))
		.unwrap();
	let _p_backup = producer
		.publish(&Path::new("x"), backup.consume(), Route::cluster(vec![7, 30]))
		.unwrap();
	assert_eq!(paths(&ready(&mut cursor)), vec![("x".into(), true)]);
	assert!(served().same(&best.consume()));
	// Its publisher is lost: the live backup takes over at once (heard as the path going and
	// coming back), and the lingering one stays as a backup.
	p_best.linger();
	assert!(served().same(&backup.consume()));
	assert_eq!(
		paths(&ready(&mut cursor)),
		vec![("x".into(), false), ("x".into(), true)]
	);
	assert_eq!(origin.backups(), 1);
	// A lingering publication that is the only one stays announced: nobody hears anything.
	let lone = Origin::new(1);
	let mut lone_cursor = lone.consumer().announced(&Path::default());
	let only = BroadcastProducer::new();
	let p_only = lone
		.producer()
		.publish(&Path::new("y"), only.consume(), Route::new(vec![5]))
		.unwrap();
	assert_eq!(paths(&ready(&mut lone_cursor)), vec![("y".into(), true)]);
	p_only.linger();
	assert!(ready(&mut lone_cursor).is_empty());
	// A publisher that comes back takes over, and the lingering one going later is heard by
	// nobody.
	let back = BroadcastProducer::new();
	let _p_back = lone
		.producer()
		.publish(&Path::new("y"), back.consume(), Route::new(vec![5]))
		.unwrap();
	assert!(
		lone.consumer()
			.get_broadcast(&Path::new("y"))
			.unwrap()
			.same(&back.consume())
	);
	assert_eq!(
		paths(&ready(&mut lone_cursor)),
		vec![("y".into(), false), ("y".into(), true)]
	);
	drop(p_only);
	assert!(ready(&mut lone_cursor).is_empty());
	// A live cluster route outranks a lingering client route, too.
	let mixed = Origin::new(1);
	let (client, peer) = (BroadcastProducer::new(), BroadcastProducer::new());
	let p_client = mixed
		.producer()
		.publish(&Path::new("z"), client.consume(), Route::new(vec![5]))
		.unwrap();
	let _p_peer = mixed
		.producer()
		.publish(&Path::new("z"), peer.consume(), Route::cluster(vec![5, 30]))
		.unwrap();
	assert!(
		mixed
			.consumer()
			.get_broadcast(&Path::new("z"))
			.unwrap()
			.same(&client.consume())
	);
	p_client.linger();
	assert!(
		mixed
			.consumer()
			.get_broadcast(&Path::new("z"))
			.unwrap()
			.same(&peer.consume())
	);
}

#[test]
fn a_hidden_prefix_is_neither_seen_nor_used_and_a_transit_prefix_is_passed_on_to_peers() {
	let origin = Origin::new(1);
	origin.set_transit(&Path::new("members"));
	let producer = origin.producer();
	let (_local, _p_local) = producer
		.create_broadcast(&Path::new("live/a"), Route::new(vec![5]))
		.unwrap();
	let (_member, _p_member) = producer
		.create_broadcast(&Path::new("members/r2"), Route::cluster(vec![2]))
		.unwrap();
	let (_learned, _p_learned) = producer
		.create_broadcast(&Path::new("live/b"), Route::cluster(vec![2]))
		.unwrap();
	// A client's view without "members": it sees and gets the rest only, and cannot publish there.
	let client = origin.consumer().hide(&Path::new("members"));
	let mut cursor = client.announced(&Path::default());
	assert_eq!(
		paths(&ready(&mut cursor)),
		vec![("live/a".into(), true), ("live/b".into(), true)]
	);
	assert!(client.get_broadcast(&Path::new("members/r2")).is_none());
	let rooted = origin
		.producer()
		.hide(&Path::new("members"))
		.with_root(&Path::new("members"));
	assert!(matches!(
		rooted.create_broadcast(&Path::new("r9"), Route::default()),
		Err(Error::Unauthorized)
	));
	// A peer hears local routes, and peers' routes only under the transit prefix (a peer that
	// is on their chain hears none of them).
	let mut peer = origin.consumer().announced_to_peer(&Path::default(), 3);
	assert_eq!(
		paths(&ready(&mut peer)),
		vec![("live/a".into(), true), ("members/r2".into(), true)]
	);
	let mut on_chain = origin.consumer().announced_to_peer(&Path::default(), 2);
	assert_eq!(paths(&ready(&mut on_chain)), vec![("live/a".into(), true)]);
	// Counts outside a prefix skip exactly the paths under it (`members-x` and `membersx` sort
	// among them but are outside).
	let (_x, _px) = producer
		.create_broadcast(&Path::new("members-x"), Route::default())
		.unwrap();
	let (_y, _py) = producer
		.create_broadcast(&Path::new("membersx"), Route::default())
		.unwrap();
	let (_z, _pz) = producer
		.create_broadcast(&Path::new("members/r3"), Route::cluster(vec![3]))
		.unwrap();
	let (_w, _pw) = producer
		.create_broadcast(&Path::new("members/r3"), Route::cluster(vec![3, 4]))
		.unwrap();
	assert_eq!(origin.broadcasts(), 6);
	assert_eq!(origin.broadcasts_outside(&Path::new("members")), 4);
	assert_eq!(origin.backups(), 1);
	assert_eq!(origin.backups_outside(&Path::new("members")), 0);
}

#[test]
fn a_cluster_peer_hears_only_local_routes_never_another_peers() {
	let origin = Origin::new(1);
	let producer = origin.producer();
	let consumer = origin.consumer();
	let (_a, _pa) = producer
		.create_broadcast(&Path::new("local"), Route::new(vec![100]))
		.unwrap();
	let (_b, _pb) = producer
		.create_broadcast(&Path::new("from-peer-7"), Route::cluster(vec![100, 7]))
		.unwrap();
	let (_c, _pc) = producer
		.create_broadcast(&Path::new("from-client-relay-9"), Route::new(vec![9]))
		.unwrap();
	let mut to_peer_8 = consumer.announced_to_peer(&Path::default(), 8);
	assert_eq!(
		paths(&ready(&mut to_peer_8)),
		vec![("from-client-relay-9".into(), true), ("local".into(), true)]
	);
	// Clients hear everything.
	assert_eq!(ready(&mut consumer.announced(&Path::default())).len(), 3);
	// A local publisher of a path a peer also has: the peer now hears it; when it goes, the peer
	// hears it go (the peer's own route is not ours to announce back).
	let (_d, pd) = producer
		.create_broadcast(&Path::new("from-peer-7"), Route::new(vec![101]))
		.unwrap();
	assert_eq!(paths(&ready(&mut to_peer_8)), vec![("from-peer-7".into(), true)]);
	drop(pd);
	assert_eq!(paths(&ready(&mut to_peer_8)), vec![("from-peer-7".into(), false)]);
	// Peer 7 is never told of its own route, nor of a local one that passed through it.
	let (_e, _pe) = producer
		.create_broadcast(&Path::new("via-7"), Route::new(vec![7, 102]))
		.unwrap();
	let mut to_peer_7 = consumer.announced_to_peer(&Path::default(), 7);
	assert_eq!(
		paths(&ready(&mut to_peer_7)),
		vec![("from-client-relay-9".into(), true), ("local".into(), true)]
	);
}

#[test]
fn a_consumer_on_another_worker_is_woken_by_a_producer_on_this_one() {
	let rt = Builder::new().workers(2).pin(false).build().unwrap();
	let track = track();
	let mut consumer = track.consume();
	let remote = rt.spawn_on(1, move || async move {
		assert_eq!(kio::worker_index(), 1);
		let mut seen = Vec::new();
		while let Some(mut group) = consumer.recv_group().await.unwrap() {
			let frame = group.read_frame().await.unwrap().unwrap();
			seen.push((group.sequence(), frame.timestamp.value));
		}
		seen
	});
	let seen = rt.block_on(async move {
		for seq in 0..200 {
			publish(&track, seq);
			if seq % 10 == 0 {
				kio::yield_now().await;
			}
		}
		track.finish().unwrap();
		remote.await.unwrap()
	});
	// The remote cursor started at the latest group when it was created, before any group.
	assert_eq!(seen, (0..200).map(|seq| (seq, seq)).collect::<Vec<_>>());
}

// --- hostile demand and ownership (each failed before its fix) ----------------------------------

#[test]
fn a_future_start_never_hides_the_latest_and_leaves_nothing_when_withdrawn() {
	// Before, an absent start was "no opinion": one subscriber asking for group 10^9 made the
	// aggregate start there for everyone, and the publisher side served nobody anything.
	let track = track();
	publish(&track, 0);
	publish(&track, 1);
	let viewer = track.subscribe(Subscription::default());
	assert_eq!(track.subscription().unwrap().start, None);
	let attacker = track.subscribe(Subscription {
		start: Some(1_000_000_000),
		..Subscription::default()
	});
	assert_eq!(
		track.subscription().unwrap().start,
		None,
		"the viewer still wants the latest"
	);
	let history = track.subscribe(Subscription {
		start: Some(0),
		..Subscription::default()
	});
	assert_eq!(
		track.subscription().unwrap().start,
		Some(0),
		"history the latest does not cover"
	);
	drop(history);
	drop(viewer);
	assert_eq!(
		track.subscription().unwrap().start,
		Some(1_000_000_000),
		"alone, the attacker gets what it asked for"
	);
	drop(attacker);
	assert_eq!(track.subscription(), None);
	let late = track.subscribe(Subscription::default());
	assert_eq!(track.subscription().unwrap().start, None, "nothing was left behind");
	drop(late);
}

#[test]
fn clearing_a_future_start_goes_back_to_the_latest_group() {
	let track = track();
	publish(&track, 0);
	publish(&track, 1);
	let mut cursor = track.consume();
	cursor.start_at(1_000_000);
	assert_eq!(drain(&mut cursor, false), Vec::<u64>::new());
	publish(&track, 2);
	assert_eq!(drain(&mut cursor, false), Vec::<u64>::new(), "below the floor");
	cursor.clear_start();
	assert_eq!(drain(&mut cursor, false), vec![2], "the latest group, once");
	publish(&track, 3);
	assert_eq!(drain(&mut cursor, false), vec![3]);
	cursor.clear_start();
	assert_eq!(drain(&mut cursor, false), Vec::<u64>::new(), "no floor: nothing again");
}

#[test]
fn a_second_publisher_takes_over_and_the_first_is_restored_when_it_leaves() {
	// Before, the second publication replaced the first for good: when it left, the path was
	// empty though the first publisher was still publishing.
	let origin = Origin::new(1);
	let producer = origin.producer();
	let consumer = origin.consumer();
	let mut cursor = consumer.announced(&Path::default());
	let (first, first_pub) = producer.create_broadcast(&Path::new("x"), Route::default()).unwrap();
	let (second, second_pub) = producer.create_broadcast(&Path::new("x"), Route::default()).unwrap();
	assert!(consumer.broadcast(&Path::new("x")).unwrap().same(&second.consume()));
	assert_eq!(origin.broadcasts(), 1);
	assert_eq!(origin.backups(), 1);
	ready(&mut cursor);
	drop(second_pub);
	let updates = ready(&mut cursor);
	assert_eq!(paths(&updates), vec![("x".into(), false), ("x".into(), true)]);
	assert!(updates[1].broadcast.as_ref().unwrap().same(&first.consume()));
	assert!(consumer.broadcast(&Path::new("x")).unwrap().same(&first.consume()));
	assert_eq!((origin.broadcasts(), origin.backups()), (1, 0));
	drop(first_pub);
	assert_eq!(paths(&ready(&mut cursor)), vec![("x".into(), false)]);
	assert_eq!(origin.broadcasts(), 0);
	drop((first, second));
}

#[test]
fn a_path_is_its_owners_and_its_viewers_follow_the_owners_next_publication() {
	paused().block_on(async {
		let origin = Origin::new(1);
		let consumer = origin.consumer();
		let (alice, mallory) = (origin.producer().owned_by(1), origin.producer().owned_by(2));
		let mut cursor = consumer.announced(&Path::default());
		let x = Path::new("x");
		let (first, first_pub) = alice.create_broadcast(&x, Route::default()).unwrap();
		assert_eq!(consumer.owner(&x), Some(1));
		// Another owner cannot take a live path, not even as a backup.
		assert!(matches!(
			mallory.create_broadcast(&x, Route::default()),
			Err(Error::Taken)
		));
		assert_eq!((origin.broadcasts(), origin.backups()), (1, 0));
		assert_eq!(paths(&ready(&mut cursor)), vec![("x".into(), true)]);
		// The owner's publisher is lost: a viewer waits for what comes next at the path.
		first_pub.linger();
		let old = consumer.broadcast(&x).unwrap();
		let follower = kio::spawn({
			let consumer = consumer.clone();
			let (x, old) = (x.clone(), old.clone());
			async move { consumer.successor(&x, &old, 1, Duration::from_secs(5)).await }
		});
		kio::time::sleep(Duration::from_secs(1)).await;
		// The same owner reconnects: it takes over without watchers hearing the path go.
		let (second, second_pub) = alice.create_broadcast(&x, Route::default()).unwrap();
		assert!(ready(&mut cursor).is_empty());
		let next = follower.await.expect("joined").expect("the owner's next publication");
		assert!(next.same(&second.consume()));
		// A lingering publication holds nothing: another owner may publish once the path's
		// live publisher is gone, and a viewer of the old one does not follow it.
		drop(second_pub);
		let (_third, _third_pub) = mallory.create_broadcast(&x, Route::default()).unwrap();
		assert_eq!(consumer.owner(&x), Some(2));
		let nobody = consumer
			.successor(&x, &second.consume(), 1, Duration::from_secs(5))
			.await;
		assert!(nobody.is_none(), "another owner's publication is not a successor");
		drop((first, second));
	});
}

#[test]
fn a_path_too_deep_under_its_root_is_refused_where_it_is_made() {
	// Before, a legal 32-segment suffix under `demo` was accepted and became a 33-segment path
	// that failed to encode for every watcher rooted at `/`, resetting their whole ANNOUNCE stream.
	let origin = Origin::new(1);
	let mut root_watcher = origin.consumer().announced(&Path::default());
	let demo = origin.producer().with_root(&Path::new("demo"));
	let deep = Path::new(&vec!["s"; 32].join("/"));
	assert_eq!(deep.segments(), 32);
	let err = demo.create_broadcast(&deep, Route::default()).unwrap_err();
	assert_eq!(err, Error::BoundsExceeded);
	let long = Path::new(&"x".repeat(1020));
	assert_eq!(
		demo.create_broadcast(&long, Route::default()).unwrap_err(),
		Error::BoundsExceeded
	);
	let (_ok, _pub) = demo
		.create_broadcast(&Path::new(&vec!["s"; 31].join("/")), Route::default())
		.unwrap();
	let updates = ready(&mut root_watcher);
	assert_eq!(updates.len(), 1);
	assert!(updates[0].path.fits());
}

#[test]
fn a_stalled_watcher_holds_one_update_per_path_however_often_it_flaps() {
	// Before, each announcement appended to every watcher's queue: a watcher that stopped reading
	// while a publisher flapped one path held every flap.
	let origin = Origin::new(1);
	let producer = origin.producer();
	let (_kept, _kept_pub) = producer.create_broadcast(&Path::new("seen"), Route::default()).unwrap();
	let mut stalled = origin.consumer().announced(&Path::default());
	assert_eq!(stalled.queued(), 1);
	assert_eq!(paths(&ready(&mut stalled)), vec![("seen".into(), true)]);
	for _ in 0..10_000 {
		let (_b, publication) = producer.create_broadcast(&Path::new("flap"), Route::default()).unwrap();
		drop(publication);
		let (_c, replaced) = producer.create_broadcast(&Path::new("seen"), Route::default()).unwrap();
		drop(replaced);
	}
	// `flap` came and went unseen: nothing; `seen` was replaced and restored: gone, then back.
	assert_eq!(stalled.queued(), 2);
	let updates = ready(&mut stalled);
	assert_eq!(paths(&updates), vec![("seen".into(), false), ("seen".into(), true)]);
}

#[test]
fn a_cursor_capped_below_the_live_edge_holds_sequences_not_groups_and_few_of_them() {
	// Before, a cursor whose end cap stayed below the live edge held a consumer of every group
	// above it, keeping evicted groups' memory alive outside the pool, without limit.
	let pool = Pool::new(16 * 264);
	let track = TrackProducer::with_pool("video", TrackInfo::default(), pool.clone());
	let mut capped = track.consume();
	capped.end_at(Some(0));
	publish(&track, 0);
	assert_eq!(drain(&mut capped, false), vec![0]);
	for seq in 1..2_000 {
		publish(&track, seq);
		assert_eq!(drain(&mut capped, false), Vec::<u64>::new());
	}
	assert!(pool.used() <= pool.capacity());
	capped.end_at(None);
	let offered = drain(&mut capped, false);
	assert!(
		!offered.is_empty() && offered.len() <= 16,
		"only groups still cached: {offered:?}"
	);
	assert!(offered.windows(2).all(|w| w[0] < w[1]));
	assert_eq!(*offered.last().unwrap(), 1_999);
}

#[test]
fn raising_the_floor_offers_nothing_twice_and_clearing_it_never_repeats_the_latest() {
	// Found in review: a floor raised by `start_at` rewound and offered cached groups again, and
	// clearing a floor set after the latest was yielded offered it a second time.
	let track = track();
	publish(&track, 5);
	let mut cursor = track.consume();
	assert_eq!(drain(&mut cursor, false), vec![5]);
	cursor.raise_start(100);
	publish(&track, 6);
	assert_eq!(drain(&mut cursor, false), Vec::<u64>::new(), "below the raised floor");
	cursor.clear_start();
	assert_eq!(
		drain(&mut cursor, false),
		vec![6],
		"back to the latest, which the floor had skipped; 5, yielded, is not offered again"
	);
	cursor.clear_start();
	assert_eq!(drain(&mut cursor, false), Vec::<u64>::new(), "no floor: nothing again");
	publish(&track, 7);
	assert_eq!(drain(&mut cursor, false), vec![7]);
	// Lowering still rewinds: history asked for.
	cursor.start_at(5);
	assert_eq!(drain(&mut cursor, false), vec![5, 6, 7]);
	// A future floor set after the latest was yielded, then cleared: nothing is repeated.
	let mut fresh = track.consume();
	assert_eq!(drain(&mut fresh, false), vec![7]);
	fresh.start_at(100);
	assert_eq!(drain(&mut fresh, false), Vec::<u64>::new());
	fresh.clear_start();
	assert_eq!(drain(&mut fresh, false), Vec::<u64>::new(), "7 was yielded already");
}

/// Broadcast "bbb" of `origin`, serving requests for tracks it does not have.
fn serving(origin: &Origin) -> (BroadcastProducer, moq_net::model::Publication) {
	let (broadcast, publication) = origin
		.producer()
		.create_broadcast(&Path::new("bbb"), Route::default())
		.unwrap();
	broadcast.serve_requests();
	(broadcast, publication)
}

#[test]
fn a_views_requests_are_its_requesters_however_it_found_the_broadcast() {
	// Found in review: broadcasts from an announcement cursor did not carry the view's requester,
	// so tracks asked for through them were nobody's.
	kio::block_on(async {
		let origin = Origin::new(1);
		let (broadcast, _publication) = serving(&origin);
		let view = origin.consumer().requesting_as(9);
		let mut cursor = view.announced(&Path::default());
		let announced = cursor.next().await.broadcast.expect("announced");
		let _asked = announced.track("by-cursor").unwrap();
		let _subscribed = view
			.broadcast(&Path::new("bbb"))
			.unwrap()
			.subscribe_track("by-path", Subscription::default())
			.unwrap();
		for name in ["by-cursor", "by-path"] {
			let requested = broadcast.requested_track().await.unwrap();
			assert_eq!(requested.name(), name);
			assert_eq!(requested.requester(), Some(9), "{name}");
			assert_eq!(requested.holders(16), Some(vec![Some(9)]), "{name}");
		}
	});
}

#[test]
fn a_tracks_holders_follow_its_subscriptions_as_they_come_and_go() {
	// The holders are kept as subscriptions come and go (a spent request budget asks every
	// requested track on each new request): two of one requester's and one of another's, left in
	// turn, and seventeen requesters, past which the track is nobody's.
	kio::block_on(async {
		let origin = Origin::new(1);
		let (broadcast, _publication) = serving(&origin);
		let as_requester = |id: u64| {
			origin
				.consumer()
				.requesting_as(id)
				.broadcast(&Path::new("bbb"))
				.unwrap()
		};
		let mut first = as_requester(7)
			.subscribe_track("video", Subscription::default())
			.unwrap();
		let track = broadcast.requested_track().await.unwrap();
		let mut second = as_requester(7)
			.subscribe_track("video", Subscription::default())
			.unwrap();
		let mut other = as_requester(8)
			.subscribe_track("video", Subscription::default())
			.unwrap();
		let sorted = |holders: Option<Vec<Option<u64>>>| {
			holders.map(|mut holders| {
				holders.sort();
				holders
			})
		};
		assert_eq!(sorted(track.holders(16)), Some(vec![Some(7), Some(8)]));
		first.unsubscribe();
		assert_eq!(
			sorted(track.holders(16)),
			Some(vec![Some(7), Some(8)]),
			"7 still has one"
		);
		second.unsubscribe();
		assert_eq!(track.holders(16), Some(vec![Some(8)]));
		let many: Vec<TrackConsumer> = (100..117)
			.map(|id| {
				as_requester(id)
					.subscribe_track("video", Subscription::default())
					.unwrap()
			})
			.collect();
		assert_eq!(track.holders(16), None, "18 requesters");
		assert_eq!(track.holders(18).map(|holders| holders.len()), Some(18));
		drop(many);
		other.unsubscribe();
		assert_eq!(track.holders(16), Some(vec![Some(7)]), "nobody subscribed: its asker");
	});
}

#[test]
fn a_broadcast_that_stops_serving_drops_the_requests_waiting_and_finds_no_new_track() {
	// A relay's broadcast whose publisher went lingers: a track asked of it then waited for the
	// linger's end, while the same owner's next publication was already there to serve it (a
	// cluster test of a reconnect failed 4 times in 25 under load).
	kio::block_on(async {
		let origin = Origin::new(1);
		let (broadcast, _publication) = serving(&origin);
		let consumer = origin.consumer().broadcast(&Path::new("bbb")).unwrap();
		let mut waiting = consumer.subscribe_track("video", Subscription::default()).unwrap();
		broadcast.stop_serving();
		assert!(
			matches!(waiting.recv_group().await, Err(Error::Dropped)),
			"the waiting request is dropped"
		);
		assert!(matches!(
			consumer.subscribe_track("audio", Subscription::default()),
			Err(Error::NotFound)
		));
	});
}
