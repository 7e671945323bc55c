//! WebTransport over HTTP/3 end to end, over loopback: sessions through the relay between
//! WebTransport and raw-QUIC clients both ways, the sub-protocol negotiated, auth through the
//! CONNECT query, and bad HTTP/3 input answered with HTTP/3's codes while the connection's
//! session (or the relay's other connections) keep working.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use moq_client::{Session, Url};
use moq_net::model::Origin;
use moq_quic::h3::{self, ConnectRequest, ConnectResponse, Settings, code, frame_type, stream_type};
use moq_quic::webtransport::{self, WebTransport};
use moq_quic::{Connection, Endpoint, StreamError};
use moq_relay::auth::{self, Anonymous, AuthConfig};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(20);

fn https(relay: &Relay, path: &str) -> Url {
	Url::parse(&format!("https://localhost:{}{path}", relay.bound.quic.port())).unwrap()
}

async fn wt(relay: &Relay, endpoint: &Endpoint, path: &str, origin: &Origin, publish: bool) -> Session {
	let (publish, subscribe) = if publish {
		(Some(origin.consumer()), None)
	} else {
		(None, Some(origin.producer()))
	};
	within(
		LIMIT,
		"a WebTransport session",
		connect_client(
			endpoint,
			relay.bound.quic,
			&https(relay, path),
			&relay.verification(),
			origin.id(),
			publish,
			subscribe,
		),
	)
	.await
	.unwrap()
}

