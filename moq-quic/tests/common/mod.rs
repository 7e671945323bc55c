//! What the tests share: a paused-clock runtime and a connected pair on a simulated network,
//! and for the tests over real sockets, a loopback address, a certificate and a client
//! configuration that pins it.

#![allow(dead_code)] // Each test crate uses a different subset.

use std::net::SocketAddr;
use std::sync::Arc;

use moq_quic::sim::Network;
use moq_quic::{Certificate, Config, Connection, Endpoint, TransportConfig, Verification};

pub(crate) const ALPN: &[u8] = b"test/1";

/// A single-worker runtime whose clock moves only when every task is idle.
pub(crate) fn runtime() -> kio::Runtime {
	kio::Builder::single()
		.paused_clock(true)
		.build()
		.expect("a kio runtime")
}

/// An ephemeral port on loopback.
pub(crate) fn local() -> SocketAddr {
	"127.0.0.1:0".parse().unwrap()
}

/// A self-signed certificate for `localhost`.
pub(crate) fn certificate() -> Certificate {
	Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY).unwrap()
}

/// A client configuration that pins `pin` and offers [`ALPN`].
pub(crate) fn pinned_client(pin: [u8; 32]) -> Config {
	Config::new()
		.with_client(&Verification::Fingerprints(vec![pin]), &[ALPN])
		.unwrap()
}

pub(crate) fn server_addr() -> SocketAddr {
	"10.0.0.1:4433".parse().unwrap()
}

pub(crate) fn client_addr() -> SocketAddr {
	"10.0.0.2:5000".parse().unwrap()
}

/// quinn-proto's RNG seed (connection ids) for one side of a simulation.
fn quinn_seed(seed: u64, side: u8) -> [u8; 32] {
	let mut bytes = [side; 32];
	bytes[..8].copy_from_slice(&seed.to_le_bytes());
	bytes
}

/// A server and a client endpoint on `network`, seeded with `seed`, and an established
/// connection: (server endpoint, client endpoint, the client's end, the server's end). The server
/// uses `server_transport` when given.
pub(crate) async fn connected(
	network: &Network,
	seed: u64,
	server_transport: Option<TransportConfig>,
) -> (Endpoint, Endpoint, Connection, Connection) {
	connected_with(network, seed, server_transport, |config| config).await
}

/// [`connected`], with the client's configuration changed by `client`.
pub(crate) async fn connected_with(
	network: &Network,
	seed: u64,
	server_transport: Option<TransportConfig>,
	client: impl FnOnce(Config) -> Config,
) -> (Endpoint, Endpoint, Connection, Connection) {
	let cert = Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY).unwrap();
	let mut server_config = Config::new()
		.with_server(&cert, &[ALPN])
		.unwrap()
		.with_seed(quinn_seed(seed, 1));
	if let Some(transport) = server_transport {
		server_config
			.server
			.as_mut()
			.expect("configured above")
			.transport_config(Arc::new(transport));
	}
	let client_config = client(
		Config::new()
			.with_client(&Verification::Fingerprints(vec![cert.fingerprint()]), &[ALPN])
			.unwrap()
			.with_seed(quinn_seed(seed, 2)),
	);
	let server_endpoint = Endpoint::simulated(network, server_addr(), server_config);
	let client_endpoint = Endpoint::simulated(network, client_addr(), client_config);
	let client = client_endpoint.connect(server_addr(), "localhost").unwrap();
	client.established().await.expect("the handshake completes");
	let server = server_endpoint.accept().await.expect("the server accepts");
	(server_endpoint, client_endpoint, client, server)
}
