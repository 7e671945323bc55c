//! The lite-05 messages other than SETUP (docs/moq-lite-05.md §2.5), one struct per message, and
//! the 04 and 03 encodings of the few that differ ([`Version`], docs/moq-lite-versions.md).
//!
//! Field order in each struct is wire order. Integers are varints unless the spec marks them
//! `(8)` (priority, ordered, announce status: one raw byte).

use std::time::Duration;

use bytes::Bytes;

use super::version::{Version, VersionedDecode, VersionedEncode};
use super::{MAX_HOPS, MAX_MESSAGE_LEN};
use crate::coding::{
	Decode, DecodeError, Encode, EncodeError, decode_group, decode_len, decode_varint, decode_zigzag, encode_group,
	encode_varint, encode_zigzag, varint_len,
};
use crate::model::Path;

/// Reads `len, body` with `body` parsed by `parse`, holding the body to exactly `len` bytes.
pub(crate) fn decode_message<T>(
	buf: &mut &[u8],
	parse: impl FnOnce(&mut &[u8]) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
	// The cap is checked on the prefix alone, before the body is awaited.
	let len = decode_len(buf, MAX_MESSAGE_LEN)?;
	let (mut body, rest) = buf.split_at_checked(len).ok_or(DecodeError::Short)?;
	let value = parse(&mut body).map_err(|err| match err {
		// The whole body is here: running out inside it is final, not "need more bytes".
		DecodeError::Short => DecodeError::Truncated,
		err => err,
	})?;
	if !body.is_empty() {
		return Err(DecodeError::Long);
	}
	*buf = rest;
	Ok(value)
}

/// Appends `len, body` with `body` written by `emit`.
pub(crate) fn emit_message(
	out: &mut Vec<u8>,
	emit: impl FnOnce(&mut Vec<u8>) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
	// The body is written first and its length prefix rotated in front: messages are small, and
	// this avoids a scratch buffer per message.
	let start = out.len();
	emit(out)?;
	let len = out.len() - start;
	if len > MAX_MESSAGE_LEN {
		return Err(EncodeError::BoundsExceeded);
	}
	encode_varint(len as u64, out)?;
	out[start..].rotate_right(varint_len(len as u64));
	Ok(())
}

// --- announcements ------------------------------------------------------------------------------

/// ANNOUNCE_REQUEST: the first message on an Announce stream, subscriber to publisher.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnnounceRequest {
	/// Announce broadcasts under this prefix.
	pub prefix: Path,
	/// Skip broadcasts whose hop chain contains this id (the subscriber's own origin; 0 = none).
	pub exclude_hop: u64,
}

impl Decode for AnnounceRequest {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				prefix: Path::decode(body)?,
				exclude_hop: decode_varint(body)?,
			})
		})
	}
}

impl Encode for AnnounceRequest {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| {
			self.prefix.emit(out)?;
			self.exclude_hop.emit(out)
		})
	}
}

/// ANNOUNCE_OK: the publisher's first message on an Announce stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnnounceOk {
	/// The publisher's origin id, which the receiver appends to every hop chain on this stream.
	pub origin: u64,
	/// How many ANNOUNCEs of the initial set follow.
	pub active: u64,
}

impl Decode for AnnounceOk {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				origin: decode_varint(body)?,
				active: decode_varint(body)?,
			})
		})
	}
}

impl Encode for AnnounceOk {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| {
			self.origin.emit(out)?;
			self.active.emit(out)
		})
	}
}

/// The status byte of an ANNOUNCE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AnnounceStatus {
	/// 0: the broadcast is gone.
	Ended,
	/// 1: the broadcast is live (a second `Active` for a live path is a restart on lite-05).
	#[default]
	Active,
	/// 2: accepted on decode and treated as `Active`; never sent by the reference.
	Restart,
}

impl AnnounceStatus {
	/// The wire byte.
	pub fn to_u8(self) -> u8 {
		match self {
			Self::Ended => 0,
			Self::Active => 1,
			Self::Restart => 2,
		}
	}

	/// The status for wire byte `byte`, if it is one.
	pub fn from_u8(byte: u8) -> Option<Self> {
		match byte {
			0 => Some(Self::Ended),
			1 => Some(Self::Active),
			2 => Some(Self::Restart),
			_ => None,
		}
	}
}

