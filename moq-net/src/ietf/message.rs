//! draft-14's control messages: `Type (varint), Length (16), Payload`, one [`Message`] each.
//!
//! Every message on the control stream decodes into [`Message`]; its payload must fill the
//! length exactly (else PROTOCOL_VIOLATION), and an unknown type closes the session. Strings,
//! namespaces and parameter lists are capped as the draft says (a namespace of 1–32 fields, a
//! reason of 1,024 bytes) or by [`crate::coding::MAX_STRING_LEN`] where it says nothing.

use bytes::Bytes;

use super::Version;
use crate::coding::{
	Decode, DecodeError, Encode, EncodeError, MAX_STRING_LEN, decode_bytes, decode_str, decode_varint, encode_bytes,
	encode_varint,
};

/// The longest reason phrase (draft-14 §1.4.3: 1,024 bytes).
pub const MAX_REASON: usize = 1024;
/// The most fields in a track namespace (draft-14 §2.4.1).
pub const MAX_NAMESPACE_FIELDS: usize = 32;
/// The most parameters a message carries: a bound of ours (the draft has none).
pub const MAX_PARAMETERS: usize = 64;
/// The longest GOAWAY URI (draft-14 §9.4).
pub const MAX_GOAWAY_URI: usize = 8192;

/// A location in a track: a group and an object within it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
	/// The group.
	pub group: u64,
	/// The object.
	pub object: u64,
}

impl Decode for Location {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Ok(Self {
			group: decode_varint(buf)?,
			object: decode_varint(buf)?,
		})
	}
}

impl Encode for Location {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.group, out)?;
		encode_varint(self.object, out)
	}
}

/// A parameter's value: even types carry a varint, odd ones bytes (draft-14 §1.4.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
	/// An even type's varint.
	Int(u64),
	/// An odd type's bytes (at most 65,535).
	Bytes(Bytes),
}

/// Key-value pairs: SETUP parameters, or a message's parameters. Unknown ones are kept (a relay
/// passes nothing on, but a test or a client may look).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parameters(pub Vec<(u64, Value)>);

impl Parameters {
	/// The varint of parameter `kind`, if present.
	pub fn int(&self, kind: u64) -> Option<u64> {
		self.0.iter().find_map(|(k, v)| match v {
			Value::Int(n) if *k == kind => Some(*n),
			_ => None,
		})
	}

	/// The bytes of parameter `kind`, if present.
	pub fn bytes(&self, kind: u64) -> Option<&Bytes> {
		self.0.iter().find_map(|(k, v)| match v {
			Value::Bytes(b) if *k == kind => Some(b),
			_ => None,
		})
	}

	/// `known` (the fields a draft carries as parameters), then these.
	fn after(&self, known: Vec<(u64, Value)>) -> Self {
		let mut all = known;
		all.extend(self.0.iter().cloned());
		Self(all)
	}

	/// These without the parameters of `kinds` (read into fields).
	fn without(mut self, kinds: &[u64]) -> Self {
		self.0.retain(|(kind, _)| !kinds.contains(kind));
		self
	}

	/// With parameter `kind` holding `value` (an even `kind`).
	pub fn with_int(mut self, kind: u64, value: u64) -> Self {
		self.0.push((kind, Value::Int(value)));
		self
	}

	/// With parameter `kind` holding `value` (an odd `kind`).
	pub fn with_bytes(mut self, kind: u64, value: impl Into<Bytes>) -> Self {
		self.0.push((kind, Value::Bytes(value.into())));
		self
	}
}

impl Parameters {
	/// Reads a count and that many pairs as `version` has them: each type absolute (drafts 14
	/// and 15) or the difference from the one before (draft-16 on, so ascending); even types
	/// carry a varint, odd ones bytes.
	pub fn read(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		let count = decode_varint(buf)? as usize;
		Self::read_pairs(buf, version, Some(count))
	}

	/// Pairs until the bytes end (draft-16's track extensions), or `count` of them.
	fn read_pairs(buf: &mut &[u8], version: Version, count: Option<usize>) -> Result<Self, DecodeError> {
		if count.is_some_and(|count| count > MAX_PARAMETERS) {
			return Err(DecodeError::TooManyParameters);
		}
		let mut params = Vec::with_capacity(count.unwrap_or(0));
		let mut kind = 0u64;
		while count.map_or(!buf.is_empty(), |count| params.len() < count) {
			if params.len() == MAX_PARAMETERS {
				return Err(DecodeError::TooManyParameters);
			}
			let read = decode_varint(buf)?;
			kind = match version.delta_types() {
				true => kind
					.checked_add(read)
					.ok_or(DecodeError::InvalidValue("parameter type"))?,
				false => read,
			};
			let value = if kind.is_multiple_of(2) {
				Value::Int(decode_varint(buf)?)
			} else {
				Value::Bytes(Bytes::copy_from_slice(decode_bytes(buf, u16::MAX as usize)?))
			};
			params.push((kind, value));
		}
		Ok(Self(params))
	}

	/// A message's parameters (not SETUP's): from draft-16 on, a type we do not know is an error
	/// (the draft: PROTOCOL_VIOLATION), as there is no telling what it would have changed.
	fn read_message(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		let params = Self::read(buf, version)?;
		if version.delta_types() && params.0.iter().any(|(kind, _)| !param::KNOWN_16.contains(kind)) {
			return Err(DecodeError::InvalidValue("an unknown message parameter"));
		}
		Ok(params)
	}

	/// Writes them as `version` has them (draft-16 on: sorted by type, each the difference from
	/// the one before).
	pub fn write(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if self.0.len() > MAX_PARAMETERS {
			return Err(EncodeError::TooManyParameters);
		}
		encode_varint(self.0.len() as u64, out)?;
		self.write_pairs(version, out)
	}

	fn write_pairs(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		let mut sorted: Vec<&(u64, Value)> = self.0.iter().collect();
		if version.delta_types() {
			sorted.sort_by_key(|(kind, _)| *kind);
		}
		let mut previous = 0;
		for (kind, value) in sorted {
			match version.delta_types() {
				true => encode_varint(kind - previous, out)?,
				false => encode_varint(*kind, out)?,
			}
			previous = *kind;
			match value {
				Value::Int(n) if kind.is_multiple_of(2) => encode_varint(*n, out)?,
				Value::Bytes(b) if kind % 2 == 1 => encode_bytes(b, u16::MAX as usize, out)?,
				_ => return Err(EncodeError::BoundsExceeded),
			}
		}
		Ok(())
	}
}

