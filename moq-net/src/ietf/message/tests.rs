//! draft-14's control messages against wire images derived from the draft's layouts (the
//! drafts print field values, not bytes), both ways, and what bad bytes decode to.

use super::*;
use crate::test_support::hex;

fn both_ways(message: Message, wire: &str) {
	let wire = hex(wire);
	let mut out = Vec::new();
	message.encode(&mut out);
	assert_eq!(out, wire, "{message:?} encodes");
	assert_eq!(Message::decode_exact(&wire), Ok(message.clone()), "{message:?} decodes");
	// Any prefix of it is short, never an error or another message.
	for cut in 0..wire.len() {
		assert_eq!(
			Message::decode(&mut &wire[..cut]),
			Err(DecodeError::Short),
			"{message:?} cut at {cut}"
		);
	}
}

fn clock() -> Namespace {
	Namespace(vec!["clock".into()])
}

#[test]
fn setup_and_session_messages() {
	both_ways(
		Message::ClientSetup {
			versions: vec![super::super::DRAFT_14],
			params: Parameters::default().with_int(0x2, 100),
		},
		"20 00 0d 01 c0 00 00 00 ff 00 00 0e 01 02 40 64",
	);
	both_ways(
		Message::ServerSetup {
			version: super::super::DRAFT_14,
			params: Parameters::default().with_int(0x2, 100),
		},
		"21 00 0c c0 00 00 00 ff 00 00 0e 01 02 40 64",
	);
	both_ways(
		Message::ClientSetup {
			versions: vec![super::super::DRAFT_14],
			params: Parameters::default().with_bytes(0x1, &b"/x"[..]).with_int(0x2, 0),
		},
		"20 00 10 01 c0 00 00 00 ff 00 00 0e 02 01 02 2f 78 02 00",
	);
	both_ways(Message::MaxRequestId(200), "15 00 02 40 c8");
	both_ways(Message::RequestsBlocked(200), "1a 00 02 40 c8");
	both_ways(Message::Goaway { uri: String::new() }, "10 00 01 00");
}

#[test]
fn namespace_messages() {
	both_ways(
		Message::PublishNamespace {
			request_id: 0,
			namespace: clock(),
			params: Parameters::default(),
		},
		"06 00 09 00 01 05 63 6c 6f 63 6b 00",
	);
	both_ways(Message::PublishNamespaceOk(0), "07 00 01 00");
	both_ways(
		Message::PublishNamespaceError(RequestError {
			request_id: 0,
			code: 4,
			retry_interval: 0,
			reason: "no".into(),
		}),
		"08 00 05 00 04 02 6e 6f",
	);
	both_ways(Message::PublishNamespaceDone(clock()), "09 00 07 01 05 63 6c 6f 63 6b");
	both_ways(
		Message::PublishNamespaceCancel {
			namespace: clock(),
			code: 1,
			reason: String::new(),
		},
		"0c 00 09 01 05 63 6c 6f 63 6b 01 00",
	);
	both_ways(
		Message::SubscribeNamespace {
			request_id: 2,
			prefix: clock(),
			options: subscribe_options::BOTH,
			params: Parameters::default(),
		},
		"11 00 09 02 01 05 63 6c 6f 63 6b 00",
	);
	both_ways(Message::SubscribeNamespaceOk(2), "12 00 01 02");
	both_ways(
		Message::SubscribeNamespaceError(RequestError {
			request_id: 2,
			code: 4,
			retry_interval: 0,
			reason: String::new(),
		}),
		"13 00 03 02 04 00",
	);
	both_ways(Message::UnsubscribeNamespace(clock()), "14 00 07 01 05 63 6c 6f 63 6b");
}

fn subscribe(filter: Filter) -> Subscribe {
	Subscribe {
		request_id: 1,
		namespace: clock(),
		name: "seconds".into(),
		subscriber_priority: 128,
		group_order: 0,
		forward: true,
		filter,
		params: Parameters::default(),
	}
}

