//! kio against the other thread-per-core io_uring runtimes: the same work on each, side by side in
//! one run.
//!
//! ```text
//! cargo run --release --manifest-path bench/peers/Cargo.toml -- --syscalls --callgrind --save   # just bench-peers
//! ```
//!
//! Each measurement is a child process of its own (`--child RUNTIME ROW`): it builds the runtime,
//! runs the row's workload (`work.rs`; both ends on the runtime's one thread, over loopback) and
//! prints what it cost over the work alone, set-up excluded:
//!
//! - **CPU**: user + system time of the process (`CLOCK_PROCESS_CPUTIME_ID`), per operation;
//! - **allocations**: heap allocations per operation (a counting global allocator,
//!   `stats_alloc`);
//! - **io_uring_enter** (`--syscalls`): `io_uring_enter` calls per operation, counted by
//!   `strace -c` over a run of a tenth of the row's operations and a run of none, subtracted;
//! - **instructions** (`--callgrind`): user-space instructions per operation, counted by
//!   callgrind (this machine has no PMU) over a run of a tenth of the row's operations and a run
//!   of none, subtracted. Exact and repeatable, where CPU time on a shared machine is not; the
//!   kernel's share (the loopback path, io_uring's own work) is not in it.
//! - wall-clock time, for reference only on this shared machine.
//!
//! Rounds alternate the runtimes; figures are medians over the rounds, and `kio/peer` is kio's
//! median over the peer's (below 1: kio spends less). Results: `bench/results/peers.{md,json}` and
//! `peers.svg`.

#![forbid(unsafe_code)]

mod rt_compio;
mod rt_glommio;
mod rt_kio;
mod rt_monoio;
mod work;

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use work::{Measured, Row};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// The runtimes compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Runtime {
	Kio,
	Compio,
	Monoio,
	Glommio,
}

impl Runtime {
	const ALL: [Self; 4] = [Self::Kio, Self::Compio, Self::Monoio, Self::Glommio];

	fn name(self) -> &'static str {
		match self {
			Self::Kio => "kio",
			Self::Compio => "compio",
			Self::Monoio => "monoio",
			Self::Glommio => "glommio",
		}
	}

	/// Why this runtime cannot run `row`, if it cannot.
	fn cannot(self, row: Row) -> Option<&'static str> {
		match (self, row) {
			(Self::Monoio | Self::Glommio, Row::Quic256MiB | Row::Quic1000Streams) => {
				Some("no QUIC implementation on this runtime")
			}
			_ => None,
		}
	}

	fn run(self, row: Row, ops: u64) -> anyhow::Result<Measured> {
		match self {
			Self::Kio => rt_kio::run(row, ops),
			Self::Compio => rt_compio::run(row, ops),
			Self::Monoio => rt_monoio::run(row, ops),
			Self::Glommio => rt_glommio::run(row, ops),
		}
	}
}

/// Rows some runtimes cannot run, with the reason.
const NOT_YET: &[(&str, &str)] = &[
	(
		"cross-thread-wake under callgrind",
		"valgrind runs one thread at a time and holds its lock through `io_uring_enter`, so a runtime parked there never lets the waking thread run: no instruction counts for this row",
	),
	(
		"quic-256mib, quic-1000-streams on monoio and glommio",
		"neither has a QUIC implementation: the QUIC rows compare moq-quic (kio) with compio-quic (compio), both on quinn-proto 0.11.19",
	),
];

#[derive(Parser)]
#[command(about = "kio against compio, monoio and glommio: the same work side by side")]
struct Args {
	/// Rounds per row; each round runs every runtime once, in turn.
	#[arg(long, default_value_t = 3)]
	rounds: usize,
	/// Only these rows (default: all).
	#[arg(long, value_enum, value_delimiter = ',')]
	rows: Vec<Row>,
	/// Only these runtimes (default: all).
	#[arg(long, value_enum, value_delimiter = ',')]
	runtimes: Vec<Runtime>,
	/// Scale every row's operations by this factor (a quick look: 0.1).
	#[arg(long, default_value_t = 1.0)]
	scale: f64,
	/// Also count io_uring_enter calls per operation under strace.
	#[arg(long)]
	syscalls: bool,
	/// Also count user-space instructions per operation under callgrind (valgrind).
	#[arg(long)]
	callgrind: bool,
	/// Write bench/results/peers.{md,json,svg}.
	#[arg(long)]
	save: bool,
	/// Internal: run one measurement in this process and print it.
	#[arg(long, num_args = 2, value_names = ["RUNTIME", "ROW"], hide = true)]
	child: Vec<String>,
	/// Internal: the operations of a child run.
	#[arg(long, hide = true)]
	ops: Option<u64>,
}