#[test]
fn webtransport_and_raw_quic_clients_see_each_other() {
	let relay = Relay::start(2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		// A WebTransport publisher, a raw-QUIC viewer.
		let alice = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&alice, "alice");
		let wt_publisher = wt(&relay, &endpoint, "/room", &alice, true).await;
		assert_eq!(wt_publisher.protocol(), Some("moq-lite-05"));
		let quic_viewer_origin = Origin::new(2);
		let _quic_viewer = viewer(&relay, &endpoint, "/room", &quic_viewer_origin).await.unwrap();
		let mut cursor = within(LIMIT, "alice over raw QUIC", announced(&quic_viewer_origin, "alice"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		for seq in 0..5 {
			publish(&track, seq);
		}
		let got = within(LIMIT, "alice's groups over raw QUIC", take(&mut cursor, 5)).await;
		assert_eq!(got, (0..5).map(|s| (s, s)).collect::<Vec<_>>());

		// A raw-QUIC publisher, a WebTransport viewer.
		let bob = Origin::new(3);
		let (_broadcast, track, _publication) = local_broadcast(&bob, "bob");
		let _quic_publisher = publisher(&relay, &endpoint, "/room", &bob).await.unwrap();
		let wt_viewer_origin = Origin::new(4);
		let wt_viewer = wt(&relay, &endpoint, "/room", &wt_viewer_origin, false).await;
		let mut cursor = within(LIMIT, "bob over WebTransport", announced(&wt_viewer_origin, "bob"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		for seq in 0..5 {
			publish(&track, seq);
		}
		let got = within(LIMIT, "bob's groups over WebTransport", take(&mut cursor, 5)).await;
		assert_eq!(got, (0..5).map(|s| (s, s)).collect::<Vec<_>>());

		// Closing a WebTransport session reaches the relay with its code.
		wt_viewer.close(0);
		let code = within(LIMIT, "the close", wt_viewer.connection().closed()).await;
		assert!(
			matches!(
				code,
				moq_quic::ConnectionError::LocallyClosed | moq_quic::ConnectionError::ApplicationClosed(_)
			),
			"{code:?}"
		);
		drop(wt_publisher);
	});
}

/// The relay's HMAC secret (HS256 wants at least 32 bytes).
const KEY: &[u8] = b"the relay's HS256 secret, 32 bytes or more";

/// A relay on one worker that takes tokens signed with [`KEY`] and nothing else. `test` names
/// the key file (tests of this binary run on parallel threads of one process).
fn auth_relay(test: &str) -> Relay {
	let path = std::env::temp_dir().join(format!("moq-relay-test-{}-{test}.jwks.json", std::process::id()));
	let jwks = json!({"keys": [{"kty": "oct", "alg": "HS256", "k": auth::base64url_encode(KEY)}]});
	std::fs::write(&path, jwks.to_string()).unwrap();
	let relay = Relay::start_with(
		1,
		AuthConfig {
			key_file: Some(path.clone()),
			anonymous: Anonymous::none(),
		},
	);
	// The key file is read at start.
	let _ = std::fs::remove_file(&path);
	relay
}

/// A token for `claims`, expiring `seconds` from now.
fn token(mut claims: serde_json::Value, seconds: u64) -> String {
	let now = std::time::SystemTime::now()
		.duration_since(std::time::UNIX_EPOCH)
		.unwrap()
		.as_secs();
	claims["exp"] = json!(now + seconds);
	auth::sign_hs256(&claims, KEY)
}

#[test]
fn a_token_in_the_connect_query_is_honoured_like_one_in_setup() {
	let relay = auth_relay("wt");
	let token = token(json!({"root": "live", "put": [""], "get": [""]}), 600);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		// No token: the CONNECT is refused with 403.
		let origin = Origin::new(1);
		let (url, verification) = (https(&relay, "/live"), relay.verification());
		let refused = connect_client(
			&endpoint,
			relay.bound.quic,
			&url,
			&verification,
			1,
			None,
			Some(origin.producer()),
		);
		let err = within(LIMIT, "the refusal", refused).await.err().expect("refused");
		assert!(
			matches!(
				err.downcast_ref::<webtransport::Error>(),
				Some(webtransport::Error::Status(403))
			),
			"{err:#}"
		);
		// With the token in the query: a session rooted at /live.
		let alice = Origin::new(2);
		let (_broadcast, track, _publication) = local_broadcast(&alice, "alice");
		let _publisher = wt(&relay, &endpoint, &format!("/live?jwt={token}"), &alice, true).await;
		let viewer_origin = Origin::new(3);
		let _viewer = wt(&relay, &endpoint, &format!("/live?jwt={token}"), &viewer_origin, false).await;
		let mut cursor = within(LIMIT, "alice", announced(&viewer_origin, "alice"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		publish(&track, 0);
		assert_eq!(within(LIMIT, "a group", take(&mut cursor, 1)).await, [(0, 0)]);
	});
}

/// A bare HTTP/3 connection to the relay: ALPN h3, our control stream with SETTINGS sent.
async fn h3_connection(relay: &Relay, endpoint: &Endpoint, settings: bool) -> Connection {
	let conn = quic_to(endpoint, relay.bound.quic, &relay.verification(), h3::ALPN).await;
	let mut control = conn.open_uni().await.unwrap();
	let mut bytes = Vec::new();
	h3::put_varint(&mut bytes, stream_type::CONTROL);
	if settings {
		Settings::webtransport().encode(&mut bytes);
	} else {
		// A GOAWAY where SETTINGS must be.
		h3::put_frame(&mut bytes, frame_type::GOAWAY, &[0]);
	}
	control.write(Bytes::from(bytes)).await.unwrap();
	// The control stream must stay open: leak the handle into a task that never ends.
	drop(kio::spawn(async move {
		let _control = control;
		std::future::pending::<()>().await
	}));
	conn
}

/// Sends `request` on a new bidirectional stream and reads the response's status.
async fn connect_raw(conn: &Connection, headers: Vec<u8>) -> Option<u16> {
	let (mut send, mut recv) = conn.open_bi().await.unwrap();
	send.write(Bytes::from(headers)).await.unwrap();
	let bytes = recv.read_to_end(64 << 10).await.ok()?;
	let mut view = bytes.as_slice();
	let (kind, block) = h3::get_frame(&mut view, h3::MAX_FIELD_SECTION).ok()?;
	assert_eq!(kind, frame_type::HEADERS);
	Some(
		ConnectResponse::from_fields(&h3::decode_fields(block).unwrap())
			.unwrap()
			.status,
	)
}

fn request(path: &str) -> ConnectRequest {
	ConnectRequest {
		authority: "localhost".into(),
		path: path.into(),
		protocols: vec!["moq-lite-05".into()],
		origin: None,
	}
}

#[test]
fn a_malformed_connect_gets_400_and_the_relay_serves_on() {
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let conn = h3_connection(&relay, &endpoint, true).await;
		// `:protocol` websocket: not a WebTransport CONNECT.
		let mut block = Vec::new();
		h3::put_frame(
			&mut block,
			frame_type::HEADERS,
			&h3::encode_fields(&[
				(":method", "CONNECT"),
				(":protocol", "websocket"),
				(":scheme", "https"),
				(":authority", "localhost"),
				(":path", "/"),
			]),
		);
		assert_eq!(within(LIMIT, "the answer", connect_raw(&conn, block)).await, Some(400));
		assert_eq!(within(LIMIT, "the close", close_code(&conn)).await, code::MESSAGE_ERROR);
		// A field section with a dynamic-table reference.
		let conn = h3_connection(&relay, &endpoint, true).await;
		let mut block = Vec::new();
		h3::put_frame(&mut block, frame_type::HEADERS, &[0, 0, 0x80]);
		assert_eq!(within(LIMIT, "the answer", connect_raw(&conn, block)).await, Some(400));
		assert_eq!(
			within(LIMIT, "the close", close_code(&conn)).await,
			code::QPACK_DECOMPRESSION_FAILED
		);
		healthy.still_receives().await;
	});
}