#[test]
fn subscription_messages() {
	both_ways(
		Message::Subscribe(subscribe(Filter::LargestObject)),
		"03 00 15 01 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 80 00 01 02 00",
	);
	both_ways(
		Message::Subscribe(subscribe(Filter::AbsoluteRange(Location { group: 5, object: 0 }, 7))),
		"03 00 18 01 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 80 00 01 04 05 00 07 00",
	);
	both_ways(
		Message::TrackStatus(subscribe(Filter::NextGroupStart)),
		"0d 00 15 01 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 80 00 01 01 00",
	);
	let ok = SubscribeOk {
		request_id: 1,
		track_alias: 0,
		expires: 0,
		group_order: 2,
		largest: Some(Location { group: 5, object: 3 }),
		params: Parameters::default(),
	};
	both_ways(Message::SubscribeOk(ok.clone()), "04 00 08 01 00 00 02 01 05 03 00");
	both_ways(
		Message::SubscribeOk(SubscribeOk {
			largest: None,
			..ok.clone()
		}),
		"04 00 06 01 00 00 02 00 00",
	);
	both_ways(Message::TrackStatusOk(ok), "0e 00 08 01 00 00 02 01 05 03 00");
	both_ways(
		Message::SubscribeError(RequestError {
			request_id: 1,
			code: 4,
			retry_interval: 0,
			reason: "nope".into(),
		}),
		"05 00 07 01 04 04 6e 6f 70 65",
	);
	both_ways(
		Message::SubscribeUpdate {
			request_id: 3,
			subscription: 1,
			start: Location { group: 5, object: 0 },
			end_group: 0,
			subscriber_priority: 1,
			forward: false,
			params: Parameters::default(),
		},
		"02 00 08 03 01 05 00 00 01 00 00",
	);
	both_ways(Message::Unsubscribe(1), "0a 00 01 01");
	both_ways(
		Message::PublishDone {
			request_id: 1,
			status: 2,
			stream_count: 3,
			reason: String::new(),
		},
		"0b 00 04 01 02 03 00",
	);
}

#[test]
fn fetch_and_publish_messages() {
	both_ways(
		Message::Fetch {
			request_id: 2,
			subscriber_priority: 128,
			group_order: 1,
			kind: FetchKind::Standalone {
				namespace: clock(),
				name: "seconds".into(),
				start: Location { group: 1, object: 0 },
				end: Location { group: 3, object: 0 },
			},
			params: Parameters::default(),
		},
		"16 00 18 02 80 01 01 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 01 00 03 00 00",
	);
	both_ways(
		Message::Fetch {
			request_id: 4,
			subscriber_priority: 128,
			group_order: 0,
			kind: FetchKind::Joining {
				relative: true,
				subscription: 1,
				start: 2,
			},
			params: Parameters::default(),
		},
		"16 00 07 04 80 00 02 01 02 00",
	);
	both_ways(
		Message::FetchOk {
			request_id: 2,
			group_order: 1,
			end_of_track: false,
			end: Location { group: 3, object: 0 },
			params: Parameters::default(),
		},
		"18 00 06 02 01 00 03 00 00",
	);
	both_ways(
		Message::FetchError(RequestError {
			request_id: 2,
			code: 6,
			retry_interval: 0,
			reason: String::new(),
		}),
		"19 00 03 02 06 00",
	);
	both_ways(Message::FetchCancel(2), "17 00 01 02");
	both_ways(
		Message::Publish {
			request_id: 6,
			body: Bytes::from_static(&[1, 5]),
		},
		"1d 00 03 06 01 05",
	);
	both_ways(
		Message::PublishError(RequestError {
			request_id: 6,
			code: 3,
			retry_interval: 0,
			reason: String::new(),
		}),
		"1f 00 03 06 03 00",
	);
}

#[test]
fn bad_bytes_are_errors_never_panics() {
	// A payload longer than its fields, or fields past the length.
	assert_eq!(Message::decode_exact(&hex("07 00 02 00 00")), Err(DecodeError::Long));
	assert_eq!(Message::decode_exact(&hex("0a 00 00")), Err(DecodeError::Truncated));
	// An unknown type, a forward flag of 2, a group order of 3, a filter of 5.
	assert_eq!(
		Message::decode_exact(&hex("3f 00 00")),
		Err(DecodeError::UnexpectedMessage(0x3f))
	);
	let sub = "03 00 15 01 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 80 00";
	assert!(Message::decode_exact(&hex(&format!("{sub} 02 02 00"))).is_err());
	assert!(
		Message::decode_exact(&hex(
			"03 00 15 01 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 80 03 01 02 00"
		))
		.is_err()
	);
	assert!(Message::decode_exact(&hex(&format!("{sub} 01 05 00"))).is_err());
	// A namespace field holding `/`, or empty; 33 fields.
	assert!(Message::decode_exact(&hex("09 00 04 01 02 61 2f")).is_err());
	assert!(Message::decode_exact(&hex("09 00 02 01 00")).is_err());
	let mut deep = vec![0x09, 0x00, 67, 33];
	for _ in 0..33 {
		deep.extend_from_slice(&[1, b'a']);
	}
	assert!(Message::decode_exact(&deep).is_err());
	// An odd parameter past its bytes; more parameters than we take.
	assert!(Message::decode_exact(&hex("11 00 06 02 01 01 61 01 01")).is_err());
	assert_eq!(
		Message::decode_exact(&hex("11 00 06 02 01 01 61 40 41")),
		Err(DecodeError::TooManyParameters),
		"65 parameters announced"
	);
}

