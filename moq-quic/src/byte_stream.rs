//! An ordered byte stream over TCP, in the clear or under TLS: what QMux and the relay's HTTP
//! server run on. [`ByteStream`] has the four calls of kio's [`TcpStream`] (read, write, flush,
//! shutdown) with the same meaning whichever it is, so one QMux driver and one HTTP server serve
//! `ws://` and `wss://`, plaintext QMux and QMux over TLS.
//!
//! # TLS
//!
//! [`TlsStream`] is a rustls connection on a kio TCP stream, sans-io style: rustls reads from and
//! writes to the TCP stream through adapters that turn `Pending` into `WouldBlock`, so what it
//! holds between calls is its own (a record being read, plaintext not yet taken, records not yet
//! handed to the socket) and kio's (the socket's receive buffer and send staging). Bounded:
//! rustls takes no more ciphertext while it holds [`PLAINTEXT_LIMIT`] unread, and accepts no more
//! plaintext from a writer while [`PLAINTEXT_LIMIT`] of records wait for the socket;
//! [`TLS_COST`] is what one connection may hold in all at worst.
//!
//! The handshake completes in [`TlsStream::accept`] or [`TlsStream::connect`], before the stream
//! is handed out, so a writer never waits on a handshake that needs a reader. A peer's bad record
//! or alert fails the read with `InvalidData`, after our alert is sent.

use std::io::{self, Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;

use kio::Waiter;
use kio::net::TcpStream;

/// The plaintext rustls holds each way before it waits: one full TLS record.
pub const PLAINTEXT_LIMIT: usize = 16 << 10;

/// What a TLS connection holds at worst besides its TCP stream: rustls's state, a record being
/// deframed (up to 18 KiB with its overhead, in a buffer that may double), the plaintext read and
/// not taken, and the records written and not yet handed to the socket.
pub const TLS_COST: u64 = 96 << 10;

/// TCP in the clear, or under TLS.
#[derive(Debug)]
pub enum ByteStream {
	/// The bytes as they are.
	Plain(TcpStream),
	/// TLS, its handshake done.
	Tls(Box<TlsStream>),
}

impl From<TcpStream> for ByteStream {
	fn from(stream: TcpStream) -> Self {
		Self::Plain(stream)
	}
}

impl ByteStream {
	fn tcp(&self) -> &TcpStream {
		match self {
			Self::Plain(tcp) => tcp,
			Self::Tls(tls) => &tls.tcp,
		}
	}

	/// Whether it is under TLS.
	pub fn is_tls(&self) -> bool {
		matches!(self, Self::Tls(_))
	}

	/// The peer's address.
	pub fn peer_addr(&self) -> io::Result<SocketAddr> {
		self.tcp().peer_addr()
	}

	/// The local address.
	pub fn local_addr(&self) -> io::Result<SocketAddr> {
		self.tcp().local_addr()
	}

	/// Sets `TCP_NODELAY`.
	pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
		self.tcp().set_nodelay(on)
	}

	/// Sets the kernel's send buffer ([`TcpStream::set_send_buffer`]).
	pub fn set_send_buffer(&self, bytes: usize) -> io::Result<()> {
		self.tcp().set_send_buffer(bytes)
	}

	/// Reads into `dst`; Ready(0) is the end of the stream.
	pub fn poll_read(&mut self, waiter: &Waiter, dst: &mut [u8]) -> Poll<io::Result<usize>> {
		match self {
			Self::Plain(tcp) => tcp.poll_read(waiter, dst),
			Self::Tls(tls) => tls.poll_read(waiter, dst),
		}
	}

	/// Takes some of `src` for sending; what [`TcpStream::poll_write`] says of staged bytes holds
	/// here too: flush before waiting on something else.
	pub fn poll_write(&mut self, waiter: &Waiter, src: &[u8]) -> Poll<io::Result<usize>> {
		match self {
			Self::Plain(tcp) => tcp.poll_write(waiter, src),
			Self::Tls(tls) => tls.poll_write(waiter, src),
		}
	}

	/// Ready once every byte written is handed to the kernel.
	pub fn poll_flush(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		match self {
			Self::Plain(tcp) => tcp.poll_flush(waiter),
			Self::Tls(tls) => tls.poll_flush(waiter),
		}
	}

	/// Flushes and ends our side (under TLS, a close_notify first).
	pub fn poll_shutdown(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		match self {
			Self::Plain(tcp) => tcp.poll_shutdown(waiter),
			Self::Tls(tls) => tls.poll_shutdown(waiter),
		}
	}

	/// Reads some bytes; 0 at the end.
	pub async fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
		kio::wait(|w| self.poll_read(w, dst)).await
	}

	/// Writes all of `src` and waits until it is handed to the kernel.
	pub async fn write_all(&mut self, mut src: &[u8]) -> io::Result<()> {
		while !src.is_empty() {
			let n = kio::wait(|w| self.poll_write(w, src)).await?;
			src = &src[n..];
		}
		self.flush().await
	}

	/// Waits until every byte written is handed to the kernel.
	pub async fn flush(&mut self) -> io::Result<()> {
		kio::wait(|w| self.poll_flush(w)).await
	}

	/// Flushes and ends our side.
	pub async fn shutdown(&mut self) -> io::Result<()> {
		kio::wait(|w| self.poll_shutdown(w)).await
	}
}