/// ANNOUNCE (lite-05 "ANNOUNCE_BROADCAST"): one broadcast starting or ending.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Announce {
	/// Whether the broadcast is live.
	pub status: AnnounceStatus,
	/// The path relative to the request's prefix.
	pub suffix: Path,
	/// The origins the announcement passed through, excluding the sender (at most [`MAX_HOPS`]).
	pub hops: Vec<u64>,
}

impl Decode for Announce {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			let status =
				AnnounceStatus::from_u8(u8::decode(body)?).ok_or(DecodeError::InvalidValue("announce status"))?;
			let suffix = Path::decode(body)?;
			let count = decode_len(body, MAX_HOPS)?;
			let hops = (0..count).map(|_| decode_varint(body)).collect::<Result<_, _>>()?;
			Ok(Self { status, suffix, hops })
		})
	}
}

impl Encode for Announce {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if self.hops.len() > MAX_HOPS {
			return Err(EncodeError::BoundsExceeded);
		}
		emit_message(out, |out| {
			self.status.to_u8().emit(out)?;
			self.suffix.emit(out)?;
			(self.hops.len() as u64).emit(out)?;
			self.hops.iter().try_for_each(|hop| hop.emit(out))
		})
	}
}

// --- tracks -------------------------------------------------------------------------------------

/// TRACK: the first message on a Track stream, asking for a track's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Track {
	/// The broadcast's path.
	pub broadcast: Path,
	/// The track's name.
	pub track: String,
}

impl Decode for Track {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				broadcast: Path::decode(body)?,
				track: String::decode(body)?,
			})
		})
	}
}

impl Encode for Track {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| {
			self.broadcast.emit(out)?;
			self.track.emit(out)
		})
	}
}

/// TRACK_INFO: the answer to TRACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackInfo {
	/// The publisher's priority.
	pub priority: u8,
	/// Whether the publisher prefers groups in order.
	pub ordered: bool,
	/// How long a non-latest group stays useful (whole milliseconds on the wire).
	pub latency_max: Duration,
	/// Timestamp ticks per second; never zero (a zero does not decode, nor encode).
	pub timescale: u64,
}

impl Decode for TrackInfo {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			let priority = u8::decode(body)?;
			let ordered = bool::decode(body)?;
			let latency_max = Duration::decode(body)?;
			let timescale = decode_varint(body)?;
			if timescale == 0 {
				return Err(DecodeError::InvalidValue("timescale"));
			}
			Ok(Self {
				priority,
				ordered,
				latency_max,
				timescale,
			})
		})
	}
}

impl Encode for TrackInfo {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if self.timescale == 0 {
			return Err(EncodeError::BoundsExceeded);
		}
		emit_message(out, |out| {
			self.priority.emit(out)?;
			self.ordered.emit(out)?;
			self.latency_max.emit(out)?;
			self.timescale.emit(out)
		})
	}
}

// --- subscriptions ------------------------------------------------------------------------------

/// SUBSCRIBE: the first message on a Subscribe stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscribe {
	/// Chosen by the subscriber, unique per session; GROUP headers carry it back.
	pub id: u64,
	/// The broadcast's path.
	pub broadcast: Path,
	/// The track's name.
	pub track: String,
	/// The subscriber's priority.
	pub priority: u8,
	/// Whether the subscriber wants groups in order.
	pub ordered: bool,
	/// How long a non-latest group stays useful to the subscriber (whole milliseconds).
	pub latency_max: Duration,
	/// The first group wanted; `None` = the latest.
	pub start: Option<u64>,
	/// The last group wanted; `None` = open-ended.
	pub end: Option<u64>,
}

impl Decode for Subscribe {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				id: decode_varint(body)?,
				broadcast: Path::decode(body)?,
				track: String::decode(body)?,
				priority: u8::decode(body)?,
				ordered: bool::decode(body)?,
				latency_max: Duration::decode(body)?,
				start: decode_group(body)?,
				end: decode_group(body)?,
			})
		})
	}
}

impl Encode for Subscribe {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| {
			self.id.emit(out)?;
			self.broadcast.emit(out)?;
			self.track.emit(out)?;
			self.priority.emit(out)?;
			self.ordered.emit(out)?;
			self.latency_max.emit(out)?;
			encode_group(self.start, out)?;
			encode_group(self.end, out)
		})
	}
}

