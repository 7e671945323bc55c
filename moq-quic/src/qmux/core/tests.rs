//! Two cores, a client and a server, with their record bodies carried by hand.

use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kio::Waiter;

use super::*;

fn waiter() -> Waiter {
	Waiter::new(std::task::Waker::noop().clone())
}

struct Pair {
	client: Core,
	server: Core,
	now: Instant,
}

impl Pair {
	fn new(version: Version, client: Config, server: Config) -> Self {
		let now = Instant::now();
		let mut pair = Self {
			client: Core::new(Side::Client, version, client, now),
			server: Core::new(Side::Server, version, server, now),
			now,
		};
		pair.exchange();
		pair
	}

	fn default() -> Self {
		Self::new(Version::Qmux01, Config::default(), Config::default())
	}

	/// Carries every body each way until neither has anything to send; the bodies carried.
	fn exchange(&mut self) -> usize {
		let mut carried = 0;
		loop {
			let mut moved = false;
			while let Some(body) = self.client.poll_transmit(self.now) {
				let _ = self.server.receive(Bytes::from(body), self.now);
				moved = true;
				carried += 1;
			}
			while let Some(body) = self.server.poll_transmit(self.now) {
				let _ = self.client.receive(Bytes::from(body), self.now);
				moved = true;
				carried += 1;
			}
			if !moved {
				return carried;
			}
		}
	}
}

fn write(core: &mut Core, id: u64, data: &[u8]) -> Poll<Result<(), StreamError>> {
	let mut data = Bytes::copy_from_slice(data);
	core.poll_write(&waiter(), id, &mut data)
}

fn read_all(core: &mut Core, id: u64) -> (Vec<u8>, bool) {
	let mut got = Vec::new();
	loop {
		match core.poll_read(&waiter(), id) {
			Poll::Ready(Ok(Some(chunk))) => got.extend_from_slice(&chunk),
			Poll::Ready(Ok(None)) => return (got, true),
			Poll::Ready(Err(error)) => panic!("{error:?}"),
			Poll::Pending => return (got, false),
		}
	}
}

#[test]
fn streams_carry_bytes_both_ways_after_the_parameters() {
	let mut pair = Pair::default();
	let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Bi) else {
		panic!("the server's parameters allow a stream");
	};
	assert_eq!(id, 0, "the client's first bidirectional stream");
	assert!(write(&mut pair.client, id, b"hello").is_ready());
	pair.client.finish(id).unwrap();
	pair.exchange();
	let Poll::Ready(Ok(accepted)) = pair.server.poll_accept(&waiter(), Dir::Bi) else {
		panic!("the server sees the stream");
	};
	assert_eq!(accepted, id);
	assert_eq!(read_all(&mut pair.server, id), (b"hello".to_vec(), true));
	assert!(write(&mut pair.server, id, b"world").is_ready());
	pair.server.finish(id).unwrap();
	pair.exchange();
	assert_eq!(read_all(&mut pair.client, id), (b"world".to_vec(), true));
	// Both halves ended and let go: the streams are forgotten on both sides.
	pair.client.release_send(id);
	pair.client.drop_recv(id);
	pair.server.release_send(id);
	pair.server.drop_recv(id);
	assert_eq!((pair.client.streams(), pair.server.streams()), (0, 0));
	// A server's unidirectional stream is id 3.
	let Poll::Ready(Ok(uni)) = pair.server.poll_open(&waiter(), Dir::Uni) else {
		panic!("a uni stream");
	};
	assert_eq!(uni, 3);
}

#[test]
fn the_first_frame_must_be_the_parameters() {
	let mut server = Core::new(Side::Server, Version::Qmux01, Config::default(), Instant::now());
	let mut body = Vec::new();
	Frame::MaxData(10).encode(&mut body);
	let violation = server.receive(Bytes::from(body), Instant::now()).unwrap_err();
	assert_eq!(violation.code, code::PROTOCOL_VIOLATION);
	// Its close goes out, and nothing after it.
	let close = server.poll_transmit(Instant::now()).unwrap();
	assert_eq!(close[0], 0x1c);
	assert!(server.is_finished());
	assert_eq!(server.poll_transmit(Instant::now()), None);
}

#[test]
fn a_peer_that_sends_past_its_credit_is_closed() {
	let server_config = Config {
		params: Params {
			max_stream_data_bidi_remote: 100,
			..Config::default().params
		},
		..Config::default()
	};
	let mut pair = Pair::new(Version::Qmux01, Config::default(), server_config);
	// A hand-made frame past the stream's 100 bytes.
	let mut body = Vec::new();
	Frame::Stream {
		id: 0,
		offset: Some(0),
		fin: false,
		data: Bytes::from(vec![1; 101]),
	}
	.encode(&mut body);
	let violation = pair.server.receive(Bytes::from(body), pair.now).unwrap_err();
	assert_eq!(violation.code, code::FLOW_CONTROL_ERROR);
}

