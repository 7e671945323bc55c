//! A HEADERS payload: the QPACK field section (static table, Huffman strings), then the
//! extended CONNECT request and its response read from it; and the input as one Huffman string.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_quic::h3::{self, ConnectRequest, ConnectResponse, Error};
use moq_quic_fuzz::section_size;

/// What a response's re-encoding may add: the `sec-webtransport-http3-draft: draft02` field.
const RESPONSE_GROWTH: usize = "sec-webtransport-http3-draft".len() + "draft02".len() + 32;

fuzz_target!(|data: &[u8]| {
	if let Ok(decoded) = h3::huffman_decode(data) {
		// The shortest code is 5 bits.
		assert!(
			decoded.len() <= data.len() * 8 / 5,
			"{} symbols from {} bytes",
			decoded.len(),
			data.len()
		);
	}
	let Ok(fields) = h3::decode_fields(data) else {
		return;
	};
	assert!(
		section_size(&fields) <= h3::MAX_FIELD_SECTION,
		"a field section over the limit"
	);
	let borrowed: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
	assert_eq!(h3::decode_fields(&h3::encode_fields(&borrowed)).as_ref(), Ok(&fields));

	if let Ok(request) = ConnectRequest::from_fields(&fields) {
		let mut out = Vec::new();
		request.encode(&mut out);
		let (kind, payload) = h3::get_frame(&mut out.as_slice(), usize::MAX).expect("our HEADERS parse");
		assert_eq!(kind, h3::frame_type::HEADERS);
		match h3::decode_fields(payload) {
			Ok(again) => assert_eq!(ConnectRequest::from_fields(&again), Ok(request)),
			// Re-formatting the protocol list may add a space after each comma.
			Err(Error::TooLong) => {
				assert!(section_size(&fields) + request.protocols.len() > h3::MAX_FIELD_SECTION)
			}
			Err(err) => panic!("our CONNECT does not decode: {err}"),
		}
	}
	if let Ok(response) = ConnectResponse::from_fields(&fields) {
		let mut out = Vec::new();
		response.encode(&mut out);
		let (kind, payload) = h3::get_frame(&mut out.as_slice(), usize::MAX).expect("our HEADERS parse");
		assert_eq!(kind, h3::frame_type::HEADERS);
		match h3::decode_fields(payload) {
			Ok(again) => assert_eq!(ConnectResponse::from_fields(&again), Ok(response)),
			Err(Error::TooLong) => assert!(section_size(&fields) + RESPONSE_GROWTH > h3::MAX_FIELD_SECTION),
			Err(err) => panic!("our response does not decode: {err}"),
		}
	}
});
