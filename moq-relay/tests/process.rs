//! The relay binary as a process: it prints where it listens, serves, and on SIGTERM or SIGINT
//! closes its sessions and exits 0; on SIGHUP, and every reload interval, it puts renewed
//! certificate files in service; `--help` works; a configuration that lets nobody in is refused
//! before anything starts.
//!
//! Waiting for a child process with a bound has no signal std offers: [`exit_within`] polls
//! `try_wait` every 20 ms (the poll observes the exit, it does not stand in for one).

mod common;

use common::{
	KeyFile, RELAY, Running, client_endpoint, connect_client, lines, metric_at, metric_until_at, runtime, spawn_relay,
	within,
};
use std::io::Read;
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use moq_client::{Session, Url, http};
use moq_net::lite::ErrorCode;
use moq_net::model::Origin;
use moq_quic::{Certificate, ConnectionError, Verification};

/// How long a process gets to start or to exit.
const LIMIT: Duration = Duration::from_secs(10);

/// Polls `child` until it exits, for at most `limit`.
fn exit_within(child: &mut Child, limit: Duration) -> ExitStatus {
	let start = Instant::now();
	loop {
		if let Some(status) = child.try_wait().expect("waiting for the relay") {
			return status;
		}
		assert!(start.elapsed() < limit, "the relay still runs after {limit:?}");
		std::thread::sleep(Duration::from_millis(20));
	}
}

/// Runs the relay with `args` to its exit (within [`LIMIT`]): status, stdout, stderr. The
/// output must fit the pipes' buffers, which is all these runs print.
fn run(args: &[&str]) -> (ExitStatus, String, String) {
	let mut child = spawn_relay(args);
	let status = exit_within(&mut child, LIMIT);
	let mut stdout = String::new();
	let mut stderr = String::new();
	child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
	child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
	(status, stdout, stderr)
}

/// Starts the relay, checks it serves HTTP and QUIC, sends `signal` with a session open, and
/// checks the session is closed with Closed (25) and the process exits 0.
fn stops_cleanly_on(signal: &str) {
	let mut relay = Running::start();
	assert_eq!(relay.quic.ip().to_string(), "127.0.0.1");
	// It says to connect where it listens, not to `localhost` (which may be `::1`).
	let port = relay.quic.port();
	assert_eq!(relay.connect, format!("moqt://127.0.0.1:{port}/<path>"));
	// With no --http-listen, HTTP is on TCP at the port the kernel picked for QUIC.
	assert_eq!(relay.http, relay.quic);
	kio::Builder::single().build().unwrap().block_on(async {
		let health = within(Duration::from_secs(5), "/health", http::get(relay.http, "/health"))
			.await
			.expect("GET /health");
		assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
		let served = within(
			Duration::from_secs(5),
			"/certificate.sha256",
			http::get(relay.http, "/certificate.sha256"),
		)
		.await
		.expect("GET /certificate.sha256");
		assert_eq!(served.body, relay.fingerprint);

		let pinned = moq_quic::tls::parse_fingerprint(&relay.fingerprint).expect("the printed fingerprint parses");
		let verification = Verification::Fingerprints(vec![pinned]);
		let endpoint = client_endpoint(relay.quic);
		let url = Url::parse(&format!("moqt://localhost:{}/demo", relay.quic.port())).unwrap();
		let origin = Origin::new(5);
		let connect = connect_client(
			&endpoint,
			relay.quic,
			&url,
			&verification,
			origin.id(),
			None,
			Some(origin.producer()),
		);
		let client = within(Duration::from_secs(5), "connect", connect)
			.await
			.expect("a pinned client connects anonymously");

		relay.signal(signal);
		match within(
			Duration::from_secs(5),
			"the shutdown close",
			client.connection().closed(),
		)
		.await
		{
			ConnectionError::ApplicationClosed(close) => {
				assert_eq!(close.error_code.into_inner(), ErrorCode::Closed.code());
			}
			other => panic!("closed other than by the relay's shutdown: {other}"),
		}
	});
	let status = exit_within(&mut relay.child, LIMIT);
	assert!(status.success(), "after SIG{signal}: {status}");
}

#[test]
fn sigterm_closes_sessions_and_exits_zero() {
	stops_cleanly_on("TERM");
}

#[test]
fn sigint_closes_sessions_and_exits_zero() {
	stops_cleanly_on("INT");
}

#[test]
fn help_exits_zero_and_lists_the_options() {
	let (status, stdout, _) = run(&["--help"]);
	assert!(status.success(), "{status}");
	for option in ["--listen", "--workers", "--auth-key", "--no-anonymous"] {
		assert!(stdout.contains(option), "--help does not mention {option}:\n{stdout}");
	}
}

