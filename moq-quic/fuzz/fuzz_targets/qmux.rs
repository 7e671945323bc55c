//! A QMux server core (`moq_quic::qmux::Core`) fed arbitrary record bodies, with an application
//! acting between them as the input says (accepting, reading, writing, finishing, resetting and
//! dropping streams, sending datagrams, closing, letting time pass); and the input also as
//! WebSocket bytes through a server's decoder. Asserts: no panic (overflows included, built with
//! `--debug-assertions`); every body the core sends decodes as frames and fits the peer's record
//! size; what the core holds stays within its bounds (send queues within the send buffer,
//! unread bytes within the windows given and the datagram queue).
#![no_main]
#![forbid(unsafe_code)]

use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kio::Waiter;
use libfuzzer_sys::fuzz_target;
use moq_quic::qmux::{Config, Core, DATAGRAM_QUEUE, Dir, Side, Version, frame, ws};

fuzz_target!(|data: &[u8]| {
	let Some((&mode, mut input)) = data.split_first() else {
		return;
	};
	websocket(input);
	let version = match mode % 3 {
		0 => Version::Qmux00,
		1 => Version::Qmux01,
		_ => Version::Qmux02,
	};
	let config = Config::default();
	let window = config.params.max_data;
	let send_buffer = config.send_buffer;
	let start = Instant::now();
	let mut now = start;
	let mut core = Core::new(Side::Server, version, config, now);
	let waiter = Waiter::new(Waker::noop().clone());
	let mut streams: Vec<(u64, bool)> = Vec::new();
	while let Some((&op, rest)) = input.split_first() {
		input = rest;
		match op % 8 {
			// A record body of the next `len` bytes.
			0..=2 => {
				let len = usize::from(input.first().copied().unwrap_or(0)) * 4;
				let len = len.min(input.len());
				let (body, rest) = input.split_at(len);
				input = rest;
				let _ = core.receive(Bytes::copy_from_slice(body), now);
			}
			3 => {
				for dir in [Dir::Bi, Dir::Uni] {
					while let Poll::Ready(Ok(id)) = core.poll_accept(&waiter, dir) {
						streams.push((id, dir == Dir::Bi));
					}
				}
				for &(id, _) in &streams {
					while let Poll::Ready(Ok(Some(_))) = core.poll_read(&waiter, id) {}
				}
			}
			4 => {
				if let Some(&(id, true)) = streams.get(usize::from(op >> 3) % streams.len().max(1)) {
					let mut data = Bytes::from(vec![op; usize::from(op) * 97]);
					let _ = core.poll_write(&waiter, id, &mut data);
					match op >> 6 {
						0 => {
							let _ = core.finish(id);
						}
						1 => core.reset(id, u64::from(op)),
						_ => core.set_priority(id, i32::from(op)),
					}
				}
			}
			5 => {
				if let Some(index) = (!streams.is_empty()).then(|| usize::from(op >> 3) % streams.len()) {
					let (id, bidi) = streams.swap_remove(index);
					core.drop_recv(id);
					if bidi {
						core.drop_send(id);
					}
				}
			}
			6 => {
				let _ = core.send_datagram(Bytes::from(vec![op; usize::from(op) * 11]));
				if op >> 3 == 31 {
					core.close(7, "fuzz");
				}
				if let Poll::Ready(Ok(id)) = core.poll_open(&waiter, Dir::Uni) {
					let mut data = Bytes::from_static(b"opened");
					let _ = core.poll_write(&waiter, id, &mut data);
					core.drop_send(id);
				}
			}
			_ => {
				now += Duration::from_millis(u64::from(op) * 100);
				if core.poll_timeout().is_some_and(|at| at <= now) {
					core.handle_timeout(now);
				}
			}
		}
		drain(&mut core, now);
		assert!(core.queued() <= send_buffer, "send queues past the send buffer");
		// Unread stream bytes are within the credit given (the window, topped up as they are
		// read), and datagrams within their queue.
		assert!(
			core.buffered() <= 2 * window + DATAGRAM_QUEUE as u64,
			"{} bytes held unread",
			core.buffered()
		);
	}
});

/// Takes every body the core has to send: each must decode whole, as frames, within the
/// largest record a peer may take.
fn drain(core: &mut Core, now: Instant) {
	while let Some(body) = core.poll_transmit(now) {
		assert!(body.len() <= 64 << 10, "a record body of {} bytes", body.len());
		let mut body = Bytes::from(body);
		while !body.is_empty() {
			if let Err(error) = frame::decode(&mut body) {
				panic!("the core sent a frame it cannot read: {error}");
			}
		}
	}
}

/// The input as what a WebSocket client sends a server: events until the first error, and the
/// decoder never holds more than its bound.
fn websocket(input: &[u8]) {
	let mut decoder = ws::Decoder::new(true);
	for chunk in input.chunks(7) {
		decoder.push(chunk);
		loop {
			match decoder.next_event() {
				Ok(Some(ws::Event::Message(body))) => assert!(body.len() <= ws::MAX_MESSAGE),
				Ok(Some(_)) => {}
				Ok(None) => break,
				Err(_) => return,
			}
		}
	}
}
