//! The relay: workers, connections, sessions, shutdown.
//!
//! A kio runtime with one worker per configured thread. Every worker binds its own UDP socket on
//! the shared port (`SO_REUSEPORT`: the kernel hashes a client's address to one socket, so all of
//! a connection's datagrams reach the same worker) and runs, as kio tasks on that worker, each of
//! its connections' QUIC driver, moq-lite session, track cursors and send scheduler. The
//! [`Origin`] is the only thing the workers share: a broadcast published through worker 1 is
//! served to a viewer on worker 0 from the same track cache. Worker 0 also serves HTTP.
//!
//! A connection's life: QUIC handshake (ALPN `moq-lite-05` for raw QUIC, `h3` for WebTransport,
//! whose CONNECT path and query stand for SETUP's `Path`, see `serve_webtransport`); SETUP exchange, the relay sending its
//! own, within the SETUP timeout (`[limits] setup_timeout`, 10 s by default); the SETUP `Path` (with its query) is checked by [`Auth`]: its
//! path roots the session, and the grant's publish and subscribe prefixes scope what the session
//! may announce into and read from the origin; a token's expiry closes the session then, with
//! Unauthorized. Refusals close the connection with the spec's code: Unauthorized (6) for a bad
//! or missing token, Timeout (3) for a SETUP that does not come.
//!
//! Shutdown: [`Shutdown::trigger`] (the binary calls it on SIGINT or SIGTERM). Every worker stops
//! accepting, closes its connections with [`SHUTDOWN_CODE`], and waits for them to drain, for at
//! most the configured deadline; then the runtime ends.
//!
//! Certificate files are read again every `[tls] reload_interval` and at [`Reload::trigger`] (the
//! binary calls it on SIGHUP), on worker 0: a changed pair that loads is put in service for the
//! handshakes that follow ([`moq_quic::ServerCertificate`]) and at `/certificate.sha256`; one that
//! does not is logged, counted, and the certificate in service stays. Sessions up are not touched.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use kio::net::TcpListener;
use kio::sync::{Consumer, Producer, Queue};
use moq_net::lite::session::{self, Counters};
use moq_net::lite::{ErrorCode, Version};
use moq_net::model::{Origin, Path, Pool, Route};
use moq_net::transport::Transport;
use moq_quic::webtransport;
use moq_quic::{Certificate, Connection, Endpoint, EndpointStats, Router, ServerCertificate, h3};
use tracing::{debug, info, warn};

use crate::auth::{Auth, Grant};
use crate::config::{Cluster, Config, Tls};
use crate::http::{self, Routes};
use crate::limits::Limits;
use crate::metrics::{Kind, Prom};
use kio::{Either, race};

/// The code connections are closed with at shutdown: moq-lite's Closed (25).
pub const SHUTDOWN_CODE: u64 = 25;

/// What every worker shares.
pub(crate) struct Shared {
	pub(crate) origin: Origin,
	pub(crate) relay_id: u64,
	auth: Auth,
	quic: moq_quic::Config,
	/// Hands datagrams between the workers' endpoints (a client whose address changed).
	router: Arc<Router>,
	/// The certificate handshakes get, replaced when its files change.
	certificate: ServerCertificate,
	/// Certificates put in service after the first, and changed files refused.
	certificate_reloads: AtomicU64,
	certificate_reload_failures: AtomicU64,
	pub(crate) pool: Pool,
	pub(crate) limits: Limits,
	pub(crate) counters: Arc<Counters>,
	pub(crate) cluster: Cluster,
	/// Links to cluster peers this relay dialled that are up now.
	pub(crate) cluster_links: AtomicU64,
	/// Sessions of cluster peers that dialled this relay, open now.
	cluster_sessions: AtomicU64,
	/// Those sessions by the peer's origin id (how many of each): a relay that also dialled one of
	/// them keeps one link of the two ([`crate::cluster::link`]).
	pub(crate) inbound_peers: Producer<HashMap<u64, usize>>,
	/// Where the cluster's members are announced ([`crate::cluster::MEMBERS`]).
	pub(crate) members: Path,
	connections: AtomicU64,
	connections_open: AtomicU64,
	sessions: AtomicU64,
	/// Sessions open on each worker.
	worker_sessions: Vec<AtomicU64>,
	refused: AtomicU64,
	max_connections: Option<usize>,
	pub(crate) shutdown_timeout: Duration,
	/// Each worker's endpoint counters, refreshed every second by the worker.
	endpoints: Mutex<Vec<EndpointStats>>,
	/// The pace of each address's requests (see [`Shared::pace_for`]).
	paces: Mutex<HashMap<u64, Arc<session::Pace>>>,
	monitors: Vec<kio::Monitor>,
}

impl Shared {
	/// The QUIC configuration of worker `index`'s endpoint: the server's, routed with the
	/// other workers' (see [`Router`]).
	fn worker_quic(&self, index: usize) -> moq_quic::Config {
		self.quic.clone().with_router(self.router.clone(), index)
	}

	/// The pace every session from the address `key` shares (see [`address_requester`]): a peer
	/// that reconnects, or opens many connections, gets no fresh burst of requests. Kept while a
	/// session from the address is open or its requests are still owed turns (a pace past both is
	/// as good as new); the map forgets the others as it grows.
	fn pace_for(&self, key: u64) -> Arc<session::Pace> {
		let now = kio::time::now();
		let mut paces = self.paces.lock().expect("not poisoned");
		if let Some(pace) = paces.get(&key) {
			return pace.clone();
		}
		if paces.len() >= 64 && paces.len().is_power_of_two() {
			paces.retain(|_, pace| Arc::strong_count(pace) > 1 || !pace.is_fresh(now));
		}
		let limits = &self.limits;
		let pace = Arc::new(session::Pace::new(
			limits.address_request_rate,
			limits.address_request_burst,
			now,
		));
		paces.insert(key, pace.clone());
		pace
	}
}

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