#[test]
fn a_configuration_that_lets_nobody_in_is_refused() {
	let (status, stdout, stderr) = run(&["--listen", "127.0.0.1:0", "--no-anonymous"]);
	assert!(!status.success(), "the relay ran: {status}\n{stdout}");
	assert!(stderr.contains("nobody could connect"), "stderr:\n{stderr}");
	// It stopped before serving anything.
	assert!(!stdout.contains("QUIC"), "stdout:\n{stdout}");
}

#[test]
fn a_closed_stdout_does_not_stop_the_relay() {
	// Closed before the relay starts, so every line it prints fails (EPIPE: Rust ignores
	// SIGPIPE). Where it listens is read from its log instead.
	let (reader, writer) = std::io::pipe().unwrap();
	drop(reader);
	let mut child = Command::new(RELAY)
		.args(["--listen", "127.0.0.1:0", "--workers", "1", "--log-level", "info"])
		.stdin(Stdio::null())
		.stdout(writer)
		.stderr(Stdio::piped())
		.spawn()
		.expect("starting the relay");
	let rx = lines(child.stderr.take().unwrap());
	let mut log = String::new();
	let start = Instant::now();
	// HTTP takes the QUIC port number on TCP when it is free, another port otherwise: the address
	// is read from the same line.
	let http_addr: SocketAddr = loop {
		let left = LIMIT.saturating_sub(start.elapsed());
		let Ok(line) = rx.recv_timeout(left) else {
			let _ = child.kill();
			let _ = child.wait();
			panic!("no \"serving\" line; the log:\n{log}");
		};
		log.push_str(&line);
		log.push('\n');
		if line.contains("serving")
			&& let Some(addr) = line.split_whitespace().find_map(|word| word.strip_prefix("http_addr="))
		{
			break addr.parse().expect("the logged HTTP address");
		}
	};
	let health = kio::Builder::single()
		.build()
		.unwrap()
		.block_on(async { within(Duration::from_secs(5), "/health", http::get(http_addr, "/health")).await });
	let running = child.try_wait().unwrap();
	if running.is_none() {
		let _ = child.kill();
		let _ = child.wait();
	}
	assert_eq!(running, None, "the relay exited; the log:\n{log}");
	assert_eq!(health.expect("GET /health").status, 200);
}

/// `moq-clock` with `args`, stdout and stderr piped.
fn clock(args: &[&str]) -> Child {
	Command::new(env!("CARGO_BIN_EXE_moq-clock"))
		.args(args)
		.stdin(Stdio::null())
		.stdout(Stdio::piped())
		.stderr(Stdio::piped())
		.spawn()
		.expect("starting moq-clock")
}

/// Whether `line` is one second of the public clock format: `YYYY-MM-DD HH:MM:SS`.
fn is_clock_line(line: &str) -> bool {
	let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
	let Some((date, time)) = line.split_once(' ') else {
		return false;
	};
	let date: Vec<&str> = date.split('-').collect();
	let time: Vec<&str> = time.split(':').collect();
	date.len() == 3 && time.len() == 3 && date.iter().chain(&time).all(|part| digits(part))
}

#[test]
fn moq_clock_speaks_the_public_clock_format_and_fails_when_the_relay_goes() {
	// Before: a clock frame per one-frame group ("HH:MM:SS UTC"), which the public clock example
	// does not print, and a subscriber that waited forever once the relay closed its session.
	let mut relay = Running::start();
	let url = format!("moqt://127.0.0.1:{}/demo", relay.quic.port());
	let fingerprint = relay.fingerprint.clone();
	let mut publisher = clock(&["--fingerprint", &fingerprint, "publish", &url]);
	let mut subscriber = clock(&["--fingerprint", &fingerprint, "subscribe", &url]);
	let lines = lines(subscriber.stdout.take().unwrap());
	let first = lines.recv_timeout(LIMIT).expect("a clock line");
	assert!(is_clock_line(&first), "{first:?}");
	let second = lines.recv_timeout(LIMIT).expect("another clock line");
	assert!(is_clock_line(&second), "{second:?}");
	assert_ne!(first, second, "a line a second");
	// The relay goes away: both clocks say so and exit non-zero.
	relay.signal("TERM");
	assert!(exit_within(&mut relay.child, LIMIT).success());
	for child in [&mut publisher, &mut subscriber] {
		let status = exit_within(child, LIMIT);
		let mut stderr = String::new();
		child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
		assert!(!status.success(), "{stderr}");
		assert!(stderr.contains("closed the session"), "{stderr}");
	}
}

