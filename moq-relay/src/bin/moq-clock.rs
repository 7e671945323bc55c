//! `moq-clock`: an example moq-lite-05 client, over raw QUIC (`moqt://`), WebTransport
//! (`https://`, `http://`) or QMux on the relay's TCP port (`ws://`, `wss://`, `qmux://` over TLS,
//! `tcp://` in plaintext). `publish` sends a clock on track `seconds`, in the
//! public clock example's format, so each prints the other's: a group per minute (its sequence
//! the minute of the hour it started, then rising), whose first frame is the `YYYY-MM-DD HH:MM:`
//! prefix and each later frame the second, `SS`. `subscribe` prints prefix + second for every
//! second. When the relay ends the session, either one says so and exits non-zero, unless
//! `--reconnect` is given: then it dials the next of its URLs (round robin: the relays of a
//! cluster, say), for ever, with jittered backoff from 1 s to 10 s, and carries on (a subscriber
//! prints nothing twice). A relay that vanishes without a word is taken for gone after
//! `--idle-timeout`. Two terminals and a local relay show data moving end to end:
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
use kio::{Either, race};
use moq_client::{Backoff, Client, Trust, Url};
use moq_net::model::{
	BroadcastConsumer, Frame, GroupProducer, Origin, Path, Subscription, Timestamp, TrackInfo, TrackProducer,
};
use moq_quic::Verification;
use moq_relay::config::Span;

/// An example MoQ client (moq-lite-05, or the IETF drafts 14 to 16): publish a clock track, or
/// subscribe and print it.
#[derive(Parser, Debug)]
// `--version` names the protocol, as the public clients' `--client-version` does.
#[command(disable_version_flag = true)]
struct Args {
	#[command(subcommand)]
	command: Command,
	/// The relay's certificate SHA-256 (hex); repeat for relays with other certificates (each
	/// relay is checked against all of them). Without it (and without --insecure) the client
	/// fetches it from http://HOST:PORT/certificate.sha256, which suits a local relay only.
	#[arg(long, global = true, value_name = "HEX")]
	fingerprint: Vec<String>,
	/// Skip certificate verification (development only).
	#[arg(long, global = true)]
	insecure: bool,
	/// The broadcast's name under the URL's path.
	#[arg(long, global = true, default_value = "clock")]
	broadcast: String,
	/// When a session ends or a relay cannot be reached, dial the next URL (after the last, the
	/// first again), for ever, with jittered backoff from 1 s to 10 s; without it, exit non-zero.
	#[arg(long, global = true)]
	reconnect: bool,
	/// How long the relay may stay silent before it is taken for gone (a relay that crashed or
	/// became unreachable says nothing): the QUIC idle timeout, with keep-alives at a third of it.
	#[arg(long, global = true, value_name = "DURATION", default_value = "30s")]
	idle_timeout: Span,
	/// The protocol over raw QUIC (moqt:// URLs): moq-lite-05, or the IETF drafts moq-transport-14,
	/// -15 and -16.
	#[arg(long, global = true, value_name = "VERSION", default_value = "moq-lite-05")]
	version: moq_client::Protocol,
}

#[derive(Subcommand, Debug)]
enum Command {
	/// Publish a clock: a group per minute, a frame per second.
	Publish {
		/// moqt://host:port/path[?jwt=...] (raw QUIC), https:// (WebTransport), or ws://, wss://,
		/// qmux://, tcp:// (QMux on TCP); more than one with --reconnect, tried in turn
		#[arg(required = true)]
		urls: Vec<String>,
	},
	/// Subscribe to a clock and print what arrives.
	Subscribe {
		/// moqt://host:port/path[?jwt=...] (raw QUIC), https:// (WebTransport), or ws://, wss://,
		/// qmux://, tcp:// (QMux on TCP); more than one with --reconnect, tried in turn
		#[arg(required = true)]
		urls: Vec<String>,
	},
}

const TRACK: &str = "seconds";

