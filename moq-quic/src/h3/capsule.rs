//! Capsules (RFC 9297 §3.2) on a WebTransport session's CONNECT stream: the session close.

use super::{Error, MAX_FRAME, frame_type, get_frame, put_frame, put_varint};

/// CLOSE_WEBTRANSPORT_SESSION (draft-ietf-webtrans-http3 §5): a 32-bit code and a reason.
pub const CLOSE_SESSION: u64 = 0x2843;
/// DRAIN_WEBTRANSPORT_SESSION.
pub const DRAIN_SESSION: u64 = 0x78ae;

/// Reasons longer than this (bytes) are cut, as the draft caps them.
pub const MAX_CLOSE_REASON: usize = 1024;

/// The close capsule inside a DATA frame, as it goes on the CONNECT stream.
pub fn close_capsule(code: u32, reason: &str) -> Vec<u8> {
	let mut reason = reason.as_bytes();
	if reason.len() > MAX_CLOSE_REASON {
		reason = &reason[..MAX_CLOSE_REASON];
	}
	let mut capsule = Vec::new();
	put_varint(&mut capsule, CLOSE_SESSION);
	put_varint(&mut capsule, 4 + reason.len() as u64);
	capsule.extend_from_slice(&code.to_be_bytes());
	capsule.extend_from_slice(reason);
	let mut out = Vec::new();
	put_frame(&mut out, frame_type::DATA, &capsule);
	out
}

/// A capsule (type, payload) from the front of `buf`, once all of it is there.
pub fn get_capsule<'a>(buf: &mut &'a [u8]) -> Result<(u64, &'a [u8]), Error> {
	get_frame(buf, MAX_FRAME)
}

/// The code of a CLOSE_WEBTRANSPORT_SESSION payload (the reason is not kept).
pub fn close_code(payload: &[u8]) -> Result<u32, Error> {
	let bytes: [u8; 4] = payload
		.get(..4)
		.and_then(|b| b.try_into().ok())
		.ok_or(Error::Message("a close capsule without a code"))?;
	Ok(u32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
	use super::*;
	use crate::h3::tests::hex;

	#[test]
	fn close_capsules_carry_a_code() {
		assert_eq!(close_capsule(0, ""), hex("00 07 6843 04 00000000"));
		assert_eq!(close_capsule(6, "bye"), hex("00 0a 6843 07 00000006 627965"));
		let frame = close_capsule(13, "because");
		let mut buf = frame.as_slice();
		let (_, data) = get_frame(&mut buf, MAX_FRAME).unwrap();
		let mut data = data;
		let (kind, payload) = get_capsule(&mut data).unwrap();
		assert_eq!((kind, close_code(payload).unwrap()), (CLOSE_SESSION, 13));
	}
}
