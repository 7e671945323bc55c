//! lite-05 messages against the exact bytes of docs/moq-lite-05.md §2.5, both ways, and every class of bad
//! input: truncation at every cut, trailing bytes, over-long lengths, over-deep paths, too many
//! or duplicate SETUP parameters, zero timescale, invalid UTF-8, unknown stream and message types.

use moq_net::test_support::hex;
use std::fmt::Debug;
use std::time::Duration;

use bytes::Bytes;
use moq_net::Path;
use moq_net::coding::{Decode, DecodeError, Encode, EncodeError, MAX_PATH_SEGMENTS, MAX_STRING_LEN, VARINT_MAX};
use moq_net::lite::{
	Announce, AnnounceOk, AnnounceRequest, AnnounceStatus, ControlType, DataType, Datagram, Fetch, FrameHeader, Goaway,
	GroupHeader, MAX_HOPS, MAX_MESSAGE_LEN, MAX_PARAMETERS, Probe, Setup, Subscribe, SubscribeResponse,
	SubscribeUpdate, Track, TrackInfo,
};

fn encoded<T: Encode + ?Sized>(value: &T) -> Vec<u8> {
	let mut out = Vec::new();
	value.encode(&mut out);
	out
}

/// `value` encodes to exactly `bytes`, `bytes` decodes to exactly `value` (consuming all of
/// them), and every strict prefix of `bytes` is `Short`.
#[track_caller]
fn golden<T: Decode + Encode + PartialEq + Debug>(value: &T, bytes: &str) {
	let bytes = hex(bytes);
	assert_eq!(encoded(value), bytes, "encode {value:?}");
	let mut buf = &bytes[..];
	assert_eq!(T::decode(&mut buf).as_ref(), Ok(value), "decode {bytes:02x?}");
	assert!(buf.is_empty(), "decode left {buf:02x?}");
	for cut in 0..bytes.len() {
		assert_eq!(
			T::decode(&mut &bytes[..cut]),
			Err(DecodeError::Short),
			"{value:?} cut at {cut}"
		);
	}
	// A following message's bytes are left for it.
	let mut two = bytes.clone();
	two.extend_from_slice(&bytes);
	let mut buf = &two[..];
	assert_eq!(T::decode(&mut buf).as_ref(), Ok(value));
	assert_eq!(buf, &bytes[..]);
}

fn bbb() -> Path {
	Path::new("bbb")
}

#[test]
fn setup_empty() {
	golden(&DataType::Setup, "01");
	golden(&Setup::new(), "01 00");
	let mut stream = encoded(&DataType::Setup);
	Setup::new().encode(&mut stream);
	assert_eq!(stream, hex("01 01 00"), "docs/moq-lite-05.md §0 fact 4");
}

#[test]
fn setup_origin() {
	let setup = Setup::new().with_origin(0x4321);
	let mut stream = encoded(&DataType::Setup);
	setup.encode(&mut stream);
	assert_eq!(stream, hex("01 07 01 05 04 80 00 43 21"));
	golden(&setup, "07 01 05 04 80 00 43 21");
	assert_eq!(
		Setup::decode_exact(&hex("07 01 05 04 80 00 43 21")).unwrap().origin(),
		Some(0x4321)
	);
}

#[test]
fn announce_request() {
	golden(&ControlType::Announce, "01");
	golden(
		&AnnounceRequest {
			prefix: Path::new(""),
			exclude_hop: 0x1234,
		},
		"03 00 52 34",
	);
}

#[test]
fn announce_ok() {
	golden(
		&AnnounceOk {
			origin: 0x4321,
			active: 1,
		},
		"05 80 00 43 21 01",
	);
}

#[test]
fn announce_active_and_ended() {
	golden(
		&Announce {
			status: AnnounceStatus::Active,
			suffix: bbb(),
			hops: vec![0x1234],
		},
		"08 01 03 62 62 62 01 52 34",
	);
	golden(
		&Announce {
			status: AnnounceStatus::Ended,
			suffix: bbb(),
			hops: vec![],
		},
		"06 00 03 62 62 62 00",
	);
	golden(
		&Announce {
			status: AnnounceStatus::Restart,
			suffix: bbb(),
			hops: vec![],
		},
		"06 02 03 62 62 62 00",
	);
}

