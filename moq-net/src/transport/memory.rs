//! An in-memory [`Transport`]: two ends of a connection in one process, for tests and
//! benchmarks.
//!
//! Each stream is a queue of `Bytes` chunks behind a kio [`Lock`] with two waiter lists (the
//! reader's and the writer's), so the two ends may live on different kio workers. Writes are
//! accepted while the stream holds less than [`WINDOW`] unread bytes, a stand-in for QUIC's
//! per-stream flow control. Dropping a send stream finishes it (as quinn does); dropping a
//! receive stream that has not seen the end stops it with code 0. Closing the connection fails
//! every stream and every accept with [`TransportError::Closed`]. Opening uni streams is
//! unlimited unless a side limits them ([`Memory::limit_uni`]), a stand-in for QUIC's stream
//! credit (MAX_STREAMS) that the test grants by hand ([`Memory::grant_uni`]).

use std::collections::VecDeque;
use std::fmt;
use std::task::Poll;

use bytes::Bytes;
use kio::sync::Lock;
use kio::{Waiter, WaiterList, Wakes};

use super::{RecvStream, SendStream, Transport, TransportError};

/// Unread bytes a stream holds before writes wait.
pub const WINDOW: usize = 1 << 20;

struct Stream {
	chunks: VecDeque<Bytes>,
	buffered: usize,
	fin: bool,
	reset: Option<u64>,
	stopped: Option<u64>,
	closed: Option<u64>,
	priority: i32,
	group: u64,
	/// The reader waits here: drained by a write, finish, reset and close.
	on_read: WaiterList,
	/// The writer waits here: drained by a read that frees room, stop and close.
	on_write: WaiterList,
}

type StreamRef = Lock<Stream>;

fn stream() -> StreamRef {
	Lock::new(Stream {
		chunks: VecDeque::new(),
		buffered: 0,
		fin: false,
		reset: None,
		stopped: None,
		closed: None,
		priority: 0,
		group: 0,
		on_read: WaiterList::new(),
		on_write: WaiterList::new(),
	})
}

/// One side's incoming queues.
#[derive(Default)]
struct Incoming {
	uni: VecDeque<StreamRef>,
	bi: VecDeque<(StreamRef, StreamRef)>,
	datagrams: VecDeque<Bytes>,
	on_uni: WaiterList,
	on_bi: WaiterList,
	on_datagram: WaiterList,
	on_closed: WaiterList,
	/// Uni streams the peer may still open; `None` is no limit.
	uni_credit: Option<u64>,
	/// The peer's openers wait here for credit.
	on_uni_credit: WaiterList,
}

struct Conn {
	incoming: [Incoming; 2],
	closed: Option<u64>,
	/// Every stream, to fail them on close; pruned of finished ones as it grows.
	streams: Vec<StreamRef>,
	prune_at: usize,
}

/// One end of an in-memory connection.
#[derive(Clone)]
pub struct Memory {
	conn: Lock<Conn>,
	side: usize,
}

/// Two connected ends.
pub fn pair() -> (Memory, Memory) {
	let conn = Lock::new(Conn {
		incoming: [Incoming::default(), Incoming::default()],
		closed: None,
		streams: Vec::new(),
		prune_at: 64,
	});
	(
		Memory {
			conn: conn.clone(),
			side: 0,
		},
		Memory { conn, side: 1 },
	)
}

impl Memory {
	fn track(conn: &mut Conn, streams: &[&StreamRef]) {
		if conn.streams.len() >= conn.prune_at {
			conn.streams.retain(|stream| {
				let stream = stream.lock();
				!((stream.fin || stream.reset.is_some()) && stream.chunks.is_empty() || stream.stopped.is_some())
			});
			conn.prune_at = (conn.streams.len() * 2).max(64);
		}
		conn.streams.extend(streams.iter().map(|&stream| stream.clone()));
	}

	fn peer(&self) -> usize {
		1 - self.side
	}

	/// From now on the peer may open `credit` more uni streams (and more as [`Self::grant_uni`]
	/// allows).
	pub fn limit_uni(&self, credit: u64) {
		let side = self.side;
		self.conn.lock().incoming[side].uni_credit = Some(credit);
	}

	/// Lets the peer open `more` uni streams beyond its limit, and wakes its waiting openers.
	pub fn grant_uni(&self, more: u64) {
		let wakes = {
			let mut conn = self.conn.lock();
			let incoming = &mut conn.incoming[self.side];
			if let Some(credit) = &mut incoming.uni_credit {
				*credit += more;
			}
			incoming.on_uni_credit.take()
		};
		drop(wakes);
	}
}

