//! HTTP/3 as WebTransport needs it, sans-io: varints, frames, SETTINGS, the extended CONNECT
//! request and its response (QPACK with the static table only), the sub-protocol headers, the
//! session-close capsule and the mapping of application error codes into HTTP/3's.
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
use std::sync::OnceLock;

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

/// Appends `value` as a QUIC varint (RFC 9000 §16). Values of 2^62 and more do not exist on the
/// wire; they are clamped (no caller has one).
pub fn put_varint(out: &mut Vec<u8>, value: u64) {
	match value {
		0..0x40 => out.push(value as u8),
		0x40..0x4000 => out.extend_from_slice(&(value as u16 | 0x4000).to_be_bytes()),
		0x4000..0x4000_0000 => out.extend_from_slice(&(value as u32 | 0x8000_0000).to_be_bytes()),
		_ => out.extend_from_slice(&(value.min((1 << 62) - 1) | 0xc000_0000_0000_0000).to_be_bytes()),
	}
}

/// Takes a QUIC varint from the front of `buf`.
pub fn get_varint(buf: &mut &[u8]) -> Result<u64, Error> {
	let first = *buf.first().ok_or(Error::Short)?;
	let len = 1usize << (first >> 6);
	let (bytes, rest) = buf.split_at_checked(len).ok_or(Error::Short)?;
	let mut value = u64::from(first & 0x3f);
	for byte in &bytes[1..] {
		value = (value << 8) | u64::from(*byte);
	}
	*buf = rest;
	Ok(value)
}

/// A frame's type and payload, taken from the front of `buf` when all of it is there
/// (`Err(Short)` otherwise, `buf` untouched). Payloads longer than `limit` are refused.
pub fn get_frame<'a>(buf: &mut &'a [u8], limit: usize) -> Result<(u64, &'a [u8]), Error> {
	let mut rest = *buf;
	let kind = get_varint(&mut rest)?;
	let len = get_varint(&mut rest)?;
	if len > limit as u64 {
		return Err(Error::TooLong);
	}
	let (payload, rest) = rest.split_at_checked(len as usize).ok_or(Error::Short)?;
	*buf = rest;
	Ok((kind, payload))
}

/// Appends a frame.
pub fn put_frame(out: &mut Vec<u8>, kind: u64, payload: &[u8]) {
	put_varint(out, kind);
	put_varint(out, payload.len() as u64);
	out.extend_from_slice(payload);
}

/// Whether a frame, stream or capsule type is a reserved GREASE value (`0x1f * N + 0x21`).
pub fn is_grease(kind: u64) -> bool {
	kind >= 0x21 && (kind - 0x21).is_multiple_of(0x1f)
}

/// A SETTINGS frame's identifiers and values, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings(pub Vec<(u64, u64)>);

impl Settings {
	/// What a WebTransport endpoint sends: extended CONNECT, HTTP datagrams (both code points),
	/// WebTransport (draft-02 and draft-07 code points) with one session, and our field-section
	/// limit. No dynamic QPACK table (the capacity is left at 0).
	pub fn webtransport() -> Self {
		Self(vec![
			(setting::MAX_FIELD_SECTION_SIZE, MAX_FIELD_SECTION as u64),
			(setting::ENABLE_CONNECT_PROTOCOL, 1),
			(setting::H3_DATAGRAM, 1),
			(setting::H3_DATAGRAM_DRAFT04, 1),
			(setting::ENABLE_WEBTRANSPORT, 1),
			(setting::WEBTRANSPORT_MAX_SESSIONS_DEPRECATED, 1),
			(setting::WEBTRANSPORT_MAX_SESSIONS, 1),
		])
	}

	/// A setting's value.
	pub fn get(&self, id: u64) -> Option<u64> {
		self.0.iter().find(|(key, _)| *key == id).map(|(_, value)| *value)
	}