#[test]
fn a_viewer_of_a_relay_that_is_killed_reconnects_to_another_of_the_cluster_and_carries_on() {
	// Three relay processes in a full mesh; a clock published on A, watched through B by a
	// `moq-clock subscribe --reconnect` that knows B and C. B is killed (SIGKILL: no goodbye to
	// anyone); the viewer takes it for gone after its 2 s idle timeout and carries on through C,
	// printing nothing twice.
	const KEY: &[u8] = b"a process cluster test secret, 32+ bytes";
	let keys = KeyFile::hs256("process-cluster", KEY);
	let exp = std::time::SystemTime::now()
		.duration_since(std::time::UNIX_EPOCH)
		.unwrap()
		.as_secs()
		+ 600;
	let token = KeyFile(std::env::temp_dir().join(format!("moq-relay-test-{}-cluster.jwt", std::process::id())));
	std::fs::write(
		&token.0,
		moq_relay::auth::sign_hs256(&serde_json::json!({"cluster": true, "exp": exp}), KEY),
	)
	.unwrap();
	let (keys_path, token_path) = (keys.0.display().to_string(), token.0.display().to_string());
	let member = |id: &str, peers: &[&Running]| {
		let urls: Vec<String> = peers
			.iter()
			.map(|peer| format!("moqt://127.0.0.1:{}/", peer.quic.port()))
			.collect();
		let mut args = vec![
			"--auth-key",
			&keys_path,
			"--anonymous",
			"",
			"--cluster-token",
			&token_path,
			"--cluster-id",
			id,
		];
		for (url, peer) in urls.iter().zip(peers) {
			args.extend(["--cluster-connect", url, "--cluster-fingerprint", &peer.fingerprint]);
		}
		Running::start_with(&args)
	};
	let a = member("10", &[]);
	let b = member("20", &[&a]);
	let c = member("30", &[&a, &b]);
	runtime().block_on(async {
		metric_until_at(LIMIT, c.http, "moq_relay_cluster_links", |n| n == 2).await;
		metric_until_at(LIMIT, b.http, "moq_relay_cluster_links", |n| n == 1).await;
	});
	let on = |relay: &Running| format!("moqt://127.0.0.1:{}/demo", relay.quic.port());
	let mut publisher = clock(&["--fingerprint", &a.fingerprint, "publish", &on(&a)]);
	let mut viewer = clock(&[
		"--fingerprint",
		&b.fingerprint,
		"--fingerprint",
		&c.fingerprint,
		"--reconnect",
		"--idle-timeout",
		"2s",
		"subscribe",
		&on(&b),
		&on(&c),
	]);
	let out = lines(viewer.stdout.take().unwrap());
	let mut seen = Vec::new();
	for _ in 0..2 {
		seen.push(out.recv_timeout(LIMIT).expect("a clock line through B"));
	}
	b.signal("KILL");
	// Back within the idle timeout (2 s), a backoff (at most 1 s) and a handshake.
	for _ in 0..3 {
		seen.push(out.recv_timeout(LIMIT).expect("a clock line after B was killed"));
	}
	assert!(seen.iter().all(|line| is_clock_line(line)), "{seen:?}");
	// Strictly rising: no second printed twice, none out of order.
	assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
	let _ = viewer.kill();
	let _ = viewer.wait();
	let mut stderr = String::new();
	viewer.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
	let through_c = format!("waiting for /demo/clock on 127.0.0.1:{}", c.quic.port());
	assert!(stderr.contains(&through_c), "{stderr}");
	let _ = publisher.kill();
	let _ = publisher.wait();
}

/// A directory of certificate files, removed on drop.
struct CertificateDir(std::path::PathBuf);

impl CertificateDir {
	fn new(test: &str) -> Self {
		let dir = std::env::temp_dir().join(format!("moq-relay-{test}-{}", std::process::id()));
		std::fs::create_dir_all(&dir).unwrap();
		Self(dir)
	}

	fn cert(&self) -> String {
		self.0.join("cert.pem").display().to_string()
	}

	fn key(&self) -> String {
		self.0.join("key.pem").display().to_string()
	}

	/// The relay serving these files, reading them again every `interval` ("0": only on SIGHUP).
	fn relay(&self, interval: &str) -> Running {
		Running::start_with(&[
			"--tls-cert",
			&self.cert(),
			"--tls-key",
			&self.key(),
			"--tls-reload-interval",
			interval,
		])
	}

	/// Writes `certificate`'s chain and key, as a renewal does.
	fn write(&self, certificate: &Certificate) {
		let (chain, key) = certificate.to_pem();
		std::fs::write(self.cert(), chain).unwrap();
		std::fs::write(self.key(), key).unwrap();
	}
}

impl Drop for CertificateDir {
	fn drop(&mut self) {
		let _ = std::fs::remove_dir_all(&self.0);
	}
}

fn generated() -> Certificate {
	Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY).unwrap()
}

/// What `/certificate.sha256` serves now.
async fn served_fingerprint(http: SocketAddr) -> String {
	within(LIMIT, "/certificate.sha256", http::get(http, "/certificate.sha256"))
		.await
		.expect("GET /certificate.sha256")
		.body
}

