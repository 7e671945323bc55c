//! The model's error type.

use std::fmt;

/// Why a model operation failed, or why a stream of the model ended early.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
	/// The producer went away without finishing.
	Dropped,
	/// Cancelled by the application.
	Cancelled,
	/// A group was expired by age (`latency_max`) before it was read.
	Old,
	/// A group was evicted by the cache pool before it was read.
	Evicted,
	/// A reader fell behind a group's byte cap: the frames it wanted were dropped.
	Lagged,
	/// A live group with this sequence already exists.
	Duplicate,
	/// No such broadcast or track, and no handler to create it.
	NotFound,
	/// Outside the scope this handle is allowed.
	Unauthorized,
	/// A frame larger than the group's byte cap.
	TooLarge,
	/// A sequence at or beyond the track's final sequence, or a final below what exists.
	Finished,
	/// A limit was reached: a budget is spent, or a path joined under a root is longer or deeper
	/// than a path may be.
	BoundsExceeded,
	/// Aborted with an application code (a wire reset code, for example).
	Aborted(u64),
	/// The path is published by another owner ([`OriginProducer::owned_by`](super::OriginProducer::owned_by)).
	Taken,
}

impl fmt::Display for Error {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Dropped => f.write_str("producer dropped"),
			Self::Cancelled => f.write_str("cancelled"),
			Self::Old => f.write_str("group expired"),
			Self::Evicted => f.write_str("group evicted"),
			Self::Lagged => f.write_str("reader lagged behind the group's byte cap"),
			Self::Duplicate => f.write_str("duplicate"),
			Self::NotFound => f.write_str("not found"),
			Self::Unauthorized => f.write_str("unauthorized"),
			Self::TooLarge => f.write_str("frame too large"),
			Self::Finished => f.write_str("track finished"),
			Self::BoundsExceeded => f.write_str("a limit was reached"),
			Self::Aborted(code) => write!(f, "aborted with code {code}"),
			Self::Taken => f.write_str("published by another owner"),
		}
	}
}

impl std::error::Error for Error {}
