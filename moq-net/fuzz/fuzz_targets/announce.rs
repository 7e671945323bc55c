//! The Announce bidi stream: ANNOUNCE_REQUEST one way; ANNOUNCE_OK then ANNOUNCEs the other.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::lite::{Announce, AnnounceOk, AnnounceRequest, ControlType};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	check::<ControlType>(data);
	check::<AnnounceRequest>(data);
	// The publisher's side: one ANNOUNCE_OK, then ANNOUNCEs back to back.
	check::<Announce>(data);
	if let Some((_, mut at)) = check::<AnnounceOk>(data) {
		while let Some((_, used)) = check::<Announce>(&data[at..]) {
			at += used;
		}
	}
});
