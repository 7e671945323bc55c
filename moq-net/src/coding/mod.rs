//! Wire primitives: the [`Decode`] / [`Encode`] traits and the encodings every moq-lite message is
//! built from (docs/moq-lite-05.md §2.2).
//!
//! # Encodings
//!
//! | value | wire |
//! |---|---|
//! | `u64` | QUIC varint (RFC 9000 §16): 2-bit length prefix, 1/2/4/8 bytes, at most [`VARINT_MAX`]. Encode is minimal; decode accepts any length. |
//! | `i64` ([`encode_zigzag`]) | zigzag `(s << 1) ^ (s >> 63)` as a varint, so ±2^61 |
//! | `u8` | one raw byte |
//! | `bool` | one raw byte, `0`/`1`; decode treats any non-zero byte as `true` |
//! | `String`, bytes | varint length, then the bytes (UTF-8 checked for strings) |
//! | [`Path`] | a string, normalised on decode (slashes trimmed and collapsed) |
//! | [`Duration`] | varint milliseconds (encode truncates below a millisecond) |
//! | optional group ([`encode_group`]) | varint: `0` = none, else `sequence + 1` |
//!
//! # Incremental decoding
//!
//! [`Decode::decode`] reads from the front of a `&mut &[u8]` and, on success, leaves the slice just
//! past what it read. [`DecodeError::Short`] means "the buffer ended before the value did": it is
//! not an error for a streaming caller, who reads more bytes and decodes again **from the same
//! start**. On `Short` (and on any error) the slice position is unspecified, so a streaming caller
//! decodes from a copy and commits only on success:
//!
//! ```
//! # use moq_net::coding::{Decode, DecodeError};
//! # fn f(buffered: &[u8]) -> Result<Option<(u64, usize)>, DecodeError> {
//! let mut cursor = buffered;
//! match u64::decode(&mut cursor) {
//!     Ok(value) => Ok(Some((value, buffered.len() - cursor.len()))), // consumed this many bytes
//!     Err(DecodeError::Short) => Ok(None),                            // read more, then retry
//!     Err(err) => Err(err),                                           // reset with err.code()
//! }
//! # }
//! ```
//!
//! # Caps
//!
//! Decoding is bounded: every length and count read from the peer is checked against a cap
//! **before** anything is allocated or waited for, so a peer cannot make us reserve memory it
//! never sends, nor make a streaming caller buffer without limit (a value that is still `Short`
//! never needs more than its cap plus a few bytes of prefix).
//!
//! - [`MAX_STRING_LEN`] (4 KiB): any string or byte string. The longest expected value is a SETUP
//!   `Path` parameter carrying a token in its query (`/anon?jwt=…`); track names and GOAWAY URIs
//!   are far shorter.
//! - [`MAX_PATH_LEN`] (1 KiB) and [`MAX_PATH_SEGMENTS`] (32, docs/moq-lite-05.md §2.2): broadcast paths.
//!
//! Message-level caps (message length, parameter and hop counts) live in [`crate::lite`].
//!
//! # Encoding
//!
//! [`Encode::emit`] is the one method an implementation writes; it fails with an [`EncodeError`]
//! when a value cannot be carried (a varint above [`VARINT_MAX`], a string over its cap, a path
//! over 32 segments). Callers use [`Encode::try_encode`], which leaves the buffer as it was on
//! failure, whenever any part of the value may have come from a peer (a path joined under a
//! prefix can exceed the segment cap), and [`Encode::encode`] for values they built themselves.
//! Whatever this module decodes re-encodes without error.

use std::fmt;
use std::time::Duration;

use crate::model::Path;

/// The largest value a QUIC varint carries: 2^62 − 1.
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// The longest string or byte string, in bytes (see the module's caps).
pub const MAX_STRING_LEN: usize = 4096;

pub use crate::model::path::{MAX_PATH_LEN, MAX_PATH_SEGMENTS};