impl Decode for Parameters {
	/// draft-14's (see [`Parameters::read`]).
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Self::read(buf, Version::Draft14)
	}
}

impl Encode for Parameters {
	/// draft-14's (see [`Parameters::write`]).
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		self.write(Version::Draft14, out)
	}
}

/// A track namespace: 1 to 32 fields of bytes (we take UTF-8 only, to map it onto a path).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Namespace(pub Vec<String>);

impl Namespace {
	/// The namespace of a path: one field per `/`-separated segment (none for the root).
	pub fn from_path(path: &str) -> Self {
		Self(path.split('/').filter(|s| !s.is_empty()).map(str::to_owned).collect())
	}

	/// The path of this namespace: its fields joined by `/`.
	pub fn to_path(&self) -> String {
		self.0.join("/")
	}

	fn decode_fields(buf: &mut &[u8], min: usize) -> Result<Self, DecodeError> {
		let count = decode_varint(buf)? as usize;
		if count < min || count > MAX_NAMESPACE_FIELDS {
			return Err(DecodeError::InvalidValue("namespace field count"));
		}
		let mut fields = Vec::with_capacity(count);
		for _ in 0..count {
			let field = decode_str(buf, MAX_STRING_LEN)?;
			// A field holding `/` would not come back as itself from its path.
			if field.contains('/') || field.is_empty() {
				return Err(DecodeError::InvalidValue("namespace field"));
			}
			fields.push(field.to_owned());
		}
		Ok(Self(fields))
	}
}

impl Decode for Namespace {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		// draft-14 asks for one field at least; the public clients send none for the root.
		Self::decode_fields(buf, 0)
	}
}

impl Encode for Namespace {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if self.0.len() > MAX_NAMESPACE_FIELDS {
			return Err(EncodeError::BoundsExceeded);
		}
		encode_varint(self.0.len() as u64, out)?;
		for field in &self.0 {
			encode_bytes(field.as_bytes(), MAX_STRING_LEN, out)?;
		}
		Ok(())
	}
}

fn decode_name(buf: &mut &[u8]) -> Result<String, DecodeError> {
	Ok(decode_str(buf, MAX_STRING_LEN)?.to_owned())
}

fn decode_reason(buf: &mut &[u8]) -> Result<String, DecodeError> {
	Ok(decode_str(buf, MAX_REASON)?.to_owned())
}

fn decode_u8(buf: &mut &[u8]) -> Result<u8, DecodeError> {
	let (&byte, rest) = buf.split_first().ok_or(DecodeError::Short)?;
	*buf = rest;
	Ok(byte)
}

fn decode_flag(buf: &mut &[u8], field: &'static str) -> Result<bool, DecodeError> {
	match decode_u8(buf)? {
		0 => Ok(false),
		1 => Ok(true),
		_ => Err(DecodeError::InvalidValue(field)),
	}
}

fn decode_order(buf: &mut &[u8]) -> Result<u8, DecodeError> {
	match decode_u8(buf)? {
		order @ 0..=2 => Ok(order),
		_ => Err(DecodeError::InvalidValue("group order")),
	}
}

/// Which objects a subscription asks for (draft-14 §9.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
	/// 0x1: from the next group's start.
	NextGroupStart,
	/// 0x2: from the object after the largest.
	LargestObject,
	/// 0x3: from a location on.
	AbsoluteStart(Location),
	/// 0x4: from a location to a group's end (inclusive).
	AbsoluteRange(Location, u64),
}

impl Decode for Filter {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Ok(match decode_varint(buf)? {
			0x1 => Self::NextGroupStart,
			0x2 => Self::LargestObject,
			0x3 => Self::AbsoluteStart(Location::decode(buf)?),
			0x4 => Self::AbsoluteRange(Location::decode(buf)?, decode_varint(buf)?),
			_ => return Err(DecodeError::InvalidValue("filter type")),
		})
	}
}

impl Encode for Filter {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		match self {
			Self::NextGroupStart => encode_varint(0x1, out),
			Self::LargestObject => encode_varint(0x2, out),
			Self::AbsoluteStart(start) => {
				encode_varint(0x3, out)?;
				start.emit(out)
			}
			Self::AbsoluteRange(start, end) => {
				encode_varint(0x4, out)?;
				start.emit(out)?;
				encode_varint(*end, out)
			}
		}
	}
}

/// What a FETCH asks for (draft-14 §9.16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchKind {
	/// 0x1: a range of a track.
	Standalone {
		/// The track.
		namespace: Namespace,
		/// Its name.
		name: String,
		/// The first location.
		start: Location,
		/// The last location (its object: one past the last, 0 for the whole group).
		end: Location,
	},
	/// 0x2 (relative: `start` groups before the subscription's largest) or 0x3 (absolute: from
	/// group `start`): what came before a subscription made with LargestObject.
	Joining {
		/// Relative (0x2) or absolute (0x3).
		relative: bool,
		/// The subscription's request.
		subscription: u64,
		/// Groups back, or the first group.
		start: u64,
	},
}

/// A SUBSCRIBE, or a TRACK_STATUS (the same layout in draft-14).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscribe {
	/// Its request id.
	pub request_id: u64,
	/// The track's namespace.
	pub namespace: Namespace,
	/// The track's name.
	pub name: String,
	/// 0 is first.
	pub subscriber_priority: u8,
	/// 0: the publisher's; 1 ascending; 2 descending.
	pub group_order: u8,
	/// Whether objects are to be sent.
	pub forward: bool,
	/// Which objects.
	pub filter: Filter,
	/// Its parameters.
	pub params: Parameters,
}

impl Subscribe {
	fn decode_14(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		Ok(Self {
			request_id: decode_varint(buf)?,
			namespace: Namespace::decode(buf)?,
			name: decode_name(buf)?,
			subscriber_priority: decode_u8(buf)?,
			group_order: decode_order(buf)?,
			forward: decode_flag(buf, "forward")?,
			filter: Filter::decode(buf)?,
			params: Parameters::read_message(buf, version)?,
		})
	}

