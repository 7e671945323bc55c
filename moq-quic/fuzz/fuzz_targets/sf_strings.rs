//! The structured-field strings of `wt-available-protocols` and `wt-protocol` (RFC 8941): a
//! list that parses formats back to itself, and any text formats to a string that parses.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use moq_quic::h3;

fuzz_target!(|data: &[u8]| {
	let Ok(text) = std::str::from_utf8(data) else {
		return;
	};
	if let Ok(list) = h3::parse_string_list(text) {
		for member in &list {
			assert!(member.chars().all(|c| (' '..='~').contains(&c)), "{member:?}");
		}
		assert_eq!(h3::parse_string_list(&h3::format_string_list(&list)), Ok(list));
	}
	// Formatting keeps the printable characters, escaped; the rest cannot be sent.
	let kept: String = text.chars().filter(|c| (' '..='~').contains(c)).collect();
	assert_eq!(h3::parse_string_list(&h3::format_string(text)), Ok(vec![kept]));
});
