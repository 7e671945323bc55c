//! QMux frames: QUIC v1's layouts (RFC 9000 §19) for the frames QMux keeps, and QMux's own
//! (draft-ietf-quic-qmux-02 §6: QX_TRANSPORT_PARAMETERS, QX_PING). A frame is decoded from the
//! body of a record (qmux-01/02) or of a WebSocket message (every version): a frame whose length
//! is not written (STREAM without LEN, DATAGRAM 0x30) runs to the body's end.
//!
//! What QUIC needs and QMux does not (ACK, CRYPTO, PING, connection ids, path validation,
//! HANDSHAKE_DONE, NEW_TOKEN) is prohibited: receiving one is a FRAME_ENCODING_ERROR, like an
//! unknown type.

use bytes::Bytes;
use moq_net::coding::{decode_varint, encode_varint};

/// Frame types.
pub mod kind {
	/// PADDING.
	pub const PADDING: u64 = 0x00;
	/// RESET_STREAM.
	pub const RESET_STREAM: u64 = 0x04;
	/// STOP_SENDING.
	pub const STOP_SENDING: u64 = 0x05;
	/// STREAM, with its OFF (0x04), LEN (0x02) and FIN (0x01) bits: 0x08 to 0x0f.
	pub const STREAM: u64 = 0x08;
	/// MAX_DATA.
	pub const MAX_DATA: u64 = 0x10;
	/// MAX_STREAM_DATA.
	pub const MAX_STREAM_DATA: u64 = 0x11;
	/// MAX_STREAMS for bidirectional streams (0x13 for unidirectional).
	pub const MAX_STREAMS_BIDI: u64 = 0x12;
	/// MAX_STREAMS for unidirectional streams.
	pub const MAX_STREAMS_UNI: u64 = 0x13;
	/// DATA_BLOCKED (then STREAM_DATA_BLOCKED 0x15, STREAMS_BLOCKED 0x16 and 0x17): ignored.
	pub const DATA_BLOCKED: u64 = 0x14;
	/// CONNECTION_CLOSE of the transport: an abnormal end (a violation).
	pub const CLOSE_TRANSPORT: u64 = 0x1c;
	/// CONNECTION_CLOSE of the application: a clean end.
	pub const CLOSE_APPLICATION: u64 = 0x1d;
	/// RESET_STREAM_AT (draft-ietf-quic-reliable-stream-reset): read as a RESET_STREAM; we
	/// never advertise it, so a peer may not send it.
	pub const RESET_STREAM_AT: u64 = 0x24;
	/// DATAGRAM running to the body's end (RFC 9221).
	pub const DATAGRAM: u64 = 0x30;
	/// DATAGRAM with a length.
	pub const DATAGRAM_LEN: u64 = 0x31;
	/// QX_TRANSPORT_PARAMETERS: `ff 51 53 30 0d 0a 0d 0a` on the wire (the drafts' prose says
	/// "QMX"; the number, and both public implementations, say "QS0").
	pub const TRANSPORT_PARAMETERS: u64 = 0x3f51_5330_0d0a_0d0a;
	/// QX_PING request (qmux-01 on).
	pub const PING_REQUEST: u64 = 0x348c_6752_9ef8_c7bd;
	/// QX_PING response.
	pub const PING_RESPONSE: u64 = 0x348c_6752_9ef8_c7be;
}

/// A decoded frame. Payloads share the body they came in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
	/// PADDING (one byte; runs of them are read one at a time).
	Padding,
	/// RESET_STREAM (and RESET_STREAM_AT, its reliable size dropped).
	ResetStream {
		/// The stream.
		id: u64,
		/// The application's code.
		code: u64,
		/// Bytes the stream carried in all.
		final_size: u64,
	},
	/// STOP_SENDING.
	StopSending {
		/// The stream.
		id: u64,
		/// The application's code.
		code: u64,
	},
	/// STREAM.
	Stream {
		/// The stream.
		id: u64,
		/// Where `data` starts in the stream, if the frame says (OFF bit): the public
		/// implementations before qmux 0.4 never did, and their data follows what came before.
		offset: Option<u64>,
		/// The stream ends after `data`.
		fin: bool,
		/// The bytes.
		data: Bytes,
	},
	/// MAX_DATA.
	MaxData(u64),
	/// MAX_STREAM_DATA.
	MaxStreamData {
		/// The stream.
		id: u64,
		/// The most bytes the sender may send on it.
		max: u64,
	},
	/// MAX_STREAMS.
	MaxStreams {
		/// Bidirectional (else unidirectional).
		bidi: bool,
		/// The most streams of that kind the peer may open, in all.
		max: u64,
	},
	/// DATA_BLOCKED, STREAM_DATA_BLOCKED or STREAMS_BLOCKED: informational, ignored.
	Blocked,
	/// CONNECTION_CLOSE.
	Close {
		/// The application closed (0x1d, a clean end), else the transport (0x1c, a violation).
		application: bool,
		/// The code.
		code: u64,
		/// Why, as the peer wrote it (up to [`MAX_REASON`] bytes).
		reason: Bytes,
	},
	/// DATAGRAM.
	Datagram(Bytes),
	/// QX_TRANSPORT_PARAMETERS: the parameters' encoding ([`super::params`]).
	TransportParameters(Bytes),
	/// QX_PING request, with its sequence number.
	PingRequest(u64),
	/// QX_PING response, echoing the largest request answered.
	PingResponse(u64),
}