/// TLS on a kio TCP stream (see the [module docs](self)).
pub struct TlsStream {
	tcp: TcpStream,
	tls: rustls::Connection,
	/// Bytes read from the socket before TLS took it over (the first bytes a server looked at to
	/// tell TLS from the rest), fed to rustls before the socket's.
	prefix: Vec<u8>,
	close_notify_sent: bool,
}

impl std::fmt::Debug for TlsStream {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("TlsStream")
			.field("tcp", &self.tcp)
			.field("alpn", &self.alpn())
			.finish()
	}
}

/// Reads for rustls from what was looked at first, then the socket; `WouldBlock` for `Pending`.
struct Incoming<'a> {
	prefix: &'a mut Vec<u8>,
	tcp: &'a mut TcpStream,
	waiter: &'a Waiter,
}

impl io::Read for Incoming<'_> {
	fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
		if !self.prefix.is_empty() {
			let n = buf.len().min(self.prefix.len());
			buf[..n].copy_from_slice(&self.prefix[..n]);
			self.prefix.drain(..n);
			return Ok(n);
		}
		match self.tcp.poll_read(self.waiter, buf) {
			Poll::Ready(result) => result,
			Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
		}
	}
}

/// Writes rustls's records into the socket's staging; `WouldBlock` when it is full.
struct Outgoing<'a> {
	tcp: &'a mut TcpStream,
	waiter: &'a Waiter,
}

impl io::Write for Outgoing<'_> {
	fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
		match self.tcp.poll_write(self.waiter, buf) {
			Poll::Ready(result) => result,
			Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
		}
	}

	fn flush(&mut self) -> io::Result<()> {
		Ok(())
	}
}

fn tls_error(error: rustls::Error) -> io::Error {
	io::Error::new(io::ErrorKind::InvalidData, error)
}

impl TlsStream {
	/// Serves TLS on `tcp`, of which `prefix` was already read, and completes the handshake.
	pub async fn accept(tcp: TcpStream, prefix: Vec<u8>, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
		let tls = rustls::ServerConnection::new(config).map_err(tls_error)?;
		Self::handshake(tcp, prefix, tls.into()).await
	}

	/// Opens TLS to `name` on `tcp` and completes the handshake.
	pub async fn connect(
		tcp: TcpStream,
		name: rustls::pki_types::ServerName<'static>,
		config: Arc<rustls::ClientConfig>,
	) -> io::Result<Self> {
		let tls = rustls::ClientConnection::new(config, name).map_err(tls_error)?;
		Self::handshake(tcp, Vec::new(), tls.into()).await
	}

	async fn handshake(tcp: TcpStream, prefix: Vec<u8>, mut tls: rustls::Connection) -> io::Result<Self> {
		tls.set_buffer_limit(Some(PLAINTEXT_LIMIT));
		let mut stream = Self {
			tcp,
			tls,
			prefix,
			close_notify_sent: false,
		};
		if let Err(error) = kio::wait(|w| stream.poll_handshake(w)).await {
			// Our alert, if rustls made one, goes out before the socket closes (the caller
			// bounds how long that may take).
			let _ = stream.flush().await;
			return Err(error);
		}
		Ok(stream)
	}

