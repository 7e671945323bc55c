//! draft-14's data plane: a subgroup's unidirectional stream (a header, then objects until FIN)
//! and object datagrams.
//!
//! A subgroup header's type says which fields follow (draft-14 §10.4.2): 0x10–0x15 and
//! 0x18–0x1D, bit 0 "every object carries extensions", bits 1–2 where the subgroup id comes from
//! (0: it is 0; 1: the first object's id; 2: a field), bit 3 "this subgroup ends its group".
//! The priority byte is always there in draft-14; draft-15 adds the same types with bit 5 set
//! (0x30–0x3D), whose priority byte is left out (the subscription's publisher priority applies).
//! Any other type closes the session.

use bytes::Bytes;

use super::Version;
use crate::coding::{Decode, DecodeError, Encode, EncodeError, decode_varint, encode_varint};

/// Where a subgroup's id comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubgroupId {
	/// It is 0.
	Zero,
	/// It is the id of the first object on the stream.
	FirstObject,
	/// It is this.
	Explicit(u64),
}

/// The header of a subgroup stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubgroupHeader {
	/// The subscription's track alias.
	pub track_alias: u64,
	/// The group.
	pub group: u64,
	/// The subgroup.
	pub subgroup: SubgroupId,
	/// 0 is first; `None` (draft-15 on) leaves it out, for the subscription's.
	pub publisher_priority: Option<u8>,
	/// Every object carries an extensions block.
	pub extensions: bool,
	/// The subgroup holds its group's last object: its FIN ends the group.
	pub end_of_group: bool,
}

impl SubgroupHeader {
	/// Whether `kind` opens a subgroup stream in `version`.
	pub fn is_type(kind: u64, version: Version) -> bool {
		match version {
			Version::Draft14 => matches!(kind, 0x10..=0x15 | 0x18..=0x1d),
			// draft-16 defines the same set bit by bit.
			Version::Draft15 | Version::Draft16 => matches!(kind & !0x20, 0x10..=0x15 | 0x18..=0x1d) && kind <= 0x3d,
		}
	}

	/// Reads one as `version` has it.
	pub fn decode_for(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		let kind = decode_varint(buf)?;
		if !Self::is_type(kind, version) {
			return Err(DecodeError::UnexpectedStream(kind));
		}
		let track_alias = decode_varint(buf)?;
		let group = decode_varint(buf)?;
		let subgroup = match (kind >> 1) & 0b11 {
			0 => SubgroupId::Zero,
			1 => SubgroupId::FirstObject,
			_ => SubgroupId::Explicit(decode_varint(buf)?),
		};
		let publisher_priority = match kind & 0x20 {
			0 => {
				let (&priority, rest) = buf.split_first().ok_or(DecodeError::Short)?;
				*buf = rest;
				Some(priority)
			}
			_ => None,
		};
		Ok(Self {
			track_alias,
			group,
			subgroup,
			publisher_priority,
			extensions: kind & 1 == 1,
			end_of_group: kind & 0x8 != 0,
		})
	}

	fn kind(&self) -> u64 {
		let mode = match self.subgroup {
			SubgroupId::Zero => 0,
			SubgroupId::FirstObject => 1,
			SubgroupId::Explicit(_) => 2,
		};
		let default_priority = u64::from(self.publisher_priority.is_none()) << 5;
		0x10 | u64::from(self.extensions) | mode << 1 | u64::from(self.end_of_group) << 3 | default_priority
	}
}

impl Decode for SubgroupHeader {
	/// draft-14's (see [`SubgroupHeader::decode_for`]).
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Self::decode_for(buf, Version::Draft14)
	}
}

impl Encode for SubgroupHeader {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.kind(), out)?;
		encode_varint(self.track_alias, out)?;
		encode_varint(self.group, out)?;
		if let SubgroupId::Explicit(id) = self.subgroup {
			encode_varint(id, out)?;
		}
		if let Some(priority) = self.publisher_priority {
			out.push(priority);
		}
		Ok(())
	}
}

/// An object's status (draft-14 §10.2.1.1).
pub mod status {
	/// A normal object (its payload may be empty).
	pub const NORMAL: u64 = 0x0;
	/// The object does not exist.
	pub const DOES_NOT_EXIST: u64 = 0x1;
	/// No object at or past this id exists in the group.
	pub const END_OF_GROUP: u64 = 0x3;
	/// No object at or past this location exists in the track.
	pub const END_OF_TRACK: u64 = 0x4;
}

