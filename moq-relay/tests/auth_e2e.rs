//! Auth end-to-end: a relay that only takes HS256 tokens (no anonymous access), real QUIC over
//! loopback. A valid token publishes and subscribes within its prefixes; outside them the relay
//! ignores the announcement or refuses the request with Unauthorized (6); an expired, unsigned,
//! foreign or missing token gets the connection closed with Unauthorized; a token that expires
//! during a session closes it then.

mod common;

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use common::*;
use moq_net::coding::{Decode, Encode};
use moq_net::lite::session::SessionError;
use moq_net::lite::{ControlType, ErrorCode, Subscribe, Track, TrackInfo as WireTrackInfo};
use moq_net::model::{Origin, Path};
use moq_net::transport::TransportError;
use moq_quic::{Connection, ConnectionError, StreamError};
use moq_relay::auth::{self, Anonymous, AuthConfig};
use serde_json::json;

/// The relay's HMAC secret (HS256 wants at least 32 bytes).
const KEY: &[u8] = b"the relay's HS256 secret, 32 bytes or more";
/// Moq-lite's Unauthorized.
const UNAUTHORIZED: u64 = 6;

/// A relay on two workers that takes tokens signed with [`KEY`] and nothing else.
fn relay(test: &str) -> Relay {
	let keys = KeyFile::hs256(test, KEY);
	// The key file is read at start; it can go once the relay is up.
	Relay::start_with(
		2,
		AuthConfig {
			key_file: Some(keys.0.clone()),
			anonymous: Anonymous::none(),
		},
	)
}

fn now() -> f64 {
	SystemTime::now()
		.duration_since(SystemTime::UNIX_EPOCH)
		.unwrap()
		.as_secs_f64()
}

/// An HS256 token with `claims` and an expiry ten minutes away unless `claims` has one.
fn token(mut claims: serde_json::Value) -> String {
	if claims.get("exp").is_none() {
		claims["exp"] = json!(now().floor() + 600.0);
	}
	auth::sign_hs256(&claims, KEY)
}

/// The connection path for `token` under `/live`.
fn live(token: &str) -> String {
	format!("/live?jwt={token}")
}

/// Connects a viewer on `path` that the relay must refuse; the code it closes the connection
/// with. The relay sends its SETUP before reading ours, so the client's SETUP exchange usually
/// completes and the close comes after; if the close wins the race, `connect` fails with it.
async fn refusal(relay: &Relay, path: &str) -> u64 {
	let endpoint = endpoint(relay);
	let origin = Origin::new(7);
	match viewer(relay, &endpoint, path, &origin).await {
		Ok(client) => match within(
			Duration::from_secs(5),
			"the relay's close",
			client.connection().closed(),
		)
		.await
		{
			ConnectionError::ApplicationClosed(close) => close.error_code.into_inner(),
			other => panic!("the connection ended without an application close: {other}"),
		},
		Err(err) => match err.downcast_ref::<SessionError>() {
			Some(SessionError::Transport(TransportError::Closed(code))) => *code,
			_ => panic!("connect failed other than by the relay's close: {err:#}"),
		},
	}
}

/// Sends a request of type `kind` on a new bidirectional stream, without finishing it, and
/// reads the answer to its end: the bytes, or the code the relay reset the stream with.
async fn request(conn: &Connection, kind: ControlType, message: &impl Encode) -> Result<Vec<u8>, u64> {
	let (mut send, mut recv) = conn.open_bi().await.expect("a request stream");
	let mut out = Vec::new();
	u64::from(kind).try_encode(&mut out).unwrap();
	message.try_encode(&mut out).unwrap();
	send.write(Bytes::from(out)).await.expect("the request sent");
	let mut answer = Vec::new();
	loop {
		match recv.read().await {
			Ok(Some(chunk)) => answer.extend_from_slice(&chunk),
			Ok(None) => return Ok(answer),
			Err(StreamError::Reset(code)) => return Err(code),
			Err(err) => panic!("the request stream failed: {err}"),
		}
	}
}

/// TRACK for `broadcast`'s "video": its info, or the reset code.
async fn track_info(conn: &Connection, broadcast: &str) -> Result<WireTrackInfo, u64> {
	let message = Track {
		broadcast: Path::new(broadcast),
		track: "video".into(),
	};
	let answer = request(conn, ControlType::Track, &message).await?;
	Ok(WireTrackInfo::decode_exact(&answer).expect("a TRACK_INFO"))
}

/// SUBSCRIBE to `broadcast`'s "video" from the latest group: the reset code, if any.
async fn subscribe(conn: &Connection, broadcast: &str) -> Result<Vec<u8>, u64> {
	let message = Subscribe {
		// Far above the ids the client's own session hands out.
		id: 1 << 40,
		broadcast: Path::new(broadcast),
		track: "video".into(),
		priority: 0,
		ordered: true,
		latency_max: Duration::from_secs(1),
		start: None,
		end: None,
	};
	request(conn, ControlType::Subscribe, &message).await
}

