//! The relay benchmark: loads one or more relays with the same shapes over loopback QUIC,
//! alternating them round by round, and reports what each delivered frame cost each relay.
//!
//! ```text
//! cargo run --release -p bench --bin relay -- --save                 # our relay (built first): results/relay.{md,json,svg}
//! cargo run --release -p bench --bin relay -- --rev HEAD~1 --save     # the tree and HEAD~1's relay side by side
//! cargo run --release -p bench --bin relay -- --relay a='target/release/moq-relay --listen 127.0.0.1:{port} --no-http' \
//!     --relay b='target/release/moq-relay --listen 127.0.0.1:{port} --no-http'   # A/A: the noise band
//! cargo run --release -p bench --bin relay -- --callgrind --save      # user-space instructions per frame: results/relay-callgrind.md
//! cargo run --release -p bench --bin relay -- --hop --callgrind --save # the same through two linked relays: results/relay-hop-callgrind.md
//! cargo run --release -p bench --bin relay -- --websocket --save       # raw QUIC and QMux over WebSocket side by side: results/relay-websocket.md
//! cargo run --release -p bench --bin relay -- --ietf --save            # moq-lite-05, draft-14 and draft-16 side by side: results/relay-ietf.md
//! ```
//!
//! Each measurement starts the relay command afresh (`{port}` replaced by a free UDP port), waits
//! for its socket, reads its resident set, runs the load generator (`bench::load`) in this process
//! and samples the relay at the start and the end of the steady window:
//!
//! - **CPU per delivered frame**: the relay's utime + stime (`/proc/PID/stat`, clock ticks,
//!   every thread) over the window, divided by the frames subscribers read in the same interval
//!   (the load generator's live counter, read at the same moments); also the context switches of
//!   the relay's threads per frame (`/proc/PID/task/*/status`: each voluntary one is a worker
//!   that parked and was woken).
//! - **instructions per delivered frame** (`--callgrind`): the relay runs under
//!   `valgrind --tool=callgrind --instr-atstart=no`; instrumentation is switched on at the
//!   window's start (`callgrind_control -i on`) and the counts dumped at its end
//!   (`callgrind_control -d`): exact user-space instructions of every relay thread over the
//!   window, divided by the frames read meanwhile (the mean of the counter read before and after
//!   each control call). The dump's top functions (inclusive) are printed and saved.
//! - **memory**: resident set (`VmRSS`) before any client and at the window's end, the peak
//!   (`VmHWM`), and (end − before) / connections. Not measured under callgrind (valgrind's own
//!   memory dominates).
//! - **latency, loss, reconnects**: the load generator's report (see `bench/src/load.rs`).
//!
//! With `--hop`, this tree's relay is also measured as a cluster of two: publishers on an upstream
//! relay, subscribers on a downstream one that links with it (`--cluster-connect`), every frame
//! crossing one extra relay. Its CPU and instructions are the two relays' sum, so the difference
//! from the single relay in the same run is the data-plane cost of one hop.
//!
//! Figures are medians over the rounds (`--rounds`); `spread` is (max − min) / median of CPU or
//! instructions per frame over the rounds; `ratio` is to the first relay given. Two relays with
//! the same command (an A/A run) show the noise band of the machine.

#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bench::counter::median;
use bench::load::{self, Event, Live, LoadOptions, Report, Shape, Target, Wire};
use bench::report::Table;
use clap::Parser;
use moq_client::Url;
use moq_quic::Verification;

