//! `moq-relay [config.toml] [flags]`: see `--help` and the crate README.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use moq_relay::config::Config;
use moq_relay::server::{self, Reload, Shutdown};

fn main() -> ExitCode {
	let config = match Config::load() {
		Ok(config) => config,
		Err(err) => {
			eprintln!("moq-relay: {err:#}");
			return ExitCode::from(2);
		}
	};
	if let Err(err) = config.init_logging() {
		eprintln!("moq-relay: {err:#}");
		return ExitCode::from(2);
	}
	// Blocked here, before any worker starts, so every thread inherits the mask and only the
	// waiting thread below takes them.
	let signals = [kio::signal::SIGINT, kio::signal::SIGTERM, kio::signal::SIGHUP];
	if let Err(err) = kio::signal::block_signals(&signals) {
		eprintln!("moq-relay: blocking SIGINT, SIGTERM and SIGHUP: {err}");
		return ExitCode::FAILURE;
	}
	let (shutdown, watch) = Shutdown::new();
	let (reload, reloads) = Reload::new();
	std::thread::Builder::new()
		.name("moq-relay-signals".into())
		.spawn(move || {
			while let Ok(signal) = kio::signal::wait_signal(&signals) {
				if signal == kio::signal::SIGHUP {
					tracing::info!("SIGHUP: reading the certificate files again");
					reload.trigger();
					continue;
				}
				tracing::info!(signal, "shutting down");
				shutdown.trigger();
				return;
			}
		})
		.expect("spawning the signal thread");
	let result = server::run(&config, watch, reloads, |bound| {
		// Written, not println!ed: that panics when stdout is closed (EPIPE), and a banner nobody
		// reads must not take the relay down with it.
		use std::io::Write as _;
		let mut out = std::io::stdout().lock();
		let port = bound.quic.port();
		let _ = writeln!(
			out,
			"moq-relay: QUIC (moq-lite-05, -04, -03; WebTransport over h3) on udp {}",
			bound.quic
		);
		if let Some(http) = bound.http {
			let _ = writeln!(
				out,
				"moq-relay: HTTP on tcp {http}: /health /certificate.sha256 /metrics"
			);
		}
		let _ = writeln!(out, "moq-relay: certificate sha256 {}", bound.fingerprint);
		let _ = writeln!(
			out,
			"moq-relay: connect to moqt://localhost:{port}/<path> (or https:// for WebTransport), e.g.\n  cargo run --release -p moq-relay --bin moq-clock -- publish moqt://localhost:{port}/demo\n  cargo run --release -p moq-relay --bin moq-clock -- subscribe moqt://localhost:{port}/demo"
		);
	});
	match result {
		Ok(()) => ExitCode::SUCCESS,
		Err(err) => {
			eprintln!("moq-relay: {err:#}");
			ExitCode::FAILURE
		}
	}
}