#[test]
fn a_token_publishes_and_subscribes_within_its_prefixes() {
	let relay = relay("within");
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let publisher_origin = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, "alice/cam");
		let put = token(json!({"root": "live", "put": ["alice"], "get": [""]}));
		let _publisher = publisher(&relay, &endpoint, &live(&put), &publisher_origin)
			.await
			.expect("the publisher's token is accepted");
		let viewer_origin = Origin::new(2);
		let get = token(json!({"root": "live", "get": [""]}));
		let _viewer = viewer(&relay, &endpoint, &live(&get), &viewer_origin)
			.await
			.expect("the viewer's token is accepted");
		let broadcast = within(
			Duration::from_secs(5),
			"alice/cam announced",
			announced(&viewer_origin, "alice/cam"),
		)
		.await;
		let mut cursor = broadcast.subscribe_track("video", sub()).unwrap();
		within(Duration::from_secs(5), "the relay's subscription", track.used()).await;
		for seq in 0..3 {
			publish(&track, seq);
		}
		let got = within(Duration::from_secs(5), "three groups", take(&mut cursor, 3)).await;
		assert_eq!(got, vec![(0, 0), (1, 1), (2, 2)]);
	});
	relay.stop().unwrap();
}

#[test]
fn an_announcement_outside_the_put_prefixes_is_ignored() {
	let relay = relay("outside-put");
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let viewer_origin = Origin::new(2);
		let mut announcements = viewer_origin.consumer().announced(&Path::default());
		let get = token(json!({"root": "live", "get": [""]}));
		let viewer = viewer(&relay, &endpoint, &live(&get), &viewer_origin).await.unwrap();
		// Both exist before the publisher connects, so it announces them as its current set, in
		// path order, on one stream: "adam/cam" (outside "alice") first. The relay takes
		// announcements in order, and its announcement stream to the viewer follows its origin in
		// order, so had "adam/cam" been accepted the viewer would see it before "alice/cam2".
		let publisher_origin = Origin::new(1);
		let _outside = local_broadcast(&publisher_origin, "adam/cam");
		let _inside = local_broadcast(&publisher_origin, "alice/cam2");
		let put = token(json!({"root": "live", "put": ["alice"]}));
		let _publisher = publisher(&relay, &endpoint, &live(&put), &publisher_origin)
			.await
			.unwrap();
		let first = within(Duration::from_secs(5), "an announcement", announcements.next()).await;
		assert_eq!(first.path, Path::new("alice/cam2"));
		assert!(first.broadcast.is_some());
		assert!(viewer_origin.consumer().get_broadcast(&Path::new("adam/cam")).is_none());
		// And the relay has nothing there: a viewer allowed everywhere finds nothing (13), which
		// is not a refusal.
		assert_eq!(
			track_info(viewer.connection(), "adam/cam").await,
			Err(ErrorCode::NotFound.code())
		);
		assert_eq!(
			track_info(viewer.connection(), "alice/cam2").await.unwrap().timescale,
			1000
		);
	});
	relay.stop().unwrap();
}

#[test]
fn a_request_outside_the_get_prefixes_is_refused_with_unauthorized() {
	let relay = relay("outside-get");
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let publisher_origin = Origin::new(1);
		let _secret = local_broadcast(&publisher_origin, "alice/cam");
		let _public = local_broadcast(&publisher_origin, "public/cam");
		let put = token(json!({"root": "live", "put": ["alice", "public"]}));
		let _publisher = publisher(&relay, &endpoint, &live(&put), &publisher_origin)
			.await
			.unwrap();
		let viewer_origin = Origin::new(2);
		let get = token(json!({"root": "live", "get": ["public"]}));
		let viewer = viewer(&relay, &endpoint, &live(&get), &viewer_origin).await.unwrap();
		// The publisher announces "alice/cam" before "public/cam" (path order, one stream), so
		// once the viewer sees "public/cam" the relay has both.
		within(
			Duration::from_secs(5),
			"public/cam announced",
			announced(&viewer_origin, "public/cam"),
		)
		.await;
		assert!(
			viewer_origin
				.consumer()
				.get_broadcast(&Path::new("alice/cam"))
				.is_none()
		);
		// The viewer's session never asks for what it was not told of, so ask on raw streams.
		assert_eq!(track_info(viewer.connection(), "alice/cam").await, Err(UNAUTHORIZED));
		assert_eq!(subscribe(viewer.connection(), "alice/cam").await, Err(UNAUTHORIZED));
		// Outside the prefixes even a path with nothing there is refused, not "not found".
		assert_eq!(track_info(viewer.connection(), "nobody/cam").await, Err(UNAUTHORIZED));
		// Within them, the same requests are served.
		assert_eq!(
			track_info(viewer.connection(), "public/cam").await.unwrap().timescale,
			1000
		);
		assert_eq!(
			track_info(viewer.connection(), "public/none").await,
			Err(ErrorCode::NotFound.code())
		);
		// The refusals reset single requests; the session goes on.
		assert!(
			viewer_origin
				.consumer()
				.get_broadcast(&Path::new("public/cam"))
				.is_some()
		);
	});
	relay.stop().unwrap();
}