fn main() -> anyhow::Result<()> {
	let args = Args::parse();
	if let [runtime, row] = args.child.as_slice() {
		use clap::ValueEnum as _;
		let runtime = Runtime::from_str(runtime, true).map_err(anyhow::Error::msg)?;
		let row = Row::from_str(row, true).map_err(anyhow::Error::msg)?;
		let ops = args.ops.unwrap_or(row.ops());
		let measured = runtime.run(row, ops)?;
		println!(
			"RESULT {} {} {} {}",
			ops,
			measured.cpu.as_nanos(),
			measured.wall.as_nanos(),
			measured.allocations
		);
		return Ok(());
	}
	let rows = if args.rows.is_empty() {
		Row::ALL.to_vec()
	} else {
		args.rows.clone()
	};
	let runtimes = if args.runtimes.is_empty() {
		Runtime::ALL.to_vec()
	} else {
		args.runtimes.clone()
	};
	let exe = std::env::current_exe().context("the harness's own path")?;
	let mut results = Vec::new();
	for row in &rows {
		let ops = row_ops(*row, args.scale);
		let runtimes: Vec<Runtime> = runtimes.iter().copied().filter(|r| r.cannot(*row).is_none()).collect();
		let mut runs: Vec<Vec<Run>> = vec![Vec::new(); runtimes.len()];
		for round in 0..args.rounds.max(1) {
			for (r, runtime) in runtimes.iter().enumerate() {
				let run = child(&exe, *runtime, *row, ops)
					.with_context(|| format!("{} on {}", row.name(), runtime.name()))?;
				eprintln!(
					"peers: {} round {}/{} {}: {:.0} ns CPU/{}, {:.2} allocations/{}",
					row.name(),
					round + 1,
					args.rounds,
					runtime.name(),
					run.cpu_ns,
					row.unit(),
					run.allocations,
					row.unit()
				);
				runs[r].push(run);
			}
		}
		// Under a tool, a tenth of the operations: strace stops the process at every call
		// (compio's spawn + join, two calls per operation, outran the child's two minutes at the
		// full count), and callgrind runs some fifty times slower.
		let counted_ops = row_ops(*row, args.scale / 10.0);
		let count = |tool: Tool, runtime: Runtime| {
			tool.per_op(&exe, runtime, *row, counted_ops).unwrap_or_else(|err| {
				eprintln!(
					"peers: {} on {} under {}: {err:#}",
					row.name(),
					runtime.name(),
					tool.name()
				);
				None
			})
		};
		let mut counts = Vec::new();
		for runtime in &runtimes {
			let syscalls = args.syscalls.then(|| count(Tool::Strace, *runtime)).flatten();
			// Valgrind runs one thread at a time and holds its lock through `io_uring_enter`: a
			// runtime parked there never lets the waking thread run (kio's child hung).
			let instructions = (args.callgrind && *row != Row::CrossThreadWake)
				.then(|| count(Tool::Callgrind, *runtime))
				.flatten();
			if let Some(instructions) = instructions {
				eprintln!(
					"peers: {} {}: {instructions:.0} instructions/{}",
					row.name(),
					runtime.name(),
					row.unit()
				);
			}
			counts.push(Counts { syscalls, instructions });
		}
		results.push((*row, runtimes.clone(), runs, counts));
	}
	let table = markdown(&args, &results);
	println!("{table}");
	if args.save {
		let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results");
		std::fs::write(dir.join("peers.md"), &table)?;
		std::fs::write(dir.join("peers.json"), json(&results))?;
		std::fs::write(dir.join("peers.svg"), svg(&results))?;
	}
	Ok(())
}

/// The operations of a measurement of `row`, scaled: whole rounds of the timers and of the
/// connections.
fn row_ops(row: Row, scale: f64) -> u64 {
	let ops = ((row.ops() as f64 * scale) as u64).max(row.connections().max(work::TIMERS / 1000));
	match row {
		Row::Timers => ops.div_ceil(work::TIMERS).max(1) * work::TIMERS,
		_ => ops.div_ceil(row.connections()) * row.connections(),
	}
}

