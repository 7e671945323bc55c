//! The messages whose bytes differ in moq-lite-04 and -03 (docs/moq-lite-versions.md), decoded
//! as each version has them: the subscribe responses of 04 and 03 (SUBSCRIBE_OK and
//! SUBSCRIBE_DROP), ANNOUNCE_PLEASE without its hop filter, 03's ANNOUNCE with a hop count
//! instead of hop ids, frame headers without timestamps, PROBE without its RTT. The first byte
//! picks the version; the rest is each message's bytes.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::lite::{Announce, AnnounceRequest, FrameHeader, Probe, SubscribeResponse, Version};
use moq_net_fuzz::check_for;

fuzz_target!(|data: &[u8]| {
	let Some((&pick, data)) = data.split_first() else {
		return;
	};
	let version = Version::PREFERENCE[usize::from(pick) % Version::PREFERENCE.len()];
	check_for::<AnnounceRequest>(data, version);
	check_for::<Probe>(data, version);
	// Back to back, as their streams carry them.
	let mut at = 0;
	while let Some((_, used)) = check_for::<SubscribeResponse>(&data[at..], version) {
		at += used;
	}
	let mut at = 0;
	while let Some((_, used)) = check_for::<Announce>(&data[at..], version) {
		at += used;
	}
	let mut at = 0;
	while let Some((frame, used)) = check_for::<FrameHeader>(&data[at..], version) {
		at += used;
		match usize::try_from(frame.size) {
			Ok(size) if size <= data.len() - at => at += size,
			_ => break,
		}
	}
});