/// SUBSCRIBE_UPDATE: later messages on a Subscribe stream, subscriber to publisher (no type).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubscribeUpdate {
	/// The subscriber's priority.
	pub priority: u8,
	/// Whether the subscriber wants groups in order.
	pub ordered: bool,
	/// How long a non-latest group stays useful to the subscriber.
	pub latency_max: Duration,
	/// The new floor; `None` = the latest.
	pub start: Option<u64>,
	/// The serving cap (groups beyond it are held, not dropped); `None` = open-ended.
	pub end: Option<u64>,
}

impl Decode for SubscribeUpdate {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				priority: u8::decode(body)?,
				ordered: bool::decode(body)?,
				latency_max: Duration::decode(body)?,
				start: decode_group(body)?,
				end: decode_group(body)?,
			})
		})
	}
}

impl Encode for SubscribeUpdate {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| {
			self.priority.emit(out)?;
			self.ordered.emit(out)?;
			self.latency_max.emit(out)?;
			encode_group(self.start, out)?;
			encode_group(self.end, out)
		})
	}
}

/// A subscribe response, publisher to subscriber on the Subscribe stream: `type, len, body`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscribeResponse {
	/// Type 0, SUBSCRIBE_START: the first group that will be delivered.
	Start {
		/// An absolute group sequence; groups below it are implicitly dropped.
		group: u64,
	},
	/// Type 1, SUBSCRIBE_END: the track's final boundary.
	End {
		/// The **exclusive** end: the first sequence never delivered (0 = no groups).
		group: u64,
	},
	/// SUBSCRIBE_OK, 03 and 04 only (type 0 there, before any group): the subscription is served.
	/// The reference publisher echoes the subscriber's priority and zeroes the rest.
	Ok {
		/// The priority the subscription is served at.
		priority: u8,
		/// Whether groups are delivered in order.
		ordered: bool,
		/// The latency the publisher serves with.
		latency_max: Duration,
		/// The first group, if known.
		start: Option<u64>,
		/// The last group, if known.
		end: Option<u64>,
	},
	/// Type 2 (type 1 on 03 and 04), SUBSCRIBE_DROP: a range of groups that will not be delivered.
	Drop {
		/// The first dropped group.
		start: u64,
		/// The last dropped group (inclusive).
		end: u64,
		/// Why, as a docs/moq-lite-05.md §2.8 code.
		code: u64,
	},
}

impl SubscribeResponse {
	/// The wire type.
	pub fn kind(&self) -> u64 {
		match self {
			Self::Start { .. } | Self::Ok { .. } => 0,
			Self::End { .. } => 1,
			Self::Drop { .. } => 2,
		}
	}
}

impl Decode for SubscribeResponse {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		// An unknown type fails at once: its length could be skipped, but lite-05 defines no
		// extension responses, so it is a protocol error rather than something to tolerate.
		match decode_varint(buf)? {
			0 => decode_message(buf, |body| {
				Ok(Self::Start {
					group: decode_varint(body)?,
				})
			}),
			1 => decode_message(buf, |body| {
				Ok(Self::End {
					group: decode_varint(body)?,
				})
			}),
			2 => decode_message(buf, |body| {
				Ok(Self::Drop {
					start: decode_varint(body)?,
					end: decode_varint(body)?,
					code: decode_varint(body)?,
				})
			}),
			other => Err(DecodeError::UnexpectedMessage(other)),
		}
	}
}

impl Encode for SubscribeResponse {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		self.emit_for(Version::Lite05, out)
	}
}

impl VersionedDecode for SubscribeResponse {
	fn decode_for(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		if version.has_track_stream() {
			return Self::decode(buf);
		}
		// 03 and 04: type 0 is SUBSCRIBE_OK, type 1 SUBSCRIBE_DROP; nothing else.
		match decode_varint(buf)? {
			0 => decode_message(buf, |body| {
				Ok(Self::Ok {
					priority: u8::decode(body)?,
					ordered: bool::decode(body)?,
					latency_max: Duration::decode(body)?,
					start: decode_group(body)?,
					end: decode_group(body)?,
				})
			}),
			1 => decode_message(buf, |body| {
				Ok(Self::Drop {
					start: decode_varint(body)?,
					end: decode_varint(body)?,
					code: decode_varint(body)?,
				})
			}),
			other => Err(DecodeError::UnexpectedMessage(other)),
		}
	}
}

