//! A WebTransport server under a peer's arbitrary streams, end to end: a real QUIC connection
//! (moq-quic over its simulated network, on kio's paused clock) whose server side does what the
//! relay does with ALPN `h3` — `webtransport::accept`, the CONNECT accepted or refused, then a
//! moq-lite session over the WebTransport session — while the client side opens the streams the
//! input describes.
//!
//! The first byte's bits: 0, the client opens the session properly first (its SETTINGS and a
//! valid CONNECT, through `webtransport::connect`); 1, the server refuses the CONNECT (403)
//! instead of accepting it; 2, a valid moq-lite SETUP goes first on the session. The rest is a
//! list of streams, each `kind(1) len(2, big-endian) bytes`: kind bit 0 picks uni or bidi, bit 1
//! whether the stream is finished after its bytes, bit 2 whether it is reset instead, bit 3
//! whether it is opened inside the session (its WebTransport header written for it; only once the
//! session is open) rather than as a raw QUIC stream whose bytes say what it is.
//!
//! Asserted: no panic in any task of either side (libFuzzer's panic hook aborts), and once the
//! client closes its connection, everything the server runs for it ends within the QUIC close's
//! few round trips: a stream classifier, capsule reader or session task the peer can leave
//! waiting would be held for as long as the process runs.
#![no_main]
#![forbid(unsafe_code)]

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use moq_net::coding::Encode;
use moq_net::lite::session::{self, Config};
use moq_net::lite::{DataType, Setup, Version};
use moq_net::model::Origin;
use moq_net::transport::{SendStream as _, SendStreamExt, Transport, TransportExt};
use moq_net::{Frame, Path, Timestamp, TrackInfo};
use moq_quic::h3::{self, ConnectRequest};
use moq_quic::sim::{Network, SimConfig};
use moq_quic::{Certificate, Endpoint, Verification, webtransport};

thread_local! {
	// One runtime and one certificate per fuzzing process: a ring and a key pair per input would
	// dominate the run.
	static RUNTIME: RefCell<Option<kio::Runtime>> = const { RefCell::new(None) };
	static CERTIFICATE: Certificate =
		Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY).expect("a certificate");
}

/// How long the server gives the client for its CONNECT and SETUP (the relay's default
/// `setup_timeout` is 10 s; virtual time here).
const SETUP_TIMEOUT: Duration = Duration::from_secs(2);
/// Virtual time the streams get to play out before the client closes.
const PLAY: Duration = Duration::from_millis(500);
/// How long after the client's close the server's side must have ended: the close arrives after
/// one latency (10 ms); the rest is margin for the draining connection's timers.
const WIND_DOWN: Duration = Duration::from_secs(3);

/// `future`'s output if it completes within `limit` of virtual time.
async fn within<T>(limit: Duration, future: impl Future<Output = T>) -> Option<T> {
	let mut future = pin!(future);
	let mut timer = pin!(kio::time::sleep(limit));
	std::future::poll_fn(|cx| {
		if let Poll::Ready(out) = future.as_mut().poll(cx) {
			return Poll::Ready(Some(out));
		}
		timer.as_mut().poll(cx).map(|()| None)
	})
	.await
}

/// What the relay does with a connection whose ALPN is `h3`, short of auth.
async fn serve(conn: moq_quic::Connection, refuse: bool) {
	let Some(Ok(request)) = within(SETUP_TIMEOUT, webtransport::accept(&conn)).await else {
		conn.close(h3::code::REQUEST_REJECTED, "no CONNECT in time");
		return;
	};
	if refuse {
		request.reject(403, h3::error_to_http3(6), "refused");
		return;
	}
	let protocol = (request.connect.protocols.iter())
		.find(|p| Version::from_alpn(p.as_bytes()).is_some())
		.cloned();
	let version = (protocol.as_deref())
		.and_then(|p| Version::from_alpn(p.as_bytes()))
		.unwrap_or_default();
	let transport = request.accept(protocol.as_deref());
	let config = Config {
		origin: 1,
		version,
		..Config::default()
	};
	let Some(Ok(peer)) = within(SETUP_TIMEOUT, session::setup(&transport, &config)).await else {
		transport.close(3, "setup");
		return;
	};
	let relay = Origin::new(1);
	let (broadcast, _publication) = (relay.producer())
		.create_broadcast(&Path::new("bbb"), Default::default())
		.expect("a broadcast");
	let track = broadcast.create_track("video", TrackInfo::default()).expect("a track");
	for seq in 0..3u64 {
		let _ = track.write_frame(Frame::new(Timestamp::new(seq, 1000), vec![seq as u8; 8]));
	}
	let session = session::start(transport, config, peer, Some(relay.consumer()), Some(relay.producer()));
	session.closed().await;
}

