//! WebTransport over HTTP/3 on a [`Connection`] (ALPN `h3`): the server's [`accept`] and the
//! client's [`connect`], and the session ([`WebTransport`]); moq-net's `Transport` over it is in
//! `moq/webtransport.rs`, so a moq-lite session runs over it exactly as over raw QUIC.
//!
//! One session per connection (we advertise `WEBTRANSPORT_MAX_SESSIONS = 1`; browsers dial a
//! dedicated connection). Both sides open their control stream with SETTINGS at once (a browser
//! sends its CONNECT only after it has read ours). Two acceptor tasks classify every stream the
//! peer opens by its first bytes: the peer's control stream (SETTINGS first, then read to the
//! end; closing it is a connection error), its QPACK streams (read and dropped: there is no
//! dynamic table), WebTransport streams (`0x54` or `0x41`, then the session id: queued for the
//! session, their header stripped), the CONNECT request (a bidirectional stream whose first
//! frame is HEADERS), and anything else (stopped with `H3_STREAM_CREATION_ERROR`, the connection
//! unharmed). A stream for another session id is refused when the session takes it.
//!
//! Application error codes travel in HTTP/3's WebTransport code space
//! ([`h3::error_to_http3`]): stream resets, stops, and the connection close. Closing the session
//! sends CLOSE_WEBTRANSPORT_SESSION on the CONNECT stream, then closes the connection after a
//! short linger so the capsule can arrive; a peer's capsule (or the end of its CONNECT stream)
//! ends the session with the peer's code. What a peer makes us hold here is bounded by constants
//! per connection: its SETTINGS (4 KiB), its CONNECT's field section ([`h3::MAX_FIELD_SECTION`],
//! one), capsules on the CONNECT stream ([`h3::MAX_FRAME`]), and a stream header's few bytes per
//! stream (streams bounded by the connection's stream limits); every other frame (reserved ones,
//! GOAWAY) is dropped as it arrives, never held.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use kio::Waiter;
use kio::sync::{Producer, Queue};
use moq_net::transport::TransportError;
use quinn_proto::{ConnectionError, StreamId, VarInt};

use crate::connection::{Connection, StreamError};
use crate::h3::{self, ConnectRequest, ConnectResponse, Settings, code, frame_type, stream_type};
use crate::moq::closed_code;
use crate::stream::{RecvStream, SendStream};

/// Why a WebTransport session did not open.
#[derive(Debug)]
pub enum Error {
	/// The connection or a stream failed.
	Stream(StreamError),
	/// The peer's bytes broke HTTP/3; the connection was closed with the code.
	Protocol(h3::Error),
	/// The server answered the CONNECT with this status.
	Status(u16),
	/// The server's SETTINGS do not offer WebTransport.
	NotSupported,
	/// The connection closed before the session opened.
	Closed,
}

impl std::fmt::Display for Error {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		match self {
			Self::Stream(err) => write!(f, "{err}"),
			Self::Protocol(err) => write!(f, "HTTP/3: {err}"),
			Self::Status(status) => write!(f, "the server answered {status}"),
			Self::NotSupported => f.write_str("the server does not offer WebTransport"),
			Self::Closed => f.write_str("the connection closed"),
		}
	}
}

impl std::error::Error for Error {}

impl From<StreamError> for Error {
	fn from(err: StreamError) -> Self {
		Self::Stream(err)
	}
}

/// How long a closing side keeps the connection for its last capsule or response to arrive: three
/// round trips, within these bounds.
const LINGER_MIN: Duration = Duration::from_millis(50);
const LINGER_MAX: Duration = Duration::from_secs(1);

/// The peer's SETTINGS frame may be this long: a dozen settings take tens of bytes, Chromium's
/// with GREASE about 60. Other frames on the control stream, and reserved frames anywhere, are
/// dropped as they arrive, never held.
const MAX_SETTINGS: usize = 4 << 10;

