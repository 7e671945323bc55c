//! moq-lite versions: 05, and 04 and 03 for older clients (the browser library `@moq/lite` 0.2.2
//! offers 04 and 03 only). What differs between them on the wire is written in
//! docs/moq-lite-versions.md; here are the version itself (chosen by the ALPN, or the
//! WebTransport sub-protocol: nothing version-specific travels in-band), what each version has,
//! and the codec of every message whose encoding differs ([`VersionedDecode`],
//! [`VersionedEncode`]). Every other message is byte-identical in the three, and keeps its one
//! [`Decode`](crate::coding::Decode) / [`Encode`](crate::coding::Encode).

use crate::coding::{DecodeError, EncodeError};

/// A moq-lite version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Version {
	/// moq-lite-03.
	Lite03,
	/// moq-lite-04.
	Lite04,
	/// moq-lite-05.
	Lite05,
}

impl Version {
	/// Every version, most preferred first: what a server offers and a client accepts.
	pub const PREFERENCE: [Self; 3] = [Self::Lite05, Self::Lite04, Self::Lite03];

	/// The ALPN on raw QUIC, which is also the WebTransport sub-protocol.
	pub fn alpn(self) -> &'static [u8] {
		match self {
			Self::Lite03 => b"moq-lite-03",
			Self::Lite04 => b"moq-lite-04",
			Self::Lite05 => b"moq-lite-05",
		}
	}

	/// The version of an ALPN (or sub-protocol), if it is one of these.
	pub fn from_alpn(alpn: &[u8]) -> Option<Self> {
		Self::PREFERENCE.into_iter().find(|version| version.alpn() == alpn)
	}

	/// A Setup uni stream each way (SETUP: path, role, origin id, probe level). 03 and 04 have
	/// none: nothing is exchanged before the first request.
	pub fn has_setup_stream(self) -> bool {
		self == Self::Lite05
	}

	/// TRACK / TRACK_INFO, FETCH, SUBSCRIBE_START / SUBSCRIBE_END and frame timestamps. 03 and 04
	/// subscribe without learning a track's properties, answer with SUBSCRIBE_OK, and carry frames
	/// as `size, payload`.
	pub fn has_track_stream(self) -> bool {
		self == Self::Lite05
	}

	/// ANNOUNCE_OK first on an Announce stream (the sender's origin id, the initial set's size);
	/// with it the sender leaves itself out of hop chains, without it (03, 04) it includes itself.
	pub fn has_announce_ok(self) -> bool {
		self == Self::Lite05
	}

	/// `exclude_hop` in ANNOUNCE_REQUEST (04, 05).
	pub fn has_exclude_hop(self) -> bool {
		self != Self::Lite03
	}

	/// Hop ids in ANNOUNCE: 03 sends only their count.
	pub fn has_hop_ids(self) -> bool {
		self != Self::Lite03
	}

	/// PROBE carries an RTT after the bitrate (04, 05).
	pub fn has_probe_rtt(self) -> bool {
		self != Self::Lite03
	}

	/// The GOAWAY stream (04, 05).
	pub fn has_goaway(self) -> bool {
		self != Self::Lite03
	}

	/// Groups in QUIC datagrams (05).
	pub fn has_datagrams(self) -> bool {
		self == Self::Lite05
	}
}

impl Default for Version {
	/// moq-lite-05, the current version.
	fn default() -> Self {
		Self::Lite05
	}
}

impl std::fmt::Display for Version {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.write_str(std::str::from_utf8(self.alpn()).expect("ASCII"))
	}
}

/// Decoding a message whose bytes depend on the version.
pub trait VersionedDecode: Sized {
	/// Reads one value from the front of `buf` as `version` encodes it (as
	/// [`Decode::decode`](crate::coding::Decode::decode): `Short` means "need more bytes").
	fn decode_for(buf: &mut &[u8], version: Version) -> Result<Self, DecodeError>;
}

/// Encoding a message whose bytes depend on the version.
pub trait VersionedEncode {
	/// Appends the value as `version` encodes it; fails if `version` cannot carry it.
	fn emit_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError>;

	/// [`emit_for`](Self::emit_for), leaving `out` as it was on failure.
	fn try_encode_for(&self, version: Version, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		let len = out.len();
		let result = self.emit_for(version, out);
		if result.is_err() {
			out.truncate(len);
		}
		result
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn alpns_name_their_versions() {
		for version in Version::PREFERENCE {
			assert_eq!(Version::from_alpn(version.alpn()), Some(version));
		}
		assert_eq!(Version::from_alpn(b"moq-lite-04"), Some(Version::Lite04));
		assert_eq!(Version::from_alpn(b"moql"), None);
		assert_eq!(Version::Lite03.to_string(), "moq-lite-03");
		assert!(Version::Lite04.has_exclude_hop() && !Version::Lite03.has_exclude_hop());
		assert!(!Version::Lite04.has_setup_stream() && Version::Lite05.has_track_stream());
	}
}