/// Load one or more relays with the same publishers and subscribers over loopback QUIC,
/// alternating them over rounds, and report for each: relay CPU (or, with --callgrind,
/// user-space instructions) per delivered frame, resident memory, latency, loss, and the ratio
/// to the first relay.
#[derive(Parser, Debug)]
// `--version` names the protocol (the load's flags), as the public clients' `--client-version` does.
#[command(disable_version_flag = true)]
struct Args {
	/// A relay to measure, NAME=COMMAND; `{port}` in COMMAND is replaced by the UDP port to serve
	/// on (127.0.0.1), e.g. --relay mine='target/release/moq-relay --listen 127.0.0.1:{port}
	/// --no-http'. Any moq-lite-05 relay on raw QUIC will do. Repeat to compare; with neither
	/// --relay nor --rev, this tree's relay (built first).
	#[arg(long = "relay", value_name = "NAME=COMMAND")]
	relays: Vec<String>,
	/// Also measure this tree's relay at a git revision, built in a worktree beside the tree
	/// (../TREE-bench-SHA, which keeps its build cache). Repeatable. This tree's relay comes first.
	#[arg(long = "rev", value_name = "REV")]
	revs: Vec<String>,
	/// Shapes to run, in order (see `moq-load --help`): fanout:N, fanout:BxN, chat:N,
	/// many:B/WxN. Default: fanout:1x100, fanout:1x400 and chat:20 (with --callgrind, fanout:1x100).
	#[arg(long = "shape", value_parser = Shape::parse)]
	shapes: Vec<Shape>,
	/// Measurements of each relay per shape, alternated with the other relays'.
	#[arg(long, default_value_t = 3)]
	rounds: usize,
	/// Run the relays under callgrind and count user-space instructions per delivered frame
	/// (exact; valgrind runs the relay about 50 times slower, so --fps defaults to 5 here).
	#[arg(long)]
	callgrind: bool,
	/// Dial the relays over WebTransport (https://) instead of raw QUIC.
	#[arg(long)]
	webtransport: bool,
	/// Also measure this tree's relay with its clients over WebSocket (ws://: QMux on the relay's
	/// TCP port), beside the same relay over raw QUIC. Saves to relay-websocket{,-callgrind}.
	#[arg(long)]
	websocket: bool,
	/// Also measure this tree's relay with its clients over the IETF drafts: draft-14 and the
	/// newest we speak, beside moq-lite-05 over raw QUIC. Saves to relay-ietf{,-callgrind}.
	#[arg(long)]
	ietf: bool,
	/// Also measure this tree's relay as two linked relays (publishers upstream, subscribers
	/// downstream): the cost of one hop. Saves to relay-hop{,-callgrind}.{md,json}.
	#[arg(long)]
	hop: bool,
	/// Write bench/results/relay.{md,json,svg} (relay-callgrind.{md,json} with --callgrind).
	#[arg(long)]
	save: bool,
	/// Write bench/results/NAME.{md,json} instead, for a run off the defaults (another frame rate,
	/// say) that must not replace the standard tables.
	#[arg(long, value_name = "NAME")]
	save_as: Option<String>,
	/// Keep the scratch directory (the relays' logs and callgrind dumps, for
	/// `callgrind_annotate`) and print where it is.
	#[arg(long)]
	keep: bool,
	#[command(flatten)]
	load: LoadOptions,
}

/// A relay to run.
#[derive(Clone, Debug)]
struct Relay {
	name: String,
	command: String,
	/// Run as two: an upstream copy for the publishers, and this one, linked with it as a cluster
	/// peer, for the subscribers.
	hop: bool,
	/// How clients dial it: `moqt` (raw QUIC), `https` (WebTransport) or `ws` (QMux over a
	/// WebSocket on the same port number, over TCP).
	scheme: &'static str,
	/// The protocol its clients speak, if not the load's `--version`.
	protocol: Option<moq_client::Protocol>,
}

/// One measurement of one relay.
#[derive(Clone, Debug)]
struct Measurement {
	report: Report,
	/// Relay CPU seconds per frame read in the window, in µs.
	cpu_us_per_frame: f64,
	/// Context switches of the relay's threads per frame (voluntary: a worker parked and was woken;
	/// involuntary: preempted).
	switches_per_frame: f64,
	/// User-space instructions per frame read in the window (callgrind).
	instructions_per_frame: Option<f64>,
	/// The callgrind dump's top functions, inclusive.
	top: Option<String>,
	base_rss: u64,
	steady_rss: u64,
	peak_rss: u64,
}

/// Frames per second under callgrind unless told: the relay runs about 50 times slower there.
const CALLGRIND_FPS: u32 = 5;

fn main() -> ExitCode {
	use clap::{CommandFactory as _, FromArgMatches as _};
	let matches = Args::command().get_matches();
	let mut args = match Args::from_arg_matches(&matches) {
		Ok(args) => args,
		Err(err) => err.exit(),
	};
	if args.callgrind && matches.value_source("fps") == Some(clap::parser::ValueSource::DefaultValue) {
		args.load.fps = CALLGRIND_FPS;
	}
	match run(args) {
		Ok(()) => ExitCode::SUCCESS,
		Err(err) => {
			eprintln!("relay bench: {err:#}");
			ExitCode::FAILURE
		}
	}
}