/// A session that lasted this long starts the next backoff from its shortest delay again.
const STABLE: Duration = Duration::from_secs(30);
/// How long a failed track waits for its session's close, to report that instead.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

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

/// The last line a subscriber printed, so a session after a reconnect, which starts again at the
/// latest group's first frame (the current minute, cached by the relay), prints nothing twice:
/// it skips that replay, the lines of the same minute up to the last one printed, compared as
/// text whatever the new publisher's group numbers. Anything else is printed as it comes.
#[derive(Clone, Debug, Default)]
struct Printed(Option<String>);

impl Printed {
	/// Whether `line` is the replay of one printed before a reconnect: the same minute, and not
	/// later than the last line.
	fn replayed(&self, line: &str) -> bool {
		// `YYYY-MM-DD HH:MM:` is 17 bytes.
		let minute = |text: &str| text.get(..17).map(str::to_owned);
		self.0
			.as_deref()
			.is_some_and(|last| minute(last) == minute(line) && line <= last)
	}
}

async fn run(args: Args) -> anyhow::Result<()> {
	let (publishing, urls) = match &args.command {
		Command::Publish { urls } => (true, urls),
		Command::Subscribe { urls } => (false, urls),
	};
	let urls: Vec<Url> = urls.iter().map(|url| Url::parse(url)).collect::<anyhow::Result<_>>()?;
	if urls.len() > 1 && !args.reconnect {
		anyhow::bail!("more than one URL is for --reconnect, which tries them in turn");
	}
	let local = Origin::new(u64::from(std::process::id()).max(1));
	let name = Path::new(&args.broadcast);
	// The publisher's clock runs for the whole process, whichever relay carries it.
	let mut clock = if publishing {
		let (broadcast, publication) = local.producer().create_broadcast(&name, Default::default())?;
		let info = TrackInfo {
			timescale: 1000,
			latency_max: Duration::from_secs(10),
			..TrackInfo::default()
		};
		let track = broadcast.create_track(TRACK, info)?;
		Some((
			kio::spawn(async move { publish_clock(&track).await }),
			broadcast,
			publication,
		))
	} else {
		None
	};
	let mut printed = Printed::default();
	let mut backoff = Backoff::new(u64::from(std::process::id()));
	for url in urls.iter().cycle() {
		let started = kio::time::now();
		let ended = match &mut clock {
			Some((task, ..)) => match race(session(&args, url, &local, None, &mut printed), task).await {
				Either::Left(ended) => ended,
				Either::Right(Ok(result)) => return result,
				Either::Right(Err(err)) => anyhow::bail!("the clock stopped: {err}"),
			},
			None => session(&args, url, &local, Some(&name), &mut printed).await,
		};
		match ended {
			// The track ended: the publisher is done, so are we.
			Ok(None) => return Ok(()),
			Ok(Some(code)) if !args.reconnect => anyhow::bail!("the relay closed the session (code {code})"),
			Ok(Some(code)) => eprintln!("moq-clock: the relay closed the session (code {code})"),
			Err(err) if !args.reconnect => return Err(err),
			Err(err) => eprintln!("moq-clock: {err:#}"),
		}
		if kio::time::now() - started >= STABLE {
			backoff.reset();
		}
		kio::time::sleep(backoff.delay()).await;
	}
	unreachable!("the URLs cycle for ever (there is at least one)")
}

