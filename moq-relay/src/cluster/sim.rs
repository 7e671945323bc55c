//! A relay cluster on moq-quic's simulated network: the relay's own code (its [`Relay`], the
//! accept loop and session serving of `connection.rs`, the `Cluster`'s
//! links), with simulated endpoints in place of its sockets. Each relay dials every relay after
//! it in the list, with the cluster token, as configured peers.
//!
//! Used by the cluster simulation test (`moq-relay/tests/cluster_sim.rs`) and by the control-plane
//! benchmark (`bench/src/bin/cluster.rs`); run it on a runtime with a paused clock.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kio::JoinHandle;
use kio::sync::Producer;
use moq_client::Sockets;
use moq_net::model::Origin;
use moq_quic::sim::Network;
use moq_quic::{Certificate, Endpoint, Verification};

use crate::auth::{self, Anonymous, Auth, AuthConfig, Keys};
use crate::config::{self, Config, PeerTls, Tls};
use crate::limits::Limits;
use crate::metrics::Sources;
use crate::relay::Relay;

/// The secret the simulated relays' cluster token is signed with.
const KEY: &[u8] = b"the simulated cluster's shared secret, 32+ bytes";

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

/// A running simulated cluster; its relays stop when it drops.
pub struct SimCluster {
	/// The relays, by index.
	pub relays: Vec<Arc<Relay>>,
	/// How clients check the relays' (shared) certificate.
	pub verification: Verification,
	shutdown: Producer<()>,
	tasks: Vec<JoinHandle<()>>,
}

impl SimCluster {
	/// `relays` relays on `network`, each linked with each (the one earlier in the list dials),
	/// with `linger` for peers lost abruptly, anonymous access for clients everywhere.
	pub fn start(network: &Network, relays: usize, linger: Duration) -> Self {
		let cert = Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY)
			.expect("a self-signed certificate");
		let fingerprint = cert.fingerprint();
		let alpns = [moq_net::lite::Version::Lite05.alpn(), moq_quic::h3::ALPN];
		let server = moq_quic::Config::new()
			.with_server(&cert, &alpns)
			.expect("a server configuration");
		let token = auth::sign_hs256(&serde_json::json!({"cluster": true}), KEY);
		let keys = format!(
			r#"{{"kty": "oct", "k": "{}", "alg": "HS256"}}"#,
			auth::base64url_encode(KEY)
		);
		let shutdown = Producer::new(());
		let mut tasks = Vec::new();
		let mut all = Vec::new();
		for index in 0..relays {
			let cluster = config::Cluster {
				connect: (index + 1..relays)
					.map(|peer| format!("moqt://{}/", relay_addr(peer)))
					.collect(),
				token: Some(token.clone()),
				id: Some(relay_id(index)),
				linger,
				tls: PeerTls::Fingerprints(vec![fingerprint]),
				..config::Cluster::default()
			};
			let config = Config {
				file: None,
				listen: relay_addr(index),
				http: None,
				workers: 1,
				tls: Tls::Generate { names: Vec::new() },
				auth: AuthConfig::default(),
				log_level: "warn".into(),
				shutdown_timeout: Duration::from_secs(1),
				cache_size: 256 << 20,
				max_connections: None,
				limits: Limits::default(),
				cluster,
			};
			let auth = Auth::from_keys(Keys::parse(&keys).expect("a key"), &Anonymous::everything())
				.expect("an auth configuration");
			let origin = Origin::new(relay_id(index));
			let relay = Arc::new(Relay::with_auth(&config, origin, auth, Sources::default()).expect("a relay"));
			let endpoint = Endpoint::simulated(network, relay_addr(index), server.clone());
			let sockets = Sockets::Simulated(network.clone(), relay_ip(index));
			tasks.push(kio::spawn(crate::server::serve_endpoint(
				relay.clone(),
				endpoint,
				0,
				sockets,
				shutdown.consume(),
			)));
			all.push(relay);
		}
		Self {
			relays: all,
			verification: Verification::Fingerprints(vec![fingerprint]),
			shutdown,
			tasks,
		}
	}

	/// The relays' origins, by index.
	pub fn origins(&self) -> Vec<Origin> {
		self.relays.iter().map(|relay| relay.origin().clone()).collect()
	}
}

impl Drop for SimCluster {
	fn drop(&mut self) {
		let _ = self.shutdown.close();
		for task in &self.tasks {
			task.abort();
		}
	}
}