fn run(mut args: Args) -> anyhow::Result<()> {
	let top = workspace();
	let mut relays = Vec::new();
	let scheme = if args.webtransport { "https" } else { "moqt" };
	if args.websocket && (args.hop || !args.relays.is_empty() || !args.revs.is_empty()) {
		bail!("--websocket measures this tree's relay over QUIC and WebSocket: give it alone");
	}
	if args.ietf && (args.hop || args.websocket || !args.relays.is_empty() || !args.revs.is_empty()) {
		bail!("--ietf measures this tree's relay over moq-lite and the IETF drafts: give it alone");
	}
	if args.relays.is_empty() || !args.revs.is_empty() {
		let sha = git(&top, &["rev-parse", "--short", "HEAD"])?;
		let dirty = if git(&top, &["status", "--porcelain", "--untracked-files=no"])?.is_empty() {
			""
		} else {
			"+dirty"
		};
		let binary = build_relay(&top, &top.join("target"))?;
		relays.push(Relay {
			name: format!("current ({sha}{dirty})"),
			command: relay_command(&binary, args.callgrind),
			hop: false,
			scheme,
			protocol: None,
		});
		if args.websocket {
			relays.push(Relay {
				name: format!("current ({sha}{dirty}), over WebSocket"),
				command: relay_command(&binary, args.callgrind).replace("--no-http", "--http-listen 127.0.0.1:{port}"),
				hop: false,
				scheme: "ws",
				protocol: None,
			});
		}
		if args.ietf {
			use moq_client::Protocol;
			for (protocol, draft) in [(Protocol::Draft14, "draft-14"), (Protocol::Draft16, "draft-16")] {
				relays.push(Relay {
					name: format!("current ({sha}{dirty}), over {draft}"),
					protocol: Some(protocol),
					..relays[0].clone()
				});
			}
		}
		if args.hop {
			relays.push(Relay {
				name: format!("current ({sha}{dirty}), one hop"),
				hop: true,
				..relays[0].clone()
			});
		}
	} else if args.hop {
		bail!("--hop measures this tree's relay: give it without --relay, or with --rev");
	}
	for rev in &args.revs {
		let sha = git(&top, &["rev-parse", "--short", &format!("{rev}^{{commit}}")])?;
		let name = top.file_name().and_then(|n| n.to_str()).unwrap_or("tree");
		let tree = top.with_file_name(format!("{name}-bench-{sha}"));
		if tree.exists() {
			// A worktree left at another commit (by hand) must not pass for this one.
			git(&tree, &["checkout", "--detach", "--quiet", &sha])?;
		} else {
			let path = tree.display().to_string();
			git(&top, &["worktree", "add", "--detach", "--quiet", &path, &sha])?;
		}
		relays.push(Relay {
			name: format!("{rev} ({sha})"),
			command: relay_command(&build_relay(&tree, &tree.join("target"))?, args.callgrind),
			hop: false,
			scheme,
			protocol: None,
		});
	}
	for text in &args.relays {
		let (name, command) = text
			.split_once('=')
			.with_context(|| format!("{text:?}: not NAME=COMMAND"))?;
		if !command.contains("{port}") {
			bail!("{name}: the command has no {{port}}");
		}
		relays.push(Relay {
			name: name.to_owned(),
			command: command.to_owned(),
			hop: false,
			scheme,
			protocol: None,
		});
	}
	if args.shapes.is_empty() {
		args.shapes = if args.callgrind {
			vec![Shape::parse("fanout:1x100").expect("valid")]
		} else {
			["fanout:1x100", "fanout:1x400", "chat:20"]
				.iter()
				.map(|s| Shape::parse(s).expect("valid"))
				.collect()
		};
	}
	if args.callgrind && !bench::counter::valgrind_available() {
		bail!("--callgrind needs valgrind (apt-get install valgrind)");
	}
	let scratch = std::env::temp_dir().join(format!("relay-bench-{}", std::process::id()));
	std::fs::create_dir_all(&scratch)?;

	// results[shape][relay] = every round's measurement.
	let mut results: Vec<Vec<Vec<Measurement>>> = vec![vec![Vec::new(); relays.len()]; args.shapes.len()];
	for (s, shape) in args.shapes.iter().enumerate() {
		for round in 0..args.rounds.max(1) {
			for (r, relay) in relays.iter().enumerate() {
				eprintln!(
					"relay bench: {} round {}/{}: {}",
					shape.label(),
					round + 1,
					args.rounds,
					relay.name
				);
				let measured = measure(relay, shape, &args, &scratch)
					.with_context(|| format!("{} on {}", shape.label(), relay.name))?;
				eprintln!("  {}", line(&measured));
				results[s][r].push(measured);
			}
		}
	}
	if args.keep {
		eprintln!("relay bench: logs and dumps kept in {}", scratch.display());
	} else {
		let _ = std::fs::remove_dir_all(&scratch);
	}

	let table = table(&args, &relays, &results);
	println!("{}", table.markdown(&bench::report::revision()));
	if args.save || args.save_as.is_some() {
		table.save()?;
		if args.save_as.is_none() && !args.callgrind && !args.hop && !args.websocket && !args.ietf {
			let svg = plot(&args.shapes, &relays, &results);
			std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("results/relay.svg"), svg)?;
		}
	}
	Ok(())
}

/// One line per measurement, for the log.
fn line(m: &Measurement) -> String {
	let cost = match m.instructions_per_frame {
		Some(instructions) => format!("{instructions:.0} instructions/frame"),
		None => format!(
			"{:.2} µs CPU/frame, RSS {:.1} MiB",
			m.cpu_us_per_frame,
			m.steady_rss as f64 / 1048576.0
		),
	};
	format!("{cost}; {}", m.report.summary())
}