	/// Whether the peer says it speaks WebTransport: HTTP datagrams, and a WebTransport setting.
	pub fn supports_webtransport(&self) -> bool {
		let datagrams = self
			.get(setting::H3_DATAGRAM)
			.or_else(|| self.get(setting::H3_DATAGRAM_DRAFT04))
			== Some(1);
		let sessions = match self.get(setting::WEBTRANSPORT_MAX_SESSIONS) {
			Some(max) => max > 0,
			None => self.get(setting::ENABLE_WEBTRANSPORT) == Some(1),
		};
		datagrams && sessions
	}

	/// The SETTINGS frame.
	pub fn encode(&self, out: &mut Vec<u8>) {
		let mut payload = Vec::new();
		for (id, value) in &self.0 {
			put_varint(&mut payload, *id);
			put_varint(&mut payload, *value);
		}
		put_frame(out, frame_type::SETTINGS, &payload);
	}

	/// A SETTINGS frame's payload. GREASE identifiers are skipped; a repeated one is an error.
	///
	/// Repeats are found on a sorted copy of the identifiers: a peer's SETTINGS of up to 4 KiB
	/// holds some 1,360 of them, and checking each against those before it took 4.45 M
	/// instructions per connection; sorted, 114 k (callgrind, 1,365 distinct two-byte ids).
	pub fn decode(mut payload: &[u8]) -> Result<Self, Error> {
		let mut settings = Vec::new();
		while !payload.is_empty() {
			let id = get_varint(&mut payload).map_err(|_| Error::Settings)?;
			let value = get_varint(&mut payload).map_err(|_| Error::Settings)?;
			if is_http2_only(id) {
				return Err(Error::Settings);
			}
			if !is_grease(id) {
				settings.push((id, value));
			}
		}
		let mut ids: Vec<u64> = settings.iter().map(|(id, _)| *id).collect();
		ids.sort_unstable();
		if ids.windows(2).any(|pair| pair[0] == pair[1]) {
			return Err(Error::Settings);
		}
		Ok(Self(settings))
	}
}

/// HTTP/2's setting identifiers that HTTP/3 has no counterpart for (RFC 9114 §7.2.4.1, §11.2.2):
/// reserved, and a SETTINGS frame with one is a connection error (H3_SETTINGS_ERROR).
pub fn is_http2_only(id: u64) -> bool {
	matches!(id, 0x00 | 0x02..=0x05)
}

/// QPACK's static table (RFC 9204 Appendix A): index, name, value.
pub const STATIC_TABLE: [(&str, &str); 99] = [
	(":authority", ""),
	(":path", "/"),
	("age", "0"),
	("content-disposition", ""),
	("content-length", "0"),
	("cookie", ""),
	("date", ""),
	("etag", ""),
	("if-modified-since", ""),
	("if-none-match", ""),
	("last-modified", ""),
	("link", ""),
	("location", ""),
	("referer", ""),
	("set-cookie", ""),
	(":method", "CONNECT"),
	(":method", "DELETE"),
	(":method", "GET"),
	(":method", "HEAD"),
	(":method", "OPTIONS"),
	(":method", "POST"),
	(":method", "PUT"),
	(":scheme", "http"),
	(":scheme", "https"),
	(":status", "103"),
	(":status", "200"),
	(":status", "304"),
	(":status", "404"),
	(":status", "503"),
	("accept", "*/*"),
	("accept", "application/dns-message"),
	("accept-encoding", "gzip, deflate, br"),
	("accept-ranges", "bytes"),
	("access-control-allow-headers", "cache-control"),
	("access-control-allow-headers", "content-type"),
	("access-control-allow-origin", "*"),
	("cache-control", "max-age=0"),
	("cache-control", "max-age=2592000"),
	("cache-control", "max-age=604800"),
	("cache-control", "no-cache"),
	("cache-control", "no-store"),
	("cache-control", "public, max-age=31536000"),
	("content-encoding", "br"),
	("content-encoding", "gzip"),
	("content-type", "application/dns-message"),
	("content-type", "application/javascript"),
	("content-type", "application/json"),
	("content-type", "application/x-www-form-urlencoded"),
	("content-type", "image/gif"),
	("content-type", "image/jpeg"),
	("content-type", "image/png"),
	("content-type", "text/css"),
	("content-type", "text/html; charset=utf-8"),
	("content-type", "text/plain"),
	("content-type", "text/plain;charset=utf-8"),
	("range", "bytes=0-"),
	("strict-transport-security", "max-age=31536000"),
	("strict-transport-security", "max-age=31536000; includesubdomains"),
	(
		"strict-transport-security",
		"max-age=31536000; includesubdomains; preload",
	),
	("vary", "accept-encoding"),
	("vary", "origin"),
	("x-content-type-options", "nosniff"),
	("x-xss-protection", "1; mode=block"),
	(":status", "100"),
	(":status", "204"),
	(":status", "206"),
	(":status", "302"),
	(":status", "400"),
	(":status", "403"),
	(":status", "421"),
	(":status", "425"),
	(":status", "500"),
	("accept-language", ""),
	("access-control-allow-credentials", "FALSE"),
	("access-control-allow-credentials", "TRUE"),
	("access-control-allow-headers", "*"),
	("access-control-allow-methods", "get"),
	("access-control-allow-methods", "get, post, options"),
	("access-control-allow-methods", "options"),
	("access-control-expose-headers", "content-length"),
	("access-control-request-headers", "content-type"),
	("access-control-request-method", "get"),
	("access-control-request-method", "post"),
	("alt-svc", "clear"),
	("authorization", ""),
	(
		"content-security-policy",
		"script-src 'none'; object-src 'none'; base-uri 'none'",
	),
	("early-data", "1"),
	("expect-ct", ""),
	("forwarded", ""),
	("if-range", ""),
	("origin", ""),
	("purpose", "prefetch"),
	("server", ""),
	("timing-allow-origin", "*"),
	("upgrade-insecure-requests", "1"),
	("user-agent", ""),
	("x-forwarded-for", ""),
	("x-frame-options", "deny"),
	("x-frame-options", "sameorigin"),
];