/// Opens a stream on `transport` (bidirectional if `kind`'s bit 0 is set), writes `bytes` on it
/// and finishes it (bit 1) or resets it (bit 2); what keeps the stream open, or `None` if it could
/// not be opened in time.
async fn play<T: Transport<SendHalf: 'static, RecvHalf: 'static>>(
	transport: &T,
	kind: u8,
	bytes: Bytes,
) -> Option<Box<dyn Any>> {
	let (mut send, recv) = match kind & 1 {
		0 => (within(PLAY, transport.open_uni()).await?.ok()?, None),
		_ => {
			let (send, recv) = within(PLAY, transport.open_bi()).await?.ok()?;
			(send, Some(recv))
		}
	};
	let _ = within(PLAY, send.write(bytes)).await;
	if kind & 4 != 0 {
		send.reset(1);
	} else if kind & 2 != 0 {
		let _ = send.finish();
	}
	Some(Box::new((send, recv)))
}

async fn run(data: &[u8]) {
	let flags = data.first().copied().unwrap_or_default();
	let network = Network::new(SimConfig::default());
	let server_addr: SocketAddr = "10.0.0.1:4433".parse().unwrap();
	let (server_config, client_config) = CERTIFICATE.with(|cert| {
		(
			moq_quic::Config::new()
				.with_server(cert, &[h3::ALPN])
				.expect("a server configuration"),
			(moq_quic::Config::new())
				.with_client(&Verification::Fingerprints(vec![cert.fingerprint()]), &[h3::ALPN])
				.expect("a client configuration"),
		)
	});
	let server_endpoint = Endpoint::simulated(&network, server_addr, server_config);
	let client_endpoint = Endpoint::simulated(&network, "10.0.0.2:5000".parse().unwrap(), client_config);
	let Ok(client) = client_endpoint.connect(server_addr, "localhost") else {
		return;
	};
	let Some(server) = server_endpoint.accept().await else {
		return;
	};
	let served = kio::spawn(serve(server, flags & 2 != 0));

	// The session, when the client opens it properly.
	let mut session = None;
	if flags & 1 != 0 {
		let request = ConnectRequest {
			authority: "localhost".into(),
			path: "/room".into(),
			protocols: vec!["moq-lite-05".into()],
			origin: None,
		};
		if let Some(Ok((wt, response))) = within(SETUP_TIMEOUT, webtransport::connect(&client, &request)).await
			&& response.status == 200
		{
			session = Some(wt);
		}
	}
	let mut kept: Vec<Box<dyn Any>> = Vec::new();
	if let Some(wt) = &session
		&& flags & 4 != 0
	{
		let mut setup = Vec::new();
		u64::from(DataType::Setup).encode(&mut setup);
		Setup::new().with_origin(9).encode(&mut setup);
		kept.extend(play(wt, 2, Bytes::from(setup)).await);
	}
	for (kind, bytes) in moq_net::test_support::fuzz_streams(data.get(1..).unwrap_or_default()) {
		let bytes = Bytes::copy_from_slice(bytes);
		let opened = match &session {
			Some(wt) if kind & 8 != 0 => play(wt, kind, bytes).await,
			_ => play(&client, kind, bytes).await,
		};
		let Some(opened) = opened else { break };
		kept.push(opened);
	}
	kio::time::sleep(PLAY).await;
	client.close(0, "done");
	drop(kept);
	drop(session);
	kio::time::sleep(WIND_DOWN).await;
	assert!(
		served.is_finished(),
		"the server's side still runs {WIND_DOWN:?} after the client closed"
	);
	drop(served);
	drop((client, client_endpoint, server_endpoint, network));
	// Let what was dropped wind down before the next input.
	kio::time::sleep(Duration::from_millis(100)).await;
}

fuzz_target!(|data: &[u8]| {
	RUNTIME.with(|runtime| {
		let mut runtime = runtime.borrow_mut();
		let runtime = runtime.get_or_insert_with(|| {
			kio::Builder::single()
				.paused_clock(true)
				.build()
				.expect("a kio runtime")
		});
		runtime.block_on(run(data));
	});
});
