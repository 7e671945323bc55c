//! HTTP/3 as WebTransport needs it, sans-io, one codec a file: frames and SETTINGS (`frame.rs`),
//! QPACK with the static table only (`qpack.rs`) and the Huffman code it may use
//! (`huffman.rs`), the extended CONNECT request and its response with the sub-protocol headers
//! (`connect.rs`), structured-field strings (`sf.rs`) and the session-close capsule
//! (`capsule.rs`); here, the codes and the mapping of application error codes into HTTP/3's.
//! Varints are moq-net's ([`moq_net::coding`]): one codec for every varint of the workspace.
//!
//! Sources: RFC 9114 (HTTP/3), RFC 9204 (QPACK; its Appendix A is [`STATIC_TABLE`]), RFC 7541
//! (HPACK Huffman code, Appendix B, as [`HUFFMAN_LENGTHS`]), RFC 9220 (extended CONNECT), RFC 9297
//! (HTTP datagrams and capsules), RFC 8941 (structured fields, for `wt-available-protocols` and
//! `wt-protocol`) and draft-ietf-webtrans-http3. The wire walk-through is in docs/moq-quic.md
//! ("WebTransport").
//!
//! We never use QPACK's dynamic table: our SETTINGS leave `QPACK_MAX_TABLE_CAPACITY` at 0, so a
//! peer may not refer to one, and a field section that does is refused. Strings we encode are
//! never Huffman-coded; strings we decode may be (browsers do).

use std::fmt;

use moq_net::coding::{DecodeError, encode_varint};

mod capsule;
mod connect;
mod frame;
mod huffman;
mod qpack;
mod sf;

pub use capsule::{CLOSE_SESSION, DRAIN_SESSION, MAX_CLOSE_REASON, close_capsule, close_code, get_capsule};
pub use connect::{AVAILABLE_PROTOCOLS, ConnectRequest, ConnectResponse, PROTOCOL};
pub use frame::{Settings, get_frame, is_grease, is_http2_only, put_frame};
pub use huffman::{HUFFMAN_LENGTHS, huffman_decode};
pub use qpack::{STATIC_TABLE, decode_fields, encode_fields};
pub use sf::{format_string, format_string_list, parse_string_list};

/// ALPN of HTTP/3.
pub const ALPN: &[u8] = b"h3";

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2, draft-ietf-webtrans-http3 §4.2).
pub mod stream_type {
	/// The control stream: SETTINGS first, never closed.
	pub const CONTROL: u64 = 0x00;
	/// Server push (a client never receives one it did not ask for; a server never accepts one).
	pub const PUSH: u64 = 0x01;
	/// QPACK encoder instructions.
	pub const QPACK_ENCODER: u64 = 0x02;
	/// QPACK decoder instructions.
	pub const QPACK_DECODER: u64 = 0x03;
	/// A WebTransport unidirectional stream: then the session id, then the payload.
	pub const WEBTRANSPORT_UNI: u64 = 0x54;
	/// The signal value opening a WebTransport bidirectional stream, then the session id.
	pub const WEBTRANSPORT_BIDI: u64 = 0x41;
}

/// Frame types (RFC 9114 §7.2).
pub mod frame_type {
	/// DATA: on a CONNECT stream, capsules.
	pub const DATA: u64 = 0x00;
	/// HEADERS: a QPACK field section.
	pub const HEADERS: u64 = 0x01;
	/// SETTINGS: the first frame of each control stream.
	pub const SETTINGS: u64 = 0x04;
	/// GOAWAY.
	pub const GOAWAY: u64 = 0x07;
}

