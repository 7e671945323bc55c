//! The relay's HTTP endpoints over TCP, end to end: `/health`, `/certificate.sha256` (the
//! fingerprint served is the one a client pins: pinning it connects, one bit off does not) and
//! `/metrics` (sessions, media counters, the cache, per-worker runtime counters).

mod common;

use std::time::Duration;

use common::*;
use moq_client::http::{self, ClientResponse};
use moq_net::model::Origin;
use moq_quic::{ConnectionError, Verification};

async fn get(relay: &Relay, path: &str) -> ClientResponse {
	let addr = relay.bound.http.expect("the test relay serves HTTP");
	within(Duration::from_secs(5), path, http::get(addr, path))
		.await
		.unwrap_or_else(|err| panic!("GET {path}: {err}"))
}

/// The value of the sample `series` (a name with its labels, as written) in an exposition.
fn sample(text: &str, series: &str) -> Option<u64> {
	text.lines()
		.filter(|line| !line.starts_with('#'))
		.find_map(|line| match line.rsplit_once(' ') {
			Some((name, value)) if name == series => {
				Some(value.parse().unwrap_or_else(|_| panic!("{line}: not an integer")))
			}
			_ => None,
		})
}

/// Like [`sample`], for a series that must be there.
fn value(text: &str, series: &str) -> u64 {
	sample(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

#[test]
fn health_answers_ok() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let health = get(&relay, "/health").await;
		assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
		assert_eq!(get(&relay, "/nothing-here").await.status, 404);
	});
	relay.stop().unwrap();
}

#[test]
fn the_fingerprint_served_is_the_one_a_client_pins() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let served = get(&relay, "/certificate.sha256").await;
		assert_eq!(served.status, 200);
		assert_eq!(served.body, relay.bound.fingerprint);
		let fingerprint = moq_quic::tls::parse_fingerprint(&served.body).expect("64 hex digits");
		let endpoint = endpoint(&relay);
		let connect = |pinned: [u8; 32]| {
			let url = relay.url("/");
			let endpoint = &endpoint;
			let addr = relay.bound.quic;
			async move {
				let verification = Verification::Fingerprints(vec![pinned]);
				let origin = Origin::new(9);
				connect_client(
					endpoint,
					addr,
					&url,
					&verification,
					origin.id(),
					None,
					Some(origin.producer()),
				)
				.await
			}
		};
		let pinned = within(Duration::from_secs(5), "the pinned connect", connect(fingerprint)).await;
		let client = pinned.expect("pinning the served fingerprint connects");
		client.connection().close(0, "done");
		let mut wrong = fingerprint;
		wrong[31] ^= 1;
		let refused = within(Duration::from_secs(5), "the mis-pinned connect", connect(wrong)).await;
		match refused {
			Ok(_) => panic!("a fingerprint one bit off was accepted"),
			// The handshake failed: the client refused the certificate, not something later.
			Err(err) => assert!(
				err.downcast_ref::<ConnectionError>().is_some(),
				"not a handshake failure: {err:#}"
			),
		}
		// Both closes reach the relay before it stops, or it would wait out its drain deadline
		// for connections whose client vanished.
		within(
			Duration::from_secs(5),
			"the client's connections closed",
			endpoint.drained(),
		)
		.await;
	});
	relay.stop().unwrap();
}

#[test]
fn metrics_count_sessions_media_and_the_cache() {
	let workers = 2;
	let relay = Relay::start(workers);
	runtime().block_on(async {
		let metrics = get(&relay, "/metrics").await;
		assert_eq!(metrics.status, 200);
		assert!(
			metrics
				.content_type
				.as_deref()
				.is_some_and(|t| t.starts_with("text/plain")),
			"{:?}",
			metrics.content_type
		);
		let idle = metrics.body;
		for series in [
			"moq_relay_sessions",
			"moq_relay_groups_in_total",
			"moq_relay_groups_out_total",
			"moq_relay_bytes_in_total",
			"moq_relay_bytes_out_total",
			"moq_relay_cache_bytes",
		] {
			assert_eq!(value(&idle, series), 0, "{series} before anything happened");
		}

		let endpoint = endpoint(&relay);
		let publisher_origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "m/cam");
		let _publisher = publisher(&relay, &endpoint, "/", &publisher_origin).await.unwrap();
		let viewer_origin = Origin::new(2);
		let _viewer = viewer(&relay, &endpoint, "/", &viewer_origin).await.unwrap();
		// The publisher's announcement reached the viewer through the relay: both sessions run.
		let broadcast = within(
			Duration::from_secs(5),
			"m/cam announced",
			announced(&viewer_origin, "m/cam"),
		)
		.await;
		let connected = get(&relay, "/metrics").await.body;
		assert_eq!(value(&connected, "moq_relay_sessions"), 2);
		assert_eq!(value(&connected, "moq_relay_sessions_total"), 2);
		assert_eq!(value(&connected, "moq_relay_connections"), 2);
		assert_eq!(value(&connected, "moq_relay_broadcasts"), 1);
		assert_eq!(value(&connected, "moq_relay_groups_in_total"), 0);

		let mut cursor = broadcast.subscribe_track("video", sub()).unwrap();
		within(Duration::from_secs(5), "the relay's subscription", track.used()).await;
		for seq in 0..5 {
			publish(&track, seq);
		}
		let got = within(Duration::from_secs(5), "five groups", take(&mut cursor, 5)).await;
		assert_eq!(got.len(), 5);
		// Each group is one 8-byte frame; the relay counts a group when it starts ingesting or
		// sending it and a frame's bytes before it reaches the cache or the viewer, so all of it
		// is counted by the time the viewer has it.
		let flowed = get(&relay, "/metrics").await.body;
		assert_eq!(value(&flowed, "moq_relay_groups_in_total"), 5);
		assert_eq!(value(&flowed, "moq_relay_groups_out_total"), 5);
		assert_eq!(value(&flowed, "moq_relay_bytes_in_total"), 40);
		assert_eq!(value(&flowed, "moq_relay_bytes_out_total"), 40);
		assert!(value(&flowed, "moq_relay_cache_bytes") > 0, "the groups are cached");
		assert_eq!(value(&flowed, "moq_relay_cache_capacity_bytes"), 64 << 20);

		for worker in 0..workers {
			let enters = format!("kio_uring_enter_total{{worker=\"{worker}\"}}");
			assert!(value(&flowed, &enters) > 0, "{enters}");
			let turns = format!("kio_loop_turns_total{{worker=\"{worker}\"}}");
			assert!(value(&flowed, &turns) > 0, "{turns}");
			// Two connections never fill a worker's 1 MiB send queue.
			let waits = format!("moq_relay_udp_send_queue_waits_total{{worker=\"{worker}\"}}");
			assert_eq!(sample(&flowed, &waits), Some(0), "{waits}");
		}
		assert_eq!(
			sample(&flowed, &format!("kio_uring_enter_total{{worker=\"{workers}\"}}")),
			None
		);
	});
	relay.stop().unwrap();
}
