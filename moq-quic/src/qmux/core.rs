//! A QMux connection's state, sans-io: record bodies in ([`Core::receive`]), record bodies out
//! ([`Core::poll_transmit`]), streams and datagrams for the application, and the clock
//! ([`Core::poll_timeout`]). The driver (`conn.rs`) moves the bodies over a WebSocket or a
//! TLS stream and wakes the tasks the core's waiter lists name; nothing here does I/O.
//!
//! QUIC's stream and flow-control rules hold (RFC 9000 §2-4), without what a reliable, ordered
//! byte stream makes moot: no acknowledgements, no retransmission, no packet numbers. A stream's
//! bytes arrive in order (a gap is a PROTOCOL_VIOLATION; an old peer's frames without an offset
//! follow what came before), and "sent" means handed to the byte stream.
//!
//! # What a peer can make us hold
//!
//! - Received stream data: within the windows we give (per stream and per connection). A chunk
//!   under three quarters of its record is copied out of it, so what is held unread is at most
//!   a third more than the window (a record is at most our `max_record_size`, or a qmux-00
//!   frame's 16 KiB; a larger one is refused).
//! - Streams: at most what we allow of each kind at once (`max_streams`), replenished as they
//!   end.
//! - Datagrams received and not yet read: [`DATAGRAM_QUEUE`] bytes; the oldest go first.
//! - Our send queues: at most the send buffer in all, and [`STREAM_QUEUE`] bytes a stream. A
//!   writer waits until its bytes are nearly on the wire, so a group is not "written" (for the
//!   session) while it waits here behind others: a peer that never reads, or reads slowly, leaves
//!   its groups in the session, which resets those past the track's latency; what it resets is
//!   dropped here too, never sent.
//!
//! # Scheduling one byte stream
//!
//! Control frames go first (a close, QX_PING answers, resets, credit), then datagrams, then stream
//! data in the send scheduler's order ([`crate::scheduler`]): strict priority levels, round robin
//! within a level, one record at a time. A newer group, which the session ranks higher, overtakes
//! an older one at the next record; a reset stream's queued bytes are dropped, never sent.

use std::collections::{HashMap, VecDeque};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kio::{Waiter, WaiterList};

use super::Version;
use super::frame::{self, Frame, FrameError};
use super::params::{MIN_RECORD_SIZE, Params};
use crate::scheduler::{After, GroupId, Scheduler, StreamSlot};

/// Transport error codes (RFC 9000 §20.1) a violation closes with.
pub mod code {
	/// A peer sent past the credit we gave.
	pub const FLOW_CONTROL_ERROR: u64 = 0x03;
	/// A peer opened more streams than we allowed.
	pub const STREAM_LIMIT_ERROR: u64 = 0x04;
	/// A frame for a stream in a state that does not take it.
	pub const STREAM_STATE_ERROR: u64 = 0x05;
	/// A stream's final size changed, or data went past it.
	pub const FINAL_SIZE_ERROR: u64 = 0x06;
	/// A frame that cannot be read.
	pub const FRAME_ENCODING_ERROR: u64 = 0x07;
	/// Transport parameters that cannot be taken.
	pub const TRANSPORT_PARAMETER_ERROR: u64 = 0x08;
	/// Anything else against the protocol.
	pub const PROTOCOL_VIOLATION: u64 = 0x0a;
}

/// Which end a side is: the one that dialled (client) or accepted (server). Stream ids carry it
/// in bit 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
	/// Dialled.
	Client,
	/// Accepted.
	Server,
}

impl Side {
	fn bit(self) -> u64 {
		match self {
			Self::Client => 0,
			Self::Server => 1,
		}
	}
}

/// A stream's direction, as an index: bidirectional 0, unidirectional 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
	/// Both ways.
	Bi = 0,
	/// From its opener only.
	Uni = 1,
}

fn dir_of(id: u64) -> Dir {
	if id & 2 == 0 { Dir::Bi } else { Dir::Uni }
}

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
	/// The peer closed it with the application's code (CONNECTION_CLOSE 0x1d): a clean end.
	Application(u64),
	/// We closed it, with this application code.
	Local(u64),
	/// It failed: a violation (ours or the peer's, CONNECTION_CLOSE 0x1c), an idle timeout, or
	/// the byte stream under it ended without a close.
	Lost(String),
}

/// Why a stream operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamError {
	/// The peer reset the stream with this code.
	Reset(u64),
	/// The peer asked us to stop sending, with this code.
	Stopped(u64),
	/// The connection ended.
	Closed(End),
	/// The operation does not apply (writing after finish, a half we do not have).
	Invalid,
}

/// A violation: the connection is closed with CONNECTION_CLOSE (0x1c) carrying `code`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
	/// The transport error code ([`code`]).
	pub code: u64,
	/// Why, for the close frame and the log.
	pub reason: String,
}

fn violation(code: u64, reason: impl Into<String>) -> Violation {
	Violation {
		code,
		reason: reason.into(),
	}
}

impl From<FrameError> for Violation {
	fn from(error: FrameError) -> Self {
		violation(code::FRAME_ENCODING_ERROR, error.to_string())
	}
}

/// Received datagrams held unread, at most: past it the oldest are dropped (datagrams may be).
pub const DATAGRAM_QUEUE: usize = 64 << 10;
/// Datagrams queued to send, at most.
const DATAGRAM_SEND_QUEUE: usize = 64 << 10;
/// What a stream may hold queued and unsent: two records. A group's last bytes are "written" only
/// once the rest went out (the session sees what a slow peer takes), and a writer refilling after
/// each record keeps a fast peer's byte stream full.
pub const STREAM_QUEUE: u64 = 32 << 10;
/// The largest STREAM payload we put in one frame: what released receivers take (16,384 less
/// room for the frame's header).
const MAX_STREAM_PAYLOAD: usize = 16_352;
/// How long a peer has to send its transport parameters.
pub const PARAMS_TIMEOUT: Duration = Duration::from_secs(10);
/// The send scheduler's quantum: one record's worth.
const QUANTUM: usize = 16 << 10;

/// What the connection was configured with.
#[derive(Clone, Debug)]
pub struct Config {
	/// Our transport parameters (windows, stream counts, idle timeout, datagrams).
	pub params: Params,
	/// Bytes the send streams may hold queued, in all.
	pub send_buffer: u64,
}

