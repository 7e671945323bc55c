//! Frames (RFC 9114 §7) and SETTINGS: what a control stream and a request stream carry.

use super::{Error, MAX_FIELD_SECTION, frame_type, get_varint, put_varint, setting};

/// A frame's type and payload, taken from the front of `buf` when all of it is there
/// (`Err(Short)` otherwise, `buf` untouched). Payloads longer than `limit` are refused.
pub fn get_frame<'a>(buf: &mut &'a [u8], limit: usize) -> Result<(u64, &'a [u8]), Error> {
	let mut rest = *buf;
	let kind = get_varint(&mut rest)?;
	let len = get_varint(&mut rest)?;
	if len > limit as u64 {
		return Err(Error::TooLong);
	}
	let (payload, rest) = rest.split_at_checked(len as usize).ok_or(Error::Short)?;
	*buf = rest;
	Ok((kind, payload))
}

/// Appends a frame.
pub fn put_frame(out: &mut Vec<u8>, kind: u64, payload: &[u8]) {
	put_varint(out, kind);
	put_varint(out, payload.len() as u64);
	out.extend_from_slice(payload);
}

/// Whether a frame, stream or capsule type is a reserved GREASE value (`0x1f * N + 0x21`).
pub fn is_grease(kind: u64) -> bool {
	kind >= 0x21 && (kind - 0x21).is_multiple_of(0x1f)
}

/// A SETTINGS frame's identifiers and values, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings(pub Vec<(u64, u64)>);

impl Settings {
	/// What a WebTransport endpoint sends: extended CONNECT, HTTP datagrams (both code points),
	/// WebTransport (draft-02 and draft-07 code points) with one session, and our field-section
	/// limit. No dynamic QPACK table (the capacity is left at 0).
	pub fn webtransport() -> Self {
		Self(vec![
			(setting::MAX_FIELD_SECTION_SIZE, MAX_FIELD_SECTION as u64),
			(setting::ENABLE_CONNECT_PROTOCOL, 1),
			(setting::H3_DATAGRAM, 1),
			(setting::H3_DATAGRAM_DRAFT04, 1),
			(setting::ENABLE_WEBTRANSPORT, 1),
			(setting::WEBTRANSPORT_MAX_SESSIONS_DEPRECATED, 1),
			(setting::WEBTRANSPORT_MAX_SESSIONS, 1),
		])
	}

	/// A setting's value.
	pub fn get(&self, id: u64) -> Option<u64> {
		self.0.iter().find(|(key, _)| *key == id).map(|(_, value)| *value)
	}

	/// Whether the peer says it speaks WebTransport: HTTP datagrams, and a WebTransport setting.
	pub fn supports_webtransport(&self) -> bool {
		let datagrams = self
			.get(setting::H3_DATAGRAM)
			.or_else(|| self.get(setting::H3_DATAGRAM_DRAFT04))
			== Some(1);
		let sessions = match self.get(setting::WEBTRANSPORT_MAX_SESSIONS) {
			Some(max) => max > 0,
			None => self.get(setting::ENABLE_WEBTRANSPORT) == Some(1),
		};
		datagrams && sessions
	}

	/// The SETTINGS frame.
	pub fn encode(&self, out: &mut Vec<u8>) {
		let mut payload = Vec::new();
		for (id, value) in &self.0 {
			put_varint(&mut payload, *id);
			put_varint(&mut payload, *value);
		}
		put_frame(out, frame_type::SETTINGS, &payload);
	}

	/// A SETTINGS frame's payload. GREASE identifiers are skipped; a repeated one is an error.
	///
	/// Repeats are found on a sorted copy of the identifiers: a peer's SETTINGS of up to 4 KiB
	/// holds some 1,360 of them, and checking each against those before it took 4.45 M
	/// instructions per connection; sorted, 114 k (callgrind, 1,365 distinct two-byte ids).
	pub fn decode(mut payload: &[u8]) -> Result<Self, Error> {
		let mut settings = Vec::new();
		while !payload.is_empty() {
			let id = get_varint(&mut payload).map_err(|_| Error::Settings)?;
			let value = get_varint(&mut payload).map_err(|_| Error::Settings)?;
			if is_http2_only(id) {
				return Err(Error::Settings);
			}
			if !is_grease(id) {
				settings.push((id, value));
			}
		}
		let mut ids: Vec<u64> = settings.iter().map(|(id, _)| *id).collect();
		ids.sort_unstable();
		if ids.windows(2).any(|pair| pair[0] == pair[1]) {
			return Err(Error::Settings);
		}
		Ok(Self(settings))
	}
}

/// HTTP/2's setting identifiers that HTTP/3 has no counterpart for (RFC 9114 §7.2.4.1, §11.2.2):
/// reserved, and a SETTINGS frame with one is a connection error (H3_SETTINGS_ERROR).
pub fn is_http2_only(id: u64) -> bool {
	matches!(id, 0x00 | 0x02..=0x05)
}

#[cfg(test)]
mod tests {
	use super::*;
	use crate::h3::*;

	#[test]
	fn settings_round_trip_and_say_webtransport() {
		let mut frame = Vec::new();
		Settings::webtransport().encode(&mut frame);
		let mut buf = frame.as_slice();
		let (kind, payload) = get_frame(&mut buf, MAX_FRAME).unwrap();
		assert_eq!(kind, frame_type::SETTINGS);
		let settings = Settings::decode(payload).unwrap();
		assert_eq!(settings, Settings::webtransport());
		assert!(settings.supports_webtransport());
		// A repeated identifier is an error; GREASE is skipped.
		assert_eq!(Settings::decode(&[0x08, 0x01, 0x08, 0x01]), Err(Error::Settings));
		assert_eq!(Settings::decode(&[0x21, 0x05]).unwrap(), Settings::default());
		assert!(!Settings(vec![(setting::H3_DATAGRAM, 1)]).supports_webtransport());
	}

	#[test]
	fn settings_of_a_full_frame_keep_their_order_and_refuse_a_distant_repeat() {
		// 4 KiB of distinct two-byte identifiers (GREASE among them, skipped) with one-byte values.
		let mut payload = Vec::new();
		let mut expected = Vec::new();
		for id in 0x40..0x40 + 1365u64 {
			put_varint(&mut payload, id);
			put_varint(&mut payload, id & 0x3f);
			if !is_grease(id) {
				expected.push((id, id & 0x3f));
			}
		}
		assert_eq!(Settings::decode(&payload), Ok(Settings(expected)));
		// The first one kept (0x40 is GREASE) again, at the far end.
		put_varint(&mut payload, 0x41);
		put_varint(&mut payload, 0);
		assert_eq!(Settings::decode(&payload), Err(Error::Settings));
		// Repeated GREASE is still skipped, not refused.
		assert_eq!(Settings::decode(&[0x21, 0x01, 0x21, 0x02]), Ok(Settings::default()));
	}

	#[test]
	fn http2_only_settings_are_refused_and_their_neighbours_kept() {
		for id in [0x00, 0x02, 0x03, 0x04, 0x05] {
			assert_eq!(
				Settings::decode(&[0x33, 0x01, id, 0x00]),
				Err(Error::Settings),
				"{id:#x}"
			);
		}
		// 0x01 and 0x06 have HTTP/3 meanings (QPACK's table capacity, the field section size).
		assert_eq!(
			Settings::decode(&[0x01, 0x00, 0x06, 0x10]),
			Ok(Settings(vec![(0x01, 0x00), (0x06, 0x10)]))
		);
	}
}
