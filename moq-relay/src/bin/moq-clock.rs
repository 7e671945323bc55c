//! `moq-clock`: an example moq-lite-05 client. `publish` sends a clock (one group per second, one
//! frame with the time); `subscribe` watches it and prints each frame. Two terminals and a local
//! relay show data moving end to end:
//!
//! ```sh
//! cargo run --release -p moq-relay
//! cargo run --release -p moq-relay --bin moq-clock -- publish moqt://localhost:4443/demo
//! cargo run --release -p moq-relay --bin moq-clock -- subscribe moqt://localhost:4443/demo
//! ```
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use moq_net::model::{Frame, Origin, Path, Subscription, Timestamp, TrackInfo};
use moq_quic::Verification;
use moq_relay::client::{self, Url};
use moq_relay::race::{Either, race};

/// An example moq-lite-05 client: publish a clock track, or subscribe and print it.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
	#[command(subcommand)]
	command: Command,
	/// The relay's certificate SHA-256 (hex). Without it (and without --insecure) the client
	/// fetches it from http://HOST:PORT/certificate.sha256, which suits a local relay only.
	#[arg(long, global = true, value_name = "HEX")]
	fingerprint: Option<String>,
	/// Skip certificate verification (development only).
	#[arg(long, global = true)]
	insecure: bool,
	/// The broadcast's name under the URL's path.
	#[arg(long, global = true, default_value = "clock")]
	broadcast: String,
}

#[derive(Subcommand, Debug)]
enum Command {
	/// Publish a clock: one group per second with the time as its frame.
	Publish {
		/// moqt://host:port/path[?jwt=...]
		url: String,
	},
	/// Subscribe to a clock and print what arrives.
	Subscribe {
		/// moqt://host:port/path[?jwt=...]
		url: String,
	},
}

const TRACK: &str = "seconds";

fn main() -> ExitCode {
	let args = Args::parse();
	let runtime = match kio::Builder::single().build() {
		Ok(runtime) => runtime,
		Err(err) => {
			eprintln!("moq-clock: {err}");
			return ExitCode::FAILURE;
		}
	};
	match runtime.block_on(run(args)) {
		Ok(()) => ExitCode::SUCCESS,
		Err(err) => {
			eprintln!("moq-clock: {err:#}");
			ExitCode::FAILURE
		}
	}
}

async fn run(args: Args) -> anyhow::Result<()> {
	let (publishing, url) = match &args.command {
		Command::Publish { url } => (true, Url::parse(url)?),
		Command::Subscribe { url } => (false, Url::parse(url)?),
	};
	let addr = url.resolve()?;
	let verification = if args.insecure {
		Verification::Disabled
	} else {
		let hex = match &args.fingerprint {
			Some(hex) => hex.clone(),
			None => {
				let response = moq_relay::http::get(addr, "/certificate.sha256")
					.await
					.with_context(|| format!("fetching the fingerprint from http://{addr}/certificate.sha256"))?;
				response.body
			}
		};
		let pin = moq_quic::tls::parse_fingerprint(hex.trim()).context("the fingerprint is not 64 hex digits")?;
		Verification::Fingerprints(vec![pin])
	};
	let endpoint = client::endpoint(addr)?;
	let local = Origin::new(u64::from(std::process::id()).max(1));
	let name = Path::new(&args.broadcast);
	if publishing {
		let (broadcast, _publication) = local.producer().create_broadcast(&name, Default::default())?;
		let info = TrackInfo {
			timescale: 1000,
			latency_max: Duration::from_secs(10),
			..TrackInfo::default()
		};
		let track = broadcast.create_track(TRACK, info)?;
		let client = client::connect(
			&endpoint,
			addr,
			&url,
			&verification,
			local.id(),
			Some(local.consumer()),
			None,
		)
		.await?;
		eprintln!(
			"moq-clock: publishing {}/{} on {addr}",
			url.path.trim_end_matches('/'),
			args.broadcast
		);
		let mut sequence = 0;
		loop {
			let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
			let mut group = track.create_group(sequence)?;
			let text = clock_text(now.as_secs());
			group.write_frame(Frame::new(
				Timestamp::new(now.as_millis() as u64, 1000),
				text.into_bytes(),
			))?;
			group.finish()?;
			sequence += 1;
			// Wake on the next second, or end when the relay closes the session.
			let next = Duration::from_secs(now.as_secs() + 1) - now;
			if let Either::Left(code) = race(client.session.closed(), kio::time::sleep(next)).await {
				anyhow::bail!("the relay closed the session (code {code})");
			}
		}
	} else {
		let viewer = Origin::new(u64::from(std::process::id()).max(1));
		let client = client::connect(
			&endpoint,
			addr,
			&url,
			&verification,
			viewer.id(),
			None,
			Some(viewer.producer()),
		)
		.await?;
		eprintln!(
			"moq-clock: waiting for {}/{} on {addr}",
			url.path.trim_end_matches('/'),
			args.broadcast
		);
		let mut cursor = viewer.consumer().announced(&Path::default());
		let broadcast = loop {
			let update = cursor.next().await;
			if update.path == name
				&& let Some(broadcast) = update.broadcast
			{
				break broadcast;
			}
		};
		let mut track = broadcast.subscribe_track(TRACK, Subscription::default())?;
		while let Some(mut group) = track.recv_group().await? {
			while let Some(frame) = group.read_frame().await? {
				println!(
					"{} (group {})",
					String::from_utf8_lossy(&frame.payload),
					group.sequence()
				);
			}
		}
		drop(client);
		Ok(())
	}
}

/// `HH:MM:SS UTC` of a Unix time.
fn clock_text(secs: u64) -> String {
	let day = secs % 86_400;
	format!("{:02}:{:02}:{:02} UTC", day / 3600, day % 3600 / 60, day % 60)
}