/// Why bytes did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
	/// The buffer ended before the value: read more bytes and decode again from the same start.
	Short,
	/// Bytes remain inside a message's declared length after its last field.
	Long,
	/// A message's declared length ended inside one of its fields: unlike [`Short`](Self::Short),
	/// more bytes cannot help.
	Truncated,
	/// A length, count or value is over its cap (see the module docs and [`crate::lite`]).
	BoundsExceeded,
	/// A path has more than [`MAX_PATH_SEGMENTS`] segments.
	PathTooDeep,
	/// A SETUP carries more than [`crate::lite::MAX_PARAMETERS`] parameters.
	TooManyParameters,
	/// A SETUP carries the same parameter id twice.
	DuplicateParameter(u64),
	/// A string is not UTF-8.
	InvalidUtf8,
	/// A field holds a value the spec does not allow; names the field.
	InvalidValue(&'static str),
	/// A stream starts with a type this version does not know.
	UnexpectedStream(u64),
	/// A typed message (`type, len, body`) has a type this version does not know.
	UnexpectedMessage(u64),
}

impl DecodeError {
	/// The docs/moq-lite-05.md §2.8 error code to reset the stream (or close the session) with.
	///
	/// `Short` maps to Decode (5) for the caller that hit the end of the stream while still short.
	/// Duplicate parameters are a malformed SETUP, so Decode (5) too; Duplicate (12) is left for
	/// duplicate routes and subscriptions.
	pub fn code(&self) -> u64 {
		match self {
			Self::Short
			| Self::Long
			| Self::Truncated
			| Self::DuplicateParameter(_)
			| Self::InvalidUtf8
			| Self::InvalidValue(_) => 5,
			Self::UnexpectedStream(_) => 10,
			Self::BoundsExceeded | Self::PathTooDeep => 11,
			Self::UnexpectedMessage(_) => 16,
			Self::TooManyParameters => 19,
		}
	}
}

impl fmt::Display for DecodeError {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Short => f.write_str("need more bytes"),
			Self::Long => f.write_str("bytes remain after the message's last field"),
			Self::Truncated => f.write_str("the message's length ended inside a field"),
			Self::BoundsExceeded => f.write_str("a length, count or value is over its cap"),
			Self::PathTooDeep => write!(f, "a path has more than {MAX_PATH_SEGMENTS} segments"),
			Self::TooManyParameters => f.write_str("too many SETUP parameters"),
			Self::DuplicateParameter(id) => write!(f, "duplicate SETUP parameter {id:#x}"),
			Self::InvalidUtf8 => f.write_str("a string is not UTF-8"),
			Self::InvalidValue(field) => write!(f, "invalid {field}"),
			Self::UnexpectedStream(kind) => write!(f, "unknown stream type {kind:#x}"),
			Self::UnexpectedMessage(kind) => write!(f, "unknown message type {kind:#x}"),
		}
	}
}

impl std::error::Error for DecodeError {}

/// Why a value could not be encoded: it is outside what the wire carries. Nothing is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
	/// A varint above [`VARINT_MAX`], a zigzag value outside ±2^61, or a string, path, message or
	/// list over its cap.
	BoundsExceeded,
	/// A path has more than [`MAX_PATH_SEGMENTS`] segments.
	PathTooDeep,
	/// More than [`crate::lite::MAX_PARAMETERS`] SETUP parameters.
	TooManyParameters,
	/// The message does not exist in the version it is encoded for; names the message.
	NotInVersion(&'static str),
}

impl EncodeError {
	/// The docs/moq-lite-05.md §2.8 error code: Encode (18).
	pub fn code(&self) -> u64 {
		18
	}
}

impl fmt::Display for EncodeError {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::BoundsExceeded => f.write_str("a value is over what the wire carries"),
			Self::PathTooDeep => write!(f, "a path has more than {MAX_PATH_SEGMENTS} segments"),
			Self::TooManyParameters => f.write_str("too many SETUP parameters"),
			Self::NotInVersion(message) => write!(f, "{message} does not exist in this moq-lite version"),
		}
	}
}

impl std::error::Error for EncodeError {}

/// A value read from the wire.
pub trait Decode: Sized {
	/// Reads one value from the front of `buf`, advancing it past the value on success.
	///
	/// [`DecodeError::Short`] means "need more bytes"; on any error the position of `buf` is
	/// unspecified (decode from a copy, commit on success; see the module docs).
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError>;

