//! QMux on the relay's TCP port beyond plain WebSockets: `wss://` (TLS, ALPN http/1.1), QMux over
//! TLS (ALPN `qmux-01.moq-lite-05`) and plaintext QMux (`tcp://`), told apart from HTTP by their
//! first bytes; HTTPS on the same port; auth from SETUP where no HTTP request carries the path;
//! and hostile peers on each (a stalled or broken TLS handshake, an oversized record), each beside
//! a healthy QUIC pair that must keep receiving.

mod common;

use std::time::Duration;

use common::*;
use kio::net::TcpStream;
use moq_client::Url;
use moq_net::model::Origin;
use moq_quic::byte_stream::{ByteStream, TlsStream};
use moq_quic::tls::rustls::pki_types::ServerName;

const LIMIT: Duration = Duration::from_secs(20);

/// The carriers, by scheme, and the transport label the relay gives each.
const CARRIERS: [(&str, &str); 4] = [
	("ws", "websocket"),
	("wss", "websocket-tls"),
	("qmux", "qmux-tls"),
	("tcp", "qmux-tcp"),
];

fn url(relay: &Relay, scheme: &str, path: &str) -> Url {
	Url::parse(&format!(
		"{scheme}://localhost:{}{path}",
		relay.bound.http.unwrap().port()
	))
	.unwrap()
}

/// TLS to the relay's TCP port offering `alpn`, trusting its certificate.
async fn tls_to(relay: &Relay, alpn: &[&[u8]]) -> std::io::Result<TlsStream> {
	let tcp = TcpStream::connect(relay.bound.http.unwrap()).await?;
	let config = moq_quic::tls::tcp_client_config(&relay.verification(), alpn).unwrap();
	TlsStream::connect(tcp, ServerName::try_from("localhost").unwrap(), config).await
}

#[test]
fn every_tcp_carrier_publishes_to_and_watches_from_quic() {
	let relay = Relay::start(1);
	let http = relay.bound.http.unwrap();
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		for (index, (scheme, transport)) in CARRIERS.into_iter().enumerate() {
			let url = url(&relay, scheme, "/");
			let id = 10 * index as u64;
			// A publisher over this carrier, a viewer over QUIC.
			let tcp_origin = Origin::new(id + 1);
			let name = format!("from-{scheme}");
			let (_broadcast, track, _publication) = local_broadcast(&tcp_origin, &name);
			let verification = relay.verification();
			let publishing = connect_client(
				&endpoint,
				http,
				&url,
				&verification,
				id + 1,
				Some(tcp_origin.consumer()),
				None,
			);
			let tcp_publisher = within(LIMIT, "the publisher", publishing).await.unwrap();
			assert_eq!(tcp_publisher.transport(), transport);
			assert_eq!(tcp_publisher.protocol(), Some("moq-lite-05"), "{scheme}");
			let quic_viewer_origin = Origin::new(id + 2);
			let _quic_viewer = viewer(&relay, &endpoint, "/", &quic_viewer_origin).await.unwrap();
			let mut cursor = within(LIMIT, "announced", announced(&quic_viewer_origin, &name))
				.await
				.subscribe_track("video", sub())
				.unwrap();
			track.used().await;
			for sequence in 0..10 {
				publish(&track, sequence);
			}
			let got = within(LIMIT, "to the QUIC viewer", take(&mut cursor, 10)).await;
			assert_eq!(got, (0..10).map(|s| (s, s)).collect::<Vec<_>>(), "{scheme} → quic");

			// A publisher over QUIC, a viewer over this carrier.
			let quic_origin = Origin::new(id + 3);
			let name = format!("to-{scheme}");
			let (_broadcast, track, _publication) = local_broadcast(&quic_origin, &name);
			let _quic_publisher = publisher(&relay, &endpoint, "/", &quic_origin).await.unwrap();
			let tcp_viewer_origin = Origin::new(id + 4);
			let viewing = connect_client(
				&endpoint,
				http,
				&url,
				&verification,
				id + 4,
				None,
				Some(tcp_viewer_origin.producer()),
			);
			let _tcp_viewer = within(LIMIT, "the viewer", viewing).await.unwrap();
			let mut cursor = within(LIMIT, "announced", announced(&tcp_viewer_origin, &name))
				.await
				.subscribe_track("video", sub())
				.unwrap();
			track.used().await;
			for sequence in 0..10 {
				publish(&track, sequence);
			}
			let got = within(LIMIT, "to the viewer", take(&mut cursor, 10)).await;
			assert_eq!(got, (0..10).map(|s| (s, s)).collect::<Vec<_>>(), "quic → {scheme}");
			let sessions = format!("moq_relay_qmux_sessions_total{{transport=\"{transport}\"}}");
			assert_eq!(relay.metric(&sessions).await, 2, "{scheme}");
		}
	});
}