/// The workspace's top directory.
fn workspace() -> PathBuf {
	Path::new(env!("CARGO_MANIFEST_DIR"))
		.parent()
		.expect("bench is in the workspace")
		.to_owned()
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
	let out = Command::new("git")
		.current_dir(dir)
		.args(args)
		.output()
		.context("running git")?;
	if !out.status.success() {
		bail!(
			"git {}: {}",
			args.join(" "),
			String::from_utf8_lossy(&out.stderr).trim()
		);
	}
	Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Builds the relay of the tree at `dir` (release); its binary.
fn build_relay(dir: &Path, target: &Path) -> anyhow::Result<PathBuf> {
	eprintln!("relay bench: building the relay in {}", dir.display());
	let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
		.current_dir(dir)
		.env("CARGO_TARGET_DIR", target)
		.args(["build", "--release", "--quiet", "-p", "moq-relay", "--bin", "moq-relay"])
		.status()
		.context("running cargo")?;
	if !status.success() {
		bail!("building the relay in {} failed", dir.display());
	}
	Ok(target.join("release/moq-relay"))
}

/// Our relay's command: loopback, no HTTP, warnings only, every other setting its default. Under
/// callgrind, one worker: valgrind (3.19) does not count `io_uring_enter` among the syscalls that
/// may block, so a worker parked in it keeps valgrind's global lock and a second worker never runs
/// again (the process hangs at start-up). Instructions per frame do not depend on the worker count
/// the way CPU time does.
fn relay_command(binary: &Path, callgrind: bool) -> String {
	let workers = if callgrind { " --workers 1" } else { "" };
	format!(
		"{} --listen 127.0.0.1:{{port}} --no-http --log-level warn{workers}",
		binary.display()
	)
}

/// Starts `relay` (and its upstream, for a hop), loads it with `shape`, samples it, stops it.
fn measure(relay: &Relay, shape: &Shape, args: &Args, scratch: &Path) -> anyhow::Result<Measurement> {
	let mut children = Vec::new();
	let result = (|| {
		let upstream = match relay.hop {
			true => {
				let port = free_udp_port()?;
				children.push(start_relay(&relay.command, port, args, scratch, "upstream")?);
				wait_bound(children.last_mut().expect("just started"), port)?;
				Some(port)
			}
			false => None,
		};
		let port = free_udp_port()?;
		let command = match upstream {
			Some(up) => format!(
				"{} --cluster-connect moqt://127.0.0.1:{up}/ --cluster-insecure",
				relay.command
			),
			None => relay.command.clone(),
		};
		children.push(start_relay(&command, port, args, scratch, "relay")?);
		wait_bound(children.last_mut().expect("just started"), port)?;
		let pids: Vec<u32> = children.iter().map(Child::id).collect();
		if relay.scheme == "ws" {
			wait_listening(port)?;
		}
		measure_running(&pids, port, upstream, relay, shape, args, scratch)
	})();
	for child in &mut children {
		let _ = child.kill();
		let _ = child.wait();
	}
	result.map_err(|err| {
		let stderr = std::fs::read_to_string(scratch.join("relay.err")).unwrap_or_default();
		let tail: Vec<&str> = stderr.lines().rev().take(10).collect();
		let tail: Vec<&str> = tail.into_iter().rev().collect();
		err.context(format!("the relay's stderr ends:\n{}", tail.join("\n")))
	})
}

/// Starts `command` serving on `port` (under callgrind if asked); its output goes to
/// `scratch/NAME.{log,err}`.
fn start_relay(command: &str, port: u16, args: &Args, scratch: &Path, name: &str) -> anyhow::Result<Child> {
	let command = command.replace("{port}", &port.to_string());
	let command = if args.callgrind {
		format!(
			"valgrind --tool=callgrind --quiet --instr-atstart=no --callgrind-out-file={}/callgrind.%p {command}",
			scratch.display()
		)
	} else {
		command
	};
	Command::new("sh")
		.arg("-c")
		.arg(format!("exec {command}"))
		.stdin(Stdio::null())
		.stdout(std::fs::File::create(scratch.join(format!("{name}.log")))?)
		.stderr(std::fs::File::create(scratch.join(format!("{name}.err")))?)
		.spawn()
		.with_context(|| format!("starting {command}"))
}

/// Waits (at most 60 s) until `child` has bound UDP `port`.
fn wait_bound(child: &mut Child, port: u16) -> anyhow::Result<()> {
	let ready_by = Instant::now() + Duration::from_secs(60);
	while !udp_port_bound(port) {
		if let Some(status) = child.try_wait()? {
			bail!("the relay exited before serving: {status}");
		}
		if Instant::now() > ready_by {
			bail!("the relay did not bind udp port {port} in 60 s");
		}
		std::thread::sleep(Duration::from_millis(20));
	}
	Ok(())
}

/// Waits (at most 60 s) until TCP `port` on 127.0.0.1 takes connections.
fn wait_listening(port: u16) -> anyhow::Result<()> {
	let ready_by = Instant::now() + Duration::from_secs(60);
	while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
		if Instant::now() > ready_by {
			bail!("the relay did not listen on tcp port {port} in 60 s");
		}
		std::thread::sleep(Duration::from_millis(20));
	}
	Ok(())
}