/// Where a [`Reader`]'s bytes come from: a stream, or a test's chunks.
trait Chunks {
	/// The next chunk; `None` at the end.
	async fn next_chunk(&mut self) -> Result<Option<Bytes>, StreamError>;
}

impl Chunks for RecvStream {
	async fn next_chunk(&mut self) -> Result<Option<Bytes>, StreamError> {
		self.read().await
	}
}

/// A stream's bytes as they arrive, parsed from the front.
///
/// Parsed bytes are passed over (`pos`), not removed: they are dropped only when the next chunk
/// is appended, and what is left then is less than the item being waited for. A chunk can be as
/// long as the stream's receive window (quinn-proto merges a stream's small buffered chunks into
/// one, as when a peer fills a gap it left before many tiny frames): removing each varint from
/// the front as it was parsed moved the rest of the chunk every time, quadratic in its length
/// (1 MiB of two-byte reserved frames: two varints a frame, 2 × 524,288 moves of half a MiB on
/// average, 5.5e11 bytes).
struct Reader<S = RecvStream> {
	stream: S,
	buf: Vec<u8>,
	/// `buf[..pos]` is parsed.
	pos: usize,
	/// Bytes moved to the front of `buf` so far: what the test of linearity counts.
	#[cfg(test)]
	moved: usize,
}

impl<S: Chunks> Reader<S> {
	fn new(stream: S) -> Self {
		Self {
			stream,
			buf: Vec::new(),
			pos: 0,
			#[cfg(test)]
			moved: 0,
		}
	}

	/// What is read and not parsed yet.
	fn unparsed(&self) -> &[u8] {
		&self.buf[self.pos..]
	}

	/// Reads one more chunk; false at the end of the stream.
	async fn fill(&mut self) -> Result<bool, StreamError> {
		match self.stream.next_chunk().await? {
			Some(chunk) => {
				self.compact();
				self.buf.extend_from_slice(&chunk);
				Ok(true)
			}
			None => Ok(false),
		}
	}

	/// Drops what is parsed, moving what is not to the front.
	fn compact(&mut self) {
		if self.pos == 0 {
			return;
		}
		#[cfg(test)]
		{
			self.moved += self.buf.len() - self.pos;
		}
		self.buf.drain(..self.pos);
		self.pos = 0;
	}

	/// Drops everything read so far.
	fn discard(&mut self) {
		self.buf.clear();
		self.pos = 0;
	}

	/// The next varint; `None` at the end of the stream.
	async fn varint(&mut self) -> Result<Option<u64>, StreamError> {
		loop {
			let mut view = self.unparsed();
			if let Ok(value) = h3::get_varint(&mut view) {
				self.pos = self.buf.len() - view.len();
				return Ok(Some(value));
			}
			if !self.fill().await? {
				return Ok(None);
			}
		}
	}

	/// The next frame's type and length; `None` at the end of the stream.
	async fn header(&mut self) -> Result<Option<(u64, u64)>, StreamError> {
		let Some(kind) = self.varint().await? else {
			return Ok(None);
		};
		Ok(self.varint().await?.map(|len| (kind, len)))
	}

	/// `len` bytes of payload, held until all have come; more than `limit` is refused before any
	/// is held. `None` at the end of the stream.
	async fn payload(&mut self, len: u64, limit: usize) -> Result<Option<Vec<u8>>, ReadError> {
		if len > limit as u64 {
			return Err(ReadError::Protocol(h3::Error::TooLong));
		}
		let len = len as usize;
		while self.unparsed().len() < len {
			if !self.fill().await? {
				return Ok(None);
			}
		}
		let payload = self.unparsed()[..len].to_vec();
		self.pos += len;
		Ok(Some(payload))
	}

	/// Drops `len` bytes as they arrive, holding none of them; false at the end of the stream.
	async fn skip(&mut self, mut len: u64) -> Result<bool, StreamError> {
		loop {
			let take = len.min(self.unparsed().len() as u64) as usize;
			self.pos += take;
			len -= take as u64;
			if len == 0 {
				return Ok(true);
			}
			// All read is parsed: nothing to keep.
			self.discard();
			if !self.fill().await? {
				return Ok(false);
			}
		}
	}

