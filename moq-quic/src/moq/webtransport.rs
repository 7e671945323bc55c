//! moq-net's [`Transport`] over a WebTransport session: its streams carry their header
//! (`0x54`/`0x41` and the session id) first, its datagrams the quarter stream id, and application
//! codes travel in HTTP/3's WebTransport code space both ways.

use std::task::Poll;

use bytes::Bytes;
use kio::Waiter;
use moq_net::transport::{Transport, TransportError};
use quinn_proto::{ConnectionError, Dir};

use super::closed_code;
use crate::connection::StreamError;
use crate::h3::{self, code, stream_type};
use crate::stream::{RecvStream, SendStream};
use crate::webtransport::{WebTransport, linger_close, noop_waiter};

/// A send stream of a WebTransport session: its header goes first.
pub struct WtSend {
	stream: SendStream,
	header: Bytes,
}

/// A receive stream of a WebTransport session: bytes read past its header come first.
pub struct WtRecv {
	stream: RecvStream,
	rest: Bytes,
}

impl std::fmt::Debug for WtSend {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("WtSend").field("id", &self.stream.id()).finish()
	}
}

impl std::fmt::Debug for WtRecv {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("WtRecv").field("id", &self.stream.id()).finish()
	}
}

/// A stream error as the session sees it: codes in the WebTransport space come back as the
/// application's.
fn map(error: StreamError) -> TransportError {
	let app = |code: u64| h3::error_from_http3(code).map_or(code, u64::from);
	match error {
		StreamError::Reset(code) => TransportError::Reset(app(code)),
		StreamError::Stopped(code) => TransportError::Stopped(app(code)),
		StreamError::ConnectionLost(e) => TransportError::Closed(match &e {
			ConnectionError::ApplicationClosed(close) => app(close.error_code.into_inner()),
			_ => closed_code(&e),
		}),
		StreamError::Closed => TransportError::Invalid,
	}
}

/// An application code as the WebTransport one on the wire (codes past 32 bits saturate).
fn wire(code: u64) -> u64 {
	h3::error_to_http3(u32::try_from(code).unwrap_or(u32::MAX))
}

impl WtSend {
	fn new(mut stream: SendStream, mut header: Bytes, waiter: &Waiter) -> Self {
		// A new stream's buffer takes its header at once; if not, poll_write sends it first.
		let _ = stream.poll_write(waiter, &mut header);
		Self { stream, header }
	}
}

impl Transport for WebTransport {
	type SendHalf = WtSend;
	type RecvHalf = WtRecv;

	fn poll_open_uni(&self, waiter: &Waiter) -> Poll<Result<WtSend, TransportError>> {
		let conn = &self.0.shared.conn;
		conn.poll_open(waiter, Dir::Uni).map(|r| {
			r.map(|id| {
				WtSend::new(
					SendStream::new(conn.clone(), id),
					self.header(stream_type::WEBTRANSPORT_UNI),
					waiter,
				)
			})
			.map_err(map)
		})
	}

	fn poll_open_bi(&self, waiter: &Waiter) -> Poll<Result<(WtSend, WtRecv), TransportError>> {
		let conn = &self.0.shared.conn;
		conn.poll_open(waiter, Dir::Bi).map(|r| {
			r.map(|id| {
				let (send, recv) = conn.halves(id);
				(
					WtSend::new(send, self.header(stream_type::WEBTRANSPORT_BIDI), waiter),
					WtRecv {
						stream: recv,
						rest: Bytes::new(),
					},
				)
			})
			.map_err(map)
		})
	}

	fn poll_accept_uni(&self, waiter: &Waiter) -> Poll<Result<WtRecv, TransportError>> {
		loop {
			match self.0.shared.uni.poll_pop(waiter) {
				Poll::Ready(Some((session, mut stream, rest))) => {
					if session != self.0.id {
						stream.stop(code::WT_BUFFERED_STREAM_REJECTED);
						continue;
					}
					return Poll::Ready(Ok(WtRecv { stream, rest }));
				}
				Poll::Ready(None) => return Poll::Ready(Err(self.closed_now())),
				Poll::Pending => return Poll::Pending,
			}
		}
	}

