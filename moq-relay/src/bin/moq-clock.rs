//! `moq-clock`: an example moq-lite-05 client, over raw QUIC (`moqt://`) or WebTransport
//! (`https://`). `publish` sends a clock on track `seconds`, in the
//! public clock example's format, so each prints the other's: a group per minute (its sequence
//! the minute of the hour it started, then rising), whose first frame is the `YYYY-MM-DD HH:MM:`
//! prefix and each later frame the second, `SS`. `subscribe` prints prefix + second for every
//! second. When the relay ends the session, either one says so and exits non-zero. Two
//! terminals and a local relay show data moving end to end:
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
use moq_net::model::{Frame, GroupProducer, Origin, Path, Subscription, Timestamp, TrackInfo, TrackProducer};
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
	/// Publish a clock: a group per minute, a frame per second.
	Publish {
		/// moqt://host:port/path[?jwt=...] (raw QUIC) or https://host:port/path[?jwt=...] (WebTransport)
		url: String,
	},
	/// Subscribe to a clock and print what arrives.
	Subscribe {
		/// moqt://host:port/path[?jwt=...] (raw QUIC) or https://host:port/path[?jwt=...] (WebTransport)
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
		let client = client::dial(
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
		let result = race(client.closed(), publish_clock(&track)).await;
		match result {
			Either::Left(code) => anyhow::bail!("the relay closed the session (code {code})"),
			Either::Right(result) => result,
		}
	} else {
		let viewer = Origin::new(u64::from(std::process::id()).max(1));
		let client = client::dial(
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
		let watch = async {
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
				let Some(prefix) = group.read_frame().await? else {
					continue;
				};
				let prefix = String::from_utf8_lossy(&prefix.payload).into_owned();
				while let Some(second) = group.read_frame().await? {
					println!("{prefix}{}", String::from_utf8_lossy(&second.payload));
				}
			}
			anyhow::Ok(())
		};
		match race(client.closed(), watch).await {
			Either::Left(code) => anyhow::bail!("the relay closed the session (code {code})"),
			Either::Right(result) => result,
		}
	}
}

/// Publishes the clock until an error: a group per minute, the prefix, then a frame a second.
async fn publish_clock(track: &TrackProducer) -> anyhow::Result<()> {
	let mut group: Option<(u64, GroupProducer)> = None;
	// The first group's sequence is the minute it starts in (as the public example does), then
	// each minute the next.
	let mut sequence = None;
	let mut last_second = None;
	loop {
		let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
		// A timer may fire a little before the wall clock's next second (the runtime's clock is
		// read once per loop turn): a second is written once, when it has come.
		if last_second == Some(now.as_secs()) {
			kio::time::sleep(Duration::from_secs(now.as_secs() + 1) - now).await;
			continue;
		}
		last_second = Some(now.as_secs());
		let at = time::OffsetDateTime::from_unix_timestamp(now.as_secs() as i64)?;
		let minute = now.as_secs() / 60;
		let stamp = Timestamp::new(now.as_millis() as u64, 1000);
		if group.as_ref().is_none_or(|(started, _)| *started != minute) {
			if let Some((_, mut done)) = group.take() {
				done.finish()?;
			}
			let next = sequence.map_or_else(|| u64::from(at.minute()), |last: u64| last + 1);
			sequence = Some(next);
			let mut fresh = track.create_group(next)?;
			let prefix = format!(
				"{:04}-{:02}-{:02} {:02}:{:02}:",
				at.year(),
				u8::from(at.month()),
				at.day(),
				at.hour(),
				at.minute()
			);
			fresh.write_frame(Frame::new(stamp, prefix.into_bytes()))?;
			group = Some((minute, fresh));
		}
		if let Some((_, current)) = &mut group {
			current.write_frame(Frame::new(stamp, format!("{:02}", at.second()).into_bytes()))?;
		}
		// Wake on the next second.
		kio::time::sleep(Duration::from_secs(now.as_secs() + 1) - now).await;
	}
}