/// HPACK's Huffman code (RFC 7541 Appendix B) as the code length of each byte value; the code is
/// canonical (codes of one length are consecutive, in symbol order, after the shorter ones), so
/// the lengths are the whole table. EOS (256) is 30 bits of ones.
pub const HUFFMAN_LENGTHS: [u8; 256] = [
	13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28,
	28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12,
	10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6,
	5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22,
	22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20,
	22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
	26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28,
	27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28,
	27, 27, 27, 27, 27, 26,
];

/// The canonical Huffman decoding tables: per length, the first code and the index of its
/// first symbol in `symbols`.
struct Huffman {
	first_code: [u32; 31],
	first_index: [u16; 31],
	count: [u16; 31],
	symbols: Vec<u8>,
}

fn huffman() -> &'static Huffman {
	static TABLE: OnceLock<Huffman> = OnceLock::new();
	TABLE.get_or_init(|| {
		let mut count = [0u16; 31];
		for &len in &HUFFMAN_LENGTHS {
			count[len as usize] += 1;
		}
		let mut symbols: Vec<u8> = (0..=255).collect();
		symbols.sort_by_key(|&s| HUFFMAN_LENGTHS[s as usize]);
		let (mut first_code, mut first_index) = ([0u32; 31], [0u16; 31]);
		let (mut code, mut index) = (0u32, 0u16);
		for len in 1..31 {
			first_code[len] = code;
			first_index[len] = index;
			code = (code + u32::from(count[len])) << 1;
			index += count[len];
		}
		Huffman {
			first_code,
			first_index,
			count,
			symbols,
		}
	})
}

/// Decodes a Huffman-coded string: the padding must be fewer than 8 bits, all ones (a prefix of
/// EOS), and EOS itself must not appear.
pub fn huffman_decode(input: &[u8]) -> Result<Vec<u8>, Error> {
	let table = huffman();
	let mut out = Vec::with_capacity(input.len() * 8 / 5);
	let (mut code, mut len) = (0u32, 0usize);
	for byte in input {
		for bit in (0..8).rev() {
			code = (code << 1) | u32::from((byte >> bit) & 1);
			len += 1;
			if len > 30 {
				return Err(Error::Qpack);
			}
			let offset = code.wrapping_sub(table.first_code[len]);
			if code >= table.first_code[len] && offset < u32::from(table.count[len]) {
				out.push(table.symbols[(table.first_index[len] as u32 + offset) as usize]);
				code = 0;
				len = 0;
			}
		}
	}
	// Leftover bits: padding, fewer than 8, all ones.
	if len >= 8 || code != (1 << len) - 1 {
		return Err(Error::Qpack);
	}
	Ok(out)
}

