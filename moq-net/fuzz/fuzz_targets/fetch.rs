//! The Fetch bidi stream: FETCH one way, bare frames the other.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::lite::{Fetch, FrameHeader};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	check::<Fetch>(data);
	let mut at = 0;
	while let Some((frame, used)) = check::<FrameHeader>(&data[at..]) {
		at += used;
		match usize::try_from(frame.size) {
			Ok(size) if size <= data.len() - at => at += size,
			_ => break,
		}
	}
});
