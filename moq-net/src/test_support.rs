//! Helpers the workspace's tests share (feature `test-support`): a local broadcast with a
//! "video" track, one-frame groups that carry their own sequence, waiting for an announcement,
//! and taking groups from a cursor. moq-net's session tests and the relay's end-to-end tests
//! both use them, so the two never drift apart.

use crate::coding::Encode;
use crate::lite::session::MAX_FRAME;
use crate::lite::{DataType, FrameHeader, GroupHeader, Subscribe};
use crate::model::{BroadcastConsumer, BroadcastProducer, Origin, Path, Publication};
use crate::{Frame, Timestamp, TrackConsumer, TrackInfo, TrackProducer};
use std::time::Duration;

/// Bytes from hex notation, white space ignored (`01 07 01 ...`, `0xc0 00`): the spec pages'
/// examples, pasted as they are.
pub fn hex(text: &str) -> Vec<u8> {
	let digits: String = text
		.split_whitespace()
		.map(|byte| byte.trim_start_matches("0x"))
		.collect();
	assert!(digits.len().is_multiple_of(2), "an odd number of hex digits: {text}");
	(0..digits.len())
		.step_by(2)
		.map(|at| u8::from_str_radix(&digits[at..at + 2], 16).expect("hex digits"))
		.collect()
}

/// A fuzz input as streams: up to 32 of them, each a kind byte, a big-endian `u16` length and
/// that many bytes (fewer if the input ends first). The session fuzz targets of moq-net and
/// moq-quic open one stream per entry.
pub fn fuzz_streams(data: &[u8]) -> Vec<(u8, &[u8])> {
	let mut out = Vec::new();
	let mut rest = data;
	while rest.len() >= 3 && out.len() < 32 {
		let kind = rest[0];
		let len = usize::from(u16::from_be_bytes([rest[1], rest[2]])).min(rest.len() - 3);
		out.push((kind, &rest[3..3 + len]));
		rest = &rest[3 + len..];
	}
	out
}

/// A frame for group `seq`: its payload is `seq` (little-endian), its timestamp `seq × 33 ms`.
pub fn frame(seq: u64) -> Frame {
	Frame::new(Timestamp::new(seq * 33, 1000), seq.to_le_bytes().to_vec())
}

/// Publishes a finished one-frame group with sequence `seq`.
pub fn publish(track: &TrackProducer, seq: u64) {
	let mut group = track.create_group(seq).unwrap();
	group.write_frame(frame(seq)).unwrap();
	group.finish().unwrap();
}

/// A broadcast at `name` in `origin` with one track "video" of `info`.
pub fn local_broadcast(
	origin: &Origin,
	name: &str,
	info: TrackInfo,
) -> (BroadcastProducer, TrackProducer, Publication) {
	let (broadcast, publication) = origin
		.producer()
		.create_broadcast(&Path::new(name), Default::default())
		.unwrap();
	let track = broadcast.create_track("video", info).unwrap();
	(broadcast, track, publication)
}

/// Waits until `origin` announces a broadcast at `path`.
pub async fn announced(origin: &Origin, path: &str) -> BroadcastConsumer {
	let mut cursor = origin.consumer().announced(&Path::default());
	loop {
		let update = cursor.next().await;
		if update.path == Path::new(path)
			&& let Some(broadcast) = update.broadcast
		{
			return broadcast;
		}
	}
}

/// The next `n` (sequence, first frame's payload as u64) of a cursor.
pub async fn take(cursor: &mut TrackConsumer, n: usize) -> Vec<(u64, u64)> {
	let mut got = Vec::new();
	while got.len() < n {
		let mut group = cursor.recv_group().await.unwrap().expect("a group");
		let frame = group.read_frame().await.unwrap().unwrap();
		let value = u64::from_le_bytes(frame.payload[..8].try_into().unwrap());
		got.push((group.sequence(), value));
	}
	got
}

/// A stream's first bytes: its type, then `message`.
pub fn typed(kind: u64, message: &impl Encode) -> Vec<u8> {
	let mut bytes = Vec::new();
	kind.encode(&mut bytes);
	message.encode(&mut bytes);
	bytes
}

/// A group stream's first bytes for subscription `subscribe_id`, declaring a frame one byte over
/// the largest a session accepts (FrameTooLarge, 27): what a hostile publisher forges, since the
/// model itself refuses such a frame.
pub fn oversized_group(subscribe_id: u64) -> Vec<u8> {
	let mut bytes = typed(
		u64::from(DataType::Group),
		&GroupHeader {
			subscribe_id,
			sequence: 0,
		},
	);
	FrameHeader {
		timestamp_delta: 0,
		size: MAX_FRAME + 1,
	}
	.encode(&mut bytes);
	bytes
}

/// A SETUP stream (type 1) whose SETUP repeats a parameter: Decode (5) for whoever reads it.
pub const DUPLICATE_PARAMETER_SETUP: &[u8] = &[0x01, 0x07, 0x02, 0x05, 0x01, 0x01, 0x05, 0x01, 0x02];

/// A video track's info: milliseconds, ordered, with this retention and publisher priority.
pub fn video(latency_max: Duration, priority: u8) -> TrackInfo {
	TrackInfo {
		timescale: 1000,
		latency_max,
		priority,
		ordered: true,
	}
}

/// SUBSCRIBE `id` to `track` of `broadcast` with every other field zero: from the latest group,
/// no end, priority 0, unordered, no latency.
pub fn subscribe(id: u64, broadcast: &str, track: &str) -> Subscribe {
	Subscribe {
		id,
		broadcast: Path::new(broadcast),
		track: track.into(),
		priority: 0,
		ordered: false,
		latency_max: Duration::ZERO,
		start: None,
		end: None,
	}
}