#[test]
fn track_and_track_info() {
	golden(&ControlType::Track, "06");
	golden(
		&Track {
			broadcast: bbb(),
			track: "video".into(),
		},
		"0a 03 62 62 62 05 76 69 64 65 6f",
	);
	golden(
		&TrackInfo {
			priority: 0,
			ordered: false,
			latency_max: Duration::from_millis(5000),
			timescale: 1000,
		},
		"06 00 00 53 88 43 e8",
	);
}

#[test]
fn subscribe_and_update() {
	golden(&ControlType::Subscribe, "02");
	golden(
		&Subscribe {
			id: 0,
			broadcast: bbb(),
			track: "video".into(),
			priority: 0,
			ordered: false,
			latency_max: Duration::ZERO,
			start: None,
			end: None,
		},
		"10 00 03 62 62 62 05 76 69 64 65 6f 00 00 00 00 00",
	);
	golden(
		&SubscribeUpdate {
			priority: 3,
			..Default::default()
		},
		"05 03 00 00 00 00",
	);
	golden(
		&SubscribeUpdate {
			priority: 0,
			ordered: true,
			latency_max: Duration::from_millis(1),
			start: Some(0),
			end: Some(9),
		},
		"05 00 01 01 01 0a",
	);
}

#[test]
fn subscribe_responses() {
	golden(&SubscribeResponse::Start { group: 5 }, "00 01 05");
	golden(&SubscribeResponse::End { group: 10 }, "01 01 0a");
	// No spec example for DROP: `type 2, len, start, end, code`.
	golden(
		&SubscribeResponse::Drop {
			start: 1,
			end: 2,
			code: 13,
		},
		"02 03 01 02 0d",
	);
}

#[test]
fn group_and_frames() {
	golden(&DataType::Group, "00");
	golden(
		&GroupHeader {
			subscribe_id: 0,
			sequence: 5,
		},
		"02 00 05",
	);
	let header = FrameHeader {
		timestamp_delta: 1000,
		size: 5,
	};
	golden(&header, "47 d0 05");
	let mut frame = encoded(&header);
	frame.extend_from_slice(b"hello");
	assert_eq!(frame, hex("47 d0 05 68 65 6c 6c 6f"));
	golden(
		&FrameHeader {
			timestamp_delta: -33,
			size: 0,
		},
		"40 41 00",
	);
}

#[test]
fn fetch() {
	golden(&ControlType::Fetch, "03");
	golden(
		&Fetch {
			broadcast: bbb(),
			track: "video".into(),
			priority: 0,
			group: 7,
		},
		"0c 03 62 62 62 05 76 69 64 65 6f 00 07",
	);
}

#[test]
fn probe_and_goaway() {
	golden(&ControlType::Probe, "04");
	golden(
		&Probe {
			bitrate: 1_000_000,
			rtt_ms: 20,
		},
		"05 80 0f 42 40 14",
	);
	golden(&ControlType::Goaway, "05");
	// No spec example for GOAWAY: `len, uri(s)`.
	golden(
		&Goaway {
			uri: "moqt://b/".into(),
		},
		"0a 09 6d 6f 71 74 3a 2f 2f 62 2f",
	);
}

#[test]
fn datagram() {
	let datagram = Datagram {
		subscribe_id: 0,
		sequence: 5,
		timestamp: 1000,
		payload: Bytes::from_static(b"hi"),
	};
	let bytes = hex("00 05 43 e8 68 69");
	assert_eq!(encoded(&datagram), bytes);
	assert_eq!(Datagram::decode_exact(&bytes), Ok(datagram.clone()));
	assert_eq!(Datagram::decode_bytes(&Bytes::from(bytes.clone())), Ok(datagram));
	// The header's cut points are Short; from there on the rest is payload.
	for cut in 0..4 {
		assert_eq!(
			Datagram::decode(&mut &bytes[..cut]),
			Err(DecodeError::Short),
			"cut {cut}"
		);
	}
	assert_eq!(Datagram::decode_exact(&bytes[..4]).unwrap().payload, Bytes::new());
}

// --- bad input ----------------------------------------------------------------------------------

/// Each golden message with its length raised by one and a zero byte appended to the body.
macro_rules! assert_long {
	($($kind:ty: $bytes:literal),* $(,)?) => {$(
		assert_eq!(<$kind>::decode_exact(&hex($bytes)), Err(DecodeError::Long), "{}", stringify!($kind));
	)*};
}