impl Default for Config {
	/// What the public implementations advertise: 30 s idle, a 1 MiB connection window, 256 KiB
	/// per stream, 100 streams of each kind, datagrams of a record.
	fn default() -> Self {
		Self {
			params: Params {
				idle_timeout_ms: 30_000,
				max_data: 1 << 20,
				max_stream_data_bidi_local: 256 << 10,
				max_stream_data_bidi_remote: 256 << 10,
				max_stream_data_uni: 256 << 10,
				max_streams_bidi: 100,
				max_streams_uni: 100,
				max_datagram_frame_size: MIN_RECORD_SIZE,
				max_record_size: MIN_RECORD_SIZE,
				application_protocols: Vec::new(),
			},
			send_buffer: 4 << 20,
		}
	}
}

struct Recv {
	chunks: VecDeque<Bytes>,
	/// The end of what arrived.
	received: u64,
	/// What the application has read.
	read: u64,
	/// The credit we gave (MAX_STREAM_DATA).
	max: u64,
	window: u64,
	/// The final size, once the FIN or a reset said it.
	fin: Option<u64>,
	reset: Option<u64>,
	/// We asked the peer to stop (or the application dropped the half): what comes is discarded.
	stopped: bool,
	/// A MAX_STREAM_DATA for it waits in `Core::credit`.
	credit_queued: bool,
}

impl Recv {
	fn new(window: u64) -> Self {
		Self {
			chunks: VecDeque::new(),
			received: 0,
			read: 0,
			max: window,
			window,
			fin: None,
			reset: None,
			stopped: false,
			credit_queued: false,
		}
	}

	/// Whether the application has seen the half's end (or will see nothing more).
	fn is_over(&self) -> bool {
		self.stopped || self.reset.is_some() || self.fin.is_some_and(|fin| self.read == fin)
	}

	/// Whether the half may be forgotten: over, and its final size known. A stopped half waits
	/// for the peer's reset (or FIN): the bytes it sends meanwhile count against the connection's
	/// credit on both sides, and a half forgotten earlier would ignore them here while the peer
	/// counted them, so the peer's credit would shrink by every such byte until it could send
	/// nothing.
	fn is_finished(&self) -> bool {
		self.fin.is_some() && self.is_over()
	}
}

struct Send {
	queue: VecDeque<Bytes>,
	queued: u64,
	/// The next offset to send: what was sent.
	offset: u64,
	/// The peer's credit.
	max: u64,
	/// The application finished: FIN after the queue.
	finish: bool,
	/// The FIN or a RESET_STREAM went out (or is queued): nothing more of this half.
	over: bool,
	/// The peer's STOP_SENDING code.
	stopped: Option<u64>,
	slot: StreamSlot,
	group: GroupId,
	/// In `Core::blocked`, waiting for connection credit (once, however often it is written to).
	blocked: bool,
}

struct Stream {
	recv: Option<Recv>,
	send: Option<Send>,
	/// Halves the application holds, or will hold once it accepts the stream.
	handles: u8,
	waiters: WaiterList,
}

/// One QMux connection.
pub struct Core {
	side: Side,
	version: Version,
	config: Config,
	/// The peer's parameters, once they came.
	peer: Option<Params>,
	/// Our parameters went out.
	params_sent: bool,
	/// No frame has come yet (the first must be the parameters).
	first_frame: bool,
	streams: HashMap<u64, Stream>,
	scheduler: Scheduler,
	/// Streams of each kind we opened, and may open (the peer's MAX_STREAMS).
	opened: [u64; 2],
	may_open: [u64; 2],
	/// Streams of each kind the peer opened, may open (ours), and that ended.
	peer_opened: [u64; 2],
	peer_may_open: [u64; 2],
	peer_closed: [u64; 2],
	/// What the last MAX_STREAMS of each kind said.
	peer_may_open_sent: [u64; 2],
	incoming: [VecDeque<u64>; 2],
	/// Connection flow control, sending: bytes sent, and the peer's MAX_DATA.
	sent: u64,
	send_max: u64,
	/// Streams with data that wait for connection credit, by id.
	blocked: Vec<u64>,
	/// Connection flow control, receiving: the sum of the streams' received ends, what the
	/// application read or we discarded, and the credit we gave.
	received: u64,
	consumed: u64,
	recv_max: u64,
	recv_max_sent: u64,
	/// Bytes every send queue holds.
	queued: u64,
	/// Streams whose MAX_STREAM_DATA waits.
	credit: Vec<u64>,
	/// RESET_STREAM and STOP_SENDING waiting to go.
	control: VecDeque<Frame>,
	datagrams_in: VecDeque<Bytes>,
	datagrams_in_bytes: usize,
	datagrams_out: VecDeque<Bytes>,
	datagrams_out_bytes: usize,
	/// The largest QX_PING request to answer, and the largest seen.
	pong: Option<u64>,
	last_ping_seen: Option<u64>,
	/// Our next QX_PING sequence number.
	next_ping: u64,
	/// When a record last came, and when one last went (for the keep-alive).
	last_received: Instant,
	last_sent: Instant,
	started: Instant,
	end: Option<End>,
	/// The close frame to send, then nothing more.
	closing: Option<Frame>,
	close_sent: bool,
	/// Waiters: the driver (something to send, or the end), openers, acceptors, writers waiting
	/// for the send buffer, datagram readers.
	pub(crate) driver: WaiterList,
	open_waiters: [WaiterList; 2],
	accept_waiters: [WaiterList; 2],
	queue_waiters: WaiterList,
	datagram_waiters: WaiterList,
	closed_waiters: WaiterList,
	params_waiters: WaiterList,
}

