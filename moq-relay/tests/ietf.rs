//! The relay serving the IETF moq-transport drafts (14 to 16) beside moq-lite, from one origin:
//! a draft's publishers watched by moq-lite viewers and by another draft's, and the other way
//! round, over raw QUIC and WebTransport; auth from CLIENT_SETUP's PATH and its
//! AUTHORIZATION_TOKEN; GOAWAY at shutdown; and hostile draft-14 peers (a request id out of
//! turn, requests past the grant, bytes that are no message) closed with the draft's codes while
//! a healthy pair keeps receiving.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use moq_client::Protocol;
use moq_net::coding::Encode;
use moq_net::ietf::message::{Filter, Message, Namespace, Parameters, Subscribe};
use moq_net::ietf::{DRAFT_14, code};
use moq_net::model::Origin;
use moq_net::transport::{SendStreamExt, TransportExt};

const LIMIT: Duration = Duration::from_secs(20);

async fn connect(
	relay: &Relay,
	endpoint: &moq_quic::Endpoint,
	protocol: Protocol,
	path: &str,
	id: u64,
	publish: Option<&Origin>,
	subscribe: Option<&Origin>,
) -> anyhow::Result<moq_client::Session> {
	connect_over(relay, endpoint, protocol, relay.url(path), id, publish, subscribe).await
}

/// [`connect`] to `url`: raw QUIC (`moqt://`) or WebTransport (`https://`).
async fn connect_over(
	relay: &Relay,
	endpoint: &moq_quic::Endpoint,
	protocol: Protocol,
	url: moq_client::Url,
	id: u64,
	publish: Option<&Origin>,
	subscribe: Option<&Origin>,
) -> anyhow::Result<moq_client::Session> {
	let mut client = relay.client(endpoint).origin(id).protocol(protocol);
	if let Some(publish) = publish {
		client = client.publish(publish.consumer());
	}
	if let Some(subscribe) = subscribe {
		client = client.subscribe(subscribe.producer());
	}
	client.connect_to(&url, relay.bound.quic).await
}

/// The relay's WebTransport URL of `path`.
fn https(relay: &Relay, path: &str) -> moq_client::Url {
	moq_client::Url::parse(&format!("https://localhost:{}{path}", relay.bound.quic.port())).unwrap()
}

#[test]
fn draft_and_moq_lite_clients_watch_each_other_over_quic_and_webtransport() {
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		// Each side over raw QUIC, or over WebTransport (`true`: the draft's sub-protocol).
		let pairs = [
			(Protocol::Draft14, false, Protocol::Lite, false),
			(Protocol::Lite, false, Protocol::Draft14, false),
			(Protocol::Draft14, false, Protocol::Draft14, false),
			(Protocol::Draft15, false, Protocol::Lite, false),
			(Protocol::Lite, false, Protocol::Draft15, false),
			(Protocol::Draft15, false, Protocol::Draft14, false),
			(Protocol::Draft16, false, Protocol::Lite, false),
			(Protocol::Lite, false, Protocol::Draft16, false),
			(Protocol::Draft16, false, Protocol::Draft14, false),
			(Protocol::Draft15, false, Protocol::Draft16, false),
			(Protocol::Draft14, true, Protocol::Lite, false),
			(Protocol::Lite, false, Protocol::Draft15, true),
			(Protocol::Draft16, true, Protocol::Draft14, true),
		];
		for (index, (publishing, publisher_wt, viewing, viewer_wt)) in pairs.into_iter().enumerate() {
			let url = |webtransport| match webtransport {
				true => https(&relay, "/"),
				false => relay.url("/"),
			};
			let id = 10 * index as u64;
			let name = format!("pair{index}");
			let publisher_origin = Origin::new(id + 1);
			let (_broadcast, track, _publication) = local_broadcast(&publisher_origin, &name);
			let publisher = connect_over(
				&relay,
				&endpoint,
				publishing,
				url(publisher_wt),
				id + 1,
				Some(&publisher_origin),
				None,
			);
			let publisher = within(LIMIT, "the publisher", publisher).await.unwrap();
			let expected = match publishing {
				Protocol::Draft14 => "moq-00",
				Protocol::Draft15 => "moqt-15",
				Protocol::Draft16 => "moqt-16",
				Protocol::Lite => "moq-lite-05",
			};
			assert_eq!(publisher.protocol(), Some(expected));
			let viewer_origin = Origin::new(id + 2);
			let viewer = connect_over(
				&relay,
				&endpoint,
				viewing,
				url(viewer_wt),
				id + 2,
				None,
				Some(&viewer_origin),
			);
			let _viewer = within(LIMIT, "the viewer", viewer).await.unwrap();
			let mut cursor = within(LIMIT, "announced", announced(&viewer_origin, &name))
				.await
				.subscribe_track("video", sub())
				.unwrap();
			within(LIMIT, "the track asked for", track.used()).await;
			for sequence in 0..20 {
				publish(&track, sequence);
			}
			let what = format!("every group, {publishing:?} (WebTransport {publisher_wt}) → {viewing:?} ({viewer_wt})");
			let got = within(LIMIT, &what, take(&mut cursor, 20)).await;
			assert_eq!(got, (0..20).map(|s| (s, s)).collect::<Vec<_>>(), "{what}");
		}
	});
}