	/// Decodes a value that must fill `bytes` exactly: [`DecodeError::Long`] if bytes remain.
	fn decode_exact(mut bytes: &[u8]) -> Result<Self, DecodeError> {
		let value = Self::decode(&mut bytes)?;
		if !bytes.is_empty() {
			return Err(DecodeError::Long);
		}
		Ok(value)
	}
}

/// A value written to the wire.
pub trait Encode {
	/// Appends the wire form to `out`. On error, `out` may hold part of the value: callers use
	/// [`try_encode`](Self::try_encode) or [`encode`](Self::encode).
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError>;

	/// Appends the wire form to `out`, or leaves `out` unchanged if the value cannot be carried.
	fn try_encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		let start = out.len();
		let result = self.emit(out);
		if result.is_err() {
			out.truncate(start);
		}
		result
	}

	/// Appends the wire form to `out`.
	///
	/// # Panics
	///
	/// If the value cannot be carried (see [`EncodeError`]). Use [`try_encode`](Self::try_encode)
	/// for values built from peer input.
	fn encode(&self, out: &mut Vec<u8>) {
		if let Err(err) = self.try_encode(out) {
			panic!("unencodable value: {err}");
		}
	}
}

// --- varint -------------------------------------------------------------------------------------

/// How many bytes the minimal varint encoding of `value` takes (values above [`VARINT_MAX`]
/// count as 8, though they cannot be encoded).
pub fn varint_len(value: u64) -> usize {
	match value {
		0..0x40 => 1,
		0x40..0x4000 => 2,
		0x4000..0x4000_0000 => 4,
		_ => 8,
	}
}

/// Appends the minimal varint encoding of `value`.
pub fn encode_varint(value: u64, out: &mut Vec<u8>) -> Result<(), EncodeError> {
	match varint_len(value) {
		1 => out.push(value as u8),
		2 => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
		4 => out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes()),
		_ if value <= VARINT_MAX => out.extend_from_slice(&(value | 0xc000_0000_0000_0000).to_be_bytes()),
		_ => return Err(EncodeError::BoundsExceeded),
	}
	Ok(())
}

/// Reads a varint of any length (1, 2, 4 or 8 bytes, minimal or not).
pub fn decode_varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
	let first = *buf.first().ok_or(DecodeError::Short)?;
	let len = 1usize << (first >> 6);
	let Some((bytes, rest)) = buf.split_at_checked(len) else {
		return Err(DecodeError::Short);
	};
	let value = bytes[1..]
		.iter()
		.fold(u64::from(first & 0x3f), |acc, &b| (acc << 8) | u64::from(b));
	*buf = rest;
	Ok(value)
}

/// Reads a varint that is a length or count, and checks it against `cap` before anyone
/// allocates or waits for that many items.
pub fn decode_len(buf: &mut &[u8], cap: usize) -> Result<usize, DecodeError> {
	let len = decode_varint(buf)?;
	match usize::try_from(len) {
		Ok(len) if len <= cap => Ok(len),
		_ => Err(DecodeError::BoundsExceeded),
	}
}

impl Decode for u64 {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_varint(buf)
	}
}

impl Encode for u64 {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(*self, out)
	}
}

// --- zigzag -------------------------------------------------------------------------------------

/// The smallest value [`encode_zigzag`] carries: −2^61.
pub const ZIGZAG_MIN: i64 = -(1 << 61);

/// The largest value [`encode_zigzag`] carries: 2^61 − 1.
pub const ZIGZAG_MAX: i64 = (1 << 61) - 1;

/// Appends `value` zigzag-encoded as a varint (so small negative numbers stay short).
pub fn encode_zigzag(value: i64, out: &mut Vec<u8>) -> Result<(), EncodeError> {
	if !(ZIGZAG_MIN..=ZIGZAG_MAX).contains(&value) {
		return Err(EncodeError::BoundsExceeded);
	}
	encode_varint(((value << 1) ^ (value >> 63)) as u64, out)
}

/// Reads a zigzag varint.
pub fn decode_zigzag(buf: &mut &[u8]) -> Result<i64, DecodeError> {
	let raw = decode_varint(buf)?;
	Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
}

