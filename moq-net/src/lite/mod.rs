//! The moq-lite protocol: on the wire, stream types, messages and error codes
//! (docs/moq-lite-05.md §2), pure encoding and decoding; and [`session`], the sessions that speak
//! it over a [`Transport`](crate::transport::Transport). Every session here is a moq-lite session
//! (05 today); other protocols would sit beside this module, over the same model and transport.
//!
//! # Layout
//!
//! - [`session`]: SETUP, the publisher and subscriber halves, budgets (docs/moq-net.md §3).
//! - [`stream`]: the varint at the start of every stream ([`ControlType`] on bidi streams,
//!   [`DataType`] on uni streams).
//! - [`setup`]: the [`Setup`] message and its parameters.
//! - [`message`]: every other message, one struct per message, named as in the spec.
//! - [`error`]: the docs/moq-lite-05.md §2.8 [`ErrorCode`]s streams are reset and sessions closed with.
//!
//! Each message implements [`Decode`](crate::coding::Decode) and [`Encode`](crate::coding::Encode)
//! for the **whole** message, length prefix included: `len, body` (or `type, len, body` for the
//! typed [`SubscribeResponse`]). A decoder reads exactly `len` bytes: bytes left inside the body
//! are [`Long`](crate::coding::DecodeError::Long), a body that ends inside a field is
//! [`Truncated`](crate::coding::DecodeError::Truncated), and a buffer that ends before `len`
//! bytes is [`Short`](crate::coding::DecodeError::Short) ("need more bytes"). The exceptions,
//! as in the spec, are [`FrameHeader`] (a group stream's frames are `delta, size, payload`, with
//! the payload read separately) and [`Datagram`] (a whole QUIC datagram, no length).
//!
//! # Caps
//!
//! - [`MAX_MESSAGE_LEN`] (64 KiB): any length-prefixed message. Control messages are a few dozen
//!   bytes; the largest legitimate one is a SETUP with a token in its Path parameter, well under
//!   this. The cap is checked against the length prefix before the body is awaited, so a
//!   streaming reader never buffers more than this plus the prefix.
//! - [`MAX_PARAMETERS`] (64, docs/moq-lite-05.md §2.3): SETUP parameters.
//! - [`MAX_HOPS`] (32): hop ids in an ANNOUNCE, the same bound as path depth; a longer chain is
//!   a routing loop.
//! - Strings and paths: [`crate::coding`]'s caps.

pub mod error;
pub mod message;
pub mod session;
pub mod setup;
pub mod stream;
pub mod version;

pub use error::ErrorCode;
pub use message::{
	Announce, AnnounceOk, AnnounceRequest, AnnounceStatus, Datagram, Fetch, FrameHeader, Goaway, GroupHeader, Probe,
	Subscribe, SubscribeResponse, SubscribeUpdate, Track, TrackInfo,
};
pub use setup::{ProbeLevel, Role, Setup};
pub use stream::{ControlType, DataType};
pub use version::{Version, VersionedDecode, VersionedEncode};

/// The longest length-prefixed message body, in bytes.
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;

/// The most parameters a SETUP may carry (docs/moq-lite-05.md §2.3).
pub const MAX_PARAMETERS: usize = 64;

/// The most hop ids an ANNOUNCE may carry.
pub const MAX_HOPS: usize = 32;