impl Core {
	/// A connection of `side` speaking `version`, started `now`. Our transport parameters are
	/// the first thing [`poll_transmit`](Self::poll_transmit) gives.
	pub fn new(side: Side, version: Version, config: Config, now: Instant) -> Self {
		let params = &config.params;
		Self {
			side,
			version,
			peer: None,
			params_sent: false,
			first_frame: true,
			streams: HashMap::new(),
			scheduler: Scheduler::new(QUANTUM),
			opened: [0, 0],
			may_open: [0, 0],
			peer_opened: [0, 0],
			peer_may_open: [params.max_streams_bidi, params.max_streams_uni],
			peer_closed: [0, 0],
			peer_may_open_sent: [params.max_streams_bidi, params.max_streams_uni],
			incoming: [VecDeque::new(), VecDeque::new()],
			sent: 0,
			send_max: 0,
			blocked: Vec::new(),
			received: 0,
			consumed: 0,
			recv_max: params.max_data,
			recv_max_sent: params.max_data,
			queued: 0,
			credit: Vec::new(),
			control: VecDeque::new(),
			datagrams_in: VecDeque::new(),
			datagrams_in_bytes: 0,
			datagrams_out: VecDeque::new(),
			datagrams_out_bytes: 0,
			pong: None,
			last_ping_seen: None,
			next_ping: 0,
			last_received: now,
			last_sent: now,
			started: now,
			end: None,
			closing: None,
			close_sent: false,
			driver: WaiterList::new(),
			open_waiters: [WaiterList::new(), WaiterList::new()],
			accept_waiters: [WaiterList::new(), WaiterList::new()],
			queue_waiters: WaiterList::new(),
			datagram_waiters: WaiterList::new(),
			closed_waiters: WaiterList::new(),
			params_waiters: WaiterList::new(),
			config,
		}
	}

	/// The version spoken.
	pub fn version(&self) -> Version {
		self.version
	}

	/// How the connection ended, if it has.
	pub fn end(&self) -> Option<&End> {
		self.end.as_ref()
	}

	/// Whether the driver is done: the connection ended, and its close frame (if any) went out.
	pub fn is_finished(&self) -> bool {
		self.end.is_some() && (self.closing.is_none() || self.close_sent)
	}

	/// Bytes the send queues hold.
	pub fn queued(&self) -> u64 {
		self.queued
	}

	/// Bytes received and not yet read (streams and datagrams).
	pub fn buffered(&self) -> u64 {
		self.received - self.consumed + self.datagrams_in_bytes as u64
	}

	/// Streams open now.
	pub fn streams(&self) -> usize {
		self.streams.len()
	}

	// --- receiving -------------------------------------------------------------------------

	/// Takes a record's body (or a WebSocket message's) that came `now`. A violation ends the
	/// connection: its close frame is the next thing to send.
	pub fn receive(&mut self, mut body: Bytes, now: Instant) -> Result<(), Violation> {
		if self.end.is_some() {
			return Ok(());
		}
		self.last_received = now;
		let size = body.len();
		// Our `max_record_size` (qmux-00 has none: a frame of 16 KiB at most, as its peers cap it).
		let largest = match self.version {
			Version::Qmux00 => 16_384,
			_ => self.config.params.max_record_size as usize,
		};
		if size > largest {
			let violation = violation(code::FRAME_ENCODING_ERROR, "a record past our max_record_size");
			self.fail(violation.clone());
			return Err(violation);
		}
		while !body.is_empty() {
			let frame = frame::decode(&mut body).map_err(Violation::from);
			let result = frame.and_then(|frame| self.on_frame(frame, size));
			if let Err(violation) = result {
				self.fail(violation.clone());
				return Err(violation);
			}
			if self.end.is_some() {
				break;
			}
		}
		Ok(())
	}

	/// Ends the connection for a violation: CONNECTION_CLOSE (0x1c) goes out, then nothing.
	pub fn fail(&mut self, violation: Violation) {
		if self.end.is_some() {
			return;
		}
		self.closing = Some(Frame::Close {
			application: false,
			code: violation.code,
			reason: Bytes::from(violation.reason.clone().into_bytes()),
		});
		self.finish_all(End::Lost(violation.reason));
	}

	/// The byte stream under the connection ended (or failed) without a close frame.
	pub fn lost(&mut self, why: impl Into<String>) {
		if self.end.is_none() {
			self.close_sent = true;
			self.finish_all(End::Lost(why.into()));
		}
	}

	fn on_frame(&mut self, frame: Frame, size: usize) -> Result<(), Violation> {
		if self.first_frame && frame != Frame::Padding {
			self.first_frame = false;
			if !matches!(frame, Frame::TransportParameters(_)) {
				return Err(violation(
					code::PROTOCOL_VIOLATION,
					"the first frame is not the transport parameters",
				));
			}
		}
		match frame {
			Frame::Padding | Frame::Blocked => Ok(()),
			Frame::TransportParameters(blob) => self.on_params(&blob),
			Frame::Stream { id, offset, fin, data } => self.on_stream(id, offset, fin, data, size),
			Frame::ResetStream { id, code, final_size } => self.on_reset(id, code, final_size),
			Frame::StopSending { id, code } => self.on_stop(id, code),
			Frame::MaxData(max) => {
				if max > self.send_max {
					self.send_max = max;
					for id in std::mem::take(&mut self.blocked) {
						if let Some(send) = self.streams.get_mut(&id).and_then(|s| s.send.as_mut()) {
							send.blocked = false;
							self.scheduler.ready(send.slot);
						}
					}
					self.driver.wake();
				}
				Ok(())
			}
			Frame::MaxStreamData { id, max } => self.on_max_stream_data(id, max),
			Frame::MaxStreams { bidi, max } => {
				if max > 1 << 60 {
					return Err(violation(code::FRAME_ENCODING_ERROR, "MAX_STREAMS past 2^60"));
				}
				let dir = if bidi { Dir::Bi } else { Dir::Uni } as usize;
				if max > self.may_open[dir] {
					self.may_open[dir] = max;
					self.open_waiters[dir].wake();
				}
				Ok(())
			}
			Frame::Close {
				application,
				code,
				reason,
			} => {
				let end = match application {
					true => End::Application(code),
					false => End::Lost(format!(
						"the peer closed with transport error {code:#x}: {}",
						String::from_utf8_lossy(&reason)
					)),
				};
				// Nothing goes out after the peer's close.
				self.close_sent = true;
				self.finish_all(end);
				Ok(())
			}
			Frame::Datagram(data) => {
				let limit = self.config.params.max_datagram_frame_size;
				if limit == 0 || self.version == Version::Qmux00 {
					return Err(violation(code::PROTOCOL_VIOLATION, "a datagram we did not ask for"));
				}
				if data.len() as u64 + 3 > limit {
					return Err(violation(code::PROTOCOL_VIOLATION, "a datagram past our limit"));
				}
				let data = Bytes::copy_from_slice(&data);
				self.datagrams_in_bytes += data.len();
				self.datagrams_in.push_back(data);
				while self.datagrams_in_bytes > DATAGRAM_QUEUE {
					let old = self.datagrams_in.pop_front().expect("bytes are queued");
					self.datagrams_in_bytes -= old.len();
				}
				self.datagram_waiters.wake();
				Ok(())
			}
			Frame::PingRequest(sequence) => {
				if self.version == Version::Qmux02 && self.last_ping_seen.is_some_and(|last| sequence <= last) {
					return Err(violation(
						code::PROTOCOL_VIOLATION,
						"a QX_PING sequence that did not rise",
					));
				}
				self.last_ping_seen = Some(sequence);
				self.pong = Some(self.pong.map_or(sequence, |pong| pong.max(sequence)));
				self.driver.wake();
				Ok(())
			}
			Frame::PingResponse(sequence) => {
				if self.version == Version::Qmux02 && sequence >= self.next_ping {
					return Err(violation(code::PROTOCOL_VIOLATION, "a QX_PING response to no request"));
				}
				Ok(())
			}
		}
	}

