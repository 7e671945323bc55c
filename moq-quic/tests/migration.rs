//! A client whose address changes mid-connection, against a server of two workers sharing one
//! port: the kernel hashes the new address to either worker, and the connection must go on.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{ALPN, certificate, local, pinned_client};
use kio::sync::Queue;
use moq_quic::nat::Nat;
use moq_quic::{Config, Connection, Endpoint, Router};

/// Serves `endpoint`: every bidirectional stream of every connection is echoed.
async fn echo(endpoint: Endpoint) {
	while let Some(conn) = endpoint.accept().await {
		drop(kio::spawn(async move {
			while let Ok((mut send, mut recv)) = conn.accept_bi().await {
				drop(kio::spawn(async move {
					while let Ok(Some(chunk)) = recv.read().await {
						if send.write(chunk).await.is_err() {
							return;
						}
					}
					let _ = send.finish();
				}));
			}
		}));
	}
}

/// A request and its echo, on a new stream.
async fn round_trip(conn: &Connection, request: &'static [u8]) {
	let (mut send, mut recv) = conn.open_bi().await.expect("a stream");
	send.write(Bytes::from_static(request)).await.expect("the request sent");
	send.finish().unwrap();
	let mut echoed = Vec::new();
	while let Some(chunk) = recv.read().await.expect("the echo") {
		echoed.extend_from_slice(&chunk);
	}
	assert_eq!(echoed, request);
}

#[test]
fn a_client_whose_address_changes_keeps_its_connection_on_either_worker() {
	// Without the routing, the worker the new address hashes to does not know the connection and
	// answers with a stateless reset, which ends it.
	let runtime = kio::Builder::new().workers(2).build().expect("a kio runtime");
	let cert = certificate();
	let pin = cert.fingerprint();
	let router = Router::new(2, 1 << 20);
	let server = Config::new()
		.with_server(&cert, &[ALPN])
		.unwrap()
		.with_shared_port(true);
	runtime.block_on(async move {
		let first = Endpoint::bind(local(), server.clone().with_router(router.clone(), 0)).unwrap();
		let addr = first.local_addr();
		let bound = Arc::new(Queue::unbounded());
		let second = kio::spawn_on(1, {
			let (server, router, bound) = (server.clone(), router.clone(), bound.clone());
			move || async move {
				let endpoint = Endpoint::bind(addr, server.with_router(router, 1)).unwrap();
				let _ = bound.try_push(());
				echo(endpoint).await;
			}
		});
		bound.pop().await.unwrap();
		drop(kio::spawn(echo(first)));

		let mut nat = Nat::new(addr);
		let client = Endpoint::bind(local(), pinned_client(pin)).unwrap();
		let conn = client.connect(nat.addr(), "localhost").unwrap();
		conn.established().await.unwrap();
		round_trip(&conn, b"before").await;
		assert_eq!(router.stats().forwarded, 0, "a handshake is not forwarded");
		// Each new port hashes to either worker: within 40 moves, one lands on the worker that
		// does not hold the connection (all 40 on the same one: 2^-40).
		let mut moves = 0;
		while router.stats().forwarded == 0 {
			moves += 1;
			assert!(moves <= 40, "40 new ports all reached the connection's own worker");
			// A NAT moves when a mapping has been idle, not between a challenge and its answer.
			nat.settle().await;
			nat.rebind();
			round_trip(&conn, b"after a move").await;
		}
		// The connection carries on from the new port, every datagram through the other worker.
		for _ in 0..3 {
			round_trip(&conn, b"on the new path").await;
		}
		let stats = router.stats();
		assert!(stats.forwarded >= 4, "{stats:?}");
		assert_eq!(stats.dropped, 0);
		eprintln!("moved {moves} times; the last to port {}; {stats:?}", nat.port());
		drop(second);
	});
}
