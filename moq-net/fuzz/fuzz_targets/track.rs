//! The Track bidi stream: TRACK one way, TRACK_INFO the other.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::lite::{Track, TrackInfo};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	check::<Track>(data);
	if let Some((info, _)) = check::<TrackInfo>(data) {
		assert_ne!(info.timescale, 0);
	}
});
