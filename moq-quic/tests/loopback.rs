//! QUIC over real io_uring UDP sockets on loopback.

mod common;

use bytes::Bytes;
use common::{ALPN, certificate, local, pinned_client};
use moq_quic::{Certificate, Config, Connection, ConnectionError, Dir, Endpoint, StreamError, Verification};

fn runtime() -> kio::Runtime {
	kio::Builder::single().build().expect("a kio runtime")
}

/// A server endpoint with `cert`, and a client endpoint pinning `pin`.
fn pair(cert: &Certificate, pin: [u8; 32]) -> (Endpoint, Endpoint) {
	let server = Endpoint::bind(local(), Config::new().with_server(cert, &[ALPN]).unwrap()).unwrap();
	let client = Endpoint::bind(local(), pinned_client(pin)).unwrap();
	(server, client)
}

/// Endpoints on loopback and a connection between them, established: (server endpoint, client
/// endpoint, the client's end, the server's end).
async fn connected() -> (Endpoint, Endpoint, Connection, Connection) {
	let cert = certificate();
	let (server, client) = pair(&cert, cert.fingerprint());
	let conn = client.connect(server.local_addr(), "localhost").unwrap();
	conn.established().await.unwrap();
	let accepted = server.accept().await.unwrap();
	(server, client, conn, accepted)
}

/// A byte pattern that differs per stream and per offset, so a misplaced byte is caught.
fn pattern(stream: usize, len: usize) -> Vec<u8> {
	(0..len)
		.map(|i| (i.wrapping_mul(31) ^ stream.wrapping_mul(7919)) as u8)
		.collect()
}

#[test]
fn handshake_with_a_pinned_fingerprint_negotiates_alpn() {
	runtime().block_on(async {
		let (_server, _client, conn, accepted) = connected().await;
		assert_eq!(conn.alpn().as_deref(), Some(ALPN));
		assert_eq!(accepted.alpn().as_deref(), Some(ALPN));
		assert_eq!(accepted.server_name().as_deref(), Some("localhost"));
	});
}

#[test]
fn a_wrong_fingerprint_is_refused() {
	runtime().block_on(async {
		let cert = certificate();
		let mut wrong = cert.fingerprint();
		wrong[0] ^= 1;
		let (server, client) = pair(&cert, wrong);
		let conn = client.connect(server.local_addr(), "localhost").unwrap();
		let error = conn.established().await.unwrap_err();
		assert!(
			matches!(error, ConnectionError::TransportError(_)),
			"expected a TLS failure, got {error:?}"
		);
		assert_eq!(server.stats().accepted, 0);
	});
}

#[test]
fn a_server_chained_to_a_trusted_root_is_accepted() {
	runtime().block_on(async {
		let ca_key = rcgen::KeyPair::generate().unwrap();
		let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
		ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
		let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
		let leaf_key = rcgen::KeyPair::generate().unwrap();
		let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
			.unwrap()
			.signed_by(&leaf_key, &ca)
			.unwrap();
		let cert = Certificate::new(
			vec![leaf.der().clone()],
			rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
		);
		let server = Endpoint::bind(local(), Config::new().with_server(&cert, &[ALPN]).unwrap()).unwrap();
		let roots = Verification::Roots(vec![ca.der().clone()]);
		let client = Endpoint::bind(local(), Config::new().with_client(&roots, &[ALPN]).unwrap()).unwrap();
		client
			.connect(server.local_addr(), "localhost")
			.unwrap()
			.established()
			.await
			.unwrap();
		// The same roots refuse a name the certificate does not carry.
		let error = client
			.connect(server.local_addr(), "example.com")
			.unwrap()
			.established()
			.await
			.unwrap_err();
		assert!(matches!(error, ConnectionError::TransportError(_)), "{error:?}");
	});
}

