//! The relay's start, its workers and its shutdown.
//!
//! [`run`] loads the certificate, builds the [`Relay`] every worker shares, starts a kio runtime
//! with one worker per configured thread, and has each bind its UDP socket on the shared port
//! (`listen.rs`); worker 0 also serves HTTP and keeps the certificate in service
//! (`certificates.rs`). Each worker then accepts and serves its connections
//! (`connection.rs`) and its share of the cluster's links ([`crate::cluster`]).
//!
//! Shutdown: [`Shutdown::trigger`] (the binary calls it on SIGINT or SIGTERM). Every worker stops
//! accepting, closes its connections with [`SHUTDOWN_CODE`], and waits for them to drain, for at
//! most the configured deadline; then the runtime ends.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::Context as _;
use kio::sync::{Consumer, Producer, Queue};
use moq_client::Sockets;
use moq_net::lite::Version;
use moq_net::model::Origin;
use moq_quic::{Endpoint, Router, ServerCertificate, h3};
use tracing::info;

pub use crate::certificates::Reload;
use crate::certificates::{self, warn_of_expiry};
use crate::config::Config;
pub use crate::connection::SHUTDOWN_CODE;
use crate::listen;
use crate::metrics::Sources;
use crate::relay::{Relay, random_id};

/// Triggers a running relay's shutdown from any thread.
#[derive(Clone)]
pub struct Shutdown(Arc<Producer<()>>);

impl Shutdown {
	/// A trigger, and what [`run`] watches.
	pub fn new() -> (Self, Consumer<()>) {
		let producer = Producer::new(());
		let consumer = producer.consume();
		(Self(Arc::new(producer)), consumer)
	}

	/// Starts the shutdown (idempotent).
	pub fn trigger(&self) {
		let _ = self.0.close();
	}
}

/// Where a started relay listens.
#[derive(Clone, Debug)]
pub struct Bound {
	/// The UDP address QUIC is served on.
	pub quic: SocketAddr,
	/// The TCP address of the HTTP endpoints.
	pub http: Option<SocketAddr>,
	/// SHA-256 of the certificate, lowercase hex.
	pub fingerprint: String,
}

impl Bound {
	/// The host a client on this machine reaches the relay by: `localhost` for a relay on every
	/// address of both families, else the address it listens on (`127.0.0.1` for every IPv4
	/// address: `localhost` may resolve to `::1` first, where nothing listens), bracketed if IPv6.
	/// A browser that tries `::1` for `localhost` and gets no answer over UDP (no refusal, as TCP
	/// gives) waits for ever.
	pub fn host(&self) -> String {
		match self.quic.ip() {
			IpAddr::V6(ip) if ip.is_unspecified() => "localhost".into(),
			IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".into(),
			IpAddr::V6(ip) => format!("[{ip}]"),
			IpAddr::V4(ip) => ip.to_string(),
		}
	}

	/// What the binary prints once it serves: where, the certificate, and how to connect.
	pub fn banner(&self) -> Vec<String> {
		let host = self.host();
		let port = self.quic.port();
		let mut lines = vec![format!(
			"moq-relay: QUIC (moq-lite-05, -04, -03; WebTransport over h3) on udp {}",
			self.quic
		)];
		if let Some(http) = self.http {
			lines.push(format!(
				"moq-relay: HTTP and HTTPS on tcp {http}: /health /certificate.sha256 /metrics; QMux over ws:// wss:// tcp://"
			));
			lines.push(format!("moq-relay: its page: http://{host}:{}/", http.port()));
		}
		lines.push(format!("moq-relay: certificate sha256 {}", self.fingerprint));
		lines.push(format!(
			"moq-relay: connect to moqt://{host}:{port}/<path> (or https:// for WebTransport), e.g.\n  \
			 cargo run --release -p moq-relay --bin moq-clock -- publish moqt://{host}:{port}/demo\n  \
			 cargo run --release -p moq-relay --bin moq-clock -- subscribe moqt://{host}:{port}/demo"
		));
		lines
	}
}

