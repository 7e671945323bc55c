//! Results on disk, and revisions side by side: the one report writer of every harness.
//!
//! A harness fills a [`Table`] and [`Table::save`]s it under `bench/results/`: `NAME.md` for people
//! (a title, the machine, the revision, the date and the source of the numbers, the harness's
//! notes, then the table) and `NAME.json` for tools, one JSON object per row (so it needs no JSON
//! library to read back): `{"table":..,"revision":..,"machine":..,"date":..,"source":..,
//! "unit":..,COLUMN:VALUE,...}`. Results files are only written this way, by the harness that
//! measured them.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::counter::Source;

/// One measured point.
#[derive(Clone, Debug)]
pub struct Point {
	/// The harness name (`model`, `session`).
	pub harness: String,
	/// Subscribers.
	pub subscribers: usize,
	/// The median per delivered group per subscriber.
	pub value: f64,
	/// Every run's value.
	pub runs: Vec<f64>,
	/// Measured cycles per run.
	pub cycles: u64,
	/// Where the number came from.
	pub source: Source,
}

/// A results table.
#[derive(Clone, Debug, Default)]
pub struct Table {
	/// The file's name under `bench/results/` (without extension), and the JSON `table` field.
	pub name: String,
	/// The markdown title.
	pub title: String,
	/// The unit of the numbers (with its source's kind: "instructions/op", "MB/s (wall clock)").
	pub unit: String,
	/// Where the numbers came from ([`Source::describe`], or a harness's own words).
	pub source: String,
	/// Markdown shown between the header and the table: what each row isolates, how to read it.
	pub notes: String,
	/// Column names; numbers are right-aligned.
	pub columns: Vec<String>,
	/// Rows, cell by cell, already formatted.
	pub rows: Vec<Vec<String>>,
	/// Markdown shown after the table: verdicts, findings.
	pub after: String,
}

impl Table {
	/// The markdown file.
	pub fn markdown(&self, revision: &str) -> String {
		let mut out = format!(
			"# {}\n\nWritten by the harness (`bench/`); do not edit by hand.\n\n- revision: `{revision}`\n\
			 - date: {}\n- machine: {}\n- unit: **{}**\n- source: {}\n\n",
			self.title,
			today(),
			machine(),
			self.unit,
			self.source
		);
		if !self.notes.is_empty() {
			out.push_str(self.notes.trim_end());
			out.push_str("\n\n");
		}
		let numeric: Vec<bool> = (0..self.columns.len())
			.map(|i| {
				!self.rows.is_empty()
					&& self
						.rows
						.iter()
						.all(|row| row.get(i).is_some_and(|cell| cell.parse::<f64>().is_ok()))
			})
			.collect();
		let _ = writeln!(out, "| {} |", self.columns.join(" | "));
		let rule: Vec<&str> = numeric.iter().map(|&n| if n { "---:" } else { "---" }).collect();
		let _ = writeln!(out, "|{}|", rule.join("|"));
		for row in &self.rows {
			let _ = writeln!(out, "| {} |", row.join(" | "));
		}
		if !self.after.is_empty() {
			out.push('\n');
			out.push_str(self.after.trim_end());
			out.push('\n');
		}
		out
	}

	/// The JSON file: one object per row.
	pub fn json_lines(&self, revision: &str) -> String {
		let mut out = String::new();
		for row in &self.rows {
			let _ = write!(
				out,
				"{{\"table\":{},\"revision\":{},\"machine\":{},\"source\":{},\"unit\":{}",
				json_string(&self.name),
				json_string(revision),
				json_string(&machine()),
				json_string(&self.source),
				json_string(&self.unit)
			);
			for (column, cell) in self.columns.iter().zip(row) {
				let value = match cell.parse::<f64>() {
					Ok(number) if number.is_finite() => cell.clone(),
					_ => json_string(cell),
				};
				let _ = write!(out, ",{}:{value}", json_string(column));
			}
			out.push_str("}\n");
		}
		out
	}