#[test]
fn at_shutdown_every_tcp_carrier_s_session_is_closed_with_the_shutdown_code() {
	let relay = Relay::start(1);
	let http = relay.bound.http.unwrap();
	let rt = runtime();
	let verification = relay.verification();
	let viewers = rt.block_on(async {
		let endpoint = endpoint(&relay);
		let mut viewers = Vec::new();
		for (index, (scheme, _)) in CARRIERS.into_iter().enumerate() {
			let origin = Origin::new(index as u64 + 1);
			let url = url(&relay, scheme, "/");
			let viewing = connect_client(
				&endpoint,
				http,
				&url,
				&verification,
				index as u64 + 1,
				None,
				Some(origin.producer()),
			);
			viewers.push((scheme, within(LIMIT, "a viewer", viewing).await.unwrap(), origin));
		}
		// Every session is up on the relay's side too (its SETUP read), so the closes below are
		// the running sessions' (one still in setup is closed as well, by the next test).
		for (_, transport) in CARRIERS {
			let sessions = format!("moq_relay_qmux_sessions_total{{transport=\"{transport}\"}}");
			relay.metric_until(LIMIT, &sessions, |n| n == 1).await;
		}
		viewers
	});
	// The relay's closes are sent while this runtime (the viewers' drivers) is not running: they
	// wait in the viewers' sockets, as nothing is asked of the viewers to send them.
	relay.stop().unwrap();
	rt.block_on(async {
		for (scheme, viewer, _origin) in &viewers {
			let code = within(LIMIT, "the close", viewer.closed()).await;
			assert_eq!(code, moq_net::lite::ErrorCode::Closed.code(), "{scheme}");
		}
	});
}

#[test]
fn at_shutdown_a_connection_still_in_setup_is_closed_with_the_shutdown_code() {
	let relay = Relay::start(1);
	let http = relay.bound.http.unwrap();
	let rt = runtime();
	// Plaintext QMux, its transport parameters sent, and no SETUP: the relay waits for it.
	let conn = rt.block_on(async {
		let tcp = TcpStream::connect(http).await.unwrap();
		let mut config = moq_quic::qmux::Config::default();
		config.params.application_protocols = vec!["moq-lite-05".to_owned()];
		let (conn, driver) = moq_quic::qmux::connect_tcp(tcp, config).unwrap();
		let driver = kio::spawn(driver);
		assert_eq!(
			within(LIMIT, "the parameters", conn.negotiated()).await.as_deref(),
			Some("moq-lite-05")
		);
		(conn, driver)
	});
	relay.stop().unwrap();
	rt.block_on(async {
		let end = within(LIMIT, "the close", kio::wait(|w| conn.0.poll_closed(w))).await;
		assert_eq!(
			end,
			moq_quic::qmux::End::Application(moq_net::lite::ErrorCode::Closed.code())
		);
	});
}

#[test]
fn https_on_the_same_port_serves_the_relay_s_endpoints() {
	let relay = Relay::start(1);
	runtime().block_on(async {
		for alpn in [&[b"http/1.1".as_slice()][..], &[]] {
			let tls = within(LIMIT, "the TLS handshake", tls_to(&relay, alpn)).await.unwrap();
			assert_eq!(tls.alpn(), alpn.first().copied());
			let mut stream = ByteStream::Tls(Box::new(tls));
			stream
				.write_all(b"GET /health HTTP/1.1\r\nhost: relay\r\nconnection: close\r\n\r\n")
				.await
				.unwrap();
			let answer = within(LIMIT, "the answer", read_to_end(&mut stream)).await;
			assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
			assert!(answer.ends_with("ok\n"), "{answer}");
		}
		// An ALPN the relay does not speak fails the handshake.
		assert!(tls_to(&relay, &[b"h2"]).await.is_err());
	});
}