fn both_ways_15(message: Message, wire: &str) {
	both_ways_in(Version::Draft15, message, wire);
}

fn both_ways_in(version: Version, message: Message, wire: &str) {
	let wire = hex(wire);
	let mut out = Vec::new();
	message.encode_for(version, &mut out).unwrap();
	assert_eq!(out, wire, "{message:?} encodes as {version:?}");
	let mut view = &wire[..];
	let decoded = Message::decode_for(&mut view, version).unwrap();
	assert!(view.is_empty());
	// Decoded and encoded again: the same bytes (the fields parameters carry are kept as they came).
	let mut again = Vec::new();
	decoded.encode_for(version, &mut again).unwrap();
	assert_eq!(again, wire, "{decoded:?} encodes back");
	for cut in 0..wire.len() {
		assert_eq!(
			Message::decode_for(&mut &wire[..cut], version),
			Err(DecodeError::Short),
			"cut at {cut}"
		);
	}
}

#[test]
fn draft_15_carries_fields_as_parameters_and_answers_every_request_alike() {
	let version = Version::Draft15;
	both_ways_15(
		Message::ClientSetup {
			versions: Vec::new(),
			params: Parameters::default()
				.with_bytes(0x1, &b"/x"[..])
				.with_int(0x2, 100)
				.with_bytes(0x7, &b"r"[..]),
		},
		"20 00 0b 03 01 02 2f 78 02 40 64 07 01 72",
	);
	let subscribe = Subscribe {
		request_id: 0,
		params: Parameters::default(),
		..subscribe(Filter::LargestObject)
	};
	both_ways_15(
		Message::Subscribe(subscribe),
		"03 00 19 00 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 03 10 01 20 40 80 21 01 02",
	);
	// A SUBSCRIBE's fields read from its parameters.
	let wire = hex("03 00 19 00 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 03 10 00 20 40 05 21 01 01");
	let Ok(Message::Subscribe(read)) = Message::decode_for(&mut &wire[..], version) else {
		panic!("a SUBSCRIBE");
	};
	assert_eq!(
		(read.forward, read.subscriber_priority, read.filter),
		(false, 5, Filter::NextGroupStart)
	);
	both_ways_15(
		Message::SubscribeOk(SubscribeOk {
			request_id: 0,
			track_alias: 0,
			expires: 0,
			group_order: 0,
			largest: Some(Location { group: 5, object: 3 }),
			params: Parameters::default(),
		}),
		"04 00 07 00 00 01 09 02 05 03",
	);
	both_ways_15(
		Message::RequestOk {
			request_id: 0,
			params: Parameters::default(),
		},
		"07 00 02 00 00",
	);
	both_ways_15(
		Message::SubscribeError(RequestError {
			request_id: 0,
			code: 0x10,
			retry_interval: 0,
			reason: String::new(),
		}),
		"05 00 03 00 10 00",
	);
	both_ways_15(Message::UnsubscribeNamespaceRequest(2), "14 00 01 02");
	// Found by the fuzzer: a SUBSCRIBE_UPDATE without parameters came back, encoded and read
	// again, with its defaults as parameters, unequal to itself.
	let update = Message::decode_for(&mut &hex("02 00 03 30 1a 00")[..], version).unwrap();
	let mut out = Vec::new();
	update.encode_for(version, &mut out).unwrap();
	assert_eq!(Message::decode_for(&mut &out[..], version), Ok(update));
	// draft-14's own replies are not draft-15's, either way.
	assert_eq!(
		Message::decode_for(&mut &hex("12 00 01 02")[..], version),
		Err(DecodeError::UnexpectedMessage(0x12))
	);
	assert!(
		Message::SubscribeNamespaceOk(2)
			.encode_for(version, &mut Vec::new())
			.is_err()
	);
	// A filter parameter that is no filter, a forward of 2.
	for bad in [
		"03 00 0f 00 01 05 63 6c 6f 63 6b 01 73 01 21 02 07 00",
		"03 00 0d 00 01 05 63 6c 6f 63 6b 01 73 01 10 02",
	] {
		let error = Message::decode_for(&mut &hex(bad)[..], version).unwrap_err();
		assert!(matches!(error, DecodeError::InvalidValue(_)), "{bad}: {error:?}");
	}
}