	fn emit_14(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.request_id, out)?;
		self.namespace.emit(out)?;
		encode_bytes(self.name.as_bytes(), MAX_STRING_LEN, out)?;
		out.extend_from_slice(&[self.subscriber_priority, self.group_order, u8::from(self.forward)]);
		self.filter.emit(out)?;
		self.params.write(version, out)
	}
}

/// A SUBSCRIBE_OK, or a TRACK_STATUS_OK (the same layout, alias 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscribeOk {
	/// The SUBSCRIBE's request id.
	pub request_id: u64,
	/// What the objects' streams name the track by.
	pub track_alias: u64,
	/// Milliseconds the subscription lasts (0: until ended).
	pub expires: u64,
	/// 1 ascending, 2 descending (draft-15: 0 when the parameter is absent).
	pub group_order: u8,
	/// The largest location, if anything was published.
	pub largest: Option<Location>,
	/// Its parameters.
	pub params: Parameters,
}

impl SubscribeOk {
	fn decode_14(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		let request_id = decode_varint(buf)?;
		let track_alias = decode_varint(buf)?;
		let expires = decode_varint(buf)?;
		let group_order @ 1..=2 = decode_u8(buf)? else {
			return Err(DecodeError::InvalidValue("group order"));
		};
		let largest = match decode_flag(buf, "content exists")? {
			true => Some(Location::decode(buf)?),
			false => None,
		};
		Ok(Self {
			request_id,
			track_alias,
			expires,
			group_order,
			largest,
			params: Parameters::read_message(buf, version)?,
		})
	}

	fn emit_14(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.request_id, out)?;
		encode_varint(self.track_alias, out)?;
		encode_varint(self.expires, out)?;
		out.push(self.group_order);
		match &self.largest {
			Some(largest) => {
				out.push(1);
				largest.emit(out)?;
			}
			None => out.push(0),
		}
		self.params.write(version, out)
	}
}

/// A request refused: `request id, code, reason` (SUBSCRIBE_ERROR, PUBLISH_NAMESPACE_ERROR,
/// SUBSCRIBE_NAMESPACE_ERROR, FETCH_ERROR, PUBLISH_ERROR, TRACK_STATUS_ERROR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestError {
	/// The request.
	pub request_id: u64,
	/// Why (see [`super::request_code`]).
	pub code: u64,
	/// draft-16 on: the least milliseconds to wait before asking again, plus one (0: do not
	/// ask again).
	pub retry_interval: u64,
	/// In words.
	pub reason: String,
}

impl RequestError {
	/// draft-16's REQUEST_ERROR: the retry interval after the code.
	fn decode_16(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Ok(Self {
			request_id: decode_varint(buf)?,
			code: decode_varint(buf)?,
			retry_interval: decode_varint(buf)?,
			reason: decode_reason(buf)?,
		})
	}

	fn emit_16(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.request_id, out)?;
		encode_varint(self.code, out)?;
		encode_varint(self.retry_interval, out)?;
		encode_bytes(self.reason.as_bytes(), MAX_REASON, out)
	}
}

impl Decode for RequestError {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Ok(Self {
			request_id: decode_varint(buf)?,
			code: decode_varint(buf)?,
			retry_interval: 0,
			reason: decode_reason(buf)?,
		})
	}
}

impl Encode for RequestError {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.request_id, out)?;
		encode_varint(self.code, out)?;
		encode_bytes(self.reason.as_bytes(), MAX_REASON, out)
	}
}