	fn on_params(&mut self, blob: &[u8]) -> Result<(), Violation> {
		if self.peer.is_some() {
			return Err(violation(
				code::PROTOCOL_VIOLATION,
				"a second set of transport parameters",
			));
		}
		// Application protocols are named in the parameters only where we name ours there.
		let decode = if self.config.params.application_protocols.is_empty() {
			Params::decode
		} else {
			Params::decode_with_protocols
		};
		let params = decode(blob).map_err(|error| violation(code::TRANSPORT_PARAMETER_ERROR, error.to_string()))?;
		self.send_max = params.max_data;
		self.may_open = [params.max_streams_bidi, params.max_streams_uni];
		self.peer = Some(params);
		self.params_waiters.wake();
		self.open_waiters[0].wake();
		self.open_waiters[1].wake();
		self.driver.wake();
		Ok(())
	}

	/// Whether stream `id` was opened by the peer.
	fn is_peer_stream(&self, id: u64) -> bool {
		id & 1 != self.side.bit()
	}

	/// Whether stream `id` is live, opening it (and every lower one of its kind) if the peer opens
	/// it now. False for one of ours we never opened, or one that is over: frames for it are
	/// ignored.
	fn live(&mut self, id: u64) -> Result<bool, Violation> {
		if self.is_peer_stream(id) {
			let dir = dir_of(id);
			let index = id >> 2;
			if index >= self.peer_may_open[dir as usize] {
				return Err(violation(code::STREAM_LIMIT_ERROR, "a stream past the limit"));
			}
			if index >= self.peer_opened[dir as usize] {
				let peer = self.peer.clone().unwrap_or_default();
				for index in self.peer_opened[dir as usize]..=index {
					let id = (index << 2) | ((dir as u64) << 1) | (self.side.bit() ^ 1);
					let (recv_window, send) = match dir {
						Dir::Bi => (self.config.params.max_stream_data_bidi_remote, true),
						Dir::Uni => (self.config.params.max_stream_data_uni, false),
					};
					let send = send.then(|| self.new_send(id, peer.max_stream_data_bidi_local));
					self.streams.insert(
						id,
						Stream {
							recv: Some(Recv::new(recv_window)),
							handles: 1 + u8::from(send.is_some()),
							send,
							waiters: WaiterList::new(),
						},
					);
					self.incoming[dir as usize].push_back(id);
				}
				self.peer_opened[dir as usize] = index + 1;
				self.accept_waiters[dir as usize].wake();
			}
		}
		Ok(self.streams.contains_key(&id))
	}

	/// Whether a frame about stream `id` applies: a peer's frame about our receiving half
	/// (`receiving`) on a stream we only send on, or about our sending half on one we only receive
	/// on, is STREAM_STATE_ERROR; one for a stream that is not live is ignored ([`live`](Self::live)).
	fn frame_for(&mut self, id: u64, receiving: bool, frame: &str) -> Result<bool, Violation> {
		if dir_of(id) == Dir::Uni && self.is_peer_stream(id) != receiving {
			let ours = if receiving { "send" } else { "receive" };
			return Err(violation(
				code::STREAM_STATE_ERROR,
				format!("{frame} on a stream we only {ours} on"),
			));
		}
		self.live(id)
	}

	fn new_send(&mut self, id: u64, max: u64) -> Send {
		let group = self.scheduler.insert_group(0);
		Send {
			queue: VecDeque::new(),
			queued: 0,
			offset: 0,
			max,
			finish: false,
			over: false,
			stopped: None,
			slot: self.scheduler.insert_stream(group, id),
			group,
			blocked: false,
		}
	}

	fn on_stream(
		&mut self,
		id: u64,
		offset: Option<u64>,
		fin: bool,
		data: Bytes,
		size: usize,
	) -> Result<(), Violation> {
		if !self.frame_for(id, true, "STREAM")? {
			return Ok(());
		}
		let stream = self.streams.get_mut(&id).expect("live");
		let Some(recv) = stream.recv.as_mut() else {
			return Ok(());
		};
		let start = offset.unwrap_or(recv.received);
		let end = start + data.len() as u64;
		if end > recv.max {
			return Err(violation(
				code::FLOW_CONTROL_ERROR,
				"stream data past the stream's credit",
			));
		}
		if recv
			.fin
			.is_some_and(|final_size| end > final_size || (fin && end != final_size))
		{
			return Err(violation(code::FINAL_SIZE_ERROR, "stream data past its final size"));
		}
		if fin && end < recv.received {
			return Err(violation(code::FINAL_SIZE_ERROR, "a final size below what arrived"));
		}
		if start > recv.received {
			return Err(violation(code::PROTOCOL_VIOLATION, "a gap in a stream"));
		}
		let new = end.saturating_sub(recv.received);
		if self.received + new > self.recv_max {
			return Err(violation(
				code::FLOW_CONTROL_ERROR,
				"stream data past the connection's credit",
			));
		}
		self.received += new;
		if new > 0 {
			let skip = (recv.received - start) as usize;
			let data = data.slice(skip..);
			recv.received = end;
			if recv.stopped || recv.reset.is_some() {
				// Discarded as it comes: read, as far as credit goes.
				self.consumed += new;
				recv.read = end;
			} else if data.len() * 4 < size * 3 {
				recv.chunks.push_back(Bytes::copy_from_slice(&data));
			} else {
				recv.chunks.push_back(data);
			}
		}
		let mut finished = false;
		if fin {
			recv.fin = Some(end);
			finished = recv.is_finished();
		}
		stream.waiters.wake();
		self.top_up_connection_credit();
		if finished {
			self.collect(id);
		}
		Ok(())
	}