impl fmt::Debug for Memory {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Memory").field("side", &self.side).finish()
	}
}

impl Transport for Memory {
	type SendHalf = MemorySend;
	type RecvHalf = MemoryRecv;

	fn poll_open_uni(&self, waiter: &Waiter) -> Poll<Result<MemorySend, TransportError>> {
		let (send, wakes) = {
			let mut conn = self.conn.lock();
			if let Some(code) = conn.closed {
				return Poll::Ready(Err(TransportError::Closed(code)));
			}
			let peer = &mut conn.incoming[self.peer()];
			match &mut peer.uni_credit {
				Some(0) => {
					peer.on_uni_credit.register(waiter);
					return Poll::Pending;
				}
				Some(credit) => *credit -= 1,
				None => {}
			}
			let shared = stream();
			Self::track(&mut conn, &[&shared]);
			let incoming = &mut conn.incoming[self.peer()];
			incoming.uni.push_back(shared.clone());
			(
				MemorySend {
					stream: shared,
					done: false,
				},
				incoming.on_uni.take(),
			)
		};
		drop(wakes);
		Poll::Ready(Ok(send))
	}

	fn poll_open_bi(&self, _waiter: &Waiter) -> Poll<Result<(MemorySend, MemoryRecv), TransportError>> {
		let (pair, wakes) = {
			let mut conn = self.conn.lock();
			if let Some(code) = conn.closed {
				return Poll::Ready(Err(TransportError::Closed(code)));
			}
			let (outgoing, incoming_stream) = (stream(), stream());
			Self::track(&mut conn, &[&outgoing, &incoming_stream]);
			let incoming = &mut conn.incoming[self.peer()];
			// The peer reads what we write, and writes what we read.
			incoming.bi.push_back((outgoing.clone(), incoming_stream.clone()));
			let pair = (
				MemorySend {
					stream: outgoing,
					done: false,
				},
				MemoryRecv {
					stream: incoming_stream,
					done: false,
				},
			);
			(pair, incoming.on_bi.take())
		};
		drop(wakes);
		Poll::Ready(Ok(pair))
	}

	fn poll_accept_uni(&self, waiter: &Waiter) -> Poll<Result<MemoryRecv, TransportError>> {
		let mut conn = self.conn.lock();
		let closed = conn.closed;
		let incoming = &mut conn.incoming[self.side];
		if let Some(stream) = incoming.uni.pop_front() {
			return Poll::Ready(Ok(MemoryRecv { stream, done: false }));
		}
		if let Some(code) = closed {
			return Poll::Ready(Err(TransportError::Closed(code)));
		}
		incoming.on_uni.register(waiter);
		Poll::Pending
	}

	fn poll_accept_bi(&self, waiter: &Waiter) -> Poll<Result<(MemorySend, MemoryRecv), TransportError>> {
		let mut conn = self.conn.lock();
		let closed = conn.closed;
		let incoming = &mut conn.incoming[self.side];
		if let Some((theirs, ours)) = incoming.bi.pop_front() {
			return Poll::Ready(Ok((
				MemorySend {
					stream: ours,
					done: false,
				},
				MemoryRecv {
					stream: theirs,
					done: false,
				},
			)));
		}
		if let Some(code) = closed {
			return Poll::Ready(Err(TransportError::Closed(code)));
		}
		incoming.on_bi.register(waiter);
		Poll::Pending
	}

	fn send_datagram(&self, payload: Bytes) -> Result<(), TransportError> {
		let wakes = {
			let mut conn = self.conn.lock();
			if let Some(code) = conn.closed {
				return Err(TransportError::Closed(code));
			}
			let peer = self.peer();
			let incoming = &mut conn.incoming[peer];
			incoming.datagrams.push_back(payload);
			incoming.on_datagram.take()
		};
		drop(wakes);
		Ok(())
	}

	fn poll_recv_datagram(&self, waiter: &Waiter) -> Poll<Result<Bytes, TransportError>> {
		let mut conn = self.conn.lock();
		let closed = conn.closed;
		let incoming = &mut conn.incoming[self.side];
		if let Some(datagram) = incoming.datagrams.pop_front() {
			return Poll::Ready(Ok(datagram));
		}
		if let Some(code) = closed {
			return Poll::Ready(Err(TransportError::Closed(code)));
		}
		incoming.on_datagram.register(waiter);
		Poll::Pending
	}

