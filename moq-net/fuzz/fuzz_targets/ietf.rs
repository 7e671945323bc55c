//! draft-14's control messages back to back (a control stream), and a subgroup stream: its
//! header, then objects; then the same bytes as each later draft's control stream (decoded,
//! encoded, and decoded again to an equal message); and as a FETCH stream's objects in each
//! draft (each written back out whole and read again to an equal object).
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_net::ietf::data::{FetchObject, ObjectHeader, SubgroupHeader};
use moq_net::ietf::{Message, Version};
use moq_net_fuzz::check;

fuzz_target!(|data: &[u8]| {
	let mut at = 0;
	while let Some((_, used)) = check::<Message>(&data[at..]) {
		at += used;
	}
	for version in [Version::Draft15, Version::Draft16] {
		let mut rest = data;
		while let Ok(message) = Message::decode_for(&mut rest, version) {
			let mut out = Vec::new();
			message
				.encode_for(version, &mut out)
				.expect("a decoded message re-encodes in its draft");
			assert_eq!(Message::decode_for(&mut &out[..], version).as_ref(), Ok(&message));
		}
	}
	for version in Version::ALL {
		let mut rest = data;
		let mut previous: Option<FetchObject> = None;
		while let Ok(read) = FetchObject::decode_for(&mut rest, version, previous.as_ref()) {
			let Some(object) = read else {
				continue;
			};
			let mut out = Vec::new();
			object
				.emit_for(version, &mut out)
				.expect("a decoded fetch object re-encodes");
			assert_eq!(
				FetchObject::decode_for(&mut &out[..], version, None),
				Ok(Some(object.clone()))
			);
			let Some(after) = rest.get(object.length as usize..) else {
				break;
			};
			rest = after;
			previous = Some(object);
		}
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
