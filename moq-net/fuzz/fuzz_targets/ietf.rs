//! draft-14's control messages back to back (a control stream), and a subgroup stream: its
//! header, then objects; then the same bytes as draft-15's control stream (decoded, encoded, and
//! decoded again to an equal message).
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::ietf::data::{ObjectHeader, SubgroupHeader};
use moq_net::ietf::{Message, Version};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	let mut at = 0;
	while let Some((_, used)) = check::<Message>(&data[at..]) {
		at += used;
	}
	let mut rest = data;
	while let Ok(message) = Message::decode_for(&mut rest, Version::Draft15) {
		let mut out = Vec::new();
		message
			.encode_for(Version::Draft15, &mut out)
			.expect("a decoded draft-15 message re-encodes");
		assert_eq!(
			Message::decode_for(&mut &out[..], Version::Draft15).as_ref(),
			Ok(&message)
		);
	}
	if let Some((header, used)) = check::<SubgroupHeader>(data) {
		let mut rest = &data[used..];
		while let Ok(object) = ObjectHeader::decode(&mut rest, header.extensions) {
			let mut out = Vec::new();
			object.emit(&mut out).expect("a decoded object header re-encodes");
			let Some(after) = rest.get(object.length as usize..) else {
				break;
			};
			rest = after;
		}
	}
});
