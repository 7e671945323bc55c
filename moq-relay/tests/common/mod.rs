//! An in-process relay on its own threads, and clients for it.

#![allow(dead_code)] // Each test crate uses a different subset.

use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kio::{Either, race};
use moq_client::{Client, Session, Url};
use moq_net::lite::session;
use moq_net::model::{
	BroadcastProducer, Origin, OriginConsumer, OriginProducer, Publication, Subscription, TrackConsumer, TrackProducer,
};
#[allow(unused_imports)] // Each test crate uses a different subset.
pub(crate) use moq_net::test_support::{self, announced, frame, publish, take, typed};
use moq_net::transport::{BiStream, SendStreamExt, Transport, TransportError, TransportExt};
use moq_quic::{Connection, ConnectionError, Endpoint, Verification};
use moq_relay::auth::AuthConfig;
use moq_relay::config::{Cluster, Config};
use moq_relay::limits::Limits;
use moq_relay::server::{self, Bound};

/// A relay running on threads of its own; shut down and joined on drop.
pub(crate) struct Relay {
	pub(crate) bound: Bound,
	running: Option<server::Running>,
}

impl Relay {
	/// A relay on 127.0.0.1 with `workers` workers and anonymous access everywhere.
	pub(crate) fn start(workers: usize) -> Self {
		Self::run(Config {
			workers,
			..Config::loopback()
		})
	}

	pub(crate) fn start_with(workers: usize, auth: AuthConfig) -> Self {
		Self::run(Config {
			workers,
			auth,
			..Config::loopback()
		})
	}

	/// Anonymous access everywhere, with `limits` and a cache of `cache_size` bytes.
	pub(crate) fn start_limited(workers: usize, limits: Limits, cache_size: u64) -> Self {
		Self::run(Config {
			workers,
			limits,
			cache_size,
			..Config::loopback()
		})
	}

	/// A relay of a cluster: one worker, `auth`, and `cluster`.
	pub(crate) fn start_cluster(auth: AuthConfig, cluster: Cluster) -> Self {
		Self::run(Config {
			auth,
			cluster,
			..Config::loopback()
		})
	}

	/// A relay of a cluster serving QUIC on `listen` (a port a relay that stopped had, say).
	pub(crate) fn start_cluster_on(listen: SocketAddr, auth: AuthConfig, cluster: Cluster) -> Self {
		Self::run(Config {
			listen,
			auth,
			cluster,
			..Config::loopback()
		})
	}

	/// A relay as `config` says.
	pub(crate) fn run(config: Config) -> Self {
		let running = server::spawn(config).expect("the relay started");
		Self {
			bound: running.bound.clone(),
			running: Some(running),
		}
	}

	pub(crate) fn url(&self, path: &str) -> Url {
		Url::parse(&format!("moqt://localhost:{}{path}", self.bound.quic.port())).unwrap()
	}

	pub(crate) fn verification(&self) -> Verification {
		Verification::Fingerprints(vec![moq_quic::tls::parse_fingerprint(&self.bound.fingerprint).unwrap()])
	}

	/// A client that trusts this relay and dials from `endpoint`.
	pub(crate) fn client(&self, endpoint: &Endpoint) -> Client {
		Client::new().verify(self.verification()).endpoint(endpoint.clone())
	}

	/// The value of its unlabelled metric `name`.
	pub(crate) async fn metric(&self, name: &str) -> u64 {
		metric_at(self.bound.http.unwrap(), name).await
	}

	/// Waits (at most `limit`) until its metric `name` satisfies `ok` (see [`metric_until_at`]).
	pub(crate) async fn metric_until(&self, limit: Duration, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
		metric_until_at(limit, self.bound.http.unwrap(), name, ok).await
	}

	/// Shuts down and waits; the relay's own result.
	pub(crate) fn stop(mut self) -> anyhow::Result<()> {
		self.running.take().expect("running").stop()
	}
}

/// A JWK set holding one HS256 `key`, in a file of its own (tests of a binary run on parallel
/// threads of one process: `test` names it), removed on drop.
pub(crate) struct KeyFile(pub(crate) std::path::PathBuf);

impl KeyFile {
	pub(crate) fn hs256(test: &str, key: &[u8]) -> Self {
		let name = format!("moq-relay-test-{}-{test}.jwks.json", std::process::id());
		let path = std::env::temp_dir().join(name);
		let jwks =
			serde_json::json!({"keys": [{"kty": "oct", "alg": "HS256", "k": moq_relay::auth::base64url_encode(key)}]});
		std::fs::write(&path, jwks.to_string()).unwrap();
		Self(path)
	}
}

impl Drop for KeyFile {
	fn drop(&mut self) {
		let _ = std::fs::remove_file(&self.0);
	}
}

