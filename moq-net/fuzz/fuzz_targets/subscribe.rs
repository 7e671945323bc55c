//! The Subscribe bidi stream: SUBSCRIBE then SUBSCRIBE_UPDATEs one way, typed responses the other.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::lite::{Subscribe, SubscribeResponse, SubscribeUpdate};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	check::<SubscribeUpdate>(data);
	if let Some((_, mut at)) = check::<Subscribe>(data) {
		while let Some((_, used)) = check::<SubscribeUpdate>(&data[at..]) {
			at += used;
		}
	}
	let mut at = 0;
	while let Some((_, used)) = check::<SubscribeResponse>(&data[at..]) {
		at += used;
	}
});