/// Every draft-14 control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
	/// 0x20: the client's versions and parameters.
	ClientSetup {
		/// The versions it speaks.
		versions: Vec<u64>,
		/// Its parameters (PATH 0x01, MAX_REQUEST_ID 0x02, ...).
		params: Parameters,
	},
	/// 0x21: the version chosen, and the server's parameters.
	ServerSetup {
		/// The version chosen.
		version: u64,
		/// Its parameters.
		params: Parameters,
	},
	/// 0x10: the session should move (an empty URI: elsewhere, as the client sees fit).
	Goaway {
		/// Where to.
		uri: String,
	},
	/// 0x15: requests may use ids below this.
	MaxRequestId(u64),
	/// 0x1A: the sender would use ids at this bound.
	RequestsBlocked(u64),
	/// 0x03.
	Subscribe(Subscribe),
	/// 0x04.
	SubscribeOk(SubscribeOk),
	/// 0x05.
	SubscribeError(RequestError),
	/// 0x02: a subscription's range, priority or forwarding changed.
	SubscribeUpdate {
		/// This update's own request id.
		request_id: u64,
		/// The subscription's.
		subscription: u64,
		/// Its start.
		start: Location,
		/// One past its last group (0: open).
		end_group: u64,
		/// Its priority.
		subscriber_priority: u8,
		/// Whether objects are to be sent.
		forward: bool,
		/// Its parameters.
		params: Parameters,
	},
	/// 0x0A: the subscription is no longer wanted.
	Unsubscribe(u64),
	/// 0x0B: the subscription ended.
	PublishDone {
		/// The subscription.
		request_id: u64,
		/// Why (see [`super::done_code`]).
		status: u64,
		/// Data streams opened for it.
		stream_count: u64,
		/// In words.
		reason: String,
	},
	/// 0x06: the sender publishes under a namespace.
	PublishNamespace {
		/// Its request id.
		request_id: u64,
		/// The namespace.
		namespace: Namespace,
		/// Its parameters.
		params: Parameters,
	},
	/// 0x07.
	PublishNamespaceOk(u64),
	/// 0x08.
	PublishNamespaceError(RequestError),
	/// 0x09: no longer published.
	PublishNamespaceDone(Namespace),
	/// 0x0C: the receiver takes no more of the namespace.
	PublishNamespaceCancel {
		/// The namespace.
		namespace: Namespace,
		/// Why.
		code: u64,
		/// In words.
		reason: String,
	},
	/// 0x11: the sender wants the namespaces (and PUBLISHes) under a prefix.
	SubscribeNamespace {
		/// Its request id.
		request_id: u64,
		/// The prefix.
		prefix: Namespace,
		/// draft-16: what the sender wants under it ([`subscribe_options`]); drafts 14 and 15
		/// mean both.
		options: u64,
		/// Its parameters.
		params: Parameters,
	},
	/// 0x12.
	SubscribeNamespaceOk(u64),
	/// 0x13.
	SubscribeNamespaceError(RequestError),
	/// 0x14: the prefix is no longer wanted.
	UnsubscribeNamespace(Namespace),
	/// 0x16.
	Fetch {
		/// Its request id.
		request_id: u64,
		/// 0 is first.
		subscriber_priority: u8,
		/// 0: the publisher's; 1 ascending; 2 descending.
		group_order: u8,
		/// What.
		kind: FetchKind,
		/// Its parameters.
		params: Parameters,
	},
	/// 0x18.
	FetchOk {
		/// The FETCH.
		request_id: u64,
		/// 1 ascending, 2 descending.
		group_order: u8,
		/// Whether the range reaches the track's end.
		end_of_track: bool,
		/// The range's end.
		end: Location,
		/// Its parameters.
		params: Parameters,
	},
	/// 0x19.
	FetchError(RequestError),
	/// 0x17.
	FetchCancel(u64),
	/// 0x0D: a SUBSCRIBE's layout, answered without a subscription.
	TrackStatus(Subscribe),
	/// 0x0E: a SUBSCRIBE_OK's layout (alias 0).
	TrackStatusOk(SubscribeOk),
	/// 0x0F.
	TrackStatusError(RequestError),
	/// 0x1D: the sender pushes a track (kept whole, unread: we refuse it).
	Publish {
		/// Its request id.
		request_id: u64,
		/// The rest of its body.
		body: Bytes,
	},
	/// 0x1E: the sender takes a PUBLISH (kept whole, unread).
	PublishOk {
		/// The PUBLISH.
		request_id: u64,
		/// The rest of its body.
		body: Bytes,
	},
	/// 0x1F.
	PublishError(RequestError),
	/// draft-15's 0x07: a request done (draft-14's PUBLISH_NAMESPACE_OK's type, with
	/// parameters). Its error is 0x05, [`SubscribeError`](Self::SubscribeError)'s layout, for
	/// every request.
	RequestOk {
		/// The request.
		request_id: u64,
		/// Its parameters.
		params: Parameters,
	},
	/// draft-15's 0x14: a namespace subscription is no longer wanted, by its request id.
	UnsubscribeNamespaceRequest(u64),
	/// draft-16's 0x08, on a SUBSCRIBE_NAMESPACE's stream: a namespace under its prefix, by its
	/// fields after the prefix's.
	Namespace(Namespace),
	/// draft-16's 0x0E, on a SUBSCRIBE_NAMESPACE's stream: that namespace is gone.
	NamespaceDone(Namespace),
	/// draft-16's 0x09: no longer published, by the PUBLISH_NAMESPACE's request id.
	PublishNamespaceDoneRequest(u64),
	/// draft-16's 0x0C: the receiver takes no more of a PUBLISH_NAMESPACE, by its request id
	/// (draft-14's error layout: `request id, code, reason`).
	PublishNamespaceCancelRequest(RequestError),
}

/// What a draft-16 SUBSCRIBE_NAMESPACE asks for.
pub mod subscribe_options {
	/// PUBLISH of the tracks under the prefix.
	pub const PUBLISH: u64 = 0x0;
	/// NAMESPACE of the namespaces under it.
	pub const NAMESPACE: u64 = 0x1;
	/// Both.
	pub const BOTH: u64 = 0x2;
}

impl Message {
	/// Its type on the wire.
	pub fn kind(&self) -> u64 {
		match self {
			Self::ClientSetup { .. } => 0x20,
			Self::ServerSetup { .. } => 0x21,
			Self::Goaway { .. } => 0x10,
			Self::MaxRequestId(_) => 0x15,
			Self::RequestsBlocked(_) => 0x1a,
			Self::Subscribe(_) => 0x03,
			Self::SubscribeOk(_) => 0x04,
			Self::SubscribeError(_) => 0x05,
			Self::SubscribeUpdate { .. } => 0x02,
			Self::Unsubscribe(_) => 0x0a,
			Self::PublishDone { .. } => 0x0b,
			Self::PublishNamespace { .. } => 0x06,
			Self::PublishNamespaceOk(_) => 0x07,
			Self::PublishNamespaceError(_) => 0x08,
			Self::PublishNamespaceDone(_) => 0x09,
			Self::PublishNamespaceCancel { .. } => 0x0c,
			Self::SubscribeNamespace { .. } => 0x11,
			Self::SubscribeNamespaceOk(_) => 0x12,
			Self::SubscribeNamespaceError(_) => 0x13,
			Self::UnsubscribeNamespace(_) => 0x14,
			Self::Fetch { .. } => 0x16,
			Self::FetchOk { .. } => 0x18,
			Self::FetchError(_) => 0x19,
			Self::FetchCancel(_) => 0x17,
			Self::TrackStatus(_) => 0x0d,
			Self::TrackStatusOk(_) => 0x0e,
			Self::TrackStatusError(_) => 0x0f,
			Self::Publish { .. } => 0x1d,
			Self::PublishOk { .. } => 0x1e,
			Self::PublishError(_) => 0x1f,
			Self::RequestOk { .. } => 0x07,
			Self::UnsubscribeNamespaceRequest(_) => 0x14,
			Self::Namespace(_) => 0x08,
			Self::NamespaceDone(_) => 0x0e,
			Self::PublishNamespaceDoneRequest(_) => 0x09,
			Self::PublishNamespaceCancelRequest(_) => 0x0c,
		}
	}