	fn on_reset(&mut self, id: u64, code: u64, final_size: u64) -> Result<(), Violation> {
		if !self.frame_for(id, true, "RESET_STREAM")? {
			return Ok(());
		}
		let stream = self.streams.get_mut(&id).expect("live");
		let Some(recv) = stream.recv.as_mut() else {
			return Ok(());
		};
		if recv.reset.is_some() {
			return Ok(());
		}
		// Older peers reset with a final size of 0 whatever they sent: what arrived stands.
		let final_size = final_size.max(recv.received);
		if final_size > recv.max || recv.fin.is_some_and(|fin| fin != final_size) {
			return Err(violation(code::FINAL_SIZE_ERROR, "a reset's final size"));
		}
		let new = final_size - recv.received;
		if self.received + new > self.recv_max {
			return Err(violation(
				code::FLOW_CONTROL_ERROR,
				"a reset past the connection's credit",
			));
		}
		self.received += new;
		recv.received = final_size;
		recv.fin = Some(final_size);
		recv.reset = Some(code);
		// What is buffered and unread is dropped, and its credit returned.
		let unread = final_size - recv.read;
		recv.chunks.clear();
		recv.read = final_size;
		self.consumed += unread;
		stream.waiters.wake();
		self.top_up_connection_credit();
		self.collect(id);
		Ok(())
	}

	fn on_stop(&mut self, id: u64, code: u64) -> Result<(), Violation> {
		if !self.frame_for(id, false, "STOP_SENDING")? {
			return Ok(());
		}
		let stream = self.streams.get_mut(&id).expect("live");
		let Some(send) = stream.send.as_mut() else {
			return Ok(());
		};
		if send.stopped.is_some() {
			return Ok(());
		}
		send.stopped = Some(code);
		stream.waiters.wake();
		// Answered with a reset carrying the same code (RFC 9000 §3.5), unless the half is over.
		self.reset_send(id, code);
		Ok(())
	}

	fn on_max_stream_data(&mut self, id: u64, max: u64) -> Result<(), Violation> {
		if !self.frame_for(id, false, "MAX_STREAM_DATA")? {
			return Ok(());
		}
		let stream = self.streams.get_mut(&id).expect("live");
		if let Some(send) = stream.send.as_mut()
			&& max > send.max
		{
			send.max = max;
			if !send.over && (send.queued > 0 || send.finish) {
				self.scheduler.ready(send.slot);
				self.driver.wake();
			}
			// Room for more past the credit.
			stream.waiters.wake();
		}
		Ok(())
	}

	/// Makes the connection's receive window `bytes` if that is larger than it is: the credit
	/// given grows at once (MAX_DATA), and tops up to the new window from then on.
	pub fn set_receive_window(&mut self, bytes: u64) {
		if bytes <= self.config.params.max_data {
			return;
		}
		self.config.params.max_data = bytes;
		self.recv_max = self.recv_max.max(self.consumed + bytes);
		self.driver.wake();
	}

	/// The connection's receive window now.
	pub fn receive_window(&self) -> u64 {
		self.config.params.max_data
	}

	/// Tops the connection's credit up once the application has consumed half of it.
	fn top_up_connection_credit(&mut self) {
		let window = self.config.params.max_data;
		if self.recv_max - self.consumed <= window / 2 {
			self.recv_max = self.consumed + window;
			self.driver.wake();
		}
	}

	// --- the application's side ------------------------------------------------------------

	/// A new stream of `dir`, once the peer allows one more. The peer learns of it with its first
	/// frame.
	pub fn poll_open(&mut self, waiter: &Waiter, dir: Dir) -> Poll<Result<u64, StreamError>> {
		if let Some(end) = &self.end {
			return Poll::Ready(Err(StreamError::Closed(end.clone())));
		}
		let d = dir as usize;
		let Some(peer) = self.peer.clone().filter(|_| self.opened[d] < self.may_open[d]) else {
			self.open_waiters[d].register(waiter);
			return Poll::Pending;
		};
		let id = (self.opened[d] << 2) | ((d as u64) << 1) | self.side.bit();
		self.opened[d] += 1;
		let (send_max, recv) = match dir {
			Dir::Bi => (
				peer.max_stream_data_bidi_remote,
				Some(Recv::new(self.config.params.max_stream_data_bidi_local)),
			),
			Dir::Uni => (peer.max_stream_data_uni, None),
		};
		let send = self.new_send(id, send_max);
		self.streams.insert(
			id,
			Stream {
				handles: 1 + u8::from(recv.is_some()),
				recv,
				send: Some(send),
				waiters: WaiterList::new(),
			},
		);
		Poll::Ready(Ok(id))
	}

	/// The next stream of `dir` the peer opened.
	pub fn poll_accept(&mut self, waiter: &Waiter, dir: Dir) -> Poll<Result<u64, StreamError>> {
		if let Some(id) = self.incoming[dir as usize].pop_front() {
			return Poll::Ready(Ok(id));
		}
		if let Some(end) = &self.end {
			return Poll::Ready(Err(StreamError::Closed(end.clone())));
		}
		self.accept_waiters[dir as usize].register(waiter);
		Poll::Pending
	}

	fn send_half(&mut self, id: u64) -> Result<(&mut Send, &mut WaiterList), StreamError> {
		if let Some(end) = &self.end {
			return Err(StreamError::Closed(end.clone()));
		}
		let stream = self.streams.get_mut(&id).ok_or(StreamError::Invalid)?;
		let send = stream.send.as_mut().ok_or(StreamError::Invalid)?;
		Ok((send, &mut stream.waiters))
	}

	/// Queues what it can of `data` on stream `id` (taking it from the front of `data`); pending
	/// until all of it is queued. A stream queues at most [`STREAM_QUEUE`], and all streams at
	/// most the send buffer.
	pub fn poll_write(&mut self, waiter: &Waiter, id: u64, data: &mut Bytes) -> Poll<Result<(), StreamError>> {
		let room = self.config.send_buffer.saturating_sub(self.queued);
		let (send, _) = match self.send_half(id) {
			Ok(half) => half,
			Err(error) => return Poll::Ready(Err(error)),
		};
		if let Some(code) = send.stopped {
			return Poll::Ready(Err(StreamError::Stopped(code)));
		}
		if send.finish || send.over {
			return Poll::Ready(Err(StreamError::Invalid));
		}
		let take = (data.len() as u64)
			.min(room)
			.min(STREAM_QUEUE.saturating_sub(send.queued)) as usize;
		if take > 0 {
			let chunk = if take == data.len() {
				std::mem::take(data)
			} else {
				data.split_to(take)
			};
			send.queued += take as u64;
			send.queue.push_back(chunk);
			let slot = send.slot;
			self.queued += take as u64;
			self.scheduler.ready(slot);
			self.driver.wake();
		}
		if data.is_empty() {
			return Poll::Ready(Ok(()));
		}
		// Woken by the stream's credit or end, or by room in the send buffer.
		let (_, waiters) = self.send_half(id).expect("looked up above");
		waiters.register(waiter);
		self.queue_waiters.register(waiter);
		Poll::Pending
	}

