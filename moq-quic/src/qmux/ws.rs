//! WebSocket (RFC 6455), as QMux rides it: the opening handshake's answer (and a client's
//! request, for our own client), and frames, bounded. No extensions are negotiated, so the
//! reserved bits are always zero; a client's frames must be masked and a server's must not be.
//!
//! A message is at most [`MAX_MESSAGE`] bytes (a QMux record body, with room to spare); a longer
//! one is refused as it is announced, before anything of it is buffered. Control frames carry
//! 125 bytes at most and are never fragmented (§5.5).

use bytes::{Buf, Bytes, BytesMut};

/// The GUID a server hashes with the client's key (§1.3).
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The largest message taken: a QMux record body of the default `max_record_size` (16,382) is
/// what peers send; 64 KiB leaves room for one that advertises more.
pub const MAX_MESSAGE: usize = 64 << 10;

/// Frame opcodes.
pub mod opcode {
	/// A continuation of a fragmented message.
	pub const CONTINUATION: u8 = 0x0;
	/// Text: never valid for QMux.
	pub const TEXT: u8 = 0x1;
	/// Binary: a QMux record body.
	pub const BINARY: u8 = 0x2;
	/// Close.
	pub const CLOSE: u8 = 0x8;
	/// Ping.
	pub const PING: u8 = 0x9;
	/// Pong.
	pub const PONG: u8 = 0xa;
}

/// Close status codes (§7.4.1).
pub mod status {
	/// A normal close.
	pub const NORMAL: u16 = 1000;
	/// A protocol error.
	pub const PROTOCOL_ERROR: u16 = 1002;
	/// A kind of data the endpoint does not take (text, for QMux).
	pub const UNSUPPORTED_DATA: u16 = 1003;
	/// A message too big to process.
	pub const TOO_BIG: u16 = 1009;
}

/// The `Sec-WebSocket-Accept` answering a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
	let mut context = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
	context.update(key.trim().as_bytes());
	context.update(GUID.as_bytes());
	data_encoding::BASE64.encode(context.finish().as_ref())
}

/// A client's upgrade request, as a server reads it from the request's headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upgrade {
	/// `Sec-WebSocket-Key`.
	pub key: String,
	/// The sub-protocols offered, in the client's order, each a whole token.
	pub protocols: Vec<String>,
}

impl Upgrade {
	/// Reads an upgrade from a GET's headers: `None` if it asks for none (no `Upgrade:
	/// websocket`), `Err(400)` if it asks wrongly (no key, a version other than 13, no
	/// `Connection: upgrade`).
	pub fn from_headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Result<Option<Self>, u16> {
		let (mut upgrade, mut connection, mut version) = (false, false, false);
		let mut key = None;
		let mut protocols = Vec::new();
		for (name, value) in headers {
			let Ok(value) = std::str::from_utf8(value) else {
				continue;
			};
			let tokens = || value.split(',').map(str::trim).filter(|t| !t.is_empty());
			if name.eq_ignore_ascii_case("upgrade") {
				upgrade |= tokens().any(|t| t.eq_ignore_ascii_case("websocket"));
			} else if name.eq_ignore_ascii_case("connection") {
				connection |= tokens().any(|t| t.eq_ignore_ascii_case("upgrade"));
			} else if name.eq_ignore_ascii_case("sec-websocket-version") {
				version |= value.trim() == "13";
			} else if name.eq_ignore_ascii_case("sec-websocket-key") {
				key = Some(value.trim().to_owned());
			} else if name.eq_ignore_ascii_case("sec-websocket-protocol") {
				protocols.extend(tokens().map(str::to_owned));
			}
		}
		if !upgrade {
			return Ok(None);
		}
		match key {
			Some(key) if connection && version && key.len() == 24 => Ok(Some(Self { key, protocols })),
			_ => Err(400),
		}
	}
}

/// The server's `101 Switching Protocols` for an upgrade, choosing `protocol`.
pub fn response(upgrade: &Upgrade, protocol: &str) -> Vec<u8> {
	format!(
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n",
		accept_key(&upgrade.key)
	)
	.into_bytes()
}

