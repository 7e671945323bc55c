//! QMux on the relay's TCP port, for clients that cannot reach it over UDP, under the same rules
//! as a QUIC connection. Three carriers, all handed over by the HTTP server:
//!
//! - **WebSocket** (`ws://`, `wss://`): a `GET` asking to upgrade ([`crate::http::WebSocket`]).
//!   The sub-protocol is the first of ours the client offered ([`PROTOCOLS`]: moq-lite-05, then
//!   04 and 03, each on qmux-01, -02 and -00; qmux-01 first, as both public clients land on it
//!   with the public relay); none in common is answered 400. Auth by the request's path and
//!   `?jwt=`, as a WebTransport CONNECT's (refused: 401).
//! - **TLS** (ALPN `qmux-01.moq-lite-05`, ...: [`TLS_ALPN`]): records, the version and the
//!   application protocol from the ALPN; the path and `?jwt=` in SETUP, as on raw QUIC.
//! - **Plaintext** (`tcp://`): records on qmux-01, the application protocol the first of ours
//!   the client names in its transport parameters; the path in SETUP.
//!
//! Then, whatever the carrier:
//!
//! 1. Admission: its address's share of the memory ceiling must have room for what the
//!    connection costs ([`qmux::CONNECTION_COST`], and TLS's) and its first receive window, and a
//!    connection slot: else a WebSocket is answered 503 and the others are closed. Both are held
//!    until the connection's driver is done.
//! 2. QMux (`moq_quic::qmux`): the transport parameters each way, moq-lite's SETUP, and the
//!    session ([`crate::connection::serve_session`]), exactly as over QUIC. Its memory (its cost,
//!    window, send queues, and what the session holds) is charged to the connection's budget
//!    under its address's share.
//!
//! Every step before the session is bounded by `[limits] setup_timeout`, a WebSocket's answer
//! included, so a client that never reads its 101 holds a slot for that long at most.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use kio::sync::Consumer;
use kio::{Either, race};
use moq_net::lite::{ErrorCode, Version, session};
use moq_quic::byte_stream::{ByteStream, TLS_COST};
use moq_quic::qmux::{self, Carrier, QmuxConnection, Side, ws};
use tracing::{debug, warn};

use crate::auth::Grant;
use crate::connection::{Ends, Link, Opened, SHUTDOWN_CODE, authorize, serve_session, setup_by};
use crate::http::{Qmux, WebSocket};
use crate::metrics::Carried;
use crate::relay::{Relay, Slot};

/// The WebSocket sub-protocols we answer, in our order of preference.
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

/// The ALPNs of the relay's TLS on TCP, in our order: HTTP (`https://`, `wss://`), then QMux
/// records (qmux-00 has none, so it is not offered over TLS).
pub(crate) const TLS_ALPN: [&[u8]; 7] = [
	b"http/1.1",
	b"qmux-01.moq-lite-05",
	b"qmux-02.moq-lite-05",
	b"qmux-01.moq-lite-04",
	b"qmux-02.moq-lite-04",
	b"qmux-01.moq-lite-03",
	b"qmux-02.moq-lite-03",
];

/// The application protocols plaintext QMux may agree on, in our order.
const PLAINTEXT_PROTOCOLS: [&str; 3] = ["moq-lite-05", "moq-lite-04", "moq-lite-03"];

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
	let Some(grant) = authorize(&relay, &target, None, peer) else {
		return refuse(&mut stream, 401, "unauthorized", deadline).await;
	};
	let Some(admitted) = admit(&relay, peer, stream.is_tls()) else {
		return refuse(&mut stream, 503, "over the memory or connection limit", deadline).await;
	};
	let protocol = format!("{}.{app}", version.token());
	if write_by(&mut stream, &ws::response(&upgrade, &protocol), deadline)
		.await
		.is_none()
	{
		debug!(%peer, "websocket: the 101 was not taken in time");
		return;
	}
	let carried = if stream.is_tls() {
		Carried::SecureWebSocket
	} else {
		Carried::WebSocket
	};
	relay.stats.qmux_connection(carried);
	let (conn, driver) = qmux::serve(
		stream,
		Carrier::WebSocket(&leftover),
		Side::Server,
		version,
		Some(app.to_owned()),
		config(&relay, None),
		peer,
		Some(admitted.budget.clone()),
	);
	let started = Started {
		conn,
		driver: kio::spawn(driver),
		carried,
		deadline,
		peer,
	};
	run(&relay, admitted, started, Some(grant), shutdown).await;
}

