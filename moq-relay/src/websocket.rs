//! QMux over WebSocket, for clients that cannot reach the relay over UDP: the HTTP server hands
//! over every `GET` asking to upgrade ([`crate::http::WebSocket`]), and this serves it as a
//! connection of its own, under the same rules as a QUIC one.
//!
//! 1. The sub-protocol: the first of ours the client offered ([`PROTOCOLS`]: moq-lite-05, then
//!    04 and 03, each on qmux-01, -02 and -00; qmux-01 first, as both public clients land on it
//!    with the public relay). None in common is answered 400.
//! 2. Auth: the request's path and `?jwt=`, as a WebTransport CONNECT's (refused: 401).
//! 3. Admission: its address's share of the memory ceiling must have room for what the
//!    connection costs ([`qmux::CONNECTION_COST`]) and its first receive window, and a connection
//!    slot: else 503. Both are held until the connection's driver is done.
//! 4. `101 Switching Protocols`, then QMux (`moq_quic::qmux`): the transport parameters each way,
//!    moq-lite's SETUP, and the session ([`crate::connection::serve_session`]), exactly as over
//!    QUIC. Its memory (its cost, window, send queues, and what the session holds) is charged to
//!    the connection's budget under its address's share.
//!
//! Every step before the session is bounded by `[limits] setup_timeout`, the answer's write
//! included, so a client that never reads its 101 holds a slot for that long at most.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use kio::net::TcpStream;
use kio::sync::Consumer;
use kio::{Either, race};
use moq_net::lite::{Version, session};
use moq_quic::qmux::{self, Side, ws};
use tracing::{debug, warn};

use crate::connection::{Ends, Link, Opened, authorize, serve_session, setup_by};
use crate::http::WebSocket;
use crate::relay::Relay;

/// The sub-protocols we answer, in our order of preference.
pub(crate) const PROTOCOLS: [(qmux::Version, &str); 9] = [
	(qmux::Version::Qmux01, "moq-lite-05"),
	(qmux::Version::Qmux02, "moq-lite-05"),
	(qmux::Version::Qmux00, "moq-lite-05"),
	(qmux::Version::Qmux01, "moq-lite-04"),
	(qmux::Version::Qmux02, "moq-lite-04"),
	(qmux::Version::Qmux00, "moq-lite-04"),
	(qmux::Version::Qmux01, "moq-lite-03"),
	(qmux::Version::Qmux02, "moq-lite-03"),
	(qmux::Version::Qmux00, "moq-lite-03"),
];