/// What `stream` sends until it ends, as text.
async fn read_to_end(stream: &mut ByteStream) -> String {
	let mut out = Vec::new();
	let mut chunk = [0u8; 4096];
	loop {
		match stream.read(&mut chunk).await {
			Ok(0) | Err(_) => break,
			Ok(n) => out.extend_from_slice(&chunk[..n]),
		}
	}
	String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn without_an_http_request_the_token_comes_in_setup() {
	let key = b"tcp-port-test-key-of-32-bytes!!!";
	let keys = KeyFile::hs256("tcp-port", key);
	let auth = moq_relay::auth::AuthConfig {
		key_file: Some(keys.0.clone()),
		anonymous: moq_relay::auth::Anonymous::none(),
	};
	let relay = Relay::start_with(1, auth);
	let http = relay.bound.http.unwrap();
	let claims = serde_json::json!({"root": "", "get": [""], "put": [""], "exp": 4_000_000_000u64});
	let token = moq_relay::auth::sign_hs256(&claims, key);
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let verification = relay.verification();
		for scheme in ["qmux", "tcp"] {
			let origin = Origin::new(1);
			let without = url(&relay, scheme, "/");
			let refused = connect_client(
				&endpoint,
				http,
				&without,
				&verification,
				1,
				None,
				Some(origin.producer()),
			);
			let refused = within(LIMIT, "the refused session", refused).await;
			if let Ok(session) = refused {
				// SETUP may be answered before the grant is checked: then the session closes.
				let code = within(LIMIT, "the refusal", session.closed()).await;
				assert_eq!(code, moq_net::lite::ErrorCode::Unauthorized.code(), "{scheme}");
			}
			let with = url(&relay, scheme, &format!("/?jwt={token}"));
			let admitted = connect_client(&endpoint, http, &with, &verification, 1, None, Some(origin.producer()));
			let session = within(LIMIT, "the admitted session", admitted).await.unwrap();
			assert_eq!(session.protocol(), Some("moq-lite-05"));
		}
	});
}

#[test]
fn a_stalled_or_broken_tls_handshake_and_an_oversized_record_end_that_connection_only() {
	let config = moq_relay::config::Config {
		workers: 1,
		..moq_relay::config::Config::loopback()
	};
	let head_timeout = moq_relay::limits::Limits::default().http_head_timeout;
	let relay = Relay::run(config);
	let http = relay.bound.http.unwrap();
	runtime().block_on(async {
		let endpoint = endpoint(&relay);
		let mut healthy = Healthy::new(&relay, &endpoint).await;

		// A TLS record's first byte, then nothing: cut at the head timeout.
		let mut stalled = TcpStream::connect(http).await.unwrap();
		stalled.write_all(&[0x16, 0x03]).await.unwrap();
		let started = kio::time::now();
		let mut byte = [0u8; 1];
		let end = within(LIMIT, "the stalled handshake's end", stalled.read(&mut byte)).await;
		assert!(matches!(end, Ok(0) | Err(_)), "{end:?}");
		assert!(kio::time::now() - started >= head_timeout / 2);
		healthy.still_receives().await;

		// A ClientHello that is four bytes of garbage: answered with an alert, then the end.
		let mut broken = TcpStream::connect(http).await.unwrap();
		let hello = [
			0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x04, 0xff, 0xff, 0xff, 0xff,
		];
		broken.write_all(&hello).await.unwrap();
		let mut answer = Vec::new();
		let mut chunk = [0u8; 256];
		while let Ok(n @ 1..) = within(LIMIT, "the alert", broken.read(&mut chunk)).await {
			answer.extend_from_slice(&chunk[..n]);
		}
		assert_eq!(answer.first(), Some(&0x15), "a TLS alert record: {answer:?}");
		healthy.still_receives().await;

		// Plaintext QMux: a record announced one byte past 16,382 is refused from its size.
		let mut oversized = TcpStream::connect(http).await.unwrap();
		let mut first = Vec::new();
		let params = moq_quic::qmux::Config::default()
			.params
			.encode(moq_quic::qmux::Version::Qmux01);
		let mut body = Vec::new();
		moq_quic::qmux::frame::Frame::TransportParameters(params.into()).encode(&mut body);
		moq_quic::qmux::record::encode(&body, &mut first);
		first.extend_from_slice(&[0x7f, 0xff]);
		oversized.write_all(&first).await.unwrap();
		let close = within(LIMIT, "the relay's close", close_code(&mut oversized)).await;
		assert_eq!(close, Some(moq_quic::qmux::code::FRAME_ENCODING_ERROR));
		healthy.still_receives().await;
		relay.metric_until(LIMIT, "moq_relay_connections", |n| n == 2).await;
	});
}

/// The code of the transport close (0x1c) among the records `stream` sends before it ends.
async fn close_code(stream: &mut TcpStream) -> Option<u64> {
	let mut decoder = moq_quic::qmux::record::RecordDecoder::new(1 << 20);
	let mut chunk = vec![0u8; 16 << 10];
	let mut code = None;
	loop {
		while let Ok(Some(mut body)) = decoder.next_record() {
			while let Ok(frame) = moq_quic::qmux::frame::decode(&mut body) {
				if let moq_quic::qmux::frame::Frame::Close {
					application: false,
					code: c,
					..
				} = frame
				{
					code = Some(c);
				}
			}
		}
		match stream.read(&mut chunk).await {
			Ok(0) | Err(_) => return code,
			Ok(n) => decoder.push(&chunk[..n]),
		}
	}
}
