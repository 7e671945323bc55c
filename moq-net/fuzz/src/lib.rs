//! What every fuzz target asserts about a decoder, given arbitrary bytes:
//!
//! 1. it does not panic (libFuzzer reports any panic or sanitizer fault);
//! 2. a value that decodes is exactly the bytes it consumed: those bytes alone decode to it, and
//!    one byte fewer is `Short` (so a streaming reader that retries on `Short` gets the same
//!    value, and never waits once the value is complete);
//! 3. it re-encodes, no longer than it arrived (encoders are minimal), to bytes that decode to an
//!    equal value.
#![forbid(unsafe_code)]

use std::fmt::Debug;

use moq_net::coding::{Decode, DecodeError, Encode};
use moq_net::lite::{Version, VersionedDecode, VersionedEncode};

/// Checks a length-delimited value (every message but a datagram) at the front of `data`, and
/// returns how many bytes it took, or `None` if it did not decode.
pub fn check<T: Decode + Encode + PartialEq + Debug>(data: &[u8]) -> Option<(T, usize)> {
	check_codec(data, true, "", T::decode, |value: &T, out: &mut Vec<u8>| {
		value.try_encode(out)
	})
}

/// [`check`], for a value that runs to the end of its input (a datagram): no `Short` on a cut.
pub fn check_unframed<T: Decode + Encode + PartialEq + Debug>(data: &[u8]) -> Option<(T, usize)> {
	check_codec(data, false, "", T::decode, |value: &T, out: &mut Vec<u8>| {
		value.try_encode(out)
	})
}

/// [`check`] for a message whose bytes depend on the version (moq-lite-04 and -03 differ from
/// 05: docs/moq-lite-versions.md), decoded and re-encoded as `version` has it.
pub fn check_for<T: VersionedDecode + VersionedEncode + PartialEq + Debug>(
	data: &[u8],
	version: Version,
) -> Option<(T, usize)> {
	check_codec(
		data,
		true,
		&format!(" as {version}"),
		|buf: &mut &[u8]| T::decode_for(buf, version),
		|value: &T, out: &mut Vec<u8>| value.try_encode_for(version, out),
	)
}

/// The three properties (module docs) for one codec: `decode` and `encode`, `what` naming it in a
/// failure.
fn check_codec<T: PartialEq + Debug, E: std::fmt::Display>(
	data: &[u8],
	framed: bool,
	what: &str,
	decode: impl Fn(&mut &[u8]) -> Result<T, DecodeError>,
	encode: impl Fn(&T, &mut Vec<u8>) -> Result<(), E>,
) -> Option<(T, usize)> {
	let exact = |bytes: &[u8]| {
		let mut view = bytes;
		let value = decode(&mut view);
		(value, view.len())
	};
	let mut buf = data;
	let value = decode(&mut buf).ok()?;
	let used = data.len() - buf.len();
	let (alone, left) = exact(&data[..used]);
	assert_eq!(alone.as_ref(), Ok(&value), "the consumed bytes alone{what}");
	assert_eq!(left, 0, "the consumed bytes alone, all of them{what}");
	if framed {
		assert!(used > 0, "a framed value takes at least one byte");
		assert_eq!(
			decode(&mut &data[..used - 1]).err(),
			Some(DecodeError::Short),
			"one byte fewer{what}"
		);
	}
	let mut out = Vec::new();
	if let Err(err) = encode(&value, &mut out) {
		panic!("{value:?} decoded{what} but does not re-encode: {err}");
	}
	assert!(
		out.len() <= used,
		"{value:?} re-encodes longer{what} ({} > {used})",
		out.len()
	);
	let (again, left) = exact(&out);
	assert_eq!(again.as_ref(), Ok(&value), "re-encoded {out:02x?}{what}");
	assert_eq!(left, 0, "re-encoded bytes left over{what}");
	Some((value, used))
}