#[test]
fn bulk_transfer_both_ways_on_many_streams() {
	const STREAMS: usize = 16;
	const BYTES: usize = 256 * 1024;
	runtime().block_on(async {
		let (_server, _client, conn, accepted) = connected().await;

		// The server reads each stream to its end, checks every byte, and answers on the same
		// stream with a pattern of its own.
		let echo = kio::spawn(async move {
			let mut tasks = Vec::new();
			for _ in 0..STREAMS {
				let (mut send, mut recv) = accepted.accept_bi().await.unwrap();
				tasks.push(kio::spawn(async move {
					let data = recv.read_to_end(BYTES * 2).await.unwrap();
					let stream = usize::from(data[0]);
					assert_eq!(data, pattern_with_tag(stream, BYTES), "stream {stream} arrived damaged");
					send.write(Bytes::from(pattern(stream + 1000, BYTES))).await.unwrap();
					send.finish().unwrap();
				}));
			}
			for task in tasks {
				task.await.unwrap();
			}
			accepted
		});

		let mut tasks = Vec::new();
		for stream in 0..STREAMS {
			let conn = conn.clone();
			tasks.push(kio::spawn(async move {
				let (mut send, mut recv) = conn.open_bi().await.unwrap();
				let data = Bytes::from(pattern_with_tag(stream, BYTES));
				// In several writes, as an application would.
				for chunk in data.chunks(40_000) {
					send.write(Bytes::copy_from_slice(chunk)).await.unwrap();
				}
				send.finish().unwrap();
				let back = recv.read_to_end(BYTES * 2).await.unwrap();
				assert_eq!(
					back,
					pattern(stream + 1000, BYTES),
					"reply on stream {stream} arrived damaged"
				);
			}));
		}
		for task in tasks {
			task.await.unwrap();
		}
		let _accepted = echo.await.unwrap();
		let (streams, groups) = conn.tracked();
		assert_eq!((streams, groups), (0, 0), "stream state left behind");
	});
}

/// [`pattern`] with the stream's number in its first byte.
fn pattern_with_tag(stream: usize, len: usize) -> Vec<u8> {
	let mut data = pattern(stream, len);
	data[0] = stream as u8;
	data
}

#[test]
fn datagrams_go_both_ways() {
	runtime().block_on(async {
		let (_server, _client, conn, accepted) = connected().await;
		assert!(conn.max_datagram_size().unwrap() >= 1000);
		conn.send_datagram(Bytes::from_static(b"ping")).unwrap();
		assert_eq!(accepted.recv_datagram().await.unwrap(), Bytes::from_static(b"ping"));
		accepted.send_datagram(Bytes::from_static(b"pong")).unwrap();
		assert_eq!(conn.recv_datagram().await.unwrap(), Bytes::from_static(b"pong"));
	});
}

#[test]
fn a_close_code_reaches_the_peer() {
	runtime().block_on(async {
		let (server, client, conn, accepted) = connected().await;
		accepted.close(42, "bye");
		match conn.closed().await {
			ConnectionError::ApplicationClosed(close) => {
				assert_eq!(close.error_code.into_inner(), 42);
				assert_eq!(&close.reason[..], b"bye");
			}
			other => panic!("expected an application close, got {other:?}"),
		}
		// Streams of a closed connection fail instead of hanging.
		assert!(matches!(conn.open_uni().await, Err(StreamError::ConnectionLost(_))));
		// Both ends drain and are forgotten (a hang here fails under nextest's timeout).
		client.drained().await;
		server.drained().await;
		assert_eq!(client.open_connections(), 0);
		assert_eq!(server.open_connections(), 0);
	});
}

#[test]
fn a_thousand_short_lived_uni_streams() {
	const STREAMS: usize = 1000;
	runtime().block_on(async {
		let (_server, _client, conn, accepted) = connected().await;
		let reader = kio::spawn(async move {
			let mut seen = vec![false; STREAMS];
			for _ in 0..STREAMS {
				let mut recv = accepted.accept_uni().await.unwrap();
				let data = recv.read_to_end(64).await.unwrap();
				let n = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
				assert_eq!(&data[4..], &pattern(n, 20)[..], "stream {n} damaged");
				assert!(!std::mem::replace(&mut seen[n], true), "stream {n} twice");
			}
			assert!(seen.iter().all(|s| *s));
			accepted
		});
		for n in 0..STREAMS {
			let mut send = conn.open_uni().await.unwrap();
			let mut data = (n as u32).to_be_bytes().to_vec();
			data.extend(pattern(n, 20));
			send.write(Bytes::from(data)).await.unwrap();
			send.finish().unwrap();
		}
		let accepted = reader.await.unwrap();
		let (streams, groups) = conn.tracked();
		assert_eq!((streams, groups), (0, 0), "sender state left behind");
		assert_eq!(accepted.tracked().0, 0, "receiver state left behind");
	});
}

