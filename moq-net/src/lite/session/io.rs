//! Framing over transport streams: decode messages from a receive stream as bytes arrive, and
//! write encoded messages to a send stream.

use std::rc::Rc;
use std::task::{Poll, ready};

use bytes::{Buf, Bytes};
use kio::Waiter;

use super::SessionError;
use super::budget::{Budget, Held, Resource};
use crate::coding::{Decode, DecodeError, Encode};
use crate::lite::{ErrorCode, Version, VersionedDecode, VersionedEncode};
use crate::transport::{RecvStream, SendStream, SendStreamExt};

/// A receive stream with a reassembly buffer. The common case, a message that arrives in one
/// chunk, is decoded from the chunk itself: no copy, no allocation. Only a message split across
/// chunks is copied into `buf` (never more than one message, capped by the decoders, plus one
/// chunk). A payload is always copied out, into an allocation of its own: it is cached, and a
/// slice would keep the whole chunk it came from (a datagram's buffer, or as much as the stream's
/// receive window when quinn-proto merged the stream's pieces) while the cache charges the payload
/// alone. One copy at the publisher's side, shared by every subscriber.
///
/// Parsed bytes of `buf` are passed over (`pos`), and dropped when the next chunk is appended or
/// all are parsed: a chunk can be as long as the stream's receive window (quinn-proto merges a
/// stream's small buffered pieces into one), and removing each message from the front as it was
/// decoded moved the rest every time, quadratic in the chunk (1 MiB of two-byte frame headers with
/// empty payloads after a split one: 524,288 moves of half a MiB on average, 2.7e11 bytes).
///
/// A reader made with [`charged`](Self::charged) charges what `buf` holds to the session's
/// partial-bytes budget: a peer that opens many streams and leaves a message or a frame unfinished
/// on each holds at most that budget, not the streams times the largest message or frame. A
/// reassembly the budget cannot take fails with BoundsExceeded (11), for this stream alone.
pub(crate) struct Reader<R> {
	recv: R,
	/// Unread bytes of the last chunk, while `buf` is empty.
	chunk: Bytes,
	/// Reassembly of a message split across chunks, and what came after it in the same chunks.
	buf: Vec<u8>,
	/// `buf[..pos]` is consumed; less than `buf.len()` unless both are 0.
	pos: usize,
	/// Bytes moved to the front of `buf` so far: what the test of linearity counts.
	#[cfg(test)]
	moved: usize,
	fin: bool,
	/// What `buf` holds, charged to the session's partial-bytes budget (a reader made with
	/// [`charged`](Self::charged)).
	charge: Option<(Rc<Budget>, Held)>,
}

impl<R: RecvStream> Reader<R> {
	pub(crate) fn new(recv: R) -> Self {
		Self {
			recv,
			chunk: Bytes::new(),
			buf: Vec::new(),
			pos: 0,
			#[cfg(test)]
			moved: 0,
			fin: false,
			charge: None,
		}
	}

	/// A reader whose reassembly is charged to `budget`.
	pub(crate) fn charged(recv: R, budget: &Rc<Budget>) -> Self {
		let mut reader = Self::new(recv);
		reader.charge = Some((budget.clone(), budget.empty(Resource::PartialBytes)));
		reader
	}

	/// Charges the reassembly to `budget` from now on (a stream read before its session had
	/// one: an IETF control stream, read for its SETUP); fails if it cannot take what is held.
	pub(crate) fn charge_to(&mut self, budget: &Rc<Budget>) -> Result<(), SessionError> {
		self.charge = Some((budget.clone(), budget.empty(Resource::PartialBytes)));
		self.account()
	}

	/// Frees the reassembly's allocation once all of it is consumed: a stream left idle after one
	/// large frame keeps nothing.
	fn release_if_consumed(&mut self) {
		if self.pos == self.buf.len() {
			self.buf = Vec::new();
			self.pos = 0;
			let _ = self.account();
		}
	}

	/// Brings the charge in line with what `buf` holds, its allocation whole (a growing
	/// reassembly's capacity is up to twice its length); fails if the budget cannot take more.
	fn account(&mut self) -> Result<(), SessionError> {
		let held = self.buf.capacity() as u64;
		if let Some((budget, charge)) = &mut self.charge
			&& !budget.resize(charge, held)
		{
			return Err(SessionError::Refused(ErrorCode::BoundsExceeded));
		}
		Ok(())
	}

	fn buffered(&self) -> &[u8] {
		if self.buf.is_empty() {
			&self.chunk
		} else {
			&self.buf[self.pos..]
		}
	}