/// Serves one upgraded WebSocket until its session ends (on worker 0, where HTTP runs).
pub(crate) async fn serve_websocket(relay: Arc<Relay>, request: WebSocket, shutdown: Consumer<()>) {
	let WebSocket {
		mut stream,
		leftover,
		target,
		upgrade,
		peer,
	} = request;
	let deadline = kio::time::now() + relay.limits.setup_timeout;
	let offered: Vec<&str> = upgrade.protocols.iter().map(String::as_str).collect();
	let Some((version, app)) = qmux::choose_protocol(&offered, &PROTOCOLS) else {
		debug!(%peer, ?offered, "websocket: no sub-protocol in common");
		return refuse(&mut stream, 400, "no supported protocol", deadline).await;
	};
	let Some(grant) = authorize(&relay, &target, peer) else {
		return refuse(&mut stream, 401, "unauthorized", deadline).await;
	};
	let limits = &relay.limits;
	let window = u64::from(limits.initial_window);
	let budget = relay.address_memory(peer.ip()).child(u64::MAX);
	let cost = qmux::CONNECTION_COST + window;
	if !budget.has_room(cost) && !relay.memory_accounts().make_room(peer.ip(), cost) {
		relay.stats.refused.fetch_add(1, Ordering::Relaxed);
		debug!(%peer, "websocket: the address holds its share of the memory ceiling");
		return refuse(&mut stream, 503, "over the memory limit", deadline).await;
	}
	// Held from the check on, so upgrades of one address answered at once each see the others';
	// the connection's own charge replaces it once it exists.
	let mut reserved = budget.empty();
	reserved.force(cost);
	let Some(slot) = relay.slots.admit(peer.ip(), Some(budget.clone())) else {
		relay.stats.refused.fetch_add(1, Ordering::Relaxed);
		warn!(%peer, "too many connections");
		return refuse(&mut stream, 503, "too many connections", deadline).await;
	};
	let protocol = format!("{}.{app}", version.token());
	if write_by(&mut stream, &ws::response(&upgrade, &protocol), deadline)
		.await
		.is_none()
	{
		debug!(%peer, "websocket: the 101 was not taken in time");
		return;
	}
	relay.stats.websockets.fetch_add(1, Ordering::Relaxed);
	let stream_window = u64::from(limits.stream_window);
	let config = qmux::Config {
		params: qmux::params::Params {
			idle_timeout_ms: 30_000,
			max_data: window,
			max_stream_data_bidi_local: stream_window,
			max_stream_data_bidi_remote: stream_window,
			max_stream_data_uni: stream_window,
			max_streams_bidi: u64::from(limits.streams),
			max_streams_uni: u64::from(limits.streams),
			max_datagram_frame_size: qmux::params::MIN_RECORD_SIZE,
			max_record_size: qmux::params::MIN_RECORD_SIZE,
		},
		send_buffer: limits.send_buffer as u64,
	};
	let (conn, driver) = qmux::serve_websocket(
		stream,
		&leftover,
		Side::Server,
		version,
		Some(app.to_owned()),
		config,
		peer,
		Some(budget),
	);
	drop(reserved);
	let mut driver = kio::spawn(driver);
	let session_config = session::Config {
		origin: relay.id(),
		counters: Some(relay.counters.clone()),
		version: Version::from_alpn(app.as_bytes()).unwrap_or_default(),
		linger: relay.cluster.config.linger,
		memory: conn.memory(),
		..session::Config::default()
	};
	if let Some(setup) = setup_by(&conn, &session_config, deadline, peer).await {
		relay.stats.websocket_sessions.fetch_add(1, Ordering::Relaxed);
		let opened = Opened {
			transport: conn.clone(),
			config: session_config,
			peer: setup,
			grant,
			link: Link {
				remote: peer,
				worker: 0,
				transport: "websocket",
			},
		};
		let ends = Ends {
			shutdown,
			eviction: slot.eviction.clone(),
		};
		serve_session(&relay, opened, &|window| conn.set_receive_window(window), ends).await;
	}
	// The close goes out before the slot and the memory are given back; a peer that does not
	// take it within the shutdown timeout (a zero window) loses its socket then, so nothing it
	// holds outlives its slot.
	drop(conn);
	if let Either::Right(()) = race(&mut driver, kio::time::sleep(relay.shutdown_timeout)).await {
		driver.abort();
		let _ = driver.await;
	}
	drop(slot);
}

/// Writes all of `bytes` by `deadline`; `None` if the socket failed or the peer did not take them.
async fn write_by(stream: &mut TcpStream, bytes: &[u8], deadline: Instant) -> Option<()> {
	let write = async {
		stream.write_all(bytes).await?;
		stream.flush().await
	};
	match race(write, kio::time::sleep_until(deadline)).await {
		Either::Left(Ok(())) => Some(()),
		_ => None,
	}
}

/// Answers an upgrade with `status` and closes.
async fn refuse(stream: &mut TcpStream, status: u16, why: &str, deadline: Instant) {
	let reason = match status {
		400 => "Bad Request",
		401 => "Unauthorized",
		_ => "Service Unavailable",
	};
	let body = format!("{why}\n");
	let response = format!(
		"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
		body.len()
	);
	if write_by(stream, response.as_bytes(), deadline).await.is_some() {
		let _ = race(stream.shutdown(), kio::time::sleep_until(deadline)).await;
	}
}