	fn decode_14(kind: u64, buf: &mut &[u8], v: Version) -> Result<Self, DecodeError> {
		Ok(match kind {
			0x20 => {
				let count = decode_varint(buf)? as usize;
				if count == 0 || count > MAX_PARAMETERS {
					return Err(DecodeError::InvalidValue("version count"));
				}
				let versions = (0..count).map(|_| decode_varint(buf)).collect::<Result<_, _>>()?;
				Self::ClientSetup {
					versions,
					params: Parameters::read(buf, v)?,
				}
			}
			0x21 => Self::ServerSetup {
				version: decode_varint(buf)?,
				params: Parameters::read(buf, v)?,
			},
			0x10 => Self::Goaway {
				uri: decode_str(buf, MAX_GOAWAY_URI)?.to_owned(),
			},
			0x15 => Self::MaxRequestId(decode_varint(buf)?),
			0x1a => Self::RequestsBlocked(decode_varint(buf)?),
			0x03 => Self::Subscribe(Subscribe::decode_14(buf, v)?),
			0x04 => Self::SubscribeOk(SubscribeOk::decode_14(buf, v)?),
			0x05 => Self::SubscribeError(RequestError::decode(buf)?),
			0x02 => Self::SubscribeUpdate {
				request_id: decode_varint(buf)?,
				subscription: decode_varint(buf)?,
				start: Location::decode(buf)?,
				end_group: decode_varint(buf)?,
				subscriber_priority: decode_u8(buf)?,
				forward: decode_flag(buf, "forward")?,
				params: Parameters::read_message(buf, v)?,
			},
			0x0a => Self::Unsubscribe(decode_varint(buf)?),
			0x0b => Self::PublishDone {
				request_id: decode_varint(buf)?,
				status: decode_varint(buf)?,
				stream_count: decode_varint(buf)?,
				reason: decode_reason(buf)?,
			},
			0x06 => Self::PublishNamespace {
				request_id: decode_varint(buf)?,
				namespace: Namespace::decode(buf)?,
				params: Parameters::read_message(buf, v)?,
			},
			0x07 => Self::PublishNamespaceOk(decode_varint(buf)?),
			0x08 => Self::PublishNamespaceError(RequestError::decode(buf)?),
			0x09 => Self::PublishNamespaceDone(Namespace::decode(buf)?),
			0x0c => Self::PublishNamespaceCancel {
				namespace: Namespace::decode(buf)?,
				code: decode_varint(buf)?,
				reason: decode_reason(buf)?,
			},
			0x11 => Self::SubscribeNamespace {
				request_id: decode_varint(buf)?,
				prefix: Namespace::decode(buf)?,
				options: subscribe_options::BOTH,
				params: Parameters::read_message(buf, v)?,
			},
			0x12 => Self::SubscribeNamespaceOk(decode_varint(buf)?),
			0x13 => Self::SubscribeNamespaceError(RequestError::decode(buf)?),
			0x14 => Self::UnsubscribeNamespace(Namespace::decode(buf)?),
			0x16 => {
				let request_id = decode_varint(buf)?;
				let subscriber_priority = decode_u8(buf)?;
				let group_order = decode_order(buf)?;
				let kind = FetchKind::decode(buf)?;
				Self::Fetch {
					request_id,
					subscriber_priority,
					group_order,
					kind,
					params: Parameters::read_message(buf, v)?,
				}
			}
			0x18 => Self::FetchOk {
				request_id: decode_varint(buf)?,
				group_order: decode_order(buf)?,
				end_of_track: decode_flag(buf, "end of track")?,
				end: Location::decode(buf)?,
				params: Parameters::read_message(buf, v)?,
			},
			0x19 => Self::FetchError(RequestError::decode(buf)?),
			0x17 => Self::FetchCancel(decode_varint(buf)?),
			0x0d => Self::TrackStatus(Subscribe::decode_14(buf, v)?),
			0x0e => Self::TrackStatusOk(SubscribeOk::decode_14(buf, v)?),
			0x0f => Self::TrackStatusError(RequestError::decode(buf)?),
			0x1d | 0x1e => {
				let request_id = decode_varint(buf)?;
				let body = Bytes::copy_from_slice(buf);
				*buf = &[];
				match kind {
					0x1d => Self::Publish { request_id, body },
					_ => Self::PublishOk { request_id, body },
				}
			}
			0x1f => Self::PublishError(RequestError::decode(buf)?),
			other => return Err(DecodeError::UnexpectedMessage(other)),
		})
	}

	fn emit_14(&self, v: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		match self {
			Self::ClientSetup { versions, params } => {
				encode_varint(versions.len() as u64, out)?;
				for version in versions {
					encode_varint(*version, out)?;
				}
				params.write(v, out)
			}
			Self::ServerSetup { version, params } => {
				encode_varint(*version, out)?;
				params.write(v, out)
			}
			Self::Goaway { uri } => encode_bytes(uri.as_bytes(), MAX_GOAWAY_URI, out),
			Self::MaxRequestId(id)
			| Self::RequestsBlocked(id)
			| Self::Unsubscribe(id)
			| Self::PublishNamespaceOk(id)
			| Self::SubscribeNamespaceOk(id)
			| Self::FetchCancel(id) => encode_varint(*id, out),
			Self::Subscribe(subscribe) | Self::TrackStatus(subscribe) => subscribe.emit_14(v, out),
			Self::SubscribeOk(ok) | Self::TrackStatusOk(ok) => ok.emit_14(v, out),
			Self::SubscribeError(error)
			| Self::PublishNamespaceError(error)
			| Self::SubscribeNamespaceError(error)
			| Self::FetchError(error)
			| Self::TrackStatusError(error)
			| Self::PublishError(error) => error.emit(out),
			Self::SubscribeUpdate {
				request_id,
				subscription,
				start,
				end_group,
				subscriber_priority,
				forward,
				params,
			} => {
				encode_varint(*request_id, out)?;
				encode_varint(*subscription, out)?;
				start.emit(out)?;
				encode_varint(*end_group, out)?;
				out.extend_from_slice(&[*subscriber_priority, u8::from(*forward)]);
				params.write(v, out)
			}
			Self::PublishDone {
				request_id,
				status,
				stream_count,
				reason,
			} => {
				encode_varint(*request_id, out)?;
				encode_varint(*status, out)?;
				encode_varint(*stream_count, out)?;
				encode_bytes(reason.as_bytes(), MAX_REASON, out)
			}
			Self::PublishNamespace {
				request_id,
				namespace,
				params,
			} => {
				encode_varint(*request_id, out)?;
				namespace.emit(out)?;
				params.write(v, out)
			}
			Self::PublishNamespaceDone(namespace) | Self::UnsubscribeNamespace(namespace) => namespace.emit(out),
			Self::PublishNamespaceCancel {
				namespace,
				code,
				reason,
			} => {
				namespace.emit(out)?;
				encode_varint(*code, out)?;
				encode_bytes(reason.as_bytes(), MAX_REASON, out)
			}
			Self::SubscribeNamespace {
				request_id,
				prefix,
				params,
				..
			} => {
				encode_varint(*request_id, out)?;
				prefix.emit(out)?;
				params.write(v, out)
			}
			Self::Fetch {
				request_id,
				subscriber_priority,
				group_order,
				kind,
				params,
			} => {
				encode_varint(*request_id, out)?;
				out.extend_from_slice(&[*subscriber_priority, *group_order]);
				kind.emit(out)?;
				params.write(v, out)
			}
			Self::FetchOk {
				request_id,
				group_order,
				end_of_track,
				end,
				params,
			} => {
				encode_varint(*request_id, out)?;
				out.extend_from_slice(&[*group_order, u8::from(*end_of_track)]);
				end.emit(out)?;
				params.write(v, out)
			}
			Self::Publish { request_id, body } | Self::PublishOk { request_id, body } => {
				encode_varint(*request_id, out)?;
				out.extend_from_slice(body);
				Ok(())
			}
			Self::RequestOk { .. } | Self::UnsubscribeNamespaceRequest(_) => {
				Err(EncodeError::NotInVersion("a draft-15 message"))
			}
			Self::Namespace(_)
			| Self::NamespaceDone(_)
			| Self::PublishNamespaceDoneRequest(_)
			| Self::PublishNamespaceCancelRequest(_) => Err(EncodeError::NotInVersion("a draft-16 message")),
		}
	}

