//! Results on disk, and revisions side by side.
//!
//! A result file holds one JSON object per line (so it needs no JSON library to read back):
//! `{"harness":..,"revision":..,"source":..,"unit":..,"subscribers":S,"value":V,"runs":[..],"cycles":N}`.

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

/// The current git revision (short), or `unknown`.
pub fn revision() -> String {
	Command::new("git")
		.args(["rev-parse", "--short", "HEAD"])
		.output()
		.ok()
		.filter(|out| out.status.success())
		.map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
		.unwrap_or_else(|| "unknown".to_owned())
}

/// The unit of a point's value.
pub fn unit(source: Source) -> String {
	format!("{}/group/subscriber", source.unit())
}

/// Renders points as result-file lines.
pub fn to_json_lines(points: &[Point], revision: &str) -> String {
	let mut out = String::new();
	for p in points {
		let runs: Vec<String> = p.runs.iter().map(|v| format!("{v:.1}")).collect();
		let _ = writeln!(
			out,
			"{{\"harness\":\"{}\",\"revision\":\"{}\",\"source\":\"{}\",\"unit\":\"{}\",\"subscribers\":{},\"value\":{:.1},\"runs\":[{}],\"cycles\":{}}}",
			p.harness,
			revision,
			p.source.name(),
			unit(p.source),
			p.subscribers,
			p.value,
			runs.join(","),
			p.cycles
		);
	}
	out
}

/// Renders points as a markdown table.
pub fn to_markdown(points: &[Point], revision: &str) -> String {
	let Some(first) = points.first() else {
		return String::new();
	};
	let mut out = format!(
		"# Fan-out: {} harness\n\nRevision `{revision}`. Unit: **{}**. Source: {}.\nMedian of {} runs.\n\n| subscribers | {} | runs | cycles |\n|---:|---:|---|---:|\n",
		first.harness,
		unit(first.source),
		first.source.describe(),
		first.runs.len(),
		unit(first.source),
	);
	for p in points {
		let runs: Vec<String> = p.runs.iter().map(|v| format!("{v:.1}")).collect();
		let _ = writeln!(
			out,
			"| {} | {:.1} | {} | {} |",
			p.subscribers,
			p.value,
			runs.join(", "),
			p.cycles
		);
	}
	if let (Some(at64), Some(at512)) = (
		points.iter().find(|p| p.subscribers == 64),
		points.iter().find(|p| p.subscribers == 512),
	) {
		let _ = writeln!(
			out,
			"\nGrowth from 64 to 512 subscribers: {:+.1}% per subscriber.",
			growth(at64.value, at512.value)
		);
	}
	out
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
		let lines = to_json_lines(&points, "abc");
		let dir = std::env::temp_dir().join(format!("bench-report-{}", std::process::id()));
		std::fs::write(&dir, &lines).unwrap();
		let read = read_points(&dir).unwrap();
		std::fs::remove_file(&dir).unwrap();
		assert_eq!(read, vec![(64, 812.5, "instructions/group/subscriber".to_owned())]);
		let table = compare(&[("current".into(), Ok(read.clone())), ("old".into(), Ok(read))]);
		assert!(table.contains("| 64 | 812.5 | 812.5 (+0.0%) |"), "{table}");
	}
}