/// The longest close reason read or written.
pub const MAX_REASON: usize = 1024;

/// A frame that cannot be read: the connection is closed with FRAME_ENCODING_ERROR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
	/// The body ended inside the frame.
	Truncated,
	/// A type QMux does not carry (prohibited, or unknown).
	Type(u64),
	/// A field out of range (a close reason over [`MAX_REASON`], a reliable size past the final
	/// size, a stream offset past 2^62).
	Invalid,
}

impl std::fmt::Display for FrameError {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		match self {
			Self::Truncated => f.write_str("a frame ends past its record"),
			Self::Type(kind) => write!(f, "frame type {kind:#x} is not carried by QMux"),
			Self::Invalid => f.write_str("a frame field is out of range"),
		}
	}
}

/// Reads the next frame of `body` and advances it past the frame.
pub fn decode(body: &mut Bytes) -> Result<Frame, FrameError> {
	let mut view: &[u8] = body;
	let varint = |view: &mut &[u8]| decode_varint(view).map_err(|_| FrameError::Truncated);
	let kind = varint(&mut view)?;
	// Takes the next `len` bytes of the body as a payload, sharing it.
	let take = |view: &mut &[u8], len: u64| -> Result<Bytes, FrameError> {
		let len = usize::try_from(len).map_err(|_| FrameError::Truncated)?;
		if len > view.len() {
			return Err(FrameError::Truncated);
		}
		let start = body.len() - view.len();
		*view = &view[len..];
		Ok(body.slice(start..start + len))
	};
	let frame = match kind {
		kind::PADDING => Frame::Padding,
		kind::RESET_STREAM => Frame::ResetStream {
			id: varint(&mut view)?,
			code: varint(&mut view)?,
			final_size: varint(&mut view)?,
		},
		kind::RESET_STREAM_AT => {
			let (id, code, final_size) = (varint(&mut view)?, varint(&mut view)?, varint(&mut view)?);
			if varint(&mut view)? > final_size {
				return Err(FrameError::Invalid);
			}
			Frame::ResetStream { id, code, final_size }
		}
		kind::STOP_SENDING => Frame::StopSending {
			id: varint(&mut view)?,
			code: varint(&mut view)?,
		},
		0x08..=0x0f => {
			let id = varint(&mut view)?;
			let offset = if kind & 0x04 != 0 {
				Some(varint(&mut view)?)
			} else {
				None
			};
			let len = if kind & 0x02 != 0 {
				varint(&mut view)?
			} else {
				view.len() as u64
			};
			if offset
				.unwrap_or(0)
				.checked_add(len)
				.is_none_or(|end| end > moq_net::coding::VARINT_MAX)
			{
				return Err(FrameError::Invalid);
			}
			let data = take(&mut view, len)?;
			Frame::Stream {
				id,
				offset,
				fin: kind & 0x01 != 0,
				data,
			}
		}
		kind::MAX_DATA => Frame::MaxData(varint(&mut view)?),
		kind::MAX_STREAM_DATA => Frame::MaxStreamData {
			id: varint(&mut view)?,
			max: varint(&mut view)?,
		},
		kind::MAX_STREAMS_BIDI | kind::MAX_STREAMS_UNI => Frame::MaxStreams {
			bidi: kind == kind::MAX_STREAMS_BIDI,
			max: varint(&mut view)?,
		},
		kind::DATA_BLOCKED | 0x16 | 0x17 => {
			varint(&mut view)?;
			Frame::Blocked
		}
		0x15 => {
			varint(&mut view)?;
			varint(&mut view)?;
			Frame::Blocked
		}
		kind::CLOSE_TRANSPORT | kind::CLOSE_APPLICATION => {
			let application = kind == kind::CLOSE_APPLICATION;
			let code = varint(&mut view)?;
			if !application {
				varint(&mut view)?; // the frame type that caused it
			}
			let len = varint(&mut view)?;
			if len > MAX_REASON as u64 {
				return Err(FrameError::Invalid);
			}
			Frame::Close {
				application,
				code,
				reason: take(&mut view, len)?,
			}
		}
		kind::DATAGRAM => {
			let rest = view.len() as u64;
			Frame::Datagram(take(&mut view, rest)?)
		}
		kind::DATAGRAM_LEN => {
			let len = varint(&mut view)?;
			Frame::Datagram(take(&mut view, len)?)
		}
		kind::TRANSPORT_PARAMETERS => {
			let len = varint(&mut view)?;
			Frame::TransportParameters(take(&mut view, len)?)
		}
		kind::PING_REQUEST => Frame::PingRequest(varint(&mut view)?),
		kind::PING_RESPONSE => Frame::PingResponse(varint(&mut view)?),
		other => return Err(FrameError::Type(other)),
	};
	let used = body.len() - view.len();
	let _ = body.split_to(used);
	Ok(frame)
}

