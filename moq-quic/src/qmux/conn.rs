//! The handle an application holds ([`QmuxConnection`] and its stream halves), and the driver
//! that carries the [`Core`]'s record bodies over a WebSocket on a kio TCP stream.
//!
//! # The driver
//!
//! One task per connection, which alone touches the socket: it reads what the decoder has room
//! for (one frame and one message at most), hands each whole message to the core, answers pings,
//! runs the core's clock, and writes the core's record bodies one WebSocket message at a time,
//! only as fast as the socket takes them: the next record is built only once the last is in the
//! kernel, whose send buffer is kept small ([`SOCKET_SEND_BUFFER`]). So what waits for a slow
//! reader waits in the core's queues, in the send scheduler's order, where a newer group still
//! overtakes an older one and a reset drops what was not sent.
//!
//! When the connection ends (a close either way, a violation, the idle timeout, the socket's
//! end), the driver sends what the core still has (its close frame), a WebSocket Close, shuts
//! its side of the socket and returns.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use kio::Waiter;
use kio::net::TcpStream;
use kio::sync::{Budget, Charge};
use kio::time::Deadline;

use super::Version;
use super::core::{Config, Core, Dir, End, Side, StreamError, Violation};
use super::record::{self, RecordDecoder, RecordTooLarge};
use super::ws::{self, Decoder, Event, opcode};
use crate::byte_stream::{ByteStream, TLS_COST, TlsStream};

/// The kernel's send buffer for a QMux socket (it doubles it): about two records ahead of the
/// peer, so a slow reader's backlog stays in the core, droppable and in priority order.
pub const SOCKET_SEND_BUFFER: usize = 32 << 10;

/// The bytes the driver reads at a time.
const READ_CHUNK: usize = 16 << 10;

struct Shared {
	core: RefCell<Core>,
	remote: SocketAddr,
	/// The application protocol the sub-protocol or ALPN named (`moq-lite-05`), or the
	/// parameters agreed on (plaintext TCP), once known.
	protocol: RefCell<Option<String>>,
	/// Where its memory is charged, and the charge for its cost and receive window.
	memory: Option<(Budget, RefCell<Charge>)>,
}

/// What a QMux connection over a WebSocket may hold before anything is in its windows or queues,
/// at worst: the TCP stream's buffers in kio (16 KiB read; a record staged and one in flight,
/// 64 KiB of staging room), the driver's (16 KiB read, a record being written), the WebSocket
/// decoder's frame and message (64 KiB each, in buffers that may grow to twice what they hold:
/// 256 KiB) and the core's state.
pub const CONNECTION_COST: u64 = 384 << 10;

/// A QMux connection. Cheap to clone; its driver ends it when it ends.
#[derive(Clone)]
pub struct QmuxConnection(Rc<Shared>);

impl std::fmt::Debug for QmuxConnection {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("QmuxConnection")
			.field("remote", &self.0.remote)
			.field("protocol", &self.0.protocol.borrow())
			.finish()
	}
}

