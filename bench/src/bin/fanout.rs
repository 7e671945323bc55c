//! `fanout`: instructions per delivered group per subscriber.
//!
//! ```text
//! fanout [model|session|session-ietf] [--subscribers 1,64,512] [--runs 3] [--cycles N] [--source perf|callgrind|task-clock]
//!        [--save] [--json FILE]
//! fanout compare --label NAME FILE [--label NAME FILE ...]
//! ```
//!
//! `--save` writes `bench/results/fanout-<harness>.json` and `.md`; `--json FILE` writes the
//! result lines to FILE (used by `just bench-fanout` to put revisions side by side).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use bench::counter::{self, NoMeter, Source, parse_list};
use bench::fanout;
use bench::report::{self, Point};

struct Args {
	harness: String,
	subscribers: Vec<usize>,
	runs: usize,
	cycles: Option<u64>,
	source: Option<Source>,
	save: bool,
	json: Option<PathBuf>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
	let mut parsed = Args {
		harness: "model".to_owned(),
		subscribers: vec![1, 64, 512],
		runs: 3,
		cycles: None,
		source: None,
		save: false,
		json: None,
	};
	while let Some(arg) = args.next() {
		let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
		match arg.as_str() {
			"model" | "session" | "session-ietf" => parsed.harness = arg,
			"--subscribers" => {
				parsed.subscribers = parse_list(&value("--subscribers")?, "subscriber count")?;
			}
			"--runs" => parsed.runs = value("--runs")?.parse().map_err(|e| format!("--runs: {e}"))?,
			"--cycles" => parsed.cycles = Some(value("--cycles")?.parse().map_err(|e| format!("--cycles: {e}"))?),
			"--source" => {
				parsed.source = Some(Source::parse(&value("--source")?)?);
			}
			"--save" => parsed.save = true,
			"--json" => parsed.json = Some(PathBuf::from(value("--json")?)),
			other => return Err(format!("unknown argument {other:?}")),
		}
	}
	Ok(parsed)
}

/// Cycles per run: enough deliveries for a stable figure, few enough for callgrind.
fn default_cycles(source: Source, subscribers: usize) -> u64 {
	let deliveries = if source == Source::Callgrind { 20_000 } else { 200_000 };
	(deliveries / subscribers.max(1) as u64).max(20)
}

fn run_workload(harness: &str, subscribers: usize, cycles: u64, meter: &mut dyn counter::Meter) -> u64 {
	match harness {
		"model" => fanout::model(subscribers, cycles, meter),
		"session" => fanout::session(subscribers, cycles, meter),
		// The newest draft we speak (the data path is the same from draft-14 on).
		"session-ietf" => fanout::session_ietf(moq_net::ietf::Version::Draft16, subscribers, cycles, meter),
		other => panic!("unknown harness {other}"),
	}
}

fn compare(mut args: impl Iterator<Item = String>) -> ExitCode {
	let mut columns = Vec::new();
	while let Some(arg) = args.next() {
		let (Some(label), Some(file)) = (args.next(), args.next()) else {
			eprintln!("usage: fanout compare --label NAME FILE ...");
			return ExitCode::FAILURE;
		};
		if arg != "--label" {
			eprintln!("usage: fanout compare --label NAME FILE ...");
			return ExitCode::FAILURE;
		}
		columns.push((label, report::read_points(std::path::Path::new(&file))));
	}
	print!("{}", report::compare(&columns));
	ExitCode::SUCCESS
}

fn main() -> ExitCode {
	let mut args = std::env::args().skip(1).peekable();
	if args.peek().map(String::as_str) == Some("compare") {
		args.next();
		return compare(args);
	}
	let args = match parse(args) {
		Ok(args) => args,
		Err(e) => {
			eprintln!("fanout: {e}");
			return ExitCode::FAILURE;
		}
	};
	if counter::is_child() {
		// A callgrind child: run the one workload it was given, unmeasured.
		let cycles = args.cycles.unwrap_or(0);
		for &subscribers in &args.subscribers {
			run_workload(&args.harness, subscribers, cycles, &mut NoMeter);
		}
		return ExitCode::SUCCESS;
	}
	let source = args.source.unwrap_or_else(counter::detect);
	eprintln!("source: {}", source.describe());
	let mut points = Vec::new();
	for &subscribers in &args.subscribers {
		let cycles = args.cycles.unwrap_or_else(|| default_cycles(source, subscribers));
		let child = vec![
			args.harness.clone(),
			"--subscribers".to_owned(),
			subscribers.to_string(),
		];
		let mut runs = Vec::new();
		for _ in 0..args.runs.max(1) {
			let mut workload = |cycles: u64, meter: &mut dyn counter::Meter| {
				run_workload(&args.harness, subscribers, cycles, meter);
			};
			match counter::count(source, cycles, &child, &mut workload) {
				Ok(total) => runs.push(total / (cycles as f64 * subscribers as f64)),
				Err(e) => {
					eprintln!("fanout: counting failed: {e}");
					return ExitCode::FAILURE;
				}
			}
		}
		let value = counter::median(&mut runs.clone());
		println!(
			"{:>6} subscribers: {value:>10.1} {} ({})",
			subscribers,
			report::unit(source),
			source.name()
		);
		points.push(Point {
			harness: args.harness.clone(),
			subscribers,
			value,
			runs,
			cycles,
			source,
		});
	}
	let table = report::fanout_table(&points);
	if let Some(path) = &args.json
		&& let Err(e) = std::fs::write(path, table.json_lines(&report::revision()))
	{
		eprintln!("fanout: cannot write {}: {e}", path.display());
		return ExitCode::FAILURE;
	}
	if args.save
		&& let Err(e) = table.save()
	{
		eprintln!("fanout: cannot save results: {e}");
		return ExitCode::FAILURE;
	}
	ExitCode::SUCCESS
}
