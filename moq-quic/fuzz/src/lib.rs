//! What the targets assert about moq-quic's `h3` codec, given arbitrary bytes:
//!
//! 1. it does not panic (libFuzzer reports any panic or sanitizer fault; built with
//!    `--debug-assertions`, an arithmetic overflow is one);
//! 2. a frame or capsule that parses is exactly the bytes it consumed: one byte fewer is `Short`
//!    (a reader that waits for more on `Short` gets the same frame, and never waits once it is
//!    complete), and one that does not parse leaves its input untouched;
//! 3. what parses re-encodes to bytes that parse to an equal value (frames and SETTINGS no longer
//!    than they arrived: their encoders are minimal).
#![forbid(unsafe_code)]

use moq_quic::h3::{self, Error, Settings};

/// Checks the frame at the front of `buf` as `get_frame` takes it with `limit`, and moves `buf`
/// past it; `None` if no frame parses there.
pub fn check_frame<'a>(buf: &mut &'a [u8], limit: usize) -> Option<(u64, &'a [u8])> {
	let data = *buf;
	let Ok((kind, payload)) = h3::get_frame(buf, limit) else {
		assert_eq!(*buf, data, "a frame that does not parse leaves its input untouched");
		return None;
	};
	let used = data.len() - buf.len();
	assert!(payload.len() <= limit, "a payload over the limit");
	assert_eq!(
		h3::get_frame(&mut &data[..used - 1], limit),
		Err(Error::Short),
		"one byte fewer"
	);
	let mut out = Vec::new();
	h3::put_frame(&mut out, kind, payload);
	assert!(out.len() <= used, "re-encodes longer ({} > {used})", out.len());
	let mut view = out.as_slice();
	assert_eq!(
		h3::get_frame(&mut view, limit),
		Ok((kind, payload)),
		"re-encoded {out:02x?}"
	);
	assert!(view.is_empty());
	Some((kind, payload))
}

/// Checks a SETTINGS payload: what decodes has no GREASE and no repeated identifier, and
/// survives a round trip.
pub fn check_settings(payload: &[u8]) {
	let Ok(settings) = Settings::decode(payload) else {
		return;
	};
	for (at, (id, _)) in settings.0.iter().enumerate() {
		assert!(!h3::is_grease(*id), "GREASE {id:#x} kept");
		assert!(!h3::is_http2_only(*id), "HTTP/2's {id:#x} accepted");
		assert!(
			settings.0[..at].iter().all(|(other, _)| other != id),
			"{id:#x} repeated"
		);
	}
	let mut out = Vec::new();
	settings.encode(&mut out);
	let mut view = out.as_slice();
	let (kind, again) = h3::get_frame(&mut view, usize::MAX).expect("our SETTINGS frame parses");
	assert_eq!(kind, h3::frame_type::SETTINGS);
	assert!(again.len() <= payload.len(), "SETTINGS re-encode longer");
	assert_eq!(Settings::decode(again), Ok(settings.clone()));
	let _ = settings.supports_webtransport();
}

/// Checks capsules back to back, as a CONNECT stream's DATA carries them, and the code of each
/// CLOSE_WEBTRANSPORT_SESSION.
pub fn check_capsules(mut payload: &[u8]) {
	while let Some((kind, body)) = check_frame(&mut payload, h3::MAX_FRAME) {
		if kind != h3::CLOSE_SESSION {
			continue;
		}
		let Ok(code) = h3::close_code(body) else {
			assert!(body.len() < 4, "a close capsule with a code refused");
			continue;
		};
		assert_eq!(code.to_be_bytes(), body[..4]);
		// What we would send back with the same code and reason.
		let reason = String::from_utf8_lossy(&body[4..]);
		let capsule = h3::close_capsule(code, &reason);
		let mut view = capsule.as_slice();
		let (frame, mut inner) = h3::get_frame(&mut view, usize::MAX).expect("our close capsule parses");
		assert_eq!(frame, h3::frame_type::DATA);
		let (again, body) = h3::get_capsule(&mut inner).expect("one capsule");
		assert_eq!((again, h3::close_code(body)), (h3::CLOSE_SESSION, Ok(code)));
		assert!(body.len() <= 4 + h3::MAX_CLOSE_REASON, "a reason over the cap");
	}
}

/// The size RFC 9114 §4.2.2 gives a field section, which [`h3::MAX_FIELD_SECTION`] bounds.
pub fn section_size(fields: &[(String, String)]) -> usize {
	fields.iter().map(|(name, value)| name.len() + value.len() + 32).sum()
}