#[test]
fn a_writer_queues_two_records_at_most_and_credit_limits_what_goes() {
	let window = 16 << 10;
	let server_config = Config {
		params: Params {
			max_stream_data_bidi_remote: window,
			..Config::default().params
		},
		..Config::default()
	};
	let mut pair = Pair::new(Version::Qmux01, Config::default(), server_config);
	let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Bi) else {
		panic!()
	};
	// The writer queues STREAM_QUEUE, then waits: its bytes are not "written" yet.
	let mut data = Bytes::from(vec![7u8; 200 << 10]);
	assert!(pair.client.poll_write(&waiter(), id, &mut data).is_pending());
	assert_eq!(pair.client.queued(), STREAM_QUEUE);
	// The credit lets a window's worth go; the writer refills what went.
	pair.exchange();
	assert_eq!(pair.client.queued(), STREAM_QUEUE - window);
	assert!(pair.client.poll_write(&waiter(), id, &mut data).is_pending());
	assert_eq!(pair.client.queued(), STREAM_QUEUE);
	let (got, _) = read_all(&mut pair.server, id);
	assert_eq!(got.len() as u64, window, "everything the credit allowed arrived");
	// Reading it gave the credit back: more goes.
	pair.exchange();
	let (more, _) = read_all(&mut pair.server, id);
	assert_eq!(more.len() as u64, window);
	assert_eq!(data.len() as u64, (200 << 10) - 2 * STREAM_QUEUE + window);
}

#[test]
fn a_higher_priority_stream_goes_first_and_a_reset_one_never_goes() {
	let mut pair = Pair::default();
	let open = |core: &mut Core| match core.poll_open(&waiter(), Dir::Uni) {
		Poll::Ready(Ok(id)) => id,
		_ => panic!(),
	};
	let (old, new, dropped) = (open(&mut pair.client), open(&mut pair.client), open(&mut pair.client));
	pair.client.set_priority(old, 1);
	pair.client.set_priority(new, 2);
	pair.client.set_priority(dropped, 3);
	assert!(write(&mut pair.client, old, &[1; 30_000]).is_ready());
	assert!(write(&mut pair.client, new, &[2; 30_000]).is_ready());
	assert!(write(&mut pair.client, dropped, &[3; 30_000]).is_ready());
	pair.client.reset(dropped, 9);
	let mut order = Vec::new();
	while let Some(body) = pair.client.poll_transmit(pair.now) {
		let mut body = Bytes::from(body);
		while !body.is_empty() {
			if let Frame::Stream { id, .. } = frame::decode(&mut body).unwrap() {
				order.push(id);
			}
		}
	}
	let first_old = order.iter().position(|&id| id == old).unwrap();
	assert!(order[..first_old].iter().all(|&id| id == new), "{order:?}");
	assert!(!order.contains(&dropped), "{order:?}");
	assert_eq!(pair.client.queued(), 0);
}

#[test]
fn a_peer_past_the_stream_limit_is_closed_and_ended_streams_make_room() {
	let server_config = Config {
		params: Params {
			max_streams_uni: 2,
			..Config::default().params
		},
		..Config::default()
	};
	let mut pair = Pair::new(Version::Qmux01, Config::default(), server_config);
	let mut ids = Vec::new();
	for _ in 0..2 {
		let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Uni) else {
			panic!()
		};
		pair.client.finish(id).unwrap();
		ids.push(id);
	}
	assert!(
		pair.client.poll_open(&waiter(), Dir::Uni).is_pending(),
		"the limit is 2"
	);
	pair.exchange();
	for _ in 0..2 {
		let Poll::Ready(Ok(id)) = pair.server.poll_accept(&waiter(), Dir::Uni) else {
			panic!()
		};
		assert_eq!(read_all(&mut pair.server, id), (Vec::new(), true));
		pair.server.drop_recv(id);
	}
	pair.exchange();
	assert!(
		pair.client.poll_open(&waiter(), Dir::Uni).is_ready(),
		"MAX_STREAMS raised it"
	);
	// A hand-made stream far past the limit.
	let mut body = Vec::new();
	Frame::Stream {
		id: (10 << 2) | 2,
		offset: Some(0),
		fin: false,
		data: Bytes::new(),
	}
	.encode(&mut body);
	let violation = pair.server.receive(Bytes::from(body), pair.now).unwrap_err();
	assert_eq!(violation.code, code::STREAM_LIMIT_ERROR);
}

