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
use moq_net::{Frame, Timestamp, TrackInfo, TrackProducer};

use crate::counter::Meter;

/// Payload bytes per frame: a small media frame, shared (reference-counted) like real payloads.
pub const PAYLOAD: usize = 1200;

const WARM_UP: u64 = 2;

/// Runs the model fan-out with `subscribers` tasks for `cycles` measured cycles; returns the
/// number of deliveries measured.
pub fn model(subscribers: usize, cycles: u64, meter: &mut dyn Meter) -> u64 {
	let rt = kio::Builder::new()
		.workers(1)
		.pin(true)
		.build()
		.expect("a kio runtime starts");
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
		let payload = Bytes::from(vec![0x5a; PAYLOAD]);
		let publish = |cycle: u64| {
			let frame = Frame {
				timestamp: Timestamp::new(cycle, 1000),
				payload: payload.clone(),
			};
			track.write_frame(frame).expect("the track is open");
		};
		let mut target = 0;
		for cycle in 0..WARM_UP + cycles {
			if cycle == WARM_UP {
				meter.start();
			}
			publish(cycle);
			target += subscribers as u64;
			while delivered.get() < target {
				kio::yield_now().await;
			}
		}
		meter.stop();
		track.finish().expect("the track is open");
		for reader in readers {
			reader.await.expect("readers end cleanly");
		}
		delivered.get() - WARM_UP * subscribers as u64
	})
}
