//! Stream handles: thin views of a stream's state inside its connection.

use std::task::Poll;

use bytes::Bytes;
use kio::Waiter;
use quinn_proto::StreamId;

use crate::connection::{Connection, StreamError};

/// The sending half of a stream. Dropping it finishes the stream (what was written is still
/// delivered) unless it was reset.
pub struct SendStream {
	conn: Connection,
	id: StreamId,
	ended: bool,
}

impl SendStream {
	pub(crate) fn new(conn: Connection, id: StreamId) -> Self {
		Self { conn, id, ended: false }
	}

	/// The QUIC stream id.
	pub fn id(&self) -> StreamId {
		self.id
	}

	/// Queues `data`, taking it from the front as it is accepted; ready once all of it is (the
	/// stream's own buffer may make it wait).
	pub fn poll_write(&mut self, waiter: &Waiter, data: &mut Bytes) -> Poll<Result<(), StreamError>> {
		self.conn.poll_write(waiter, self.id, data)
	}

	/// Writes all of `data`.
	pub async fn write(&mut self, mut data: Bytes) -> Result<(), StreamError> {
		kio::wait(|w| self.poll_write(w, &mut data)).await
	}

	/// Ends the stream after what was written. On a stream the peer stopped it succeeds and does
	/// nothing (the stream is over already), as in moq-net's in-memory transport.
	pub fn finish(&mut self) -> Result<(), StreamError> {
		self.ended = true;
		self.conn.finish(self.id)
	}

	/// Abandons the stream with `code`: queued data is dropped at once.
	pub fn reset(&mut self, code: u64) {
		self.ended = true;
		self.conn.reset(self.id, code);
	}

	/// Sets the send priority (higher first; mirrored onto quinn-proto's stream priority).
	pub fn set_priority(&mut self, priority: i32) {
		self.conn.set_priority(self.id, priority);
	}

	/// Puts the stream in the send group `key`: streams of a group share one round-robin slot.
	pub fn set_group(&mut self, key: u64) {
		self.conn.set_group(self.id, key);
	}

	/// Ready with the code once the peer stopped the stream.
	pub fn poll_stopped(&mut self, waiter: &Waiter) -> Poll<Result<u64, StreamError>> {
		self.conn.poll_stopped(waiter, self.id)
	}

	/// See [`Self::poll_stopped`].
	pub async fn stopped(&mut self) -> Result<u64, StreamError> {
		kio::wait(|w| self.poll_stopped(w)).await
	}
}

impl Drop for SendStream {
	fn drop(&mut self) {
		if !self.ended {
			let _ = self.conn.finish(self.id);
		}
		self.conn.release(self.id);
	}
}

impl std::fmt::Debug for SendStream {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("SendStream").field("id", &self.id).finish()
	}
}

/// The receiving half of a stream. Dropping it before the end stops the stream with code 0.
pub struct RecvStream {
	conn: Connection,
	id: StreamId,
	ended: bool,
}

impl RecvStream {
	pub(crate) fn new(conn: Connection, id: StreamId) -> Self {
		Self { conn, id, ended: false }
	}

	/// The QUIC stream id.
	pub fn id(&self) -> StreamId {
		self.id
	}

	/// The next chunk in order; `Ok(None)` at the end.
	pub fn poll_read(&mut self, waiter: &Waiter) -> Poll<Result<Option<Bytes>, StreamError>> {
		let result = self.conn.poll_read(waiter, self.id);
		if matches!(result, Poll::Ready(Ok(None) | Err(_))) {
			self.ended = true;
		}
		result
	}

	/// See [`Self::poll_read`].
	pub async fn read(&mut self) -> Result<Option<Bytes>, StreamError> {
		kio::wait(|w| self.poll_read(w)).await
	}

	/// Reads to the end, up to `limit` bytes (more is an error: `Closed`).
	pub async fn read_to_end(&mut self, limit: usize) -> Result<Vec<u8>, StreamError> {
		let mut out = Vec::new();
		while let Some(chunk) = self.read().await? {
			if out.len() + chunk.len() > limit {
				return Err(StreamError::Closed);
			}
			out.extend_from_slice(&chunk);
		}
		Ok(out)
	}

	/// Asks the peer to stop sending, with `code`.
	pub fn stop(&mut self, code: u64) {
		self.ended = true;
		self.conn.stop(self.id, code);
	}
}

impl Drop for RecvStream {
	fn drop(&mut self) {
		if !self.ended {
			self.conn.stop(self.id, 0);
		}
		self.conn.release(self.id);
	}
}

impl std::fmt::Debug for RecvStream {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("RecvStream").field("id", &self.id).finish()
	}
}