	/// The stream, and the bytes read past what was parsed.
	fn into_parts(mut self) -> (S, Bytes) {
		self.compact();
		(self.stream, Bytes::from(self.buf))
	}
}

enum ReadError {
	Stream(StreamError),
	Protocol(h3::Error),
}

impl From<StreamError> for ReadError {
	fn from(err: StreamError) -> Self {
		Self::Stream(err)
	}
}

/// A bidirectional stream the peer opened as a request: its halves and its decoded fields.
type Incoming = (SendStream, RecvStream, Result<Vec<(String, String)>, h3::Error>);

/// What the acceptors share with the session.
pub(crate) struct Shared {
	pub(crate) conn: Connection,
	server: bool,
	/// Our control stream: it must stay open as long as the connection.
	control: RefCell<Option<SendStream>>,
	/// Whether the peer's control stream came (a second one is an error).
	peer_control: Cell<bool>,
	/// The peer's SETTINGS, once read.
	settings: Producer<Option<Settings>>,
	/// CONNECT requests (server side), at most one taken.
	requests: Queue<Incoming>,
	/// Whether a request was queued: later ones are refused.
	requested: Cell<bool>,
	/// WebTransport streams: the session id, the stream(s), bytes read past the header.
	pub(crate) uni: Queue<(u64, RecvStream, Bytes)>,
	pub(crate) bi: Queue<(u64, SendStream, RecvStream, Bytes)>,
	/// The session's code when the peer ended it (capsule or end of the CONNECT stream).
	pub(crate) peer_code: Cell<Option<u64>>,
}

impl Shared {
	fn new(conn: &Connection, server: bool) -> Rc<Self> {
		Rc::new(Self {
			conn: conn.clone(),
			server,
			control: RefCell::new(None),
			peer_control: Cell::new(false),
			settings: Producer::new(None),
			requests: Queue::unbounded(),
			requested: Cell::new(false),
			uni: Queue::unbounded(),
			bi: Queue::unbounded(),
			peer_code: Cell::new(None),
		})
	}

	/// Opens our control stream with SETTINGS and starts the acceptors.
	async fn start(self: &Rc<Self>) -> Result<(), Error> {
		let mut control = self.conn.open_uni().await?;
		let mut bytes = Vec::new();
		h3::put_varint(&mut bytes, stream_type::CONTROL);
		Settings::webtransport().encode(&mut bytes);
		control.write(Bytes::from(bytes)).await?;
		*self.control.borrow_mut() = Some(control);
		drop(kio::spawn(accept_uni(self.clone())));
		drop(kio::spawn(accept_bi(self.clone())));
		Ok(())
	}

	/// Waits for the peer's SETTINGS.
	async fn peer_settings(&self) -> Result<Settings, Error> {
		let settings = self.settings.consume();
		settings
			.wait(|s| match s {
				Some(s) => Poll::Ready(s.clone()),
				None => Poll::Pending,
			})
			.await
			.map_err(|_| Error::Closed)
	}

	/// Closes the connection for a protocol error of the peer's.
	fn fail(&self, code: u64, reason: &str) {
		self.conn.close(code, reason);
		self.end();
	}

	/// No more streams will come.
	pub(crate) fn end(&self) {
		self.requests.close();
		self.uni.close();
		self.bi.close();
		let _ = self.settings.close();
	}
}

/// Accepts the peer's unidirectional streams until the connection ends.
async fn accept_uni(shared: Rc<Shared>) {
	while let Ok(stream) = shared.conn.accept_uni().await {
		drop(kio::spawn(classify_uni(shared.clone(), stream)));
	}
	shared.end();
}

/// Accepts the peer's bidirectional streams until the connection ends.
async fn accept_bi(shared: Rc<Shared>) {
	while let Ok((send, recv)) = shared.conn.accept_bi().await {
		drop(kio::spawn(classify_bi(shared.clone(), send, recv)));
	}
	shared.end();
}

