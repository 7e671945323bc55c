//! TCP: a listener with a multishot accept, and a stream whose reads and writes are safe to
//! cancel.
//!
//! # Cancel safety
//!
//! A stream keeps its in-flight receive and send operations itself, not in the caller's future:
//!
//! - **read**: a dropped [`TcpStream::read`] leaves the receive in flight; the next read takes its
//!   bytes. Nothing received is lost.
//! - **write**: [`TcpStream::poll_write`] copies into the stream's send buffer (up to 64 KiB
//!   staged) and returns at once; the stream sends in the background, one `send` at a time, and
//!   resends the rest of a partial send. A later write or [`TcpStream::flush`] reports an error.
//!   Nothing is sent twice or silently dropped while the stream lives; call
//!   [`TcpStream::shutdown`] (or `flush`) before dropping it to know the bytes left.
//!
//! # Owned buffers
//!
//! [`TcpStream::write_all_owned`], [`TcpStream::read_owned`] and
//! [`TcpStream::read_exact_owned`] lend the caller's `Vec` to the kernel for the operation and
//! hand it back: no copy into or out of the stream's buffers (at 16 KiB a message those copies
//! were most of an echo's user-space instructions, and 100 connections' buffers crowded the
//! cache: `bench/results/peers.md`). They keep the same cancel safety: a dropped owned operation
//! stays in flight in the stream, which keeps the buffer (a send finishes in the background; a
//! receive's bytes, and what the buffer held of the read so far, are the next read's). The two
//! kinds may be mixed on one stream: an owned read first takes, by copy, what a `poll_read` had
//! already received.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Poll;

use crate::Waiter;
use crate::sys::socket::{self, set_int};
use crate::uring::tcp::{self, IoBuf};
use crate::uring::{Fd, MultiOp, Op};

/// Bytes one receive asks for.
const READ_BUF: usize = 16 * 1024;
/// Bytes of written data a stream stages before `poll_write` waits.
const WRITE_BUF: usize = 64 * 1024;
const BACKLOG: libc::c_int = 1024;

/// A listening TCP socket. Accepts through one multishot accept, re-armed when it ends.
pub struct TcpListener {
	fd: Rc<Fd>,
	local: SocketAddr,
	accept: RefCell<Option<MultiOp>>,
}

impl TcpListener {
	/// Binds and listens (`SO_REUSEADDR` set).
	pub fn bind(addr: SocketAddr) -> io::Result<Self> {
		let fd = socket::socket(&addr, libc::SOCK_STREAM)?;
		set_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
		socket::bind(&fd, addr)?;
		socket::listen(&fd, BACKLOG)?;
		let local = socket::local_addr(&fd)?;
		Ok(Self {
			fd: Rc::new(fd),
			local,
			accept: RefCell::new(None),
		})
	}

	/// The bound address.
	pub fn local_addr(&self) -> SocketAddr {
		self.local
	}

	/// The next connection and its peer address.
	pub fn poll_accept(&self, waiter: &Waiter) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
		let mut accept = self.accept.borrow_mut();
		loop {
			let op = match &mut *accept {
				Some(op) => op,
				None => match tcp::accept_multi(&self.fd) {
					Ok(op) => accept.insert(op),
					Err(e) => return Poll::Ready(Err(e)),
				},
			};
			match op.poll_next(waiter) {
				Poll::Pending => return Poll::Pending,
				// Ended (an error was reported, or the kernel stopped it): re-arm.
				Poll::Ready(None) => *accept = None,
				Poll::Ready(Some((res, _))) if res < 0 => {
					return Poll::Ready(Err(io::Error::from_raw_os_error(-res)));
				}
				Poll::Ready(Some((res, _))) => {
					let fd = Fd::adopt(res);
					// A peer that already reset has no name; the connection is still handed out.
					let peer = socket::peer_addr(&fd).unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
					return Poll::Ready(Ok((TcpStream::new(Rc::new(fd)), peer)));
				}
			}
		}
	}

	/// Accepts the next connection.
	pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
		crate::wait(|w| self.poll_accept(w)).await
	}
}

impl std::fmt::Debug for TcpListener {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("TcpListener").field("local", &self.local).finish()
	}
}