	/// draft-15's payloads: what changed from draft-14, and draft-14's where nothing did.
	fn decode_15(kind: u64, buf: &mut &[u8], v: Version) -> Result<Self, DecodeError> {
		Ok(match kind {
			0x20 => Self::ClientSetup {
				versions: Vec::new(),
				params: Parameters::read(buf, v)?,
			},
			0x21 => Self::ServerSetup {
				version: v.number(),
				params: Parameters::read(buf, v)?,
			},
			0x03 => Self::Subscribe(Subscribe::decode_15(buf, v)?),
			0x0d => Self::TrackStatus(Subscribe::decode_15(buf, v)?),
			0x04 => Self::SubscribeOk(SubscribeOk::decode_15(buf, v)?),
			0x07 => Self::RequestOk {
				request_id: decode_varint(buf)?,
				params: Parameters::read_message(buf, v)?,
			},
			0x14 => Self::UnsubscribeNamespaceRequest(decode_varint(buf)?),
			0x02 => {
				let request_id = decode_varint(buf)?;
				let subscription = decode_varint(buf)?;
				let params = Parameters::read_message(buf, v)?;
				Self::SubscribeUpdate {
					request_id,
					subscription,
					start: Location::default(),
					end_group: 0,
					subscriber_priority: priority_param(&params)?,
					forward: forward_param(&params)?,
					params: params.without(&[param::FORWARD, param::SUBSCRIBER_PRIORITY]),
				}
			}
			0x16 => {
				let request_id = decode_varint(buf)?;
				let kind = FetchKind::decode(buf)?;
				let params = Parameters::read_message(buf, v)?;
				Self::Fetch {
					request_id,
					subscriber_priority: priority_param(&params)?,
					group_order: order_param(&params)?,
					kind,
					params: params.without(&[param::SUBSCRIBER_PRIORITY, param::GROUP_ORDER]),
				}
			}
			0x18 => {
				let request_id = decode_varint(buf)?;
				let end_of_track = decode_flag(buf, "end of track")?;
				let end = Location::decode(buf)?;
				let params = Parameters::read_message(buf, v)?;
				Self::FetchOk {
					request_id,
					group_order: order_param(&params)?,
					end_of_track,
					end,
					params: params.without(&[param::GROUP_ORDER]),
				}
			}
			// Gone in draft-15 (REQUEST_OK and REQUEST_ERROR answer every request).
			0x08 | 0x0e | 0x0f | 0x12 | 0x13 | 0x19 | 0x1f => return Err(DecodeError::UnexpectedMessage(kind)),
			_ => Self::decode_14(kind, buf, v)?,
		})
	}

	fn emit_15(&self, v: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		match self {
			Self::ClientSetup { params, .. } | Self::ServerSetup { params, .. } => params.write(v, out),
			Self::Subscribe(subscribe) | Self::TrackStatus(subscribe) => subscribe.emit_15(v, out),
			Self::SubscribeOk(ok) => ok.emit_15(v, out),
			Self::RequestOk { request_id, params } => {
				encode_varint(*request_id, out)?;
				params.write(v, out)
			}
			Self::UnsubscribeNamespaceRequest(id) => encode_varint(*id, out),
			Self::SubscribeUpdate {
				request_id,
				subscription,
				subscriber_priority,
				forward,
				params,
				..
			} => {
				encode_varint(*request_id, out)?;
				encode_varint(*subscription, out)?;
				let known = vec![
					(param::FORWARD, Value::Int(u64::from(*forward))),
					(param::SUBSCRIBER_PRIORITY, Value::Int(u64::from(*subscriber_priority))),
				];
				params.after(known).write(v, out)
			}
			Self::Fetch {
				request_id,
				subscriber_priority,
				group_order,
				kind,
				params,
			} => {
				encode_varint(*request_id, out)?;
				kind.emit(out)?;
				let mut known = vec![(param::SUBSCRIBER_PRIORITY, Value::Int(u64::from(*subscriber_priority)))];
				if *group_order != 0 {
					known.push((param::GROUP_ORDER, Value::Int(u64::from(*group_order))));
				}
				params.after(known).write(v, out)
			}
			Self::FetchOk {
				request_id,
				group_order,
				end_of_track,
				end,
				params,
			} => {
				encode_varint(*request_id, out)?;
				out.push(u8::from(*end_of_track));
				end.emit(out)?;
				let mut known = Vec::new();
				if *group_order != 0 {
					known.push((param::GROUP_ORDER, Value::Int(u64::from(*group_order))));
				}
				params.after(known).write(v, out)
			}
			Self::PublishNamespaceOk(_)
			| Self::PublishNamespaceError(_)
			| Self::TrackStatusOk(_)
			| Self::TrackStatusError(_)
			| Self::SubscribeNamespaceOk(_)
			| Self::SubscribeNamespaceError(_)
			| Self::FetchError(_)
			| Self::PublishError(_)
			| Self::UnsubscribeNamespace(_) => Err(EncodeError::NotInVersion("a draft-14 message")),
			_ => self.emit_14(v, out),
		}
	}