#[test]
fn a_control_stream_without_settings_closes_with_missing_settings() {
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let conn = h3_connection(&relay, &endpoint, false).await;
		assert_eq!(
			within(LIMIT, "the close", close_code(&conn)).await,
			code::MISSING_SETTINGS
		);
		healthy.still_receives().await;
	});
}

/// A WebTransport session opened by hand, so the test can also open streams the client never would.
async fn session(relay: &Relay, endpoint: &Endpoint) -> (Connection, WebTransport) {
	let conn = quic_to(endpoint, relay.bound.quic, &relay.verification(), h3::ALPN).await;
	let (transport, response) = webtransport::connect(&conn, &request("/")).await.unwrap();
	assert_eq!(response.status, 200);
	(conn, transport)
}

#[test]
fn unknown_streams_and_foreign_sessions_are_refused_and_the_session_lives_on() {
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let (conn, transport) = within(LIMIT, "a session", session(&relay, &endpoint)).await;
		let config = moq_net::lite::session::Config {
			origin: 9,
			..moq_net::lite::session::Config::default()
		};
		let viewer_origin = Origin::new(9);
		let peer = within(LIMIT, "SETUP", moq_net::lite::session::setup(&transport, &config))
			.await
			.unwrap();
		let _session =
			moq_net::lite::session::start(transport.clone(), config, peer, None, Some(viewer_origin.producer()));

		// An unknown stream type: stopped with H3_STREAM_CREATION_ERROR.
		let mut unknown = conn.open_uni().await.unwrap();
		unknown.write(Bytes::from_static(&[0x3f, 1, 2, 3])).await.unwrap();
		let stopped = within(LIMIT, "the stop", unknown.stopped()).await;
		assert_eq!(stopped, Ok(code::STREAM_CREATION_ERROR));
		// A WebTransport stream for a session that does not exist: refused.
		let mut foreign = conn.open_uni().await.unwrap();
		let mut header = Vec::new();
		h3::put_varint(&mut header, stream_type::WEBTRANSPORT_UNI);
		h3::put_varint(&mut header, 4 * 25);
		header.extend_from_slice(b"moq bytes");
		foreign.write(Bytes::from(header)).await.unwrap();
		let stopped = within(LIMIT, "the stop", foreign.stopped()).await;
		assert_eq!(stopped, Ok(code::WT_BUFFERED_STREAM_REJECTED));

		// The session still works: a raw-QUIC publisher's groups arrive over it.
		let alice = Origin::new(1);
		let (_broadcast, track, _publication) = local_broadcast(&alice, "alice");
		let _publisher = publisher(&relay, &endpoint, "/", &alice).await.unwrap();
		let mut cursor = within(LIMIT, "alice", announced(&viewer_origin, "alice"))
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		publish(&track, 7);
		assert_eq!(within(LIMIT, "a group", take(&mut cursor, 1)).await, [(7, 7)]);
		assert!(matches!(
			conn.poll_closed(&kio::Waiter::new(std::task::Waker::noop().clone())),
			std::task::Poll::Pending
		));
		let _ = StreamError::Closed;
	});
}

#[test]
fn reserved_frames_before_the_connect_are_dropped_unheld() {
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let conn = h3_connection(&relay, &endpoint, true).await;
		// A 256 KiB reserved frame (type 0x21, GREASE), longer than any frame the relay would hold,
		// then the request: the first is dropped as it arrives, the second answered.
		let mut bytes = Vec::new();
		h3::put_frame(&mut bytes, 0x21, &vec![7; 256 << 10]);
		request("/").encode(&mut bytes);
		let (mut send, mut recv) = conn.open_bi().await.unwrap();
		send.write(Bytes::from(bytes)).await.unwrap();
		let mut answer = Vec::new();
		let status = loop {
			let chunk = within(LIMIT, "the answer", recv.read())
				.await
				.unwrap()
				.expect("an answer");
			answer.extend_from_slice(&chunk);
			let mut view = answer.as_slice();
			if let Ok((kind, block)) = h3::get_frame(&mut view, h3::MAX_FIELD_SECTION) {
				assert_eq!(kind, frame_type::HEADERS);
				break ConnectResponse::from_fields(&h3::decode_fields(block).unwrap())
					.unwrap()
					.status;
			}
		};
		assert_eq!(status, 200);
	});
}

#[test]
fn an_expired_token_closes_a_webtransport_session_with_unauthorized() {
	let relay = auth_relay("wt-exp");
	// Valid for two more seconds: the relay closes the session then, with Unauthorized (6),
	// which travels as a WebTransport close (capsule and connection code) and comes back as 6.
	let token = token(json!({"root": "live", "get": [""]}), 2);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let origin = Origin::new(1);
		let viewer = wt(&relay, &endpoint, &format!("/live?jwt={token}"), &origin, false).await;
		let code = within(LIMIT, "the expiry", viewer.closed()).await;
		assert_eq!(code, 6, "Unauthorized");
	});
}