/// A client endpoint for `relay`.
pub(crate) fn endpoint(relay: &Relay) -> Endpoint {
	client_endpoint(relay.bound.quic)
}

/// A client endpoint for the relay at `addr`.
pub(crate) fn client_endpoint(addr: SocketAddr) -> Endpoint {
	moq_client::bind(addr, moq_quic::Config::new()).unwrap()
}

/// Connects a client publishing `origin`'s broadcasts.
pub(crate) async fn publisher(
	relay: &Relay,
	endpoint: &Endpoint,
	path: &str,
	origin: &Origin,
) -> anyhow::Result<Session> {
	let client = relay.client(endpoint).origin(origin.id()).publish(origin.consumer());
	client.connect_to(&relay.url(path), relay.bound.quic).await
}

/// Connects a viewer mirroring the relay's announcements into `origin`.
pub(crate) async fn viewer(relay: &Relay, endpoint: &Endpoint, path: &str, origin: &Origin) -> anyhow::Result<Session> {
	let client = relay.client(endpoint).origin(origin.id()).subscribe(origin.producer());
	client.connect_to(&relay.url(path), relay.bound.quic).await
}

/// Connects over `url` to `addr` from `endpoint` (the URL's scheme picks the transport),
/// publishing `publish`'s broadcasts and mirroring the relay's announcements into `subscribe`.
pub(crate) async fn connect_client(
	endpoint: &Endpoint,
	addr: SocketAddr,
	url: &Url,
	verification: &Verification,
	id: u64,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
) -> anyhow::Result<Session> {
	let mut client = Client::new()
		.origin(id)
		.verify(verification.clone())
		.endpoint(endpoint.clone());
	if let Some(publish) = publish {
		client = client.publish(publish);
	}
	if let Some(subscribe) = subscribe {
		client = client.subscribe(subscribe);
	}
	client.connect_to(url, addr).await
}

/// A local broadcast `name` with one track "video".
pub(crate) fn local_broadcast(origin: &Origin, name: &str) -> (BroadcastProducer, TrackProducer, Publication) {
	test_support::local_broadcast(origin, name, test_support::video(Duration::from_secs(30), 1))
}

pub(crate) fn sub() -> Subscription {
	Subscription::default()
}

pub(crate) fn runtime() -> kio::Runtime {
	kio::Builder::single().build().unwrap()
}

/// `future`'s output, or a panic naming `what` after `limit`: a bound, not a synchronisation.
pub(crate) async fn within<F: Future>(limit: Duration, what: &str, future: F) -> F::Output {
	match race(future, kio::time::sleep(limit)).await {
		Either::Left(out) => out,
		Either::Right(()) => panic!("{what}: nothing after {limit:?}"),
	}
}

// --- a healthy publisher → viewer pair, and raw moq-lite connections ---------------------------

pub(crate) struct Healthy {
	pub(crate) track: TrackProducer,
	pub(crate) cursor: TrackConsumer,
	pub(crate) next: u64,
	_keep: (Session, Session, Origin, Origin),
	_broadcast: (BroadcastProducer, Publication),
}

impl Healthy {
	pub(crate) async fn new(relay: &Relay, endpoint: &Endpoint) -> Self {
		let publisher_origin = Origin::new(1);
		let (broadcast, track, publication) = local_broadcast(&publisher_origin, "bbb");
		let publisher = publisher(relay, endpoint, "/", &publisher_origin).await.unwrap();
		let viewer_origin = Origin::new(2);
		let viewer = viewer(relay, endpoint, "/", &viewer_origin).await.unwrap();
		let cursor = announced(&viewer_origin, "bbb")
			.await
			.subscribe_track("video", sub())
			.unwrap();
		track.used().await;
		Self {
			track,
			cursor,
			next: 0,
			_keep: (publisher, viewer, publisher_origin, viewer_origin),
			_broadcast: (broadcast, publication),
		}
	}

	/// One more group, end to end.
	pub(crate) async fn still_receives(&mut self) {
		publish(&self.track, self.next);
		let got = within(
			Duration::from_secs(20),
			"the healthy viewer's next group",
			take(&mut self.cursor, 1),
		)
		.await;
		assert_eq!(got, vec![(self.next, self.next)]);
		self.next += 1;
	}
}

/// A bare QUIC connection to the relay, with the SETUP exchange done when `setup` is set.
pub(crate) async fn raw(relay: &Relay, endpoint: &Endpoint, setup: bool) -> Connection {
	raw_to(endpoint, relay.bound.quic, &relay.verification(), setup).await
}

