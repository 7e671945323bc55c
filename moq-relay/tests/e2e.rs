//! End-to-end: real QUIC over loopback through an in-process relay on several workers.

mod common;

use common::*;
use moq_net::model::Origin;

#[test]
fn publish_then_subscribe_through_the_relay() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let publisher_origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "bbb");
		let _publisher = publisher(&relay, &endpoint, "/live", &publisher_origin).await.unwrap();
		let viewer_origin = Origin::new(2);
		let _viewer = viewer(&relay, &endpoint, "/live", &viewer_origin).await.unwrap();
		let broadcast = announced(&viewer_origin, "bbb").await;
		let mut cursor = broadcast.subscribe_track("video", sub()).unwrap();
		track.used().await;
		for seq in 0..5 {
			publish(&track, seq);
		}
		assert_eq!(take(&mut cursor, 5).await, (0..5).map(|s| (s, s)).collect::<Vec<_>>());
	});
	relay.stop().unwrap();
}
