//! moq-net's [`Transport`] over a QUIC [`Connection`], over a WebTransport session
//! (`webtransport.rs`) and over QMux (`qmux.rs`): the only MoQ-aware code of the crate.

use std::task::Poll;

use bytes::Bytes;
use kio::Waiter;
use moq_net::lite::ErrorCode;
use moq_net::transport::{Transport, TransportError};
use quinn_proto::{ConnectionError, Dir};

use crate::connection::{Connection, StreamError};
use crate::stream::{RecvStream, SendStream};

mod qmux;
mod webtransport;
pub use qmux::qmux_closed_code;
pub use webtransport::{WtRecv, WtSend};

/// The code a session sees for a connection that ended: the application's close code, or for
/// ends QUIC itself decided (idle timeout, a transport error, a stateless reset) the moq-lite
/// `Transport` error code (docs/moq-lite-05.md §2.8).
pub fn closed_code(error: &ConnectionError) -> u64 {
	match error {
		ConnectionError::ApplicationClosed(close) => close.error_code.into_inner(),
		ConnectionError::LocallyClosed => ErrorCode::Cancel.code(),
		_ => ErrorCode::Transport.code(),
	}
}

fn map(error: StreamError) -> TransportError {
	match error {
		StreamError::Reset(code) => TransportError::Reset(code),
		StreamError::Stopped(code) => TransportError::Stopped(code),
		StreamError::ConnectionLost(e) => TransportError::Closed(closed_code(&e)),
		StreamError::Closed => TransportError::Invalid,
	}
}

/// A send stream, as moq-net sees it.
#[derive(Debug)]
pub struct MoqSend(SendStream);
/// A receive stream, as moq-net sees it.
#[derive(Debug)]
pub struct MoqRecv(RecvStream);

impl Connection {
	fn moq_halves(&self, id: quinn_proto::StreamId) -> (MoqSend, MoqRecv) {
		let (send, recv) = self.halves(id);
		(MoqSend(send), MoqRecv(recv))
	}
}

impl Transport for Connection {
	type SendHalf = MoqSend;
	type RecvHalf = MoqRecv;

	fn poll_open_uni(&self, waiter: &Waiter) -> Poll<Result<MoqSend, TransportError>> {
		self.poll_open(waiter, Dir::Uni)
			.map(|r| r.map(|id| MoqSend(SendStream::new(self.clone(), id))).map_err(map))
	}

	fn poll_open_bi(&self, waiter: &Waiter) -> Poll<Result<(MoqSend, MoqRecv), TransportError>> {
		self.poll_open(waiter, Dir::Bi)
			.map(|r| r.map(|id| self.moq_halves(id)).map_err(map))
	}

	fn poll_accept_uni(&self, waiter: &Waiter) -> Poll<Result<MoqRecv, TransportError>> {
		self.poll_accept(waiter, Dir::Uni)
			.map(|r| r.map(|id| MoqRecv(RecvStream::new(self.clone(), id))).map_err(map))
	}

	fn poll_accept_bi(&self, waiter: &Waiter) -> Poll<Result<(MoqSend, MoqRecv), TransportError>> {
		self.poll_accept(waiter, Dir::Bi)
			.map(|r| r.map(|id| self.moq_halves(id)).map_err(map))
	}

	fn send_datagram(&self, payload: Bytes) -> Result<(), TransportError> {
		Self::send_datagram(self, payload).map_err(map)
	}

	fn poll_recv_datagram(&self, waiter: &Waiter) -> Poll<Result<Bytes, TransportError>> {
		Self::poll_recv_datagram(self, waiter).map(|r| r.map_err(map))
	}

	fn close(&self, code: u64, reason: &str) {
		Self::close(self, code, reason);
	}

	fn poll_closed(&self, waiter: &Waiter) -> Poll<u64> {
		Self::poll_closed(self, waiter).map(|e| closed_code(&e))
	}
}

impl moq_net::transport::SendStream for MoqSend {
	fn poll_write(&mut self, waiter: &Waiter, data: &mut Bytes) -> Poll<Result<(), TransportError>> {
		self.0.poll_write(waiter, data).map(|r| r.map_err(map))
	}

	fn finish(&mut self) -> Result<(), TransportError> {
		self.0.finish().map_err(map)
	}

	fn reset(&mut self, code: u64) {
		self.0.reset(code);
	}

	fn set_priority(&mut self, priority: i32) {
		self.0.set_priority(priority);
	}

	fn set_group(&mut self, group: u64) {
		self.0.set_group(group);
	}

	fn poll_stopped(&mut self, waiter: &Waiter) -> Poll<Result<u64, TransportError>> {
		self.0.poll_stopped(waiter).map(|r| r.map_err(map))
	}
}

impl moq_net::transport::RecvStream for MoqRecv {
	fn poll_read(&mut self, waiter: &Waiter) -> Poll<Result<Option<Bytes>, TransportError>> {
		self.0.poll_read(waiter).map(|r| r.map_err(map))
	}

	fn stop(&mut self, code: u64) {
		self.0.stop(code);
	}
}