async fn classify_uni(shared: Rc<Shared>, stream: RecvStream) {
	let mut reader = Reader::new(stream);
	let Ok(Some(kind)) = reader.varint().await else { return };
	match kind {
		stream_type::CONTROL => {
			if shared.peer_control.replace(true) {
				return shared.fail(code::STREAM_CREATION_ERROR, "a second control stream");
			}
			control_stream(&shared, reader).await;
		}
		stream_type::QPACK_ENCODER | stream_type::QPACK_DECODER => {
			// No dynamic table: there is nothing to read in them, but they must stay open.
			while let Ok(true) = reader.fill().await {
				reader.discard();
			}
			if shared.conn.poll_closed(&noop_waiter()).is_pending() {
				shared.fail(code::CLOSED_CRITICAL_STREAM, "a QPACK stream closed");
			}
		}
		stream_type::PUSH => shared.fail(code::STREAM_CREATION_ERROR, "a push stream"),
		stream_type::WEBTRANSPORT_UNI => {
			let Ok(Some(session)) = reader.varint().await else {
				return;
			};
			let (stream, rest) = reader.into_parts();
			let _ = shared.uni.try_push((session, stream, rest));
		}
		// Unknown and reserved types are ignored (RFC 9114 §6.2).
		_ => reader.stream.stop(code::STREAM_CREATION_ERROR),
	}
}

/// The peer's control stream: SETTINGS first, then frames we have no use for, never its end.
async fn control_stream(shared: &Shared, mut reader: Reader) {
	let closed = |shared: &Shared| {
		if shared.conn.poll_closed(&noop_waiter()).is_pending() {
			shared.fail(code::CLOSED_CRITICAL_STREAM, "the control stream closed");
		}
	};
	let payload = match reader.header().await {
		Ok(Some((frame_type::SETTINGS, len))) => reader.payload(len, MAX_SETTINGS).await,
		Ok(Some(_)) => return shared.fail(code::MISSING_SETTINGS, "the control stream did not start with SETTINGS"),
		Ok(None) | Err(_) => return closed(shared),
	};
	match payload {
		Ok(Some(payload)) => match Settings::decode(&payload) {
			Ok(settings) => {
				if let Ok(mut slot) = shared.settings.write() {
					*slot = Some(settings);
				}
			}
			Err(err) => return shared.fail(err.code(), "malformed SETTINGS"),
		},
		Ok(None) | Err(ReadError::Stream(_)) => return closed(shared),
		Err(ReadError::Protocol(err)) => return shared.fail(err.code(), "SETTINGS too long"),
	}
	loop {
		match reader.header().await {
			Ok(Some((frame_type::SETTINGS | frame_type::DATA | frame_type::HEADERS, _))) => {
				return shared.fail(code::FRAME_UNEXPECTED, "a frame not allowed on the control stream");
			}
			// GOAWAY and anything unknown: nothing to do for one session; dropped unheld.
			Ok(Some((_, len))) => {
				if !matches!(reader.skip(len).await, Ok(true)) {
					return closed(shared);
				}
			}
			Ok(None) | Err(_) => return closed(shared),
		}
	}
}

async fn classify_bi(shared: Rc<Shared>, mut send: SendStream, recv: RecvStream) {
	let mut reader = Reader::new(recv);
	loop {
		let Ok(Some(kind)) = reader.varint().await else { return };
		match kind {
			stream_type::WEBTRANSPORT_BIDI => {
				let Ok(Some(session)) = reader.varint().await else {
					return;
				};
				let (recv, rest) = reader.into_parts();
				let _ = shared.bi.try_push((session, send, recv, rest));
				return;
			}
			frame_type::HEADERS if shared.server => {
				// A request: one session per connection, so only the first is heard.
				if shared.requested.replace(true) {
					send.reset(code::REQUEST_REJECTED);
					reader.stream.stop(code::REQUEST_REJECTED);
					return;
				}
				let Ok(Some(len)) = reader.varint().await else { return };
				let fields = match reader.payload(len, h3::MAX_FIELD_SECTION).await {
					Ok(Some(block)) => h3::decode_fields(&block),
					Ok(None) | Err(ReadError::Stream(_)) => return,
					Err(ReadError::Protocol(err)) => Err(err),
				};
				let (recv, _) = reader.into_parts();
				let _ = shared.requests.try_push((send, recv, fields));
				return;
			}
			// Reserved frame types before the request are skipped (RFC 9114 §7.2.8), unheld.
			kind if h3::is_grease(kind) => {
				let Ok(Some(len)) = reader.varint().await else { return };
				if !matches!(reader.skip(len).await, Ok(true)) {
					return;
				}
			}
			_ => {
				send.reset(code::FRAME_UNEXPECTED);
				reader.stream.stop(code::FRAME_UNEXPECTED);
				return;
			}
		}
	}
}