/// Asks a running relay, from any thread, to read its certificate files again now.
#[derive(Clone)]
pub struct Reload(Arc<Producer<u64>>);

impl Reload {
	/// A trigger, and what [`run`] watches (how many times it was pulled).
	pub fn new() -> (Self, Consumer<u64>) {
		let producer = Producer::new(0);
		let consumer = producer.consume();
		(Self(Arc::new(producer)), consumer)
	}

	/// Asks for a reload; several before the relay gets to it make one.
	pub fn trigger(&self) {
		if let Ok(mut pulls) = self.0.write() {
			*pulls += 1;
		}
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

/// Loads or generates the certificate the configuration asks for; with the files it was read from,
/// to be read again.
fn certificate(tls: &Tls) -> anyhow::Result<(Certificate, Option<(CertificateFiles, Duration)>)> {
	match tls {
		Tls::Files {
			cert,
			key,
			reload_interval,
		} => {
			let mut files = CertificateFiles::new(cert.clone(), key.clone());
			let certificate = files
				.changed()
				.context("loading the TLS certificate")?
				.context("the TLS certificate files read as unchanged before their first read")?;
			Ok((certificate, Some((files, *reload_interval))))
		}
		Tls::Generate { names } => {
			let names: Vec<&str> = names.iter().map(String::as_str).collect();
			let certificate = Certificate::self_signed(&names, moq_quic::tls::MAX_SELF_SIGNED_VALIDITY)
				.context("generating a self-signed certificate")?;
			Ok((certificate, None))
		}
	}
}

/// A relay's origin id in hop chains: random per process, never 0, and below 2^53: it travels in
/// SETUP, ANNOUNCE_OK and hop chains, and the browser library `@moq/lite` reads those integers as
/// JavaScript numbers, failing above 2^53 - 1 (docs/moq-lite-versions.md §3).
fn relay_id() -> u64 {
	use std::hash::{BuildHasher, Hasher};
	let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
	hasher.write_u128(
		SystemTime::now()
			.duration_since(SystemTime::UNIX_EPOCH)
			.map_or(0, |d| d.as_nanos()),
	);
	hasher.write_u32(std::process::id());
	(hasher.finish() >> 11).max(1)
}

/// Runs a relay on the calling thread until `shutdown` is triggered and its connections drained.
/// `bound` hears where it listens once every worker is serving.
pub fn run(
	config: &Config,
	shutdown: Consumer<()>,
	reload: Consumer<u64>,
	bound: impl FnOnce(Bound),
) -> anyhow::Result<()> {
	let (certificate, files) = certificate(&config.tls)?;
	warn_of_expiry(&certificate);
	let certificate = ServerCertificate::new(certificate).context("TLS certificate")?;
	let auth = Auth::new(&config.auth)?;
	let limits = config.limits;
	let quic = moq_quic::Config::new()
		.with_server_certificate(
			&certificate,
			&[
				Version::Lite05.alpn(),
				Version::Lite04.alpn(),
				Version::Lite03.alpn(),
				h3::ALPN,
			],
		)
		.context("TLS configuration")?
		.with_limits(limits.quic)
		// Every worker binds the relay's port; the kernel spreads clients over them.
		.with_shared_port(true)
		.with_server_transport(moq_quic::windows(limits.stream_window, limits.connection_window))
		.with_send_buffer(limits.send_buffer)
		.with_max_streams(limits.streams);
	let runtime = kio::Builder::new()
		.workers(config.workers)
		.build()
		.context("starting the kio runtime (io_uring)")?;
	let verification = crate::cluster::verification(&config.cluster.tls)?;
	let origin = Origin::new(config.cluster.id.unwrap_or_else(relay_id));
	// Which relays there are reaches every relay of a cluster through any of them.
	let members = Path::new(crate::cluster::MEMBERS);
	origin.set_transit(&members);
	// This relay's own membership, announced to its peers for as long as it runs.
	let _membership = match &config.cluster.node {
		Some(node) => Some(
			origin
				.producer()
				.create_broadcast(&crate::cluster::member_path(node), Route::default())
				.context("announcing this relay's node URL")?,
		),
		None => None,
	};
	let shared = Arc::new(Shared {
		relay_id: origin.id(),
		origin,
		auth,
		quic,
		router: Router::new(config.workers, limits.forward_queue),
		certificate,
		certificate_reloads: AtomicU64::new(0),
		certificate_reload_failures: AtomicU64::new(0),
		pool: Pool::new(config.cache_size),
		limits,
		counters: Arc::new(Counters::default()),
		cluster: config.cluster.clone(),
		cluster_links: AtomicU64::new(0),
		cluster_sessions: AtomicU64::new(0),
		inbound_peers: Producer::new(HashMap::new()),
		members,
		connections: AtomicU64::new(0),
		connections_open: AtomicU64::new(0),
		sessions: AtomicU64::new(0),
		worker_sessions: (0..config.workers).map(|_| AtomicU64::new(0)).collect(),
		refused: AtomicU64::new(0),
		max_connections: config.max_connections,
		shutdown_timeout: config.shutdown_timeout,
		endpoints: Mutex::new(vec![EndpointStats::default(); config.workers]),
		paces: Mutex::new(HashMap::new()),
		monitors: (0..config.workers).filter_map(|i| runtime.monitor(i)).collect(),
	});
	let fingerprint = moq_quic::tls::hex(&shared.certificate.fingerprint());
	let listen = config.listen;
	let http_addr = config.http;
	runtime.block_on(async move {
		// Worker 0 binds first: with port 0 the kernel picks the port the others then share.
		let endpoint =
			Endpoint::bind(listen, shared.worker_quic(0)).with_context(|| format!("binding UDP {listen}"))?;
		let quic_addr = endpoint.local_addr();
		// Each worker binds before the next starts, and all before anything is announced.
		let ready = Arc::new(Queue::unbounded());
		let mut workers = Vec::new();
		for index in 1..kio::worker_count() {
			let shared = shared.clone();
			let shutdown = shutdown.clone();
			let ready_tx = ready.clone();
			let verification = verification.clone();
			workers.push(kio::spawn_on(index, move || async move {
				match Endpoint::bind(quic_addr, shared.worker_quic(index)) {
					Ok(endpoint) => {
						let _ = ready_tx.try_push(Ok(()));
						serve_worker(shared, endpoint, index, verification, shutdown).await;
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
		let http = match http_addr {
			Some(addr) => {
				// An unspecified port means "the QUIC port, on TCP" when it is the same address
				// (one number for both), and any free port if that one is taken on TCP.
				let same = SocketAddr::new(addr.ip(), quic_addr.port());
				let listener = match addr.port() == 0 && addr.ip() == listen.ip() {
					true => TcpListener::bind(same).or_else(|_| TcpListener::bind(addr)),
					false => TcpListener::bind(addr),
				}
				.with_context(|| format!("binding TCP {addr} for HTTP"))?;
				let bound_addr = listener.local_addr();
				let metrics_shared = shared.clone();
				let served = shared.certificate.clone();
				let routes = Rc::new(
					Routes::new(
						move || moq_quic::tls::hex(&served.fingerprint()),
						move || render_metrics(&metrics_shared),
					)
					.with_max_connections(limits.http_connections)
					.with_client_limits(limits.http_per_ip, limits.http_head_timeout),
				);
				Some((kio::spawn(http::serve(listener, routes)), bound_addr))
			}
			None => None,
		};
		bound(Bound {
			quic: quic_addr,
			http: http.as_ref().map(|(_, addr)| *addr),
			fingerprint,
		});
		let http_addr = http
			.as_ref()
			.map(|(_, addr)| addr.to_string())
			.unwrap_or_else(|| "none".into());
		info!(relay = shared.relay_id, workers = kio::worker_count(), %quic_addr, %http_addr, "serving");
		let reloads =
			files.map(|(files, interval)| kio::spawn(keep_certificate(shared.clone(), files, interval, reload)));
		serve_worker(shared, endpoint, 0, verification, shutdown).await;
		for worker in workers {
			let _ = worker.await;
		}
		if let Some((task, _)) = http {
			task.abort();
		}
		if let Some(task) = reloads {
			task.abort();
		}
		info!("stopped");
		Ok(())
	})
}

/// The certificate files, and what they held when last read.
struct CertificateFiles {
	cert: std::path::PathBuf,
	key: std::path::PathBuf,
	/// Their bytes at the last read, loaded or refused: a renewal is what differs from them, so a
	/// refused pair is reported once, not at every check, and a file rewritten with the same
	/// bytes (or touched) changes nothing. Contents, not modification times: a copy that keeps
	/// the old time, or two writes within the file system's clock tick, still count.
	last: Option<(Vec<u8>, Vec<u8>)>,
	/// The last read failed (a file missing while it is replaced, say): reported once, until a
	/// read succeeds again.
	unreadable: bool,
}

impl CertificateFiles {
	/// The files, not read yet: the first [`changed`](Self::changed) loads them.
	fn new(cert: std::path::PathBuf, key: std::path::PathBuf) -> Self {
		Self {
			cert,
			key,
			last: None,
			unreadable: false,
		}
	}

	/// The certificate the files hold now if they changed since the last read, `None` if they did
	/// not (or could not be read, again); an error if they changed and do not load, or cannot be
	/// read for the first time since they last could.
	fn changed(&mut self) -> anyhow::Result<Option<Certificate>> {
		// Blocking reads, on a worker: two files of a few KiB, a minute apart at most.
		let read = |path: &std::path::Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
		let (cert, key) = match read(&self.cert).and_then(|cert| Ok((cert, read(&self.key)?))) {
			Ok(both) => both,
			Err(_) if self.unreadable => return Ok(None),
			Err(e) => {
				self.unreadable = true;
				return Err(e);
			}
		};
		self.unreadable = false;
		if self.last.as_ref().is_some_and(|(c, k)| *c == cert && *k == key) {
			return Ok(None);
		}
		let loaded = Certificate::from_pem(&cert, &key);
		self.last = Some((cert, key));
		let certificate = loaded.map_err(|(which, e)| {
			let path = [&self.cert, &self.key][which];
			anyhow::Error::new(e).context(path.display().to_string())
		})?;
		Ok(Some(certificate))
	}
}

/// Reads the certificate files again every `interval` (zero: never) and at each reload request,
/// putting a changed certificate in service (see the module docs).
async fn keep_certificate(shared: Arc<Shared>, mut files: CertificateFiles, interval: Duration, reload: Consumer<u64>) {
	let mut pulls = *reload.read();
	let mut asking = true;
	loop {
		let requested = async {
			match asking {
				true => {
					reload
						.wait(|n| if *n != pulls { Poll::Ready(*n) } else { Poll::Pending })
						.await
				}
				false => std::future::pending().await,
			}
		};
		let every = async {
			match interval.is_zero() {
				true => std::future::pending().await,
				false => kio::time::sleep(interval).await,
			}
		};
		match race(requested, every).await {
			Either::Left(Ok(n)) => pulls = n,
			// Nobody can ask any more: the timer alone, if there is one.
			Either::Left(Err(_)) if interval.is_zero() => return,
			Either::Left(Err(_)) => {
				asking = false;
				continue;
			}
			Either::Right(()) => {}
		}
		let refused = |e: anyhow::Error| {
			shared.certificate_reload_failures.fetch_add(1, Ordering::Relaxed);
			warn!(
				error = format!("{e:#}"),
				"renewed TLS certificate refused; the one in service stays"
			);
		};
		match files.changed() {
			Ok(None) => {}
			Ok(Some(certificate)) => {
				let fingerprint = certificate.fingerprint_hex();
				warn_of_expiry(&certificate);
				match shared.certificate.replace(certificate) {
					Ok(()) => {
						shared.certificate_reloads.fetch_add(1, Ordering::Relaxed);
						info!(%fingerprint, "TLS certificate renewed");
					}
					Err(e) => refused(e.into()),
				}
			}
			Err(e) => refused(e),
		}
	}
}

/// Logs a warning when `certificate` has less than a week left, or none.
fn warn_of_expiry(certificate: &Certificate) {
	const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);
	let Some(not_after) = certificate.not_after() else {
		return;
	};
	match not_after.duration_since(SystemTime::now()) {
		Ok(left) if left >= WEEK => {}
		Ok(left) => warn!(hours = left.as_secs() / 3600, "the TLS certificate expires soon"),
		Err(_) => warn!("the TLS certificate has expired; browsers and verifying clients refuse it"),
	}
}

/// One worker: accept, serve, keep its share of the cluster links up, and at shutdown close and
/// drain.
async fn serve_worker(
	shared: Arc<Shared>,
	endpoint: Endpoint,
	index: usize,
	verification: moq_quic::Verification,
	shutdown: Consumer<()>,
) {
	let stats_task = kio::spawn(publish_stats(shared.clone(), endpoint.clone(), index));
	// One worker dials the members it hears of.
	let discovery = (index == 0).then(|| {
		kio::spawn(crate::cluster::discover(
			shared.clone(),
			verification.clone(),
			shutdown.clone(),
		))
	});
	let links: Vec<_> = (shared.cluster.connect.iter().enumerate())
		.filter(|(i, _)| i % kio::worker_count() == index)
		.map(|(_, peer)| {
			kio::spawn(crate::cluster::link(
				shared.clone(),
				peer.clone(),
				verification.clone(),
				shutdown.clone(),
			))
		})
		.collect();
	let mut connections = Vec::new();
	loop {
		let next = race(endpoint.accept(), shutdown.closed()).await;
		let Either::Left(Some(conn)) = next else {
			break;
		};
		connections.retain(|task: &kio::JoinHandle<()>| !task.is_finished());
		connections.push(kio::spawn(serve_connection(
			shared.clone(),
			conn,
			index,
			shutdown.clone(),
		)));
	}
	info!(worker = index, open = endpoint.open_connections(), "shutting down");
	endpoint.close(SHUTDOWN_CODE, "relay shutting down");
	let drained = race(endpoint.drained(), kio::time::sleep(shared.shutdown_timeout)).await;
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
	// Each link closes itself at shutdown, within the same deadline.
	for link in links {
		let _ = link.await;
	}
	if let Some(discovery) = discovery {
		let _ = discovery.await;
	}
	stats_task.abort();
	shared.endpoints.lock().expect("stats lock")[index] = endpoint.stats();
}

/// Copies a worker's endpoint counters where `/metrics` (on worker 0) can read them.
async fn publish_stats(shared: Arc<Shared>, endpoint: Endpoint, index: usize) {
	loop {
		shared.endpoints.lock().expect("stats lock")[index] = endpoint.stats();
		kio::time::sleep(Duration::from_secs(1)).await;
	}
}

/// One connection: SETUP, auth, the session, until it ends.
///
/// A connection's task lives as long as its session, so what it keeps across that await is
/// memory per connection: the handshake's futures are boxed (freed once the session is up) and
/// the session's future holds only the session's handle, its deadlines and its counters. Held
/// inline, the handshake's state and the session's arguments made this task 3.8 KB per
/// connection (dhat, fanout of 100 viewers).
async fn serve_connection(shared: Arc<Shared>, conn: Connection, worker: usize, shutdown: Consumer<()>) {
	let remote = conn.remote_address();
	let open = shared.connections_open.fetch_add(1, Ordering::Relaxed) + 1;
	shared.connections.fetch_add(1, Ordering::Relaxed);
	let _open = Decrement(&shared.connections_open);
	if shared.max_connections.is_some_and(|max| open as usize > max) {
		shared.refused.fetch_add(1, Ordering::Relaxed);
		warn!(%remote, "too many connections");
		conn.close(ErrorCode::Unroutable.code(), "too many connections");
		return;
	}
	let alpn = conn.alpn().unwrap_or_default();
	// What the session may hold (its limits and its cache) is set once the grant says who it is.
	let config = session::Config {
		origin: shared.relay_id,
		counters: Some(shared.counters.clone()),
		version: Version::from_alpn(&alpn).unwrap_or_default(),
		linger: shared.cluster.linger,
		..session::Config::default()
	};
	if alpn == h3::ALPN {
		if let Some(opened) = Box::pin(open_webtransport(&shared, conn, config, worker)).await {
			serve_session(&shared, opened, shutdown).await;
		}
	} else if let Some(opened) = Box::pin(open_quic(&shared, conn, config, worker)).await {
		serve_session(&shared, opened, shutdown).await;
	}
}

/// An authorized peer, its SETUP done: what [`serve_session`] starts.
struct Opened<T> {
	transport: T,
	config: session::Config,
	peer: session::PeerSetup,
	grant: Grant,
	link: Link,
}

/// A raw QUIC connection: SETUP (the path is in it), then auth.
async fn open_quic(
	shared: &Shared,
	conn: Connection,
	config: session::Config,
	worker: usize,
) -> Option<Opened<Connection>> {
	let remote = conn.remote_address();
	let deadline = kio::time::now() + shared.limits.setup_timeout;
	let peer = setup_by(&conn, &config, deadline, remote).await?;
	let url = peer.path.clone().unwrap_or_default();
	let Some(grant) = authorize(shared, &url, remote) else {
		conn.close(ErrorCode::Unauthorized.code(), "unauthorized");
		return None;
	};
	let link = Link {
		remote,
		worker,
		transport: "quic",
	};
	Some(Opened {
		transport: conn,
		config,
		peer,
		grant,
		link,
	})
}

/// A WebTransport connection (ALPN `h3`): the CONNECT's path and query play the part of the raw
/// SETUP's `Path`, checked before the session opens (a refusal is answered 403); moq-lite-05 is
/// chosen through the sub-protocol headers when the client offers it, then SETUP is exchanged
/// over the session as on raw QUIC. The SETUP timeout covers both the CONNECT and the SETUP.
async fn open_webtransport(
	shared: &Shared,
	conn: Connection,
	config: session::Config,
	worker: usize,
) -> Option<Opened<webtransport::WebTransport>> {
	let remote = conn.remote_address();
	let deadline = kio::time::now() + shared.limits.setup_timeout;
	let request = match race(webtransport::accept(&conn), kio::time::sleep_until(deadline)).await {
		Either::Left(Ok(request)) => request,
		Either::Left(Err(err)) => {
			debug!(%remote, %err, "no WebTransport session");
			return None;
		}
		Either::Right(()) => {
			debug!(%remote, "no CONNECT in time");
			conn.close(h3::code::REQUEST_REJECTED, "no CONNECT in time");
			return None;
		}
	};
	let Some(grant) = authorize(shared, &request.connect.path, remote) else {
		request.reject(
			403,
			h3::error_to_http3(ErrorCode::Unauthorized.code() as u32),
			"unauthorized",
		);
		return None;
	};
	// The first of the client's sub-protocols we speak (in the client's order); none offered
	// means moq-lite-05 and its SETUP.
	let protocol = request
		.connect
		.protocols
		.iter()
		.find(|p| Version::from_alpn(p.as_bytes()).is_some())
		.cloned();
	let mut config = config;
	config.version = protocol
		.as_deref()
		.and_then(|p| Version::from_alpn(p.as_bytes()))
		.unwrap_or_default();
	if protocol.is_none() && !request.connect.protocols.is_empty() {
		debug!(%remote, offered = ?request.connect.protocols, "no sub-protocol in common");
	}
	let transport = request.accept(protocol.as_deref());
	let peer = setup_by(&transport, &config, deadline, remote).await?;
	let link = Link {
		remote,
		worker,
		transport: "webtransport",
	};
	Some(Opened {
		transport,
		config,
		peer,
		grant,
		link,
	})
}

/// The peer's SETUP over `transport`, or `None` (logged; closed with Timeout when late) if it
/// fails or has not come by `deadline`.
async fn setup_by<T: Transport>(
	transport: &T,
	config: &session::Config,
	deadline: Instant,
	remote: SocketAddr,
) -> Option<session::PeerSetup> {
	match race(session::setup(transport, config), kio::time::sleep_until(deadline)).await {
		Either::Left(Ok(peer)) => Some(peer),
		Either::Left(Err(err)) => {
			debug!(%remote, %err, "setup failed");
			None
		}
		Either::Right(()) => {
			debug!(%remote, "no SETUP in time");
			transport.close(ErrorCode::Timeout.code(), "setup timeout");
			None
		}
	}
}

/// Checks `url` (path and query); the grant, or `None` (counted and logged) when refused.
fn authorize(shared: &Shared, url: &str, remote: SocketAddr) -> Option<Grant> {
	match shared.auth.verify_url(url, SystemTime::now()) {
		Ok(grant) => Some(grant),
		Err(err) => {
			shared.refused.fetch_add(1, Ordering::Relaxed);
			info!(%remote, path = %escaped(url.split('?').next().unwrap_or("")), %err, "refused");
			None
		}
	}
}

/// Where a session runs: its peer, its worker, and the transport's name for the logs.
struct Link {
	remote: SocketAddr,
	worker: usize,
	transport: &'static str,
}

/// Runs an authorized session over `transport` (raw QUIC or WebTransport: every line here is
/// the same) until it closes, its token expires or the relay shuts down. The session starts
/// here; the future returned keeps only what it waits on (see [`serve_connection`]).
fn serve_session<'a, T: Transport + Clone + 'static>(
	shared: &'a Shared,
	opened: Opened<T>,
	shutdown: Consumer<()>,
) -> impl Future<Output = ()> + 'a {
	let Opened {
		transport,
		mut config,
		peer,
		grant,
		link: Link {
			remote,
			worker,
			transport: kind,
		},
	} = opened;
	let root: &Path = &grant.root;
	// What the peer may watch is what this session publishes to it, and the other way round.
	// A client neither sees nor announces the cluster's members; a peer does both.
	let (consumer, producer) = match grant.cluster {
		true => (shared.origin.consumer(), shared.origin.producer()),
		false => (
			shared.origin.consumer().hide(&shared.members),
			shared.origin.producer().hide(&shared.members),
		),
	};
	// A client's sessions share their address's pace and its share of a publisher's track
	// requests (moq-net's `Requests::make_room`), so more connections from one place buy neither.
	// A cluster peer asks for a whole relay, unpaced, as itself.
	let address = (!grant.cluster).then(|| address_requester(remote.ip()));
	let publish = (!grant.subscribe.is_empty()).then(|| {
		let publish = consumer.with_root(root).scope(&grant.subscribe);
		match address {
			Some(key) => publish.requesting_as(key),
			None => publish,
		}
	});
	let subscribe = (!grant.publish.is_empty()).then(|| producer.with_root(root).scope(&grant.publish));
	// A cluster peer carries a whole relay's broadcasts and demand: its own limits, the whole
	// cache, and only our own clients' routes announced to it. Any other session's ingest fills
	// at most its share of the cache.
	config.cluster = grant.cluster;
	if grant.cluster {
		config.limits = shared.limits.cluster_session;
		config.pool = Some(shared.pool.clone());
		shared.cluster_sessions.fetch_add(1, Ordering::Relaxed);
	} else {
		let share = shared
			.limits
			.session_cache
			.unwrap_or_else(|| shared.pool.capacity() / 4);
		config.limits = shared.limits.session;
		config.pool = Some(shared.pool.child(share));
		config.shared_pace = address.map(|key| shared.pace_for(key));
	}
	let cluster_session = grant
		.cluster
		.then(|| (Decrement(&shared.cluster_sessions), Inbound::new(shared, peer.origin)));
	shared.sessions.fetch_add(1, Ordering::Relaxed);
	shared.worker_sessions[worker].fetch_add(1, Ordering::Relaxed);
	let worker_session = Decrement(&shared.worker_sessions[worker]);
	info!(%remote, transport = kind, root = %escaped(root.as_str()), publish = grant.publish.len(), subscribe = grant.subscribe.len(), cluster = grant.cluster, "session");
	let session = session::start(transport, config, peer, publish, subscribe);
	let expires = grant.remaining(SystemTime::now()).map(|left| kio::time::now() + left);
	async move {
		let _worker_session = worker_session;
		let _cluster_session = cluster_session;
		let expiry = async {
			match expires {
				Some(at) => kio::time::sleep_until(at).await,
				None => std::future::pending().await,
			}
		};
		match race(race(session.closed(), expiry), shutdown.closed()).await {
			Either::Left(Either::Left(code)) => debug!(%remote, code, "session closed"),
			Either::Left(Either::Right(())) => {
				info!(%remote, "token expired");
				session.close(ErrorCode::Unauthorized.code());
			}
			Either::Right(()) => session.close(SHUTDOWN_CODE),
		}
		// The close reaches the peer before the session's tasks stop with it.
		drop(session);
	}
}

struct Decrement<'a>(&'a AtomicU64);

/// A cluster peer's session open toward us, counted under its origin id while it lasts.
struct Inbound<'a>(&'a Shared, u64);

impl<'a> Inbound<'a> {
	/// Counts the session under `peer`, unless the peer gave no id (0: 03/04, or another
	/// implementation), which says nothing about which relay it is.
	fn new(shared: &'a Shared, peer: u64) -> Self {
		if peer != 0
			&& let Ok(mut peers) = shared.inbound_peers.write()
		{
			*peers.entry(peer).or_default() += 1;
		}
		Self(shared, peer)
	}
}

impl Drop for Inbound<'_> {
	fn drop(&mut self) {
		if let Ok(mut peers) = self.0.inbound_peers.write()
			&& let Some(count) = peers.get_mut(&self.1)
		{
			*count -= 1;
			if *count == 0 {
				peers.remove(&self.1);
			}
		}
	}
}

impl Drop for Decrement<'_> {
	fn drop(&mut self) {
		self.0.fetch_sub(1, Ordering::Relaxed);
	}
}

/// The Prometheus exposition.
fn render_metrics(shared: &Shared) -> String {
	let mut prom = Prom::new();
	let endpoints = shared.endpoints.lock().expect("stats lock").clone();
	let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
	prom.counter(
		"moq_relay_connections_total",
		"QUIC connections accepted.",
		load(&shared.connections),
	)
	.gauge(
		"moq_relay_connections",
		"QUIC connections open.",
		load(&shared.connections_open),
	)
	.counter(
		"moq_relay_sessions_total",
		"moq-lite sessions started.",
		load(&shared.sessions),
	)
	.gauge(
		"moq_relay_sessions",
		"moq-lite sessions open.",
		shared.worker_sessions.iter().map(load).sum::<u64>(),
	)
	.counter(
		"moq_relay_refused_total",
		"Connections refused (auth, limits).",
		load(&shared.refused),
	)
	.gauge(
		"moq_relay_broadcasts",
		"Broadcasts announced in the origin (the cluster's members aside).",
		shared.origin.broadcasts_outside(&shared.members) as u64,
	)
	.counter(
		"moq_relay_groups_in_total",
		"Group streams received.",
		load(&shared.counters.groups_in),
	)
	.counter(
		"moq_relay_groups_out_total",
		"Group streams sent.",
		load(&shared.counters.groups_out),
	)
	.counter(
		"moq_relay_bytes_in_total",
		"Frame payload bytes received.",
		load(&shared.counters.bytes_in),
	)
	.counter(
		"moq_relay_bytes_out_total",
		"Frame payload bytes sent.",
		load(&shared.counters.bytes_out),
	)
	.gauge(
		"moq_relay_cache_bytes",
		"Bytes held by the track cache.",
		shared.pool.used(),
	)
	.gauge(
		"moq_relay_cache_capacity_bytes",
		"The track cache's byte budget.",
		shared.pool.capacity(),
	);
	let handshakes = shared.quic.handshakes.stats();
	let limits = &shared.limits;
	let counters = &shared.counters;
	prom.gauge(
		"moq_relay_handshakes",
		"QUIC handshakes in progress.",
		handshakes.in_progress,
	)
	.gauge(
		"moq_relay_handshakes_limit",
		"QUIC handshakes in progress allowed (limits.handshakes).",
		limits.quic.handshakes as u64,
	)
	.counter(
		"moq_relay_handshake_retries_total",
		"QUIC Retries sent to validate addresses.",
		handshakes.retries,
	)
	.counter(
		"moq_relay_handshakes_refused_total",
		"Connection attempts refused by the handshake limits.",
		handshakes.refused,
	)
	.gauge(
		"moq_relay_announces",
		"Broadcasts sessions announce now (limits.announces per session).",
		counters.announces.used(),
	)
	.gauge(
		"moq_relay_cluster_links",
		"Links this relay dialled to cluster peers that are up now.",
		load(&shared.cluster_links),
	)
	.gauge(
		"moq_relay_cluster_sessions",
		"Cluster peers that dialled this relay, linked now.",
		load(&shared.cluster_sessions),
	)
	.gauge(
		"moq_relay_broadcast_backups",
		"Publications kept as backups behind the announced one (the cluster's members aside).",
		shared.origin.backups_outside(&shared.members) as u64,
	)
	.gauge(
		"moq_relay_subscriptions",
		"Subscriptions open toward the relay (limits.subscriptions per session).",
		counters.subscriptions.used(),
	)
	.gauge(
		"moq_relay_track_requests",
		"Tracks asked of publishing sessions now (limits.track_requests per session).",
		counters.track_requests.used(),
	)
	.gauge(
		"moq_relay_groups_in_flight",
		"Group streams in flight to subscribers (limits.groups_in_flight per subscription).",
		counters.groups_in_flight.used(),
	)
	.gauge(
		"moq_relay_partial_bytes",
		"Bytes of messages and frames received in part (limits.partial_bytes per session).",
		counters.partial_bytes.used(),
	)
	.gauge(
		"moq_relay_stream_queued_bytes",
		"Bytes queued on connections' send streams, not yet taken by QUIC (limits.send_buffer per connection).",
		endpoints.iter().map(|e| e.stream_queued).sum::<u64>(),
	)
	.gauge(
		"moq_relay_send_buffer_limit",
		"Bytes one connection's send streams may hold queued (limits.send_buffer).",
		limits.send_buffer as u64,
	)
	.gauge(
		"moq_relay_partial_bytes_limit",
		"Bytes of partial input one session may hold (limits.partial_bytes).",
		limits.session.partial_bytes,
	)
	.counter(
		"moq_relay_budget_refusals_total",
		"Requests, streams and groups refused or cut because a budget was spent.",
		load(&counters.budget_refusals),
	)
	.counter(
		"moq_relay_requests_paced_total",
		"Requests that waited for their session's request rate (limits.request_rate, past limits.request_burst).",
		load(&counters.requests_paced),
	)
	.gauge(
		"moq_relay_request_rate_limit",
		"Requests one session may make per second past its burst (limits.request_rate; 0 paces nothing).",
		u64::from(limits.session.request_rate),
	)
	.counter(
		"moq_relay_certificate_reloads_total",
		"Renewed TLS certificates put in service from the certificate files.",
		load(&shared.certificate_reloads),
	)
	.counter(
		"moq_relay_certificate_reload_failures_total",
		"Changed or unreadable certificate files refused (the certificate in service stays).",
		load(&shared.certificate_reload_failures),
	);
	let not_after = shared.certificate.not_after();
	if let Some(seconds) = not_after.and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok()) {
		prom.gauge(
			"moq_relay_certificate_expiry_timestamp_seconds",
			"When the TLS certificate in service expires (its notAfter, Unix time).",
			seconds.as_secs(),
		);
	}
	let monitors = &shared.monitors;
	let workers: Vec<String> = (0..endpoints.len()).map(|i| i.to_string()).collect();
	let routed = shared.router.stats();
	prom.counter(
		"moq_relay_udp_forwarded_total",
		"Datagrams a worker received for another worker's connection (a client whose address changed) and handed to it.",
		routed.forwarded,
	)
	.counter(
		"moq_relay_udp_forward_dropped_total",
		"Datagrams for another worker's connection dropped because its queue was full (limits.forward_queue).",
		routed.dropped,
	)
	.gauge(
		"moq_relay_udp_forward_queued_bytes",
		"Bytes of datagrams handed to workers and not yet handled (limits.forward_queue per worker).",
		routed.queued_bytes,
	)
	.gauge(
		"moq_relay_udp_forward_queue_limit",
		"Bytes of datagrams handed to one worker that it may hold (limits.forward_queue).",
		shared.limits.forward_queue as u64,
	);
	let mut family = |name: &str, help: &str, kind: Kind, value: &dyn Fn(usize) -> u64| {
		let mut family = prom.family(name, help, kind);
		for (i, worker) in workers.iter().enumerate() {
			family.sample(&[("worker", worker)], value(i));
		}
	};
	family(
		"moq_relay_udp_datagrams_in_total",
		"UDP datagrams received.",
		Kind::Counter,
		&|i| endpoints[i].datagrams_in,
	);
	family(
		"moq_relay_udp_datagrams_out_total",
		"UDP datagrams sent.",
		Kind::Counter,
		&|i| endpoints[i].datagrams_out,
	);
	family(
		"moq_relay_udp_bytes_in_total",
		"UDP payload bytes received.",
		Kind::Counter,
		&|i| endpoints[i].bytes_in,
	);
	family(
		"moq_relay_udp_bytes_out_total",
		"UDP payload bytes sent.",
		Kind::Counter,
		&|i| endpoints[i].bytes_out,
	);
	family(
		"moq_relay_udp_sendmsg_total",
		"Messages handed to the kernel, each a datagram or a GSO train (up to 32 to a sendmmsg).",
		Kind::Counter,
		&|i| endpoints[i].transmits,
	);
	family(
		"moq_relay_udp_send_queue_waits_total",
		"Connection turns that found the worker's send queue full and waited for the sender.",
		Kind::Counter,
		&|i| endpoints[i].send_queue_waits,
	);
	family(
		"moq_relay_quic_connections",
		"QUIC connections open on the worker.",
		Kind::Gauge,
		&|i| endpoints[i].open,
	);

	family(
		"moq_relay_worker_sessions",
		"Sessions open on the worker.",
		Kind::Gauge,
		&|i| load(&shared.worker_sessions[i]),
	);
	let stats: Vec<kio::Stats> = monitors.iter().map(kio::Monitor::stats).collect();
	let at = |i: usize| stats.get(i).copied().unwrap_or_default();
	family("kio_loop_turns_total", "Event loop turns.", Kind::Counter, &|i| {
		at(i).turns
	});
	family("kio_task_polls_total", "Task polls.", Kind::Counter, &|i| at(i).polls);
	family(
		"kio_parks_total",
		"Turns that parked in io_uring_enter.",
		Kind::Counter,
		&|i| at(i).parks,
	);
	family("kio_uring_enter_total", "io_uring_enter calls.", Kind::Counter, &|i| {
		at(i).ring.enters
	});
	family("kio_uring_submissions_total", "SQEs submitted.", Kind::Counter, &|i| {
		at(i).ring.submissions
	});
	family("kio_uring_completions_total", "CQEs reaped.", Kind::Counter, &|i| {
		at(i).ring.completions
	});
	prom.finish()
}

/// `text` as a log field: peer-supplied strings are escaped (control characters, quotes and
/// non-ASCII as Rust escapes, cut at 256 characters), so a path with a newline cannot forge a log
/// line.
fn escaped(text: &str) -> String {
	let mut out: String = text.chars().take(256).flat_map(char::escape_default).collect();
	if text.chars().count() > 256 {
		out.push('…');
	}
	out
}

/// The requester an address's sessions share (see `serve_session`): an IPv4 address, or an IPv6
/// /64 (what one host or home is usually given), with the top bit set so no session's own id
/// (counted up from 1) is one. Distinct places that map to one key only share a fair share.
fn address_requester(ip: std::net::IpAddr) -> u64 {
	const ADDRESS: u64 = 1 << 63;
	match ip.to_canonical() {
		std::net::IpAddr::V4(v4) => ADDRESS | 1 << 62 | u64::from(u32::from(v4)),
		std::net::IpAddr::V6(v6) => ADDRESS | (u128::from(v6) >> 64) as u64,
	}
}

#[cfg(test)]
mod tests {
	use super::{address_requester, escaped};