/// What precedes an object's payload on a subgroup stream: `Object ID Delta`, the extensions
/// (when the header says every object has them), `Payload Length`, and for an empty payload its
/// status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectHeader {
	/// The object's id less the previous one's plus one (the first object's: its id).
	pub id_delta: u64,
	/// Its extension headers' bytes, when the stream carries them.
	pub extensions: Option<Bytes>,
	/// The payload's length.
	pub length: u64,
	/// Its status: [`status::NORMAL`] unless the payload is empty and says otherwise.
	pub status: u64,
}

/// The longest extensions block we take (a bound of ours; the draft has none).
pub const MAX_EXTENSIONS: usize = 4096;

impl ObjectHeader {
	/// Reads one from a stream whose header says whether `extensions` are there.
	pub fn decode(buf: &mut &[u8], extensions: bool) -> Result<Self, DecodeError> {
		let id_delta = decode_varint(buf)?;
		let extensions = match extensions {
			true => Some(Bytes::copy_from_slice(crate::coding::decode_bytes(
				buf,
				MAX_EXTENSIONS,
			)?)),
			false => None,
		};
		let (length, status) = length_and_status(buf, true)?;
		Ok(Self {
			id_delta,
			extensions,
			length,
			status,
		})
	}

	/// Writes it.
	pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.id_delta, out)?;
		if let Some(extensions) = &self.extensions {
			crate::coding::encode_bytes(extensions, MAX_EXTENSIONS, out)?;
		}
		encode_varint(self.length, out)?;
		if self.length == 0 {
			encode_varint(self.status, out)?;
		}
		Ok(())
	}
}

/// draft-14's fetch object as draft-15's flags would say it: group, subgroup, object and
/// priority written out, an extensions block always.
const DRAFT_14_FLAGS: u64 = 0x3f;

/// A FETCH's stream opens with this type, then the FETCH's request id.
pub const FETCH_HEADER: u64 = 0x05;

/// What precedes an object's payload on a FETCH's stream: where it is in the track, whole.
///
/// draft-14 writes every field; draft-15 and 16 start with serialization flags saying which
/// fields are there and which are the previous object's. We write every field (flags
/// [`FetchObject::EXPLICIT`]: group, object and priority present, subgroup 0, so no object
/// refers to the one before) and read any: [`FetchObject::decode_for`] takes the previous one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchObject {
	/// The group.
	pub group: u64,
	/// The subgroup.
	pub subgroup: u64,
	/// The object's id.
	pub object: u64,
	/// 0 is first.
	pub publisher_priority: u8,
	/// Its extension headers' bytes (draft-14: always a block, maybe empty).
	pub extensions: Option<Bytes>,
	/// The payload's length.
	pub length: u64,
	/// Its status (drafts 14 and 15, for an empty payload; draft-16 has none here).
	pub status: u64,
}

impl FetchObject {
	/// draft-15 on: group, object and priority present; subgroup 0; no extensions.
	pub const EXPLICIT: u64 = 0x1c;

	/// Reads one as `version` has it, `previous` being the object before it on the stream.
	/// `None` for draft-16's end-of-range markers (which carry a location and no object).
	pub fn decode_for(buf: &mut &[u8], version: Version, previous: Option<&Self>) -> Result<Option<Self>, DecodeError> {
		let flags = match version {
			// Every field, the extensions block always: the flags that say so, not on the wire.
			Version::Draft14 => DRAFT_14_FLAGS,
			Version::Draft15 => {
				let (&flags, rest) = buf.split_first().ok_or(DecodeError::Short)?;
				*buf = rest;
				if flags & 0xc0 != 0 {
					return Err(DecodeError::InvalidValue("fetch object flags"));
				}
				u64::from(flags)
			}
			_ => decode_varint(buf)?,
		};
		if flags == 0x8c || flags == 0x10c {
			// The end of a range of objects that do not exist, or whose status is unknown.
			decode_varint(buf)?;
			decode_varint(buf)?;
			return Ok(None);
		}
		if flags >= 0x80 {
			return Err(DecodeError::InvalidValue("fetch object flags"));
		}
		let before = |field: &'static str| previous.ok_or(DecodeError::InvalidValue(field));
		let group = match flags & 0x08 {
			0 => before("a first object's group")?.group,
			_ => decode_varint(buf)?,
		};
		let subgroup = match flags & 0x03 {
			0 => 0,
			1 => before("a first object's subgroup")?.subgroup,
			2 => after(before("a first object's subgroup")?.subgroup, "subgroup")?,
			_ => decode_varint(buf)?,
		};
		let object = match flags & 0x04 {
			0 => after(before("a first object's id")?.object, "object id")?,
			_ => decode_varint(buf)?,
		};
		let publisher_priority = match flags & 0x10 {
			0 => before("a first object's priority")?.publisher_priority,
			_ => {
				let (&priority, rest) = buf.split_first().ok_or(DecodeError::Short)?;
				*buf = rest;
				priority
			}
		};
		let extensions = match flags & 0x20 {
			0 => None,
			_ => Some(Bytes::copy_from_slice(crate::coding::decode_bytes(
				buf,
				MAX_EXTENSIONS,
			)?)),
		};
		let (length, status) = length_and_status(buf, version <= Version::Draft15)?;
		Ok(Some(Self {
			group,
			subgroup,
			object,
			publisher_priority,
			extensions,
			length,
			status,
		}))
	}

