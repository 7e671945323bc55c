//! Frames: timestamped payloads.

use bytes::Bytes;

/// A media time: `value` ticks of `1 / timescale` seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
	/// Ticks.
	pub value: u64,
	/// Ticks per second.
	pub timescale: u64,
}

impl Timestamp {
	/// `value` ticks at `timescale` ticks per second.
	pub const fn new(value: u64, timescale: u64) -> Self {
		Self { value, timescale }
	}

	/// The same instant in another timescale, rounded down; `None` if it does not fit.
	pub fn rescale(self, timescale: u64) -> Option<Self> {
		if self.timescale == 0 {
			return None;
		}
		let value = u128::from(self.value) * u128::from(timescale) / u128::from(self.timescale);
		Some(Self {
			value: u64::try_from(value).ok()?,
			timescale,
		})
	}
}

/// One frame of a group: a timestamp and its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
	/// When the frame is to be presented.
	pub timestamp: Timestamp,
	/// The payload; cloning it shares the bytes.
	pub payload: Bytes,
}

impl Frame {
	/// A frame at `timestamp` carrying `payload`.
	pub fn new(timestamp: Timestamp, payload: impl Into<Bytes>) -> Self {
		Self {
			timestamp,
			payload: payload.into(),
		}
	}
}