/// Serves one QMux connection without HTTP (over TLS, or in plaintext) until its session ends.
pub(crate) async fn serve_qmux(relay: Arc<Relay>, request: Qmux, shutdown: Consumer<()>) {
	let Qmux {
		mut stream,
		leftover,
		version,
		protocol,
		peer,
	} = request;
	let deadline = kio::time::now() + relay.limits.setup_timeout;
	let Some(admitted) = admit(&relay, peer, stream.is_tls()) else {
		let _ = race(stream.shutdown(), kio::time::sleep_until(deadline)).await;
		return;
	};
	let carried = if stream.is_tls() { Carried::Tls } else { Carried::Tcp };
	relay.stats.qmux_connection(carried);
	// On plaintext TCP, the transport parameters name the application protocol.
	let protocols = match protocol {
		Some(_) => None,
		None => Some(PLAINTEXT_PROTOCOLS.map(str::to_owned).to_vec()),
	};
	let (conn, driver) = qmux::serve(
		stream,
		Carrier::Records(&leftover),
		Side::Server,
		version,
		protocol,
		config(&relay, protocols),
		peer,
		Some(admitted.budget.clone()),
	);
	let started = Started {
		conn,
		driver: kio::spawn(driver),
		carried,
		deadline,
		peer,
	};
	run(&relay, admitted, started, None, shutdown).await;
}

/// A connection's admission: its memory and its slot, held until its driver is done.
struct Admitted<'a> {
	budget: kio::sync::Budget,
	/// What its first charge will be, held from the check on, so connections of one address
	/// admitted at once each see the others'; the connection's own charge replaces it.
	reserved: kio::sync::Charge,
	slot: Slot<'a>,
}

/// Room for a connection from `peer` (its cost, TLS's with `tls`, and its first window) in its
/// address's share of the memory ceiling, and a connection slot; `None` (counted and logged) if
/// either is missing.
fn admit(relay: &Arc<Relay>, peer: SocketAddr, tls: bool) -> Option<Admitted<'_>> {
	let window = u64::from(relay.limits.initial_window);
	let budget = relay.address_memory(peer.ip()).child(u64::MAX);
	let cost = qmux::CONNECTION_COST + if tls { TLS_COST } else { 0 } + window;
	if !budget.has_room(cost) && !relay.memory_accounts().make_room(peer.ip(), cost) {
		relay.stats.refused.fetch_add(1, Ordering::Relaxed);
		debug!(%peer, "qmux: the address holds its share of the memory ceiling");
		return None;
	}
	let mut reserved = budget.empty();
	reserved.force(cost);
	let Some(slot) = relay.slots.admit(peer.ip(), Some(budget.clone())) else {
		relay.stats.refused.fetch_add(1, Ordering::Relaxed);
		warn!(%peer, "too many connections");
		return None;
	};
	Some(Admitted { budget, reserved, slot })
}

/// The QMux configuration: the relay's windows and stream counts, and the application
/// `protocols` to offer in the transport parameters (plaintext TCP only).
fn config(relay: &Relay, protocols: Option<Vec<String>>) -> qmux::Config {
	let limits = &relay.limits;
	let stream_window = u64::from(limits.stream_window);
	qmux::Config {
		params: qmux::params::Params {
			idle_timeout_ms: 30_000,
			max_data: u64::from(limits.initial_window),
			max_stream_data_bidi_local: stream_window,
			max_stream_data_bidi_remote: stream_window,
			max_stream_data_uni: stream_window,
			max_streams_bidi: u64::from(limits.streams),
			max_streams_uni: u64::from(limits.streams),
			max_datagram_frame_size: qmux::params::MIN_RECORD_SIZE,
			max_record_size: qmux::params::MIN_RECORD_SIZE,
			application_protocols: protocols.unwrap_or_default(),
		},
		send_buffer: limits.send_buffer as u64,
	}
}