/// Takes an integer with an `n`-bit prefix (RFC 7541 §5.1) whose first byte is `buf[0]`.
fn get_prefixed(buf: &mut &[u8], n: u32) -> Result<u64, Error> {
	let first = *buf.first().ok_or(Error::Qpack)?;
	*buf = &buf[1..];
	let max = (1u64 << n) - 1;
	let mut value = u64::from(first) & max;
	if value < max {
		return Ok(value);
	}
	let mut shift = 0;
	loop {
		let byte = *buf.first().ok_or(Error::Qpack)?;
		*buf = &buf[1..];
		if shift > 56 {
			return Err(Error::Qpack);
		}
		value += u64::from(byte & 0x7f) << shift;
		shift += 7;
		if byte & 0x80 == 0 {
			return Ok(value);
		}
	}
}

/// Appends an integer with an `n`-bit prefix, the byte's upper bits being `flags`.
fn put_prefixed(out: &mut Vec<u8>, n: u32, flags: u8, value: u64) {
	let max = (1u64 << n) - 1;
	if value < max {
		out.push(flags | value as u8);
		return;
	}
	out.push(flags | max as u8);
	let mut rest = value - max;
	while rest >= 0x80 {
		out.push((rest as u8 & 0x7f) | 0x80);
		rest >>= 7;
	}
	out.push(rest as u8);
}

/// Takes a string literal whose length has an `n`-bit prefix, the Huffman flag being the bit
/// just above it.
fn get_string(buf: &mut &[u8], n: u32) -> Result<String, Error> {
	let huffman_coded = buf.first().ok_or(Error::Qpack)? & (1 << n) != 0;
	let len = get_prefixed(buf, n)? as usize;
	let (bytes, rest) = buf.split_at_checked(len).ok_or(Error::Qpack)?;
	*buf = rest;
	let bytes = if huffman_coded {
		huffman_decode(bytes)?
	} else {
		bytes.to_vec()
	};
	String::from_utf8(bytes).map_err(|_| Error::Qpack)
}

/// Decodes a field section (a HEADERS frame's payload) that refers to the static table only.
/// Names and values count against [`MAX_FIELD_SECTION`] as RFC 9114 §4.2.2 sizes them (+32 each).
pub fn decode_fields(mut block: &[u8]) -> Result<Vec<(String, String)>, Error> {
	// The prefix: Required Insert Count (8-bit prefix) must be 0 without a dynamic table; the
	// Base (sign + 7-bit prefix) then means nothing.
	if get_prefixed(&mut block, 8)? != 0 {
		return Err(Error::Qpack);
	}
	get_prefixed(&mut block, 7)?;
	let mut fields = Vec::new();
	let mut size = 0;
	while let Some(&first) = block.first() {
		let field = if first & 0x80 != 0 {
			// Indexed field line; T (0x40) set is the static table.
			if first & 0x40 == 0 {
				return Err(Error::Qpack);
			}
			let (name, value) = static_entry(get_prefixed(&mut block, 6)?)?;
			(name.to_owned(), value.to_owned())
		} else if first & 0x40 != 0 {
			// Literal with a name reference: N (0x20), T (0x10), 4-bit index.
			if first & 0x10 == 0 {
				return Err(Error::Qpack);
			}
			let (name, _) = static_entry(get_prefixed(&mut block, 4)?)?;
			(name.to_owned(), get_string(&mut block, 7)?)
		} else if first & 0x20 != 0 {
			// Literal with a literal name: N (0x10), H (0x08), 3-bit length.
			let name = get_string(&mut block, 3)?;
			(name, get_string(&mut block, 7)?)
		} else {
			// Post-base references: the dynamic table.
			return Err(Error::Qpack);
		};
		size += field.0.len() + field.1.len() + 32;
		if size > MAX_FIELD_SECTION {
			return Err(Error::TooLong);
		}
		fields.push(field);
	}
	Ok(fields)
}