/// Error codes (RFC 9114 §8.1, RFC 9204 §6, draft-ietf-webtrans-http3 §9).
pub mod code {
	/// No error.
	pub const NO_ERROR: u64 = 0x100;
	/// A peer broke the protocol in a way no more specific code covers.
	pub const GENERAL_PROTOCOL_ERROR: u64 = 0x101;
	/// A stream of a type or direction the endpoint may not open.
	pub const STREAM_CREATION_ERROR: u64 = 0x103;
	/// A control or QPACK stream was closed.
	pub const CLOSED_CRITICAL_STREAM: u64 = 0x104;
	/// A frame not allowed where it came.
	pub const FRAME_UNEXPECTED: u64 = 0x105;
	/// A frame that does not parse, or is too long.
	pub const FRAME_ERROR: u64 = 0x106;
	/// A SETTINGS frame that does not parse or repeats an identifier.
	pub const SETTINGS_ERROR: u64 = 0x109;
	/// The control stream did not start with SETTINGS.
	pub const MISSING_SETTINGS: u64 = 0x10a;
	/// A request refused before any processing.
	pub const REQUEST_REJECTED: u64 = 0x10b;
	/// A malformed request or response.
	pub const MESSAGE_ERROR: u64 = 0x10e;
	/// A field section QPACK cannot decode.
	pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
	/// A WebTransport stream whose session is gone, or never was.
	pub const WT_SESSION_GONE: u64 = 0x170d_7b68;
	/// A WebTransport stream buffered for a session that did not come.
	pub const WT_BUFFERED_STREAM_REJECTED: u64 = 0x3994_bd84;
}

/// SETTINGS identifiers we send or read.
pub mod setting {
	/// `SETTINGS_QPACK_MAX_TABLE_CAPACITY` (RFC 9204): left at 0, no dynamic table.
	pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
	/// `SETTINGS_MAX_FIELD_SECTION_SIZE` (RFC 9114).
	pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
	/// `SETTINGS_ENABLE_CONNECT_PROTOCOL` (RFC 9220): extended CONNECT.
	pub const ENABLE_CONNECT_PROTOCOL: u64 = 0x08;
	/// `SETTINGS_H3_DATAGRAM` (RFC 9297).
	pub const H3_DATAGRAM: u64 = 0x33;
	/// `H3_DATAGRAM` of draft-04, still sent by Chromium.
	pub const H3_DATAGRAM_DRAFT04: u64 = 0xff_d277;
	/// `SETTINGS_ENABLE_WEBTRANSPORT` (WebTransport draft-02).
	pub const ENABLE_WEBTRANSPORT: u64 = 0x2b60_3742;
	/// `SETTINGS_WEBTRANSPORT_MAX_SESSIONS` before draft-07.
	pub const WEBTRANSPORT_MAX_SESSIONS_DEPRECATED: u64 = 0x2b60_3743;
	/// `SETTINGS_WEBTRANSPORT_MAX_SESSIONS` (draft-07 on).
	pub const WEBTRANSPORT_MAX_SESSIONS: u64 = 0xc671_706a;
}

/// Field sections longer than this are refused (and advertised as our
/// `SETTINGS_MAX_FIELD_SECTION_SIZE`): a CONNECT needs a few hundred bytes.
pub const MAX_FIELD_SECTION: usize = 16 << 10;

/// Frames other than HEADERS longer than this are refused (a SETTINGS frame is tens of bytes).
pub const MAX_FRAME: usize = 64 << 10;

/// The WebTransport code space inside HTTP/3's (draft-ietf-webtrans-http3 §4.3): application
/// code `c` is sent as `FIRST + c + c / 0x1e`, skipping the reserved (GREASE) code points.
const WT_FIRST: u64 = 0x52e4_a40f_a8db;
const WT_LAST: u64 = 0x52e5_ac98_3162;

/// An application (WebTransport) error code as an HTTP/3 one.
pub const fn error_to_http3(code: u32) -> u64 {
	WT_FIRST + code as u64 + code as u64 / 0x1e
}

/// An HTTP/3 error code as an application one, if it is in the WebTransport space (and not a
/// reserved code point).
pub const fn error_from_http3(code: u64) -> Option<u32> {
	if code < WT_FIRST || code > WT_LAST || (code - 0x21).is_multiple_of(0x1f) {
		return None;
	}
	let shifted = code - WT_FIRST;
	Some((shifted - shifted / 0x1f) as u32)
}

