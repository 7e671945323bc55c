//! Counting a workload's cost with the best source the host offers.
//!
//! A workload is a function of a cycle count that calls [`Meter::start`] after its set-up and
//! [`Meter::stop`] after its measured cycles. In-process sources (perf counters) read the counter
//! between the two calls. Callgrind cannot be started and stopped from safe code without a client
//! request, so under callgrind the harness runs the whole process twice, with N cycles and with
//! zero, and divides the difference by N: set-up and tear-down cancel out exactly.

use std::io;
use std::path::PathBuf;
use std::process::Command;

use perf_event::events::{Hardware, Software};

/// Where a number came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
	/// `perf_event_open`, hardware instructions, user space only.
	PerfInstructions,
	/// `valgrind --tool=callgrind`, N cycles minus zero cycles: exact user-space instructions.
	Callgrind,
	/// `perf_event_open`, software task clock: CPU time of this thread.
	TaskClock,
}

impl Source {
	/// The unit of a per-operation number from this source.
	pub fn unit(self) -> &'static str {
		match self {
			Self::PerfInstructions | Self::Callgrind => "instructions",
			Self::TaskClock => "ns (task-clock)",
		}
	}

	/// How the number was taken, for reports.
	pub fn describe(self) -> &'static str {
		match self {
			Self::PerfInstructions => "perf_event_open (PERF_COUNT_HW_INSTRUCTIONS, user space)",
			Self::Callgrind => "callgrind (exact user-space instructions, N cycles minus 0 cycles)",
			Self::TaskClock => "perf_event_open (PERF_COUNT_SW_TASK_CLOCK)",
		}
	}

	/// A short name for tables and JSON.
	pub fn name(self) -> &'static str {
		match self {
			Self::PerfInstructions => "perf",
			Self::Callgrind => "callgrind",
			Self::TaskClock => "task-clock",
		}
	}

	/// The source called `name` (as [`Self::name`] writes it), for a `--source` flag.
	pub fn parse(name: &str) -> Result<Self, String> {
		[Self::PerfInstructions, Self::Callgrind, Self::TaskClock]
			.into_iter()
			.find(|source| source.name() == name)
			.ok_or_else(|| format!("unknown source {name:?}"))
	}
}

/// A comma-separated list of numbers (`--sizes 16,256`); `what` names an item in errors.
pub fn parse_list<T: std::str::FromStr>(text: &str, what: &str) -> Result<Vec<T>, String>
where
	T::Err: std::fmt::Display,
{
	text.split(',')
		.map(|s| s.trim().parse().map_err(|e| format!("bad {what} {s:?}: {e}")))
		.collect()
}

/// Marks the measured region of a workload.
pub trait Meter {
	/// Called after set-up.
	fn start(&mut self);
	/// Called after the measured cycles.
	fn stop(&mut self);
}

/// A meter that measures nothing (callgrind children and dry runs).
pub struct NoMeter;

impl Meter for NoMeter {
	fn start(&mut self) {}
	fn stop(&mut self) {}
}

struct PerfMeter {
	counter: perf_event::Counter,
	result: io::Result<u64>,
}

impl Meter for PerfMeter {
	fn start(&mut self) {
		self.result = self.counter.reset().and_then(|()| self.counter.enable()).map(|()| 0);
	}

	fn stop(&mut self) {
		let disabled = self.counter.disable();
		self.result = disabled.and_then(|()| self.counter.read());
	}
}

fn perf_counter(instructions: bool) -> io::Result<perf_event::Counter> {
	let mut builder = if instructions {
		perf_event::Builder::new().kind(Hardware::INSTRUCTIONS)
	} else {
		perf_event::Builder::new().kind(Software::TASK_CLOCK)
	};
	builder.exclude_kernel(true);
	builder.exclude_hv(true);
	builder.build()
}

/// The environment variable that marks a callgrind child run.
pub const CHILD_ENV: &str = "BENCH_CALLGRIND_CHILD";

/// Whether this process is a callgrind child that should just run its workload.
pub fn is_child() -> bool {
	std::env::var_os(CHILD_ENV).is_some()
}

/// Whether `perf_event_open` counts instructions here.
pub fn has_pmu() -> bool {
	perf_counter(true).is_ok()
}