	fn poll_handshake(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		loop {
			let flushed = self.poll_flush(waiter);
			if let Poll::Ready(Err(e)) = flushed {
				return Poll::Ready(Err(e));
			}
			if !self.tls.is_handshaking() {
				return flushed;
			}
			match self.poll_receive(waiter) {
				Poll::Pending => return Poll::Pending,
				Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
				Poll::Ready(Ok(_)) => {}
				Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
			}
		}
	}

	/// Waits until every record is handed to the kernel.
	pub async fn flush(&mut self) -> io::Result<()> {
		kio::wait(|w| self.poll_flush(w)).await
	}

	/// The application protocol the handshake chose.
	pub fn alpn(&self) -> Option<&[u8]> {
		self.tls.alpn_protocol()
	}

	/// Takes ciphertext from the socket and opens it: the bytes taken (0 at the socket's end).
	fn poll_receive(&mut self, waiter: &Waiter) -> Poll<io::Result<usize>> {
		let mut incoming = Incoming {
			prefix: &mut self.prefix,
			tcp: &mut self.tcp,
			waiter,
		};
		let n = match self.tls.read_tls(&mut incoming) {
			Ok(n) => n,
			Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
			Err(e) => return Poll::Ready(Err(e)),
		};
		if let Err(error) = self.tls.process_new_packets() {
			// Our alert goes out, as far as the socket takes it at once.
			let _ = self.poll_flush(waiter);
			return Poll::Ready(Err(tls_error(error)));
		}
		Poll::Ready(Ok(n))
	}

	/// Hands rustls's records to the socket's staging: Ready once none are left.
	fn poll_push(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		while self.tls.wants_write() {
			let mut outgoing = Outgoing {
				tcp: &mut self.tcp,
				waiter,
			};
			match self.tls.write_tls(&mut outgoing) {
				Ok(_) => {}
				Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
				Err(e) => return Poll::Ready(Err(e)),
			}
		}
		Poll::Ready(Ok(()))
	}

	/// Reads plaintext into `dst`; Ready(0) at the peer's close_notify (a socket that ends
	/// without one is `UnexpectedEof`: the data may have been cut).
	pub fn poll_read(&mut self, waiter: &Waiter, dst: &mut [u8]) -> Poll<io::Result<usize>> {
		loop {
			match self.tls.reader().read(dst) {
				Ok(n) => return Poll::Ready(Ok(n)),
				Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
				Err(e) => return Poll::Ready(Err(e)),
			}
			match self.poll_receive(waiter) {
				Poll::Pending => return Poll::Pending,
				Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
				// The socket's end is the reader's to report, close_notify or not.
				Poll::Ready(Ok(_)) => {}
			}
		}
	}

	/// Takes up to [`PLAINTEXT_LIMIT`] of `src`, sealed into records for the socket; waits while
	/// that many wait for the socket.
	pub fn poll_write(&mut self, waiter: &Waiter, src: &[u8]) -> Poll<io::Result<usize>> {
		if src.is_empty() {
			return Poll::Ready(Ok(0));
		}
		let pushed = self.poll_push(waiter);
		if let Poll::Ready(Err(e)) = pushed {
			return Poll::Ready(Err(e));
		}
		let n = self.tls.writer().write(src)?;
		if n == 0 {
			// Full: `waiter` is registered on the socket's send, which makes room. With every
			// record handed over there is room, after the handshake.
			return match pushed {
				Poll::Pending => Poll::Pending,
				Poll::Ready(_) => Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
			};
		}
		// Into the socket's staging at once, as far as it takes them.
		if let Poll::Ready(Err(e)) = self.poll_push(waiter) {
			return Poll::Ready(Err(e));
		}
		Poll::Ready(Ok(n))
	}

	/// Ready once every record is handed to the kernel.
	pub fn poll_flush(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		match self.poll_push(waiter) {
			Poll::Ready(Ok(())) => self.tcp.poll_flush(waiter),
			other => {
				// Whatever is staged goes out meanwhile.
				let _ = self.tcp.poll_flush(waiter);
				other
			}
		}
	}

	/// Sends close_notify, flushes, and ends our side of the socket.
	pub fn poll_shutdown(&mut self, waiter: &Waiter) -> Poll<io::Result<()>> {
		if !self.close_notify_sent {
			self.close_notify_sent = true;
			self.tls.send_close_notify();
		}
		match self.poll_push(waiter) {
			Poll::Ready(Ok(())) => self.tcp.poll_shutdown(waiter),
			other => {
				let _ = self.tcp.poll_flush(waiter);
				other
			}
		}
	}
}