// --- bytes, booleans ----------------------------------------------------------------------------

impl Decode for u8 {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		let (&byte, rest) = buf.split_first().ok_or(DecodeError::Short)?;
		*buf = rest;
		Ok(byte)
	}
}

impl Encode for u8 {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		out.push(*self);
		Ok(())
	}
}

impl Decode for bool {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		// docs/moq-lite-05.md §2.2: a decoder treats any non-zero byte as true.
		Ok(u8::decode(buf)? != 0)
	}
}

impl Encode for bool {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		out.push(u8::from(*self));
		Ok(())
	}
}

// --- strings and byte strings -------------------------------------------------------------------

/// Reads a length-prefixed byte string of at most `cap` bytes, borrowed from `buf`.
pub fn decode_bytes<'a>(buf: &mut &'a [u8], cap: usize) -> Result<&'a [u8], DecodeError> {
	let len = decode_len(buf, cap)?;
	let (bytes, rest) = buf.split_at_checked(len).ok_or(DecodeError::Short)?;
	*buf = rest;
	Ok(bytes)
}

/// Appends a length-prefixed byte string of at most `cap` bytes.
pub fn encode_bytes(bytes: &[u8], cap: usize, out: &mut Vec<u8>) -> Result<(), EncodeError> {
	if bytes.len() > cap {
		return Err(EncodeError::BoundsExceeded);
	}
	encode_varint(bytes.len() as u64, out)?;
	out.extend_from_slice(bytes);
	Ok(())
}

/// Reads a length-prefixed UTF-8 string of at most `cap` bytes, borrowed from `buf`.
pub fn decode_str<'a>(buf: &mut &'a [u8], cap: usize) -> Result<&'a str, DecodeError> {
	std::str::from_utf8(decode_bytes(buf, cap)?).map_err(|_| DecodeError::InvalidUtf8)
}

impl Decode for String {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_str(buf, MAX_STRING_LEN).map(str::to_owned)
	}
}

impl Encode for String {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		self.as_str().emit(out)
	}
}

impl Encode for str {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_bytes(self.as_bytes(), MAX_STRING_LEN, out)
	}
}

// --- paths --------------------------------------------------------------------------------------

/// The number of segments in `path` (0 for the root).
pub fn path_segments(path: &Path) -> usize {
	path.segments()
}

/// Checks that `path` fits the wire: at most [`MAX_PATH_LEN`] bytes and [`MAX_PATH_SEGMENTS`]
/// segments. A session checks a path it built by joining (prefix + peer suffix) before sending it.
pub fn check_path(path: &Path) -> Result<(), EncodeError> {
	if path.as_str().len() > MAX_PATH_LEN {
		return Err(EncodeError::BoundsExceeded);
	}
	if path.segments() > MAX_PATH_SEGMENTS {
		return Err(EncodeError::PathTooDeep);
	}
	Ok(())
}

impl Decode for Path {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		// Normalising can only shorten the text, so the length cap holds for the result too.
		let path = Self::new(decode_str(buf, MAX_PATH_LEN)?);
		if path_segments(&path) > MAX_PATH_SEGMENTS {
			return Err(DecodeError::PathTooDeep);
		}
		Ok(path)
	}
}

impl Encode for Path {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		check_path(self)?;
		encode_bytes(self.as_str().as_bytes(), MAX_PATH_LEN, out)
	}
}

// --- durations, optional groups -----------------------------------------------------------------

impl Decode for Duration {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_varint(buf).map(Self::from_millis)
	}
}

impl Encode for Duration {
	/// Whole milliseconds: anything below a millisecond is dropped.
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		let millis = u64::try_from(self.as_millis()).map_err(|_| EncodeError::BoundsExceeded)?;
		encode_varint(millis, out)
	}
}

/// Appends an optional group sequence: `0` for none, else `sequence + 1`.
pub fn encode_group(group: Option<u64>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
	match group {
		None => encode_varint(0, out),
		Some(sequence) => encode_varint(sequence.checked_add(1).ok_or(EncodeError::BoundsExceeded)?, out),
	}
}