/// Loads the relay on `port` (publishers on `upstream` when given) and samples the relays of
/// `pids` (summed) over the steady window.
#[allow(clippy::too_many_arguments)]
fn measure_running(
	pids: &[u32],
	port: u16,
	upstream: Option<u16>,
	relay: &Relay,
	shape: &Shape,
	args: &Args,
	scratch: &Path,
) -> anyhow::Result<Measurement> {
	let rss = |key: &str| -> anyhow::Result<u64> {
		let mut total = 0;
		for &pid in pids {
			total += status_kib(pid, key)? * 1024;
		}
		Ok(total)
	};
	let base_rss = rss("VmRSS:")?;
	let target = Target {
		addr: format!("127.0.0.1:{port}").parse().expect("an address"),
		publish_addr: upstream.map(|up| format!("127.0.0.1:{up}").parse().expect("an address")),
		url: Url::parse(&format!("{}://localhost:{port}/bench", relay.scheme))?,
		verification: Verification::Disabled,
	};
	let mut plan = args.load.plan(shape.clone(), false);
	if let Some(protocol) = relay.protocol {
		plan.protocol = protocol;
	}
	let live = Arc::new(Live::default());
	let (events, heard) = mpsc::channel();
	let generator = {
		let live = live.clone();
		std::thread::spawn(move || load::run(&plan, &target, live, Some(events)))
	};
	let tick = clock_ticks_per_second();
	let cpu = || -> anyhow::Result<Cpu> {
		let mut total = Cpu::default();
		for &pid in pids {
			let cpu = Cpu::of(pid, tick)?;
			total.seconds += cpu.seconds;
			total.switches += cpu.switches;
		}
		Ok(total)
	};
	let delivered = || live.delivered.load(Relaxed);
	let mut start = (Cpu::default(), 0u64);
	let mut end = (Cpu::default(), 0u64);
	let mut instructions = None;
	let mut top = None;
	let mut steady_rss = 0;
	// callgrind_control on every relay.
	let control = |what: &[&str]| -> anyhow::Result<()> {
		for pid in pids {
			let out = Command::new("callgrind_control")
				.args(what)
				.arg(pid.to_string())
				.output()
				.context("running callgrind_control")?;
			if !out.status.success() {
				bail!(
					"callgrind_control {}: {}",
					what.join(" "),
					String::from_utf8_lossy(&out.stderr)
				);
			}
		}
		Ok(())
	};
	for event in heard {
		match event {
			Event::Ramped => {}
			Event::SteadyStart => {
				if args.callgrind {
					let before = delivered();
					control(&["-i", "on"])?;
					start = (Cpu::default(), (before + delivered()) / 2);
				} else {
					start = (cpu()?, delivered());
				}
			}
			Event::SteadyEnd => {
				if args.callgrind {
					let before = delivered();
					control(&["-d"])?;
					end = (Cpu::default(), (before + delivered()) / 2);
					let mut total = 0;
					let mut tops = Vec::new();
					for pid in pids {
						let dump = std::fs::read_dir(scratch)?
							.filter_map(Result::ok)
							.map(|entry| entry.path())
							.find(|path| {
								path.file_name()
									.and_then(|n| n.to_str())
									.is_some_and(|n| n.starts_with(&format!("callgrind.{pid}.")))
							})
							.context("no callgrind dump")?;
						let text = std::fs::read_to_string(&dump)?;
						total +=
							bench::counter::parse_callgrind_total(&text).context("no totals in the callgrind dump")?;
						tops.push(top_functions(&dump)?);
						if args.keep {
							// Renamed so the next measurement's search does not find it.
							let name = dump.file_name().and_then(|n| n.to_str()).unwrap_or("dump");
							std::fs::rename(&dump, scratch.join(format!("kept.{name}")))?;
						} else {
							std::fs::remove_file(&dump)?;
						}
					}
					instructions = Some(total);
					top = Some(tops.join("\n\n(the next relay)\n\n"));
				} else {
					end = (cpu()?, delivered());
					steady_rss = rss("VmRSS:")?;
				}
			}
		}
	}
	let report = generator.join().expect("the load generator does not panic")?;
	let peak_rss = rss("VmHWM:")?;
	let frames = end.1.saturating_sub(start.1).max(1) as f64;
	let per_frame = |value: fn(&Cpu) -> f64| (value(&end.0) - value(&start.0)) / frames;
	Ok(Measurement {
		cpu_us_per_frame: per_frame(|cpu| cpu.seconds * 1e6),
		switches_per_frame: per_frame(|cpu| cpu.switches),
		instructions_per_frame: instructions.map(|total| total as f64 / frames),
		top,
		report,
		base_rss,
		steady_rss,
		peak_rss,
	})
}