#[test]
fn trailing_bytes_inside_the_length_are_long() {
	assert_long! {
		Setup: "02 00 00",
		Setup: "08 01 05 04 80 00 43 21 00",
		AnnounceRequest: "04 00 52 34 00",
		AnnounceOk: "06 80 00 43 21 01 00",
		Announce: "09 01 03 62 62 62 01 52 34 00",
		Announce: "07 00 03 62 62 62 00 00",
		Track: "0b 03 62 62 62 05 76 69 64 65 6f 00",
		TrackInfo: "07 00 00 53 88 43 e8 00",
		Subscribe: "11 00 03 62 62 62 05 76 69 64 65 6f 00 00 00 00 00 00",
		SubscribeUpdate: "06 03 00 00 00 00 00",
		SubscribeResponse: "00 02 05 00",
		SubscribeResponse: "01 02 0a 00",
		GroupHeader: "03 00 05 00",
		Fetch: "0d 03 62 62 62 05 76 69 64 65 6f 00 07 00",
		Probe: "06 80 0f 42 40 14 00",
		Goaway: "02 00 00",
	}
	// Bytes after the message (outside its length) are the next message's, not an error.
	let mut buf = &hex("02 00 05 ff")[..];
	assert!(GroupHeader::decode(&mut buf).is_ok());
	assert_eq!(buf, [0xff]);
}

#[test]
fn a_length_shorter_than_the_fields_is_truncated_not_short() {
	// GROUP declares 1 byte but needs 2: more bytes cannot help, so it is not `Short`.
	assert_eq!(GroupHeader::decode_exact(&hex("01 00")), Err(DecodeError::Truncated));
	assert_eq!(Track::decode_exact(&hex("04 03 62 62 62")), Err(DecodeError::Truncated));
	assert_eq!(TrackInfo::decode_exact(&hex("00")), Err(DecodeError::Truncated));
	assert_eq!(DecodeError::Truncated.code(), 5);
}

#[test]
fn over_long_lengths_are_rejected_from_the_prefix_alone() {
	// Only the length prefix is present: a cap violation is reported without waiting for (or
	// allocating) the body.
	let mut over = Vec::new();
	(MAX_MESSAGE_LEN as u64 + 1).encode(&mut over);
	for result in [
		Setup::decode(&mut &over[..]).err(),
		Track::decode(&mut &over[..]).err(),
		Subscribe::decode(&mut &over[..]).err(),
		GroupHeader::decode(&mut &over[..]).err(),
		Goaway::decode(&mut &over[..]).err(),
	] {
		assert_eq!(result, Some(DecodeError::BoundsExceeded));
	}
	let max = hex("ff ff ff ff ff ff ff ff");
	assert_eq!(Announce::decode(&mut &max[..]), Err(DecodeError::BoundsExceeded));
	assert_eq!(DecodeError::BoundsExceeded.code(), 11);
	// A string length over the cap inside a message whose own length is fine.
	let mut body = vec![];
	(MAX_STRING_LEN as u64 + 1).encode(&mut body);
	let mut message = vec![body.len() as u8];
	message.extend_from_slice(&body);
	assert_eq!(Goaway::decode_exact(&message), Err(DecodeError::BoundsExceeded));
	// A hop count over the cap, before any hop is read.
	assert_eq!(
		Announce::decode_exact(&hex("03 01 00 21")),
		Err(DecodeError::BoundsExceeded),
		"33 hops"
	);
	// Encoders refuse what decoders would refuse.
	let too_many_hops = Announce {
		hops: vec![1; MAX_HOPS + 1],
		..Default::default()
	};
	assert_eq!(
		too_many_hops.try_encode(&mut Vec::new()),
		Err(EncodeError::BoundsExceeded)
	);
	let too_long = Goaway {
		uri: "x".repeat(MAX_STRING_LEN + 1),
	};
	assert_eq!(too_long.try_encode(&mut Vec::new()), Err(EncodeError::BoundsExceeded));
	let mut setup = Setup::new();
	for id in 0..16 {
		setup.params.insert(100 + id, vec![0; MAX_STRING_LEN]);
	}
	assert_eq!(
		setup.try_encode(&mut Vec::new()),
		Err(EncodeError::BoundsExceeded),
		"over 64 KiB"
	);
}

#[test]
fn max_hops_decode() {
	let announce = Announce {
		status: AnnounceStatus::Active,
		suffix: bbb(),
		hops: (0..MAX_HOPS as u64).map(|hop| VARINT_MAX - hop).collect(),
	};
	assert_eq!(Announce::decode_exact(&encoded(&announce)), Ok(announce));
}