fn put(value: u64, out: &mut Vec<u8>) {
	// Every value we write is a count, a size or an id below 2^62.
	encode_varint(value.min(moq_net::coding::VARINT_MAX), out).expect("clamped to the varint range");
}

impl Frame {
	/// Appends the frame. STREAM always carries its offset and length (0x0e/0x0f), as both public
	/// implementations send it; DATAGRAM its length (0x31).
	pub fn encode(&self, out: &mut Vec<u8>) {
		match self {
			Self::Padding => out.push(0),
			Self::ResetStream { id, code, final_size } => {
				put(kind::RESET_STREAM, out);
				put(*id, out);
				put(*code, out);
				put(*final_size, out);
			}
			Self::StopSending { id, code } => {
				put(kind::STOP_SENDING, out);
				put(*id, out);
				put(*code, out);
			}
			Self::Stream { id, offset, fin, data } => {
				stream_header(*id, offset.unwrap_or(0), data.len(), *fin, out);
				out.extend_from_slice(data);
			}
			Self::MaxData(max) => {
				put(kind::MAX_DATA, out);
				put(*max, out);
			}
			Self::MaxStreamData { id, max } => {
				put(kind::MAX_STREAM_DATA, out);
				put(*id, out);
				put(*max, out);
			}
			Self::MaxStreams { bidi, max } => {
				put(
					if *bidi {
						kind::MAX_STREAMS_BIDI
					} else {
						kind::MAX_STREAMS_UNI
					},
					out,
				);
				put(*max, out);
			}
			Self::Blocked => {
				put(kind::DATA_BLOCKED, out);
				put(0, out);
			}
			Self::Close {
				application,
				code,
				reason,
			} => {
				let reason = &reason[..reason.len().min(MAX_REASON)];
				put(
					if *application {
						kind::CLOSE_APPLICATION
					} else {
						kind::CLOSE_TRANSPORT
					},
					out,
				);
				put(*code, out);
				if !application {
					put(0, out);
				}
				put(reason.len() as u64, out);
				out.extend_from_slice(reason);
			}
			Self::Datagram(data) => {
				put(kind::DATAGRAM_LEN, out);
				put(data.len() as u64, out);
				out.extend_from_slice(data);
			}
			Self::TransportParameters(blob) => {
				put(kind::TRANSPORT_PARAMETERS, out);
				put(blob.len() as u64, out);
				out.extend_from_slice(blob);
			}
			Self::PingRequest(sequence) => {
				put(kind::PING_REQUEST, out);
				put(*sequence, out);
			}
			Self::PingResponse(sequence) => {
				put(kind::PING_RESPONSE, out);
				put(*sequence, out);
			}
		}
	}
}

/// Writes a STREAM frame's header (type 0x0e/0x0f, id, offset, length) for `len` bytes of data
/// that follow it.
pub fn stream_header(id: u64, offset: u64, len: usize, fin: bool, out: &mut Vec<u8>) {
	put(kind::STREAM | 0x04 | 0x02 | u64::from(fin), out);
	put(id, out);
	put(offset, out);
	put(len as u64, out);
}

/// The bytes a STREAM frame's header takes before `len` bytes of data at `offset`.
pub fn stream_header_len(id: u64, offset: u64, len: usize) -> usize {
	use moq_net::coding::varint_len;
	1 + varint_len(id) + varint_len(offset) + varint_len(len as u64)
}