	fn close(&self, code: u64, _reason: &str) {
		let (streams, mut wakes) = {
			let mut conn = self.conn.lock();
			if conn.closed.is_some() {
				return;
			}
			conn.closed = Some(code);
			let mut wakes = Wakes::none();
			for incoming in &mut conn.incoming {
				for list in [
					&mut incoming.on_uni,
					&mut incoming.on_bi,
					&mut incoming.on_datagram,
					&mut incoming.on_closed,
					&mut incoming.on_uni_credit,
				] {
					wakes.append(list.take());
				}
			}
			(std::mem::take(&mut conn.streams), wakes)
		};
		for stream in streams {
			let mut stream = stream.lock();
			stream.closed = Some(code);
			wakes.append(stream.on_read.take());
			wakes.append(stream.on_write.take());
		}
		drop(wakes);
	}

	fn poll_closed(&self, waiter: &Waiter) -> Poll<u64> {
		let mut conn = self.conn.lock();
		if let Some(code) = conn.closed {
			return Poll::Ready(code);
		}
		let side = self.side;
		conn.incoming[side].on_closed.register(waiter);
		Poll::Pending
	}
}

/// The sending half of an in-memory stream.
pub struct MemorySend {
	stream: StreamRef,
	done: bool,
}

impl SendStream for MemorySend {
	fn poll_write(&mut self, waiter: &Waiter, data: &mut Bytes) -> Poll<Result<(), TransportError>> {
		let wakes = {
			let mut stream = self.stream.lock();
			if let Some(code) = stream.closed {
				return Poll::Ready(Err(TransportError::Closed(code)));
			}
			if let Some(code) = stream.stopped {
				return Poll::Ready(Err(TransportError::Stopped(code)));
			}
			if self.done {
				return Poll::Ready(Err(TransportError::Invalid));
			}
			if data.is_empty() {
				return Poll::Ready(Ok(()));
			}
			if stream.buffered >= WINDOW {
				stream.on_write.register(waiter);
				return Poll::Pending;
			}
			stream.buffered += data.len();
			stream.chunks.push_back(std::mem::take(data));
			stream.on_read.take()
		};
		drop(wakes);
		Poll::Ready(Ok(()))
	}

	fn finish(&mut self) -> Result<(), TransportError> {
		if self.done {
			return Err(TransportError::Invalid);
		}
		self.done = true;
		let wakes = {
			let mut stream = self.stream.lock();
			if let Some(code) = stream.closed {
				return Err(TransportError::Closed(code));
			}
			stream.fin = true;
			stream.on_read.take()
		};
		drop(wakes);
		Ok(())
	}

	fn reset(&mut self, code: u64) {
		if std::mem::replace(&mut self.done, true) {
			return;
		}
		let wakes = {
			let mut stream = self.stream.lock();
			stream.reset = Some(code);
			stream.chunks.clear();
			stream.buffered = 0;
			stream.on_read.take()
		};
		drop(wakes);
	}

	fn set_priority(&mut self, priority: i32) {
		self.stream.lock().priority = priority;
	}

	fn set_group(&mut self, group: u64) {
		self.stream.lock().group = group;
	}

	fn poll_stopped(&mut self, waiter: &Waiter) -> Poll<Result<u64, TransportError>> {
		let mut stream = self.stream.lock();
		if let Some(code) = stream.stopped {
			return Poll::Ready(Ok(code));
		}
		if let Some(code) = stream.closed {
			return Poll::Ready(Err(TransportError::Closed(code)));
		}
		stream.on_write.register(waiter);
		Poll::Pending
	}
}

impl MemorySend {
	/// The priority last set (for tests of the publisher's ordering).
	pub fn priority(&self) -> i32 {
		self.stream.lock().priority
	}
}

impl Drop for MemorySend {
	fn drop(&mut self) {
		if !self.done {
			let _ = self.finish();
		}
	}
}

/// The receiving half of an in-memory stream.
pub struct MemoryRecv {
	stream: StreamRef,
	done: bool,
}

impl RecvStream for MemoryRecv {
	fn poll_read(&mut self, waiter: &Waiter) -> Poll<Result<Option<Bytes>, TransportError>> {
		let (chunk, wakes) = {
			let mut stream = self.stream.lock();
			match stream.chunks.pop_front() {
				Some(chunk) => {
					stream.buffered -= chunk.len();
					let wakes = stream.on_write.take();
					(chunk, wakes)
				}
				None => {
					if let Some(code) = stream.reset {
						return Poll::Ready(Err(TransportError::Reset(code)));
					}
					if let Some(code) = stream.closed {
						return Poll::Ready(Err(TransportError::Closed(code)));
					}
					if self.done {
						return Poll::Ready(Err(TransportError::Invalid));
					}
					if stream.fin {
						self.done = true;
						return Poll::Ready(Ok(None));
					}
					stream.on_read.register(waiter);
					return Poll::Pending;
				}
			}
		};
		drop(wakes);
		Poll::Ready(Ok(Some(chunk)))
	}

