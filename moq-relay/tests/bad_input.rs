//! Bad input end to end: a connection that breaks the protocol is closed with the spec's code,
//! while a healthy viewer on the same relay worker keeps receiving every group.
//!
//! Every connection of a case comes from one client socket, so the relay's `SO_REUSEPORT` hash
//! puts them all on the same worker as the healthy viewer.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use moq_net::coding::Encode;
use moq_net::lite::session;
use moq_net::lite::{ControlType, DataType, GroupHeader, Setup};
use moq_net::model::Origin;
use moq_quic::Connection;

/// Runs one case: the offender must be closed with `code`, and the healthy viewer on the same
/// worker receives before and after.
async fn case(relay: &Relay, setup: bool, offend: impl AsyncFnOnce(&Connection), code: u64) {
	let endpoint = endpoint(relay);
	let mut healthy = Healthy::new(relay, &endpoint).await;
	healthy.still_receives().await;
	let conn = raw(relay, &endpoint, setup).await;
	offend(&conn).await;
	assert_eq!(close_code(&conn).await, code);
	healthy.still_receives().await;
	healthy.still_receives().await;
}

#[test]
fn garbage_on_a_stream_closes_only_the_offender() {
	let relay = Relay::start(2);
	runtime().block_on(case(
		&relay,
		true,
		async |conn| {
			// SUBSCRIBE whose declared length runs past its fields: Decode (5).
			let mut bytes = Vec::new();
			u64::from(ControlType::Subscribe).encode(&mut bytes);
			bytes.extend_from_slice(&[0x03, 0x00, 0x00, 0x00]);
			let (mut send, _recv) = conn.open_bi().await.unwrap();
			send.write(Bytes::from(bytes)).await.unwrap();
			std::mem::forget((send, _recv));
		},
		5,
	));
	relay.stop().unwrap();
}

#[test]
fn an_unknown_subscribe_id_closes_only_the_offender() {
	let relay = Relay::start(2);
	runtime().block_on(case(
		&relay,
		true,
		async |conn| {
			let mut send = conn.open_uni().await.unwrap();
			let header = GroupHeader {
				subscribe_id: 999,
				sequence: 0,
			};
			send.write(Bytes::from(typed(u64::from(DataType::Group), &header)))
				.await
				.unwrap();
			std::mem::forget(send);
		},
		15,
	));
	relay.stop().unwrap();
}

#[test]
fn an_invalid_setup_closes_the_connection() {
	let relay = Relay::start(2);
	runtime().block_on(case(
		&relay,
		false,
		async |conn| {
			// SETUP with a duplicate parameter: Decode (5).
			let mut setup = conn.open_uni().await.unwrap();
			setup
				.write(Bytes::from_static(test_support::DUPLICATE_PARAMETER_SETUP))
				.await
				.unwrap();
			setup.finish().unwrap();
		},
		5,
	));
	relay.stop().unwrap();
}

#[test]
fn an_oversized_frame_closes_only_the_offender() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		// A publisher that answers a real subscription with a frame over the cap: its session
		// runs normally, and the group stream is forged on its raw connection.
		let evil_origin = Origin::new(5);
		let (_broadcast, track, _publication) = local_broadcast(&evil_origin, "evil");
		let conn = raw(&relay, &endpoint, false).await;
		let config = session::Config {
			origin: 5,
			path: Some("/".into()),
			..session::Config::default()
		};
		let peer = session::setup(&conn, &config).await.unwrap();
		let _session = session::start(conn.clone(), config, peer, Some(evil_origin.consumer()), None);
		let viewer_origin = Origin::new(6);
		let _viewer = viewer(&relay, &endpoint, "/", &viewer_origin).await.unwrap();
		let _cursor = announced(&viewer_origin, "evil")
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		let mut send = conn.open_uni().await.unwrap();
		send.write(Bytes::from(test_support::oversized_group(0))).await.unwrap();
		assert_eq!(close_code(&conn).await, 27);
		healthy.still_receives().await;
		healthy.still_receives().await;
	});
	relay.stop().unwrap();
}

#[test]
fn a_silent_connection_is_closed_after_the_setup_timeout() {
	// The SETUP deadline is real time (10 s by default, `--setup-timeout`); 2 s here.
	let limits = moq_relay::limits::Limits {
		setup_timeout: Duration::from_secs(2),
		..moq_relay::limits::Limits::default()
	};
	let relay = Relay::start_limited(1, limits, 64 << 20);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let conn = raw(&relay, &endpoint, false).await;
		let started = std::time::Instant::now();
		assert_eq!(close_code(&conn).await, 3, "Timeout");
		assert!(started.elapsed() >= limits.setup_timeout - Duration::from_millis(500));
	});
	relay.stop().unwrap();
}

#[test]
fn bad_setups_never_take_the_relay_down() {
	// A burst of malformed SETUPs of every size: each offender is closed, the relay answers the
	// next client as usual.
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut valid = Vec::new();
		u64::from(DataType::Setup).encode(&mut valid);
		Setup::new().with_origin(9).with_path("/x").encode(&mut valid);
		for cut in 1..valid.len() {
			let conn = raw(&relay, &endpoint, false).await;
			let mut setup = conn.open_uni().await.unwrap();
			let mut bytes = valid[..cut].to_vec();
			bytes.push(0xff);
			setup.write(Bytes::from(bytes)).await.unwrap();
			setup.finish().unwrap();
			let code = close_code(&conn).await;
			assert_ne!(code, 0, "closed with an error code");
		}
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		healthy.still_receives().await;
	});
	relay.stop().unwrap();
}