/// A frame fanned out to many connections at once: each connection's turn produces one datagram,
/// all in the same tick, before the sender runs. With the default send queue (1 MiB) none of 100
/// connections waits for room (at 64 queued transmits, 36 did, and each turned once more); with a
/// queue of 16 KB most wait, and every byte still arrives: a produced transmit is never dropped.
#[test]
fn a_fan_out_burst_fits_the_send_queue_and_a_small_queue_holds_connections_back_without_loss() {
	const VIEWERS: usize = 100;
	let burst = |send_queue: usize| {
		runtime().block_on(async move {
			let cert = certificate();
			let server = Endpoint::bind(
				local(),
				Config::new()
					.with_send_queue(send_queue)
					.with_server(&cert, &[ALPN])
					.unwrap(),
			)
			.unwrap();
			let client = Endpoint::bind(
				local(),
				Config::new()
					.with_client(&Verification::Fingerprints(vec![cert.fingerprint()]), &[ALPN])
					.unwrap(),
			)
			.unwrap();
			let mut viewers = Vec::new();
			let mut served = Vec::new();
			for _ in 0..VIEWERS {
				let conn = client.connect(server.local_addr(), "localhost").unwrap();
				conn.established().await.unwrap();
				viewers.push(conn);
				served.push(server.accept().await.unwrap());
			}
			// Streams are opened first (opening waits for nothing here), so the writes below all
			// happen in one poll of this task, as a relay's fan-out of one group does.
			let mut sends = Vec::new();
			for conn in &served {
				sends.push(conn.open_uni().await.unwrap());
			}
			let before = server.stats();
			for (n, send) in sends.iter_mut().enumerate() {
				send.write(Bytes::from(pattern(n, 300))).await.unwrap();
				send.finish().unwrap();
			}
			for (n, conn) in viewers.iter().enumerate() {
				let mut recv = conn.accept_uni().await.unwrap();
				assert_eq!(recv.read_to_end(1000).await.unwrap(), pattern(n, 300), "viewer {n}");
			}
			let after = server.stats();
			assert!(after.transmits - before.transmits >= VIEWERS as u64);
			after.send_queue_waits - before.send_queue_waits
		})
	};
	assert_eq!(
		burst(moq_quic::DEFAULT_SEND_QUEUE),
		0,
		"no connection waits for the sender"
	);
	// 11 transmits of 1,500-byte buffers fit in 16 KiB; the other 89 connections wait at least once.
	let waits = burst(16 << 10);
	assert!(
		waits >= (VIEWERS - (16 << 10) / 1500 - 1) as u64,
		"{waits} waits with a 16 KB queue"
	);
}

/// A connection lets the peer open few streams at first (quinn-proto keeps state for each one
/// allowed) and more as it uses them, never past the endpoint's maximum: a peer that holds 100
/// streams open at once gets them all, and the allowance stops at the cap.
#[test]
fn the_stream_allowance_grows_with_use_up_to_the_maximum() {
	const MAX: u32 = 100;
	runtime().block_on(async {
		let cert = certificate();
		let config = Config::new().with_server(&cert, &[ALPN]).unwrap().with_max_streams(MAX);
		let server = Endpoint::bind(local(), config).unwrap();
		let (_, client) = pair(&cert, cert.fingerprint());
		let conn = client.connect(server.local_addr(), "localhost").unwrap();
		conn.established().await.unwrap();
		let accepted = server.accept().await.unwrap();
		let start = u64::from(moq_quic::INITIAL_STREAMS);
		assert_eq!(accepted.stream_allowance(Dir::Uni), start);
		assert_eq!(accepted.stream_allowance(Dir::Bi), start);

		let reader = kio::spawn(async move {
			let mut open = Vec::new();
			for _ in 0..MAX {
				let mut recv = accepted.accept_uni().await.unwrap();
				assert_eq!(recv.read().await.unwrap().unwrap(), Bytes::from_static(b"x"));
				open.push(recv);
			}
			(accepted, open)
		});
		// Every stream stays open (not finished) until all are: MAX at once.
		let mut sends = Vec::new();
		for _ in 0..MAX {
			let mut send = conn.open_uni().await.unwrap();
			send.write(Bytes::from_static(b"x")).await.unwrap();
			sends.push(send);
		}
		let (accepted, open) = reader.await.unwrap();
		assert_eq!(open.len(), MAX as usize);
		assert_eq!(
			accepted.stream_allowance(Dir::Uni),
			u64::from(MAX),
			"capped at the maximum"
		);
		assert_eq!(
			accepted.stream_allowance(Dir::Bi),
			start,
			"bidirectional streams unused"
		);
	});
}