#[test]
fn a_gap_is_a_violation_and_frames_without_an_offset_follow_what_came() {
	let mut pair = Pair::default();
	let stream = |offset: Option<u64>, data: &'static [u8]| {
		let mut body = Vec::new();
		// An old peer's frame without OFF: type 0x0a (LEN), id 2.
		match offset {
			None => {
				body.extend_from_slice(&[0x0a, 0x02, data.len() as u8]);
				body.extend_from_slice(data);
			}
			Some(offset) => Frame::Stream {
				id: 2,
				offset: Some(offset),
				fin: false,
				data: Bytes::from_static(data),
			}
			.encode(&mut body),
		}
		Bytes::from(body)
	};
	pair.server.receive(stream(None, b"ab"), pair.now).unwrap();
	pair.server.receive(stream(None, b"cd"), pair.now).unwrap();
	pair.server.receive(stream(Some(4), b"ef"), pair.now).unwrap();
	// A repeat of what came is taken for what it is.
	pair.server.receive(stream(Some(2), b"cd"), pair.now).unwrap();
	assert_eq!(read_all(&mut pair.server, 2).0, b"abcdef");
	let violation = pair.server.receive(stream(Some(9), b"x"), pair.now).unwrap_err();
	assert_eq!(violation.code, code::PROTOCOL_VIOLATION);
}

#[test]
fn a_silent_peer_is_pinged_then_dropped_at_the_idle_timeout() {
	let mut pair = Pair::default();
	let start = pair.now;
	// 30 s each: the ping comes after a third of it without sending.
	let at = pair.client.poll_timeout().unwrap();
	assert_eq!(at, start + Duration::from_secs(10));
	pair.client.handle_timeout(at);
	let body = pair.client.poll_transmit(at).unwrap();
	assert_eq!(frame::decode(&mut Bytes::from(body)).unwrap(), Frame::PingRequest(0));
	// Nothing comes: at 30 s the peer is taken for gone.
	pair.client.handle_timeout(start + Duration::from_secs(30));
	assert!(matches!(pair.client.end(), Some(End::Lost(_))), "nothing came for 30 s");
	assert!(pair.client.is_finished(), "an idle end sends nothing");
}

#[test]
fn a_ping_is_answered_and_a_close_ends_the_peer_cleanly() {
	let mut pair = Pair::default();
	let mut body = Vec::new();
	Frame::PingRequest(5).encode(&mut body);
	pair.server.receive(Bytes::from(body), pair.now).unwrap();
	let answer = pair.server.poll_transmit(pair.now).unwrap();
	assert_eq!(frame::decode(&mut Bytes::from(answer)).unwrap(), Frame::PingResponse(5));
	pair.client.close(42, "bye");
	pair.exchange();
	assert_eq!(pair.server.end(), Some(&End::Application(42)));
	assert_eq!(pair.client.end(), Some(&End::Local(42)));
	assert!(pair.client.is_finished() && pair.server.is_finished());
}

#[test]
fn datagrams_flow_on_qmux_01_and_are_refused_unasked() {
	let mut pair = Pair::default();
	pair.client.send_datagram(Bytes::from_static(b"hi")).unwrap();
	pair.exchange();
	assert_eq!(
		pair.server.poll_recv_datagram(&waiter()),
		Poll::Ready(Ok(Bytes::from_static(b"hi")))
	);
	let no_datagrams = Config {
		params: Params {
			max_datagram_frame_size: 0,
			..Config::default().params
		},
		..Config::default()
	};
	let mut pair = Pair::new(Version::Qmux01, Config::default(), no_datagrams);
	assert_eq!(
		pair.client.send_datagram(Bytes::from_static(b"hi")),
		Err(StreamError::Invalid)
	);
	let mut body = Vec::new();
	Frame::Datagram(Bytes::from_static(b"hi")).encode(&mut body);
	let violation = pair.server.receive(Bytes::from(body), pair.now).unwrap_err();
	assert_eq!(violation.code, code::PROTOCOL_VIOLATION);
}

#[test]
fn qmux_00_sends_one_frame_a_body() {
	let mut pair = Pair::new(Version::Qmux00, Config::default(), Config::default());
	let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Uni) else {
		panic!()
	};
	assert!(write(&mut pair.client, id, b"x").is_ready());
	pair.client.finish(id).unwrap();
	let mut ping = Vec::new();
	Frame::PingRequest(1).encode(&mut ping);
	let _ = pair.client.receive(Bytes::from(ping), pair.now);
	while let Some(body) = pair.client.poll_transmit(pair.now) {
		let mut body = Bytes::from(body);
		frame::decode(&mut body).unwrap();
		assert!(body.is_empty(), "one frame per body");
	}
}