impl QmuxConnection {
	fn core(&self) -> std::cell::RefMut<'_, Core> {
		self.0.core.borrow_mut()
	}

	/// The peer's address.
	pub fn remote_address(&self) -> SocketAddr {
		self.0.remote
	}

	/// The application protocol negotiated with the version, if one was.
	pub fn protocol(&self) -> Option<String> {
		self.0.protocol.borrow().clone()
	}

	/// Waits for the peer's transport parameters where they name the application protocols
	/// (plaintext TCP): the first of ours the peer also named, then [`protocol`](Self::protocol)
	/// too; `None` if the connection ended first or none is in common. Elsewhere, the protocol
	/// named at the start.
	pub async fn negotiated(&self) -> Option<String> {
		if let Some(protocol) = self.protocol() {
			return Some(protocol);
		}
		let chosen = kio::wait(|w| self.core().poll_application_protocol(w)).await;
		self.0.protocol.borrow_mut().clone_from(&chosen);
		chosen
	}

	/// The QMux version spoken.
	pub fn version(&self) -> Version {
		self.core().version()
	}

	/// A new stream.
	pub fn poll_open(&self, waiter: &Waiter, dir: Dir) -> Poll<Result<u64, StreamError>> {
		self.core().poll_open(waiter, dir)
	}

	/// The next stream the peer opened.
	pub fn poll_accept(&self, waiter: &Waiter, dir: Dir) -> Poll<Result<u64, StreamError>> {
		self.core().poll_accept(waiter, dir)
	}

	/// The halves of stream `id`, as the application holds them.
	pub fn send_half(&self, id: u64) -> QmuxSend {
		QmuxSend {
			conn: self.clone(),
			id,
			ended: false,
		}
	}

	/// The receiving half of stream `id`.
	pub fn recv_half(&self, id: u64) -> QmuxRecv {
		QmuxRecv { conn: self.clone(), id }
	}

	/// Sends a datagram (dropped if the peer takes none, or it does not fit).
	pub fn send_datagram(&self, data: Bytes) -> Result<(), StreamError> {
		self.core().send_datagram(data)
	}

	/// The next datagram.
	pub fn poll_recv_datagram(&self, waiter: &Waiter) -> Poll<Result<Bytes, StreamError>> {
		self.core().poll_recv_datagram(waiter)
	}

	/// Closes with the application's `code`.
	pub fn close(&self, code: u64, reason: &str) {
		self.core().close(code, reason);
	}

	/// Ready once the connection ended, with why.
	pub fn poll_closed(&self, waiter: &Waiter) -> Poll<End> {
		self.core().poll_closed(waiter)
	}

	/// The budget the connection's memory is charged to, if it is: its cost and receive window,
	/// its send queues (once a driver turn), and what the application charges there.
	pub fn memory(&self) -> Option<Budget> {
		self.0.memory.as_ref().map(|(budget, _)| budget.clone())
	}

	/// Grows the connection's receive window to `bytes`, charging the growth to its memory;
	/// false (and the window unchanged) if the memory has no room for it.
	pub fn set_receive_window(&self, bytes: u64) -> bool {
		let mut core = self.core();
		let now = core.receive_window();
		if bytes <= now {
			return true;
		}
		if let Some((_, charge)) = &self.0.memory
			&& !charge.borrow_mut().grow(bytes - now)
		{
			return false;
		}
		core.set_receive_window(bytes);
		true
	}

	/// Bytes the send queues hold, and received bytes not yet read.
	pub fn held(&self) -> (u64, u64) {
		let core = self.core();
		(core.queued(), core.buffered())
	}
}

/// A stream's sending half. Dropped unfinished, it finishes after what is queued.
#[derive(Debug)]
pub struct QmuxSend {
	conn: QmuxConnection,
	id: u64,
	ended: bool,
}

impl QmuxSend {
	/// The stream's id.
	pub fn id(&self) -> u64 {
		self.id
	}

	/// Queues what it can of `data`; pending until all of it is queued.
	pub fn poll_write(&mut self, waiter: &Waiter, data: &mut Bytes) -> Poll<Result<(), StreamError>> {
		self.conn.core().poll_write(waiter, self.id, data)
	}

	/// Ends the stream after what is queued.
	pub fn finish(&mut self) -> Result<(), StreamError> {
		self.ended = true;
		self.conn.core().finish(self.id)
	}

	/// Resets the stream with `code`; what is queued is dropped.
	pub fn reset(&mut self, code: u64) {
		self.ended = true;
		self.conn.core().reset(self.id, code);
	}

	/// Higher goes first.
	pub fn set_priority(&mut self, priority: i32) {
		self.conn.core().set_priority(self.id, priority);
	}

	/// Ready with the peer's STOP_SENDING code.
	pub fn poll_stopped(&mut self, waiter: &Waiter) -> Poll<Result<u64, StreamError>> {
		self.conn.core().poll_stopped(waiter, self.id)
	}
}

impl Drop for QmuxSend {
	fn drop(&mut self) {
		let mut core = self.conn.core();
		if self.ended {
			core.release_send(self.id);
		} else {
			core.drop_send(self.id);
		}
	}
}

/// A stream's receiving half. Dropped before its end, it asks the peer to stop (code 0).
#[derive(Debug)]
pub struct QmuxRecv {
	conn: QmuxConnection,
	id: u64,
}

impl QmuxRecv {
	/// The stream's id.
	pub fn id(&self) -> u64 {
		self.id
	}