/// A WebTransport CONNECT a server received: answer it with [`Request::accept`] or
/// [`Request::reject`].
pub struct Request {
	/// What the client asked for.
	pub connect: ConnectRequest,
	shared: Rc<Shared>,
	send: SendStream,
	recv: RecvStream,
}

/// Waits for a client's WebTransport CONNECT on a connection whose ALPN is `h3`: sends our
/// SETTINGS, reads the client's, reads the request. A malformed request is answered 400 and
/// the connection closed (with `H3_MESSAGE_ERROR` or the decoding error's code).
pub async fn accept(conn: &Connection) -> Result<Request, Error> {
	let shared = Shared::new(conn, true);
	shared.start().await?;
	shared.peer_settings().await?;
	let Some((mut send, recv, fields)) = shared.requests.pop().await else {
		return Err(Error::Closed);
	};
	let connect = fields.and_then(|fields| ConnectRequest::from_fields(&fields));
	match connect {
		Ok(connect) => Ok(Request {
			connect,
			shared,
			send,
			recv,
		}),
		Err(err) => {
			respond(&mut send, 400, None);
			let _ = send.finish();
			linger_close(&shared.conn, err.code(), "malformed CONNECT");
			shared.end();
			Err(Error::Protocol(err))
		}
	}
}

impl Request {
	/// Opens the session: 200, with the sub-protocol chosen (it must be one the client offered).
	pub fn accept(mut self, protocol: Option<&str>) -> WebTransport {
		debug_assert!(protocol.is_none_or(|p| self.connect.protocols.iter().any(|o| o == p)));
		respond(&mut self.send, 200, protocol);
		WebTransport::open(self.shared, self.send, self.recv)
	}

	/// Refuses the session with `status` (4xx), then closes the connection with `code`.
	pub fn reject(mut self, status: u16, code: u64, reason: &str) {
		respond(&mut self.send, status, None);
		let _ = self.send.finish();
		linger_close(&self.shared.conn, code, reason);
		self.shared.end();
	}
}

fn respond(send: &mut SendStream, status: u16, protocol: Option<&str>) {
	let mut bytes = Vec::new();
	ConnectResponse {
		status,
		protocol: protocol.map(str::to_owned),
	}
	.encode(&mut bytes);
	// A request stream has written nothing yet: its buffer takes a response at once.
	let _ = send.poll_write(&noop_waiter(), &mut Bytes::from(bytes));
}