fn static_entry(index: u64) -> Result<(&'static str, &'static str), Error> {
	STATIC_TABLE.get(index as usize).copied().ok_or(Error::Qpack)
}

/// Encodes a field section: a whole static entry where one matches, else a name reference where
/// one does, else literals (never Huffman-coded).
pub fn encode_fields(fields: &[(&str, &str)]) -> Vec<u8> {
	let mut out = vec![0, 0];
	for (name, value) in fields {
		if let Some(index) = STATIC_TABLE.iter().position(|entry| entry == &(*name, *value)) {
			put_prefixed(&mut out, 6, 0xc0, index as u64);
		} else if let Some(index) = STATIC_TABLE.iter().position(|(n, _)| n == name) {
			put_prefixed(&mut out, 4, 0x50, index as u64);
			put_prefixed(&mut out, 7, 0, value.len() as u64);
			out.extend_from_slice(value.as_bytes());
		} else {
			put_prefixed(&mut out, 3, 0x20, name.len() as u64);
			out.extend_from_slice(name.as_bytes());
			put_prefixed(&mut out, 7, 0, value.len() as u64);
			out.extend_from_slice(value.as_bytes());
		}
	}
	out
}

/// The request header listing the sub-protocols a client offers.
pub const AVAILABLE_PROTOCOLS: &str = "wt-available-protocols";
/// The response header naming the one the server chose.
pub const PROTOCOL: &str = "wt-protocol";

/// An extended CONNECT for a WebTransport session (RFC 9220, draft-ietf-webtrans-http3 §3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
	/// `:authority`: host and port.
	pub authority: String,
	/// `:path`: path and query (the session's path, `?jwt=` included).
	pub path: String,
	/// The sub-protocols offered, in the client's order of preference.
	pub protocols: Vec<String>,
	/// `origin`, when a browser sent one.
	pub origin: Option<String>,
}

impl ConnectRequest {
	/// Checks a decoded field section: `:method CONNECT`, `:protocol webtransport`,
	/// `:scheme https`, `:authority` and `:path` present; pseudo-headers once each and before
	/// the rest.
	pub fn from_fields(fields: &[(String, String)]) -> Result<Self, Error> {
		let (mut method, mut protocol, mut scheme, mut authority, mut path) = (None, None, None, None, None);
		let mut protocols = Vec::new();
		let mut origin = None;
		let mut regular = false;
		for (name, value) in fields {
			let slot = match name.as_str() {
				":method" => &mut method,
				":protocol" => &mut protocol,
				":scheme" => &mut scheme,
				":authority" => &mut authority,
				":path" => &mut path,
				pseudo if pseudo.starts_with(':') => return Err(Error::Message("unknown pseudo-header")),
				AVAILABLE_PROTOCOLS => {
					regular = true;
					protocols.extend(parse_string_list(value)?);
					continue;
				}
				"origin" => {
					regular = true;
					origin = Some(value.clone());
					continue;
				}
				_ => {
					regular = true;
					continue;
				}
			};
			if regular {
				return Err(Error::Message("a pseudo-header after a header"));
			}
			if slot.replace(value.clone()).is_some() {
				return Err(Error::Message("a repeated pseudo-header"));
			}
		}
		if method.as_deref() != Some("CONNECT") {
			return Err(Error::Message("not a CONNECT"));
		}
		if protocol.as_deref() != Some("webtransport") {
			return Err(Error::Message(":protocol is not webtransport"));
		}
		if scheme.as_deref() != Some("https") {
			return Err(Error::Message(":scheme is not https"));
		}
		let authority = authority
			.filter(|a| !a.is_empty())
			.ok_or(Error::Message("no :authority"))?;
		let path = path.filter(|p| p.starts_with('/')).ok_or(Error::Message("no :path"))?;
		Ok(Self {
			authority,
			path,
			protocols,
			origin,
		})
	}