impl VersionedEncode for SubscribeResponse {
	fn emit_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		let kind: u64 = match (self, version.has_track_stream()) {
			(Self::Start { .. }, true) | (Self::Ok { .. }, false) => 0,
			(Self::End { .. }, true) | (Self::Drop { .. }, false) => 1,
			(Self::Drop { .. }, true) => 2,
			(Self::Start { .. }, false) => return Err(EncodeError::NotInVersion("SUBSCRIBE_START")),
			(Self::End { .. }, false) => return Err(EncodeError::NotInVersion("SUBSCRIBE_END")),
			(Self::Ok { .. }, true) => return Err(EncodeError::NotInVersion("SUBSCRIBE_OK")),
		};
		kind.emit(out)?;
		emit_message(out, |out| match *self {
			Self::Start { group } | Self::End { group } => group.emit(out),
			Self::Ok {
				priority,
				ordered,
				latency_max,
				start,
				end,
			} => {
				priority.emit(out)?;
				ordered.emit(out)?;
				latency_max.emit(out)?;
				encode_group(start, out)?;
				encode_group(end, out)
			}
			Self::Drop { start, end, code } => {
				start.emit(out)?;
				end.emit(out)?;
				code.emit(out)
			}
		})
	}
}

// --- group data ---------------------------------------------------------------------------------

/// GROUP: the header of a Group uni stream (after its [`DataType::Group`](super::DataType) byte);
/// frames follow until FIN.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupHeader {
	/// The SUBSCRIBE this group answers.
	pub subscribe_id: u64,
	/// The group's sequence.
	pub sequence: u64,
}

impl Decode for GroupHeader {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				subscribe_id: decode_varint(body)?,
				sequence: decode_varint(body)?,
			})
		})
	}
}

impl Encode for GroupHeader {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| {
			self.subscribe_id.emit(out)?;
			self.sequence.emit(out)
		})
	}
}

/// FRAME's header, `timestamp_delta, size`: `size` payload bytes follow it, and are not part of
/// it. There is no length prefix; [`Short`](DecodeError::Short) needs at most 16 bytes.
///
/// The frame size is not capped here: the reader checks it against its own frame cap
/// (FrameTooLarge, 27) before it reads the payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameHeader {
	/// The timestamp minus the previous frame's, in track timescale ticks (the first frame's is
	/// from 0); zigzag on the wire, so within ±2^61.
	pub timestamp_delta: i64,
	/// The payload's length in bytes.
	pub size: u64,
}

impl Decode for FrameHeader {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Ok(Self {
			timestamp_delta: decode_zigzag(buf)?,
			size: decode_varint(buf)?,
		})
	}
}

impl Encode for FrameHeader {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_zigzag(self.timestamp_delta, out)?;
		self.size.emit(out)
	}
}

/// FETCH: the first message on a Fetch stream; the answer is bare frames, then FIN.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fetch {
	/// The broadcast's path.
	pub broadcast: Path,
	/// The track's name.
	pub track: String,
	/// The subscriber's priority.
	pub priority: u8,
	/// The group's sequence.
	pub group: u64,
}

impl Decode for Fetch {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				broadcast: Path::decode(body)?,
				track: String::decode(body)?,
				priority: u8::decode(body)?,
				group: decode_varint(body)?,
			})
		})
	}
}

impl Encode for Fetch {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| {
			self.broadcast.emit(out)?;
			self.track.emit(out)?;
			self.priority.emit(out)?;
			self.group.emit(out)
		})
	}
}

// --- probe, goaway ------------------------------------------------------------------------------

/// PROBE: a publisher's periodic report on a Probe stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probe {
	/// Estimated bits per second (0 = unknown).
	pub bitrate: u64,
	/// Round-trip time in milliseconds (0 = unknown).
	pub rtt_ms: u64,
}

impl Decode for Probe {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				bitrate: decode_varint(body)?,
				rtt_ms: decode_varint(body)?,
			})
		})
	}
}

impl Encode for Probe {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| {
			self.bitrate.emit(out)?;
			self.rtt_ms.emit(out)
		})
	}
}

/// GOAWAY: the sender asks the peer to reconnect elsewhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Goaway {
	/// Where to reconnect (may be empty).
	pub uri: String,
}

impl Decode for Goaway {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			Ok(Self {
				uri: String::decode(body)?,
			})
		})
	}
}

impl Encode for Goaway {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		emit_message(out, |out| self.uri.emit(out))
	}
}

// --- datagrams ----------------------------------------------------------------------------------