#[test]
fn paths_over_32_segments() {
	let deep = vec!["s"; MAX_PATH_SEGMENTS + 1].join("/");
	let mut body = Vec::new();
	deep.as_str().encode(&mut body);
	body.push(0); // exclude_hop
	let mut message = Vec::new();
	(body.len() as u64).encode(&mut message);
	message.extend_from_slice(&body);
	let err = AnnounceRequest::decode_exact(&message).unwrap_err();
	assert_eq!(err, DecodeError::PathTooDeep);
	assert_eq!(err.code(), 11);
	let request = AnnounceRequest {
		prefix: Path::new(&deep),
		exclude_hop: 0,
	};
	let mut out = vec![1, 2];
	assert_eq!(request.try_encode(&mut out), Err(EncodeError::PathTooDeep));
	assert_eq!(out, [1, 2], "nothing written");
	let ok = AnnounceRequest {
		prefix: Path::new(&vec!["s"; MAX_PATH_SEGMENTS].join("/")),
		exclude_hop: 0,
	};
	assert_eq!(AnnounceRequest::decode_exact(&encoded(&ok)), Ok(ok));
}

/// A SETUP with `count` declared parameters, each `(id, value)`.
fn setup_bytes(count: u64, params: &[(u64, &[u8])]) -> Vec<u8> {
	let mut body = Vec::new();
	count.encode(&mut body);
	for &(id, value) in params {
		id.encode(&mut body);
		(value.len() as u64).encode(&mut body);
		body.extend_from_slice(value);
	}
	let mut message = Vec::new();
	(body.len() as u64).encode(&mut message);
	message.extend_from_slice(&body);
	message
}

#[test]
fn setup_parameter_limits() {
	let params: Vec<(u64, &[u8])> = (0..65).map(|id| (100 + id, &[][..])).collect();
	let err = Setup::decode_exact(&setup_bytes(65, &params)).unwrap_err();
	assert_eq!(err, DecodeError::TooManyParameters);
	assert_eq!(err.code(), 19);
	// Rejected from the count alone, before any parameter arrives.
	assert_eq!(
		Setup::decode_exact(&setup_bytes(65, &[])),
		Err(DecodeError::TooManyParameters)
	);
	assert_eq!(
		Setup::decode_exact(&setup_bytes(u64::MAX >> 2, &[])),
		Err(DecodeError::TooManyParameters)
	);
	let max = setup_bytes(64, &params[..64]);
	assert_eq!(Setup::decode_exact(&max).unwrap().params.len(), MAX_PARAMETERS);
	let mut setup = Setup::new();
	for id in 0..65 {
		setup.params.insert(100 + id, vec![]);
	}
	assert_eq!(setup.try_encode(&mut Vec::new()), Err(EncodeError::TooManyParameters));
}

#[test]
fn setup_duplicates_unknowns_and_malformed_known_params() {
	assert_eq!(
		Setup::decode_exact(&setup_bytes(2, &[(5, &[1]), (5, &[2])])),
		Err(DecodeError::DuplicateParameter(5))
	);
	assert_eq!(
		Setup::decode_exact(&setup_bytes(2, &[(0x99, &[]), (0x99, &[])])),
		Err(DecodeError::DuplicateParameter(0x99))
	);
	// Unknown ids are kept, and survive re-encoding.
	let setup = Setup::decode_exact(&setup_bytes(2, &[(0x99, b"xyz"), (5, &[7])])).unwrap();
	assert_eq!(setup.param(0x99), Some(&b"xyz"[..]));
	assert_eq!(setup.origin(), Some(7));
	assert_eq!(Setup::decode_exact(&encoded(&setup)), Ok(setup));
	// Known parameters must hold what they claim.
	assert_eq!(
		Setup::decode_exact(&setup_bytes(1, &[(2, &[0xff])])),
		Err(DecodeError::InvalidUtf8)
	);
	assert!(matches!(
		Setup::decode_exact(&setup_bytes(1, &[(5, &[1, 2])])),
		Err(DecodeError::InvalidValue(_))
	));
	assert!(matches!(
		Setup::decode_exact(&setup_bytes(1, &[(5, &[0x40])])),
		Err(DecodeError::InvalidValue(_))
	));
	// A non-minimal varint value is still a varint.
	assert_eq!(
		Setup::decode_exact(&setup_bytes(1, &[(5, &[0x40, 0x07])]))
			.unwrap()
			.origin(),
		Some(7)
	);
}