	/// The HEADERS frame.
	pub fn encode(&self, out: &mut Vec<u8>) {
		let list = format_string_list(&self.protocols);
		let mut fields = vec![
			(":method", "CONNECT"),
			(":protocol", "webtransport"),
			(":scheme", "https"),
			(":authority", self.authority.as_str()),
			(":path", self.path.as_str()),
		];
		if !self.protocols.is_empty() {
			fields.push((AVAILABLE_PROTOCOLS, list.as_str()));
		}
		if let Some(origin) = &self.origin {
			fields.push(("origin", origin.as_str()));
		}
		put_frame(out, frame_type::HEADERS, &encode_fields(&fields));
	}
}

/// The answer to a CONNECT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectResponse {
	/// `:status`: 200 opens the session.
	pub status: u16,
	/// The sub-protocol chosen (one of those offered).
	pub protocol: Option<String>,
}

impl ConnectResponse {
	/// The HEADERS frame: `:status`, `sec-webtransport-http3-draft: draft02` (what draft-02 era
	/// peers look for) and `wt-protocol` when one was chosen.
	pub fn encode(&self, out: &mut Vec<u8>) {
		let status = self.status.to_string();
		let chosen = self.protocol.as_deref().map(format_string);
		let mut fields = vec![
			(":status", status.as_str()),
			("sec-webtransport-http3-draft", "draft02"),
		];
		if let Some(chosen) = &chosen {
			fields.push((PROTOCOL, chosen.as_str()));
		}
		put_frame(out, frame_type::HEADERS, &encode_fields(&fields));
	}

	/// Reads a decoded field section.
	pub fn from_fields(fields: &[(String, String)]) -> Result<Self, Error> {
		let status = fields
			.iter()
			.find(|(name, _)| name == ":status")
			.and_then(|(_, value)| value.parse().ok())
			.ok_or(Error::Message("no :status"))?;
		let protocol = match fields.iter().find(|(name, _)| name == PROTOCOL) {
			Some((_, value)) => Some(parse_string(value.trim())?.0),
			None => None,
		};
		Ok(Self { status, protocol })
	}
}

/// An RFC 8941 sf-string from the front of `text`, and what follows it.
fn parse_string(text: &str) -> Result<(String, &str), Error> {
	let invalid = Error::Message("not a structured-field string");
	let Some(rest) = text.strip_prefix('"') else {
		return Err(invalid);
	};
	let mut out = String::new();
	let mut chars = rest.char_indices();
	while let Some((at, c)) = chars.next() {
		match c {
			'"' => return Ok((out, &rest[at + 1..])),
			'\\' => match chars.next() {
				Some((_, escaped @ ('"' | '\\'))) => out.push(escaped),
				_ => return Err(invalid),
			},
			' '..='~' => out.push(c),
			_ => return Err(invalid),
		}
	}
	Err(invalid)
}

/// An RFC 8941 list of sf-strings (`"a", "b"`); parameters after a member are skipped. Members
/// of other types are refused, as the draft requires strings.
pub fn parse_string_list(text: &str) -> Result<Vec<String>, Error> {
	let mut out = Vec::new();
	let mut rest = text.trim_matches([' ', '\t']);
	while !rest.is_empty() {
		let (member, after) = parse_string(rest)?;
		out.push(member);
		// Skip parameters (`;key=value`) up to the next comma.
		let after = after.split_once(',').map_or("", |(params, next)| {
			let _ = params;
			next
		});
		rest = after.trim_start_matches([' ', '\t']);
	}
	Ok(out)
}

/// An sf-string.
pub fn format_string(text: &str) -> String {
	let mut out = String::with_capacity(text.len() + 2);
	out.push('"');
	for c in text.chars().filter(|c| (' '..='~').contains(c)) {
		if c == '"' || c == '\\' {
			out.push('\\');
		}
		out.push(c);
	}
	out.push('"');
	out
}