/// DATAGRAM: a single-frame group in one QUIC datagram, `subscribe_id, sequence, timestamp,
/// payload`, with no length prefix: the payload is the rest of the datagram.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Datagram {
	/// The SUBSCRIBE this group answers.
	pub subscribe_id: u64,
	/// The group's sequence.
	pub sequence: u64,
	/// The frame's absolute timestamp, in track timescale ticks (a plain varint).
	pub timestamp: u64,
	/// The frame's payload.
	pub payload: Bytes,
}

impl Datagram {
	fn decode_header(buf: &mut &[u8]) -> Result<(u64, u64, u64), DecodeError> {
		Ok((decode_varint(buf)?, decode_varint(buf)?, decode_varint(buf)?))
	}

	/// Decodes a whole datagram, sharing `datagram`'s storage for the payload instead of copying.
	pub fn decode_bytes(datagram: &Bytes) -> Result<Self, DecodeError> {
		let mut header = &datagram[..];
		let (subscribe_id, sequence, timestamp) = Self::decode_header(&mut header)?;
		Ok(Self {
			subscribe_id,
			sequence,
			timestamp,
			payload: datagram.slice(datagram.len() - header.len()..),
		})
	}
}

impl Decode for Datagram {
	/// Consumes all of `buf`: the payload runs to the end. [`Short`](DecodeError::Short) here
	/// means the datagram ended inside its header, which for a datagram is final.
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		let (subscribe_id, sequence, timestamp) = Self::decode_header(buf)?;
		let payload = Bytes::copy_from_slice(buf);
		*buf = &[];
		Ok(Self {
			subscribe_id,
			sequence,
			timestamp,
			payload,
		})
	}
}

impl Encode for Datagram {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		self.subscribe_id.emit(out)?;
		self.sequence.emit(out)?;
		self.timestamp.emit(out)?;
		out.extend_from_slice(&self.payload);
		Ok(())
	}
}

// --- what differs in moq-lite-04 and -03 (docs/moq-lite-versions.md) -----------------------------

impl VersionedDecode for AnnounceRequest {
	fn decode_for(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		if version.has_exclude_hop() {
			return Self::decode(buf);
		}
		decode_message(buf, |body| {
			Ok(Self {
				prefix: Path::decode(body)?,
				exclude_hop: 0,
			})
		})
	}
}

impl VersionedEncode for AnnounceRequest {
	fn emit_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if version.has_exclude_hop() {
			return self.emit(out);
		}
		emit_message(out, |out| self.prefix.emit(out))
	}
}

impl VersionedDecode for Announce {
	fn decode_for(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		if version.has_hop_ids() {
			return Self::decode(buf);
		}
		// 03 sends only how many hops: each decodes as the unknown origin (0), which identifies
		// nothing and is never taken for a loop.
		decode_message(buf, |body| {
			let status =
				AnnounceStatus::from_u8(u8::decode(body)?).ok_or(DecodeError::InvalidValue("announce status"))?;
			let suffix = Path::decode(body)?;
			let count = decode_len(body, MAX_HOPS)?;
			Ok(Self {
				status,
				suffix,
				hops: vec![0; count],
			})
		})
	}
}

impl VersionedEncode for Announce {
	fn emit_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if version.has_hop_ids() {
			return self.emit(out);
		}
		if self.hops.len() > MAX_HOPS {
			return Err(EncodeError::BoundsExceeded);
		}
		emit_message(out, |out| {
			self.status.to_u8().emit(out)?;
			self.suffix.emit(out)?;
			(self.hops.len() as u64).emit(out)
		})
	}
}

impl VersionedDecode for FrameHeader {
	fn decode_for(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		if version.has_track_stream() {
			return Self::decode(buf);
		}
		// No timestamps before 05: the receiver stamps frames itself.
		Ok(Self {
			timestamp_delta: 0,
			size: decode_varint(buf)?,
		})
	}
}

impl VersionedEncode for FrameHeader {
	fn emit_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if version.has_track_stream() {
			return self.emit(out);
		}
		self.size.emit(out)
	}
}

impl VersionedDecode for Probe {
	fn decode_for(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		if version.has_probe_rtt() {
			return Self::decode(buf);
		}
		decode_message(buf, |body| {
			Ok(Self {
				bitrate: decode_varint(body)?,
				rtt_ms: 0,
			})
		})
	}
}

impl VersionedEncode for Probe {
	fn emit_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if version.has_probe_rtt() {
			return self.emit(out);
		}
		emit_message(out, |out| self.bitrate.emit(out))
	}
}
