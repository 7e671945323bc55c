//! Property tests: for generated values of every lite-05 message, encode then decode is the
//! identity, consumes exactly the encoding, and every strict prefix of it is `Short`.
//!
//! Case counts are kept modest (64 per property) so the suite stays fast; the fuzz targets in
//! `moq-net/fuzz` explore the decoders far harder.

use std::fmt::Debug;
use std::time::Duration;

use bytes::Bytes;
use moq_net::Path;
use moq_net::coding::{Decode, DecodeError, Encode, VARINT_MAX, ZIGZAG_MAX, ZIGZAG_MIN};
use moq_net::lite::{
	Announce, AnnounceOk, AnnounceRequest, AnnounceStatus, ControlType, DataType, Datagram, Fetch, FrameHeader, Goaway,
	GroupHeader, MAX_HOPS, Probe, ProbeLevel, Role, Setup, Subscribe, SubscribeResponse, SubscribeUpdate, Track,
	TrackInfo,
};
use proptest::prelude::*;

fn config() -> ProptestConfig {
	ProptestConfig {
		cases: 64,
		failure_persistence: None,
		..ProptestConfig::default()
	}
}

#[track_caller]
fn round_trip<T: Decode + Encode + PartialEq + Debug>(value: &T) {
	let mut bytes = Vec::new();
	value.encode(&mut bytes);
	let mut buf = &bytes[..];
	assert_eq!(T::decode(&mut buf).as_ref(), Ok(value));
	assert!(buf.is_empty());
	for cut in 0..bytes.len() {
		assert_eq!(
			T::decode(&mut &bytes[..cut]),
			Err(DecodeError::Short),
			"{value:?} cut at {cut}"
		);
	}
}

/// Varints weighted toward the 1/2/4/8-byte boundaries, where encoders go wrong.
fn varint() -> impl Strategy<Value = u64> {
	prop_oneof![
		0..64u64,
		60..20_000u64,
		0x3fff_fff0..0x4000_0010u64,
		VARINT_MAX - 16..=VARINT_MAX,
		0..=VARINT_MAX,
	]
}

fn path() -> impl Strategy<Value = Path> {
	prop::collection::vec("[a-zA-Z0-9._-]{1,8}", 0..=32).prop_map(|segments| Path::new(&segments.join("/")))
}

fn string() -> impl Strategy<Value = String> {
	".{0,24}"
}

fn millis() -> impl Strategy<Value = Duration> {
	varint().prop_map(Duration::from_millis)
}

fn group() -> impl Strategy<Value = Option<u64>> {
	prop::option::of(0..VARINT_MAX)
}

fn status() -> impl Strategy<Value = AnnounceStatus> {
	prop_oneof![
		Just(AnnounceStatus::Ended),
		Just(AnnounceStatus::Active),
		Just(AnnounceStatus::Restart)
	]
}

fn setup() -> impl Strategy<Value = Setup> {
	(
		prop::option::of(prop_oneof![
			Just(ProbeLevel::None),
			Just(ProbeLevel::Report),
			Just(ProbeLevel::Increase)
		]),
		"(/[a-z]{1,6}){0,3}(\\?[a-z=]{0,12})?",
		prop_oneof![Just(Role::Both), Just(Role::Publisher), Just(Role::Subscriber)],
		prop::option::of(varint()),
		prop::option::of(varint()),
		prop::collection::btree_map(6..=VARINT_MAX, prop::collection::vec(any::<u8>(), 0..16), 0..8),
	)
		.prop_map(|(probe, path, role, cost, origin, unknown)| {
			let mut setup = Setup::new().with_path(&path).with_role(role);
			if let Some(level) = probe {
				setup.set_probe(level);
			}
			if let Some(cost) = cost {
				setup.set_cost(cost);
			}
			if let Some(origin) = origin {
				setup.set_origin(origin);
			}
			setup.params.extend(unknown);
			setup
		})
}

