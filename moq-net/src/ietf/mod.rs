//! The IETF moq-transport drafts (draft-ietf-moq-transport), beside moq-lite: their wire
//! messages and a session over the same [`Transport`](crate::transport::Transport), serving and
//! filling the same model.
//!
//! What each draft changes, byte by byte, and what we chose where a draft is open, is written in
//! docs/moq-transport.md. This module speaks **draft-14** (ALPN `moq-00`, the version chosen in
//! CLIENT_SETUP), **draft-15** (ALPN `moqt-15`) and **draft-16** (ALPN `moqt-16`): one
//! [`Version`] picks the bytes.
//!
//! - `message.rs`: the control messages (a type, a 16-bit length, the body).
//! - `data.rs`: subgroup streams and their objects, object datagrams.
//! - `session.rs`: SETUP and the session.

pub mod data;
pub mod message;
pub mod session;

pub use message::Message;

/// The ALPN of draft-14 over raw QUIC (and its WebTransport sub-protocol): every draft before 15
/// used it, the version being chosen in CLIENT_SETUP.
pub const ALPN_DRAFT_14: &[u8] = b"moq-00";

/// The ALPN of draft-15 (and its WebTransport sub-protocol): from 15 on, the ALPN names the
/// version and SETUP carries none.
pub const ALPN_DRAFT_15: &[u8] = b"moqt-15";

/// The ALPN of draft-16 (and its WebTransport sub-protocol).
pub const ALPN_DRAFT_16: &[u8] = b"moqt-16";

/// A draft's version number as SETUP carries it: `0xff000000` plus the draft.
pub const DRAFT_14: u64 = 0xff00_000e;

/// draft-15's version number (never on the wire: the ALPN names it).
pub const DRAFT_15: u64 = 0xff00_000f;

/// draft-16's version number (never on the wire).
pub const DRAFT_16: u64 = 0xff00_0010;

/// The drafts we speak, oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
	/// draft-ietf-moq-transport-14.
	Draft14,
	/// draft-ietf-moq-transport-15.
	Draft15,
	/// draft-ietf-moq-transport-16.
	Draft16,
}

impl Version {
	/// Every draft we speak, oldest first.
	pub const ALL: [Self; 3] = [Self::Draft14, Self::Draft15, Self::Draft16];

	/// Whether key-value pairs carry their type as the difference from the previous one
	/// (draft-16 on).
	pub fn delta_types(self) -> bool {
		self >= Self::Draft16
	}

	/// Its ALPN (and WebTransport sub-protocol).
	pub fn alpn(self) -> &'static [u8] {
		match self {
			Self::Draft14 => ALPN_DRAFT_14,
			Self::Draft15 => ALPN_DRAFT_15,
			Self::Draft16 => ALPN_DRAFT_16,
		}
	}

	/// The draft an ALPN (or sub-protocol) names.
	pub fn from_alpn(alpn: &[u8]) -> Option<Self> {
		match alpn {
			ALPN_DRAFT_14 => Some(Self::Draft14),
			ALPN_DRAFT_15 => Some(Self::Draft15),
			ALPN_DRAFT_16 => Some(Self::Draft16),
			_ => None,
		}
	}

	/// Its version number.
	pub fn number(self) -> u64 {
		match self {
			Self::Draft14 => DRAFT_14,
			Self::Draft15 => DRAFT_15,
			Self::Draft16 => DRAFT_16,
		}
	}
}