	/// The next bytes; `None` at the end.
	pub fn poll_read(&mut self, waiter: &Waiter) -> Poll<Result<Option<Bytes>, StreamError>> {
		self.conn.core().poll_read(waiter, self.id)
	}

	/// Asks the peer to stop sending, with `code`.
	pub fn stop(&mut self, code: u64) {
		self.conn.core().stop(self.id, code);
	}
}

impl Drop for QmuxRecv {
	fn drop(&mut self) {
		self.conn.core().drop_recv(self.id);
	}
}

/// Masks for a client's frames (RFC 6455 §5.3: a fresh, unpredictable key per frame, so a
/// browser's traffic cannot be shaped into what a proxy would cache): a xorshift generator
/// seeded from the system's randomness.
struct Masks(u64);

impl Masks {
	fn new() -> Self {
		use ring::rand::SecureRandom as _;
		let mut seed = [0u8; 8];
		let _ = ring::rand::SystemRandom::new().fill(&mut seed);
		Self(u64::from_le_bytes(seed) | 1)
	}

	fn next(&mut self) -> [u8; 4] {
		self.0 ^= self.0 << 13;
		self.0 ^= self.0 >> 7;
		self.0 ^= self.0 << 17;
		(self.0 as u32).to_le_bytes()
	}
}

/// How record bodies are carried on the byte stream.
enum Framing {
	/// One binary WebSocket message a body (RFC 6455), with the WebSocket's own pings and close.
	WebSocket {
		decoder: Decoder,
		/// Client frames are masked; a server's are not.
		masks: Option<Masks>,
		/// Pings to answer (the latest few).
		pongs: VecDeque<Bytes>,
		/// The status our Close carries.
		close_status: u16,
	},
	/// Records end to end (over TCP or TLS): a size, then the body.
	Records(RecordDecoder),
}

/// The driver of one connection.
struct Driver {
	conn: QmuxConnection,
	stream: ByteStream,
	framing: Framing,
	read: Box<[u8]>,
	/// The bytes being written, and how much of them the socket took.
	out: Vec<u8>,
	out_at: usize,
	/// The socket gave no more (its end, or an error).
	read_done: bool,
	/// Writing failed: nothing more goes out.
	write_failed: bool,
	/// The last bytes went out (a WebSocket Close; for records, the core's close frame); then
	/// the socket is shut and the driver returns.
	close_sent: bool,
	deadline: Deadline,
	/// The send queues, counted in the connection's memory once a turn.
	memory: Option<Charge>,
}

impl Driver {
	fn poll(&mut self, waiter: &Waiter) -> Poll<()> {
		loop {
			if let Poll::Ready(done) = self.turn(waiter) {
				return done;
			}
			let mut core = self.conn.core();
			core.driver.register(waiter);
			self.deadline.set(core.poll_timeout());
			drop(core);
			// A deadline already past is a turn's work, not a wait.
			if self.deadline.poll_elapsed(waiter).is_pending() {
				return Poll::Pending;
			}
		}
	}

	/// Works until nothing moves (`Pending`: the caller registers for what comes next), or until
	/// the driver has its answer (`Ready`: done, or its shutdown in flight).
	fn turn(&mut self, waiter: &Waiter) -> Poll<Poll<()>> {
		loop {
			let now = kio::time::now();
			let mut progress = self.poll_input(waiter, now);
			{
				let mut core = self.conn.core();
				if core.poll_timeout().is_some_and(|at| at <= now) {
					core.handle_timeout(now);
					progress = true;
				}
			}
			progress |= self.poll_output(waiter, now);
			if let Some(memory) = &mut self.memory {
				let queued = self.conn.core().queued();
				if !memory.resize(queued) {
					let more = queued - memory.amount();
					memory.force(more);
				}
			}
			if self.close_sent && self.out_at == self.out.len() {
				return Poll::Ready(self.stream.poll_shutdown(waiter).map(drop));
			}
			if self.write_failed && self.read_done {
				return Poll::Ready(Poll::Ready(()));
			}
			if !progress {
				return Poll::Pending;
			}
		}
	}