proptest! {
	#![proptest_config(config())]

	#[test]
	fn varints(value in varint()) {
		round_trip(&value);
	}

	#[test]
	fn stream_types(control in 0..=6u64, data in 0..=1u64) {
		round_trip(&ControlType::from_u64(control).unwrap());
		round_trip(&DataType::from_u64(data).unwrap());
	}

	#[test]
	fn setups(setup in setup()) {
		round_trip(&setup);
	}

	#[test]
	fn announce_requests(prefix in path(), exclude_hop in varint()) {
		round_trip(&AnnounceRequest { prefix, exclude_hop });
	}

	#[test]
	fn announce_oks(origin in varint(), active in varint()) {
		round_trip(&AnnounceOk { origin, active });
	}

	#[test]
	fn announces(status in status(), suffix in path(), hops in prop::collection::vec(varint(), 0..=MAX_HOPS)) {
		round_trip(&Announce { status, suffix, hops });
	}

	#[test]
	fn tracks(broadcast in path(), track in string()) {
		round_trip(&Track { broadcast, track });
	}

	#[test]
	fn track_infos(priority: u8, ordered: bool, latency_max in millis(), timescale in 1..=VARINT_MAX) {
		round_trip(&TrackInfo { priority, ordered, latency_max, timescale });
	}

	#[test]
	fn subscribes(
		id in varint(),
		broadcast in path(),
		track in string(),
		priority: u8,
		ordered: bool,
		latency_max in millis(),
		start in group(),
		end in group(),
	) {
		round_trip(&Subscribe { id, broadcast, track, priority, ordered, latency_max, start, end });
	}

	#[test]
	fn subscribe_updates(priority: u8, ordered: bool, latency_max in millis(), start in group(), end in group()) {
		round_trip(&SubscribeUpdate { priority, ordered, latency_max, start, end });
	}

	#[test]
	fn subscribe_responses(kind in 0..3u8, a in varint(), b in varint(), c in varint()) {
		let response = match kind {
			0 => SubscribeResponse::Start { group: a },
			1 => SubscribeResponse::End { group: a },
			_ => SubscribeResponse::Drop { start: a, end: b, code: c },
		};
		round_trip(&response);
	}

	#[test]
	fn group_headers(subscribe_id in varint(), sequence in varint()) {
		round_trip(&GroupHeader { subscribe_id, sequence });
	}

	#[test]
	fn frame_headers(timestamp_delta in ZIGZAG_MIN..=ZIGZAG_MAX, size in varint()) {
		round_trip(&FrameHeader { timestamp_delta, size });
	}

	#[test]
	fn fetches(broadcast in path(), track in string(), priority: u8, group in varint()) {
		round_trip(&Fetch { broadcast, track, priority, group });
	}

	#[test]
	fn probes(bitrate in varint(), rtt_ms in varint()) {
		round_trip(&Probe { bitrate, rtt_ms });
	}

	#[test]
	fn goaways(uri in string()) {
		round_trip(&Goaway { uri });
	}

	#[test]
	fn datagrams(
		subscribe_id in varint(),
		sequence in varint(),
		timestamp in varint(),
		payload in prop::collection::vec(any::<u8>(), 0..64),
	) {
		let datagram = Datagram { subscribe_id, sequence, timestamp, payload: Bytes::from(payload) };
		let mut bytes = Vec::new();
		datagram.encode(&mut bytes);
		prop_assert_eq!(Datagram::decode_exact(&bytes), Ok(datagram.clone()));
		prop_assert_eq!(Datagram::decode_bytes(&Bytes::from(bytes)), Ok(datagram));
	}

	/// Arbitrary bytes never panic any decoder, and whatever decodes re-encodes to an equal value.
	#[test]
	fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..48)) {
		fn check<T: Decode + Encode + PartialEq + Debug>(bytes: &[u8]) {
			if let Ok(value) = T::decode(&mut &bytes[..]) {
				let mut again = Vec::new();
				value.try_encode(&mut again).expect("whatever decodes re-encodes");
				assert_eq!(T::decode_exact(&again), Ok(value));
			}
		}
		check::<Setup>(&bytes);
		check::<AnnounceRequest>(&bytes);
		check::<AnnounceOk>(&bytes);
		check::<Announce>(&bytes);
		check::<Track>(&bytes);
		check::<TrackInfo>(&bytes);
		check::<Subscribe>(&bytes);
		check::<SubscribeUpdate>(&bytes);
		check::<SubscribeResponse>(&bytes);
		check::<GroupHeader>(&bytes);
		check::<FrameHeader>(&bytes);
		check::<Fetch>(&bytes);
		check::<Probe>(&bytes);
		check::<Goaway>(&bytes);
		check::<Datagram>(&bytes);
	}
}