/// A relay started on a thread of its own by [`spawn`]; shut down and joined when dropped.
pub struct Running {
	/// Where it listens.
	pub bound: Bound,
	shutdown: Shutdown,
	reload: Reload,
	thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

/// Starts a relay as `config` says on a thread of its own (its workers on theirs); returns once
/// every worker serves.
pub fn spawn(config: Config) -> anyhow::Result<Running> {
	let (shutdown, watch) = Shutdown::new();
	let (reload, reloads) = Reload::new();
	let (bound_tx, bound_rx) = std::sync::mpsc::channel();
	let thread = std::thread::Builder::new()
		.name("moq-relay".into())
		.spawn(move || run(&config, watch, reloads, move |bound| drop(bound_tx.send(bound))))?;
	match bound_rx.recv() {
		Ok(bound) => Ok(Running {
			bound,
			shutdown,
			reload,
			thread: Some(thread),
		}),
		// It stopped before serving: its own error says why.
		Err(_) => Err(thread
			.join()
			.map_err(|_| anyhow::anyhow!("the relay thread panicked"))?
			.err()
			.unwrap_or_else(|| anyhow::anyhow!("the relay stopped before serving"))),
	}
}

impl Running {
	/// Asks it to read its certificate files again.
	pub fn reload(&self) {
		self.reload.trigger();
	}