/// A client of `relay` on `endpoint` that trusts only `certificate`, publishing `publish` or
/// mirroring the relay's announcements into `subscribe`.
async fn pinned_client(
	relay: &Running,
	endpoint: &moq_quic::Endpoint,
	certificate: &Certificate,
	publish: Option<&Origin>,
	subscribe: Option<&Origin>,
) -> anyhow::Result<Session> {
	let url = Url::parse(&format!("moqt://localhost:{}/", relay.quic.port())).unwrap();
	let pinned = Verification::Fingerprints(vec![certificate.fingerprint()]);
	let connect = connect_client(
		endpoint,
		relay.quic,
		&url,
		&pinned,
		publish.or(subscribe).map_or(9, Origin::id),
		publish.map(Origin::consumer),
		subscribe.map(Origin::producer),
	);
	within(LIMIT, "connecting", connect).await
}

#[test]
fn renewed_certificate_files_go_in_service_on_sighup_and_sessions_up_keep_going() {
	let dir = CertificateDir::new("sighup");
	let (first, second) = (generated(), generated());
	dir.write(&first);
	// No periodic reads: only the signal reloads.
	let relay = dir.relay("0");
	assert_eq!(relay.fingerprint, first.fingerprint_hex());
	runtime().block_on(async {
		let endpoint = client_endpoint(relay.quic);
		// A publisher that connected under the first certificate.
		let publisher_origin = Origin::new(1);
		let (_broadcast, track, _publication) = common::local_broadcast(&publisher_origin, "bbb");
		let _publisher = pinned_client(&relay, &endpoint, &first, Some(&publisher_origin), None)
			.await
			.unwrap();
		assert_eq!(served_fingerprint(relay.http).await, first.fingerprint_hex());

		// A renewal half written (the new chain with the old key): refused, counted, the first
		// certificate stays in service.
		let (chain, _) = second.to_pem();
		std::fs::write(dir.cert(), chain).unwrap();
		relay.signal("HUP");
		let failures = "moq_relay_certificate_reload_failures_total";
		metric_until_at(LIMIT, relay.http, failures, |n| n == 1).await;
		assert_eq!(served_fingerprint(relay.http).await, first.fingerprint_hex());
		assert_eq!(metric_at(relay.http, "moq_relay_certificate_reloads_total").await, 0);
		let viewer_origin = Origin::new(2);
		let viewer = pinned_client(&relay, &endpoint, &first, None, Some(&viewer_origin)).await;
		drop(viewer.expect("the first certificate is still presented"));

		// The whole renewal: in service from the next handshake and at /certificate.sha256.
		dir.write(&second);
		relay.signal("HUP");
		metric_until_at(LIMIT, relay.http, "moq_relay_certificate_reloads_total", |n| n == 1).await;
		assert_eq!(served_fingerprint(relay.http).await, second.fingerprint_hex());
		assert_eq!(metric_at(relay.http, failures).await, 1);
		let expiry = metric_at(relay.http, "moq_relay_certificate_expiry_timestamp_seconds").await;
		let not_after = second
			.not_after()
			.unwrap()
			.duration_since(std::time::UNIX_EPOCH)
			.unwrap();
		assert_eq!(expiry, not_after.as_secs());
		assert!(
			pinned_client(&relay, &endpoint, &first, None, Some(&Origin::new(3)))
				.await
				.is_err(),
			"a client pinned to the old certificate connected after the renewal"
		);

		// The publisher from before the renewal still delivers, to a viewer from after it.
		let viewer_origin = Origin::new(4);
		let _viewer = pinned_client(&relay, &endpoint, &second, None, Some(&viewer_origin))
			.await
			.unwrap();
		let mut cursor = common::announced(&viewer_origin, "bbb")
			.await
			.subscribe_track("video", common::sub())
			.unwrap();
		track.used().await;
		common::publish(&track, 0);
		let got = within(LIMIT, "the group", common::take(&mut cursor, 1)).await;
		assert_eq!(got, vec![(0, 0)]);
	});
}

#[test]
fn renewed_certificate_files_are_found_without_a_signal() {
	let dir = CertificateDir::new("interval");
	let (first, second) = (generated(), generated());
	dir.write(&first);
	let relay = dir.relay("50ms");
	runtime().block_on(async {
		assert_eq!(served_fingerprint(relay.http).await, first.fingerprint_hex());
		let endpoint = client_endpoint(relay.quic);
		dir.write(&second);
		metric_until_at(LIMIT, relay.http, "moq_relay_certificate_reloads_total", |n| n == 1).await;
		assert_eq!(served_fingerprint(relay.http).await, second.fingerprint_hex());
		pinned_client(&relay, &endpoint, &second, None, Some(&Origin::new(2)))
			.await
			.expect("the renewed certificate is presented");
	});
}