	/// Ends stream `id`'s sending half after what is queued.
	pub fn finish(&mut self, id: u64) -> Result<(), StreamError> {
		let (send, _) = self.send_half(id)?;
		if send.stopped.is_some() {
			// The peer stopped reading: the half is over already.
			return Ok(());
		}
		if send.finish || send.over {
			return Err(StreamError::Invalid);
		}
		send.finish = true;
		let slot = send.slot;
		self.scheduler.ready(slot);
		self.driver.wake();
		Ok(())
	}

	/// Resets stream `id`'s sending half with `code`: what is queued is dropped, never sent.
	pub fn reset(&mut self, id: u64, code: u64) {
		self.reset_send(id, code);
	}

	fn reset_send(&mut self, id: u64, code: u64) {
		let Some(send) = self.streams.get_mut(&id).and_then(|s| s.send.as_mut()) else {
			return;
		};
		if send.over {
			return;
		}
		send.over = true;
		let dropped = send.queued;
		send.queue.clear();
		send.queued = 0;
		let offset = send.offset;
		self.queued -= dropped;
		// It stays in the scheduler until it is forgotten (`collect`): picked meanwhile, it is
		// taken off the ready list with nothing sent.
		self.control.push_back(Frame::ResetStream {
			id,
			code,
			final_size: offset,
		});
		self.queue_waiters.wake();
		self.driver.wake();
		self.collect(id);
	}

	/// Moves stream `id`'s sending half to `priority` (higher goes first).
	pub fn set_priority(&mut self, id: u64, priority: i32) {
		if let Some(send) = self.streams.get(&id).and_then(|s| s.send.as_ref()) {
			let group = send.group;
			self.scheduler.set_priority(group, priority);
		}
	}

	/// Ready with the peer's STOP_SENDING code for stream `id`.
	pub fn poll_stopped(&mut self, waiter: &Waiter, id: u64) -> Poll<Result<u64, StreamError>> {
		let (send, waiters) = match self.send_half(id) {
			Ok(half) => half,
			Err(error) => return Poll::Ready(Err(error)),
		};
		if let Some(code) = send.stopped {
			return Poll::Ready(Ok(code));
		}
		waiters.register(waiter);
		Poll::Pending
	}

	/// The application let go of stream `id`'s sending half: it finishes after what is queued,
	/// unless it is over already.
	pub fn drop_send(&mut self, id: u64) {
		if let Some(send) = self.streams.get(&id).and_then(|s| s.send.as_ref())
			&& !send.finish
			&& !send.over
			&& send.stopped.is_none()
		{
			let _ = self.finish(id);
		}
		self.release(id);
	}

	/// The application let go of stream `id`'s sending half after finishing or resetting it.
	pub fn release_send(&mut self, id: u64) {
		self.release(id);
	}

	/// The next bytes of stream `id`: `None` at its end.
	pub fn poll_read(&mut self, waiter: &Waiter, id: u64) -> Poll<Result<Option<Bytes>, StreamError>> {
		let Some(stream) = self.streams.get_mut(&id) else {
			return Poll::Ready(Err(StreamError::Invalid));
		};
		let Some(recv) = stream.recv.as_mut() else {
			return Poll::Ready(Err(StreamError::Invalid));
		};
		if let Some(chunk) = recv.chunks.pop_front() {
			recv.read += chunk.len() as u64;
			self.consumed += chunk.len() as u64;
			// Credit for the stream once half its window is read.
			if recv.fin.is_none() && recv.max - recv.read <= recv.window / 2 && !recv.credit_queued {
				recv.credit_queued = true;
				self.credit.push(id);
				self.driver.wake();
			}
			self.top_up_connection_credit();
			return Poll::Ready(Ok(Some(chunk)));
		}
		if let Some(code) = recv.reset {
			return Poll::Ready(Err(StreamError::Reset(code)));
		}
		if recv.fin.is_some_and(|fin| recv.read == fin) {
			return Poll::Ready(Ok(None));
		}
		if let Some(end) = &self.end {
			return Poll::Ready(Err(StreamError::Closed(end.clone())));
		}
		stream.waiters.register(waiter);
		Poll::Pending
	}

	/// Asks the peer to stop sending on stream `id` (STOP_SENDING with `code`); what it still
	/// sends is discarded.
	pub fn stop(&mut self, id: u64, code: u64) {
		let Some(recv) = self.streams.get_mut(&id).and_then(|s| s.recv.as_mut()) else {
			return;
		};
		if recv.is_over() {
			return;
		}
		recv.stopped = true;
		let unread = recv.received - recv.read;
		recv.chunks.clear();
		recv.read = recv.received;
		self.consumed += unread;
		if recv.fin.is_none() {
			self.control.push_back(Frame::StopSending { id, code });
			self.driver.wake();
		}
		self.top_up_connection_credit();
	}

	/// The application let go of stream `id`'s receiving half: stopped (code 0) unless it saw the
	/// end.
	pub fn drop_recv(&mut self, id: u64) {
		self.stop(id, 0);
		self.release(id);
	}

	/// A handle of stream `id` went.
	fn release(&mut self, id: u64) {
		if let Some(stream) = self.streams.get_mut(&id) {
			stream.handles = stream.handles.saturating_sub(1);
		}
		self.collect(id);
	}