#[test]
fn a_draft_14_client_is_authorized_by_its_setup_path() {
	let key = b"ietf-test-key-of-32-bytes-long!!";
	let keys = KeyFile::hs256("ietf", key);
	let auth = moq_relay::auth::AuthConfig {
		key_file: Some(keys.0.clone()),
		anonymous: moq_relay::auth::Anonymous::none(),
	};
	let relay = Relay::start_with(1, auth);
	let claims = serde_json::json!({"root": "", "get": [""], "put": [""], "exp": 4_000_000_000u64});
	let token = moq_relay::auth::sign_hs256(&claims, key);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let origin = Origin::new(1);
		// Without a token: the connection is closed with the draft's UNAUTHORIZED.
		let refused = connect(&relay, &endpoint, Protocol::Draft14, "/", 1, None, Some(&origin)).await;
		// SERVER_SETUP comes before the grant is checked, so the client's setup may finish first.
		if let Ok(session) = refused {
			let conn = session.connection().clone();
			assert_eq!(
				within(LIMIT, "the refusal", close_code(&conn)).await,
				code::UNAUTHORIZED
			);
		}
		let path = format!("/?jwt={token}");
		let admitted = connect(&relay, &endpoint, Protocol::Draft14, &path, 1, None, Some(&origin));
		let session = within(LIMIT, "the admitted session", admitted).await.unwrap();
		assert_eq!(session.protocol(), Some("moq-00"));
	});
}

/// A raw draft-14 connection to the relay, its CLIENT_SETUP sent and SERVER_SETUP read: the
/// connection and its control stream (the receiving half kept open, unread).
async fn raw_draft_14(
	relay: &Relay,
	endpoint: &moq_quic::Endpoint,
) -> (moq_quic::Connection, moq_quic::MoqSend, moq_quic::MoqRecv) {
	let conn = quic_to(
		endpoint,
		relay.bound.quic,
		&relay.verification(),
		moq_net::ietf::ALPN_DRAFT_14,
	)
	.await;
	let (mut send, mut recv) = TransportExt::open_bi(&conn).await.unwrap();
	let mut hello = Vec::new();
	Message::ClientSetup {
		versions: vec![DRAFT_14],
		params: Parameters::default()
			.with_bytes(0x1, Bytes::from_static(b"/"))
			.with_int(0x2, 100),
	}
	.encode(&mut hello);
	send.write(hello.into()).await.unwrap();
	let mut answer = Vec::new();
	let server = loop {
		use moq_net::coding::Decode;
		if let Ok(message) = Message::decode(&mut &answer[..]) {
			break message;
		}
		let chunk = moq_net::transport::RecvStreamExt::read(&mut recv)
			.await
			.unwrap()
			.expect("SERVER_SETUP");
		answer.extend_from_slice(&chunk);
	};
	let Message::ServerSetup { version, params } = server else {
		panic!("no SERVER_SETUP: {server:?}");
	};
	assert_eq!(version, DRAFT_14);
	assert!(params.int(0x2).is_some_and(|max| max > 0), "request ids granted");
	(conn, send, recv)
}

fn subscribe(request_id: u64) -> Message {
	Message::Subscribe(Subscribe {
		request_id,
		namespace: Namespace(vec!["nothing".into()]),
		name: "here".into(),
		subscriber_priority: 0,
		group_order: 0,
		forward: true,
		filter: Filter::LargestObject,
		params: Parameters::default(),
	})
}

#[test]
fn hostile_draft_14_peers_are_closed_with_the_drafts_codes() {
	let relay = Relay::start(1);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;
		let limit = moq_relay::limits::Limits::default().session.subscriptions as u64;
		let cases: [(&str, Vec<Message>, u64); 3] = [
			("a request id out of turn", vec![subscribe(4)], code::INVALID_REQUEST_ID),
			(
				"requests past the grant",
				// As many namespace subscriptions as a session may hold live, then one more request.
				(0..=limit)
					.map(|i| Message::SubscribeNamespace {
						request_id: 2 * i,
						prefix: Namespace(vec![format!("p{i}")]),
						options: moq_net::ietf::message::subscribe_options::BOTH,
						params: Parameters::default(),
					})
					.collect(),
				code::TOO_MANY_REQUESTS,
			),
			(
				"a second CLIENT_SETUP",
				vec![Message::ClientSetup {
					versions: vec![DRAFT_14],
					params: Parameters::default(),
				}],
				code::PROTOCOL_VIOLATION,
			),
		];
		for (what, messages, expected) in cases {
			let (conn, mut send, _recv) = raw_draft_14(&relay, &endpoint).await;
			let mut bytes = Vec::new();
			for message in &messages {
				message.encode(&mut bytes);
			}
			// The relay may close before it took everything.
			let _ = send.write(bytes.into()).await;
			assert_eq!(within(LIMIT, what, close_code(&conn)).await, expected, "{what}");
			healthy.still_receives().await;
		}
		// Bytes that are no message: a SUBSCRIBE whose forward flag is 7.
		let (conn, mut send, _recv) = raw_draft_14(&relay, &endpoint).await;
		let _ = send
			.write(vec![0x03, 0x00, 0x08, 0x00, 0x00, 0x01, 0x61, 0x80, 0x00, 0x07, 0x02].into())
			.await;
		assert_eq!(
			within(LIMIT, "bad bytes", close_code(&conn)).await,
			code::PROTOCOL_VIOLATION
		);
		healthy.still_receives().await;
	});
}

