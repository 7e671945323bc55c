//! Arbitrary stream bytes into a relay-side session.
//!
//! The input is a list of streams the peer opens, each `kind(1) len(2, big-endian) bytes`:
//! kind bit 0 picks uni or bidi, bit 1 whether the peer finishes the stream. The first byte's
//! bits 5 and 6 pick the version the connection negotiated (05, 04, 03, 05: the older ones have
//! no SETUP stream and differ in several messages), and unless its top bit is set, a valid SETUP
//! stream goes first where the version has one, so the session gets past the handshake and the
//! publisher and subscriber halves see the rest. The relay's origin holds a
//! broadcast `bbb` with a track `video` and a few groups, so requests reach real state.
//!
//! libFuzzer's panic hook aborts on any panic, including one a kio task would have caught, so
//! "no panic on peer input" is checked for every task the session runs.
#![no_main]
#![forbid(unsafe_code)]

use std::cell::RefCell;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use moq_net::coding::Encode;
use moq_net::lite::session::{self, Config};
use moq_net::lite::{DataType, Setup, Version};
use moq_net::model::Origin;
use moq_net::transport::memory;
use moq_net::transport::{SendStream, SendStreamExt, TransportExt};
use moq_net::{Frame, Path, Timestamp, TrackInfo};

thread_local! {
	// One runtime per fuzzing process: building a ring per input would dominate the run.
	static RUNTIME: RefCell<Option<kio::Runtime>> = const { RefCell::new(None) };
}

async fn run(data: &[u8]) {
	let relay = Origin::new(1);
	let (broadcast, _publication) = relay
		.producer()
		.create_broadcast(&Path::new("bbb"), Default::default())
		.expect("a broadcast");
	let track = broadcast.create_track("video", TrackInfo::default()).expect("a track");
	for seq in 0..3u64 {
		let _ = track.write_frame(Frame::new(Timestamp::new(seq, 1000), vec![seq as u8; 8]));
	}
	let first = data.first().copied().unwrap_or_default();
	let version = Version::PREFERENCE[usize::from(first >> 5 & 3) % Version::PREFERENCE.len()];
	let config = move || Config {
		origin: 1,
		version,
		..Config::default()
	};
	let (peer, relay_end) = memory::pair();
	let accept = {
		let relay_end = relay_end.clone();
		kio::spawn(async move { session::setup(&relay_end, &config()).await })
	};
	if first & 0x80 == 0 && version.has_setup_stream() {
		let mut bytes = Vec::new();
		u64::from(DataType::Setup).encode(&mut bytes);
		Setup::new().with_origin(9).encode(&mut bytes);
		if let Ok(mut setup) = peer.open_uni().await {
			let _ = setup.write(Bytes::from(bytes)).await;
			let _ = setup.finish();
		}
	}
	let mut kept = Vec::new();
	for (kind, bytes) in moq_net::test_support::fuzz_streams(data.get(1..).unwrap_or_default()) {
		if kind & 1 == 0 {
			let Ok(mut send) = peer.open_uni().await else { break };
			let _ = send.write(Bytes::copy_from_slice(bytes)).await;
			if kind & 2 != 0 {
				let _ = send.finish();
			}
			kept.push(Box::new(send) as Box<dyn std::any::Any>);
		} else {
			let Ok((mut send, recv)) = peer.open_bi().await else {
				break;
			};
			let _ = send.write(Bytes::copy_from_slice(bytes)).await;
			if kind & 2 != 0 {
				let _ = send.finish();
			}
			kept.push(Box::new((send, recv)));
		}
	}
	// The handshake may never complete (the input decides): give the session a bounded number
	// of turns, then drop everything.
	for _ in 0..8 {
		kio::yield_now().await;
	}
	let session = if accept.is_finished() {
		match accept.await {
			Ok(Ok(peer_setup)) => Some(session::start(
				relay_end,
				config(),
				peer_setup,
				Some(relay.consumer()),
				Some(relay.producer()),
			)),
			_ => None,
		}
	} else {
		accept.abort();
		None
	};
	for _ in 0..64 {
		kio::yield_now().await;
	}
	drop(session);
	drop(kept);
	// Let aborted tasks be dropped before the next input.
	for _ in 0..4 {
		kio::yield_now().await;
	}
}

fuzz_target!(|data: &[u8]| {
	RUNTIME.with(|runtime| {
		let mut runtime = runtime.borrow_mut();
		let runtime = runtime.get_or_insert_with(|| kio::Builder::single().build().expect("a kio runtime"));
		runtime.block_on(run(data));
	});
});
