//! The transport a session runs over: a QUIC connection, abstracted.
//!
//! A [`Transport`] opens and accepts unidirectional and bidirectional streams, sends and
//! receives datagrams, and closes with an application code. Streams carry `Bytes`; a send
//! stream has a priority (higher is sent first) and a send group (streams of one group share a
//! round-robin slot in the sender's scheduler); a receive stream can be stopped and a send
//! stream reset, each with a code.
//!
//! Every operation that may wait follows kio's convention: `poll_x(&self, &Waiter) -> Poll<_>`
//! plus an `async fn x` that is `kio::wait(|w| self.poll_x(w)).await`.
//!
//! [`memory`] implements it in memory, for tests and benchmarks; `moq-quic` implements it over
//! QUIC.

pub mod memory;

use std::fmt;
use std::task::Poll;

use bytes::Bytes;
use kio::Waiter;

/// Why a transport operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportError {
	/// The peer reset the stream with this code.
	Reset(u64),
	/// The peer stopped the stream (asked us to stop sending) with this code.
	Stopped(u64),
	/// The connection was closed with this code (by either side).
	Closed(u64),
	/// A local misuse: writing after finish, reading after stop.
	Invalid,
}

impl fmt::Display for TransportError {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Reset(code) => write!(f, "stream reset with code {code}"),
			Self::Stopped(code) => write!(f, "stream stopped with code {code}"),
			Self::Closed(code) => write!(f, "connection closed with code {code}"),
			Self::Invalid => f.write_str("invalid stream operation"),
		}
	}
}

impl std::error::Error for TransportError {}

/// Both halves of a bidirectional stream of transport `T`.
pub type BiStream<T> = (<T as Transport>::SendHalf, <T as Transport>::RecvHalf);

/// A connection.
pub trait Transport {
	/// The sending half of a stream.
	type SendHalf: SendStream;
	/// The receiving half of a stream.
	type RecvHalf: RecvStream;

	/// Opens a unidirectional stream.
	fn poll_open_uni(&self, waiter: &Waiter) -> Poll<Result<Self::SendHalf, TransportError>>;
	/// Opens a bidirectional stream.
	fn poll_open_bi(&self, waiter: &Waiter) -> Poll<Result<BiStream<Self>, TransportError>>;
	/// Accepts the peer's next unidirectional stream.
	fn poll_accept_uni(&self, waiter: &Waiter) -> Poll<Result<Self::RecvHalf, TransportError>>;
	/// Accepts the peer's next bidirectional stream.
	fn poll_accept_bi(&self, waiter: &Waiter) -> Poll<Result<BiStream<Self>, TransportError>>;
	/// Sends a datagram (best effort).
	fn send_datagram(&self, payload: Bytes) -> Result<(), TransportError>;
	/// Receives the next datagram.
	fn poll_recv_datagram(&self, waiter: &Waiter) -> Poll<Result<Bytes, TransportError>>;
	/// Closes the connection with an application code; both sides see `Closed(code)`.
	fn close(&self, code: u64, reason: &str);
	/// Ready with the close code once the connection is closed.
	fn poll_closed(&self, waiter: &Waiter) -> Poll<u64>;
}

/// The sending half of a stream.
pub trait SendStream {
	/// Queues `data`; ready once all of it is accepted (flow control may make it wait).
	fn poll_write(&mut self, waiter: &Waiter, data: &mut Bytes) -> Poll<Result<(), TransportError>>;
	/// Ends the stream cleanly after what was written.
	fn finish(&mut self) -> Result<(), TransportError>;
	/// Abandons the stream with `code`.
	fn reset(&mut self, code: u64);
	/// Sets the send priority (higher first).
	fn set_priority(&mut self, priority: i32);
	/// Puts the stream in a send group (streams of a group share one round-robin slot).
	fn set_group(&mut self, group: u64);
	/// Ready with the code once the peer stopped the stream.
	fn poll_stopped(&mut self, waiter: &Waiter) -> Poll<Result<u64, TransportError>>;
}

/// The receiving half of a stream.
pub trait RecvStream {
	/// The next chunk, `Ok(None)` at a clean end.
	fn poll_read(&mut self, waiter: &Waiter) -> Poll<Result<Option<Bytes>, TransportError>>;
	/// Asks the peer to stop sending, with `code`.
	fn stop(&mut self, code: u64);
}

/// Async wrappers, one line each.
pub trait TransportExt: Transport {
	/// See [`Transport::poll_open_uni`].
	fn open_uni(&self) -> impl Future<Output = Result<Self::SendHalf, TransportError>> {
		kio::wait(|w| self.poll_open_uni(w))
	}
	/// See [`Transport::poll_open_bi`].
	fn open_bi(&self) -> impl Future<Output = Result<BiStream<Self>, TransportError>> {
		kio::wait(|w| self.poll_open_bi(w))
	}
	/// See [`Transport::poll_accept_uni`].
	fn accept_uni(&self) -> impl Future<Output = Result<Self::RecvHalf, TransportError>> {
		kio::wait(|w| self.poll_accept_uni(w))
	}
	/// See [`Transport::poll_accept_bi`].
	fn accept_bi(&self) -> impl Future<Output = Result<BiStream<Self>, TransportError>> {
		kio::wait(|w| self.poll_accept_bi(w))
	}
	/// See [`Transport::poll_recv_datagram`].
	fn recv_datagram(&self) -> impl Future<Output = Result<Bytes, TransportError>> {
		kio::wait(|w| self.poll_recv_datagram(w))
	}
	/// See [`Transport::poll_closed`].
	fn closed(&self) -> impl Future<Output = u64> {
		kio::wait(|w| self.poll_closed(w))
	}
}

impl<T: Transport> TransportExt for T {}

/// Async wrappers for send streams.
pub trait SendStreamExt: SendStream {
	/// Writes all of `data`.
	fn write(&mut self, mut data: Bytes) -> impl Future<Output = Result<(), TransportError>> {
		async move { kio::wait(|w| self.poll_write(w, &mut data)).await }
	}
	/// See [`SendStream::poll_stopped`].
	fn stopped(&mut self) -> impl Future<Output = Result<u64, TransportError>> {
		kio::wait(|w| self.poll_stopped(w))
	}
}

impl<T: SendStream> SendStreamExt for T {}

/// Async wrappers for receive streams.
pub trait RecvStreamExt: RecvStream {
	/// See [`RecvStream::poll_read`].
	fn read(&mut self) -> impl Future<Output = Result<Option<Bytes>, TransportError>> {
		kio::wait(|w| self.poll_read(w))
	}
}

impl<T: RecvStream> RecvStreamExt for T {}