/// A client's upgrade request for `target` at `host`, offering `protocols`, with `key` (16
/// random bytes, base64).
pub fn request(host: &str, target: &str, key: &str, protocols: &[&str]) -> Vec<u8> {
	format!(
		"GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {}\r\n\r\n",
		protocols.join(", ")
	)
	.into_bytes()
}

/// Appends a frame: FIN set, unmasked if `mask` is `None` (a server's), else masked with it (a
/// client's).
pub fn encode(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>, out: &mut Vec<u8>) {
	out.push(0x80 | opcode);
	let mask_bit = if mask.is_some() { 0x80 } else { 0 };
	match payload.len() {
		len @ 0..=125 => out.push(mask_bit | len as u8),
		len @ 126..=0xffff => {
			out.push(mask_bit | 126);
			out.extend_from_slice(&(len as u16).to_be_bytes());
		}
		len => {
			out.push(mask_bit | 127);
			out.extend_from_slice(&(len as u64).to_be_bytes());
		}
	}
	match mask {
		None => out.extend_from_slice(payload),
		Some(mask) => {
			out.extend_from_slice(&mask);
			out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
		}
	}
}

/// A close frame's payload: the status, and a reason cut to fit the 125 bytes a control frame has.
pub fn close_payload(status: u16, reason: &str) -> Vec<u8> {
	let mut payload = status.to_be_bytes().to_vec();
	let mut end = reason.len().min(123);
	while !reason.is_char_boundary(end) {
		end -= 1;
	}
	payload.extend_from_slice(&reason.as_bytes()[..end]);
	payload
}

/// What came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
	/// A whole binary message.
	Message(Bytes),
	/// A ping, to answer with a pong carrying the same payload.
	Ping(Bytes),
	/// A pong.
	Pong,
	/// A close, with its status if it had one.
	Close(Option<u16>),
}

/// Input that ends the connection, with the status to close with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WsError {
	/// Against the framing rules (§5): an unmasked client frame, reserved bits, a fragmented or
	/// long control frame, a continuation with nothing to continue, a new message inside one.
	Protocol(&'static str),
	/// A text message: QMux is binary.
	Text,
	/// A message over [`MAX_MESSAGE`].
	TooBig,
}

impl WsError {
	/// The close status it calls for.
	pub fn status(self) -> u16 {
		match self {
			Self::Protocol(_) => status::PROTOCOL_ERROR,
			Self::Text => status::UNSUPPORTED_DATA,
			Self::TooBig => status::TOO_BIG,
		}
	}
}

impl std::fmt::Display for WsError {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		match self {
			Self::Protocol(why) => write!(f, "websocket: {why}"),
			Self::Text => f.write_str("websocket: text frames are not valid for QMux"),
			Self::TooBig => f.write_str("websocket: a message past the limit"),
		}
	}
}

/// Reads frames from the bytes of a connection, one event at a time. It holds at most one
/// frame's header and payload and one message being reassembled ([`MAX_MESSAGE`] each).
pub struct Decoder {
	buf: BytesMut,
	/// Frames come masked (a server reading a client) or not (a client reading a server).
	masked: bool,
	/// The message being reassembled from its fragments.
	message: Option<BytesMut>,
}

impl Decoder {
	/// A server's decoder (`masked`: frames must be) or a client's.
	pub fn new(masked: bool) -> Self {
		Self {
			buf: BytesMut::new(),
			masked,
			message: None,
		}
	}

	/// How many more bytes it may take now: a reader reads at most this much (so what a peer
	/// sends ahead waits in the socket, not here).
	pub fn room(&self) -> usize {
		(MAX_MESSAGE + 14).saturating_sub(self.buf.len()).max(1)
	}

	/// Bytes that came.
	pub fn push(&mut self, data: &[u8]) {
		self.buf.extend_from_slice(data);
	}

