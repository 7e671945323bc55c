//! Where connections come in: each worker's QUIC endpoint (raw QUIC and WebTransport on the
//! relay's UDP port, shared with `SO_REUSEPORT`), and the HTTP listener on worker 0.
//!
//! A transport that comes in another way gets an accept loop here, or is handed over by one:
//! WebSocket upgrades on the HTTP port go to [`crate::websocket`].

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kio::net::TcpListener;
use kio::sync::Consumer;
use kio::{Either, race};
use moq_quic::{Endpoint, ServerCertificate};
use tracing::{info, warn};

use crate::connection::{SHUTDOWN_CODE, serve_connection};
use crate::http::{self, Routes};
use crate::relay::Relay;

/// Accepts connections on worker `index`'s `endpoint` and serves each in a task until shutdown;
/// then lets each session close itself with its protocol's code (a moq-lite session at once, an
/// IETF one after GOAWAY and a grace of half the shutdown timeout), closes what is left (a
/// handshake, a SETUP not yet read) and waits for them to drain, all within the shutdown
/// timeout.
pub(crate) async fn accept_quic(relay: &Arc<Relay>, endpoint: &Endpoint, index: usize, shutdown: &Consumer<()>) {
	let mut connections = Vec::new();
	loop {
		let next = race(endpoint.accept(), shutdown.closed()).await;
		let Either::Left(Some(conn)) = next else {
			break;
		};
		connections.retain(|task: &kio::JoinHandle<()>| !task.is_finished());
		connections.push(kio::spawn(serve_connection(
			relay.clone(),
			conn,
			index,
			shutdown.clone(),
		)));
	}
	info!(worker = index, open = endpoint.open_connections(), "shutting down");
	endpoint.stop_accepting();
	let deadline = kio::time::now() + relay.shutdown_timeout;
	// Closing the endpoint first would close every session with moq-lite's code: a draft's
	// client would see 25, which its draft does not have, and no GOAWAY.
	let sessions_closed = async {
		for task in &connections {
			let _ = kio::wait(|w| task.poll_join(w)).await;
		}
	};
	let sessions_deadline = kio::time::sleep(relay.shutdown_timeout * 3 / 4);
	let _ = race(sessions_closed, sessions_deadline).await;
	endpoint.close(SHUTDOWN_CODE, "relay shutting down");
	let drained = race(endpoint.drained(), kio::time::sleep_until(deadline)).await;
	if let Either::Right(()) = drained {
		warn!(
			worker = index,
			open = endpoint.open_connections(),
			"drain deadline passed"
		);
	}
	for task in connections {
		task.abort();
	}
}

/// Copies a worker's endpoint counters where `/metrics` (on worker 0) can read them, every second;
/// worker 0 also gives the shares of addresses that left back to those still here, and holds
/// every address to its share of the memory ceiling.
pub(crate) async fn publish_stats(relay: Arc<Relay>, endpoint: Endpoint, index: usize) {
	loop {
		if index == 0 {
			relay.memory.rebalance();
			relay.slots.rebalance();
			relay.enforce_memory();
		}
		relay.stats.set_endpoint(index, endpoint.stats());
		kio::time::sleep(Duration::from_secs(1)).await;
	}
}

/// How many times [`bind`] tries for one port number on UDP and TCP before it takes two.
const SAME_PORT_TRIES: usize = 16;

/// Binds worker 0's QUIC endpoint at `quic`, and the HTTP listener at `http` if any. An HTTP
/// address with port 0 on the QUIC address's IP means "the QUIC port, on TCP": with both ports
/// 0 the kernel picks a TCP port that is then tried on UDP (a few times, as another socket may
/// hold it there), and with a fixed QUIC port that one is tried on TCP; only if those fail does
/// HTTP take any free port.
pub(crate) fn bind(
	quic: SocketAddr,
	http: Option<SocketAddr>,
	config: impl Fn() -> moq_quic::Config,
) -> anyhow::Result<(Endpoint, Option<TcpListener>)> {
	let bind_quic = |addr: SocketAddr| Endpoint::bind(addr, config()).with_context(|| format!("binding UDP {addr}"));
	let bind_http = |addr: SocketAddr| TcpListener::bind(addr).with_context(|| format!("binding TCP {addr} for HTTP"));
	let Some(http) = http else {
		return Ok((bind_quic(quic)?, None));
	};
	if http.port() != 0 || http.ip() != quic.ip() {
		return Ok((bind_quic(quic)?, Some(bind_http(http)?)));
	}
	if quic.port() == 0 {
		for _ in 0..SAME_PORT_TRIES {
			let listener = bind_http(http)?;
			if let Ok(endpoint) = Endpoint::bind(listener.local_addr(), config()) {
				return Ok((endpoint, Some(listener)));
			}
		}
	}
	let endpoint = bind_quic(quic)?;
	let same = SocketAddr::new(http.ip(), endpoint.local_addr().port());
	let listener = TcpListener::bind(same).or_else(|_| bind_http(http))?;
	Ok((endpoint, Some(listener)))
}

/// The QMux connections the TCP port handed over (tasks of their own on worker 0, beside the
/// HTTP server's), waited for at shutdown.
#[derive(Clone, Default)]
pub(crate) struct Handed(Rc<RefCell<Vec<kio::JoinHandle<()>>>>);

impl Handed {
	fn spawn(&self, task: impl Future<Output = ()> + 'static) {
		let mut tasks = self.0.borrow_mut();
		tasks.retain(|task| !task.is_finished());
		tasks.push(kio::spawn(task));
	}

	/// Waits until every one has closed (each closes itself at shutdown, its close sent within
	/// the shutdown timeout), for at most `limit`; then drops those left.
	pub(crate) async fn drained(&self, limit: Duration) {
		let tasks = std::mem::take(&mut *self.0.borrow_mut());
		let all = async {
			for task in tasks {
				let _ = task.await;
			}
		};
		if let Either::Right(()) = race(all, kio::time::sleep(limit)).await {
			warn!("QMux connections still open at the drain deadline");
		}
	}
}

/// Serves HTTP from `listener` on this worker: its task, where it listens, and the QMux
/// connections it hands over.
pub(crate) fn http(
	relay: &Arc<Relay>,
	listener: TcpListener,
	certificate: ServerCertificate,
	shutdown: Consumer<()>,
) -> anyhow::Result<(kio::JoinHandle<()>, SocketAddr, Handed)> {
	let bound = listener.local_addr();
	let limits = relay.limits;
	let metrics = relay.clone();
	let tls = moq_quic::tls::tcp_server_config(&certificate, &crate::qmux::TLS_ALPN)?;
	let handed = Handed::default();
	let routes = Routes::new(
		move || certificate.fingerprint_hex(),
		move || metrics.stats.render(&metrics),
	)
	.with_max_connections(limits.http_connections)
	.with_client_limits(limits.http_per_ip, limits.http_head_timeout)
	.with_memory({
		let relay = relay.clone();
		move |ip| relay.address_memory(ip)
	})
	.with_tls(tls)
	.with_websocket({
		let (relay, shutdown, handed) = (relay.clone(), shutdown.clone(), handed.clone());
		move |request| handed.spawn(crate::qmux::serve_websocket(relay.clone(), request, shutdown.clone()))
	})
	.with_qmux({
		let (relay, handed) = (relay.clone(), handed.clone());
		move |request| handed.spawn(crate::qmux::serve_qmux(relay.clone(), request, shutdown.clone()))
	});
	Ok((kio::spawn(http::serve(listener, Rc::new(routes))), bound, handed))
}