/// Opens a WebTransport session on a client connection whose ALPN is `h3`: SETTINGS both ways,
/// then the CONNECT; the server's answer comes back with the session.
pub async fn connect(conn: &Connection, request: &ConnectRequest) -> Result<(WebTransport, ConnectResponse), Error> {
	let shared = Shared::new(conn, false);
	shared.start().await?;
	if !shared.peer_settings().await?.supports_webtransport() {
		conn.close(code::NO_ERROR, "no WebTransport");
		return Err(Error::NotSupported);
	}
	let (mut send, recv) = conn.open_bi().await?;
	let mut bytes = Vec::new();
	request.encode(&mut bytes);
	send.write(Bytes::from(bytes)).await?;
	let mut reader = Reader::new(recv);
	let response = loop {
		let frame = match reader.header().await {
			Ok(Some((frame_type::HEADERS, len))) => reader
				.payload(len, h3::MAX_FIELD_SECTION)
				.await
				.map(|block| block.map(|block| (frame_type::HEADERS, block))),
			Ok(Some((kind, len))) if h3::is_grease(kind) => match reader.skip(len).await {
				Ok(true) => continue,
				Ok(false) => Ok(None),
				Err(err) => Err(ReadError::Stream(err)),
			},
			Ok(Some((kind, _))) => Ok(Some((kind, Vec::new()))),
			Ok(None) => Ok(None),
			Err(err) => Err(ReadError::Stream(err)),
		};
		match frame {
			Ok(Some((frame_type::HEADERS, block))) => {
				match h3::decode_fields(&block).and_then(|fields| ConnectResponse::from_fields(&fields)) {
					Ok(response) => break response,
					Err(err) => {
						shared.fail(err.code(), "malformed response");
						return Err(Error::Protocol(err));
					}
				}
			}
			Ok(Some(_)) => {
				shared.fail(code::FRAME_UNEXPECTED, "a frame before the response");
				return Err(Error::Protocol(h3::Error::Message("a frame before the response")));
			}
			Ok(None) => return Err(Error::Closed),
			Err(ReadError::Stream(err)) => return Err(Error::Stream(err)),
			Err(ReadError::Protocol(err)) => {
				shared.fail(err.code(), "response too long");
				return Err(Error::Protocol(err));
			}
		}
	};
	if !(200..300).contains(&response.status) {
		conn.close(code::NO_ERROR, "refused");
		return Err(Error::Status(response.status));
	}
	let (recv, _) = reader.into_parts();
	Ok((WebTransport::open(shared, send, recv), response))
}

/// Closes `conn` with `code` after a linger (three round trips, 50 ms to 1 s), so what was just
/// written (a response, a close capsule) can arrive first.
pub(crate) fn linger_close(conn: &Connection, code: u64, reason: &str) {
	let conn = conn.clone();
	let reason = reason.to_owned();
	let linger = (conn.rtt() * 3).clamp(LINGER_MIN, LINGER_MAX);
	drop(kio::spawn(async move {
		let closed = conn.closed();
		let timer = kio::time::sleep(linger);
		let mut closed = std::pin::pin!(closed);
		let mut timer = std::pin::pin!(timer);
		std::future::poll_fn(|cx| {
			if closed.as_mut().poll(cx).is_ready() || timer.as_mut().poll(cx).is_ready() {
				Poll::Ready(())
			} else {
				Poll::Pending
			}
		})
		.await;
		conn.close(code, &reason);
	}));
}

pub(crate) fn noop_waiter() -> Waiter {
	Waiter::new(Waker::noop().clone())
}

/// The session id: the CONNECT stream's id.
fn session_id(id: StreamId) -> u64 {
	VarInt::from(id).into_inner()
}

pub(crate) struct Session {
	pub(crate) shared: Rc<Shared>,
	pub(crate) id: u64,
	/// The CONNECT stream's send half: the close capsule goes there.
	pub(crate) connect: RefCell<Option<SendStream>>,
	pub(crate) closing: Cell<bool>,
}

/// moq-net's [`Transport`](moq_net::transport::Transport) over one WebTransport session. Cloning shares the session.
#[derive(Clone)]
pub struct WebTransport(pub(crate) Rc<Session>);

impl WebTransport {
	fn open(shared: Rc<Shared>, send: SendStream, recv: RecvStream) -> Self {
		let id = session_id(send.id());
		drop(kio::spawn(watch_connect_stream(shared.clone(), recv)));
		Self(Rc::new(Session {
			shared,
			id,
			connect: RefCell::new(Some(send)),
			closing: Cell::new(false),
		}))
	}

	/// The QUIC connection under the session.
	pub fn connection(&self) -> &Connection {
		&self.0.shared.conn
	}

