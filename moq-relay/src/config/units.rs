//! Sizes and durations as flags and the file spell them: `256MiB`, `1.5KB`, `500ms`, `1m`.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A byte size from a flag (`256MiB`) or the file (a string, or a number of bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub u64);

impl FromStr for Size {
	type Err = String;
	fn from_str(text: &str) -> Result<Self, String> {
		parse_size(text).map(Self)
	}
}

impl Serialize for Size {
	fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
		serializer.serialize_u64(self.0)
	}
}

impl<'de> Deserialize<'de> for Size {
	fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
		#[derive(Deserialize)]
		#[serde(untagged)]
		enum Value {
			Bytes(u64),
			Text(String),
		}
		match Value::deserialize(deserializer)? {
			Value::Bytes(bytes) => Ok(Self(bytes)),
			Value::Text(text) => text.parse().map_err(serde::de::Error::custom),
		}
	}
}

/// A duration from a flag (`500ms`) or the file (a string, or a number of seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span(pub Duration);

impl FromStr for Span {
	type Err = String;
	fn from_str(text: &str) -> Result<Self, String> {
		parse_duration(text).map(Self)
	}
}

impl Serialize for Span {
	fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
		serializer.serialize_f64(self.0.as_secs_f64())
	}
}

impl<'de> Deserialize<'de> for Span {
	fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
		#[derive(Deserialize)]
		#[serde(untagged)]
		enum Value {
			Seconds(f64),
			Text(String),
		}
		match Value::deserialize(deserializer)? {
			Value::Seconds(secs) => Duration::try_from_secs_f64(secs)
				.map(Self)
				.map_err(|_| serde::de::Error::custom(format!("{secs} is not a duration"))),
			Value::Text(text) => text.parse().map_err(serde::de::Error::custom),
		}
	}
}

/// Splits `"12.5ms"` into `(12.5, "ms")`.
fn split_number(text: &str) -> Option<(f64, &str)> {
	let text = text.trim();
	let end = text
		.find(|c: char| !(c.is_ascii_digit() || c == '.'))
		.unwrap_or(text.len());
	let number: f64 = text[..end].parse().ok()?;
	Some((number, text[end..].trim()))
}

/// A duration: a number and an optional unit (`ms`, `s`, `m`, `h`; none is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
	let invalid = || format!("{text:?} is not a duration (such as 5s, 500ms, 1m)");
	let (number, unit) = split_number(text).ok_or_else(invalid)?;
	let scale = match unit {
		"ms" => 0.001,
		"" | "s" => 1.0,
		"m" | "min" => 60.0,
		"h" => 3600.0,
		_ => return Err(invalid()),
	};
	Duration::try_from_secs_f64(number * scale).map_err(|_| invalid())
}

/// A byte size: a number and an optional unit (`B`, `KB`/`MB`/`GB` in powers of 1000,
/// `KiB`/`MiB`/`GiB` in powers of 1024; none is bytes).
pub fn parse_size(text: &str) -> Result<u64, String> {
	let invalid = || format!("{text:?} is not a size (such as 1048576, 256MiB, 1GiB, 500MB)");
	let (number, unit) = split_number(text).ok_or_else(invalid)?;
	let scale: u64 = match unit {
		"" | "B" => 1,
		"KB" => 1000,
		"MB" => 1000 * 1000,
		"GB" => 1000 * 1000 * 1000,
		"KiB" => 1 << 10,
		"MiB" => 1 << 20,
		"GiB" => 1 << 30,
		_ => return Err(invalid()),
	};
	let bytes = number * scale as f64;
	// u64::MAX as f64 rounds up to 2^64, which does not fit: hence `<`.
	if !(0.0..u64::MAX as f64).contains(&bytes) || bytes.fract() != 0.0 {
		return Err(invalid());
	}
	Ok(bytes as u64)
}