	/// Reads what the socket has and hands each whole body to the core; whether anything came.
	fn poll_input(&mut self, waiter: &Waiter, now: std::time::Instant) -> bool {
		if self.read_done {
			return false;
		}
		// What came with the handshake, or is left from the last read, first.
		self.take_bodies(now);
		if self.read_done {
			return true;
		}
		let room = match &self.framing {
			Framing::WebSocket { decoder, .. } => decoder.room(),
			Framing::Records(decoder) => decoder.room(),
		};
		let room = room.min(self.read.len());
		let n = match self.stream.poll_read(waiter, &mut self.read[..room]) {
			Poll::Pending => return false,
			Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
				self.read_done = true;
				self.conn.core().lost("the peer's byte stream ended");
				return true;
			}
			Poll::Ready(Ok(n)) => n,
		};
		match &mut self.framing {
			Framing::WebSocket { decoder, .. } => decoder.push(&self.read[..n]),
			Framing::Records(decoder) => decoder.push(&self.read[..n]),
		}
		self.take_bodies(now);
		true
	}

	/// Hands the whole bodies read to the core (a violation queues the core's close frame; the
	/// driver sends it and ends), and keeps a WebSocket's pings to answer.
	fn take_bodies(&mut self, now: std::time::Instant) {
		match &mut self.framing {
			Framing::Records(decoder) => loop {
				match decoder.next_record() {
					Ok(Some(body)) => {
						let _ = self.conn.core().receive(body, now);
					}
					Ok(None) => break,
					Err(RecordTooLarge(size)) => {
						self.read_done = true;
						self.conn.core().fail(Violation {
							code: super::code::FRAME_ENCODING_ERROR,
							reason: format!("a record of {size} bytes, past our max_record_size"),
						});
						break;
					}
				}
			},
			Framing::WebSocket {
				decoder,
				pongs,
				close_status,
				..
			} => loop {
				match decoder.next_event() {
					Ok(Some(Event::Message(body))) => {
						let _ = self.conn.core().receive(body, now);
					}
					Ok(Some(Event::Ping(payload))) => {
						if pongs.len() >= 4 {
							pongs.pop_front();
						}
						pongs.push_back(payload);
					}
					Ok(Some(Event::Pong)) => {}
					Ok(Some(Event::Close(_))) => {
						self.read_done = true;
						self.conn.core().lost("websocket closed");
						break;
					}
					Ok(None) => break,
					Err(error) => {
						self.read_done = true;
						*close_status = error.status();
						self.conn.core().fail(Violation {
							code: u64::from(error.status()),
							reason: error.to_string(),
						});
						break;
					}
				}
			},
		}
	}

	/// Writes what the socket takes: the bytes in progress, pongs, the core's record bodies, and
	/// at the end a WebSocket's Close. Whether anything went.
	fn poll_output(&mut self, waiter: &Waiter, now: std::time::Instant) -> bool {
		let mut progress = false;
		while !self.write_failed {
			if self.out_at < self.out.len() {
				match self.stream.poll_write(waiter, &self.out[self.out_at..]) {
					Poll::Ready(Ok(n)) => {
						self.out_at += n;
						progress = true;
						continue;
					}
					Poll::Ready(Err(_)) => {
						self.write_failed = true;
						self.conn.core().lost("the socket failed");
						return true;
					}
					Poll::Pending => return progress,
				}
			}
			// The next record only once the last is in the kernel: what waits for the socket waits
			// in the core, in priority order and droppable, not in the stream's staging buffer.
			match self.stream.poll_flush(waiter) {
				Poll::Ready(Ok(())) => {}
				Poll::Ready(Err(_)) => {
					self.write_failed = true;
					self.conn.core().lost("the socket failed");
					return true;
				}
				Poll::Pending => return progress,
			}
			self.out.clear();
			self.out_at = 0;
			if let Framing::WebSocket { masks, pongs, .. } = &mut self.framing
				&& let Some(payload) = pongs.pop_front()
			{
				ws::encode(opcode::PONG, &payload, masks.as_mut().map(Masks::next), &mut self.out);
				continue;
			}
			if self.close_sent {
				return progress;
			}
			let mut core = self.conn.core();
			if let Some(body) = core.poll_transmit(now) {
				drop(core);
				match &mut self.framing {
					Framing::WebSocket { masks, .. } => {
						ws::encode(opcode::BINARY, &body, masks.as_mut().map(Masks::next), &mut self.out);
					}
					Framing::Records(_) => record::encode(&body, &mut self.out),
				}
				continue;
			}
			if core.is_finished() {
				drop(core);
				self.close_sent = true;
				if let Framing::WebSocket {
					masks, close_status, ..
				} = &mut self.framing
				{
					let payload = ws::close_payload(*close_status, "");
					ws::encode(opcode::CLOSE, &payload, masks.as_mut().map(Masks::next), &mut self.out);
				}
				continue;
			}
			return progress;
		}
		progress
	}
}

