//! A writer for the Prometheus text exposition format (version 0.0.4), which `/metrics` serves.
//!
//! ```
//! use moq_relay::metrics::prom::{Kind, Prom};
//!
//! let mut prom = Prom::new();
//! prom.counter("moq_relay_connections_total", "Connections accepted.", 12u64);
//! prom.family("moq_relay_loop_turns_total", "Event loop turns, per worker.", Kind::Counter)
//!     .sample(&[("worker", "0")], 1000u64)
//!     .sample(&[("worker", "1")], 998u64);
//! let text = prom.finish();
//! assert!(text.contains("moq_relay_loop_turns_total{worker=\"1\"} 998\n"));
//! ```
//!
//! Every sample of a family follows its one `# HELP` and `# TYPE` line, as the format requires,
//! which is why labelled samples are written through a [`Family`]. Names are the caller's
//! responsibility (`[a-zA-Z_:][a-zA-Z0-9_:]*`, counters ending in `_total`); they are checked in
//! debug builds only, since they are constants of the program and never come from a peer. Label
//! values and help text may be anything: they are escaped.

use std::fmt::Write as _;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
	/// Only goes up (resets when the process restarts).
	Counter,
	/// Goes up and down.
	Gauge,
}

/// A sample's value.
pub trait Value {
	/// Appends the value as the format spells it.
	fn write_to(&self, out: &mut String);
}

macro_rules! integer_value {
	($($t:ty),*) => {$(
		impl Value for $t {
			fn write_to(&self, out: &mut String) {
				let _ = write!(out, "{self}");
			}
		}
	)*};
}

integer_value!(u8, u16, u32, u64, usize, i32, i64);

impl Value for f64 {
	fn write_to(&self, out: &mut String) {
		if self.is_nan() {
			out.push_str("NaN");
		} else if self.is_infinite() {
			out.push_str(if *self > 0.0 { "+Inf" } else { "-Inf" });
		} else {
			let _ = write!(out, "{self}");
		}
	}
}

/// The exposition text, built one family at a time.
#[derive(Debug, Default)]
pub struct Prom {
	out: String,
}

impl Prom {
	/// An empty exposition.
	pub fn new() -> Self {
		Self::default()
	}

	/// A counter without labels.
	pub fn counter(&mut self, name: &str, help: &str, value: impl Value) -> &mut Self {
		self.family(name, help, Kind::Counter).sample(&[], value);
		self
	}

	/// A gauge without labels.
	pub fn gauge(&mut self, name: &str, help: &str, value: impl Value) -> &mut Self {
		self.family(name, help, Kind::Gauge).sample(&[], value);
		self
	}

	/// Starts a family; write its samples through the returned [`Family`].
	pub fn family<'a>(&'a mut self, name: &'a str, help: &str, kind: Kind) -> Family<'a> {
		debug_assert!(valid_name(name, true), "invalid metric name {name:?}");
		let kind = match kind {
			Kind::Counter => "counter",
			Kind::Gauge => "gauge",
		};
		let out = &mut self.out;
		let _ = write!(out, "# HELP {name} ");
		for c in help.chars() {
			match c {
				'\\' => out.push_str("\\\\"),
				'\n' => out.push_str("\\n"),
				c => out.push(c),
			}
		}
		let _ = writeln!(out, "\n# TYPE {name} {kind}");
		Family { out, name }
	}

	/// The text.
	pub fn finish(self) -> String {
		self.out
	}
}

/// The samples of one family.
#[derive(Debug)]
pub struct Family<'a> {
	out: &'a mut String,
	name: &'a str,
}

impl Family<'_> {
	/// Writes one sample with `labels` (name, value pairs).
	pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Value) -> &mut Self {
		let out = &mut *self.out;
		out.push_str(self.name);
		if !labels.is_empty() {
			out.push('{');
			for (i, (name, value)) in labels.iter().enumerate() {
				debug_assert!(valid_name(name, false), "invalid label name {name:?}");
				if i > 0 {
					out.push(',');
				}
				out.push_str(name);
				out.push_str("=\"");
				for c in value.chars() {
					match c {
						'\\' => out.push_str("\\\\"),
						'"' => out.push_str("\\\""),
						'\n' => out.push_str("\\n"),
						c => out.push(c),
					}
				}
				out.push('"');
			}
			out.push('}');
		}
		out.push(' ');
		value.write_to(out);
		out.push('\n');
		self
	}
}

/// Metric names may contain colons; label names may not.
fn valid_name(name: &str, colons: bool) -> bool {
	let ok = |c: char, first: bool| {
		c == '_' || c.is_ascii_alphabetic() || (!first && c.is_ascii_digit()) || (colons && c == ':')
	};
	let mut chars = name.chars();
	chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn families_samples_and_escapes() {
		let mut prom = Prom::new();
		prom.counter("a_total", "Things.\nMore \\ things.", 3u64)
			.gauge("b", "A gauge.", -2i64);
		prom.family("c:seconds", "Labelled.", Kind::Gauge)
			.sample(&[("worker", "0"), ("path", "a\"b\\c\nd")], 0.25)
			.sample(&[("worker", "1")], f64::NAN)
			.sample(&[("worker", "2")], f64::INFINITY)
			.sample(&[("worker", "3")], f64::NEG_INFINITY);
		assert_eq!(
			prom.finish(),
			"# HELP a_total Things.\\nMore \\\\ things.\n# TYPE a_total counter\na_total 3\n\
			 # HELP b A gauge.\n# TYPE b gauge\nb -2\n\
			 # HELP c:seconds Labelled.\n# TYPE c:seconds gauge\n\
			 c:seconds{worker=\"0\",path=\"a\\\"b\\\\c\\nd\"} 0.25\n\
			 c:seconds{worker=\"1\"} NaN\nc:seconds{worker=\"2\"} +Inf\nc:seconds{worker=\"3\"} -Inf\n"
		);
	}

	#[test]
	fn names_are_checked() {
		assert!(valid_name("moq_relay:bytes_total", true));
		assert!(!valid_name("moq_relay:bytes_total", false));
		assert!(!valid_name("0abc", true));
		assert!(!valid_name("", true));
		assert!(!valid_name("a-b", true));
	}
}