	/// Forgets stream `id` once nothing is held of it and nothing is left to send; a peer's
	/// stream that ends gives the peer room for another (MAX_STREAMS).
	fn collect(&mut self, id: u64) {
		let Some(stream) = self.streams.get(&id) else {
			return;
		};
		let recv_over = stream.recv.as_ref().is_none_or(Recv::is_finished);
		let send_over = stream.send.as_ref().is_none_or(|send| send.over);
		if stream.handles > 0 || !recv_over || !send_over {
			return;
		}
		let stream = self.streams.remove(&id).expect("looked up above");
		if let Some(send) = stream.send {
			if send.blocked {
				self.blocked.retain(|blocked| *blocked != id);
			}
			self.scheduler.remove_stream(send.slot);
			self.scheduler.retire_group(send.group);
		}
		if self.is_peer_stream(id) {
			let dir = dir_of(id) as usize;
			self.peer_closed[dir] += 1;
			let initial = [self.config.params.max_streams_bidi, self.config.params.max_streams_uni][dir];
			self.peer_may_open[dir] = self.peer_closed[dir] + initial;
			if self.peer_may_open[dir] - self.peer_may_open_sent[dir] >= (initial / 2).max(1) {
				self.driver.wake();
			}
		}
	}

	/// Sends a datagram, if the peer takes them and it fits; dropped otherwise (or when
	/// 64 KiB of datagrams wait already), as datagrams may be.
	pub fn send_datagram(&mut self, data: Bytes) -> Result<(), StreamError> {
		if let Some(end) = &self.end {
			return Err(StreamError::Closed(end.clone()));
		}
		let limit = self.peer.as_ref().map_or(0, |peer| peer.max_datagram_frame_size);
		// It must fit a DATAGRAM frame (its type and length, up to 9 bytes) in a record the peer
		// takes, or it would wait at the queue's head for good.
		if self.version == Version::Qmux00 || data.len() as u64 + 3 > limit || data.len() + 9 > self.max_body() {
			return Err(StreamError::Invalid);
		}
		if self.datagrams_out_bytes + data.len() <= DATAGRAM_SEND_QUEUE {
			self.datagrams_out_bytes += data.len();
			self.datagrams_out.push_back(data);
			self.driver.wake();
		}
		Ok(())
	}

	/// The next datagram received.
	pub fn poll_recv_datagram(&mut self, waiter: &Waiter) -> Poll<Result<Bytes, StreamError>> {
		if let Some(data) = self.datagrams_in.pop_front() {
			self.datagrams_in_bytes -= data.len();
			return Poll::Ready(Ok(data));
		}
		if let Some(end) = &self.end {
			return Poll::Ready(Err(StreamError::Closed(end.clone())));
		}
		self.datagram_waiters.register(waiter);
		Poll::Pending
	}

	/// Closes the connection with the application's `code` (CONNECTION_CLOSE 0x1d, a clean end).
	pub fn close(&mut self, code: u64, reason: &str) {
		if self.end.is_some() {
			return;
		}
		self.closing = Some(Frame::Close {
			application: true,
			code,
			reason: Bytes::copy_from_slice(reason.as_bytes()),
		});
		self.finish_all(End::Local(code));
	}

	/// Ready once the peer's parameters came, with the application protocol they agree on: the
	/// first of ours (in `Config::params`) the peer also named, as the public implementations
	/// choose on plaintext TCP. `None` if the connection ended first, or nothing is in common.
	pub fn poll_application_protocol(&mut self, waiter: &Waiter) -> Poll<Option<String>> {
		if let Some(peer) = &self.peer {
			let ours = &self.config.params.application_protocols;
			return Poll::Ready(ours.iter().find(|p| peer.application_protocols.contains(p)).cloned());
		}
		if self.end.is_some() {
			return Poll::Ready(None);
		}
		self.params_waiters.register(waiter);
		Poll::Pending
	}

	/// Ready once the connection has ended.
	pub fn poll_closed(&mut self, waiter: &Waiter) -> Poll<End> {
		if let Some(end) = &self.end {
			return Poll::Ready(end.clone());
		}
		self.closed_waiters.register(waiter);
		Poll::Pending
	}

	/// Ends everything: every waiter learns it, every queue is dropped.
	fn finish_all(&mut self, end: End) {
		self.end = Some(end);
		for stream in self.streams.values_mut() {
			if let Some(send) = stream.send.as_mut() {
				send.queue.clear();
				send.queued = 0;
			}
			stream.waiters.wake();
		}
		self.queued = 0;
		self.datagrams_out.clear();
		self.control.clear();
		for list in self
			.open_waiters
			.iter_mut()
			.chain(self.accept_waiters.iter_mut())
			.chain([
				&mut self.queue_waiters,
				&mut self.datagram_waiters,
				&mut self.closed_waiters,
				&mut self.params_waiters,
				&mut self.driver,
			]) {
			list.wake();
		}
	}

	// --- sending ---------------------------------------------------------------------------

	/// The largest record body the peer takes.
	fn max_body(&self) -> usize {
		let peer = self.peer.as_ref().map_or(MIN_RECORD_SIZE, |peer| peer.max_record_size);
		peer.min(64 << 10) as usize
	}

	/// Whether [`poll_transmit`](Self::poll_transmit) has something.
	pub fn wants_transmit(&self) -> bool {
		if self.end.is_some() {
			return self.closing.is_some() && !self.close_sent;
		}
		!self.params_sent
			|| self.pong.is_some()
			|| !self.control.is_empty()
			|| !self.credit.is_empty()
			|| self.recv_max > self.recv_max_sent
			|| self.peer_may_open[0] > self.peer_may_open_sent[0]
			|| self.peer_may_open[1] > self.peer_may_open_sent[1]
			|| !self.datagrams_out.is_empty()
			|| (self.peer.is_some() && !self.scheduler.is_empty())
	}