/// Reads an optional group sequence: `0` is none, else `sequence + 1`.
pub fn decode_group(buf: &mut &[u8]) -> Result<Option<u64>, DecodeError> {
	Ok(decode_varint(buf)?.checked_sub(1))
}

#[cfg(test)]
mod tests {
	use super::*;

	#[track_caller]
	fn encoded<T: Encode + ?Sized>(value: &T) -> Vec<u8> {
		let mut out = Vec::new();
		value.encode(&mut out);
		out
	}

	#[test]
	fn varint_boundaries_are_minimal_and_decode_back() {
		let cases: &[(u64, &[u8])] = &[
			(0, &[0x00]),
			(63, &[0x3f]),
			(64, &[0x40, 0x40]),
			(16383, &[0x7f, 0xff]),
			(16384, &[0x80, 0x00, 0x40, 0x00]),
			(0x3fff_ffff, &[0xbf, 0xff, 0xff, 0xff]),
			(0x4000_0000, &[0xc0, 0, 0, 0, 0x40, 0, 0, 0]),
			(VARINT_MAX, &[0xff; 8]),
		];
		for &(value, bytes) in cases {
			assert_eq!(encoded(&value), bytes, "{value}");
			assert_eq!(u64::decode_exact(bytes), Ok(value));
		}
	}

	#[test]
	fn varint_above_max_does_not_encode() {
		let mut out = vec![7];
		assert_eq!((VARINT_MAX + 1).try_encode(&mut out), Err(EncodeError::BoundsExceeded));
		assert_eq!(u64::MAX.try_encode(&mut out), Err(EncodeError::BoundsExceeded));
		assert_eq!(out, [7], "a failed encode leaves the buffer as it was");
	}