#[test]
fn zero_timescale() {
	let err = TrackInfo::decode_exact(&hex("04 00 00 00 00")).unwrap_err();
	assert_eq!(err, DecodeError::InvalidValue("timescale"));
	assert_eq!(err.code(), 5);
	let info = TrackInfo {
		priority: 0,
		ordered: false,
		latency_max: Duration::ZERO,
		timescale: 0,
	};
	assert_eq!(info.try_encode(&mut Vec::new()), Err(EncodeError::BoundsExceeded));
}

#[test]
fn invalid_utf8() {
	assert_eq!(
		Track::decode_exact(&hex("06 03 62 ff 62 01 76")),
		Err(DecodeError::InvalidUtf8),
		"broadcast"
	);
	assert_eq!(
		Track::decode_exact(&hex("05 00 03 c3 28 76")),
		Err(DecodeError::InvalidUtf8),
		"track"
	);
	assert_eq!(Goaway::decode_exact(&hex("02 01 80")), Err(DecodeError::InvalidUtf8));
}

#[test]
fn unknown_types() {
	for kind in [7, 0x20, VARINT_MAX] {
		let bytes = encoded(&kind);
		assert_eq!(
			ControlType::decode_exact(&bytes),
			Err(DecodeError::UnexpectedStream(kind))
		);
	}
	let err = DataType::decode_exact(&hex("02")).unwrap_err();
	assert_eq!(err, DecodeError::UnexpectedStream(2));
	assert_eq!(err.code(), 10);
	let err = SubscribeResponse::decode_exact(&hex("03 01 05")).unwrap_err();
	assert_eq!(err, DecodeError::UnexpectedMessage(3));
	assert_eq!(err.code(), 16);
	assert_eq!(
		Announce::decode_exact(&hex("06 03 03 62 62 62 00")),
		Err(DecodeError::InvalidValue("announce status"))
	);
}

#[test]
fn varints_at_max() {
	let subscribe = Subscribe {
		id: VARINT_MAX,
		broadcast: bbb(),
		track: String::new(),
		priority: 255,
		ordered: true,
		latency_max: Duration::from_millis(VARINT_MAX),
		start: Some(VARINT_MAX - 1),
		end: Some(0),
	};
	let bytes = encoded(&subscribe);
	assert_eq!(Subscribe::decode_exact(&bytes), Ok(subscribe.clone()));
	// One past the max anywhere is refused whole.
	for broken in [
		Subscribe {
			id: VARINT_MAX + 1,
			..subscribe.clone()
		},
		Subscribe {
			start: Some(VARINT_MAX),
			..subscribe.clone()
		},
		Subscribe {
			latency_max: Duration::from_millis(VARINT_MAX + 1),
			..subscribe
		},
	] {
		assert_eq!(broken.try_encode(&mut Vec::new()), Err(EncodeError::BoundsExceeded));
	}
	let header = FrameHeader {
		timestamp_delta: i64::MIN,
		size: 0,
	};
	assert_eq!(header.try_encode(&mut Vec::new()), Err(EncodeError::BoundsExceeded));
	let probe = Probe {
		bitrate: VARINT_MAX,
		rtt_ms: VARINT_MAX,
	};
	assert_eq!(Probe::decode_exact(&encoded(&probe)), Ok(probe));
	assert_eq!(
		SubscribeResponse::decode_exact(&hex("00 08 ff ff ff ff ff ff ff ff")),
		Ok(SubscribeResponse::Start { group: VARINT_MAX })
	);
}

#[test]
#[should_panic(expected = "unencodable value")]
fn encode_panics_on_what_try_encode_refuses() {
	GroupHeader {
		subscribe_id: u64::MAX,
		sequence: 0,
	}
	.encode(&mut Vec::new());
}

#[test]
fn the_model_knows_no_wire_format() {
	let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model");
	for entry in std::fs::read_dir(dir).unwrap() {
		let path = entry.unwrap().path();
		let text = std::fs::read_to_string(&path).unwrap();
		for forbidden in [
			"crate::coding",
			"crate::lite",
			"super::super::coding",
			"super::super::lite",
		] {
			assert!(!text.contains(forbidden), "{} uses {forbidden}", path.display());
		}
	}
}
