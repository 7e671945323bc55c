//! QPACK field sections with the static table only (RFC 9204): what an extended CONNECT and
//! its response need. Strings we encode are never Huffman-coded; strings we decode may be.

use super::huffman::huffman_decode;
use super::{Error, MAX_FIELD_SECTION};

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
