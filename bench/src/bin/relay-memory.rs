//! What a peer can make the relay hold, written to `bench/results/relay-memory.{md,json}`: the
//! median of five runs of `moq-relay/tests/memory.rs`'s measurements, each run a child
//! `cargo test -p moq-relay --test memory -- --ignored measure` (the relay binary in a process of
//! its own, the attackers in the test's). The test owns the attacks and their bounds; this only
//! runs them, takes the medians and writes the table.
//!
//! `relay-memory [--runs 5]`

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{Context as _, bail};
use bench::counter::median;
use bench::report::Table;
use clap::Parser;

#[derive(Parser)]
#[command(about = "Relay memory under attack: medians of moq-relay's memory measurements")]
struct Args {
	/// Runs of every measurement.
	#[arg(long, default_value_t = 5)]
	runs: usize,
}

/// The measurements `measure` prints, as the table names them, and the bound its test asserts.
const ROWS: [(&str, &str, &str); 8] = [
	("handshake", "Y: per handshake in progress", "128 KiB"),
	("idle", "Z: per idle established connection", "256 KiB"),
	(
		"partial",
		"X: partial input on 1,000 streams, whole connection",
		"32 MiB",
	),
	("flood", "X: announcement flood, whole connection", "16 MiB"),
	(
		"address",
		"one address: 60 sessions parking partial input (480 MiB unbounded), --max-memory 256MiB",
		"its share (128 MiB) + 16 MiB",
	),
	(
		"total",
		"eight addresses: 120 such sessions (960 MiB unbounded), --max-memory 256MiB",
		"the ceiling (256 MiB)",
	),
	(
		"watcher",
		"a watcher of 4,000 broadcasts, 200 announcement requests unread",
		"16 MiB",
	),
	(
		"queues",
		"one address: 120 connections stalling 64 subscriptions each (send queues), --max-memory 256MiB",
		"its share (85 MiB) + 16 MiB",
	),
];

fn main() -> anyhow::Result<()> {
	let args = Args::parse();
	let mut runs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
	for run in 0..args.runs {
		eprintln!("relay-memory: run {} of {}", run + 1, args.runs);
		let output = Command::new(env!("CARGO"))
			.args([
				"test",
				"-p",
				"moq-relay",
				"--test",
				"memory",
				"--",
				"--ignored",
				"--exact",
				"measure",
			])
			.args(["--nocapture", "--test-threads", "1"])
			.output()
			.context("running cargo test")?;
		if !output.status.success() {
			bail!("the measurement failed:\n{}", String::from_utf8_lossy(&output.stderr));
		}
		for line in String::from_utf8_lossy(&output.stdout).lines() {
			let mut fields = line.strip_prefix("RESULT ").unwrap_or_default().split(' ');
			if let (Some(what), Some(Ok(bytes))) = (fields.next(), fields.next().map(str::parse::<f64>)) {
				runs.entry(what.to_owned()).or_default().push(bytes);
			}
		}
	}
	let mut rows = Vec::new();
	for (key, what, bound) in ROWS {
		let values = runs.get_mut(key).with_context(|| format!("no {key} figure printed"))?;
		let listed: Vec<String> = values.iter().map(|r| format!("{r:.0}")).collect();
		rows.push(vec![
			what.to_owned(),
			format!("{:.0}", median(values)),
			listed.join(", "),
			bound.to_owned(),
		]);
	}
	let table = Table {
		name: "relay-memory".into(),
		title: "Relay memory under attack".into(),
		unit: "bytes of resident memory (the relay process's VmRSS growth)".into(),
		source: "`/proc/PID/status` of the relay binary in a process of its own (debug build, 2 workers), read once \
		         RSS has settled (two readings 100 ms apart within 64 KiB); the attacking clients run in the test's process"
			.into(),
		notes: format!(
			"`moq-relay/tests/memory.rs` measures (`measure`); `cargo run -p bench --bin relay-memory` runs it and takes \
			 the medians; the relay's README reads the figures. Median of {} runs, each against a fresh relay. Resident \
			 memory moves in allocator-sized steps, so per-connection figures come from large counts and still vary \
			 between runs. Y: 1,000 unanswered Initials; Z: 200 connections with QUIC and SETUP done, nothing else; \
			 X: one connection's unfinished messages on 1,000 streams (8 MiB charged to its partial-input budget), \
			 and one connection announcing 4,096 broadcasts (1,024 kept).",
			args.runs
		),
		columns: ["what", "median (bytes)", "runs (bytes)", "bound the test asserts"]
			.map(String::from)
			.to_vec(),
		rows,
		after: String::new(),
	};
	table.save().context("writing bench/results/relay-memory.{md,json}")
}