	fn consume(&mut self, n: usize) {
		if self.buf.is_empty() {
			self.chunk.advance(n);
		} else {
			self.pos += n;
			self.release_if_consumed();
		}
	}

	/// Reads one more chunk; `false` once the stream has ended.
	///
	/// What is left of the last chunk (part of a message or a payload: the caller needs more)
	/// moves into `buf` before the wait, so it is charged while the peer keeps us waiting; it
	/// would be copied there when the next chunk came anyway. Until stop 46 it was held as the
	/// chunk, uncharged, until then: eight streams each holding half of a 1 MiB object in one
	/// chunk held 4 MiB past a budget of 1 MiB.
	fn poll_fill(&mut self, waiter: &Waiter) -> Poll<Result<bool, SessionError>> {
		if self.fin {
			return Poll::Ready(Ok(false));
		}
		if self.buf.is_empty() && !self.chunk.is_empty() {
			self.buf.extend_from_slice(&self.chunk);
			self.chunk = Bytes::new();
			if let Err(err) = self.account() {
				self.buf = Vec::new();
				let _ = self.account();
				return Poll::Ready(Err(err));
			}
		}
		match ready!(self.recv.poll_read(waiter)) {
			Ok(Some(chunk)) => {
				if self.buffered().is_empty() {
					self.chunk = chunk;
				} else {
					if self.pos > 0 {
						// What is consumed goes; what is not (less than one message) moves up.
						#[cfg(test)]
						{
							self.moved += self.buf.len() - self.pos;
						}
						self.buf.drain(..self.pos);
						self.pos = 0;
					}
					self.buf.extend_from_slice(&chunk);
					if let Err(err) = self.account() {
						// Nothing more is read from this stream: give the charge back now.
						self.buf = Vec::new();
						let _ = self.account();
						return Poll::Ready(Err(err));
					}
				}
				Poll::Ready(Ok(true))
			}
			Ok(None) => {
				self.fin = true;
				Poll::Ready(Ok(false))
			}
			Err(err) => Poll::Ready(Err(SessionError::Transport(err))),
		}
	}

	/// The next message; `Ok(None)` when the stream ends cleanly between messages. A stream that
	/// ends inside a message is a decode error (`Short`, code 5).
	pub(crate) fn poll_decode<M: Decode>(&mut self, waiter: &Waiter) -> Poll<Result<Option<M>, SessionError>> {
		self.poll_decode_with(waiter, M::decode)
	}

	/// [`poll_decode`](Self::poll_decode) of a message whose bytes depend on the version.
	pub(crate) fn poll_decode_for<M: VersionedDecode>(
		&mut self,
		waiter: &Waiter,
		version: Version,
	) -> Poll<Result<Option<M>, SessionError>> {
		self.poll_decode_with(waiter, |buf| M::decode_for(buf, version))
	}

	/// The next message of a version-dependent encoding; `Ok(None)` at a clean end.
	pub(crate) async fn decode_for<M: VersionedDecode>(&mut self, version: Version) -> Result<Option<M>, SessionError> {
		kio::wait(|waiter| self.poll_decode_for(waiter, version)).await
	}

	fn poll_decode_with<M>(
		&mut self,
		waiter: &Waiter,
		decode: impl Fn(&mut &[u8]) -> Result<M, DecodeError>,
	) -> Poll<Result<Option<M>, SessionError>> {
		loop {
			if !self.buffered().is_empty() {
				let mut slice = self.buffered();
				match decode(&mut slice) {
					Ok(message) => {
						let used = self.buffered().len() - slice.len();
						self.consume(used);
						return Poll::Ready(Ok(Some(message)));
					}
					Err(DecodeError::Short) => {}
					Err(err) => return Poll::Ready(Err(SessionError::Decode(err))),
				}
			}
			if !ready!(self.poll_fill(waiter))? {
				return Poll::Ready(if self.buffered().is_empty() {
					Ok(None)
				} else {
					Err(SessionError::Decode(DecodeError::Short))
				});
			}
		}
	}

	/// The next message; `Ok(None)` at a clean end.
	pub(crate) async fn decode<M: Decode>(&mut self) -> Result<Option<M>, SessionError> {
		kio::wait(|waiter| self.poll_decode(waiter)).await
	}

	/// The next value `decode` reads; `Ok(None)` at a clean end.
	pub(crate) async fn decode_with<M>(
		&mut self,
		decode: impl Fn(&mut &[u8]) -> Result<M, DecodeError>,
	) -> Result<Option<M>, SessionError> {
		kio::wait(|waiter| self.poll_decode_with(waiter, &decode)).await
	}