/// A bare QUIC connection to `addr`, with the SETUP exchange done when `setup` is set.
pub(crate) async fn raw_to(
	endpoint: &Endpoint,
	addr: SocketAddr,
	verification: &Verification,
	setup: bool,
) -> Connection {
	let conn = quic_to(endpoint, addr, verification, moq_quic::ALPN_MOQ_LITE_05).await;
	if setup {
		let config = session::Config {
			origin: 77,
			path: Some("/".into()),
			..session::Config::default()
		};
		session::setup(&conn, &config).await.unwrap();
	}
	conn
}

/// A bare QUIC connection to `addr` offering `alpn`, its handshake done.
pub(crate) async fn quic_to(
	endpoint: &Endpoint,
	addr: SocketAddr,
	verification: &Verification,
	alpn: &[u8],
) -> Connection {
	let client = moq_quic::Config::new()
		.with_client(verification, &[alpn])
		.unwrap()
		.client
		.unwrap();
	let conn = endpoint.connect_with(client, addr, "localhost").unwrap();
	conn.established().await.unwrap();
	conn
}

/// The application code the relay closed `conn` with.
pub(crate) async fn close_code(conn: &Connection) -> u64 {
	match conn.closed().await {
		ConnectionError::ApplicationClosed(close) => close.error_code.into_inner(),
		other => panic!("expected an application close, got {other:?}"),
	}
}

/// Sends `count` QUIC Initials from `from`, each a new connection that never answers.
pub(crate) fn initials(relay: &Relay, from: IpAddr, count: usize) {
	initials_to(relay.bound.quic, &relay.verification(), from, count);
}

/// Sends `count` QUIC Initials to `to` from `from`, each a new connection that never answers.
pub(crate) fn initials_to(to: SocketAddr, verification: &Verification, from: IpAddr, count: usize) {
	let socket = UdpSocket::bind(SocketAddr::new(from, 0)).unwrap();
	let client = moq_quic::Config::new()
		.with_client(verification, &[moq_quic::ALPN_MOQ_LITE_05])
		.unwrap()
		.client
		.unwrap();
	let mut endpoint = quinn_proto::Endpoint::new(Arc::new(quinn_proto::EndpointConfig::default()), None, false, None);
	let mut buf = Vec::new();
	for _ in 0..count {
		let now = Instant::now();
		let (_, mut conn) = endpoint.connect(now, client.clone(), to, "localhost").unwrap();
		buf.clear();
		let transmit = conn.poll_transmit(now, 1, &mut buf).expect("an Initial");
		socket.send_to(&buf[..transmit.size], to).unwrap();
	}
}

// --- the relay binary as a process -------------------------------------------------------------

/// Every line `read` produces, sent as it comes by a thread of its own that reads to the end,
/// even once the lines are no longer wanted: closing the pipe early would make the relay's later
/// writes fail.
pub(crate) fn lines(read: impl Read + Send + 'static) -> mpsc::Receiver<String> {
	let (tx, rx) = mpsc::channel();
	std::thread::spawn(move || {
		for line in BufReader::new(read).lines() {
			let Ok(line) = line else { break };
			let _ = tx.send(line);
		}
	});
	rx
}

/// The relay binary cargo built for these tests.
pub(crate) const RELAY: &str = env!("CARGO_BIN_EXE_moq-relay");

/// Starts the relay binary with `args`, stdin closed and stdout and stderr piped to the test.
pub(crate) fn spawn_relay(args: &[&str]) -> Child {
	Command::new(RELAY)
		.args(args)
		.stdin(Stdio::null())
		.stdout(Stdio::piped())
		.stderr(Stdio::piped())
		.spawn()
		.expect("starting the relay")
}

/// How long a relay process gets to start.
const PROCESS_LIMIT: Duration = Duration::from_secs(10);

/// A relay process on an ephemeral loopback port with two workers; killed if still running
/// when dropped (a failed test leaves no process behind).
pub(crate) struct Running {
	pub(crate) child: Child,
	pub(crate) quic: SocketAddr,
	pub(crate) http: SocketAddr,
	pub(crate) fingerprint: String,
	/// The URL the relay says to connect to.
	pub(crate) connect: String,
}

impl Running {
	pub(crate) fn start() -> Self {
		Self::start_with(&[])
	}