	/// draft-16's payloads: what changed from draft-15 (the parameters' types are deltas
	/// throughout, read by [`Parameters::read`]), and draft-15's where nothing did.
	fn decode_16(kind: u64, buf: &mut &[u8]) -> Result<Self, DecodeError> {
		let v = Version::Draft16;
		Ok(match kind {
			0x05 => Self::SubscribeError(RequestError::decode_16(buf)?),
			0x08 => Self::Namespace(Namespace::decode(buf)?),
			0x0e => Self::NamespaceDone(Namespace::decode(buf)?),
			0x09 => Self::PublishNamespaceDoneRequest(decode_varint(buf)?),
			0x0c => Self::PublishNamespaceCancelRequest(RequestError::decode(buf)?),
			0x11 => {
				let request_id = decode_varint(buf)?;
				let prefix = Namespace::decode(buf)?;
				let options = decode_varint(buf)?;
				if options > subscribe_options::BOTH {
					return Err(DecodeError::InvalidValue("subscribe options"));
				}
				Self::SubscribeNamespace {
					request_id,
					prefix,
					options,
					params: Parameters::read_message(buf, v)?,
				}
			}
			// SUBSCRIBE_OK and FETCH_OK end with the track's extensions: read (their form
			// checked) and left behind, as a relay passes on no parameter.
			0x04 | 0x18 => {
				let message = Self::decode_15(kind, buf, v)?;
				Parameters::read_pairs(buf, v, None)?;
				message
			}
			// Gone in draft-16: closing the SUBSCRIBE_NAMESPACE's stream says it.
			0x14 => return Err(DecodeError::UnexpectedMessage(kind)),
			_ => Self::decode_15(kind, buf, v)?,
		})
	}

	fn emit_16(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		let v = Version::Draft16;
		match self {
			Self::SubscribeError(error) => error.emit_16(out),
			Self::Namespace(suffix) | Self::NamespaceDone(suffix) => suffix.emit(out),
			Self::PublishNamespaceDoneRequest(id) => encode_varint(*id, out),
			Self::PublishNamespaceCancelRequest(cancel) => cancel.emit(out),
			Self::SubscribeNamespace {
				request_id,
				prefix,
				options,
				params,
			} => {
				encode_varint(*request_id, out)?;
				prefix.emit(out)?;
				encode_varint(*options, out)?;
				params.write(v, out)
			}
			Self::UnsubscribeNamespaceRequest(_)
			| Self::PublishNamespaceDone(_)
			| Self::PublishNamespaceCancel { .. } => Err(EncodeError::NotInVersion("a message draft-16 replaced")),
			// SUBSCRIBE_OK and FETCH_OK as draft-15's, with no track extensions after.
			_ => self.emit_15(v, out),
		}
	}

	/// Reads one message as `version` has it (`Type, Length (16), Payload`; the payload must
	/// fill its length exactly).
	pub fn decode_for(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError> {
		let kind = decode_varint(buf)?;
		if buf.len() < 2 {
			return Err(DecodeError::Short);
		}
		let len = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
		let Some(body) = buf.get(2..2 + len) else {
			return Err(DecodeError::Short);
		};
		let mut payload = body;
		let message = match version {
			Version::Draft14 => Self::decode_14(kind, &mut payload, version),
			Version::Draft15 => Self::decode_15(kind, &mut payload, version),
			Version::Draft16 => Self::decode_16(kind, &mut payload),
		}
		.map_err(|err| match err {
			DecodeError::Short => DecodeError::Truncated,
			other => other,
		})?;
		if !payload.is_empty() {
			return Err(DecodeError::Long);
		}
		*buf = &buf[2 + len..];
		Ok(message)
	}

	/// Writes it as `version` has it.
	pub fn encode_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		let start = out.len();
		let result = self.emit_for(version, out);
		if result.is_err() {
			out.truncate(start);
		}
		result
	}

	fn emit_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.kind(), out)?;
		let at = out.len();
		out.extend_from_slice(&[0, 0]);
		match version {
			Version::Draft14 => self.emit_14(version, out)?,
			Version::Draft15 => self.emit_15(version, out)?,
			Version::Draft16 => self.emit_16(out)?,
		}
		let len = u16::try_from(out.len() - at - 2).map_err(|_| EncodeError::BoundsExceeded)?;
		out[at..at + 2].copy_from_slice(&len.to_be_bytes());
		Ok(())
	}
}

/// draft-15's message parameters that carry what draft-14's fixed fields did.
pub mod param {
	/// EXPIRES (SUBSCRIBE_OK), milliseconds.
	pub const EXPIRES: u64 = 0x08;
	/// LARGEST_OBJECT (SUBSCRIBE_OK): a location, length-prefixed.
	pub const LARGEST_OBJECT: u64 = 0x09;
	/// FORWARD: 0 or 1 (default 1).
	pub const FORWARD: u64 = 0x10;
	/// SUBSCRIBER_PRIORITY: 0 to 255 (default 128).
	pub const SUBSCRIBER_PRIORITY: u64 = 0x20;
	/// SUBSCRIPTION_FILTER: a filter, length-prefixed.
	pub const SUBSCRIPTION_FILTER: u64 = 0x21;
	/// GROUP_ORDER: 1 ascending, 2 descending.
	pub const GROUP_ORDER: u64 = 0x22;
	/// DELIVERY_TIMEOUT, milliseconds.
	pub const DELIVERY_TIMEOUT: u64 = 0x02;
	/// AUTHORIZATION_TOKEN: a token, length-prefixed.
	pub const AUTHORIZATION_TOKEN: u64 = 0x03;
	/// NEW_GROUP_REQUEST: the largest group known, plus one.
	pub const NEW_GROUP_REQUEST: u64 = 0x32;