	fn stop(&mut self, code: u64) {
		if std::mem::replace(&mut self.done, true) {
			return;
		}
		let wakes = {
			let mut stream = self.stream.lock();
			stream.stopped = Some(code);
			stream.chunks.clear();
			stream.buffered = 0;
			stream.on_write.take()
		};
		drop(wakes);
	}
}

impl Drop for MemoryRecv {
	fn drop(&mut self) {
		self.stop(0);
	}
}

#[cfg(test)]
mod tests {
	use super::*;
	use crate::transport::{RecvStreamExt, SendStreamExt, TransportExt};

	#[test]
	fn streams_carry_bytes_fin_reset_and_stop() {
		kio::block_on(async {
			let (a, b) = pair();
			let mut send = a.open_uni().await.unwrap();
			send.write(Bytes::from_static(b"hello ")).await.unwrap();
			send.write(Bytes::from_static(b"world")).await.unwrap();
			send.finish().unwrap();
			let mut recv = b.accept_uni().await.unwrap();
			let mut got = Vec::new();
			while let Some(chunk) = recv.read().await.unwrap() {
				got.extend_from_slice(&chunk);
			}
			assert_eq!(got, b"hello world");

			let (mut send, mut recv) = b.open_bi().await.unwrap();
			let (mut their_send, mut their_recv) = a.accept_bi().await.unwrap();
			send.write(Bytes::from_static(b"ping")).await.unwrap();
			assert_eq!(their_recv.read().await.unwrap().unwrap(), "ping");
			their_send.reset(7);
			assert_eq!(recv.read().await, Err(TransportError::Reset(7)));
			their_recv.stop(9);
			assert_eq!(send.stopped().await, Ok(9));
			assert_eq!(
				send.write(Bytes::from_static(b"x")).await,
				Err(TransportError::Stopped(9))
			);
		});
	}

	#[test]
	fn close_fails_streams_and_accepts_on_both_sides() {
		kio::block_on(async {
			let (a, b) = pair();
			let mut recv_side = None;
			let mut send = a.open_uni().await.unwrap();
			if let Ok(recv) = b.accept_uni().await {
				recv_side = Some(recv);
			}
			let waiter = kio::spawn({
				let b = b.clone();
				async move { b.accept_bi().await.err() }
			});
			kio::yield_now().await;
			a.close(42, "bye");
			assert_eq!(waiter.await.unwrap(), Some(TransportError::Closed(42)));
			assert_eq!(recv_side.unwrap().read().await, Err(TransportError::Closed(42)));
			assert_eq!(
				send.write(Bytes::from_static(b"x")).await,
				Err(TransportError::Closed(42))
			);
			assert_eq!(b.closed().await, 42);
		});
	}

	#[test]
	fn a_limited_opener_waits_for_credit_and_close_fails_it() {
		kio::block_on(async {
			let (a, b) = pair();
			b.limit_uni(1);
			let _first = a.open_uni().await.unwrap();
			let opener = kio::spawn({
				let a = a.clone();
				async move { a.open_uni().await.is_ok() }
			});
			kio::yield_now().await;
			assert!(!opener.is_finished(), "no credit");
			b.grant_uni(1);
			assert!(opener.await.unwrap());
			let opener = kio::spawn({
				let a = a.clone();
				async move { a.open_uni().await.err() }
			});
			kio::yield_now().await;
			a.close(5, "bye");
			assert_eq!(opener.await.unwrap(), Some(TransportError::Closed(5)));
		});
	}

	#[test]
	fn a_full_window_makes_the_writer_wait_for_the_reader() {
		kio::block_on(async {
			let (a, b) = pair();
			let mut send = a.open_uni().await.unwrap();
			let mut recv = b.accept_uni().await.unwrap();
			send.write(Bytes::from(vec![0; WINDOW])).await.unwrap();
			let writer = kio::spawn(async move {
				send.write(Bytes::from_static(b"more")).await.unwrap();
				send.finish().unwrap();
			});
			kio::yield_now().await;
			assert!(!writer.is_finished(), "the window is full");
			let mut total = 0;
			while let Some(chunk) = recv.read().await.unwrap() {
				total += chunk.len();
			}
			writer.await.unwrap();
			assert_eq!(total, WINDOW + 4);
		});
	}
}