	#[test]
	fn varint_decode_accepts_non_minimal() {
		// RFC 9000 §16: 37 in two, four and eight bytes.
		assert_eq!(u64::decode_exact(&[0x40, 0x25]), Ok(37));
		assert_eq!(u64::decode_exact(&[0x80, 0, 0, 0x25]), Ok(37));
		assert_eq!(u64::decode_exact(&[0xc0, 0, 0, 0, 0, 0, 0, 0x25]), Ok(37));
		// RFC 9000 appendix A.1's samples.
		assert_eq!(
			u64::decode_exact(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
			Ok(151_288_809_941_952_652)
		);
		assert_eq!(u64::decode_exact(&[0x9d, 0x7f, 0x3e, 0x7d]), Ok(494_878_333));
		assert_eq!(u64::decode_exact(&[0x7b, 0xbd]), Ok(15293));
	}

	#[test]
	fn varint_short_at_every_cut() {
		let bytes = [0xc0, 0, 0, 0, 0x40, 0, 0, 0];
		for cut in 0..bytes.len() {
			assert_eq!(u64::decode(&mut &bytes[..cut]), Err(DecodeError::Short), "cut {cut}");
		}
	}

	#[test]
	fn zigzag_matches_the_spec() {
		let mut out = Vec::new();
		encode_zigzag(1000, &mut out).unwrap();
		encode_zigzag(-33, &mut out).unwrap();
		encode_zigzag(ZIGZAG_MAX, &mut out).unwrap();
		encode_zigzag(ZIGZAG_MIN, &mut out).unwrap();
		assert_eq!(&out[..4], [0x47, 0xd0, 0x40, 0x41]);
		let mut buf = &out[..];
		for expected in [1000, -33, ZIGZAG_MAX, ZIGZAG_MIN] {
			assert_eq!(decode_zigzag(&mut buf), Ok(expected));
		}
		assert_eq!(
			encode_zigzag(ZIGZAG_MAX + 1, &mut out),
			Err(EncodeError::BoundsExceeded)
		);
		assert_eq!(
			encode_zigzag(ZIGZAG_MIN - 1, &mut out),
			Err(EncodeError::BoundsExceeded)
		);
		assert_eq!(encode_zigzag(i64::MIN, &mut out), Err(EncodeError::BoundsExceeded));
	}

	#[test]
	fn bool_decodes_nonzero_as_true() {
		assert_eq!(bool::decode_exact(&[0]), Ok(false));
		assert_eq!(bool::decode_exact(&[1]), Ok(true));
		assert_eq!(bool::decode_exact(&[0x80]), Ok(true));
		assert_eq!(encoded(&true), [1]);
	}

	#[test]
	fn strings_are_checked() {
		assert_eq!(encoded("bbb"), [0x03, b'b', b'b', b'b']);
		assert_eq!(String::decode_exact(&[0x02, 0xc3, 0x28]), Err(DecodeError::InvalidUtf8));
		assert_eq!(String::decode(&mut &[0x03, b'a'][..]), Err(DecodeError::Short));
		// Over the cap: rejected from the prefix alone, before the bytes arrive.
		let mut over = Vec::new();
		encode_varint(MAX_STRING_LEN as u64 + 1, &mut over).unwrap();
		assert_eq!(String::decode(&mut &over[..]), Err(DecodeError::BoundsExceeded));
		assert_eq!(String::decode(&mut &[0xff; 8][..]), Err(DecodeError::BoundsExceeded));
		let long = "x".repeat(MAX_STRING_LEN + 1);
		assert_eq!(long.try_encode(&mut Vec::new()), Err(EncodeError::BoundsExceeded));
		let max = "x".repeat(MAX_STRING_LEN);
		assert_eq!(String::decode_exact(&encoded(&max)), Ok(max));
	}

	#[test]
	fn paths_normalise_and_cap_segments() {
		assert_eq!(Path::decode_exact(b"\x07/a//b/c"), Ok(Path::new("a/b/c")));
		assert_eq!(encoded(&Path::new("/a//b/")), b"\x03a/b");
		let deep = vec!["s"; MAX_PATH_SEGMENTS].join("/");
		assert_eq!(Path::decode_exact(&encoded(deep.as_str())), Ok(Path::new(&deep)));
		let deeper = vec!["s"; MAX_PATH_SEGMENTS + 1].join("/");
		assert_eq!(
			Path::decode_exact(&encoded(deeper.as_str())),
			Err(DecodeError::PathTooDeep)
		);
		assert_eq!(
			Path::new(&deeper).try_encode(&mut Vec::new()),
			Err(EncodeError::PathTooDeep)
		);
		// 33 slashes-only "segments" normalise to the root: depth counts real segments.
		assert_eq!(Path::decode_exact(&encoded("/".repeat(40).as_str())), Ok(Path::new("")));
		let long = "x".repeat(MAX_PATH_LEN + 1);
		assert_eq!(
			Path::decode_exact(&encoded(long.as_str())),
			Err(DecodeError::BoundsExceeded)
		);
		assert_eq!(
			Path::new(&long).try_encode(&mut Vec::new()),
			Err(EncodeError::BoundsExceeded)
		);
	}

	#[test]
	fn durations_are_milliseconds() {
		assert_eq!(encoded(&Duration::from_millis(5000)), [0x53, 0x88]);
		assert_eq!(encoded(&Duration::from_micros(1999)), [0x01]);
		assert_eq!(Duration::decode_exact(&[0x53, 0x88]), Ok(Duration::from_secs(5)));
		assert_eq!(
			Duration::MAX.try_encode(&mut Vec::new()),
			Err(EncodeError::BoundsExceeded)
		);
	}

	#[test]
	fn optional_groups_are_offset_by_one() {
		let mut out = Vec::new();
		encode_group(None, &mut out).unwrap();
		encode_group(Some(0), &mut out).unwrap();
		encode_group(Some(9), &mut out).unwrap();
		assert_eq!(out, [0, 1, 10]);
		let mut buf = &out[..];
		assert_eq!(decode_group(&mut buf), Ok(None));
		assert_eq!(decode_group(&mut buf), Ok(Some(0)));
		assert_eq!(decode_group(&mut buf), Ok(Some(9)));
		assert_eq!(
			encode_group(Some(VARINT_MAX), &mut out),
			Err(EncodeError::BoundsExceeded)
		);
		assert_eq!(encode_group(Some(u64::MAX), &mut out), Err(EncodeError::BoundsExceeded));
	}
}