	/// Shuts it down and waits; its own result.
	pub fn stop(mut self) -> anyhow::Result<()> {
		self.shutdown.trigger();
		match self.thread.take().map(std::thread::JoinHandle::join) {
			Some(Ok(result)) => result,
			Some(Err(_)) => anyhow::bail!("the relay thread panicked"),
			None => Ok(()),
		}
	}
}

impl Drop for Running {
	fn drop(&mut self) {
		self.shutdown.trigger();
		if let Some(thread) = self.thread.take() {
			let _ = thread.join();
		}
	}
}

/// Runs a relay on the calling thread until `shutdown` is triggered and its connections drained.
/// `bound` hears where it listens once every worker is serving.
pub fn run(
	config: &Config,
	shutdown: Consumer<()>,
	reload: Consumer<u64>,
	bound: impl FnOnce(Bound),
) -> anyhow::Result<()> {
	let (certificate, files) = certificates::load(&config.tls)?;
	warn_of_expiry(&certificate);
	let certificate = ServerCertificate::new(certificate).context("TLS certificate")?;
	let limits = config.limits;
	let mut alpns = vec![Version::Lite05.alpn(), Version::Lite04.alpn(), Version::Lite03.alpn()];
	// The IETF drafts, newest first.
	alpns.extend(moq_net::ietf::Version::ALL.iter().rev().map(|draft| draft.alpn()));
	alpns.push(h3::ALPN);
	let quic = moq_quic::Config::new()
		.with_server_certificate(&certificate, &alpns)
		.context("TLS configuration")?
		.with_limits(limits.quic)
		// Every worker binds the relay's port; the kernel spreads clients over them.
		.with_shared_port(true)
		// Connections start with a small window; a session that may publish grows it
		// (`connection.rs`), charged to its address's share of the memory ceiling.
		.with_server_windows(limits.stream_window, limits.initial_window)
		.with_send_buffer(limits.send_buffer)
		.with_max_streams(limits.streams);
	let runtime = kio::Builder::new()
		.workers(config.workers)
		.build()
		.context("starting the kio runtime (io_uring)")?;
	// Hands datagrams between the workers' endpoints (a client whose address changed).
	let router = Router::new(config.workers, limits.forward_queue);
	let sources = Sources {
		handshakes: Some(quic.handshakes.clone()),
		router: Some(router.clone()),
		certificate: Some(certificate.clone()),
		monitors: (0..config.workers).filter_map(|i| runtime.monitor(i)).collect(),
	};
	let origin = Origin::new(config.cluster.id.unwrap_or_else(random_id));
	let relay = Arc::new(Relay::new(config, origin, sources)?);
	let quic = quic.with_memory(relay.memory_accounts());
	let fingerprint = certificate.fingerprint_hex();
	let worker_quic = move |index: usize| quic.clone().with_router(router.clone(), index);
	let (listen_addr, http_addr) = (config.listen, config.http);
	runtime.block_on(async move {
		// Worker 0 binds first: with port 0 the kernel picks the port the others then share.
		let (endpoint, http_listener) = listen::bind(listen_addr, http_addr, || worker_quic(0))?;
		let quic_addr = endpoint.local_addr();
		// Each worker binds before the next starts, and all before anything is announced.
		let ready = Queue::unbounded();
		let mut workers = Vec::new();
		for index in 1..kio::worker_count() {
			let (relay, shutdown, ready_tx) = (relay.clone(), shutdown.clone(), ready.clone());
			let config = worker_quic(index);
			workers.push(kio::spawn_on(index, move || async move {
				match Endpoint::bind(quic_addr, config) {
					Ok(endpoint) => {
						let _ = ready_tx.try_push(Ok(()));
						serve_worker(relay, endpoint, index, shutdown).await;
					}
					Err(e) => {
						let _ = ready_tx.try_push(Err(e));
					}
				}
			}));
			match ready.pop().await {
				Some(result) => result.with_context(|| format!("binding UDP {quic_addr} on worker {index}"))?,
				None => anyhow::bail!("worker {index} did not start"),
			}
		}
		let http = match http_listener {
			Some(listener) => Some(listen::http(&relay, listener, certificate.clone(), shutdown.clone())?),
			None => None,
		};
		bound(Bound {
			quic: quic_addr,
			http: http.as_ref().map(|(_, addr, _)| *addr),
			fingerprint,
		});
		let http_shown = http
			.as_ref()
			.map_or_else(|| "none".into(), |(_, addr, _)| addr.to_string());
		info!(relay = relay.id(), workers = kio::worker_count(), %quic_addr, http_addr = %http_shown, "serving");
		let reloads = files.map(|(files, interval)| {
			kio::spawn(certificates::keep(certificate, relay.clone(), files, interval, reload))
		});
		let drain = relay.shutdown_timeout;
		serve_worker(relay, endpoint, 0, shutdown).await;
		for worker in workers {
			let _ = worker.await;
		}
		if let Some((task, _, handed)) = http {
			// QMux connections on the TCP port close like QUIC ones, their close sent within the
			// shutdown timeout (the HTTP server answers /health meanwhile).
			handed.drained(drain).await;
			task.abort();
		}
		if let Some(task) = reloads {
			task.abort();
		}
		info!("stopped");
		Ok(())
	})
}

/// One worker: keep its endpoint's figures for `/metrics`, its share of the cluster's links up,
/// and accept and serve its connections until shutdown; then close and drain.
pub(crate) async fn serve_worker(relay: Arc<Relay>, endpoint: Endpoint, index: usize, shutdown: Consumer<()>) {
	serve_endpoint(relay, endpoint, index, Sockets::Own, shutdown).await;
}

/// [`serve_worker`] with the links dialling from `sockets` (a simulated network's).
pub(crate) async fn serve_endpoint(
	relay: Arc<Relay>,
	endpoint: Endpoint,
	index: usize,
	sockets: Sockets,
	shutdown: Consumer<()>,
) {
	let stats = kio::spawn(listen::publish_stats(relay.clone(), endpoint.clone(), index));
	let links = crate::cluster::Cluster::start(&relay, index, &sockets, &shutdown);
	listen::accept_quic(&relay, &endpoint, index, &shutdown).await;
	// Each link closes itself at shutdown, within the same deadline.
	for link in links {
		let _ = link.await;
	}
	stats.abort();
	relay.stats.set_endpoint(index, endpoint.stats());
}

#[cfg(test)]
mod tests {
	use super::Bound;

	#[test]
	fn the_banner_names_the_address_the_relay_serves() {
		let bound = |addr: &str| Bound {
			quic: addr.parse().unwrap(),
			http: Some(addr.parse().unwrap()),
			fingerprint: "ab".repeat(32),
		};
		assert_eq!(bound("[::]:4443").host(), "localhost");
		assert_eq!(bound("0.0.0.0:4443").host(), "127.0.0.1");
		assert_eq!(bound("127.0.0.1:5000").host(), "127.0.0.1");
		assert_eq!(bound("[::1]:5000").host(), "[::1]");
		let banner = bound("127.0.0.1:5000").banner().join("\n");
		assert!(banner.contains("moqt://127.0.0.1:5000/demo"), "{banner}");
		assert!(banner.contains("its page: http://127.0.0.1:5000/"), "{banner}");
		assert!(!banner.contains("localhost"), "{banner}");
	}
}