	/// Writes `bench/results/NAME.md` and `NAME.json`.
	pub fn save(&self) -> std::io::Result<()> {
		let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
		std::fs::create_dir_all(&dir)?;
		let revision = revision();
		std::fs::write(dir.join(format!("{}.md", self.name)), self.markdown(&revision))?;
		std::fs::write(dir.join(format!("{}.json", self.name)), self.json_lines(&revision))
	}
}

/// `text` as a JSON string.
pub fn json_string(text: &str) -> String {
	let mut out = String::with_capacity(text.len() + 2);
	out.push('"');
	for c in text.chars() {
		match c {
			'"' => out.push_str("\\\""),
			'\\' => out.push_str("\\\\"),
			'\n' => out.push_str("\\n"),
			c if u32::from(c) < 0x20 => {
				let _ = write!(out, "\\u{:04x}", u32::from(c));
			}
			c => out.push(c),
		}
	}
	out.push('"');
	out
}

/// The machine a result was measured on: its CPUs and whether a PMU counts instructions.
pub fn machine() -> String {
	let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
	let pmu = match crate::counter::has_pmu() {
		true => "a PMU",
		false => "no PMU",
	};
	format!("{cpus} CPUs, {pmu}")
}

/// The CPU model and the kernel, for harnesses whose figures depend on them (I/O, wall time).
pub fn system() -> String {
	let cpu = std::fs::read_to_string("/proc/cpuinfo")
		.ok()
		.and_then(|s| {
			s.lines()
				.find(|l| l.starts_with("model name"))
				.and_then(|l| l.split(':').nth(1))
				.map(|m| m.trim().to_owned())
		})
		.unwrap_or_else(|| "unknown CPU".into());
	let kernel =
		std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or_else(|_| "?".into(), |s| s.trim().to_owned());
	format!("{cpu}, Linux {kernel}")
}

/// Today's date (UTC, `YYYY-MM-DD`), from `date(1)`, or `unknown`.
pub fn today() -> String {
	Command::new("date")
		.args(["-u", "+%F"])
		.output()
		.ok()
		.filter(|out| out.status.success())
		.map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
		.unwrap_or_else(|| "unknown".to_owned())
}

/// The current git revision (short), or `unknown`; `+dirty` when the tree it was built from has
/// changes beyond the results files.
pub fn revision() -> String {
	let git = |args: &[&str]| {
		Command::new("git")
			.args(args)
			.output()
			.ok()
			.filter(|out| out.status.success())
			.map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
	};
	let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
	let dirty =
		git(&["status", "--porcelain", "--", ".", ":!bench/results", ":!results"]).is_some_and(|s| !s.is_empty());
	match dirty {
		true => format!("{head}+dirty"),
		false => head,
	}
}

/// The unit of a point's value.
pub fn unit(source: Source) -> String {
	format!("{}/group/subscriber", source.unit())
}

/// The fan-out results table of `points` (one harness): its JSON lines are what
/// [`read_points`] reads back.
pub fn fanout_table(points: &[Point]) -> Table {
	let Some(first) = points.first() else {
		return Table::default();
	};
	let mut after = String::new();
	if let (Some(at64), Some(at512)) = (
		points.iter().find(|p| p.subscribers == 64),
		points.iter().find(|p| p.subscribers == 512),
	) {
		after = format!(
			"Growth from 64 to 512 subscribers: {:+.1}% per subscriber.",
			growth(at64.value, at512.value)
		);
	}
	Table {
		name: format!("fanout-{}", first.harness),
		title: format!("Fan-out: {} harness", first.harness),
		unit: unit(first.source),
		source: first.source.describe().into(),
		notes: format!(
			"`value` is the median of {} runs, in {}.",
			first.runs.len(),
			unit(first.source)
		),
		columns: ["subscribers", "value", "runs", "cycles"].map(String::from).to_vec(),
		rows: points
			.iter()
			.map(|p| {
				let runs: Vec<String> = p.runs.iter().map(|v| format!("{v:.1}")).collect();
				vec![
					p.subscribers.to_string(),
					format!("{:.1}", p.value),
					runs.join(", "),
					p.cycles.to_string(),
				]
			})
			.collect(),
		after,
	}
}

