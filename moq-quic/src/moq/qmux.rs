//! moq-net's [`Transport`] over a QMux connection: the same sessions as over QUIC and
//! WebTransport, over a WebSocket.

use std::task::Poll;

use bytes::Bytes;
use kio::Waiter;
use moq_net::lite::ErrorCode;
use moq_net::transport::{Transport, TransportError};

use crate::qmux::{Dir, End, QmuxConnection, QmuxRecv, QmuxSend, StreamError};

/// The code a session sees for a connection that ended: the peer's application code, Cancel (0)
/// for our own close, and moq-lite's Transport (4) for a failure (a violation, the idle timeout,
/// the socket's end without a close).
pub fn qmux_closed_code(end: &End) -> u64 {
	match end {
		End::Application(code) => *code,
		End::Local(_) => ErrorCode::Cancel.code(),
		End::Lost(_) => ErrorCode::Transport.code(),
	}
}

fn map(error: StreamError) -> TransportError {
	match error {
		StreamError::Reset(code) => TransportError::Reset(code),
		StreamError::Stopped(code) => TransportError::Stopped(code),
		StreamError::Closed(end) => TransportError::Closed(qmux_closed_code(&end)),
		StreamError::Invalid => TransportError::Invalid,
	}
}

impl Transport for QmuxConnection {
	type SendHalf = QmuxSend;
	type RecvHalf = QmuxRecv;

	fn poll_open_uni(&self, waiter: &Waiter) -> Poll<Result<QmuxSend, TransportError>> {
		self.poll_open(waiter, Dir::Uni)
			.map(|r| r.map(|id| self.send_half(id)).map_err(map))
	}

	fn poll_open_bi(&self, waiter: &Waiter) -> Poll<Result<(QmuxSend, QmuxRecv), TransportError>> {
		self.poll_open(waiter, Dir::Bi)
			.map(|r| r.map(|id| (self.send_half(id), self.recv_half(id))).map_err(map))
	}

	fn poll_accept_uni(&self, waiter: &Waiter) -> Poll<Result<QmuxRecv, TransportError>> {
		self.poll_accept(waiter, Dir::Uni)
			.map(|r| r.map(|id| self.recv_half(id)).map_err(map))
	}

	fn poll_accept_bi(&self, waiter: &Waiter) -> Poll<Result<(QmuxSend, QmuxRecv), TransportError>> {
		self.poll_accept(waiter, Dir::Bi)
			.map(|r| r.map(|id| (self.send_half(id), self.recv_half(id))).map_err(map))
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
		Self::poll_closed(self, waiter).map(|end| qmux_closed_code(&end))
	}
}

impl moq_net::transport::SendStream for QmuxSend {
	fn poll_write(&mut self, waiter: &Waiter, data: &mut Bytes) -> Poll<Result<(), TransportError>> {
		Self::poll_write(self, waiter, data).map(|r| r.map_err(map))
	}

	fn finish(&mut self) -> Result<(), TransportError> {
		Self::finish(self).map_err(map)
	}

	fn reset(&mut self, code: u64) {
		Self::reset(self, code);
	}

	fn set_priority(&mut self, priority: i32) {
		Self::set_priority(self, priority);
	}

	/// One byte stream has no send groups to share: each stream is its own group, and priority
	/// alone orders them.
	fn set_group(&mut self, _group: u64) {}

	fn poll_stopped(&mut self, waiter: &Waiter) -> Poll<Result<u64, TransportError>> {
		Self::poll_stopped(self, waiter).map(|r| r.map_err(map))
	}
}

impl moq_net::transport::RecvStream for QmuxRecv {
	fn poll_read(&mut self, waiter: &Waiter) -> Poll<Result<Option<Bytes>, TransportError>> {
		Self::poll_read(self, waiter).map(|r| r.map_err(map))
	}

	fn stop(&mut self, code: u64) {
		Self::stop(self, code);
	}
}