/// A connection whose driver runs.
struct Started {
	conn: QmuxConnection,
	driver: kio::JoinHandle<()>,
	carried: Carried,
	deadline: Instant,
	peer: SocketAddr,
}

/// SETUP (the application protocol agreed first, where the parameters name it), auth (by the
/// upgrade's `grant`, or else by SETUP's path), the session; then the close, and the slot and
/// memory given back.
async fn run(
	relay: &Arc<Relay>,
	admitted: Admitted<'_>,
	started: Started,
	grant: Option<Grant>,
	shutdown: Consumer<()>,
) {
	let Admitted { reserved, slot, .. } = admitted;
	drop(reserved);
	let Started {
		conn,
		mut driver,
		carried,
		deadline,
		peer,
	} = started;
	// Until the session starts, the relay's shutdown ends the connection at once (a QUIC one's
	// endpoint closes it; nothing else would close this one before the setup deadline).
	let setup = async {
		let protocol = match race(conn.negotiated(), kio::time::sleep_until(deadline)).await {
			Either::Left(protocol) => protocol,
			Either::Right(()) => None,
		};
		let config = session_config(relay, &conn, protocol.as_deref());
		let setup = match protocol {
			Some(_) => setup_by(&conn, &config, deadline, peer).await,
			None => {
				debug!(%peer, transport = carried.name(), "qmux: no application protocol agreed in time");
				conn.close(ErrorCode::Version.code(), "no application protocol in common");
				None
			}
		};
		setup.map(|setup| (config, setup))
	};
	let opened = match race(setup, shutdown.closed()).await {
		Either::Left(opened) => opened,
		Either::Right(()) => {
			conn.close(SHUTDOWN_CODE, "relay shutting down");
			None
		}
	};
	if let Some((session_config, setup)) = opened {
		let grant = grant.or_else(|| {
			let grant = authorize(relay, setup.path.as_deref().unwrap_or_default(), None, peer);
			if grant.is_none() {
				conn.close(ErrorCode::Unauthorized.code(), "unauthorized");
			}
			grant
		});
		if let Some(grant) = grant {
			relay.stats.qmux_session(carried);
			let opened = Opened {
				transport: conn.clone(),
				config: session_config,
				peer: setup.into(),
				grant,
				link: Link {
					remote: peer,
					worker: 0,
					transport: carried.name(),
				},
			};
			let ends = Ends {
				shutdown,
				eviction: slot.eviction.clone(),
			};
			serve_session(relay, opened, &|window| conn.set_receive_window(window), ends).await;
		}
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

/// The session's configuration, for the moq-lite version `protocol` names.
fn session_config(relay: &Relay, conn: &QmuxConnection, protocol: Option<&str>) -> session::Config {
	session::Config {
		origin: relay.id(),
		counters: Some(relay.counters.clone()),
		version: protocol
			.and_then(|p| Version::from_alpn(p.as_bytes()))
			.unwrap_or_default(),
		linger: relay.cluster.config.linger,
		memory: conn.memory(),
		..session::Config::default()
	}
}

/// Writes all of `bytes` by `deadline`; `None` if the socket failed or the peer did not take them.
async fn write_by(stream: &mut ByteStream, bytes: &[u8], deadline: Instant) -> Option<()> {
	match race(stream.write_all(bytes), kio::time::sleep_until(deadline)).await {
		Either::Left(Ok(())) => Some(()),
		_ => None,
	}
}

/// Answers an upgrade with `status` and closes.
async fn refuse(stream: &mut ByteStream, status: u16, why: &str, deadline: Instant) {
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