	/// The session id (the CONNECT stream's id).
	pub fn id(&self) -> u64 {
		self.0.id
	}

	pub(crate) fn header(&self, kind: u64) -> Bytes {
		let mut header = Vec::with_capacity(4);
		h3::put_varint(&mut header, kind);
		h3::put_varint(&mut header, self.0.id);
		Bytes::from(header)
	}

	/// The code the session ended with, once the connection has.
	pub(crate) fn ended(&self, error: ConnectionError) -> u64 {
		match (&error, self.0.shared.peer_code.get()) {
			(_, Some(code)) => code,
			(ConnectionError::ApplicationClosed(close), None) => {
				let code = close.error_code.into_inner();
				h3::error_from_http3(code).map_or(code, u64::from)
			}
			_ => closed_code(&error),
		}
	}

	pub(crate) fn closed_now(&self) -> TransportError {
		match self.0.shared.conn.poll_closed(&noop_waiter()) {
			Poll::Ready(error) => TransportError::Closed(self.ended(error)),
			Poll::Pending => TransportError::Closed(self.0.shared.peer_code.get().unwrap_or(0)),
		}
	}
}

/// The CONNECT stream after the response: capsules in DATA frames. CLOSE_WEBTRANSPORT_SESSION,
/// or the stream's end, ends the session with the peer's code.
async fn watch_connect_stream(shared: Rc<Shared>, recv: RecvStream) {
	let mut reader = Reader::new(recv);
	let mut capsules: Vec<u8> = Vec::new();
	let code = loop {
		let frame = match reader.header().await {
			Ok(Some((frame_type::DATA, len))) => reader
				.payload(len, h3::MAX_FRAME)
				.await
				.map(|data| data.map(|data| (frame_type::DATA, data))),
			// Other frames (reserved ones) are dropped unheld.
			Ok(Some((_, len))) => match reader.skip(len).await {
				Ok(true) => continue,
				Ok(false) => Ok(None),
				Err(err) => Err(ReadError::Stream(err)),
			},
			Ok(None) => Ok(None),
			Err(err) => Err(ReadError::Stream(err)),
		};
		match frame {
			Ok(Some((frame_type::DATA, data))) => {
				capsules.extend_from_slice(&data);
				if capsules.len() > h3::MAX_FRAME {
					return shared.fail(code::FRAME_ERROR, "a capsule too long");
				}
				let mut view = capsules.as_slice();
				let mut close = None;
				while let Ok((kind, payload)) = h3::get_capsule(&mut view) {
					if kind == h3::CLOSE_SESSION {
						close = Some(h3::close_code(payload).map(u64::from).unwrap_or(0));
						break;
					}
				}
				if let Some(code) = close {
					break code;
				}
				let used = capsules.len() - view.len();
				capsules.drain(..used);
			}
			Ok(Some(_)) => {}
			Ok(None) => break 0,
			Err(ReadError::Stream(_)) => return,
			Err(ReadError::Protocol(err)) => return shared.fail(err.code(), "a frame too long"),
		}
	};
	shared.peer_code.set(Some(code));
	shared
		.conn
		.close(h3::error_to_http3(code as u32), "session closed by the peer");
	shared.end();
}

#[cfg(test)]
mod tests {
	use std::collections::VecDeque;

	use super::*;

	/// Chunks handed out in order, then the end.
	struct Given(VecDeque<Bytes>);

	impl Chunks for Given {
		async fn next_chunk(&mut self) -> Result<Option<Bytes>, StreamError> {
			Ok(self.0.pop_front())
		}
	}

	fn reader(chunks: impl IntoIterator<Item = Vec<u8>>) -> Reader<Given> {
		Reader::new(Given(chunks.into_iter().map(Bytes::from).collect()))
	}

	/// What a control stream after its SETTINGS is parsed into: each frame's type and length,
	/// the payload of SETTINGS-typed ones (kept; the others are skipped), and the stream's bytes
	/// after the frame of type 0x2a.
	async fn frames(reader: Reader<Given>) -> (Vec<(u64, u64)>, Vec<Vec<u8>>, Bytes) {
		let (headers, kept, rest, _) = frames_moving(reader).await;
		(headers, kept, rest)
	}