	/// Writes it as `version` has it, every field present.
	pub fn emit_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		let flags = match version {
			Version::Draft14 => DRAFT_14_FLAGS,
			_ => {
				let subgroup = if self.subgroup == 0 { 0 } else { 0x3 };
				Self::EXPLICIT | subgroup | u64::from(self.extensions.is_some()) << 5
			}
		};
		match version {
			Version::Draft14 => {}
			Version::Draft15 => out.push(flags as u8),
			_ => encode_varint(flags, out)?,
		}
		encode_varint(self.group, out)?;
		if flags & 0x3 == 0x3 {
			encode_varint(self.subgroup, out)?;
		}
		encode_varint(self.object, out)?;
		out.push(self.publisher_priority);
		if flags & 0x20 != 0 {
			let extensions = self.extensions.as_deref().unwrap_or_default();
			crate::coding::encode_bytes(extensions, MAX_EXTENSIONS, out)?;
		}
		encode_varint(self.length, out)?;
		if self.length == 0 && version <= Version::Draft15 {
			encode_varint(self.status, out)?;
		}
		Ok(())
	}
}

/// The id after `id`: an error past what a varint carries (so what is read can be written).
fn after(id: u64, field: &'static str) -> Result<u64, DecodeError> {
	Some(id + 1)
		.filter(|next| *next <= crate::coding::VARINT_MAX)
		.ok_or(DecodeError::InvalidValue(field))
}

/// An object's payload length, and its status when the payload is empty and the draft has one.
fn length_and_status(buf: &mut &[u8], has_status: bool) -> Result<(u64, u64), DecodeError> {
	let length = decode_varint(buf)?;
	let status = match (length, has_status) {
		(0, true) => match decode_varint(buf)? {
			status @ (status::NORMAL | status::DOES_NOT_EXIST | status::END_OF_GROUP | status::END_OF_TRACK) => status,
			_ => return Err(DecodeError::InvalidValue("object status")),
		},
		_ => status::NORMAL,
	};
	Ok((length, status))
}

#[cfg(test)]
mod tests {
	use super::*;
	use crate::test_support::hex;

	#[test]
	fn the_drafts_subgroup_examples_read_and_write() {
		// draft-14 §12's first example: type 0x14, alias 2, group 0, subgroup 0 (a field),
		// priority 0; objects 0 and 1 of four bytes each.
		let wire = hex("14 02 00 00 00 00 04 61 62 63 64 00 04 65 66 67 68");
		let mut buf = &wire[..];
		let header = SubgroupHeader::decode(&mut buf).unwrap();
		assert_eq!(
			header,
			SubgroupHeader {
				track_alias: 2,
				group: 0,
				subgroup: SubgroupId::Explicit(0),
				publisher_priority: Some(0),
				extensions: false,
				end_of_group: false,
			}
		);
		let mut out = Vec::new();
		header.encode(&mut out);
		assert_eq!(out, wire[..5]);
		for payload in [b"abcd", b"efgh"] {
			let object = ObjectHeader::decode(&mut buf, false).unwrap();
			assert_eq!((object.id_delta, object.length), (0, 4));
			assert_eq!(&buf[..4], payload);
			buf = &buf[4..];
		}
		// The second example (its extension's length corrected to the 14 bytes it holds).
		let wire = hex(
			"15 02 00 00 00 00 1a 04 c0 00 00 00 82 57 dc d3 40 4d 0e 74 72 61 63 65 49 44 3a 31 32 33 34 35 36 \
			 04 61 62 63 64 00 00 04 65 66 67 68",
		);
		let mut buf = &wire[..];
		let header = SubgroupHeader::decode(&mut buf).unwrap();
		assert!(header.extensions);
		let first = ObjectHeader::decode(&mut buf, true).unwrap();
		assert_eq!(first.extensions.as_ref().map(Bytes::len), Some(26));
		let mut out = Vec::new();
		first.emit(&mut out).unwrap();
		assert_eq!(out, wire[5..wire.len() - 4 - 7]);
		buf = &buf[4..];
		let second = ObjectHeader::decode(&mut buf, true).unwrap();
		assert_eq!((second.extensions.as_deref(), second.length), (Some(&[][..]), 4));
		// An empty object's status: END_OF_GROUP.
		let end = ObjectHeader::decode(&mut &hex("00 00 03")[..], false).unwrap();
		assert_eq!((end.length, end.status), (0, status::END_OF_GROUP));
	}