/// Why bytes from a peer were refused; [`Error::code`] is the HTTP/3 code to close or reset with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
	/// More bytes are needed (not an error on a stream still open).
	Short,
	/// A frame or a field section longer than we accept.
	TooLong,
	/// A SETTINGS frame that does not parse or repeats an identifier.
	Settings,
	/// A field section we cannot decode (a dynamic-table reference, a bad prefix or string).
	Qpack,
	/// A request or response that is not what WebTransport needs; the text says what.
	Message(&'static str),
}

impl Error {
	/// The HTTP/3 error code for it.
	pub fn code(&self) -> u64 {
		match self {
			Self::Short | Self::TooLong => code::FRAME_ERROR,
			Self::Settings => code::SETTINGS_ERROR,
			Self::Qpack => code::QPACK_DECOMPRESSION_FAILED,
			Self::Message(_) => code::MESSAGE_ERROR,
		}
	}
}

impl fmt::Display for Error {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Short => f.write_str("truncated"),
			Self::TooLong => f.write_str("too long"),
			Self::Settings => f.write_str("malformed SETTINGS"),
			Self::Qpack => f.write_str("undecodable field section"),
			Self::Message(what) => write!(f, "malformed message: {what}"),
		}
	}
}

impl std::error::Error for Error {}

/// Appends `value` as a QUIC varint (RFC 9000 §16). Every value written here is a type, a length,
/// a stream id or a code mapped from 32 bits: below 2^62, so it always encodes.
pub fn put_varint(out: &mut Vec<u8>, value: u64) {
	encode_varint(value, out).expect("HTTP/3 writes no varint of 2^62 or more");
}

/// Takes a QUIC varint from the front of `buf` (moq-net's decoder; `Short` if `buf` ends in it).
pub fn get_varint(buf: &mut &[u8]) -> Result<u64, Error> {
	moq_net::coding::decode_varint(buf).map_err(Error::from)
}

impl From<DecodeError> for Error {
	fn from(err: DecodeError) -> Self {
		match err {
			DecodeError::Short => Self::Short,
			_ => Self::Message("a varint"),
		}
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	/// Bytes from hex digits, white space ignored.
	pub(super) fn hex(text: &str) -> Vec<u8> {
		let digits: String = text.split_whitespace().collect();
		data_encoding::HEXLOWER_PERMISSIVE.decode(digits.as_bytes()).unwrap()
	}

	#[test]
	fn error_codes_map_both_ways() {
		// draft-ietf-webtrans-http3 examples: 0, 0x1d, 0x1e skip the reserved point after 0x1d.
		assert_eq!(error_to_http3(0), 0x52e4_a40f_a8db);
		assert_eq!(error_to_http3(0x1d), 0x52e4_a40f_a8f8);
		assert_eq!(error_to_http3(0x1e), 0x52e4_a40f_a8fa);
		for code in [0u32, 1, 6, 13, 29, 30, 31, 1000, u32::MAX] {
			assert_eq!(error_from_http3(error_to_http3(code)), Some(code), "{code}");
		}
		assert_eq!(error_from_http3(0x52e4_a40f_a8f9), None, "a reserved point");
		assert_eq!(error_from_http3(code::NO_ERROR), None);
	}

	#[test]
	fn varints_round_trip() {
		for value in [0, 63, 64, 16383, 16384, (1 << 30) - 1, 1 << 30, (1 << 62) - 1] {
			let mut out = Vec::new();
			put_varint(&mut out, value);
			let mut buf = out.as_slice();
			assert_eq!(get_varint(&mut buf), Ok(value));
			assert!(buf.is_empty());
		}
		// 0x54 takes two bytes: `40 54`.
		let mut out = Vec::new();
		put_varint(&mut out, stream_type::WEBTRANSPORT_UNI);
		assert_eq!(out, [0x40, 0x54]);
	}
}