/// A TCP connection. See the [module docs](self) for what a dropped read or write leaves.
pub struct TcpStream {
	fd: Rc<Fd>,
	/// The receive buffer: `data[start..end]` is received and not yet read.
	read_buf: Option<Box<IoBuf>>,
	reading: Option<Op<IoBuf>>,
	/// Bytes written and not yet handed to a send.
	staged: Vec<u8>,
	/// A send buffer not in use.
	spare: Option<Box<IoBuf>>,
	sending: Option<Op<IoBuf>>,
	/// An error of a background send, reported by the next write or flush.
	write_error: Option<io::Error>,
	shutdown: Option<Op<Rc<Fd>>>,
}

impl TcpStream {
	fn new(fd: Rc<Fd>) -> Self {
		Self {
			fd,
			read_buf: None,
			reading: None,
			staged: Vec::new(),
			spare: None,
			sending: None,
			write_error: None,
			shutdown: None,
		}
	}

	/// Connects to `addr`. Dropping the future cancels the connect (the socket closes once the
	/// kernel is done with it).
	pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
		Self::connect_inner(None, addr).await
	}

	/// Connects to `addr` from the local address `local` (port 0 for any): a client that must
	/// come from one interface or loopback address.
	pub async fn connect_from(local: SocketAddr, addr: SocketAddr) -> io::Result<Self> {
		Self::connect_inner(Some(local), addr).await
	}

	async fn connect_inner(local: Option<SocketAddr>, addr: SocketAddr) -> io::Result<Self> {
		let fd = Rc::new(socket::socket(&addr, libc::SOCK_STREAM)?);
		if let Some(local) = local {
			socket::bind(&fd, local)?;
		}
		let mut op = tcp::connect(fd.clone(), addr)?;
		let done = crate::wait(|w| op.poll(w)).await?;
		done.result()?;
		Ok(Self::new(fd))
	}

	/// The local address.
	pub fn local_addr(&self) -> io::Result<SocketAddr> {
		socket::local_addr(&self.fd)
	}

	/// The peer's address.
	pub fn peer_addr(&self) -> io::Result<SocketAddr> {
		socket::peer_addr(&self.fd)
	}

	/// Sets `TCP_NODELAY`.
	pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
		set_int(&self.fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, on.into())
	}

	/// Sets the kernel's send buffer (`SO_SNDBUF`; the kernel doubles it for its bookkeeping and
	/// stops growing it on its own): what is written and not yet taken by the peer waits in the
	/// application instead, where it can still be dropped or reordered.
	pub fn set_send_buffer(&self, bytes: usize) -> io::Result<()> {
		let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
		set_int(&self.fd, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes)
	}

	/// Reads into `dst`: the bytes of the last receive first, else the next receive's. Ready(0)
	/// is end of stream (or an empty `dst`).
	pub fn poll_read(&mut self, waiter: &Waiter, dst: &mut [u8]) -> Poll<io::Result<usize>> {
		if let Some(buf) = &mut self.read_buf
			&& buf.start < buf.end
		{
			let n = (buf.end - buf.start).min(dst.len());
			dst[..n].copy_from_slice(&buf.data[buf.start..buf.start + n]);
			buf.start += n;
			return Poll::Ready(Ok(n));
		}
		if dst.is_empty() {
			return Poll::Ready(Ok(0));
		}
		let op = match &mut self.reading {
			Some(op) => op,
			None => {
				let mut buf = self
					.read_buf
					.take()
					.unwrap_or_else(|| IoBuf::new(self.fd.clone(), READ_BUF));
				// A buffer lent to an owned read that was dropped came back in its place.
				if buf.data.len() < READ_BUF {
					buf.data.resize(READ_BUF, 0);
				}
				buf.start = 0;
				buf.end = 0;
				match tcp::recv(buf) {
					Ok(op) => self.reading.insert(op),
					Err(e) => return Poll::Ready(Err(e)),
				}
			}
		};
		let done = match op.poll(waiter) {
			Poll::Pending => return Poll::Pending,
			Poll::Ready(done) => done,
		};
		self.reading = None;
		let mut done = done?;
		let received = done.result();
		// The bytes before `end` (an owned read's, if it was dropped) are unread too.
		done.keep.end += *received.as_ref().unwrap_or(&0);
		let unread = done.keep.end - done.keep.start;
		self.read_buf = Some(done.keep);
		match received {
			Ok(0) if unread == 0 => Poll::Ready(Ok(0)),
			Ok(_) => self.poll_read(waiter, dst),
			Err(e) => Poll::Ready(Err(e)),
		}
	}

	/// Receives into `buf` in place (the kernel writes into it: nothing is copied), filling it
	/// from `filled`; with `exact`, until it is full. Returns the bytes in it and `buf`.
	async fn receive_owned(&mut self, mut buf: Vec<u8>, exact: bool) -> (io::Result<usize>, Vec<u8>) {
		let mut filled = 0;
		while filled < buf.len() {
			// Bytes a `poll_read` (or a dropped owned read) already took from the kernel, or a
			// receive of its in flight: those come through the stream's buffer, copied.
			let buffered = self.read_buf.as_ref().is_some_and(|b| b.start < b.end);
			let n = if buffered || self.reading.is_some() {
				self.read(&mut buf[filled..]).await
			} else {
				let mut lent = self.read_buf.take().unwrap_or_else(|| IoBuf::new(self.fd.clone(), 0));
				let own = std::mem::replace(&mut lent.data, buf);
				// What is filled already counts as received and unread, should this be dropped.
				lent.start = 0;
				lent.end = filled;
				match tcp::recv(lent) {
					Ok(op) => self.reading = Some(op),
					Err(e) => return (Err(e), Vec::new()),
				}
				let done = crate::wait(|w| self.reading.as_mut().expect("set above").poll(w)).await;
				self.reading = None;
				let Ok(done) = done else {
					return (Err(io::Error::other("kio: the runtime is gone")), Vec::new());
				};
				let received = done.result();
				let mut keep = done.keep;
				buf = std::mem::replace(&mut keep.data, own);
				keep.start = 0;
				keep.end = 0;
				self.read_buf = Some(keep);
				received
			};
			match n {
				Ok(0) if exact => return (Err(io::ErrorKind::UnexpectedEof.into()), buf),
				Ok(0) => break,
				Ok(n) => filled += n,
				Err(e) => return (Err(e), buf),
			}
			if !exact {
				break;
			}
		}
		(Ok(filled), buf)
	}

	/// Receives once into `buf` in place, the kernel writing into it (no copy): the bytes that
	/// came (at the front of `buf`; 0 at end of stream) and `buf`. Cancel safe: dropped, the
	/// receive stays in flight in the stream, and the next read returns its bytes.
	pub async fn read_owned(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
		self.receive_owned(buf, false).await
	}

	/// Fills all of `buf` in place (`UnexpectedEof` if the stream ends first), and returns it.
	/// Cancel safe as [`read_owned`](Self::read_owned): what was received is read next.
	pub async fn read_exact_owned(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
		let (result, buf) = self.receive_owned(buf, true).await;
		(result.map(drop), buf)
	}

	/// Sends all of `buf` from where it is (the kernel reads it in place: no copy into the
	/// stream's staging), after anything written before, and returns it once the kernel has
	/// every byte. Cancel safe: dropped, the send goes on in the background as a staged one
	/// would (a later write or flush reports its error).
	pub async fn write_all_owned(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
		if let Err(e) = self.flush().await {
			return (Err(e), buf);
		}
		if buf.is_empty() {
			return (Ok(()), buf);
		}
		let mut lent = self.spare.take().unwrap_or_else(|| IoBuf::new(self.fd.clone(), 0));
		let own = std::mem::replace(&mut lent.data, buf);
		lent.start = 0;
		lent.end = lent.data.len();
		match tcp::send(lent) {
			Ok(op) => self.sending = Some(op),
			Err(e) => return (Err(e), Vec::new()),
		}
		// Partial sends are resent by the background send; at its end the box is the spare.
		let result = self.flush().await;
		let Some(mut spare) = self.spare.take() else {
			return (result, Vec::new());
		};
		let buf = std::mem::replace(&mut spare.data, own);
		self.spare = Some(spare);
		(result, buf)
	}

	/// Reads some bytes into `dst`; 0 at end of stream.
	pub async fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
		crate::wait(|w| self.poll_read(w, dst)).await
	}

	/// Reads exactly `dst.len()` bytes (`UnexpectedEof` if the stream ends first).
	pub async fn read_exact(&mut self, dst: &mut [u8]) -> io::Result<()> {
		let mut at = 0;
		while at < dst.len() {
			match self.read(&mut dst[at..]).await? {
				0 => return Err(io::ErrorKind::UnexpectedEof.into()),
				n => at += n,
			}
		}
		Ok(())
	}

	/// Drives the background send. Ready(Ok) when no send is in flight (bytes may still be
	/// staged only if starting a send failed, which is reported).
	fn poll_sending(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		loop {
			if let Some(op) = &mut self.sending {
				let done = match op.poll(waiter) {
					Poll::Pending => return Poll::Pending,
					Poll::Ready(done) => done,
				};
				self.sending = None;
				let mut done = done?;
				match done.result() {
					Ok(n) => {
						done.keep.start += n;
						if done.keep.start < done.keep.end {
							// A partial send: send the rest.
							match tcp::send(done.keep) {
								Ok(op) => self.sending = Some(op),
								Err(e) => return Poll::Ready(Err(e)),
							}
							continue;
						}
						self.spare = Some(done.keep);
					}
					Err(e) => {
						self.spare = Some(done.keep);
						self.staged.clear();
						return Poll::Ready(Err(e));
					}
				}
			}
			if self.staged.is_empty() {
				return Poll::Ready(Ok(()));
			}
			let mut buf = self.spare.take().unwrap_or_else(|| IoBuf::new(self.fd.clone(), 0));
			buf.data.clear();
			std::mem::swap(&mut buf.data, &mut self.staged);
			buf.start = 0;
			buf.end = buf.data.len();
			match tcp::send(buf) {
				Ok(op) => self.sending = Some(op),
				Err(e) => return Poll::Ready(Err(e)),
			}
		}
	}

	/// Stages up to 64 KiB of `src` for sending and returns how much it took; waits only when the
	/// staging buffer is full.
	///
	/// Bytes staged while a send is in flight go out when the stream is next polled for writing
	/// ([`poll_write`](Self::poll_write) or [`poll_flush`](Self::poll_flush)): nothing sends them
	/// from the completion alone. A writer that stops writing, or waits on something else, flushes
	/// first (`poll_flush` registers it for the send's end), or its last bytes wait for its next
	/// write.
	pub fn poll_write(&mut self, waiter: &Waiter, src: &[u8]) -> Poll<io::Result<usize>> {
		if let Some(e) = self.write_error.take() {
			return Poll::Ready(Err(e));
		}
		if src.is_empty() {
			return Poll::Ready(Ok(0));
		}
		if let Poll::Ready(Err(e)) = self.poll_sending(waiter) {
			return Poll::Ready(Err(e));
		}
		let room = WRITE_BUF.saturating_sub(self.staged.len());
		if room == 0 {
			// A send is in flight (else `poll_sending` would have taken the staged bytes), and
			// `waiter` is registered on it.
			return Poll::Pending;
		}
		let n = room.min(src.len());
		self.staged.extend_from_slice(&src[..n]);
		if self.sending.is_none()
			&& let Poll::Ready(Err(e)) = self.poll_sending(waiter)
		{
			self.write_error = Some(e);
		}
		Poll::Ready(Ok(n))
	}

	/// Stages some of `src` for sending; returns how much.
	pub async fn write(&mut self, src: &[u8]) -> io::Result<usize> {
		crate::wait(|w| self.poll_write(w, src)).await
	}

	/// Writes all of `src` and waits until it is handed to the kernel.
	pub async fn write_all(&mut self, mut src: &[u8]) -> io::Result<()> {
		while !src.is_empty() {
			let n = self.write(src).await?;
			src = &src[n..];
		}
		self.flush().await
	}

	/// Ready once every written byte is handed to the kernel.
	pub fn poll_flush(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		if let Some(e) = self.write_error.take() {
			return Poll::Ready(Err(e));
		}
		self.poll_sending(waiter)
	}

	/// Waits until every written byte is handed to the kernel.
	pub async fn flush(&mut self) -> io::Result<()> {
		crate::wait(|w| self.poll_flush(w)).await
	}

	/// Flushes, then shuts the write side down (the peer reads end of stream).
	pub fn poll_shutdown(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		if self.shutdown.is_none() {
			match self.poll_flush(waiter) {
				Poll::Ready(Ok(())) => {}
				other => return other,
			}
			match tcp::shutdown(&self.fd, libc::SHUT_WR) {
				Ok(op) => self.shutdown = Some(op),
				Err(e) => return Poll::Ready(Err(e)),
			}
		}
		let op = self.shutdown.as_mut().expect("set above");
		match op.poll(waiter) {
			Poll::Pending => Poll::Pending,
			Poll::Ready(done) => {
				self.shutdown = None;
				Poll::Ready(done.and_then(|done| done.result().map(drop)))
			}
		}
	}

	/// Flushes and shuts the write side down.
	pub async fn shutdown(&mut self) -> io::Result<()> {
		crate::wait(|w| self.poll_shutdown(w)).await
	}
}

impl std::fmt::Debug for TcpStream {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("TcpStream").field("fd", &self.fd.raw()).finish()
	}
}