/// How a connection's byte stream is framed, and what it already read.
pub enum Carrier<'a> {
	/// A WebSocket whose opening handshake is done; what was read past the handshake.
	WebSocket(&'a [u8]),
	/// Records over TCP or TLS; what was read before the connection began.
	Records(&'a [u8]),
}

/// A QMux connection on `stream`, carried as `carrier` says: `side` is ours (a WebSocket server
/// reads masked frames); `protocol` the application protocol the sub-protocol or ALPN named.
/// With `memory`, the connection's [`CONNECTION_COST`] (and [`TLS_COST`] under TLS) and receive
/// window are charged there from the start (counted whether or not it has room: check before
/// accepting it) and its send queues once a driver turn.
///
/// Returns the connection and its driver, which the caller spawns on this worker.
#[allow(clippy::too_many_arguments)]
pub fn serve(
	stream: ByteStream,
	carrier: Carrier<'_>,
	side: Side,
	version: Version,
	protocol: Option<String>,
	config: Config,
	remote: SocketAddr,
	memory: Option<Budget>,
) -> (QmuxConnection, impl Future<Output = ()> + use<>) {
	let _ = stream.set_nodelay(true);
	let _ = stream.set_send_buffer(SOCKET_SEND_BUFFER);
	let tls = if stream.is_tls() { TLS_COST } else { 0 };
	// Its cost and window, counted (the caller checked for room before it accepted it).
	let memory = memory.map(|budget| {
		let mut charge = budget.empty();
		charge.force(CONNECTION_COST + tls + config.params.max_data);
		(budget, RefCell::new(charge))
	});
	let queue_memory = memory.as_ref().map(|(budget, _)| budget.empty());
	let (framing, leftover) = match carrier {
		Carrier::WebSocket(leftover) => (
			Framing::WebSocket {
				decoder: Decoder::new(side == Side::Server),
				masks: (side == Side::Client).then(Masks::new),
				pongs: VecDeque::new(),
				close_status: ws::status::NORMAL,
			},
			leftover,
		),
		Carrier::Records(leftover) => (
			Framing::Records(RecordDecoder::new(config.params.max_record_size as usize)),
			leftover,
		),
	};
	let core = Core::new(side, version, config, kio::time::now());
	let conn = QmuxConnection(Rc::new(Shared {
		core: RefCell::new(core),
		remote,
		protocol: RefCell::new(protocol),
		memory,
	}));
	let mut driver = Driver {
		conn: conn.clone(),
		stream,
		framing,
		read: vec![0; READ_CHUNK].into_boxed_slice(),
		out: Vec::new(),
		out_at: 0,
		read_done: false,
		write_failed: false,
		close_sent: false,
		deadline: Deadline::new(None),
		memory: queue_memory,
	};
	match &mut driver.framing {
		Framing::WebSocket { decoder, .. } => decoder.push(leftover),
		Framing::Records(decoder) => decoder.push(leftover),
	}
	let run = async move {
		kio::wait(|waiter| driver.poll(waiter)).await;
	};
	(conn, run)
}

/// Why a WebSocket could not be opened to a QMux server.
#[derive(Debug)]
pub enum ConnectError {
	/// The socket failed.
	Io(io::Error),
	/// The server answered with something other than a switch to one of the offered
	/// sub-protocols (its status line, as far as it was read).
	Refused(String),
}

impl std::fmt::Display for ConnectError {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		match self {
			Self::Io(error) => write!(f, "websocket: {error}"),
			Self::Refused(answer) => write!(f, "websocket refused: {answer}"),
		}
	}
}

impl std::error::Error for ConnectError {}

/// The longest handshake answer read.
const MAX_ANSWER: usize = 8 << 10;

