//! What every fuzz target asserts about a decoder, given arbitrary bytes:
//!
//! 1. it does not panic (libFuzzer reports any panic or sanitizer fault);
//! 2. a value that decodes is exactly the bytes it consumed: those bytes alone decode to it, and
//!    one byte fewer is `Short` (so a streaming reader that retries on `Short` gets the same
//!    value, and never waits once the value is complete);
//! 3. it re-encodes, no longer than it arrived (encoders are minimal), to bytes that decode to an
//!    equal value.

use std::fmt::Debug;

use moq_net::coding::{Decode, DecodeError, Encode};
use moq_net::lite::{Version, VersionedDecode, VersionedEncode};

/// Checks a length-delimited value (every message but a datagram) at the front of `data`, and
/// returns how many bytes it took, or `None` if it did not decode.
pub fn check<T: Decode + Encode + PartialEq + Debug>(data: &[u8]) -> Option<(T, usize)> {
	check_with(data, true)
}

/// [`check`], for a value that runs to the end of its input (a datagram): no `Short` on a cut.
pub fn check_unframed<T: Decode + Encode + PartialEq + Debug>(data: &[u8]) -> Option<(T, usize)> {
	check_with(data, false)
}

fn check_with<T: Decode + Encode + PartialEq + Debug>(data: &[u8], framed: bool) -> Option<(T, usize)> {
	let mut buf = data;
	let value = T::decode(&mut buf).ok()?;
	let used = data.len() - buf.len();
	assert_eq!(
		T::decode_exact(&data[..used]).as_ref(),
		Ok(&value),
		"the consumed bytes alone"
	);
	if framed {
		assert!(used > 0, "a framed value takes at least one byte");
		assert_eq!(
			T::decode(&mut &data[..used - 1]),
			Err(DecodeError::Short),
			"one byte fewer"
		);
	}
	let mut out = Vec::new();
	if let Err(err) = value.try_encode(&mut out) {
		panic!("{value:?} decoded but does not re-encode: {err}");
	}
	assert!(
		out.len() <= used,
		"{value:?} re-encodes longer ({} > {used})",
		out.len()
	);
	assert_eq!(T::decode_exact(&out).as_ref(), Ok(&value), "re-encoded {out:02x?}");
	Some((value, used))
}

/// [`check`] for a message whose bytes depend on the version (moq-lite-04 and -03 differ from
/// 05: docs/moq-lite-versions.md), decoded and re-encoded as `version` has it.
pub fn check_for<T: VersionedDecode + VersionedEncode + PartialEq + Debug>(
	data: &[u8],
	version: Version,
) -> Option<(T, usize)> {
	let mut buf = data;
	let value = T::decode_for(&mut buf, version).ok()?;
	let used = data.len() - buf.len();
	assert!(used > 0, "a framed value takes at least one byte");
	let mut alone = &data[..used];
	assert_eq!(
		T::decode_for(&mut alone, version).as_ref(),
		Ok(&value),
		"the consumed bytes alone ({version})"
	);
	assert!(alone.is_empty(), "the consumed bytes alone, all of them ({version})");
	assert_eq!(
		T::decode_for(&mut &data[..used - 1], version),
		Err(DecodeError::Short),
		"one byte fewer ({version})"
	);
	let mut out = Vec::new();
	if let Err(err) = value.try_encode_for(version, &mut out) {
		panic!("{value:?} decoded as {version} but does not re-encode: {err}");
	}
	assert!(
		out.len() <= used,
		"{value:?} re-encodes longer as {version} ({} > {used})",
		out.len()
	);
	let mut view = out.as_slice();
	assert_eq!(
		T::decode_for(&mut view, version).as_ref(),
		Ok(&value),
		"re-encoded {out:02x?} as {version}"
	);
	assert!(view.is_empty(), "re-encoded bytes left over ({version})");
	Some((value, used))
}
