//! HTTP/3 frames back to back, as a control stream carries them (a SETTINGS payload decoded,
//! a DATA payload read as capsules); and the whole input as one SETTINGS payload and as a
//! CONNECT stream's capsules.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_quic::h3;
use moq_quic_fuzz::{check_capsules, check_frame, check_settings};

fuzz_target!(|data: &[u8]| {
	let mut buf = data;
	while let Some((kind, payload)) = check_frame(&mut buf, h3::MAX_FRAME) {
		match kind {
			h3::frame_type::SETTINGS => check_settings(payload),
			h3::frame_type::DATA => check_capsules(payload),
			_ => {}
		}
	}
	check_settings(data);
	check_capsules(data);
});