#[cfg(test)]
mod tests {
	use super::super::hex;
	use super::*;

	fn encoded(frame: &Frame) -> Vec<u8> {
		let mut out = Vec::new();
		frame.encode(&mut out);
		out
	}

	fn decoded(bytes: &[u8]) -> Result<Frame, FrameError> {
		let mut body = Bytes::copy_from_slice(bytes);
		let frame = decode(&mut body)?;
		assert!(body.is_empty(), "one frame: {bytes:02x?}");
		Ok(frame)
	}

	#[test]
	fn frames_match_the_public_implementations_bytes() {
		// Vectors from the qmux crate's and @moq/qmux's tests (docs/moq-quic.md §9).
		let cases = [
			(
				Frame::Stream {
					id: 2,
					offset: Some(0),
					fin: false,
					data: Bytes::from_static(b"hello"),
				},
				"0e 02 00 05 68 65 6c 6c 6f",
			),
			(
				Frame::Stream {
					id: 2,
					offset: Some(5),
					fin: true,
					data: Bytes::new(),
				},
				"0f 02 05 00",
			),
			(
				Frame::ResetStream {
					id: 4,
					code: 42,
					final_size: 128,
				},
				"04 04 2a 40 80",
			),
			(Frame::StopSending { id: 4, code: 42 }, "05 04 2a"),
			(Frame::MaxData(1024), "10 44 00"),
			(Frame::MaxStreamData { id: 4, max: 1024 }, "11 04 44 00"),
			(Frame::MaxStreams { bidi: true, max: 100 }, "12 40 64"),
			(Frame::MaxStreams { bidi: false, max: 100 }, "13 40 64"),
			(
				Frame::Close {
					application: true,
					code: 42,
					reason: Bytes::from_static(b"bye"),
				},
				"1d 2a 03 62 79 65",
			),
			(
				Frame::Close {
					application: false,
					code: 42,
					reason: Bytes::from_static(b"bye"),
				},
				"1c 2a 00 03 62 79 65",
			),
			(Frame::Datagram(Bytes::from_static(b"hi")), "31 02 68 69"),
			(Frame::PingRequest(0), "f4 8c 67 52 9e f8 c7 bd 00"),
			(Frame::PingResponse(0), "f4 8c 67 52 9e f8 c7 be 00"),
			(
				Frame::TransportParameters(Bytes::from_static(&[0x04, 0x02, 0x44, 0x00])),
				"ff 51 53 30 0d 0a 0d 0a 04 04 02 44 00",
			),
		];
		for (frame, bytes) in cases {
			assert_eq!(encoded(&frame), hex(bytes), "{frame:?}");
			assert_eq!(decoded(&hex(bytes)), Ok(frame));
		}
	}

	#[test]
	fn frames_without_lengths_run_to_the_bodys_end() {
		// A STREAM without OFF and LEN (an old peer's), and DATAGRAM 0x30.
		assert_eq!(
			decoded(&hex("08 04 68 69")),
			Ok(Frame::Stream {
				id: 4,
				offset: None,
				fin: false,
				data: Bytes::from_static(b"hi"),
			})
		);
		assert_eq!(
			decoded(&hex("30 68 69")),
			Ok(Frame::Datagram(Bytes::from_static(b"hi")))
		);
		// RESET_STREAM_AT reads as a reset; a reliable size past the final size does not read.
		assert_eq!(
			decoded(&hex("24 04 2a 40 80 40 40")),
			Ok(Frame::ResetStream {
				id: 4,
				code: 42,
				final_size: 128,
			})
		);
		assert_eq!(decoded(&hex("24 04 2a 40 40 40 80")), Err(FrameError::Invalid));
	}

	#[test]
	fn prohibited_unknown_and_truncated_frames_do_not_read() {
		for prohibited in ["01", "02 00 00 00 00", "06 00 00", "18", "1e"] {
			assert!(
				matches!(decoded(&hex(prohibited)), Err(FrameError::Type(_))),
				"{prohibited}"
			);
		}
		assert_eq!(decoded(&hex("0e 02 00 05 68 65")), Err(FrameError::Truncated));
		assert_eq!(decoded(&hex("31 05 68")), Err(FrameError::Truncated));
		assert_eq!(decoded(&hex("1d 2a 03 62")), Err(FrameError::Truncated));
		// A reason longer than we read.
		let mut long = hex("1d 2a");
		encode_varint(MAX_REASON as u64 + 1, &mut long).unwrap();
		long.extend(vec![b'x'; MAX_REASON + 1]);
		assert_eq!(decoded(&long), Err(FrameError::Invalid));
	}
}
