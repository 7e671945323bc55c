//! DATAGRAM: a whole QUIC datagram, payload to the end; the copying and the sharing decoders agree.
#![no_main]
#![forbid(unsafe_code)]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use moq_net::coding::Decode;
use moq_net::lite::Datagram;
use moq_net_fuzz::check_unframed;

fuzz_target!(|data: &[u8]| {
	let copied = check_unframed::<Datagram>(data).map(|(datagram, _)| datagram);
	let shared = Datagram::decode_bytes(&Bytes::copy_from_slice(data)).ok();
	assert_eq!(copied, shared);
	assert_eq!(Datagram::decode_exact(data).ok(), shared);
});