/// The top functions of a callgrind dump by inclusive instructions (`callgrind_annotate`).
fn top_functions(dump: &Path) -> anyhow::Result<String> {
	let out = Command::new("callgrind_annotate")
		.args(["--inclusive=yes", "--threshold=100"])
		.arg(dump)
		.output()
		.context("running callgrind_annotate")?;
	let text = String::from_utf8_lossy(&out.stdout);
	// The function lines follow the `Ir ... file:function` header; keep the first 25.
	let lines: Vec<&str> = text
		.lines()
		.skip_while(|l| !l.contains("file:function"))
		.skip(2)
		.filter(|l| !l.trim().is_empty())
		.take(25)
		.collect();
	Ok(lines.join("\n"))
}

/// A UDP port nothing is bound to on 127.0.0.1 right now.
fn free_udp_port() -> anyhow::Result<u16> {
	let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
	Ok(socket.local_addr()?.port())
}

/// Whether some socket is bound to UDP `port` (`/proc/net/udp`, `/proc/net/udp6`).
fn udp_port_bound(port: u16) -> bool {
	let hex = format!(":{port:04X}");
	["/proc/net/udp", "/proc/net/udp6"].iter().any(|file| {
		std::fs::read_to_string(file).is_ok_and(|text| {
			text.lines()
				.skip(1)
				.any(|l| l.split_whitespace().nth(1).is_some_and(|local| local.ends_with(&hex)))
		})
	})
}

/// A relay process's CPU time so far (every thread, utime + stime) and its threads' context
/// switches. utime and stime alone are not reported: the kernel splits them by sampling at its
/// tick, and the relay's work, paced by the load's frame rate, can fall in step with the tick (in
/// two runs of one binary at 1x100, 6.0 and 13.8 µs of "kernel" per frame).
#[derive(Clone, Copy, Debug, Default)]
struct Cpu {
	seconds: f64,
	switches: f64,
}

impl Cpu {
	fn of(pid: u32, ticks_per_second: f64) -> anyhow::Result<Self> {
		let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
		// Fields after the command name (which may hold spaces): state is the 3rd field, utime
		// the 14th, stime the 15th.
		let rest = stat.rsplit_once(')').context("odd /proc/PID/stat")?.1;
		let fields: Vec<&str> = rest.split_whitespace().collect();
		let utime: f64 = fields.get(11).context("no utime")?.parse()?;
		let stime: f64 = fields.get(12).context("no stime")?.parse()?;
		// A process's status counts its first thread's switches only; the workers are tasks of
		// their own. io_uring's worker threads come and go: one gone since the listing is skipped.
		let mut switches = 0.0;
		for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
			let Ok(status) = std::fs::read_to_string(task?.path().join("status")) else {
				continue;
			};
			for line in status.lines() {
				if let Some(count) = line
					.strip_prefix("voluntary_ctxt_switches:")
					.or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
				{
					switches += count.trim().parse::<f64>()?;
				}
			}
		}
		Ok(Self {
			seconds: (utime + stime) / ticks_per_second,
			switches,
		})
	}
}

/// `getconf CLK_TCK`, asked once.
fn clock_ticks_per_second() -> f64 {
	static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
	*TICKS.get_or_init(|| {
		Command::new("getconf")
			.arg("CLK_TCK")
			.output()
			.ok()
			.and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
			.unwrap_or(100.0)
	})
}

/// A `/proc/PID/status` line's value, in KiB.
fn status_kib(pid: u32, key: &str) -> anyhow::Result<u64> {
	let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
	status
		.lines()
		.find_map(|l| l.strip_prefix(key))
		.and_then(|v| v.split_whitespace().next())
		.and_then(|v| v.parse().ok())
		.with_context(|| format!("no {key} in /proc/{pid}/status"))
}

/// Median and spread ((max − min) / median, %) of `values`.
fn median_spread(values: &[f64]) -> (f64, f64) {
	let mut sorted = values.to_vec();
	let mid = median(&mut sorted);
	let spread = (sorted[sorted.len() - 1] - sorted[0]) / mid.max(f64::MIN_POSITIVE) * 100.0;
	(mid, spread)
}

fn median_of(runs: &[Measurement], key: impl Fn(&Measurement) -> f64) -> f64 {
	let mut values: Vec<f64> = runs.iter().map(key).collect();
	median(&mut values)
}