#[test]
fn at_shutdown_a_draft_client_hears_goaway_then_the_close() {
	let relay = Relay::start(1);
	let rt = runtime();
	let (conn, _send, recv, _endpoint) = rt.block_on(async {
		let endpoint = endpoint(&relay);
		let (conn, send, recv) = raw_draft_14(&relay, &endpoint).await;
		(conn, send, recv, endpoint)
	});
	// The relay shuts down on another thread while this one reads what it says.
	let stopping = std::thread::spawn(move || relay.stop());
	rt.block_on(async move {
		let mut recv = recv;
		let mut buf = Vec::new();
		let goaway = loop {
			use moq_net::coding::Decode;
			let mut view = &buf[..];
			if let Ok(message) = Message::decode(&mut view) {
				let used = buf.len() - view.len();
				buf.drain(..used);
				if let Message::Goaway { uri } = message {
					break uri;
				}
				continue;
			}
			let chunk = within(LIMIT, "GOAWAY", moq_net::transport::RecvStreamExt::read(&mut recv))
				.await
				.unwrap()
				.expect("the control stream stays open until GOAWAY");
			buf.extend_from_slice(&chunk);
		};
		assert_eq!(goaway, "", "no URI: the client goes where it sees fit");
		// This client does not leave: the relay closes after its grace, with NO_ERROR.
		let code = within(LIMIT, "the close", TransportExt::closed(&conn)).await;
		assert_eq!(code, code::NO_ERROR);
	});
	stopping.join().unwrap().unwrap();
}

#[test]
fn a_draft_client_is_authorized_by_its_authorization_token_parameter() {
	let key = b"ietf-test-key-of-32-bytes-long!!";
	let keys = KeyFile::hs256("ietf-token", key);
	let auth = moq_relay::auth::AuthConfig {
		key_file: Some(keys.0.clone()),
		anonymous: moq_relay::auth::Anonymous::none(),
	};
	let relay = Relay::start_with(1, auth);
	let claims = serde_json::json!({"root": "", "get": [""], "put": [""], "exp": 4_000_000_000u64});
	let token = moq_relay::auth::sign_hs256(&claims, key);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		// CLIENT_SETUP with the path `/` and the token as AUTHORIZATION_TOKEN: USE_VALUE (0x3),
		// token type 0 (agreed out of band), the JWT.
		for (token, admitted) in [(Some(token.as_str()), true), (None, false), (Some("forged"), false)] {
			let conn = quic_to(
				&endpoint,
				relay.bound.quic,
				&relay.verification(),
				moq_net::ietf::ALPN_DRAFT_14,
			)
			.await;
			let (mut send, mut recv) = TransportExt::open_bi(&conn).await.unwrap();
			let mut params = Parameters::default()
				.with_bytes(0x1, Bytes::from_static(b"/"))
				.with_int(0x2, 100);
			if let Some(token) = token {
				let mut value = vec![0x03, 0x00];
				value.extend_from_slice(token.as_bytes());
				params = params.with_bytes(0x3, value);
			}
			let mut out = Vec::new();
			Message::ClientSetup {
				versions: vec![DRAFT_14],
				params,
			}
			.encode(&mut out);
			// A request after it: answered only in an admitted session.
			Message::SubscribeNamespace {
				request_id: 0,
				prefix: Namespace(vec!["any".into()]),
				options: moq_net::ietf::message::subscribe_options::BOTH,
				params: Parameters::default(),
			}
			.encode(&mut out);
			send.write(out.into()).await.unwrap();
			let mut buf = Vec::new();
			let answered = within(LIMIT, "the answer or the close", async {
				loop {
					use moq_net::coding::Decode;
					let mut view = &buf[..];
					if let Ok(message) = Message::decode(&mut view) {
						let used = buf.len() - view.len();
						buf.drain(..used);
						if matches!(message, Message::SubscribeNamespaceOk(0)) {
							return true;
						}
						continue;
					}
					match moq_net::transport::RecvStreamExt::read(&mut recv).await {
						Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
						_ => return false,
					}
				}
			})
			.await;
			assert_eq!(answered, admitted, "token {token:?}");
			if !admitted {
				assert_eq!(
					within(LIMIT, "the refusal", close_code(&conn)).await,
					code::UNAUTHORIZED
				);
			}
		}
	});
}