	#[test]
	fn peer_strings_cannot_forge_log_lines() {
		let forged = "/live\n2026-12-01T00:00:00Z  INFO moq_relay: admin logged in";
		let line = escaped(forged);
		assert!(!line.contains('\n'));
		assert!(line.starts_with("/live\\n2026"));
		assert_eq!(escaped("/a?jwt=x"), "/a?jwt=x");
		assert_eq!(escaped(&"x".repeat(1000)).chars().count(), 257);
		assert_eq!(escaped("\u{1b}[31m"), "\\u{1b}[31m");
	}

	#[test]
	fn certificate_files_report_a_renewal_once_and_a_broken_or_missing_pair_once() {
		use moq_quic::Certificate;
		let dir = std::env::temp_dir().join(format!("moq-relay-certificate-files-{}", std::process::id()));
		std::fs::create_dir_all(&dir).unwrap();
		let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
		let write = |certificate: &Certificate| {
			let (chain, private) = certificate.to_pem();
			std::fs::write(&cert, chain).unwrap();
			std::fs::write(&key, private).unwrap();
		};
		let generate = || Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY).unwrap();
		let (first, second) = (generate(), generate());
		write(&first);
		let mut files = super::CertificateFiles::new(cert.clone(), key.clone());
		let fingerprint = |changed: anyhow::Result<Option<Certificate>>| changed.unwrap().map(|c| c.fingerprint());