#[test]
fn unidirectional_streams_carry_bytes_at_any_priority() {
	let mut pair = Pair::default();
	for (n, priority) in [(0, 0), (1, 7), (2, -3)] {
		let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Uni) else {
			panic!("a uni stream");
		};
		assert_eq!(id, 2 + 4 * n);
		pair.client.set_priority(id, priority);
		assert!(write(&mut pair.client, id, b"group").is_ready());
		pair.client.finish(id).unwrap();
		pair.client.release_send(id);
		pair.exchange();
		let Poll::Ready(Ok(accepted)) = pair.server.poll_accept(&waiter(), Dir::Uni) else {
			panic!("the server sees stream {id}");
		};
		assert_eq!(accepted, id);
		assert_eq!(read_all(&mut pair.server, id), (b"group".to_vec(), true));
	}
}

#[test]
fn a_stream_reset_after_the_connection_ended_gives_nothing_back_twice() {
	let mut pair = Pair::default();
	let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Uni) else {
		panic!("a uni stream");
	};
	assert!(write(&mut pair.client, id, b"queued, never sent").is_ready());
	pair.client.close(0, "bye");
	assert_eq!(pair.client.queued(), 0);
	pair.client.reset(id, 1);
	pair.client.release_send(id);
	assert_eq!(pair.client.queued(), 0);
}

#[test]
fn bytes_that_come_after_a_stop_count_against_the_connections_credit_on_both_sides() {
	let mut pair = Pair::default();
	let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Uni) else {
		panic!("a uni stream");
	};
	assert!(write(&mut pair.client, id, &[1; 10_000]).is_ready());
	pair.exchange();
	let Poll::Ready(Ok(_)) = pair.server.poll_accept(&waiter(), Dir::Uni) else {
		panic!("the server sees the stream");
	};
	// The server lets go of it unread; more of it is on the way before the STOP_SENDING lands.
	pair.server.drop_recv(id);
	assert!(write(&mut pair.client, id, &[2; 10_000]).is_ready());
	while let Some(body) = pair.client.poll_transmit(pair.now) {
		pair.server.receive(Bytes::from(body), pair.now).unwrap();
	}
	pair.exchange();
	// The client's application learns of the stop and lets go.
	assert_eq!(
		write(&mut pair.client, id, b"more"),
		Poll::Ready(Err(StreamError::Stopped(0)))
	);
	pair.client.release_send(id);
	// The client's reset told the final size; the stream is forgotten on both sides, and what it
	// sent is what the server counted, every byte of it read, as far as credit goes.
	assert_eq!((pair.client.streams(), pair.server.streams()), (0, 0));
	assert_eq!(pair.client.sent, pair.server.received);
	assert_eq!(pair.server.received, pair.server.consumed);
	// Both sides agree on the credit left: none leaked.
	assert_eq!(
		pair.client.send_max - pair.client.sent,
		pair.server.recv_max - pair.server.received
	);
}

#[test]
fn a_record_past_our_size_and_a_final_size_below_what_arrived_are_violations() {
	let mut pair = Pair::default();
	let big = Bytes::from(vec![0u8; MIN_RECORD_SIZE as usize + 1]);
	let violation = pair.server.receive(big, pair.now).unwrap_err();
	assert_eq!(violation.code, code::FRAME_ENCODING_ERROR);

	let mut pair = Pair::default();
	let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Uni) else {
		panic!("a uni stream");
	};
	assert!(write(&mut pair.client, id, &[1; 100]).is_ready());
	pair.exchange();
	let mut body = Vec::new();
	Frame::Stream {
		id,
		offset: Some(0),
		fin: true,
		data: Bytes::new(),
	}
	.encode(&mut body);
	let violation = pair.server.receive(Bytes::from(body), pair.now).unwrap_err();
	assert_eq!(violation.code, code::FINAL_SIZE_ERROR);
}

#[test]
fn a_stream_waiting_for_connection_credit_is_listed_once_however_often_it_is_written() {
	let server_config = Config {
		params: Params {
			max_data: 1000,
			..Config::default().params
		},
		..Config::default()
	};
	let mut pair = Pair::new(Version::Qmux01, Config::default(), server_config);
	let Poll::Ready(Ok(id)) = pair.client.poll_open(&waiter(), Dir::Uni) else {
		panic!("a uni stream");
	};
	for _ in 0..50 {
		let _ = write(&mut pair.client, id, &[1; 100]);
		while pair.client.poll_transmit(pair.now).is_some() {}
	}
	assert_eq!(pair.client.blocked, vec![id]);
}