fn table(args: &Args, relays: &[Relay], results: &[Vec<Vec<Measurement>>]) -> Table {
	let callgrind = args.callgrind;
	let mut columns: Vec<String> = vec!["shape".into(), "relay".into()];
	if callgrind {
		columns.push("instructions/frame".into());
	} else {
		columns.push("µs CPU/frame".into());
	}
	for column in [
		"ratio",
		"spread %",
		"frames/s",
		"p50 µs",
		"p99 µs",
		"max µs",
		"lost",
		"reconnects",
		"datagrams out/frame",
		"datagrams in/frame",
		"probes/frame",
	] {
		columns.push(column.into());
	}
	if !callgrind {
		for column in [
			"switches/frame",
			"RSS before MiB",
			"RSS steady MiB",
			"RSS peak MiB",
			"KiB/connection",
		] {
			columns.push(column.into());
		}
	}
	let mut rows = Vec::new();
	let mut after = String::new();
	for (s, shape) in args.shapes.iter().enumerate() {
		let cost = |runs: &[Measurement]| -> Vec<f64> {
			runs.iter()
				.map(|m| m.instructions_per_frame.unwrap_or(m.cpu_us_per_frame))
				.collect()
		};
		let first = median_spread(&cost(&results[s][0])).0;
		for (r, relay) in relays.iter().enumerate() {
			let runs = &results[s][r];
			let (value, spread) = median_spread(&cost(runs));
			let connections = runs[0].report.connections as f64;
			let mut row = vec![
				shape.label(),
				relay.name.clone(),
				if callgrind {
					format!("{value:.0}")
				} else {
					format!("{value:.2}")
				},
				format!("{:.3}", value / first),
				format!("{spread:.1}"),
				format!("{:.0}", median_of(runs, |m| m.report.frames_per_second())),
				format!("{:.0}", median_of(runs, |m| m.report.latency_p50_us as f64)),
				format!("{:.0}", median_of(runs, |m| m.report.latency_p99_us as f64)),
				format!("{:.0}", median_of(runs, |m| m.report.latency_max_us as f64)),
				runs.iter().map(|m| m.report.lost()).sum::<u64>().to_string(),
				runs.iter().map(|m| m.report.reconnects).sum::<u64>().to_string(),
			];
			let wire: [fn(&Wire) -> u64; 3] = [|w| w.from_relay, |w| w.to_relay, |w| w.relay_probes];
			for count in wire {
				row.push(format!(
					"{:.3}",
					median_of(runs, |m| m.report.per_frame(count(&m.report.wire)))
				));
			}
			if !callgrind {
				row.push(format!("{:.3}", median_of(runs, |m| m.switches_per_frame)));
				let mib = |bytes: f64| format!("{:.1}", bytes / 1048576.0);
				row.push(mib(median_of(runs, |m| m.base_rss as f64)));
				row.push(mib(median_of(runs, |m| m.steady_rss as f64)));
				row.push(mib(median_of(runs, |m| m.peak_rss as f64)));
				row.push(format!(
					"{:.0}",
					median_of(runs, |m| m.steady_rss.saturating_sub(m.base_rss) as f64) / 1024.0 / connections
				));
			}
			rows.push(row);
			if let Some(top) = runs.last().and_then(|m| m.top.as_ref()) {
				let _ = write!(
					after,
					"\nTop functions of {} on {}, inclusive (the last round's window, `callgrind_annotate --inclusive=yes`):\n\n```text\n{top}\n```\n",
					relay.name,
					shape.label()
				);
			}
		}
		// A/A: relays with the same command measure the noise band.
		for (r, relay) in relays.iter().enumerate().skip(1) {
			let same = relay.command == relays[0].command && relay.hop == relays[0].hop;
			if same && relay.scheme == relays[0].scheme && relay.protocol == relays[0].protocol {
				let value = median_spread(&cost(&results[s][r])).0;
				let _ = writeln!(
					after,
					"- A/A on {}: {} and {} run the same command; their medians differ by {:.1}%: the noise band of this run.",
					shape.label(),
					relays[0].name,
					relay.name,
					(value / first - 1.0).abs() * 100.0
				);
			}
		}
	}
	let (name, title, unit, source) = if callgrind {
		(
			if args.hop {
				"relay-hop-callgrind"
			} else if args.websocket {
				"relay-websocket-callgrind"
			} else if args.ietf {
				"relay-ietf-callgrind"
			} else {
				"relay-callgrind"
			},
			"The relay under load: user-space instructions per delivered frame",
			"instructions per delivered frame",
			"callgrind (exact user-space instructions of every relay thread over the steady window, `callgrind_control -i on` to `-d`)",
		)
	} else {
		(
			if args.hop {
				"relay-hop"
			} else if args.websocket {
				"relay-websocket"
			} else if args.ietf {
				"relay-ietf"
			} else {
				"relay"
			},
			"The relay under load: CPU, memory and latency per delivered frame",
			"µs of relay CPU per delivered frame",
			"task-clock: the relay's utime + stime from /proc/PID/stat over the steady window; context switches from /proc/PID/task/*/status; resident set from /proc/PID/status; latency measured by the load generator (µs, one monotonic clock)",
		)
	};
	let notes = format!(
		"Written by `cargo run --release -p bench --bin relay -- {}`. Load: \
		 {} fps of one-frame groups of {} bytes on each live track, {} rounds (alternated), a {:.0} s steady \
		 window after the ramp and a {:.0} s settle, the load generator on {} kio worker(s) of the same \
		 machine, each client connection on its own UDP socket over loopback. Figures are medians over the \
		 rounds; `spread` is (max − min)/median of the cost column; `ratio` is to the first relay; `lost` \
		 and `reconnects` are summed over the rounds; `KiB/connection` is (steady − before) / connections. \
		 `datagrams out/frame` and `datagrams in/frame` are what the clients' QUIC connections \
		 received from and sent to the relay over the window (quinn-proto's counters, read as it starts \
		 and ends), per delivered frame; `probes/frame` counts the PING and IMMEDIATE_ACK frames among \
		 what they received (quinn-proto sends one in each probe when a probe timeout fires).\n\n\
		 Relays:\n\n{}",
		std::env::args().skip(1).collect::<Vec<_>>().join(" "),
		args.load.fps,
		args.load.size,
		args.rounds,
		args.load.steady.as_secs_f64(),
		args.load.settle.as_secs_f64(),
		args.load.workers,
		relays
			.iter()
			.map(|r| format!(
				"- {}: `{}`{}\n",
				r.name,
				r.command.replace(&format!("{}/", workspace().display()), "./"),
				match r.hop {
					true =>
						" twice: publishers on the first, subscribers on the second, which adds \
						`--cluster-connect moqt://127.0.0.1:{upstream}/ --cluster-insecure`; costs are the two relays' sum",
					false => "",
				}
			))
			.collect::<String>()
	);
	Table {
		name: args.save_as.clone().unwrap_or_else(|| name.into()),
		title: title.into(),
		unit: unit.into(),
		source: source.into(),
		notes,
		columns,
		rows,
		after,
	}
}