/// Percent change from `from` to `to`.
pub fn growth(from: f64, to: f64) -> f64 {
	(to - from) / from * 100.0
}

/// `(subscribers, value, unit)` of each line of a result file.
pub type Rows = Vec<(usize, f64, String)>;

/// Reads a result file's rows.
pub fn read_points(path: &Path) -> std::io::Result<Rows> {
	let text = std::fs::read_to_string(path)?;
	Ok(text
		.lines()
		.filter_map(|line| {
			let subscribers = field(line, "subscribers")?.parse().ok()?;
			let value = field(line, "value")?.parse().ok()?;
			let unit = field(line, "unit")?.trim_matches('"').to_owned();
			Some((subscribers, value, unit))
		})
		.collect())
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
	let start = line.find(&format!("\"{name}\":"))? + name.len() + 3;
	let rest = &line[start..];
	let end = match rest.strip_prefix('"') {
		Some(quoted) => quoted.find('"')? + 2,
		None => rest.find([',', '}'])?,
	};
	Some(&rest[..end])
}

/// A side-by-side table of labelled result files; a missing file shows `n/a`.
pub fn compare(columns: &[(String, std::io::Result<Rows>)]) -> String {
	let mut subscribers: Vec<usize> = columns
		.iter()
		.filter_map(|(_, c)| c.as_ref().ok())
		.flatten()
		.map(|(s, _, _)| *s)
		.collect();
	subscribers.sort_unstable();
	subscribers.dedup();
	let unit = columns
		.iter()
		.filter_map(|(_, c)| c.as_ref().ok())
		.flatten()
		.map(|(_, _, unit)| unit.clone())
		.next()
		.unwrap_or_else(|| "?".to_owned());
	let mut out = format!("unit: {unit}\n\n| subscribers |");
	for (label, _) in columns {
		let _ = write!(out, " {label} |");
	}
	out.push_str("\n|---:|");
	out.push_str(&"---:|".repeat(columns.len()));
	out.push('\n');
	for s in subscribers {
		let _ = write!(out, "| {s} |");
		let base = columns[0]
			.1
			.as_ref()
			.ok()
			.and_then(|c| c.iter().find(|(n, _, _)| *n == s))
			.map(|(_, v, _)| *v);
		for (i, (_, column)) in columns.iter().enumerate() {
			match column.as_ref().ok().and_then(|c| c.iter().find(|(n, _, _)| *n == s)) {
				Some((_, value, _)) if i > 0 && base.is_some() => {
					let _ = write!(out, " {value:.1} ({:+.1}%) |", growth(*value, base.unwrap_or(*value)));
				}
				Some((_, value, _)) => {
					let _ = write!(out, " {value:.1} |");
				}
				None => out.push_str(" n/a |"),
			}
		}
		out.push('\n');
	}
	out.push_str("\n(percentages: the first column relative to each revision)\n");
	out
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn result_lines_read_back() {
		let points = vec![Point {
			harness: "model".into(),
			subscribers: 64,
			value: 812.5,
			runs: vec![812.5, 813.0],
			cycles: 10,
			source: Source::Callgrind,
		}];
		let lines = fanout_table(&points).json_lines("abc");
		let dir = std::env::temp_dir().join(format!("bench-report-{}", std::process::id()));
		std::fs::write(&dir, &lines).unwrap();
		let read = read_points(&dir).unwrap();
		std::fs::remove_file(&dir).unwrap();
		assert_eq!(read, vec![(64, 812.5, "instructions/group/subscriber".to_owned())]);
		let table = compare(&[("current".into(), Ok(read.clone())), ("old".into(), Ok(read))]);
		assert!(table.contains("| 64 | 812.5 | 812.5 (+0.0%) |"), "{table}");
	}
}