	/// The next record body to send, built at `now`: control frames first, then datagrams, then
	/// stream data in the scheduler's order, up to the peer's record size. On qmux-00 one frame
	/// at a time (a WebSocket message carries exactly one there).
	pub fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
		let one_frame = self.version == Version::Qmux00;
		let max = self.max_body();
		let mut out = Vec::new();
		if let Some(close) = self.closing.as_ref().filter(|_| !self.close_sent) {
			close.encode(&mut out);
			self.close_sent = true;
			self.last_sent = now;
			return Some(out);
		}
		if self.end.is_some() {
			return None;
		}
		if !self.params_sent {
			self.params_sent = true;
			let blob = self.config.params.encode(self.version);
			Frame::TransportParameters(Bytes::from(blob)).encode(&mut out);
			self.last_sent = now;
			return Some(out);
		}
		let full = |out: &Vec<u8>| (one_frame && !out.is_empty()) || out.len() + 64 > max;
		if let Some(sequence) = self.pong.take() {
			Frame::PingResponse(sequence).encode(&mut out);
		}
		while !full(&out) {
			let Some(frame) = self.control.pop_front() else {
				break;
			};
			frame.encode(&mut out);
		}
		while !full(&out) {
			let Some(id) = self.credit.pop() else {
				break;
			};
			if let Some(recv) = self.streams.get_mut(&id).and_then(|s| s.recv.as_mut()) {
				recv.credit_queued = false;
				if !recv.is_over() && recv.fin.is_none() {
					recv.max = recv.read + recv.window;
					Frame::MaxStreamData { id, max: recv.max }.encode(&mut out);
				}
			}
		}
		if !full(&out) && self.recv_max > self.recv_max_sent {
			self.recv_max_sent = self.recv_max;
			Frame::MaxData(self.recv_max).encode(&mut out);
		}
		for dir in [0, 1] {
			if !full(&out) && self.peer_may_open[dir] > self.peer_may_open_sent[dir] {
				self.peer_may_open_sent[dir] = self.peer_may_open[dir];
				Frame::MaxStreams {
					bidi: dir == 0,
					max: self.peer_may_open[dir],
				}
				.encode(&mut out);
			}
		}
		while !full(&out)
			&& self
				.datagrams_out
				.front()
				.is_some_and(|data| out.len() + data.len() + 9 <= max)
		{
			let data = self.datagrams_out.pop_front().expect("looked at above");
			self.datagrams_out_bytes -= data.len();
			Frame::Datagram(data).encode(&mut out);
		}
		if self.peer.is_some() {
			self.write_streams(&mut out, max, one_frame);
		}
		if out.is_empty() {
			return None;
		}
		self.last_sent = now;
		Some(out)
	}

	/// Adds STREAM frames to `out`, in the scheduler's order, up to `max` bytes.
	fn write_streams(&mut self, out: &mut Vec<u8>, max: usize, one_frame: bool) {
		loop {
			if (one_frame && !out.is_empty()) || out.len() + 32 >= max {
				return;
			}
			let Some(pick) = self.scheduler.pick() else {
				return;
			};
			let id = pick.key;
			let send = self
				.streams
				.get_mut(&id)
				.and_then(|s| s.send.as_mut())
				.expect("a scheduled stream has a send half");
			let front = send.queue.front().map_or(0, Bytes::len);
			// Reset, or nothing to send (not even a FIN): off the scheduler until written to.
			if send.over || (front == 0 && !send.finish) {
				self.scheduler.sent(pick, 0, After::Drained);
				continue;
			}
			let stream_credit = send.max.saturating_sub(send.offset);
			let connection_credit = self.send_max.saturating_sub(self.sent);
			let header = frame::stream_header_len(id, send.offset, MAX_STREAM_PAYLOAD);
			// At least 13 bytes: the loop's first check leaves 32, a header takes 19 at most.
			let room = (max - out.len()).saturating_sub(header);
			let len = front
				.min(pick.allowance)
				.min(room)
				.min(MAX_STREAM_PAYLOAD)
				.min(stream_credit.min(connection_credit) as usize);
			if front > 0 && len == 0 {
				// Credit stopped it: it waits for MAX_STREAM_DATA, or MAX_DATA (`blocked`).
				if stream_credit > 0 && !send.blocked {
					send.blocked = true;
					self.blocked.push(id);
				}
				self.scheduler.sent(pick, 0, After::Blocked);
				continue;
			}
			let data = match send.queue.front_mut() {
				Some(chunk) if len == chunk.len() => send.queue.pop_front().expect("looked at above"),
				Some(chunk) => chunk.split_to(len),
				None => Bytes::new(),
			};
			send.queued -= len as u64;
			self.queued -= len as u64;
			let fin = send.finish && send.queue.is_empty();
			frame::stream_header(id, send.offset, len, fin, out);
			out.extend_from_slice(&data);
			send.offset += len as u64;
			self.sent += len as u64;
			let after = if send.queue.is_empty() {
				After::Drained
			} else {
				After::Ready
			};
			if fin {
				send.over = true;
			}
			self.scheduler.sent(pick, len.min(pick.allowance), after);
			if len > 0 {
				self.queue_waiters.wake();
			}
			if let Some(stream) = self.streams.get_mut(&id) {
				stream.waiters.wake();
			}
			if fin {
				self.collect(id);
			}
		}
	}

	// --- the clock --------------------------------------------------------------------------

	/// The idle timeout both sides agreed: the smaller of the two that are not zero.
	fn idle_timeout(&self) -> Option<Duration> {
		let ours = self.config.params.idle_timeout_ms;
		let theirs = self.peer.as_ref().map_or(0, |peer| peer.idle_timeout_ms);
		let ms = match (ours, theirs) {
			(0, 0) => return None,
			(0, t) | (t, 0) => t,
			(a, b) => a.min(b),
		};
		Some(Duration::from_millis(ms))
	}

	/// When [`handle_timeout`](Self::handle_timeout) must run next.
	pub fn poll_timeout(&self) -> Option<Instant> {
		if self.end.is_some() {
			return None;
		}
		if self.peer.is_none() {
			return Some(self.started + PARAMS_TIMEOUT);
		}
		let idle = self.idle_timeout()?;
		let expiry = self.last_received + idle;
		let ping = (self.version != Version::Qmux00).then(|| self.last_sent.max(self.last_received) + idle / 3);
		Some(ping.map_or(expiry, |ping| ping.min(expiry)))
	}

	/// Runs the clock at `now`: a peer silent past the idle timeout, or one that never sent its
	/// parameters, ends the connection (quietly: no close frame); a quiet connection sends a
	/// QX_PING to keep the peer's timer from firing.
	pub fn handle_timeout(&mut self, now: Instant) {
		if self.end.is_some() {
			return;
		}
		if self.peer.is_none() {
			if now >= self.started + PARAMS_TIMEOUT {
				self.fail(violation(code::PROTOCOL_VIOLATION, "no transport parameters in time"));
			}
			return;
		}
		let Some(idle) = self.idle_timeout() else {
			return;
		};
		if now >= self.last_received + idle {
			self.lost("idle timeout");
			return;
		}
		if self.version != Version::Qmux00 && now >= self.last_sent.max(self.last_received) + idle / 3 {
			self.control.push_back(Frame::PingRequest(self.next_ping));
			self.next_ping += 1;
			self.last_sent = now;
			self.driver.wake();
		}
	}
}

#[cfg(test)]
mod tests;