/// Two panels against subscribers per track (the fan-out): relay CPU per frame, and p99
/// latency; one line per relay.
fn plot(shapes: &[Shape], relays: &[Relay], results: &[Vec<Vec<Measurement>>]) -> String {
	let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
	let (width, height, pad) = (460.0, 300.0, 50.0);
	let mut svg = format!(
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
		width * 2.0,
		height + 30.0 + 20.0 * relays.len() as f64
	);
	fn cpu(m: &Measurement) -> f64 {
		m.cpu_us_per_frame
	}
	fn p99_ms(m: &Measurement) -> f64 {
		m.report.latency_p99_us as f64 / 1000.0
	}
	type Key = fn(&Measurement) -> f64;
	let panels: [(&str, Key); 2] = [
		("relay CPU per delivered frame (µs)", cpu),
		("p99 latency (ms)", p99_ms),
	];
	for (p, (title, key)) in panels.iter().enumerate() {
		let x0 = p as f64 * width;
		// Points (fan-out, median) per relay.
		let series: Vec<Vec<(f64, f64)>> = (0..relays.len())
			.map(|r| {
				let mut points: Vec<(f64, f64)> = shapes
					.iter()
					.enumerate()
					.map(|(s, shape)| (shape.fanout() as f64, median_of(&results[s][r], *key)))
					.collect();
				points.sort_by(|a, b| a.0.total_cmp(&b.0));
				points
			})
			.collect();
		let max_x = series.iter().flatten().map(|p| p.0).fold(1.0, f64::max);
		let max_y = series.iter().flatten().map(|p| p.1).fold(f64::MIN_POSITIVE, f64::max) * 1.1;
		let sx = |x: f64| x0 + pad + x / max_x * (width - 2.0 * pad);
		let sy = |y: f64| height - pad + 20.0 - y / max_y * (height - 2.0 * pad);
		let _ = writeln!(
			svg,
			"<text x=\"{}\" y=\"20\" text-anchor=\"middle\">{title}</text>",
			x0 + width / 2.0
		);
		let _ = writeln!(
			svg,
			"<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/><line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{3}\" stroke=\"black\"/>",
			sx(0.0),
			sy(0.0),
			sx(max_x),
			sy(max_y)
		);
		let _ = writeln!(
			svg,
			"<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">subscribers per track</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{max_y:.1}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{max_x:.0}</text>",
			x0 + width / 2.0,
			height + 5.0,
			sx(0.0) - 4.0,
			sy(max_y) + 4.0,
			sx(max_x),
			sy(0.0) + 15.0
		);
		for (r, points) in series.iter().enumerate() {
			let colour = colours[r % colours.len()];
			let path: Vec<String> = points
				.iter()
				.map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
				.collect();
			let _ = writeln!(
				svg,
				"<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
				path.join(" ")
			);
			for (x, y) in points {
				let _ = writeln!(
					svg,
					"<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"><title>{x:.0}: {y:.2}</title></circle>",
					sx(*x),
					sy(*y)
				);
			}
		}
	}
	for (r, relay) in relays.iter().enumerate() {
		let _ = writeln!(
			svg,
			"<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>",
			pad,
			height + 30.0 + 20.0 * r as f64,
			colours[r % colours.len()],
			relay.name.replace('&', "&amp;").replace('<', "&lt;")
		);
	}
	svg.push_str("</svg>\n");
	svg
}
