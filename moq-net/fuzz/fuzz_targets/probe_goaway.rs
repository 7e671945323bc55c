//! The Probe and Goaway bidi streams: PROBE reports back to back; GOAWAY.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::lite::{ControlType, Goaway, Probe};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	check::<ControlType>(data);
	check::<Goaway>(data);
	let mut at = 0;
	while let Some((_, used)) = check::<Probe>(&data[at..]) {
		at += used;
	}
});