	/// Exactly `size` payload bytes, in an allocation of their own; `Ok(None)` if the stream ends
	/// first.
	pub(crate) async fn read_exact(&mut self, size: usize) -> Result<Option<Bytes>, SessionError> {
		kio::wait(|waiter| self.poll_read_exact(waiter, size)).await
	}

	/// Exactly `size` payload bytes, in an allocation of their own (see the type's docs).
	/// `Ok(None)` if the stream ends first.
	pub(crate) fn poll_read_exact(
		&mut self,
		waiter: &Waiter,
		size: usize,
	) -> Poll<Result<Option<Bytes>, SessionError>> {
		loop {
			if self.buffered().len() >= size {
				let payload = Bytes::copy_from_slice(&self.buffered()[..size]);
				self.consume(size);
				return Poll::Ready(Ok(Some(payload)));
			}
			if !ready!(self.poll_fill(waiter))? {
				return Poll::Ready(Ok(None));
			}
		}
	}

	/// Whether the stream ended with nothing left to read.
	pub(crate) fn poll_end(&mut self, waiter: &Waiter) -> Poll<Result<bool, SessionError>> {
		if !self.buffered().is_empty() {
			return Poll::Ready(Ok(false));
		}
		ready!(self.poll_fill(waiter))?;
		Poll::Ready(Ok(self.fin && self.buffered().is_empty()))
	}

	pub(crate) fn stop(&mut self, code: u64) {
		self.recv.stop(code);
	}
}

/// Encodes `message` and writes it.
pub(crate) async fn write<S: SendStream, M: Encode + ?Sized>(send: &mut S, message: &M) -> Result<(), SessionError> {
	let mut out = Vec::new();
	message.try_encode(&mut out).map_err(SessionError::Encode)?;
	send.write(Bytes::from(out)).await.map_err(SessionError::Transport)
}

/// Encodes `message` as `version` does and writes it.
pub(crate) async fn write_for<S: SendStream, M: VersionedEncode>(
	send: &mut S,
	message: &M,
	version: Version,
) -> Result<(), SessionError> {
	let mut out = Vec::new();
	message
		.try_encode_for(version, &mut out)
		.map_err(SessionError::Encode)?;
	send.write(Bytes::from(out)).await.map_err(SessionError::Transport)
}

/// Encodes a stream type and a first message together, so they travel in one chunk.
pub(crate) async fn write_typed<S: SendStream, M: Encode>(
	send: &mut S,
	kind: u64,
	message: &M,
) -> Result<(), SessionError> {
	let mut out = Vec::new();
	kind.try_encode(&mut out).map_err(SessionError::Encode)?;
	message.try_encode(&mut out).map_err(SessionError::Encode)?;
	send.write(Bytes::from(out)).await.map_err(SessionError::Transport)
}

/// [`write_typed`] with a first message whose bytes depend on the version.
pub(crate) async fn write_typed_for<S: SendStream, M: VersionedEncode>(
	send: &mut S,
	kind: u64,
	message: &M,
	version: Version,
) -> Result<(), SessionError> {
	let mut out = Vec::new();
	kind.try_encode(&mut out).map_err(SessionError::Encode)?;
	message
		.try_encode_for(version, &mut out)
		.map_err(SessionError::Encode)?;
	send.write(Bytes::from(out)).await.map_err(SessionError::Transport)
}

/// A send stream that is reset with code 0 (Cancel) if dropped before it finished: a task
/// aborted mid-group abandons its stream instead of pretending it completed (a transport
/// finishes a dropped stream, as quinn does, which would cut a message short).
pub(crate) struct Sending<S: SendStream> {
	pub(crate) send: S,
	done: bool,
	/// The code a drop resets it with.
	dropped: u64,
}

impl<S: SendStream> Sending<S> {
	pub(crate) fn new(send: S) -> Self {
		Self::resetting_with(send, 0)
	}

	/// One a drop resets with `code` (a protocol whose codes are not moq-lite's).
	pub(crate) fn resetting_with(send: S, code: u64) -> Self {
		Self {
			send,
			done: false,
			dropped: code,
		}
	}

	pub(crate) fn finish(&mut self) -> Result<(), SessionError> {
		self.done = true;
		self.send.finish().map_err(SessionError::Transport)
	}

	pub(crate) fn reset(&mut self, code: u64) {
		self.done = true;
		self.send.reset(code);
	}
}

impl<S: SendStream> Drop for Sending<S> {
	fn drop(&mut self) {
		if !self.done {
			self.send.reset(self.dropped);
		}
	}
}

#[cfg(test)]
mod tests {
	use std::collections::VecDeque;

	use super::*;
	use crate::lite::session::Limits;
	use crate::transport::TransportError;

