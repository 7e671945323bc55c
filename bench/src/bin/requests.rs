//! `requests`: what a viewer's request costs the relay's sessions, in instructions per request.
//!
//! ```text
//! cargo run --release -p bench --bin requests -- [--runs 3] [--cycles N] [--source perf|callgrind|task-clock] [--save]
//! ```
//!
//! Two rows ([`bench::fanout::requests`] says what each cycle does): `known`, a SUBSCRIBE for a
//! track the relay has cached, answered with its latest group, then ended by the viewer; and
//! `unknown`, a SUBSCRIBE for a new name of a broadcast the relay mirrors, which the relay asks
//! its publisher's session for and refuses when upstream does. The second is what a peer asking for
//! names nobody has costs the relay, which is what `--max-request-rate` and
//! `--max-address-request-rate` bound. `--save` writes `bench/results/requests.{md,json}`.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use bench::counter::{self, NoMeter, Source};
use bench::fanout;
use bench::report::Table;

struct Args {
	kinds: Vec<String>,
	runs: usize,
	cycles: Option<u64>,
	source: Option<Source>,
	save: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
	let mut parsed = Args {
		kinds: vec!["known".to_owned(), "unknown".to_owned()],
		runs: 3,
		cycles: None,
		source: None,
		save: false,
	};
	while let Some(arg) = args.next() {
		let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
		match arg.as_str() {
			"--kind" => parsed.kinds = vec![value("--kind")?],
			"--runs" => parsed.runs = value("--runs")?.parse().map_err(|e| format!("--runs: {e}"))?,
			"--cycles" => parsed.cycles = Some(value("--cycles")?.parse().map_err(|e| format!("--cycles: {e}"))?),
			"--source" => parsed.source = Some(Source::parse(&value("--source")?)?),
			"--save" => parsed.save = true,
			other => return Err(format!("unknown argument {other:?}")),
		}
	}
	Ok(parsed)
}

fn workload(kind: &str, cycles: u64, meter: &mut dyn counter::Meter) -> u64 {
	fanout::requests(kind == "known", cycles, meter)
}

fn main() -> ExitCode {
	let args = match parse(std::env::args().skip(1)) {
		Ok(args) => args,
		Err(e) => {
			eprintln!("requests: {e}");
			return ExitCode::FAILURE;
		}
	};
	if counter::is_child() {
		// A callgrind child: run the one workload it was given, unmeasured.
		for kind in &args.kinds {
			workload(kind, args.cycles.unwrap_or(0), &mut NoMeter);
		}
		return ExitCode::SUCCESS;
	}
	let source = args.source.unwrap_or_else(counter::detect);
	eprintln!("source: {}", source.describe());
	let cycles = args
		.cycles
		.unwrap_or(if source == Source::Callgrind { 2_000 } else { 20_000 });
	let mut rows = Vec::new();
	for kind in &args.kinds {
		let child = vec!["--kind".to_owned(), kind.clone()];
		let mut runs = Vec::new();
		for _ in 0..args.runs.max(1) {
			let mut run = |cycles: u64, meter: &mut dyn counter::Meter| {
				workload(kind, cycles, meter);
			};
			match counter::count(source, cycles, &child, &mut run) {
				Ok(total) => runs.push(total / cycles as f64),
				Err(e) => {
					eprintln!("requests: counting failed: {e}");
					return ExitCode::FAILURE;
				}
			}
		}
		let value = counter::median(&mut runs.clone());
		println!("{kind:>8}: {value:>10.1} {} per request", source.unit());
		let runs: Vec<String> = runs.iter().map(|v| format!("{v:.1}")).collect();
		rows.push(vec![
			kind.clone(),
			format!("{value:.1}"),
			runs.join(" / "),
			cycles.to_string(),
		]);
	}
	if args.save {
		let table = Table {
			name: "requests".into(),
			title: "A viewer's request: what it costs the relay's sessions".into(),
			unit: format!("{} per request", source.unit()),
			source: source.describe().into(),
			notes: "One pinned kio worker, the in-memory transport: a publisher session into the relay's \
			        origin (one broadcast, one track with one cached 1,200-byte group), and a raw \
			        viewer that sends one SUBSCRIBE per cycle on a stream of its own \
			        (`bench/src/fanout.rs`, `requests`). `known`: the cached track; the relay answers \
			        with SUBSCRIBE_OK and the group, the viewer reads it and ends the subscription. \
			        `unknown`: a new name each cycle; the relay asks the publisher's session upstream, \
			        is refused (NotFound) and refuses the viewer. Counts the relay's two sessions, the \
			        publisher session's answer, the viewer's few writes and reads, and the executor's \
			        share. Median of the runs."
				.into(),
			columns: ["request", "value", "runs", "cycles"].map(String::from).to_vec(),
			rows,
			after: String::new(),
		};
		if let Err(e) = table.save() {
			eprintln!("requests: saving failed: {e}");
			return ExitCode::FAILURE;
		}
	}
	ExitCode::SUCCESS
}