/// What strace and callgrind counted for one runtime on one row, per operation.
#[derive(Clone, Copy, Debug)]
struct Counts {
	syscalls: Option<f64>,
	instructions: Option<f64>,
}

/// One child's figures, per operation.
#[derive(Clone, Debug)]
struct Run {
	cpu_ns: f64,
	wall_ns: f64,
	allocations: f64,
}

fn child(exe: &Path, runtime: Runtime, row: Row, ops: u64) -> anyhow::Result<Run> {
	let out = run_child(Command::new(exe), runtime, row, ops)?;
	let line = out
		.lines()
		.find_map(|line| line.strip_prefix("RESULT "))
		.context("no result line")?;
	let fields: Vec<f64> = line.split(' ').map(str::parse).collect::<Result<_, _>>()?;
	let [ops, cpu, wall, allocations] = fields[..] else {
		bail!("a bad result line: {line}");
	};
	Ok(Run {
		cpu_ns: cpu / ops,
		wall_ns: wall / ops,
		allocations: allocations / ops,
	})
}

/// Runs `command` (the harness, maybe under strace) as a child for one measurement, killed
/// after two minutes; its standard output.
fn run_child(mut command: Command, runtime: Runtime, row: Row, ops: u64) -> anyhow::Result<String> {
	use clap::ValueEnum as _;
	let row_name = row.to_possible_value().expect("no skipped rows").get_name().to_owned();
	let mut process = command
		.args(["--child", runtime.name(), &row_name, "--ops", &ops.to_string()])
		.stdout(Stdio::piped())
		.stderr(Stdio::piped())
		.spawn()
		.context("starting a child")?;
	let deadline = Instant::now() + Duration::from_secs(120);
	loop {
		if process.try_wait()?.is_some() {
			break;
		}
		if Instant::now() > deadline {
			let _ = process.kill();
			bail!("no result in 120 s");
		}
		std::thread::sleep(Duration::from_millis(10));
	}
	let out = process.wait_with_output()?;
	if !out.status.success() {
		bail!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
	}
	Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A counter that runs a child under a tool and reads the tool's report.
#[derive(Clone, Copy)]
enum Tool {
	/// `io_uring_enter` calls, by `strace -c`.
	Strace,
	/// User-space instructions, by callgrind.
	Callgrind,
}

impl Tool {
	fn name(self) -> &'static str {
		match self {
			Self::Strace => "strace",
			Self::Callgrind => "callgrind",
		}
	}

	fn program(self) -> &'static str {
		match self {
			Self::Strace => "strace",
			Self::Callgrind => "valgrind",
		}
	}

	/// The harness `exe` under the tool, which writes its report to `report`.
	fn command(self, exe: &Path, report: &Path) -> Command {
		let mut command = Command::new(self.program());
		match self {
			Self::Strace => command
				.args(["-f", "-c", "-e", "trace=io_uring_enter", "-o"])
				.arg(report),
			Self::Callgrind => command
				.args(["--tool=callgrind", "--dump-line=no", "--compress-strings=no"])
				.arg(format!("--callgrind-out-file={}", report.display())),
		};
		command.arg(exe);
		command
	}

	/// The count in the tool's report.
	fn parse(self, report: &str) -> Option<u64> {
		match self {
			// strace -c: "% time seconds usecs/call calls errors syscall"; no line, no call.
			Self::Strace => Some(
				report
					.lines()
					.find(|line| line.trim_end().ends_with("io_uring_enter"))
					.and_then(|line| line.split_whitespace().nth(3))
					.and_then(|calls| calls.parse().ok())
					.unwrap_or(0),
			),
			Self::Callgrind => report
				.lines()
				.find_map(|line| line.strip_prefix("totals: "))
				.and_then(|total| total.trim().parse().ok()),
		}
	}

	/// The tool's count per operation: over a run of `ops` minus a run of none, so set-up
	/// cancels. `None` when the tool is not installed.
	fn per_op(self, exe: &Path, runtime: Runtime, row: Row, ops: u64) -> anyhow::Result<Option<f64>> {
		if Command::new(self.program()).arg("--version").output().is_err() {
			return Ok(None);
		}
		let count = |ops: u64| -> anyhow::Result<u64> {
			let report = std::env::temp_dir().join(format!("peers-{}-{}", self.name(), std::process::id()));
			run_child(self.command(exe, &report), runtime, row, ops)?;
			let text = std::fs::read_to_string(&report)?;
			let _ = std::fs::remove_file(&report);
			self.parse(&text)
				.with_context(|| format!("no count in {}'s report", self.name()))
		};
		let (full, none) = (count(ops)?, count(0)?);
		Ok(Some(full.saturating_sub(none) as f64 / ops as f64))
	}
}