	/// The message parameters draft-16 defines (any other is an error there).
	pub const KNOWN_16: [u64; 9] = [
		DELIVERY_TIMEOUT,
		AUTHORIZATION_TOKEN,
		EXPIRES,
		LARGEST_OBJECT,
		FORWARD,
		SUBSCRIBER_PRIORITY,
		SUBSCRIPTION_FILTER,
		GROUP_ORDER,
		NEW_GROUP_REQUEST,
	];
}

fn priority_param(params: &Parameters) -> Result<u8, DecodeError> {
	let priority = params.int(param::SUBSCRIBER_PRIORITY).unwrap_or(128);
	u8::try_from(priority).map_err(|_| DecodeError::InvalidValue("subscriber priority"))
}

fn forward_param(params: &Parameters) -> Result<bool, DecodeError> {
	match params.int(param::FORWARD).unwrap_or(1) {
		0 => Ok(false),
		1 => Ok(true),
		_ => Err(DecodeError::InvalidValue("forward")),
	}
}

/// GROUP_ORDER, 0 when absent (draft-15 no longer allows 0 on the wire).
fn order_param(params: &Parameters) -> Result<u8, DecodeError> {
	match params.int(param::GROUP_ORDER) {
		None => Ok(0),
		Some(order @ 1..=2) => Ok(order as u8),
		Some(_) => Err(DecodeError::InvalidValue("group order")),
	}
}

impl FetchKind {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Ok(match decode_varint(buf)? {
			0x1 => Self::Standalone {
				namespace: Namespace::decode(buf)?,
				name: decode_name(buf)?,
				start: Location::decode(buf)?,
				end: Location::decode(buf)?,
			},
			kind @ (0x2 | 0x3) => Self::Joining {
				relative: kind == 0x2,
				subscription: decode_varint(buf)?,
				start: decode_varint(buf)?,
			},
			_ => return Err(DecodeError::InvalidValue("fetch type")),
		})
	}

	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		match self {
			Self::Standalone {
				namespace,
				name,
				start,
				end,
			} => {
				encode_varint(0x1, out)?;
				namespace.emit(out)?;
				encode_bytes(name.as_bytes(), MAX_STRING_LEN, out)?;
				start.emit(out)?;
				end.emit(out)
			}
			Self::Joining {
				relative,
				subscription,
				start,
			} => {
				encode_varint(if *relative { 0x2 } else { 0x3 }, out)?;
				encode_varint(*subscription, out)?;
				encode_varint(*start, out)
			}
		}
	}
}

impl Subscribe {
	fn decode_15(buf: &mut &[u8], v: Version) -> Result<Self, DecodeError> {
		let request_id = decode_varint(buf)?;
		let namespace = Namespace::decode(buf)?;
		let name = decode_name(buf)?;
		let params = Parameters::read_message(buf, v)?;
		let filter = match params.bytes(param::SUBSCRIPTION_FILTER) {
			Some(bytes) => Filter::decode_exact(bytes)?,
			// Unfiltered: served as the live edge, as the largest-object filter.
			None => Filter::LargestObject,
		};
		Ok(Self {
			request_id,
			namespace,
			name,
			subscriber_priority: priority_param(&params)?,
			group_order: order_param(&params)?,
			forward: forward_param(&params)?,
			filter,
			params: params.without(&[
				param::FORWARD,
				param::SUBSCRIBER_PRIORITY,
				param::SUBSCRIPTION_FILTER,
				param::GROUP_ORDER,
			]),
		})
	}

	/// draft-15's body: the fixed fields become parameters, ahead of the others.
	fn emit_15(&self, v: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.request_id, out)?;
		self.namespace.emit(out)?;
		encode_bytes(self.name.as_bytes(), MAX_STRING_LEN, out)?;
		let mut filter = Vec::new();
		self.filter.emit(&mut filter)?;
		let mut known = vec![
			(param::FORWARD, Value::Int(u64::from(self.forward))),
			(
				param::SUBSCRIBER_PRIORITY,
				Value::Int(u64::from(self.subscriber_priority)),
			),
			(param::SUBSCRIPTION_FILTER, Value::Bytes(filter.into())),
		];
		if self.group_order != 0 {
			known.push((param::GROUP_ORDER, Value::Int(u64::from(self.group_order))));
		}
		self.params.after(known).write(v, out)
	}
}

impl SubscribeOk {
	fn decode_15(buf: &mut &[u8], v: Version) -> Result<Self, DecodeError> {
		let request_id = decode_varint(buf)?;
		let track_alias = decode_varint(buf)?;
		let params = Parameters::read_message(buf, v)?;
		let largest = params
			.bytes(param::LARGEST_OBJECT)
			.map(|bytes| Location::decode_exact(bytes))
			.transpose()?;
		Ok(Self {
			request_id,
			track_alias,
			expires: params.int(param::EXPIRES).unwrap_or(0),
			group_order: order_param(&params)?,
			largest,
			params: params.without(&[param::EXPIRES, param::LARGEST_OBJECT, param::GROUP_ORDER]),
		})
	}

	/// draft-15's body: EXPIRES when there is one, LARGEST_OBJECT when there is one, and
	/// GROUP_ORDER (what a strict peer takes: it refuses any other parameter here).
	fn emit_15(&self, v: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		encode_varint(self.request_id, out)?;
		encode_varint(self.track_alias, out)?;
		let mut known = Vec::new();
		if self.expires != 0 {
			known.push((param::EXPIRES, Value::Int(self.expires)));
		}
		if let Some(largest) = &self.largest {
			let mut location = Vec::new();
			largest.emit(&mut location)?;
			known.push((param::LARGEST_OBJECT, Value::Bytes(location.into())));
		}
		if self.group_order != 0 {
			known.push((param::GROUP_ORDER, Value::Int(u64::from(self.group_order))));
		}
		self.params.after(known).write(v, out)
	}
}

impl Decode for Message {
	/// draft-14's (see [`Message::decode_for`]).
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		Self::decode_for(buf, Version::Draft14)
	}
}

impl Encode for Message {
	/// draft-14's (see [`Message::encode_for`]).
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		self.emit_for(Version::Draft14, out)
	}
}

#[cfg(test)]
mod tests;