	/// Chunks handed out in order, then the end.
	struct Given(VecDeque<Bytes>);

	impl RecvStream for Given {
		fn poll_read(&mut self, _: &Waiter) -> Poll<Result<Option<Bytes>, TransportError>> {
			Poll::Ready(Ok(self.0.pop_front()))
		}

		fn stop(&mut self, _: u64) {}
	}

	fn given(chunks: impl IntoIterator<Item = Vec<u8>>) -> Given {
		Given(chunks.into_iter().map(Bytes::from).collect())
	}

	fn run<T>(future: impl Future<Output = T>) -> T {
		kio::Builder::single().build().unwrap().block_on(future)
	}

	#[test]
	fn a_window_of_tiny_messages_after_a_split_one_is_decoded_in_one_pass() {
		// A two-byte varint split over two chunks, then, in the second chunk (what quinn-proto
		// hands over after merging a stream's buffered pieces), 1 MiB of one-byte varints, each
		// followed by a payload of 0 bytes, and a last payload of 3.
		const MESSAGES: usize = 1 << 20;
		let mut second = vec![0x25];
		second.extend_from_slice(&[0x00; MESSAGES]);
		second.extend_from_slice(&[0x03, b'e', b'n', b'd']);
		let budget = Budget::new(Limits::default(), None, None);
		let mut reader = Reader::charged(given([vec![0x40], second]), &budget);
		run(async {
			assert_eq!(reader.decode::<u64>().await.unwrap(), Some(37));
			for _ in 0..MESSAGES {
				assert_eq!(reader.decode::<u64>().await.unwrap(), Some(0));
				let empty = kio::wait(|waiter| reader.poll_read_exact(waiter, 0)).await.unwrap();
				assert_eq!(empty.as_deref(), Some(&[][..]));
			}
			assert_eq!(reader.decode::<u64>().await.unwrap(), Some(3));
			let end = kio::wait(|waiter| reader.poll_read_exact(waiter, 3)).await.unwrap();
			assert_eq!(end.as_deref(), Some(&b"end"[..]));
			assert_eq!(reader.decode::<u64>().await.unwrap(), None);
		});
		// Each byte is moved at most once, when the chunk after it comes: here the first byte.
		// Removing each message from the front as it was decoded moved 5.5e11 bytes.
		assert!(reader.moved <= 1, "{} bytes moved", reader.moved);
		assert_eq!(
			budget.used(Resource::PartialBytes),
			0,
			"the reassembly's charge is given back"
		);
		assert!(reader.buf.capacity() == 0, "the reassembly is freed once consumed");
	}

	#[test]
	fn a_payload_keeps_nothing_of_its_chunk() {
		// A one-byte payload at the front of a chunk of 64 KiB (a merged one, say).
		let mut chunk = vec![0x01, b'x'];
		chunk.resize(64 << 10, 0x00);
		let chunk = Bytes::from(chunk);
		let within = chunk.as_ptr_range();
		let mut reader = Reader::new(Given([chunk.clone()].into()));
		let payload = run(async {
			assert_eq!(reader.decode::<u64>().await.unwrap(), Some(1));
			kio::wait(|waiter| reader.poll_read_exact(waiter, 1))
				.await
				.unwrap()
				.unwrap()
		});
		assert_eq!(&payload[..], b"x");
		// The chunk is alive still, so its memory cannot have been handed out again.
		assert!(
			!within.contains(&payload.as_ptr()),
			"the payload is a slice of its chunk"
		);
		drop(chunk);
	}

	#[test]
	fn a_reassembly_is_charged_what_it_holds_until_it_is_consumed() {
		let budget = Budget::new(Limits::default(), None, None);
		// A frame of 6 bytes over three chunks, then a varint.
		let mut reader = Reader::charged(
			given([vec![0x06, b'a'], vec![b'b', b'c'], vec![b'd', b'e', b'f', 0x07]]),
			&budget,
		);
		run(async {
			assert_eq!(reader.decode::<u64>().await.unwrap(), Some(6));
			let payload = kio::wait(|waiter| reader.poll_read_exact(waiter, 6)).await.unwrap();
			assert_eq!(payload.as_deref(), Some(&b"abcdef"[..]));
			// What is held past the frame, the last varint, stays charged: its allocation.
			assert_eq!(budget.used(Resource::PartialBytes), reader.buf.capacity() as u64);
			assert!(!reader.buf.is_empty());
			assert_eq!(reader.decode::<u64>().await.unwrap(), Some(7));
			assert_eq!(budget.used(Resource::PartialBytes), 0);
			assert_eq!(reader.decode::<u64>().await.unwrap(), None);
		});
	}
}