/// Picks the source: perf instructions, else callgrind, else task clock. Says on stderr why it
/// fell back.
pub fn detect() -> Source {
	match perf_counter(true) {
		Ok(_) => return Source::PerfInstructions,
		Err(e) => eprintln!("perf counter unavailable ({e}): this host has no usable PMU"),
	}
	if valgrind_available() {
		eprintln!("falling back to callgrind: exact user-space instruction counts (slow)");
		return Source::Callgrind;
	}
	eprintln!("valgrind not found either: falling back to task-clock time (noisy on shared machines)");
	Source::TaskClock
}

/// Whether `valgrind` is on the `PATH`.
pub fn valgrind_available() -> bool {
	Command::new("valgrind")
		.arg("--version")
		.output()
		.is_ok_and(|out| out.status.success())
}

/// Counts one run of `workload` with `cycles` measured cycles; `child_args` re-create the same
/// workload in a child process (for callgrind). Returns the count for the `cycles` (in the
/// source's unit: instructions or nanoseconds).
pub fn count(
	source: Source,
	cycles: u64,
	child_args: &[String],
	workload: &mut dyn FnMut(u64, &mut dyn Meter),
) -> io::Result<f64> {
	match source {
		Source::PerfInstructions | Source::TaskClock => {
			let counter = perf_counter(source == Source::PerfInstructions)?;
			let mut meter = PerfMeter { counter, result: Ok(0) };
			workload(cycles, &mut meter);
			meter.result.map(|count| count as f64)
		}
		Source::Callgrind => {
			let with = callgrind_total(child_args, cycles)?;
			let without = callgrind_total(child_args, 0)?;
			Ok(with.saturating_sub(without) as f64)
		}
	}
}

/// Runs this executable under callgrind with `child_args` and `--cycles cycles`, and returns the
/// total instructions it executed.
fn callgrind_total(child_args: &[String], cycles: u64) -> io::Result<u64> {
	let mut args = child_args.to_vec();
	args.extend(["--cycles".to_owned(), cycles.to_string()]);
	callgrind_run(&args).map(|(total, _)| total)
}

/// Runs this executable under callgrind with `args` (and [`CHILD_ENV`] set, so it knows to just
/// run its workload); returns the user-space instructions it executed and what it printed on
/// stdout (a harness's child reports what it did there, such as how many operations it ran).
pub fn callgrind_run(args: &[String]) -> io::Result<(u64, String)> {
	callgrind_run_with(&[], args)
}

/// [`callgrind_run`] with more options for valgrind (`--toggle-collect=FN`, say).
pub fn callgrind_run_with(valgrind: &[String], args: &[String]) -> io::Result<(u64, String)> {
	let exe = std::env::current_exe()?;
	let out = temp_path(args.len() as u64);
	let output = Command::new("valgrind")
		.arg("--tool=callgrind")
		.arg(format!("--callgrind-out-file={}", out.display()))
		.arg("--quiet")
		.args(valgrind)
		.arg(&exe)
		.args(args)
		.env(CHILD_ENV, "1")
		.output()?;
	if !output.status.success() {
		let stderr = String::from_utf8_lossy(&output.stderr);
		return Err(io::Error::other(format!(
			"callgrind run failed: {}\n{stderr}",
			output.status
		)));
	}
	let text = std::fs::read_to_string(&out)?;
	let _ = std::fs::remove_file(&out);
	let total = parse_callgrind_total(&text).ok_or_else(|| io::Error::other("no totals in the callgrind output"))?;
	Ok((total, String::from_utf8_lossy(&output.stdout).into_owned()))
}

/// A callgrind output file of this process's, told apart from its others by `tag`.
fn temp_path(tag: u64) -> PathBuf {
	std::env::temp_dir().join(format!("bench-callgrind-{}-{tag}.out", std::process::id()))
}

/// The `totals:` (or `summary:`) line of a callgrind output file.
pub fn parse_callgrind_total(text: &str) -> Option<u64> {
	text.lines()
		.find_map(|line| line.strip_prefix("totals:").or_else(|| line.strip_prefix("summary:")))
		.and_then(|rest| rest.split_whitespace().next())
		.and_then(|count| count.parse().ok())
}

/// The median of `values` (which must not be empty).
pub fn median(values: &mut [f64]) -> f64 {
	values.sort_by(f64::total_cmp);
	values[values.len() / 2]
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn callgrind_totals_are_parsed() {
		let text = "events: Ir\nsummary: 12345\nfl=x\n1 2\ntotals: 12345\n";
		assert_eq!(parse_callgrind_total(text), Some(12345));
		assert_eq!(parse_callgrind_total("events: Ir\n"), None);
	}

	#[test]
	fn the_median_is_the_middle_value() {
		assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
	}
}