	#[test]
	fn the_public_clients_header_and_bad_types() {
		// What the public clock example sends: 0x19, extensions, subgroup 0, the group's end.
		let header = SubgroupHeader::decode(&mut &hex("19 07 1c 00")[..]).unwrap();
		assert_eq!(header.subgroup, SubgroupId::Zero);
		assert!(header.extensions && header.end_of_group);
		for bad in ["16 00 00 00", "1e 00 00 00", "20 00 00 00", "05 00", "38 00 00"] {
			assert!(SubgroupHeader::decode(&mut &hex(bad)[..]).is_err(), "{bad}");
		}
		// draft-15's 0x35 (the draft's second example): no priority byte.
		let header = SubgroupHeader::decode_for(&mut &hex("35 02 00 00")[..], Version::Draft15).unwrap();
		assert_eq!(
			(header.subgroup, header.publisher_priority),
			(SubgroupId::Explicit(0), None)
		);
		let mut out = Vec::new();
		header.encode(&mut out);
		assert_eq!(out, hex("35 02 00 00"));
		for bad in ["3e 00 00", "40 00 00", "36 00 00"] {
			assert!(
				SubgroupHeader::decode_for(&mut &hex(bad)[..], Version::Draft15).is_err(),
				"{bad}"
			);
		}
		assert!(
			ObjectHeader::decode(&mut &hex("00 00 02")[..], false).is_err(),
			"status 2"
		);
	}

	#[test]
	fn fetch_objects_in_each_draft() {
		let object = |id: u64, length: u64| FetchObject {
			group: 1,
			subgroup: 0,
			object: id,
			publisher_priority: 128,
			extensions: None,
			length,
			status: status::NORMAL,
		};
		// draft-14: every field, an extensions block always (empty here), a status after an
		// empty payload; 15: flags 0x1C (group, object, priority present; subgroup 0) as a byte;
		// 16: the flags a varint, no status.
		for (version, wire, empty) in [
			(Version::Draft14, "01 00 02 80 00 02", "01 00 03 80 00 00 00"),
			(Version::Draft15, "1c 01 02 80 02", "1c 01 03 80 00 00"),
			(Version::Draft16, "1c 01 02 80 02", "1c 01 03 80 00"),
		] {
			for (object, wire) in [(object(2, 2), wire), (object(3, 0), empty)] {
				let mut out = Vec::new();
				object.emit_for(version, &mut out).unwrap();
				assert_eq!(out, hex(wire), "{version:?} writes {object:?}");
				let mut buf = &out[..];
				let mut read = FetchObject::decode_for(&mut buf, version, None).unwrap().unwrap();
				if version == Version::Draft14 {
					// draft-14's block is always there.
					assert_eq!(read.extensions.take().as_deref(), Some(&[][..]));
				}
				assert_eq!((read, buf.len()), (object, 0), "{version:?} reads {wire}");
			}
		}
		// Flags 0x00 after an object: its group and priority, the next id, subgroup 0.
		let first = object(2, 2);
		let next = FetchObject::decode_for(&mut &hex("00 01")[..], Version::Draft16, Some(&first))
			.unwrap()
			.unwrap();
		assert_eq!(next, object(3, 1));
		// ...which a first object may not use; draft-16's end of a non-existent range (0x8C, two
		// bytes as a varint) carries a location and no object; 0x80 is no flag in 16, nor 0x40 in
		// 15.
		assert!(FetchObject::decode_for(&mut &hex("00 01")[..], Version::Draft16, None).is_err());
		assert_eq!(
			FetchObject::decode_for(&mut &hex("40 8c 03 00")[..], Version::Draft16, None),
			Ok(None)
		);
		assert!(FetchObject::decode_for(&mut &hex("40 80 01 02 80 00")[..], Version::Draft16, None).is_err());
		assert!(FetchObject::decode_for(&mut &hex("5c 01 02 80 00 00")[..], Version::Draft15, None).is_err());
		// Found by the fuzzer: the id after the largest a varint carries was read, and could not
		// be written back.
		let largest = FetchObject {
			object: crate::coding::VARINT_MAX,
			..object(0, 0)
		};
		assert!(FetchObject::decode_for(&mut &hex("00 01")[..], Version::Draft16, Some(&largest)).is_err());
	}
}