/// Opens QMux over a WebSocket on `stream`, a client: asks for `target` at `host`, offering
/// `protocols` (`qmux-01.moq-lite-05`, ...), and takes the server's choice. Returns the
/// connection and its driver, which the caller spawns on this worker.
pub async fn connect_websocket(
	mut stream: ByteStream,
	host: &str,
	target: &str,
	protocols: &[&str],
	config: Config,
) -> Result<(QmuxConnection, impl Future<Output = ()> + use<>), ConnectError> {
	use ring::rand::SecureRandom as _;
	let remote = stream.peer_addr().map_err(ConnectError::Io)?;
	let mut nonce = [0u8; 16];
	let _ = ring::rand::SystemRandom::new().fill(&mut nonce);
	let key = data_encoding::BASE64.encode(&nonce);
	stream
		.write_all(&ws::request(host, target, &key, protocols))
		.await
		.map_err(ConnectError::Io)?;
	let mut answer = Vec::new();
	let mut chunk = [0u8; 1024];
	let head = loop {
		if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
			break end + 4;
		}
		if answer.len() > MAX_ANSWER {
			return Err(ConnectError::Refused("an answer too long".into()));
		}
		let n = stream.read(&mut chunk).await.map_err(ConnectError::Io)?;
		if n == 0 {
			return Err(ConnectError::Refused(String::from_utf8_lossy(&answer).into_owned()));
		}
		answer.extend_from_slice(&chunk[..n]);
	};
	let text = String::from_utf8_lossy(&answer[..head]).into_owned();
	let mut lines = text.split("\r\n");
	let status = lines.next().unwrap_or_default();
	let header = |name: &str| {
		text.split("\r\n").skip(1).find_map(|line| {
			let (key, value) = line.split_once(':')?;
			key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
		})
	};
	let switched = status.split(' ').nth(1) == Some("101");
	let accepted = header("sec-websocket-accept") == Some(ws::accept_key(&key));
	let chosen = header("sec-websocket-protocol").filter(|p| protocols.contains(&p.as_str()));
	let (Some(chosen), true, true) = (chosen, switched, accepted) else {
		return Err(ConnectError::Refused(status.to_owned()));
	};
	let (version, app) = super::parse_protocol(&chosen).ok_or_else(|| ConnectError::Refused(chosen.clone()))?;
	let app = app.map(str::to_owned);
	Ok(serve(
		stream,
		Carrier::WebSocket(&answer[head..]),
		Side::Client,
		version,
		app,
		config,
		remote,
		None,
	))
}

/// Opens QMux over TLS on `stream`, a client: offers `protocols` (`qmux-01.moq-lite-05`, ...)
/// by ALPN to `name`, and takes the server's choice. Returns the connection and its driver.
pub async fn connect_tls(
	stream: TcpStream,
	name: rustls::pki_types::ServerName<'static>,
	tls: Arc<rustls::ClientConfig>,
	config: Config,
) -> Result<(QmuxConnection, impl Future<Output = ()> + use<>), ConnectError> {
	let remote = stream.peer_addr().map_err(ConnectError::Io)?;
	let stream = TlsStream::connect(stream, name, tls).await.map_err(ConnectError::Io)?;
	let chosen = stream.alpn().map(|alpn| String::from_utf8_lossy(alpn).into_owned());
	let Some((version, Some(app))) = chosen.as_deref().and_then(super::parse_protocol) else {
		return Err(ConnectError::Refused(format!("ALPN {chosen:?}")));
	};
	if version == Version::Qmux00 {
		return Err(ConnectError::Refused("qmux-00 has no records".into()));
	}
	let app = Some(app.to_owned());
	Ok(serve(
		ByteStream::Tls(Box::new(stream)),
		Carrier::Records(&[]),
		Side::Client,
		version,
		app,
		config,
		remote,
		None,
	))
}

/// Opens plaintext QMux (qmux-01, as the public implementations' `tcp://`) on `stream`, a
/// client offering `config.params.application_protocols`; the connection's
/// [`protocol`](QmuxConnection::protocol) is known once [`QmuxConnection::negotiated`] returns.
pub fn connect_tcp(
	stream: TcpStream,
	config: Config,
) -> io::Result<(QmuxConnection, impl Future<Output = ()> + use<>)> {
	let remote = stream.peer_addr()?;
	Ok(serve(
		stream.into(),
		Carrier::Records(&[]),
		Side::Client,
		Version::Qmux01,
		None,
		config,
		remote,
		None,
	))
}