		// Loaded at the first read; then read again, and rewritten with the same bytes: no change.
		assert_eq!(fingerprint(files.changed()), Some(first.fingerprint()));
		assert_eq!(fingerprint(files.changed()), None);
		write(&first);
		assert_eq!(fingerprint(files.changed()), None);

		// A key that is not PEM: refused, and reported once.
		std::fs::write(&key, "not a key").unwrap();
		assert!(files.changed().is_err());
		assert_eq!(
			fingerprint(files.changed()),
			None,
			"the same broken pair is reported once"
		);

		// A missing file, once, until the files read again.
		std::fs::remove_file(&key).unwrap();
		assert!(files.changed().is_err());
		assert_eq!(fingerprint(files.changed()), None);

		write(&second);
		assert_eq!(fingerprint(files.changed()), Some(second.fingerprint()));
		assert_eq!(fingerprint(files.changed()), None, "one renewal, reported once");
		// Back to bytes seen before is a change too.
		write(&first);
		assert_eq!(fingerprint(files.changed()), Some(first.fingerprint()));
		std::fs::remove_dir_all(&dir).unwrap();
	}

	#[test]
	fn relay_ids_fit_a_javascript_number() {
		for _ in 0..1000 {
			let id = super::relay_id();
			assert!(id > 0 && id < 1 << 53, "{id}");
		}
	}

	#[test]
	fn sessions_of_one_address_request_as_one() {
		let key = |ip: &str| address_requester(ip.parse().unwrap());
		assert_eq!(
			key("192.0.2.7"),
			key("::ffff:192.0.2.7"),
			"an IPv4-mapped address is its IPv4"
		);
		assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
		assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"), "one /64");
		assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
		// Never a session's own id (counted up from 1).
		assert!(key("0.0.0.0") >= 1 << 63 && key("::") >= 1 << 63);
	}
}
