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
		for line in bound.banner() {
			let _ = writeln!(out, "{line}");
		}
	});
	match result {
		Ok(()) => ExitCode::SUCCESS,
		Err(err) => {
			eprintln!("moq-relay: {err:#}");
			ExitCode::FAILURE
		}
	}
}