fn median(mut values: Vec<f64>) -> f64 {
	values.sort_by(f64::total_cmp);
	values[values.len() / 2]
}

/// Versions of the peers, from the lock file this harness was built with.
fn versions() -> String {
	let lock = include_str!("../Cargo.lock");
	let mut out = Vec::new();
	for name in ["compio", "monoio", "glommio"] {
		let version = lock
			.split("[[package]]")
			.find(|package| package.contains(&format!("name = \"{name}\"\n")))
			.and_then(|package| package.lines().find_map(|line| line.strip_prefix("version = ")))
			.unwrap_or("?")
			.trim_matches('"');
		out.push(format!("{name} {version}"));
	}
	out.join(", ")
}

type Results = Vec<(Row, Vec<Runtime>, Vec<Vec<Run>>, Vec<Counts>)>;

/// The revision, as `bench::report::revision` gives it (this workspace does not depend on `bench`:
/// that would build the relay and its stack here too).
fn git_revision() -> String {
	let run = |args: &[&str]| {
		Command::new("git")
			.args(args)
			.output()
			.ok()
			.filter(|out| out.status.success())
			.map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
	};
	let head = run(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
	match run(&["status", "--porcelain", "--", ".", ":!bench/results"]).is_some_and(|s| !s.is_empty()) {
		true => format!("{head}+dirty"),
		false => head,
	}
}

fn markdown(args: &Args, results: &Results) -> String {
	let cpus = std::thread::available_parallelism().map_or(1, usize::from);
	let mut out = format!(
		"# kio against the other io_uring runtimes\n\nWritten by the harness (`bench/peers`, `just bench-peers`); do not edit by hand.\n\n\
		 - revision: `{}`\n- date: {}\n- machine: {cpus} CPUs, no PMU\n- peers: {}\n- unit: **ns of CPU per operation** \
		 (user + system, `CLOCK_PROCESS_CPUTIME_ID`, the whole process: both ends and the kernel work done in their context), \
		 user-space instructions per operation (callgrind, a run of a tenth of the operations minus an empty run; \
		 exact, but without the kernel's share), allocations per operation (counting allocator), \
		 io_uring_enter per operation (strace -c, a run of a tenth of the operations minus an empty run)\n\
		 - rounds: {} (runtimes alternated), medians\n\n\
		 Every runtime runs the row on one thread with both ends of the traffic, over loopback (`bench/peers/src/work.rs`). \
		 `kio/peer` is kio's CPU per operation over the peer's, `kio/peer instr` the same for instructions: \
		 below 1, kio spends less.\n\n",
		git_revision(),
		today(),
		versions(),
		args.rounds
	);
	out.push_str(
		"| row | operation | runtime | ns CPU/op | kio/peer | spread % | instructions/op | kio/peer instr | allocations/op | io_uring_enter/op | µs wall/op |\n",
	);
	out.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (row, runtimes, runs, counts) in results {
		let k = runtimes.iter().position(|r| *r == Runtime::Kio);
		let kio = k.map(|k| median(runs[k].iter().map(|r| r.cpu_ns).collect()));
		let kio_instructions = k.and_then(|k| counts[k].instructions);
		for (r, runtime) in runtimes.iter().enumerate() {
			let cpu: Vec<f64> = runs[r].iter().map(|r| r.cpu_ns).collect();
			let value = median(cpu.clone());
			let spread = (cpu.iter().copied().fold(f64::MIN, f64::max) - cpu.iter().copied().fold(f64::MAX, f64::min))
				/ value * 100.0;
			let ratio = kio_over(*runtime, kio, Some(value));
			let instructions_ratio = kio_over(*runtime, kio_instructions, counts[r].instructions);
			let _ = writeln!(
				out,
				"| {} | {} | {} | {:.0} | {} | {:.1} | {} | {} | {:.2} | {} | {:.2} |",
				row.name(),
				row.unit(),
				runtime.name(),
				value,
				ratio,
				spread,
				counts[r].instructions.map_or("–".to_owned(), |i| format!("{i:.0}")),
				instructions_ratio,
				median(runs[r].iter().map(|r| r.allocations).collect()),
				counts[r].syscalls.map_or("–".to_owned(), |s| format!("{s:.3}")),
				median(runs[r].iter().map(|r| r.wall_ns).collect()) / 1000.0,
			);
		}
	}
	out.push_str("\nRows not run, and why:\n\n");
	for (row, why) in NOT_YET {
		let _ = writeln!(out, "- `{row}`: {why}.");
	}
	out
}

/// kio's figure over a peer's, for the table ("–" on kio's own row or without both figures).
fn kio_over(runtime: Runtime, kio: Option<f64>, peer: Option<f64>) -> String {
	match (runtime, kio, peer) {
		(Runtime::Kio, ..) | (_, None, _) | (_, _, None) => "–".to_owned(),
		(_, Some(kio), Some(peer)) => format!("{:.2}", kio / peer),
	}
}

fn json(results: &Results) -> String {
	let revision = git_revision();
	let mut out = String::new();
	for (row, runtimes, runs, counts) in results {
		for (r, runtime) in runtimes.iter().enumerate() {
			let _ = writeln!(
				out,
				"{{\"table\":\"peers\",\"revision\":\"{}\",\"row\":\"{}\",\"runtime\":\"{}\",\"ns_cpu_per_op\":{:.1},\"instructions_per_op\":{},\"allocations_per_op\":{:.3},\"io_uring_enter_per_op\":{},\"wall_us_per_op\":{:.3}}}",
				revision,
				row.name(),
				runtime.name(),
				median(runs[r].iter().map(|r| r.cpu_ns).collect()),
				counts[r].instructions.map_or("null".to_owned(), |i| format!("{i:.1}")),
				median(runs[r].iter().map(|r| r.allocations).collect()),
				counts[r].syscalls.map_or("null".to_owned(), |s| format!("{s:.4}")),
				median(runs[r].iter().map(|r| r.wall_ns).collect()) / 1000.0,
			);
		}
	}
	out
}

/// One group of bars per row: each runtime's CPU per operation relative to kio's (kio = 1).
fn svg(results: &Results) -> String {
	let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
	let (width, row_height, left) = (760.0, 70.0, 150.0);
	let height = 50.0 + row_height * results.len() as f64;
	let mut out = format!(
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
		 <text x=\"10\" y=\"20\" font-size=\"14\">CPU per operation relative to kio (kio = 1; longer is more CPU)</text>\n"
	);
	let max = results
		.iter()
		.flat_map(|(_, runtimes, runs, _)| {
			let kio = runtimes
				.iter()
				.position(|r| *r == Runtime::Kio)
				.map(|k| median(runs[k].iter().map(|r| r.cpu_ns).collect()));
			runs.iter()
				.map(move |runs| kio.map_or(1.0, |kio| median(runs.iter().map(|r| r.cpu_ns).collect()) / kio))
		})
		.fold(1.0, f64::max)
		.min(10.0);
	let scale = (width - left - 60.0) / max;
	for (i, (row, runtimes, runs, _)) in results.iter().enumerate() {
		let top = 40.0 + row_height * i as f64;
		let _ = writeln!(out, "<text x=\"10\" y=\"{}\">{}</text>", top + 30.0, row.name());
		let kio = runtimes
			.iter()
			.position(|r| *r == Runtime::Kio)
			.map(|k| median(runs[k].iter().map(|r| r.cpu_ns).collect()));
		for (r, runtime) in runtimes.iter().enumerate() {
			let value = kio.map_or(1.0, |kio| median(runs[r].iter().map(|r| r.cpu_ns).collect()) / kio);
			let y = top + 14.0 * r as f64;
			let colour = colours[Runtime::ALL.iter().position(|x| x == runtime).unwrap_or(0)];
			let _ = writeln!(
				out,
				"<rect x=\"{left}\" y=\"{y}\" width=\"{:.1}\" height=\"12\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{:.1}\">{} {value:.2}</text>",
				(value.min(max) * scale).max(1.0),
				left + (value.min(max) * scale).max(1.0) + 4.0,
				y + 10.0,
				runtime.name()
			);
		}
	}
	out.push_str("</svg>\n");
	out
}

fn today() -> String {
	Command::new("date")
		.args(["-u", "+%F"])
		.output()
		.ok()
		.map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
		.unwrap_or_else(|| "unknown".into())
}