fn both_ways_16(message: Message, wire: &str) {
	both_ways_in(Version::Draft16, message, wire);
}

#[test]
fn draft_16_writes_parameter_types_as_deltas_and_moves_namespaces_to_their_own_streams() {
	let version = Version::Draft16;
	// The parameters' types 1, 2, 7 as 1, +1, +5 (docs/moq-transport.md's vector).
	both_ways_16(
		Message::ClientSetup {
			versions: Vec::new(),
			params: Parameters::default()
				.with_bytes(0x1, &b"/x"[..])
				.with_int(0x2, 100)
				.with_bytes(0x7, &b"r"[..]),
		},
		"20 00 0b 03 01 02 2f 78 01 40 64 05 01 72",
	);
	// Written in any order, sent sorted: 0x10, +0x10, +0x01.
	let subscribe = Subscribe {
		request_id: 0,
		params: Parameters::default(),
		..subscribe(Filter::LargestObject)
	};
	both_ways_16(
		Message::Subscribe(subscribe),
		"03 00 19 00 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 03 10 01 10 40 80 01 01 02",
	);
	both_ways_16(
		Message::SubscribeError(RequestError {
			request_id: 0,
			code: 0x10,
			retry_interval: 0,
			reason: String::new(),
		}),
		"05 00 04 00 10 00 00",
	);
	both_ways_16(
		Message::SubscribeError(RequestError {
			request_id: 4,
			code: 0x3,
			retry_interval: 1001,
			reason: "no".into(),
		}),
		"05 00 07 04 03 43 e9 02 6e 6f",
	);
	both_ways_16(
		Message::SubscribeNamespace {
			request_id: 2,
			prefix: clock(),
			options: subscribe_options::NAMESPACE,
			params: Parameters::default(),
		},
		"11 00 0a 02 01 05 63 6c 6f 63 6b 01 00",
	);
	both_ways_16(Message::Namespace(Namespace(vec!["a".into()])), "08 00 03 01 01 61");
	both_ways_16(Message::NamespaceDone(Namespace(vec!["a".into()])), "0e 00 03 01 01 61");
	both_ways_16(Message::PublishNamespaceDoneRequest(6), "09 00 01 06");
	both_ways_16(
		Message::PublishNamespaceCancelRequest(RequestError {
			request_id: 6,
			code: 0x4,
			retry_interval: 0,
			reason: String::new(),
		}),
		"0c 00 03 06 04 00",
	);
	// SUBSCRIBE_OK ends with the track's extensions (DEFAULT_PUBLISHER_GROUP_ORDER = 2 here):
	// read and left behind; we write none.
	let wire = hex("04 00 05 00 00 00 22 02");
	let Ok(Message::SubscribeOk(ok)) = Message::decode_for(&mut &wire[..], version) else {
		panic!("a SUBSCRIBE_OK");
	};
	assert_eq!((ok.request_id, ok.track_alias), (0, 0));
	both_ways_16(Message::SubscribeOk(ok), "04 00 03 00 00 00");
	// Bad: an unknown message parameter (0x40), extensions that are no pairs, options of 3,
	// UNSUBSCRIBE_NAMESPACE (gone), and a type delta past 2^64.
	for bad in [
		"03 00 12 00 01 05 63 6c 6f 63 6b 07 73 65 63 6f 6e 64 73 01 40 40 00",
		"04 00 05 00 00 00 21 05",
		"11 00 0a 02 01 05 63 6c 6f 63 6b 03 00",
		"14 00 01 02",
		// Five SETUP parameters each 2^62 - 2 past the one before: the fifth is past 2^64.
		&format!("20 00 2e 05{}", " ff ff ff ff ff ff ff fe 00".repeat(5)),
	] {
		let bad: &str = bad;
		assert!(
			Message::decode_for(&mut &hex(bad)[..], version).is_err(),
			"{bad} decodes as draft-16"
		);
	}
	// What draft-16 replaced is not written in it.
	for gone in [
		Message::UnsubscribeNamespaceRequest(2),
		Message::PublishNamespaceDone(clock()),
	] {
		assert!(gone.encode_for(version, &mut Vec::new()).is_err(), "{gone:?}");
	}
	// An unknown SETUP parameter is still ignored (kept), as in every draft.
	let wire = hex("20 00 04 01 40 50 01");
	assert!(Message::decode_for(&mut &wire[..], version).is_ok());
}
