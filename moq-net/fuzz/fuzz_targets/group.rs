//! A Group uni stream: its type, the GROUP header, then frames (header + payload) to the end.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::lite::{DataType, FrameHeader, GroupHeader};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	check::<FrameHeader>(data);
	let mut at = match check::<DataType>(data) {
		Some((DataType::Group, used)) => used,
		_ => 0,
	};
	let Some((_, used)) = check::<GroupHeader>(&data[at..]) else {
		return;
	};
	at += used;
	while let Some((frame, used)) = check::<FrameHeader>(&data[at..]) {
		at += used;
		// The payload: a reader compares the size with what remains before taking it.
		match usize::try_from(frame.size) {
			Ok(size) if size <= data.len() - at => at += size,
			_ => break,
		}
	}
});