	fn poll_accept_bi(&self, waiter: &Waiter) -> Poll<Result<(WtSend, WtRecv), TransportError>> {
		loop {
			match self.0.shared.bi.poll_pop(waiter) {
				Poll::Ready(Some((session, mut send, mut recv, rest))) => {
					if session != self.0.id {
						send.reset(code::WT_BUFFERED_STREAM_REJECTED);
						recv.stop(code::WT_BUFFERED_STREAM_REJECTED);
						continue;
					}
					return Poll::Ready(Ok((
						WtSend {
							stream: send,
							header: Bytes::new(),
						},
						WtRecv { stream: recv, rest },
					)));
				}
				Poll::Ready(None) => return Poll::Ready(Err(self.closed_now())),
				Poll::Pending => return Poll::Pending,
			}
		}
	}

	fn send_datagram(&self, payload: Bytes) -> Result<(), TransportError> {
		// HTTP datagrams carry the quarter stream id (RFC 9297 §2.1).
		let mut datagram = Vec::with_capacity(payload.len() + 8);
		h3::put_varint(&mut datagram, self.0.id / 4);
		datagram.extend_from_slice(&payload);
		self.0.shared.conn.send_datagram(Bytes::from(datagram)).map_err(map)
	}

	fn poll_recv_datagram(&self, waiter: &Waiter) -> Poll<Result<Bytes, TransportError>> {
		loop {
			let datagram = match self.0.shared.conn.poll_recv_datagram(waiter) {
				Poll::Ready(Ok(datagram)) => datagram,
				Poll::Ready(Err(err)) => return Poll::Ready(Err(map(err))),
				Poll::Pending => return Poll::Pending,
			};
			let mut view = &datagram[..];
			// Another session's datagrams, or ones without a prefix, are dropped.
			if h3::get_varint(&mut view) == Ok(self.0.id / 4) {
				let at = datagram.len() - view.len();
				return Poll::Ready(Ok(datagram.slice(at..)));
			}
		}
	}

	fn close(&self, code: u64, reason: &str) {
		if self.0.closing.replace(true) {
			return;
		}
		let app = u32::try_from(code).unwrap_or(u32::MAX);
		if let Some(mut send) = self.0.connect.borrow_mut().take() {
			let _ = send.poll_write(&noop_waiter(), &mut Bytes::from(h3::close_capsule(app, reason)));
			let _ = send.finish();
		}
		self.0.shared.end();
		linger_close(&self.0.shared.conn, h3::error_to_http3(app), reason);
	}

	fn poll_closed(&self, waiter: &Waiter) -> Poll<u64> {
		self.0.shared.conn.poll_closed(waiter).map(|error| self.ended(error))
	}
}

impl moq_net::transport::SendStream for WtSend {
	fn poll_write(&mut self, waiter: &Waiter, data: &mut Bytes) -> Poll<Result<(), TransportError>> {
		if !self.header.is_empty() {
			match self.stream.poll_write(waiter, &mut self.header) {
				Poll::Ready(Ok(())) => {}
				Poll::Ready(Err(err)) => return Poll::Ready(Err(map(err))),
				Poll::Pending => return Poll::Pending,
			}
		}
		self.stream.poll_write(waiter, data).map(|r| r.map_err(map))
	}

	fn finish(&mut self) -> Result<(), TransportError> {
		if !self.header.is_empty() {
			// Only a stream whose first write never went out; there is nothing to finish.
			return Err(TransportError::Invalid);
		}
		self.stream.finish().map_err(map)
	}

	fn reset(&mut self, code: u64) {
		self.stream.reset(wire(code));
	}

	fn set_priority(&mut self, priority: i32) {
		self.stream.set_priority(priority);
	}

	fn set_group(&mut self, group: u64) {
		self.stream.set_group(group);
	}

	fn poll_stopped(&mut self, waiter: &Waiter) -> Poll<Result<u64, TransportError>> {
		self.stream.poll_stopped(waiter).map(|r| {
			r.map(|code| h3::error_from_http3(code).map_or(code, u64::from))
				.map_err(map)
		})
	}
}

impl moq_net::transport::RecvStream for WtRecv {
	fn poll_read(&mut self, waiter: &Waiter) -> Poll<Result<Option<Bytes>, TransportError>> {
		if !self.rest.is_empty() {
			return Poll::Ready(Ok(Some(std::mem::take(&mut self.rest))));
		}
		self.stream.poll_read(waiter).map(|r| r.map_err(map))
	}

	fn stop(&mut self, code: u64) {
		self.stream.stop(wire(code));
	}
}
