//! QMux records on a byte stream (draft-ietf-quic-qmux-01 and -02): a varint `Size`, then that
//! many bytes of whole frames. Over TCP and TLS the records follow one another; over a
//! WebSocket each message is one record's body instead.

use bytes::Bytes;
use moq_net::coding::{decode_varint, encode_varint};

/// Splits a byte stream into record bodies, holding at most one record and the next's size.
#[derive(Debug)]
pub struct RecordDecoder {
	buf: Vec<u8>,
	/// Where the bytes not yet taken start in `buf`.
	start: usize,
	/// The largest body taken: our `max_record_size`.
	max: usize,
}

/// A record whose size is past our `max_record_size` (FRAME_ENCODING_ERROR), refused from its
/// size alone, before its body is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordTooLarge(pub u64);

impl RecordDecoder {
	/// A decoder taking records of up to `max` bytes.
	pub fn new(max: usize) -> Self {
		Self {
			buf: Vec::new(),
			start: 0,
			max,
		}
	}

	/// Bytes it takes now: what a whole record and its size may still need.
	pub fn room(&self) -> usize {
		(self.max + 8).saturating_sub(self.buf.len() - self.start)
	}

	/// Appends bytes read from the stream.
	pub fn push(&mut self, bytes: &[u8]) {
		if self.start > 0 && self.start * 2 >= self.buf.len() {
			self.buf.drain(..self.start);
			self.start = 0;
		}
		self.buf.extend_from_slice(bytes);
	}

	/// The next whole record's body, in a buffer of its own (what the core keeps of it holds
	/// nothing else); `None` until one is whole.
	pub fn next_record(&mut self) -> Result<Option<Bytes>, RecordTooLarge> {
		let mut rest = &self.buf[self.start..];
		let Ok(size) = decode_varint(&mut rest) else {
			return Ok(None);
		};
		if size > self.max as u64 {
			return Err(RecordTooLarge(size));
		}
		let size = size as usize;
		if rest.len() < size {
			return Ok(None);
		}
		let body = Bytes::copy_from_slice(&rest[..size]);
		self.start = self.buf.len() - (rest.len() - size);
		if self.start == self.buf.len() {
			self.buf.clear();
			self.start = 0;
		}
		Ok(Some(body))
	}
}

/// Appends the record of `body` to `out`.
pub fn encode(body: &[u8], out: &mut Vec<u8>) {
	encode_varint(body.len() as u64, out).expect("a record body below 2^62");
	out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
	use super::super::hex;
	use super::*;

	#[test]
	fn records_split_at_any_byte_and_oversized_ones_are_refused_from_their_size() {
		// Two records: STREAM on client uni stream 2 ("hello"), then a QX_PING request.
		let wire = hex("09 0e 02 00 05 68 65 6c 6c 6f 09 f4 8c 67 52 9e f8 c7 bd 00");
		for cut in 0..wire.len() {
			let mut decoder = RecordDecoder::new(16_382);
			let mut bodies = Vec::new();
			for part in [&wire[..cut], &wire[cut..]] {
				decoder.push(part);
				while let Some(body) = decoder.next_record().unwrap() {
					bodies.push(body);
				}
			}
			assert_eq!(bodies, [&wire[1..10], &wire[11..]], "cut at {cut}");
		}
		let mut out = Vec::new();
		encode(&wire[1..10], &mut out);
		assert_eq!(out, wire[..10]);
		// A two-byte size of 16,383: one past what this decoder takes.
		let mut decoder = RecordDecoder::new(16_382);
		decoder.push(&hex("7f ff"));
		assert_eq!(decoder.next_record(), Err(RecordTooLarge(16_383)));
		assert!(RecordDecoder::new(16_382).room() > 16_382);
	}
}