/// The session termination codes (CONNECTION_CLOSE, or CLOSE_WEBTRANSPORT_SESSION).
pub mod code {
	/// NO_ERROR.
	pub const NO_ERROR: u64 = 0x0;
	/// INTERNAL_ERROR.
	pub const INTERNAL_ERROR: u64 = 0x1;
	/// UNAUTHORIZED.
	pub const UNAUTHORIZED: u64 = 0x2;
	/// PROTOCOL_VIOLATION.
	pub const PROTOCOL_VIOLATION: u64 = 0x3;
	/// INVALID_REQUEST_ID.
	pub const INVALID_REQUEST_ID: u64 = 0x4;
	/// DUPLICATE_TRACK_ALIAS.
	pub const DUPLICATE_TRACK_ALIAS: u64 = 0x5;
	/// KEY_VALUE_FORMATTING_ERROR.
	pub const KEY_VALUE_FORMATTING_ERROR: u64 = 0x6;
	/// TOO_MANY_REQUESTS.
	pub const TOO_MANY_REQUESTS: u64 = 0x7;
	/// INVALID_PATH.
	pub const INVALID_PATH: u64 = 0x8;
	/// MALFORMED_PATH.
	pub const MALFORMED_PATH: u64 = 0x9;
	/// GOAWAY_TIMEOUT.
	pub const GOAWAY_TIMEOUT: u64 = 0x10;
	/// CONTROL_MESSAGE_TIMEOUT.
	pub const CONTROL_MESSAGE_TIMEOUT: u64 = 0x11;
	/// DATA_STREAM_TIMEOUT.
	pub const DATA_STREAM_TIMEOUT: u64 = 0x12;
	/// VERSION_NEGOTIATION_FAILED.
	pub const VERSION_NEGOTIATION_FAILED: u64 = 0x15;
}

/// The codes a request is refused with (draft-14's SUBSCRIBE_ERROR, PUBLISH_NAMESPACE_ERROR,
/// ...; draft-15's REQUEST_ERROR shares those below 4, and numbers the rest anew).
pub mod request_code {
	/// INTERNAL_ERROR.
	pub const INTERNAL_ERROR: u64 = 0x0;
	/// UNAUTHORIZED.
	pub const UNAUTHORIZED: u64 = 0x1;
	/// TIMEOUT.
	pub const TIMEOUT: u64 = 0x2;
	/// NOT_SUPPORTED.
	pub const NOT_SUPPORTED: u64 = 0x3;
	/// TRACK_DOES_NOT_EXIST (SUBSCRIBE), UNINTERESTED (PUBLISH_NAMESPACE).
	pub const DOES_NOT_EXIST: u64 = 0x4;
	/// INVALID_RANGE.
	pub const INVALID_RANGE: u64 = 0x5;
	/// draft-14's NO_OBJECTS (FETCH).
	pub const NO_OBJECTS: u64 = 0x6;
	/// draft-14's INVALID_JOINING_REQUEST_ID (FETCH).
	pub const INVALID_JOINING_REQUEST_ID: u64 = 0x7;
	/// draft-15's DOES_NOT_EXIST.
	pub const DOES_NOT_EXIST_15: u64 = 0x10;
	/// draft-15's INVALID_JOINING_REQUEST_ID.
	pub const INVALID_JOINING_REQUEST_ID_15: u64 = 0x32;
}

/// The codes a data stream is reset with (drafts 14 to 16).
pub mod stream_code {
	/// INTERNAL_ERROR.
	pub const INTERNAL_ERROR: u64 = 0x0;
	/// CANCELLED.
	pub const CANCELLED: u64 = 0x1;
	/// DELIVERY_TIMEOUT.
	pub const DELIVERY_TIMEOUT: u64 = 0x2;
	/// SESSION_CLOSED.
	pub const SESSION_CLOSED: u64 = 0x3;
}

/// PUBLISH_DONE's status codes.
pub mod done_code {
	/// INTERNAL_ERROR.
	pub const INTERNAL_ERROR: u64 = 0x0;
	/// UNAUTHORIZED.
	pub const UNAUTHORIZED: u64 = 0x1;
	/// TRACK_ENDED.
	pub const TRACK_ENDED: u64 = 0x2;
	/// SUBSCRIPTION_ENDED.
	pub const SUBSCRIPTION_ENDED: u64 = 0x3;
	/// GOING_AWAY.
	pub const GOING_AWAY: u64 = 0x4;
	/// EXPIRED.
	pub const EXPIRED: u64 = 0x5;
	/// TOO_FAR_BEHIND.
	pub const TOO_FAR_BEHIND: u64 = 0x6;
}