#[test]
fn an_expired_token_is_refused() {
	let relay = relay("expired");
	runtime().block_on(async {
		let expired = token(json!({"root": "live", "get": [""], "exp": now().floor() - 60.0}));
		assert_eq!(refusal(&relay, &live(&expired)).await, UNAUTHORIZED);
		let early = token(json!({"root": "live", "get": [""], "nbf": now().floor() + 600.0}));
		assert_eq!(refusal(&relay, &live(&early)).await, UNAUTHORIZED);
	});
	relay.stop().unwrap();
}

#[test]
fn an_unsigned_token_is_refused() {
	let relay = relay("unsigned");
	runtime().block_on(async {
		let claims = json!({"root": "live", "put": [""], "get": [""], "exp": now().floor() + 600.0});
		let unsigned = auth::encode(&json!({"alg": "none", "typ": "JWT"}), &claims, |_| Vec::new());
		assert!(unsigned.ends_with('.'), "{unsigned}");
		assert_eq!(refusal(&relay, &live(&unsigned)).await, UNAUTHORIZED);
		// Nor does claiming HS256 without a signature help, nor signing with another key.
		let empty = auth::encode(&json!({"alg": "HS256", "typ": "JWT"}), &claims, |_| Vec::new());
		assert_eq!(refusal(&relay, &live(&empty)).await, UNAUTHORIZED);
		let forged = auth::sign_hs256(&claims, b"some other secret of thirty-two bytes");
		assert_eq!(refusal(&relay, &live(&forged)).await, UNAUTHORIZED);
		// The same claims signed with the relay's key are accepted: the refusals were the
		// signatures'.
		let endpoint = endpoint(&relay);
		let signed = auth::sign_hs256(&claims, KEY);
		let origin = Origin::new(3);
		let client = viewer(&relay, &endpoint, &live(&signed), &origin).await.unwrap();
		assert_eq!(
			track_info(client.connection(), "x").await,
			Err(ErrorCode::NotFound.code())
		);
	});
	relay.stop().unwrap();
}

#[test]
fn a_token_for_another_root_is_refused() {
	let relay = relay("other-root");
	runtime().block_on(async {
		let other = token(json!({"root": "other", "put": [""], "get": [""]}));
		assert_eq!(refusal(&relay, &live(&other)).await, UNAUTHORIZED);
		// "live" does not cover "lively": roots match whole segments.
		let live_root = token(json!({"root": "live", "get": [""]}));
		assert_eq!(refusal(&relay, &format!("/lively?jwt={live_root}")).await, UNAUTHORIZED);
	});
	relay.stop().unwrap();
}

#[test]
fn no_token_is_refused_without_anonymous_access() {
	let relay = relay("no-token");
	runtime().block_on(async {
		assert_eq!(refusal(&relay, "/live").await, UNAUTHORIZED);
		assert_eq!(refusal(&relay, "/").await, UNAUTHORIZED);
		assert_eq!(refusal(&relay, "/live?other=1").await, UNAUTHORIZED);
	});
	relay.stop().unwrap();
}

#[test]
fn a_token_expiring_during_a_session_closes_it_with_unauthorized() {
	let relay = relay("expiry");
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let publisher_origin = Origin::new(1);
		let _broadcast = local_broadcast(&publisher_origin, "cam");
		let put = token(json!({"root": "live", "put": [""]}));
		let _publisher = publisher(&relay, &endpoint, &live(&put), &publisher_origin)
			.await
			.unwrap();
		let expires = now() + 2.0;
		let short = token(json!({"root": "live", "get": [""], "exp": expires}));
		let viewer_origin = Origin::new(2);
		let short_lived = viewer(&relay, &endpoint, &live(&short), &viewer_origin).await.unwrap();
		within(
			Duration::from_secs(5),
			"cam announced",
			announced(&viewer_origin, "cam"),
		)
		.await;
		assert!(now() < expires, "the session worked before the expiry");
		let closed = within(
			Duration::from_secs(5),
			"the close at expiry",
			short_lived.connection().closed(),
		)
		.await;
		let at = now();
		match closed {
			ConnectionError::ApplicationClosed(close) => assert_eq!(close.error_code.into_inner(), UNAUTHORIZED),
			other => panic!("closed other than by the relay: {other}"),
		}
		// Timers never fire early; the slack covers the relay reading its clock once per turn.
		assert!(at >= expires - 0.05, "closed {:.3} s before the expiry", expires - at);
		// Only that session: the publisher's goes on, as a new viewer finds.
		let again = token(json!({"root": "live", "get": [""]}));
		let fresh_origin = Origin::new(3);
		let _fresh = viewer(&relay, &endpoint, &live(&again), &fresh_origin).await.unwrap();
		within(
			Duration::from_secs(5),
			"cam still announced",
			announced(&fresh_origin, "cam"),
		)
		.await;
	});
	relay.stop().unwrap();
}
