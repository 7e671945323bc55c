//! What comes in on the relay's TCP port, told apart by its first bytes:
//!
//! | First bytes                                  | Is                                      |
//! |----------------------------------------------|-----------------------------------------|
//! | `16 03` (a TLS handshake record)             | TLS: by the ALPN the handshake chose, QMux records (`qmux-01.moq-lite-05`, ...) or HTTP over TLS (`http/1.1`, or none: `https://`, `wss://`) |
//! | a varint, then `ff 51 53 30 0d 0a 0d 0a`     | plaintext QMux (`tcp://`): a record holding QX_TRANSPORT_PARAMETERS, which QMux sends first |
//! | anything else                                | HTTP                                    |
//!
//! No HTTP request starts with byte 0x16, and none has 0xff where a QMux record's first frame
//! type begins (a method is ASCII letters), so one look at most nine bytes in decides. The look
//! and the TLS handshake are bounded by the connection's head deadline, like a request head.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use kio::net::TcpStream;
use kio::time::Deadline;
use kio::{Either, race};
use moq_quic::byte_stream::{ByteStream, TlsStream};
use moq_quic::qmux;

use super::{timed, timed_out};

/// The first byte of a TLS record carrying a handshake message (RFC 8446 §5.1).
const TLS_HANDSHAKE: u8 = 0x16;

/// QX_TRANSPORT_PARAMETERS's type on the wire: the first frame of every QMux connection.
const QMUX_FIRST_FRAME: [u8; 8] = [0xff, 0x51, 0x53, 0x30, 0x0d, 0x0a, 0x0d, 0x0a];

/// A QMux connection on the TCP port, handed over whole (as a WebSocket upgrade is).
pub struct Qmux {
	/// The stream, under TLS or not.
	pub stream: ByteStream,
	/// What was read of it already.
	pub leftover: Vec<u8>,
	/// The QMux version.
	pub version: qmux::Version,
	/// The application protocol the ALPN named (`None` on plaintext TCP, where the transport
	/// parameters name it).
	pub protocol: Option<String>,
	/// The client's address.
	pub peer: SocketAddr,
}

/// What a connection turned out to be.
pub(super) enum Opened {
	/// HTTP, with what was read of it already.
	Http(ByteStream, Vec<u8>),
	Qmux(Qmux),
}

/// Looks at the first bytes of `stream` (and completes TLS, with `tls`), by `by`. `None` if the
/// peer closed (or said nothing) first.
pub(super) async fn open(
	mut stream: TcpStream,
	peer: SocketAddr,
	tls: Option<&Arc<moq_quic::tls::rustls::ServerConfig>>,
	by: Instant,
) -> io::Result<Option<Opened>> {
	let mut deadline = Deadline::new(Some(by));
	let mut first = Vec::with_capacity(16);
	let mut chunk = [0u8; 16];
	loop {
		match classify(&first) {
			Some(Kind::Tls) if tls.is_some() => break,
			Some(Kind::Qmux) => {
				return Ok(Some(Opened::Qmux(Qmux {
					stream: stream.into(),
					leftover: first,
					version: qmux::Version::Qmux01,
					protocol: None,
					peer,
				})));
			}
			Some(_) => return Ok(Some(Opened::Http(stream.into(), first))),
			None => {}
		}
		let wanted = chunk.len() - first.len();
		match timed(&mut deadline, |w| stream.poll_read(w, &mut chunk[..wanted])).await {
			Some(Ok(0)) | None if first.is_empty() => return Ok(None),
			// Cut short: whatever it is, HTTP answers it (400, or the head's timeout).
			Some(Ok(0)) | None => return Ok(Some(Opened::Http(stream.into(), first))),
			Some(Ok(n)) => first.extend_from_slice(&chunk[..n]),
			Some(Err(e)) => return Err(e),
		}
	}
	let config = tls.expect("classified as TLS only with a configuration").clone();
	let stream = match race(TlsStream::accept(stream, first, config), kio::time::sleep_until(by)).await {
		Either::Left(stream) => stream?,
		Either::Right(()) => return Err(timed_out()),
	};
	let alpn = stream.alpn().map(|alpn| String::from_utf8_lossy(alpn).into_owned());
	if let Some((version, Some(app))) = alpn.as_deref().and_then(qmux::parse_protocol) {
		let protocol = Some(app.to_owned());
		return Ok(Some(Opened::Qmux(Qmux {
			stream: ByteStream::Tls(Box::new(stream)),
			leftover: Vec::new(),
			version,
			protocol,
			peer,
		})));
	}
	Ok(Some(Opened::Http(ByteStream::Tls(Box::new(stream)), Vec::new())))
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
	Tls,
	Qmux,
	Http,
}

/// What the first bytes say, once they say it.
fn classify(first: &[u8]) -> Option<Kind> {
	let &byte = first.first()?;
	// A TLS record's version follows (0x03 0x0N); a QMux record of 22 bytes has a frame type
	// there instead (0xff).
	if byte == TLS_HANDSHAKE && *first.get(1)? == 0x03 {
		return Some(Kind::Tls);
	}
	// A record's size is a varint of 1, 2, 4 or 8 bytes; its first frame's type follows.
	let size = 1 << (byte >> 6);
	let seen = first.len().saturating_sub(size).min(QMUX_FIRST_FRAME.len());
	if first.len() > size && first[size..size + seen] != QMUX_FIRST_FRAME[..seen] {
		return Some(Kind::Http);
	}
	(seen == QMUX_FIRST_FRAME.len()).then_some(Kind::Qmux)
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn the_first_bytes_tell_tls_qmux_and_http_apart() {
		assert_eq!(classify(&[]), None);
		assert_eq!(classify(&[0x16]), None);
		assert_eq!(classify(&[0x16, 0x03, 0x01]), Some(Kind::Tls));
		// A 22-byte QMux record: its size is 0x16 too.
		let short = [0x16, 0xff, 0x51, 0x53, 0x30, 0x0d, 0x0a, 0x0d, 0x0a];
		assert_eq!(classify(&short), Some(Kind::Qmux));
		// The public native client's first record on `tcp://` (a two-byte size).
		let qmux = [0x40, 0x59, 0xff, 0x51, 0x53, 0x30, 0x0d, 0x0a, 0x0d, 0x0a, 0x40];
		for cut in 1..qmux.len() {
			let expected = if cut < 10 { None } else { Some(Kind::Qmux) };
			assert_eq!(classify(&qmux[..cut]), expected, "{cut} bytes");
		}
		// `GET` starts like a two-byte varint (0x47), but no method has 0xff in it.
		assert_eq!(classify(b"GE"), None);
		assert_eq!(classify(b"GET"), Some(Kind::Http));
		assert_eq!(classify(b"PUT / HTTP/1.1\r\n"), Some(Kind::Http));
		assert_eq!(classify(&[0x40, 0x59, 0xff, 0x51, 0x00]), Some(Kind::Http));
	}
}