	/// [`frames`], and how many bytes the reader moved.
	async fn frames_moving(mut reader: Reader<Given>) -> (Vec<(u64, u64)>, Vec<Vec<u8>>, Bytes, usize) {
		let (mut headers, mut kept) = (Vec::new(), Vec::new());
		while let Ok(Some((kind, len))) = reader.header().await {
			headers.push((kind, len));
			if kind == frame_type::SETTINGS {
				match reader.payload(len, MAX_SETTINGS).await {
					Ok(Some(payload)) => kept.push(payload),
					_ => break,
				}
			} else if !matches!(reader.skip(len).await, Ok(true)) {
				break;
			}
			// A frame of type 0x2a ends the parse, with what follows it left over.
			if kind == 0x2a {
				break;
			}
		}
		let moved = reader.moved;
		// What was read past the parse, and what was not read yet.
		let (unread, read_past) = reader.into_parts();
		let rest: Vec<u8> = [read_past].into_iter().chain(unread.0).flatten().collect();
		(headers, kept, Bytes::from(rest), moved)
	}

	fn run<T>(future: impl Future<Output = T>) -> T {
		kio::Builder::single().build().unwrap().block_on(future)
	}

	#[test]
	fn frames_parse_the_same_however_the_stream_is_cut() {
		let mut bytes = Vec::new();
		h3::put_frame(&mut bytes, 0x21, &[]);
		h3::put_frame(&mut bytes, frame_type::SETTINGS, &[1, 2, 3, 4, 5]);
		h3::put_frame(&mut bytes, 0x21, &[9; 300]);
		h3::put_frame(&mut bytes, 0x1234_5678, &[8; 70]);
		h3::put_frame(&mut bytes, frame_type::SETTINGS, &[6; 200]);
		h3::put_frame(&mut bytes, 0x2a, &[7, 7]);
		bytes.extend_from_slice(b"rest");
		let whole = run(frames(reader([bytes.clone()])));
		assert_eq!(
			whole.0,
			[(0x21, 0), (4, 5), (0x21, 300), (0x1234_5678, 70), (4, 200), (0x2a, 2)]
		);
		assert_eq!(whole.1, [vec![1, 2, 3, 4, 5], vec![6; 200]]);
		assert_eq!(&whole.2[..], b"rest");
		// Byte by byte, and cut at every point into two.
		assert_eq!(run(frames(reader(bytes.iter().map(|&b| vec![b])))), whole);
		for cut in 0..bytes.len() {
			let (a, b) = bytes.split_at(cut);
			assert_eq!(run(frames(reader([a.to_vec(), b.to_vec()]))), whole, "cut at {cut}");
		}
	}

	#[test]
	fn a_window_of_tiny_frames_in_one_chunk_is_parsed_in_one_pass() {
		// 1 MiB of two-byte reserved frames (type 0x21, length 0), then a SETTINGS frame, in one
		// chunk (what quinn-proto hands over after merging a stream's buffered chunks), after a
		// first chunk that ends inside a frame header.
		const FRAMES: usize = 512 << 10;
		let mut bytes = vec![0x00];
		bytes.extend_from_slice(&[0x21, 0x00].repeat(FRAMES));
		h3::put_frame(&mut bytes, frame_type::SETTINGS, &[1, 2]);
		let (headers, kept, rest, moved) = run(frames_moving(reader([vec![0x21], bytes])));
		assert_eq!(headers.len(), 1 + FRAMES + 1);
		assert!(headers[..=FRAMES].iter().all(|&header| header == (0x21, 0)));
		assert_eq!(kept, [vec![1, 2]]);
		assert!(rest.is_empty());
		// Each byte is moved at most once, when the chunk after it comes: here the first byte.
		// Removing each parsed varint from the front moved 5.5e11.
		assert!(moved <= 1, "{moved} bytes moved");
	}
}
