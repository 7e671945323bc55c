//! `moq-load`: load a moq-lite relay with publishers and subscribers over raw QUIC and report
//! what each subscriber got: frames per second, latency percentiles, loss. See `--help`, and
//! `bench/src/load.rs` for how each figure is measured.
//!
//! ```text
//! cargo run --release -p bench --bin moq-load -- moqt://localhost:4443/load --insecure --shape fanout:100
//! cargo run --release -p bench --bin moq-load -- moqt://localhost:4443/load --insecure --shape chat:20 --steady 60s
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use bench::load::{self, Live, LoadOptions, Shape, Target};
use clap::Parser;
use moq_client::Url;
use moq_quic::Verification;

/// Load a moq-lite-05 relay with publishers and subscribers over raw QUIC or WebTransport (each connection on
/// its own UDP socket) and report frames delivered per second, latency (µs, from a publish time
/// carried in every frame) and loss (groups published in the window that a subscription did not
/// read). Prints a progress line per second, then a summary.
#[derive(Parser, Debug)]
// `--version` names the protocol (the load's flags), as the public clients' `--client-version` does.
#[command(disable_version_flag = true)]
struct Args {
	/// The relay: moqt://host:port/path[?jwt=...] (raw QUIC), https://host:port/path[?jwt=...]
	/// (WebTransport) or ws://host:port/path[?jwt=...] (QMux over WebSocket, TCP); every broadcast
	/// goes under the path.
	url: String,
	/// Who publishes and who watches: fanout:N (1 broadcast, N subscribers), fanout:BxN,
	/// chat:N (N participants, each publishing and watching all others), many:B/WxN (B announced
	/// broadcasts, the first W live, N subscribers each).
	#[arg(long, default_value = "fanout:1x100", value_parser = Shape::parse)]
	shape: Shape,
	/// The relay's certificate SHA-256 (hex).
	#[arg(long, value_name = "HEX", conflicts_with = "insecure")]
	fingerprint: Option<String>,
	/// Skip certificate verification (a local relay with a generated certificate).
	#[arg(long)]
	insecure: bool,
	/// No progress lines.
	#[arg(long)]
	quiet: bool,
	#[command(flatten)]
	load: LoadOptions,
}

fn main() -> ExitCode {
	let args = Args::parse();
	match run(&args) {
		Ok(()) => ExitCode::SUCCESS,
		Err(err) => {
			eprintln!("moq-load: {err:#}");
			ExitCode::FAILURE
		}
	}
}

fn run(args: &Args) -> anyhow::Result<()> {
	let url = Url::parse(&args.url)?;
	let verification = match (&args.fingerprint, args.insecure) {
		(Some(hex), _) => Verification::Fingerprints(vec![
			moq_quic::tls::parse_fingerprint(hex.trim()).context("the fingerprint is not 64 hex digits")?,
		]),
		(None, true) => Verification::Disabled,
		(None, false) => anyhow::bail!("give the relay's --fingerprint, or --insecure for a local relay"),
	};
	let target = Target {
		addr: kio::block_on(url.resolve())?,
		publish_addr: None,
		url,
		verification,
	};
	let plan = args.load.plan(args.shape.clone(), !args.quiet);
	let report = load::run(&plan, &target, Arc::new(Live::default()), None)?;
	println!("{}", report.summary());
	if report.lost() > 0 {
		anyhow::bail!("{} groups lost", report.lost());
	}
	Ok(())
}
