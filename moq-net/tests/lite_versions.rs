//! moq-lite-04 and -03 against the exact bytes of docs/moq-lite-versions.md §4, both ways, next to
//! the 05 bytes of the same value: every message whose encoding differs between the versions.

use moq_net::test_support::hex;
use std::time::Duration;

use moq_net::Path;
use moq_net::coding::{DecodeError, EncodeError};
use moq_net::lite::{
	Announce, AnnounceRequest, AnnounceStatus, FrameHeader, Probe, SubscribeResponse, Version, VersionedDecode,
	VersionedEncode,
};

use Version::{Lite03, Lite04, Lite05};

/// `value` encodes to exactly `bytes` in `version`, and `bytes` decode to exactly `value`.
fn golden<T>(value: &T, version: Version, bytes: &str)
where
	T: VersionedEncode + VersionedDecode + PartialEq + std::fmt::Debug,
{
	let expected = hex(bytes);
	let mut out = Vec::new();
	value.emit_for(version, &mut out).unwrap();
	assert_eq!(out, expected, "{version}: encode {value:?}");
	let mut buf = expected.as_slice();
	assert_eq!(&T::decode_for(&mut buf, version).unwrap(), value, "{version}: decode");
	assert!(buf.is_empty(), "{version}: decode left {buf:02x?}");
}

#[test]
fn announce_request_has_no_exclude_hop_on_03() {
	let request = AnnounceRequest {
		prefix: Path::default(),
		exclude_hop: 0x1234,
	};
	golden(&request, Lite05, "03 00 52 34");
	golden(&request, Lite04, "03 00 52 34");
	// 03 carries the prefix alone; what comes back has no exclusion.
	let mut out = Vec::new();
	request.emit_for(Lite03, &mut out).unwrap();
	assert_eq!(out, hex("01 00"));
	let room = AnnounceRequest {
		prefix: Path::new("room"),
		exclude_hop: 0,
	};
	golden(&room, Lite03, "05 04 72 6f 6f 6d");
}

#[test]
fn announce_hops_are_ids_on_04_and_05_and_a_count_on_03() {
	let active = Announce {
		status: AnnounceStatus::Active,
		suffix: Path::new("bbb"),
		hops: vec![0x1234, 0x4321],
	};
	// 04: the chain includes the sender (0x4321 here); the bytes are 05's layout.
	golden(&active, Lite04, "0c 01 03 62 62 62 02 52 34 80 00 43 21");
	golden(&active, Lite05, "0c 01 03 62 62 62 02 52 34 80 00 43 21");
	let ended = Announce {
		status: AnnounceStatus::Ended,
		suffix: Path::new("bbb"),
		hops: Vec::new(),
	};
	golden(&ended, Lite04, "06 00 03 62 62 62 00");
	golden(&ended, Lite03, "06 00 03 62 62 62 00");
	// 03: only the count; the ids come back as the unknown origin, 0.
	let mut out = Vec::new();
	active.emit_for(Lite03, &mut out).unwrap();
	assert_eq!(out, hex("06 01 03 62 62 62 02"));
	let placeholders = Announce {
		hops: vec![0, 0],
		..active
	};
	golden(&placeholders, Lite03, "06 01 03 62 62 62 02");
}

#[test]
fn subscribe_responses_are_ok_and_drop_on_03_and_04() {
	let ok = SubscribeResponse::Ok {
		priority: 0,
		ordered: false,
		latency_max: Duration::ZERO,
		start: None,
		end: None,
	};
	golden(&ok, Lite04, "00 05 00 00 00 00 00");
	golden(&ok, Lite03, "00 05 00 00 00 00 00");
	let urgent = SubscribeResponse::Ok {
		priority: 0x80,
		ordered: false,
		latency_max: Duration::ZERO,
		start: None,
		end: None,
	};
	golden(&urgent, Lite04, "00 05 80 00 00 00 00");
	let drop = SubscribeResponse::Drop {
		start: 1,
		end: 3,
		code: 0,
	};
	golden(&drop, Lite04, "01 03 01 03 00");
	golden(&drop, Lite05, "02 03 01 03 00");
	// Type 0 is SUBSCRIBE_START on 05.
	golden(&SubscribeResponse::Start { group: 5 }, Lite05, "00 01 05");
	// What a version does not have is refused both ways, and never half-written.
	let mut out = vec![0xaa];
	assert_eq!(
		SubscribeResponse::Start { group: 5 }.try_encode_for(Lite04, &mut out),
		Err(EncodeError::NotInVersion("SUBSCRIBE_START"))
	);
	assert_eq!(
		SubscribeResponse::End { group: 5 }.try_encode_for(Lite03, &mut out),
		Err(EncodeError::NotInVersion("SUBSCRIBE_END"))
	);
	assert_eq!(
		ok.try_encode_for(Lite05, &mut out),
		Err(EncodeError::NotInVersion("SUBSCRIBE_OK"))
	);
	assert_eq!(out, vec![0xaa]);
	assert_eq!(
		SubscribeResponse::decode_for(&mut hex("02 03 01 03 00").as_slice(), Lite04),
		Err(DecodeError::UnexpectedMessage(2))
	);
}

#[test]
fn frames_carry_no_timestamp_before_05() {
	let frame = FrameHeader {
		timestamp_delta: 0,
		size: 5,
	};
	golden(&frame, Lite04, "05");
	golden(&frame, Lite03, "05");
	golden(
		&FrameHeader {
			timestamp_delta: 1000,
			size: 5,
		},
		Lite05,
		"47 d0 05",
	);
	// A 05 timestamp has no place on 04: it is dropped, and the receiver stamps frames itself.
	let mut out = Vec::new();
	FrameHeader {
		timestamp_delta: 1000,
		size: 5,
	}
	.emit_for(Lite04, &mut out)
	.unwrap();
	assert_eq!(out, hex("05"));
}

#[test]
fn probe_has_no_rtt_on_03() {
	golden(
		&Probe {
			bitrate: 1_000_000,
			rtt_ms: 0,
		},
		Lite03,
		"04 80 0f 42 40",
	);
	golden(
		&Probe {
			bitrate: 1_000_000,
			rtt_ms: 20,
		},
		Lite04,
		"05 80 0f 42 40 14",
	);
}

#[test]
fn every_differing_message_round_trips_in_every_version() {
	let responses = [
		SubscribeResponse::Ok {
			priority: 7,
			ordered: true,
			latency_max: Duration::from_millis(1500),
			start: Some(3),
			end: Some(9),
		},
		SubscribeResponse::Drop {
			start: 4,
			end: 6,
			code: 13,
		},
	];
	for version in [Lite03, Lite04] {
		for response in &responses {
			let mut out = Vec::new();
			response.emit_for(version, &mut out).unwrap();
			assert_eq!(
				&SubscribeResponse::decode_for(&mut out.as_slice(), version).unwrap(),
				response
			);
			// Short input is "need more bytes", never a wrong value.
			for cut in 0..out.len() {
				assert_eq!(
					SubscribeResponse::decode_for(&mut &out[..cut], version),
					Err(DecodeError::Short),
					"{version} cut at {cut}"
				);
			}
		}
	}
}