/// A client whose peer opens streams one at a time (a MoQ viewer, a group stream each) raises the
/// peer's allowance, so the MAX_STREAMS it sends, each an ack-eliciting packet, come every 17
/// streams instead of every third: 32 streams in turn raise it from 16 to 128, 300 more no
/// further, and at most one MAX_STREAMS goes out per 17 streams after that. A server (a relay,
/// with its publishers) keeps the allowance of streams open at once, which costs less memory.
#[test]
fn a_client_whose_peer_opens_streams_one_at_a_time_sends_fewer_max_streams() {
	runtime().block_on(async {
		let (_server, _client, conn, accepted) = connected().await;
		let start = u64::from(moq_quic::INITIAL_STREAMS);
		let one = |from: &Connection, to: &Connection, body: &'static [u8]| {
			let (from, to) = (from.clone(), to.clone());
			async move {
				let mut send = from.open_uni().await.unwrap();
				send.write(Bytes::from_static(body)).await.unwrap();
				send.finish().unwrap();
				let mut recv = to.accept_uni().await.unwrap();
				assert_eq!(recv.read().await.unwrap().unwrap(), Bytes::from_static(body));
				assert!(recv.read().await.unwrap().is_none());
			}
		};
		// Twice the initial 16, one at a time (the raise lands as the 32nd is accepted).
		for _ in 0..40 {
			one(&accepted, &conn, b"x").await;
			one(&conn, &accepted, b"x").await;
		}
		assert_eq!(conn.stream_allowance(Dir::Uni), 128, "raised by churn");
		assert_eq!(accepted.stream_allowance(Dir::Uni), start, "not on a server");
		for _ in 0..300 {
			one(&accepted, &conn, b"x").await;
		}
		assert_eq!(conn.stream_allowance(Dir::Uni), 128, "and no further");
		let before = conn.stats().frame_tx.max_streams_uni;
		for _ in 0..170 {
			one(&accepted, &conn, b"y").await;
		}
		let sent = conn.stats().frame_tx.max_streams_uni - before;
		assert!(sent <= 170 / 17 + 1, "{sent} MAX_STREAMS for 170 streams");
		assert!(sent >= 1, "streams are still granted back");
		assert_eq!(conn.stream_allowance(Dir::Bi), start, "bidirectional streams unused");
	});
}

#[test]
fn the_server_opens_a_bidirectional_stream() {
	runtime().block_on(async {
		let (_server, _client, conn, accepted) = connected().await;
		let (mut send, mut recv) = accepted.open_bi().await.unwrap();
		send.write(Bytes::from_static(b"request")).await.unwrap();
		let (mut reply, mut request) = conn.accept_bi().await.unwrap();
		assert_eq!(request.read().await.unwrap().unwrap(), Bytes::from_static(b"request"));
		reply.write(Bytes::from_static(b"reply")).await.unwrap();
		assert_eq!(recv.read().await.unwrap().unwrap(), Bytes::from_static(b"reply"));
		send.finish().unwrap();
		assert_eq!(request.read().await.unwrap(), None);
	});
}

/// Client endpoints bound to port 0 each get a port of their own. With `SO_REUSEPORT` (which
/// every endpoint had until the relay load generator found this), Linux may hand an ephemeral
/// bind a port another reuse-port socket of the same user holds, and the two split each other's
/// datagrams: about 1 connection in 400 lost its handshake or its session.
#[test]
fn ephemeral_endpoints_never_share_a_port() {
	runtime().block_on(async {
		let mut endpoints = Vec::new();
		let mut ports = std::collections::HashSet::new();
		for _ in 0..2000 {
			let endpoint = Endpoint::bind(local(), Config::new()).unwrap();
			assert!(
				ports.insert(endpoint.local_addr().port()),
				"port {} handed out twice",
				endpoint.local_addr().port()
			);
			endpoints.push(endpoint);
		}
		// A server's workers still share one port when asked to.
		let first = Endpoint::bind(local(), Config::new().with_shared_port(true)).unwrap();
		let second = Endpoint::bind(first.local_addr(), Config::new().with_shared_port(true)).unwrap();
		assert_eq!(first.local_addr(), second.local_addr());
	});
}