/// An sf-list of strings.
pub fn format_string_list(items: &[String]) -> String {
	items
		.iter()
		.map(|item| format_string(item))
		.collect::<Vec<_>>()
		.join(", ")
}

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

	fn hex(text: &str) -> Vec<u8> {
		let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
		digits
			.chunks(2)
			.map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
			.collect()
	}

	#[test]
	fn huffman_decodes_the_rfc_7541_examples() {
		// RFC 7541 C.4.1-C.4.3 and C.6.1.
		let cases = [
			("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
			("a8eb 1064 9cbf", "no-cache"),
			("25a8 49e9 5ba9 7d7f", "custom-key"),
			("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
			("6402", "302"),
			("aec3 771a 4b", "private"),
			(
				"d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
				"Mon, 21 Oct 2013 20:13:21 GMT",
			),
			("9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3", "https://www.example.com"),
		];
		for (coded, text) in cases {
			assert_eq!(huffman_decode(&hex(coded)).unwrap(), text.as_bytes(), "{text}");
		}
	}

	#[test]
	fn huffman_refuses_bad_padding_and_eos() {
		// "0" is 00000; padded with zeros instead of ones.
		assert_eq!(huffman_decode(&[0b0000_0000]), Err(Error::Qpack));
		// Eight bits of padding.
		assert_eq!(huffman_decode(&[0b0000_0111, 0xff]), Err(Error::Qpack));
		// EOS: 30 ones.
		assert_eq!(huffman_decode(&[0xff, 0xff, 0xff, 0xff]), Err(Error::Qpack));
		assert_eq!(huffman_decode(&[0b0000_0111]).unwrap(), b"0");
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
	fn settings_round_trip_and_say_webtransport() {
		let mut frame = Vec::new();
		Settings::webtransport().encode(&mut frame);
		let mut buf = frame.as_slice();
		let (kind, payload) = get_frame(&mut buf, MAX_FRAME).unwrap();
		assert_eq!(kind, frame_type::SETTINGS);
		let settings = Settings::decode(payload).unwrap();
		assert_eq!(settings, Settings::webtransport());
		assert!(settings.supports_webtransport());
		// A repeated identifier is an error; GREASE is skipped.
		assert_eq!(Settings::decode(&[0x08, 0x01, 0x08, 0x01]), Err(Error::Settings));
		assert_eq!(Settings::decode(&[0x21, 0x05]).unwrap(), Settings::default());
		assert!(!Settings(vec![(setting::H3_DATAGRAM, 1)]).supports_webtransport());
	}

	#[test]
	fn settings_of_a_full_frame_keep_their_order_and_refuse_a_distant_repeat() {
		// 4 KiB of distinct two-byte identifiers (GREASE among them, skipped) with one-byte values.
		let mut payload = Vec::new();
		let mut expected = Vec::new();
		for id in 0x40..0x40 + 1365u64 {
			put_varint(&mut payload, id);
			put_varint(&mut payload, id & 0x3f);
			if !is_grease(id) {
				expected.push((id, id & 0x3f));
			}
		}
		assert_eq!(Settings::decode(&payload), Ok(Settings(expected)));
		// The first one kept (0x40 is GREASE) again, at the far end.
		put_varint(&mut payload, 0x41);
		put_varint(&mut payload, 0);
		assert_eq!(Settings::decode(&payload), Err(Error::Settings));
		// Repeated GREASE is still skipped, not refused.
		assert_eq!(Settings::decode(&[0x21, 0x01, 0x21, 0x02]), Ok(Settings::default()));
	}

	#[test]
	fn http2_only_settings_are_refused_and_their_neighbours_kept() {
		for id in [0x00, 0x02, 0x03, 0x04, 0x05] {
			assert_eq!(
				Settings::decode(&[0x33, 0x01, id, 0x00]),
				Err(Error::Settings),
				"{id:#x}"
			);
		}
		// 0x01 and 0x06 have HTTP/3 meanings (QPACK's table capacity, the field section size).
		assert_eq!(
			Settings::decode(&[0x01, 0x00, 0x06, 0x10]),
			Ok(Settings(vec![(0x01, 0x00), (0x06, 0x10)]))
		);
	}

	#[test]
	fn a_chromium_style_connect_decodes() {
		// The walk-through's example (docs/moq-quic.md): indexed :method CONNECT and :scheme
		// https, :authority and :path by name reference, :protocol and wt-available-protocols
		// with literal names.
		let mut block = hex("0000 cf d7");
		block.extend_from_slice(&[0x50, 18]);
		block.extend_from_slice(b"relay.example:4443");
		block.extend_from_slice(&[0x51, 5]);
		block.extend_from_slice(b"/anon");
		block.extend_from_slice(&[0x27, 0x02]);
		block.extend_from_slice(b":protocol");
		block.push(12);
		block.extend_from_slice(b"webtransport");
		block.extend_from_slice(&[0x27, 0x0f]);
		block.extend_from_slice(b"wt-available-protocols");
		let list = b"\"moq-lite-05\", \"moq-lite-04\"";
		block.push(list.len() as u8);
		block.extend_from_slice(list);
		let fields = decode_fields(&block).unwrap();
		let request = ConnectRequest::from_fields(&fields).unwrap();
		assert_eq!(request.authority, "relay.example:4443");
		assert_eq!(request.path, "/anon");
		assert_eq!(request.protocols, ["moq-lite-05", "moq-lite-04"]);
	}

	#[test]
	fn requests_and_responses_round_trip() {
		let request = ConnectRequest {
			authority: "localhost:4443".into(),
			path: "/live?jwt=abc".into(),
			protocols: vec!["moq-lite-05".into(), "moq-lite-04".into()],
			origin: Some("https://example.com".into()),
		};
		let mut frame = Vec::new();
		request.encode(&mut frame);
		let mut buf = frame.as_slice();
		let (kind, payload) = get_frame(&mut buf, MAX_FIELD_SECTION).unwrap();
		assert_eq!(kind, frame_type::HEADERS);
		assert_eq!(
			ConnectRequest::from_fields(&decode_fields(payload).unwrap()).unwrap(),
			request
		);

		let response = ConnectResponse {
			status: 200,
			protocol: Some("moq-lite-05".into()),
		};
		let mut frame = Vec::new();
		response.encode(&mut frame);
		let mut buf = frame.as_slice();
		let (_, payload) = get_frame(&mut buf, MAX_FIELD_SECTION).unwrap();
		// The prefix, then `:status 200` as static entry 25: one byte.
		assert_eq!(&payload[..3], &[0, 0, 0xc0 | 25]);
		assert_eq!(
			ConnectResponse::from_fields(&decode_fields(payload).unwrap()).unwrap(),
			response
		);
	}

	#[test]
	fn malformed_connects_are_refused() {
		let fields = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
			pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
		};
		let good = [
			(":method", "CONNECT"),
			(":protocol", "webtransport"),
			(":scheme", "https"),
			(":authority", "x"),
			(":path", "/"),
		];
		assert!(ConnectRequest::from_fields(&fields(&good)).is_ok());
		for (index, bad) in [(0, "GET"), (1, "websocket"), (2, "http"), (3, ""), (4, "x")] {
			let mut pairs = good;
			pairs[index].1 = bad;
			assert!(ConnectRequest::from_fields(&fields(&pairs)).is_err(), "{pairs:?}");
		}
		let mut repeated = good.to_vec();
		repeated.push((":path", "/again"));
		assert!(ConnectRequest::from_fields(&fields(&repeated)).is_err());
		// A dynamic-table reference.
		assert_eq!(decode_fields(&[0, 0, 0x80]), Err(Error::Qpack));
		assert_eq!(decode_fields(&[1, 0]), Err(Error::Qpack));
		// A string running past the end.
		assert_eq!(decode_fields(&[0, 0, 0x51, 9, b'/']), Err(Error::Qpack));
	}

	#[test]
	fn structured_field_strings() {
		assert_eq!(
			parse_string_list(r#""moq-lite-05", "a\"b";q=1,"c""#).unwrap(),
			["moq-lite-05", "a\"b", "c"]
		);
		assert!(parse_string_list("token").is_err());
		assert_eq!(format_string("a\"b"), r#""a\"b""#);
		assert_eq!(
			parse_string_list(&format_string_list(&["x".into(), "y".into()])).unwrap(),
			["x", "y"]
		);
	}

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
