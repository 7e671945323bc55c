//! Stream types: the varint that opens every stream (docs/moq-lite-05.md §2.4).
//!
//! An unknown type resets that stream with UnexpectedStream (10); it is never fatal to the
//! session.

use crate::coding::{Decode, DecodeError, Encode, EncodeError, decode_varint, encode_varint};

/// The type of a bidirectional stream, sent by its opener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControlType {
	/// 0x0: the legacy SETUP stream of lite-01/02 (not used by lite-05).
	Session,
	/// 0x1: ANNOUNCE_REQUEST, answered by ANNOUNCE_OK and ANNOUNCEs.
	Announce,
	/// 0x2: SUBSCRIBE, answered by subscribe responses; group data follows on uni streams.
	Subscribe,
	/// 0x3: FETCH, answered by bare frames.
	Fetch,
	/// 0x4: PROBE, answered by bitrate/RTT reports.
	Probe,
	/// 0x5: GOAWAY.
	Goaway,
	/// 0x6: TRACK, answered by TRACK_INFO.
	Track,
}

impl ControlType {
	/// The type for wire value `value`, or [`DecodeError::UnexpectedStream`].
	pub fn from_u64(value: u64) -> Result<Self, DecodeError> {
		Ok(match value {
			0 => Self::Session,
			1 => Self::Announce,
			2 => Self::Subscribe,
			3 => Self::Fetch,
			4 => Self::Probe,
			5 => Self::Goaway,
			6 => Self::Track,
			other => return Err(DecodeError::UnexpectedStream(other)),
		})
	}
}

impl From<ControlType> for u64 {
	fn from(kind: ControlType) -> Self {
		match kind {
			ControlType::Session => 0,
			ControlType::Announce => 1,
			ControlType::Subscribe => 2,
			ControlType::Fetch => 3,
			ControlType::Probe => 4,
			ControlType::Goaway => 5,
			ControlType::Track => 6,
		}
	}
}

impl Decode for ControlType {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Self::from_u64(decode_varint(buf)?)
	}
}

impl Encode for ControlType {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint((*self).into(), out)
	}
}

/// The type of a unidirectional stream, sent by its opener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
	/// 0x0: a GROUP header, then frames until FIN.
	Group,
	/// 0x1: one SETUP, then FIN.
	Setup,
}

impl DataType {
	/// The type for wire value `value`, or [`DecodeError::UnexpectedStream`].
	pub fn from_u64(value: u64) -> Result<Self, DecodeError> {
		match value {
			0 => Ok(Self::Group),
			1 => Ok(Self::Setup),
			other => Err(DecodeError::UnexpectedStream(other)),
		}
	}
}

impl From<DataType> for u64 {
	fn from(kind: DataType) -> Self {
		match kind {
			DataType::Group => 0,
			DataType::Setup => 1,
		}
	}
}

impl Decode for DataType {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Self::from_u64(decode_varint(buf)?)
	}
}

impl Encode for DataType {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint((*self).into(), out)
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn types_round_trip_and_unknown_is_unexpected_stream() {
		for value in 0..=6 {
			assert_eq!(u64::from(ControlType::from_u64(value).unwrap()), value);
		}
		for value in 0..=1 {
			assert_eq!(u64::from(DataType::from_u64(value).unwrap()), value);
		}
		let err = ControlType::decode_exact(&[0x07]).unwrap_err();
		assert_eq!(err, DecodeError::UnexpectedStream(7));
		assert_eq!(err.code(), 10);
		assert_eq!(DataType::decode_exact(&[0x02]), Err(DecodeError::UnexpectedStream(2)));
		assert_eq!(
			DataType::decode_exact(&[0x40, 0x01]),
			Ok(DataType::Setup),
			"non-minimal varint"
		);
		assert_eq!(ControlType::decode(&mut &[0x40][..]), Err(DecodeError::Short));
	}
}