/// One session with the relay at `url`: publishes `local`'s broadcasts, or (`watch` names the
/// broadcast) mirrors the relay's announcements and prints the clock. `Ok(Some(code))` when the
/// relay closed the session (or the connection was lost), `Ok(None)` when the clock's track
/// ended.
async fn session(
	args: &Args,
	url: &Url,
	local: &Origin,
	watch: Option<&Path>,
	printed: &mut Printed,
) -> anyhow::Result<Option<u64>> {
	let addr = url.resolve().await?;
	let client = Client::new()
		.origin(local.id())
		.trust(trust(args)?)
		.protocol(args.version)
		.idle_timeout(args.idle_timeout.0);
	// A fresh origin per session for a viewer: nothing mirrored from a relay that went stays behind.
	let viewer = Origin::new(local.id());
	let (client, doing) = match watch {
		None => (client.publish(local.consumer()), "publishing"),
		Some(_) => (client.subscribe(viewer.producer()), "waiting for"),
	};
	let client = client
		.connect_to(url, addr)
		.await
		.with_context(|| format!("connecting to {addr}"))?;
	eprintln!(
		"moq-clock: {doing} {}/{} on {addr}",
		url.path.trim_end_matches('/'),
		args.broadcast
	);
	let Some(name) = watch else {
		return Ok(Some(client.closed().await));
	};
	let watch = async {
		let mut cursor = viewer.consumer().announced(&Path::default());
		let broadcast = loop {
			let update = cursor.next().await;
			if update.path == *name
				&& let Some(broadcast) = update.broadcast
			{
				break broadcast;
			}
		};
		print_clock(&broadcast, printed).await
	};
	match race(client.closed(), watch).await {
		Either::Left(code) => Ok(Some(code)),
		Either::Right(Ok(())) => Ok(None),
		// A relay going away can end the track before the close reaches us: the publisher's
		// session may close first, on another of the relay's workers. A track that fails as the
		// session closes is the session's end.
		Either::Right(Err(err)) => match race(client.closed(), kio::time::sleep(CLOSE_GRACE)).await {
			Either::Left(code) => Ok(Some(code)),
			Either::Right(()) => Err(err),
		},
	}
}

/// How to check the relay: as the flags say, or by the fingerprint it serves over HTTP.
fn trust(args: &Args) -> anyhow::Result<Trust> {
	if args.insecure {
		return Ok(Trust::Verify(Verification::Disabled));
	}
	if args.fingerprint.is_empty() {
		return Ok(Trust::FetchFingerprint);
	}
	let pins = (args.fingerprint.iter())
		.map(|hex| moq_quic::tls::parse_fingerprint(hex.trim()).context("the fingerprint is not 64 hex digits"))
		.collect::<anyhow::Result<_>>()?;
	Ok(Trust::Verify(Verification::Fingerprints(pins)))
}

/// Prints the clock's lines as they come, first skipping the replay of what `printed` says was
/// printed already.
async fn print_clock(broadcast: &BroadcastConsumer, printed: &mut Printed) -> anyhow::Result<()> {
	let mut track = broadcast.subscribe_track(TRACK, Subscription::default())?;
	// Until this session prints a line of its own, what it reads may be a replay.
	let mut catching_up = true;
	while let Some(mut group) = track.recv_group().await? {
		let Some(prefix) = group.read_frame().await? else {
			continue;
		};
		let prefix = String::from_utf8_lossy(&prefix.payload).into_owned();
		while let Some(second) = group.read_frame().await? {
			let line = format!("{prefix}{}", String::from_utf8_lossy(&second.payload));
			if catching_up && printed.replayed(&line) {
				continue;
			}
			catching_up = false;
			println!("{line}");
			printed.0 = Some(line);
		}
	}
	Ok(())
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

#[cfg(test)]
mod tests {
	use super::Printed;

	#[test]
	fn a_replay_of_the_minute_is_skipped_and_nothing_else() {
		let printed = Printed(Some("2026-12-02 05:10:42".to_owned()));
		assert!(printed.replayed("2026-12-02 05:10:00"));
		assert!(printed.replayed("2026-12-02 05:10:42"));
		assert!(!printed.replayed("2026-12-02 05:10:43"));
		// Another minute, even an earlier one (a publisher whose clock is behind): printed.
		assert!(!printed.replayed("2026-12-02 05:09:59"));
		assert!(!printed.replayed("2026-12-02 04:10:30"));
		assert!(!Printed::default().replayed("2026-12-02 05:10:00"));
	}
}
