//! The docs/moq-lite-05.md §2.8 error codes, carried by RESET_STREAM, STOP_SENDING and CONNECTION_CLOSE.

use crate::coding::DecodeError;

/// An application error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
	/// 0: cancelled (also what a plain stream drop sends); a clean session close.
	Cancel,
	/// 1: a required extension is missing; also the session close after a transport error.
	RequiredExtension,
	/// 2: the group is too old to serve.
	Old,
	/// 3: timed out.
	Timeout,
	/// 4: the transport failed.
	Transport,
	/// 5: a message did not decode.
	Decode,
	/// 6: not authorised.
	Unauthorized,
	/// 9: no common version.
	Version,
	/// 10: an unknown or out-of-place stream type.
	UnexpectedStream,
	/// 11: a length, count or value over its cap.
	BoundsExceeded,
	/// 12: a duplicate (route, subscription).
	Duplicate,
	/// 13: unknown broadcast or track.
	NotFound,
	/// 14: a stream ended inside a frame.
	WrongSize,
	/// 15: the peer broke the protocol.
	ProtocolViolation,
	/// 16: an unknown or out-of-place message.
	UnexpectedMessage,
	/// 17: not supported.
	Unsupported,
	/// 18: a value could not be encoded.
	Encode,
	/// 19: too many SETUP parameters.
	TooManyParameters,
	/// 20: the Role does not allow this.
	InvalidRole,
	/// 21: an unknown ALPN.
	UnknownAlpn,
	/// 24: dropped.
	Dropped,
	/// 25: closed.
	Closed,
	/// 26: the reader fell too far behind.
	Lagged,
	/// 27: a frame over the size cap.
	FrameTooLarge,
	/// 29: timestamps do not agree.
	TimestampMismatch,
	/// 30: no route to the broadcast.
	Unroutable,
	/// 31: evicted from the cache.
	Evicted,
	/// 64 + n: an application's own code n.
	App(u64),
	/// A code below 64 that the spec does not name (7, 8, 22, 23, 28, 32..=63), kept as is.
	Unknown(u64),
}

impl ErrorCode {
	/// The wire code. `App(n)` saturates rather than wraps for `n` near `u64::MAX`.
	pub fn code(&self) -> u64 {
		match self {
			Self::Cancel => 0,
			Self::RequiredExtension => 1,
			Self::Old => 2,
			Self::Timeout => 3,
			Self::Transport => 4,
			Self::Decode => 5,
			Self::Unauthorized => 6,
			Self::Version => 9,
			Self::UnexpectedStream => 10,
			Self::BoundsExceeded => 11,
			Self::Duplicate => 12,
			Self::NotFound => 13,
			Self::WrongSize => 14,
			Self::ProtocolViolation => 15,
			Self::UnexpectedMessage => 16,
			Self::Unsupported => 17,
			Self::Encode => 18,
			Self::TooManyParameters => 19,
			Self::InvalidRole => 20,
			Self::UnknownAlpn => 21,
			Self::Dropped => 24,
			Self::Closed => 25,
			Self::Lagged => 26,
			Self::FrameTooLarge => 27,
			Self::TimestampMismatch => 29,
			Self::Unroutable => 30,
			Self::Evicted => 31,
			Self::App(n) => n.saturating_add(64),
			Self::Unknown(code) => *code,
		}
	}

	/// The error for wire code `code`; every code maps to something, so `from_code(c).code() == c`.
	pub fn from_code(code: u64) -> Self {
		match code {
			0 => Self::Cancel,
			1 => Self::RequiredExtension,
			2 => Self::Old,
			3 => Self::Timeout,
			4 => Self::Transport,
			5 => Self::Decode,
			6 => Self::Unauthorized,
			9 => Self::Version,
			10 => Self::UnexpectedStream,
			11 => Self::BoundsExceeded,
			12 => Self::Duplicate,
			13 => Self::NotFound,
			14 => Self::WrongSize,
			15 => Self::ProtocolViolation,
			16 => Self::UnexpectedMessage,
			17 => Self::Unsupported,
			18 => Self::Encode,
			19 => Self::TooManyParameters,
			20 => Self::InvalidRole,
			21 => Self::UnknownAlpn,
			24 => Self::Dropped,
			25 => Self::Closed,
			26 => Self::Lagged,
			27 => Self::FrameTooLarge,
			29 => Self::TimestampMismatch,
			30 => Self::Unroutable,
			31 => Self::Evicted,
			64.. => Self::App(code - 64),
			other => Self::Unknown(other),
		}
	}
}

impl From<DecodeError> for ErrorCode {
	fn from(err: DecodeError) -> Self {
		Self::from_code(err.code())
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn every_code_round_trips() {
		for code in 0..200 {
			assert_eq!(ErrorCode::from_code(code).code(), code);
		}
		assert_eq!(ErrorCode::from_code(64), ErrorCode::App(0));
		assert_eq!(ErrorCode::App(5).code(), 69);
		assert_eq!(ErrorCode::from_code(28), ErrorCode::Unknown(28));
	}

	#[test]
	fn decode_errors_map_to_named_codes() {
		assert_eq!(ErrorCode::from(DecodeError::Long), ErrorCode::Decode);
		assert_eq!(ErrorCode::from(DecodeError::BoundsExceeded), ErrorCode::BoundsExceeded);
		assert_eq!(ErrorCode::from(DecodeError::PathTooDeep), ErrorCode::BoundsExceeded);
		assert_eq!(
			ErrorCode::from(DecodeError::TooManyParameters),
			ErrorCode::TooManyParameters
		);
		assert_eq!(
			ErrorCode::from(DecodeError::UnexpectedStream(9)),
			ErrorCode::UnexpectedStream
		);
		assert_eq!(
			ErrorCode::from(DecodeError::UnexpectedMessage(3)),
			ErrorCode::UnexpectedMessage
		);
	}
}
