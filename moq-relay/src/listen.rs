//! Where connections come in: each worker's QUIC endpoint (raw QUIC and WebTransport on the
//! relay's UDP port, shared with `SO_REUSEPORT`), and the HTTP listener on worker 0.
//!
//! A transport that comes in another way (a TCP listener, say) gets an accept loop here that
//! hands each connection to [`crate::connection`].

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
/// then closes them all and waits for them to drain, for at most the shutdown timeout.
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
	endpoint.close(SHUTDOWN_CODE, "relay shutting down");
	let drained = race(endpoint.drained(), kio::time::sleep(relay.shutdown_timeout)).await;
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
/// worker 0 also gives the shares of addresses that left back to those still here.
pub(crate) async fn publish_stats(relay: Arc<Relay>, endpoint: Endpoint, index: usize) {
	loop {
		if index == 0 {
			relay.memory.rebalance();
			relay.slots.rebalance();
		}
		relay.stats.set_endpoint(index, endpoint.stats());
		kio::time::sleep(Duration::from_secs(1)).await;
	}
}

/// Binds the HTTP listener at `addr` and serves it on this worker: its task and where it listens.
/// An unspecified port means "the QUIC port, on TCP" when it is the QUIC address (one number for
/// both), and any free port if that one is taken on TCP.
pub(crate) fn http(
	relay: &Arc<Relay>,
	addr: SocketAddr,
	quic_listen: SocketAddr,
	quic_bound: SocketAddr,
	certificate: ServerCertificate,
) -> anyhow::Result<(kio::JoinHandle<()>, SocketAddr)> {
	let same = SocketAddr::new(addr.ip(), quic_bound.port());
	let listener = match addr.port() == 0 && addr.ip() == quic_listen.ip() {
		true => TcpListener::bind(same).or_else(|_| TcpListener::bind(addr)),
		false => TcpListener::bind(addr),
	}
	.with_context(|| format!("binding TCP {addr} for HTTP"))?;
	let bound = listener.local_addr();
	let limits = relay.limits;
	let metrics = relay.clone();
	let routes = Routes::new(
		move || certificate.fingerprint_hex(),
		move || metrics.stats.render(&metrics),
	)
	.with_max_connections(limits.http_connections)
	.with_client_limits(limits.http_per_ip, limits.http_head_timeout)
	.with_memory({
		let relay = relay.clone();
		move |ip| relay.address_memory(ip)
	});
	Ok((kio::spawn(http::serve(listener, Rc::new(routes))), bound))
}