	/// With `args` after the defaults above.
	pub(crate) fn start_with(args: &[&str]) -> Self {
		let defaults = ["--listen", "127.0.0.1:0", "--workers", "2", "--log-level", "warn"];
		let mut child = spawn_relay(&[&defaults[..], &["--shutdown-timeout", "2s"], args].concat());
		let rx = lines(child.stdout.take().unwrap());
		// Read to its end all along, so the relay never writes into a full or closed pipe.
		let mut stderr = child.stderr.take().unwrap();
		let stderr = std::thread::spawn(move || {
			let mut text = String::new();
			let _ = stderr.read_to_string(&mut text);
			text
		});
		let (mut quic, mut http, mut fingerprint, mut connect) = (None, None, None, None);
		let start = Instant::now();
		while quic.is_none() || http.is_none() || fingerprint.is_none() || connect.is_none() {
			let left = PROCESS_LIMIT.saturating_sub(start.elapsed());
			let Ok(line) = rx.recv_timeout(left) else {
				let _ = child.kill();
				let _ = child.wait();
				let stderr = stderr.join().unwrap_or_default();
				panic!("the relay did not say where it listens; stderr:\n{stderr}");
			};
			if let Some(addr) =
				line.strip_prefix("moq-relay: QUIC (moq-lite-05, -04, -03; WebTransport over h3) on udp ")
			{
				quic = Some(addr.parse::<SocketAddr>().expect("the QUIC address"));
			} else if let Some(rest) = line.strip_prefix("moq-relay: HTTP and HTTPS on tcp ") {
				let addr = rest.split_once(": ").map_or(rest, |(addr, _)| addr);
				http = Some(addr.parse::<SocketAddr>().expect("the HTTP address"));
			} else if let Some(hex) = line.strip_prefix("moq-relay: certificate sha256 ") {
				fingerprint = Some(hex.to_owned());
			} else if let Some(rest) = line.strip_prefix("moq-relay: connect to ") {
				connect = rest.split_whitespace().next().map(str::to_owned);
			}
		}
		Self {
			child,
			quic: quic.unwrap(),
			http: http.unwrap(),
			fingerprint: fingerprint.unwrap(),
			connect: connect.unwrap(),
		}
	}

	pub(crate) fn signal(&self, name: &str) {
		let status = Command::new("kill")
			.arg(format!("-{name}"))
			.arg(self.child.id().to_string())
			.status()
			.expect("running kill");
		assert!(status.success(), "kill -{name}: {status}");
	}
}

impl Drop for Running {
	fn drop(&mut self) {
		if let Ok(None) = self.child.try_wait() {
			let _ = self.child.kill();
			let _ = self.child.wait();
		}
	}
}

impl Running {
	/// The process's resident set, in bytes (`/proc/PID/status`).
	pub(crate) fn rss(&self) -> u64 {
		let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
		let kb: u64 = status
			.lines()
			.find_map(|line| line.strip_prefix("VmRSS:"))
			.and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
			.unwrap();
		kb * 1024
	}

	pub(crate) fn verification(&self) -> Verification {
		Verification::Fingerprints(vec![moq_quic::tls::parse_fingerprint(&self.fingerprint).unwrap()])
	}
}

/// The value of the unlabelled metric `name` served at `http`.
pub(crate) async fn metric_at(http: SocketAddr, name: &str) -> u64 {
	let body = moq_client::http::get(http, "/metrics").await.unwrap().body;
	body.lines()
		.find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
		.unwrap_or_else(|| panic!("no metric {name}"))
}

/// Waits (at most `limit`) until the metric `name` at `http` satisfies `ok`, polling `/metrics`:
/// a bound on a state the relay reaches, not a sleep standing in for a signal.
pub(crate) async fn metric_until_at(limit: Duration, http: SocketAddr, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
	within(limit, name, async {
		loop {
			let value = metric_at(http, name).await;
			if ok(value) {
				return value;
			}
			kio::time::sleep(Duration::from_millis(20)).await;
		}
	})
	.await
}

/// Opens `count` bidirectional streams on `transport` (raw QUIC or a WebTransport session), each
/// an ANNOUNCE_REQUEST that declares 60,000 bytes and sends 50,000 of them: input the relay must
/// hold unfinished, or refuse. The streams are kept open (returned) so the peer does not finish or
/// reset them. A stream the relay refuses (stops) while its write still waits for room is kept
/// too: that refusal is what is tested.
pub(crate) async fn unfinished_requests<T: Transport>(transport: &T, count: usize) -> Vec<BiStream<T>> {
	let mut streams = Vec::new();
	for _ in 0..count {
		let (mut send, recv) = transport.open_bi().await.unwrap();
		let mut bytes = vec![u64::from(moq_net::lite::ControlType::Announce) as u8];
		bytes.extend_from_slice(&[0x80, 0x00, 0xea, 0x60]); // a 4-byte varint: 60,000
		bytes.resize(5 + 50_000, b'x');
		match send.write(bytes::Bytes::from(bytes)).await {
			Ok(()) | Err(TransportError::Stopped(_)) => streams.push((send, recv)),
			Err(err) => panic!("{err}"),
		}
	}
	streams
}
