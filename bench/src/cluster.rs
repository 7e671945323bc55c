//! A relay cluster on moq-quic's simulated network: what the relay binary runs for a cluster,
//! minus its sockets. Each relay is one origin, served to whoever connects (as a cluster session
//! when the peer says so, here by its connection path, [`CLUSTER_PATH`], standing in for the
//! cluster token), with links dialled for ever to the relays after it in the list, with the
//! relay's own backoff ([`moq_relay::cluster::Backoff`]).
//!
//! Used by the cluster simulation test (`moq-relay/tests/cluster_sim.rs`) and by the control-plane
//! benchmark (`bench/src/bin/cluster.rs`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use kio::JoinHandle;
use moq_net::lite::session;
use moq_net::model::Origin;
use moq_quic::sim::Network;
use moq_quic::{Certificate, Endpoint, Verification};
use moq_relay::client::{self, Url};
use moq_relay::cluster::Backoff;

/// The connection path a cluster link dials.
pub const CLUSTER_PATH: &str = "/cluster";

/// The address of relay `index`.
pub fn relay_ip(index: usize) -> IpAddr {
	IpAddr::from([10, 0, 0, index as u8 + 1])
}

/// Where relay `index` serves.
pub fn relay_addr(index: usize) -> SocketAddr {
	SocketAddr::new(relay_ip(index), 4443)
}

/// Relay `index`'s origin id.
pub fn relay_id(index: usize) -> u64 {
	100 + index as u64
}

/// A running simulated cluster.
pub struct SimCluster {
	/// Each relay's origin.
	pub origins: Vec<Origin>,
	/// How clients check the relays' (shared) certificate.
	pub verification: Verification,
	tasks: Vec<JoinHandle<()>>,
}

impl SimCluster {
	/// `relays` relays on `network`, each linked with each (the one earlier in the list dials),
	/// with `linger` for peers lost abruptly.
	pub fn start(network: &Network, relays: usize, linger: Duration) -> Self {
		let cert = Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY)
			.expect("a self-signed certificate");
		let verification = Verification::Fingerprints(vec![cert.fingerprint()]);
		let server = moq_quic::Config::new()
			.with_server(&cert, &[moq_quic::ALPN_MOQ_LITE_05])
			.expect("a server configuration");
		let origins: Vec<Origin> = (0..relays).map(|i| Origin::new(relay_id(i))).collect();
		let mut tasks = Vec::new();
		for (i, origin) in origins.iter().enumerate() {
			let endpoint = Endpoint::simulated(network, relay_addr(i), server.clone());
			tasks.push(kio::spawn(serve(endpoint, origin.clone(), linger)));
			for j in i + 1..relays {
				tasks.push(kio::spawn(link(
					network.clone(),
					i,
					j,
					origin.clone(),
					verification.clone(),
					linger,
				)));
			}
		}
		Self {
			origins,
			verification,
			tasks,
		}
	}
}

impl Drop for SimCluster {
	fn drop(&mut self) {
		for task in &self.tasks {
			task.abort();
		}
	}
}

/// One relay: accepts sessions on `endpoint` and serves `origin` to them.
async fn serve(endpoint: Endpoint, origin: Origin, linger: Duration) {
	while let Some(conn) = endpoint.accept().await {
		let origin = origin.clone();
		let _detached = kio::spawn(async move {
			let mut config = session::Config {
				origin: origin.id(),
				linger,
				limits: session::Limits::UNLIMITED,
				..session::Config::default()
			};
			let Ok(peer) = session::setup(&conn, &config).await else {
				return;
			};
			config.cluster = peer.path.as_deref() == Some(CLUSTER_PATH);
			let session = session::start(
				conn.clone(),
				config,
				peer,
				Some(origin.consumer()),
				Some(origin.producer()),
			);
			session.closed().await;
		});
	}
}

/// Keeps the link from relay `from` to relay `to` up, as `moq_relay::cluster::link` does.
async fn link(network: Network, from: usize, to: usize, origin: Origin, verification: Verification, linger: Duration) {
	let local = SocketAddr::new(relay_ip(from), 5000 + to as u16);
	let endpoint = Endpoint::simulated(&network, local, moq_quic::Config::new());
	let url = Url::parse(&format!("moqt://localhost:4443{CLUSTER_PATH}")).expect("a valid URL");
	let mut backoff = Backoff::new(relay_id(from) << 8 | to as u64);
	loop {
		let config = session::Config {
			origin: origin.id(),
			cluster: true,
			linger,
			limits: session::Limits::UNLIMITED,
			..session::Config::default()
		};
		let dialled = client::dial_configured(
			&endpoint,
			relay_addr(to),
			&url,
			&verification,
			config,
			Some(origin.consumer()),
			Some(origin.producer()),
		)
		.await;
		if let Ok(client) = dialled {
			let up = kio::time::now();
			client.closed().await;
			if kio::time::now() - up > Duration::from_secs(30) {
				backoff.reset();
			}
		}
		kio::time::sleep(backoff.delay()).await;
	}
}