	/// The next event, if a whole frame has come.
	pub fn next_event(&mut self) -> Result<Option<Event>, WsError> {
		loop {
			let Some((fin, opcode, payload)) = self.frame()? else {
				return Ok(None);
			};
			match opcode {
				opcode::PING => return Ok(Some(Event::Ping(payload.freeze()))),
				opcode::PONG => return Ok(Some(Event::Pong)),
				opcode::CLOSE => {
					let status = (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
					return Ok(Some(Event::Close(status)));
				}
				opcode::TEXT => return Err(WsError::Text),
				opcode::BINARY if self.message.is_some() => {
					return Err(WsError::Protocol("a message inside a message"));
				}
				opcode::CONTINUATION if self.message.is_none() => {
					return Err(WsError::Protocol("a continuation of nothing"));
				}
				opcode::BINARY | opcode::CONTINUATION => {
					let mut message = self.message.take().unwrap_or_default();
					if message.len() + payload.len() > MAX_MESSAGE {
						return Err(WsError::TooBig);
					}
					if message.is_empty() {
						message = payload;
					} else {
						message.extend_from_slice(&payload);
					}
					if fin {
						return Ok(Some(Event::Message(message.freeze())));
					}
					self.message = Some(message);
				}
				_ => return Err(WsError::Protocol("an unknown opcode")),
			}
		}
	}

	/// The next whole frame: FIN, opcode, unmasked payload.
	fn frame(&mut self) -> Result<Option<(bool, u8, BytesMut)>, WsError> {
		let buf = &self.buf[..];
		if buf.len() < 2 {
			return Ok(None);
		}
		let (first, second) = (buf[0], buf[1]);
		if first & 0x70 != 0 {
			return Err(WsError::Protocol("reserved bits set"));
		}
		let (fin, opcode) = (first & 0x80 != 0, first & 0x0f);
		let masked = second & 0x80 != 0;
		if masked != self.masked {
			return Err(WsError::Protocol(if self.masked {
				"an unmasked client frame"
			} else {
				"a masked server frame"
			}));
		}
		let (len, mut at) = match second & 0x7f {
			126 if buf.len() >= 4 => (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
			127 if buf.len() >= 10 => (u64::from_be_bytes(buf[2..10].try_into().expect("eight bytes")), 10),
			126 | 127 => return Ok(None),
			len => (u64::from(len), 2),
		};
		if opcode & 0x08 != 0 && (len > 125 || !fin) {
			return Err(WsError::Protocol("a long or fragmented control frame"));
		}
		if len > MAX_MESSAGE as u64 {
			return Err(WsError::TooBig);
		}
		let len = len as usize;
		let mask = if masked {
			let Some(mask) = buf.get(at..at + 4) else {
				return Ok(None);
			};
			at += 4;
			Some([mask[0], mask[1], mask[2], mask[3]])
		} else {
			None
		};
		if buf.len() < at + len {
			return Ok(None);
		}
		self.buf.advance(at);
		// A buffer of its own, not a slice of the decoder's: what the core keeps of a message
		// (a stream's unread bytes) then holds that message, never the decoder's larger buffer.
		let mut payload = BytesMut::from(&self.buf[..len]);
		self.buf.advance(len);
		if let Some(mask) = mask {
			for (i, byte) in payload.iter_mut().enumerate() {
				*byte ^= mask[i % 4];
			}
		}
		Ok(Some((fin, opcode, payload)))
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn the_accept_key_is_rfc_6455s_example() {
		// RFC 6455 §1.3.
		assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	}

	#[test]
	fn an_upgrade_is_read_from_its_headers() {
		let headers = [
			("Host", &b"relay"[..]),
			("Upgrade", b"websocket"),
			("Connection", b"keep-alive, Upgrade"),
			("Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
			("Sec-WebSocket-Version", b"13"),
			("Sec-WebSocket-Protocol", b"qmux-01.moq-lite-05, qmux-00.moq-lite-05"),
			("sec-websocket-protocol", b"webtransport"),
		];
		let upgrade = Upgrade::from_headers(headers).unwrap().unwrap();
		assert_eq!(
			upgrade.protocols,
			["qmux-01.moq-lite-05", "qmux-00.moq-lite-05", "webtransport"]
		);
		let answer = String::from_utf8(response(&upgrade, "qmux-01.moq-lite-05")).unwrap();
		assert!(answer.starts_with("HTTP/1.1 101 "), "{answer}");
		assert!(answer.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
		assert!(answer.contains("Sec-WebSocket-Protocol: qmux-01.moq-lite-05\r\n"));
		assert_eq!(
			Upgrade::from_headers([("Host", &b"relay"[..])]),
			Ok(None),
			"a plain GET"
		);
		let no_key = [
			("Upgrade", &b"websocket"[..]),
			("Connection", b"upgrade"),
			("Sec-WebSocket-Version", b"13"),
		];
		assert_eq!(Upgrade::from_headers(no_key), Err(400));
		let old = [
			("Upgrade", &b"websocket"[..]),
			("Connection", b"upgrade"),
			("Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
			("Sec-WebSocket-Version", b"8"),
		];
		assert_eq!(Upgrade::from_headers(old), Err(400));
	}

	fn client_frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
		let mut out = Vec::new();
		encode(opcode, payload, Some([1, 2, 3, 4]), &mut out);
		if !fin {
			out[0] &= 0x7f;
		}
		out
	}

	#[test]
	fn masked_frames_reassemble_into_messages_between_control_frames() {
		let mut decoder = Decoder::new(true);
		let mut wire = client_frame(opcode::BINARY, false, b"hel");
		wire.extend(client_frame(opcode::PING, true, b"p"));
		wire.extend(client_frame(opcode::CONTINUATION, true, b"lo"));
		wire.extend(client_frame(opcode::BINARY, true, &[7; 300]));
		// A byte at a time: nothing comes before its frame is whole.
		let mut events = Vec::new();
		for byte in wire {
			decoder.push(&[byte]);
			while let Some(event) = decoder.next_event().unwrap() {
				events.push(event);
			}
		}
		assert_eq!(
			events,
			[
				Event::Ping(Bytes::from_static(b"p")),
				Event::Message(Bytes::from_static(b"hello")),
				Event::Message(Bytes::from(vec![7; 300])),
			]
		);
		decoder.push(&client_frame(opcode::CLOSE, true, &close_payload(1000, "bye")));
		assert_eq!(decoder.next_event(), Ok(Some(Event::Close(Some(1000)))));
	}

	#[test]
	fn bad_frames_end_the_connection_with_their_status() {
		let bad = |bytes: Vec<u8>| {
			let mut decoder = Decoder::new(true);
			decoder.push(&bytes);
			decoder.next_event().unwrap_err()
		};
		let mut unmasked = Vec::new();
		encode(opcode::BINARY, b"x", None, &mut unmasked);
		assert_eq!(bad(unmasked).status(), status::PROTOCOL_ERROR);
		assert_eq!(bad(client_frame(opcode::TEXT, true, b"hi")), WsError::Text);
		assert_eq!(
			bad(client_frame(opcode::PING, false, b"")).status(),
			1002,
			"a fragmented ping"
		);
		assert_eq!(bad(client_frame(opcode::CONTINUATION, true, b"x")).status(), 1002);
		let mut reserved = client_frame(opcode::BINARY, true, b"x");
		reserved[0] |= 0x40;
		assert_eq!(bad(reserved).status(), 1002);
		// A frame announcing more than a message may hold is refused from its header alone.
		let mut huge = vec![0x82, 0x80 | 127];
		huge.extend_from_slice(&(1u64 << 40).to_be_bytes());
		assert_eq!(bad(huge), WsError::TooBig);
		// Fragments that together pass the limit.
		let mut decoder = Decoder::new(true);
		decoder.push(&client_frame(opcode::BINARY, false, &vec![0; MAX_MESSAGE]));
		decoder.push(&client_frame(opcode::CONTINUATION, true, b"x"));
		assert_eq!(decoder.next_event(), Err(WsError::TooBig));
	}

	#[test]
	fn a_server_frame_is_unmasked_and_sized_by_its_length_form() {
		for len in [0, 125, 126, 65_535, 65_536] {
			let mut out = Vec::new();
			encode(opcode::BINARY, &vec![9; len], None, &mut out);
			let header = match len {
				0..=125 => 2,
				126..=65_535 => 4,
				_ => 10,
			};
			assert_eq!(out.len(), header + len);
			assert_eq!(out[0], 0x82);
			assert_eq!(out[1] & 0x80, 0, "unmasked");
			if len <= MAX_MESSAGE {
				let mut decoder = Decoder::new(false);
				decoder.push(&out);
				assert_eq!(
					decoder.next_event().unwrap(),
					Some(Event::Message(Bytes::from(vec![9; len])))
				);
			}
		}
	}
}
