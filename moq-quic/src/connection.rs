//! A connection and its driver.
//!
//! `quinn_proto::Connection` is a state machine; a kio task per connection drives it. A turn
//! runs in the order that avoids stalls (docs/moq-quic.md §2): datagrams the
//! endpoint routed here, the timeout if it passed, endpoint events (each `NeedIdentifiers` answer
//! goes straight back in; `Drained` lets the endpoint forget the connection), application events
//! (wakes for readers, writers, acceptors), then the send scheduler and a budgeted
//! `poll_transmit` loop, and last the timer re-armed from `poll_timeout` (always after
//! `poll_transmit`, which may arm pacing). Every application call that can produce output marks
//! the connection dirty and wakes its driver.
//!
//! # What enters quinn-proto, and when
//!
//! Written data waits in the stream's own queue (at most [`STREAM_BUFFER`] per stream, and
//! [`crate::Config::send_buffer`] over all of them: a peer that lets us open many streams and
//! grants them no credit holds no more). A stream's queue takes a write only while it holds less
//! than quinn-proto has taken from it so far, or than [`UNPROVEN_QUEUE`] if that is more: what a
//! writer hands over ahead of the peer's credit is in proportion to that credit, so a peer that
//! asks for data and grants none makes us prepare a few KiB per stream, not the whole buffer (see
//! [`SendHalf::limit`]). A writer past either bound waits until the queue drains below it: the
//! connection's, for the first bytes to leave any stream; its stream's, for quinn-proto to take
//! enough (after a large write, about half of it).
//! The [`Scheduler`] decides which stream feeds
//! quinn-proto next (strict priority levels, deficit round robin of send groups, streams within a
//! group), topping up what quinn-proto holds unsent to one GSO batch before each
//! `poll_transmit`, so the order on the wire is ours: whatever quinn-proto holds, it orders by its
//! own per-stream round robin. It does not say how much it holds unsent, so the driver keeps an
//! estimate (`unsent`): each write adds to it, and each transmit takes off its size less the least
//! overhead a datagram can have. The estimate never exceeds the truth (above it, quinn-proto could
//! run dry while the driver held back, and the connection would stall); it errs low by overhead,
//! retransmissions and ACKs, so quinn-proto may hold a little more, until it next drains.
//! quinn-proto's send window, only a cap, is kept at twice the congestion window plus two batches
//! (it also counts data lost or acknowledged out of order), and what it holds is ordered by the
//! same priority, mirrored onto its streams (its retransmissions follow that order too).
//!
//! # Budget
//!
//! A turn produces at most [`TX_DATAGRAM_BUDGET`] datagrams and then yields (other connections on
//! the worker get their turn; this one stays dirty and runs again), like quinn's own driver.
//!
//! # Borrow order (docs/moq-quic.md §4)
//!
//! A connection's state and its endpoint's are `RefCell`s. Code holding a connection's state may
//! borrow the endpoint's briefly (an endpoint event, a transmit queued, a buffer taken), never the
//! other way round: endpoint code collects what it needs, releases its borrow, then calls into
//! the connection, and debug builds assert it at those entry points
//! ([`ConnShared::assert_endpoint_released`]). No borrow is held across an await, and wakes are
//! taken out of the state and woken after it is released.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use kio::sync::{Budget, Charge};
use kio::time::Deadline;
use kio::{Waiter, WaiterList};
use quinn_proto::{ConnectionError, ConnectionHandle, Dir, Event, StreamEvent, StreamId, VarInt};

use crate::endpoint::{self, Endpoint, EndpointShared, Outgoing};
use crate::idhash::IdMap;
use crate::scheduler::{After, GroupId, Scheduler, StreamSlot};
use crate::stream::{RecvStream, SendStream};

/// Datagrams a connection produces per turn before it yields.
pub const TX_DATAGRAM_BUDGET: usize = 64;
/// Bytes a group may send per round-robin turn. Each turn's data enters quinn-proto as one piece
/// per queued chunk, and quinn-proto 0.11.19 walks its unacknowledged pieces for every STREAM
/// frame it builds (`SendBuffer::get`): with 1,200-byte turns that walk was 38% of all
/// instructions of a 32 MiB transfer (callgrind, 983 M); with 16 KiB turns the transfer took 595 M
/// (−40%), and loopback goodput rose from 296 to 375 MB/s on one worker (`benches/results/
/// throughput.md`). Priorities stay strict whatever the quantum; it only sets how finely groups
/// of one priority interleave.
const QUANTUM: usize = 16 * 1024;
/// The most a stream's own queue holds (a write is split there); writers wait before it, at
/// [`SendHalf::limit`].
pub(crate) const STREAM_BUFFER: usize = 256 * 1024;
/// What a stream's queue takes before quinn-proto has taken as much from it: enough for a group's
/// header and a few small frames, which a live group's stream rarely holds more of. A write that
/// finds the queue below the limit is taken whole (up to [`STREAM_BUFFER`], and as far as the
/// connection's budget has room; the rest waits for the queue to drain below it again), so a
/// large frame, shared with the cache rather than copied, still goes in one piece and its
/// priority holds from the first turn; small frames are copied into their chunks (moq-net), and a
/// subscriber that asks for 64 cached groups of them and grants no credit made the relay copy and
/// queue 256 KiB for each, where now it is this.
pub(crate) const UNPROVEN_QUEUE: usize = 4 * 1024;
/// quinn-proto's send window never goes below this.
const MIN_SEND_WINDOW: u64 = 64 * 1024;
/// The least of a datagram that cannot be stream data: a short header with no connection id and
/// a one-byte packet number (2), the AEAD tag (16) and a STREAM frame's type and stream id (2).
/// Taking off less than a transmit's real overhead keeps `unsent` at or below the truth.
const MIN_DATAGRAM_OVERHEAD: usize = 20;
/// The allowance a client gives a peer that opens streams one or two at a time (see
/// `ConnState::grow_allowance`): a MAX_STREAMS every 17 streams instead of every 3 at
/// [`crate::INITIAL_STREAMS`]. quinn-proto keeps an entry for each allowed stream (some 67 bytes,
/// dhat), and the peer may then have that many open at once: on the relay's publishers it cost
/// 53 KiB per connection, so only clients give it.
pub const CHURN_ALLOWANCE: u64 = 128;

/// A stream id as the scheduler's key, and back.
fn stream_key(id: StreamId) -> u64 {
	VarInt::from(id).into_inner()
}

fn key_stream(key: u64) -> StreamId {
	StreamId::from(VarInt::from_u64(key).expect("made from a stream id"))
}

fn dir_index(dir: Dir) -> usize {
	match dir {
		Dir::Bi => 0,
		Dir::Uni => 1,
	}
}

/// Why a stream operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamError {
	/// The peer reset the stream with this code.
	Reset(u64),
	/// The peer asked us to stop sending, with this code.
	Stopped(u64),
	/// The connection is gone.
	ConnectionLost(ConnectionError),
	/// A local misuse: a write after finish or reset.
	Closed,
}

impl std::fmt::Display for StreamError {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		match self {
			Self::Reset(code) => write!(f, "stream reset by peer with code {code}"),
			Self::Stopped(code) => write!(f, "stream stopped by peer with code {code}"),
			Self::ConnectionLost(e) => write!(f, "connection lost: {e}"),
			Self::Closed => f.write_str("stream already finished or reset"),
		}
	}
}

impl std::error::Error for StreamError {
	fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
		match self {
			Self::ConnectionLost(err) => Some(err),
			_ => None,
		}
	}
}

/// The chunks a stream holds for quinn-proto, front first. The front chunk is kept inline: a MoQ
/// group is usually one chunk (its headers and a small frame together), and a `VecDeque`'s first
/// push is an allocation per stream.
#[derive(Default)]
struct Chunks {
	/// The front chunk; `None` only when `rest` is empty too.
	front: Option<Bytes>,
	rest: VecDeque<Bytes>,
}

impl Chunks {
	fn push_back(&mut self, chunk: Bytes) {
		if self.front.is_none() {
			self.front = Some(chunk);
		} else {
			self.rest.push_back(chunk);
		}
	}

	fn push_front(&mut self, chunk: Bytes) {
		if let Some(front) = self.front.replace(chunk) {
			self.rest.push_front(front);
		}
	}

	fn pop_front(&mut self) -> Option<Bytes> {
		let front = self.front.take();
		self.front = self.rest.pop_front();
		front
	}

	fn clear(&mut self) {
		self.front = None;
		self.rest.clear();
	}

	fn len(&self) -> usize {
		usize::from(self.front.is_some()) + self.rest.len()
	}
}

/// What a queued chunk costs beyond its bytes, charged to the send buffer with them: its place in
/// the queue (32 bytes) and the allocation a small copied chunk has (a frame's header and
/// payload, with the allocator's overhead). Without it, a subscriber that never reads a
/// publisher's one-byte frames made the relay hold a hundred bytes for every five charged.
const CHUNK_COST: u64 = 96;

/// Our half of a send stream: data not yet handed to quinn-proto, and the scheduler's entry.
struct SendHalf {
	queue: Chunks,
	/// What `queue` holds, charged to the connection's send buffer.
	queued: Charge,
	/// [`CHUNK_COST`] for each chunk in `queue`, charged to the send buffer too.
	records: Charge,
	/// `finish` was called; quinn-proto hears it once the queue is empty.
	finishing: bool,
	/// Finished or reset in quinn-proto: nothing more to do here.
	done: bool,
	slot: StreamSlot,
	group: GroupId,
	/// An explicit send group shared with other streams, by its application key.
	shared_group: Option<u64>,
	stopped: Option<u64>,
	/// quinn-proto refused a write (flow control): out of the scheduler until `Writable`, so a
	/// stuck stream is not tried again on every turn nor re-readied by every write.
	blocked: bool,
	/// Bytes quinn-proto has taken from the queue: never more than the peer's credit for the
	/// stream (and the connection's window).
	taken: usize,
}

impl SendHalf {
	/// The queue takes a write while it holds less than this: what quinn-proto has taken so far,
	/// between [`UNPROVEN_QUEUE`] and [`STREAM_BUFFER`]. A stream the peer credits grows its queue
	/// as fast as the data leaves (it doubles with each drain); one it does not stays at a few KiB.
	fn limit(&self) -> usize {
		self.taken.clamp(UNPROVEN_QUEUE, STREAM_BUFFER)
	}
}

struct StreamState {
	send: Option<SendHalf>,
	/// Handles still held (send and receive); the entry goes when none are left and the send half
	/// has nothing more to hand over.
	handles: u8,
	waiters: WaiterList,
	/// quinn-proto may have something to read (data, the end, a reset): set by its `Readable`
	/// event, cleared when a read finds nothing. A task that waits on a stream and on something
	/// else is polled for both whenever either wakes it (a subscription's request stream, on
	/// every group it sends); without the flag each of those polls was a full quinn-proto read,
	/// about 1,100 instructions per delivered frame on the relay (callgrind).
	readable: bool,
}

/// A shared group: its scheduler id and how many streams are in it.
struct SharedGroup {
	id: GroupId,
	streams: usize,
}

pub(crate) struct ConnState {
	proto: quinn_proto::Connection,
	inbox: VecDeque<quinn_proto::ConnectionEvent>,
	dirty: bool,
	driver: WaiterList,
	established: bool,
	lost: Option<ConnectionError>,
	/// Waiters for the handshake and for the connection's end.
	state_waiters: WaiterList,
	accept_waiters: [WaiterList; 2],
	open_waiters: [WaiterList; 2],
	datagram_waiters: WaiterList,
	streams: IdMap<StreamId, StreamState>,
	/// Streams the peer opened that were accepted, by direction: the peer's streams are accepted
	/// in order, so one whose index is at least this is still waiting.
	accepted: [u64; 2],
	/// `accepted` when the peer's allowance in each direction last grew.
	grown_at: [u64; 2],
	/// STOP_SENDING for the peer's bidirectional streams not accepted yet, applied at accept.
	early_stops: IdMap<StreamId, u64>,
	groups: IdMap<u64, SharedGroup>,
	scheduler: Scheduler,
	gso_segments: usize,
	/// The most streams of each direction the peer may be allowed ([`crate::Config::max_streams`]);
	/// what it is allowed now is quinn-proto's `max_concurrent_streams`.
	max_streams: u64,
	/// An estimate, never above the truth, of the stream bytes quinn-proto was given and has not
	/// sent yet (see the module docs).
	unsent: usize,
	/// A server connection not yet handed to `accept`.
	unannounced: bool,
	/// What all send streams hold queued, against [`crate::Config::send_buffer`].
	queue: QueueBudget,
	/// What the connection is charged, if its endpoint charges memory.
	memory: Option<Memory>,
}

/// The bytes a connection's send streams hold queued (not yet handed to quinn-proto), all
/// streams together, and the writers waiting for room.
struct QueueBudget {
	/// What the send streams hold queued, and their chunks' [`CHUNK_COST`].
	bytes: Budget,
	/// The chunks' part of `bytes`.
	records: Budget,
	/// Writers that found no room; woken by the first bytes given back after.
	waiters: WaiterList,
}

impl QueueBudget {
	/// What the send streams hold queued is bounded per connection by the send buffer, and
	/// counted in the connection's memory once a turn ([`Memory::queued`]) without being refused
	/// by it: a writer waiting for room is woken by its own connection's drain, which it could not
	/// count on if other connections' memory held it back. (Large frames queued are the cache's
	/// own bytes, shared, not copies.)
	fn new(capacity: u64) -> Self {
		let bytes = Budget::new(capacity);
		Self {
			records: bytes.child(u64::MAX),
			bytes,
			waiters: WaiterList::new(),
		}
	}

	fn room(&self) -> usize {
		self.bytes.room() as usize
	}

	/// Gives `bytes` of a stream's charge back. Writers wait only when the budget has no room
	/// for a chunk, so only a give from (nearly) full wakes them.
	fn give(&mut self, charge: &mut Charge, bytes: usize) {
		if bytes > 0 && self.bytes.room() <= CHUNK_COST {
			self.waiters.wake();
		}
		charge.shrink(bytes as u64);
	}

	/// Bytes of data the send streams hold queued, their chunks' cost aside.
	fn data(&self) -> usize {
		(self.bytes.used() - self.records.used()) as usize
	}

	/// Drops what a stream holds queued and gives its charges back.
	fn drop_queue(&mut self, half: &mut SendHalf) {
		half.queue.clear();
		self.give_all(&mut half.queued, &mut half.records);
	}

	/// Gives a stream's data and chunk charges back, waking the writers waiting for room if
	/// there was none before. Both in one step: given one after the other, the first leaves room
	/// above [`CHUNK_COST`] by the time the second checks, and a writer waiting for room would
	/// sleep on.
	fn give_all(&mut self, data: &mut Charge, records: &mut Charge) {
		if data.amount() + records.amount() > 0 && self.bytes.room() <= CHUNK_COST {
			self.waiters.wake();
		}
		data.resize(0);
		records.resize(0);
	}

	/// Brings a stream's chunk charge down to the chunks its queue holds.
	fn count_chunks(&mut self, half: &mut SendHalf) {
		let records = half.queue.len() as u64 * CHUNK_COST;
		if records < half.records.amount() {
			let freed = (half.records.amount() - records) as usize;
			self.give(&mut half.records, freed);
		}
	}
}

/// What a stream holds queued, in bytes.
fn queued(half: &SendHalf) -> usize {
	half.queued.amount() as usize
}

/// What an accepted connection is charged, when its endpoint charges memory
/// ([`crate::Config::with_memory`]).
pub(crate) struct Memory {
	/// The connection's own budget, under its address's.
	pub(crate) budget: Budget,
	/// [`crate::CONNECTION_COST`], held while the connection lives.
	pub(crate) _cost: Charge,
	/// Its connection receive window, as granted.
	pub(crate) window: Charge,
	/// What its send streams hold queued, as of its driver's last turn: counted, never refused
	/// (see [`QueueBudget::new`]). Brought up to date once a turn rather than with every chunk,
	/// which took four more atomic updates of shared budgets per chunk queued and given back.
	pub(crate) queued: Charge,
}

/// A connection's state, shared by its handles and its driver.
pub(crate) struct ConnShared {
	pub(crate) handle: ConnectionHandle,
	endpoint: Weak<EndpointShared>,
	state: RefCell<ConnState>,
}

impl ConnShared {
	pub(crate) fn new(
		handle: ConnectionHandle,
		endpoint: Weak<EndpointShared>,
		proto: quinn_proto::Connection,
		gso_segments: usize,
		max_streams: u32,
		send_buffer: usize,
		memory: Option<Memory>,
	) -> Rc<Self> {
		let unannounced = proto.side().is_server();
		let max_streams = u64::from(max_streams);
		let mut proto = proto;
		for dir in [Dir::Bi, Dir::Uni] {
			if proto.max_concurrent_streams(dir) > max_streams {
				proto.set_max_concurrent_streams(dir, VarInt::from_u64(max_streams).unwrap_or(VarInt::MAX));
			}
		}
		Rc::new(Self {
			handle,
			endpoint,
			state: RefCell::new(ConnState {
				proto,
				inbox: VecDeque::new(),
				dirty: true,
				driver: WaiterList::new(),
				established: false,
				lost: None,
				state_waiters: WaiterList::new(),
				accept_waiters: [WaiterList::new(), WaiterList::new()],
				open_waiters: [WaiterList::new(), WaiterList::new()],
				datagram_waiters: WaiterList::new(),
				streams: IdMap::default(),
				accepted: [0, 0],
				grown_at: [0, 0],
				early_stops: IdMap::default(),
				groups: IdMap::default(),
				scheduler: Scheduler::new(QUANTUM),
				gso_segments,
				max_streams,
				unsent: 0,
				unannounced,
				queue: QueueBudget::new(send_buffer as u64),
				memory,
			}),
		})
	}

	/// What the send buffer holds now: bytes queued and their chunks' cost (0 if the state is
	/// borrowed, which it is not outside a connection's own calls).
	pub(crate) fn send_buffer_used(&self) -> usize {
		self.state
			.try_borrow()
			.map_or(0, |state| state.queue.bytes.used() as usize)
	}

	/// A datagram for this connection, from the endpoint.
	pub(crate) fn deliver(&self, event: quinn_proto::ConnectionEvent) {
		self.assert_endpoint_released();
		let mut state = self.state.borrow_mut();
		state.inbox.push_back(event);
		state.mark_dirty();
	}

	/// Endpoint code calls into a connection only with the endpoint's state released (the borrow
	/// order in the module docs); debug builds check it.
	pub(crate) fn assert_endpoint_released(&self) {
		#[cfg(debug_assertions)]
		if let Some(endpoint) = self.endpoint.upgrade() {
			assert!(
				endpoint.state.try_borrow_mut().is_ok(),
				"borrow order: the endpoint's state is held while calling into a connection"
			);
		}
	}

	/// Closes with an application code.
	pub(crate) fn close(&self, code: u64, reason: &[u8]) {
		self.assert_endpoint_released();
		let mut state = self.state.borrow_mut();
		if state.lost.is_some() {
			return;
		}
		let code = VarInt::from_u64(code).unwrap_or(VarInt::MAX);
		state
			.proto
			.close(kio::time::now(), code, Bytes::copy_from_slice(reason));
		state.lose(ConnectionError::LocallyClosed);
		state.mark_dirty();
	}

	/// The endpoint went away with this connection open.
	pub(crate) fn abandon(&self) {
		self.assert_endpoint_released();
		self.state.borrow_mut().lose(ConnectionError::LocallyClosed);
	}
}

impl ConnState {
	fn mark_dirty(&mut self) {
		if !self.dirty {
			self.dirty = true;
			self.driver.wake();
		}
	}

	/// Records the end (the first reason wins) and wakes everyone waiting on anything.
	fn lose(&mut self, reason: ConnectionError) {
		if self.lost.is_none() {
			self.lost = Some(reason);
		}
		let mut wakes = self.state_waiters.take();
		for list in self.accept_waiters.iter_mut().chain(self.open_waiters.iter_mut()) {
			wakes.append(list.take());
		}
		wakes.append(self.datagram_waiters.take());
		wakes.append(self.queue.waiters.take());
		for stream in self.streams.values_mut() {
			stream.readable = true;
			wakes.append(stream.waiters.take());
		}
		wakes.wake();
	}

	fn lost_error(&self) -> Option<StreamError> {
		self.lost.clone().map(StreamError::ConnectionLost)
	}

	fn wake_stream(&mut self, id: StreamId) {
		if let Some(stream) = self.streams.get_mut(&id) {
			stream.readable = true;
			stream.waiters.wake();
		}
	}

	/// Dispatches one application event.
	fn on_event(&mut self, event: Event) -> bool {
		match event {
			Event::HandshakeDataReady => {}
			Event::Connected => {
				self.established = true;
				self.state_waiters.wake();
				if self.unannounced {
					self.unannounced = false;
					return true;
				}
			}
			Event::ConnectionLost { reason } => self.lose(reason),
			Event::Stream(StreamEvent::Opened { dir }) => {
				self.grow_allowance(dir);
				self.accept_waiters[dir_index(dir)].wake();
			}
			Event::Stream(StreamEvent::Available { dir }) => self.open_waiters[dir_index(dir)].wake(),
			Event::Stream(StreamEvent::Readable { id }) => self.wake_stream(id),
			Event::Stream(StreamEvent::Writable { id }) => {
				if let Some(half) = self.streams.get_mut(&id).and_then(|s| s.send.as_mut()) {
					half.blocked = false;
					if !half.done && (queued(half) > 0 || half.finishing) {
						self.scheduler.ready(half.slot);
					}
				}
			}
			Event::Stream(StreamEvent::Finished { id }) => {
				self.wake_stream(id);
				self.collect(id);
			}
			Event::Stream(StreamEvent::Stopped { id, error_code }) => {
				self.on_stopped(id, error_code.into_inner());
			}
			Event::DatagramReceived => self.datagram_waiters.wake(),
			Event::DatagramsUnblocked => {}
		}
		false
	}

	/// Doubles the peer's stream allowance in `dir`, up to the maximum, once it has half of it open:
	/// quinn-proto's state for allowed streams is then paid for by peers that use them (see
	/// [`crate::INITIAL_STREAMS`]), and a peer that keeps opening streams is never held back more
	/// than the round trip of the MAX_STREAMS that this sends.
	///
	/// On a client, also straight to [`CHURN_ALLOWANCE`], once the peer has opened twice the
	/// allowance since it last grew, however few at a time: quinn-proto grants streams back in a
	/// MAX_STREAMS each time an eighth of the allowance has closed, an ack-eliciting packet that
	/// the peer answers with an ACK of its own. A MoQ viewer gets a stream per group, one or two
	/// open at a time; at 16 it sent a MAX_STREAMS every third group, and the relay an ACK alone
	/// for each (0.34 datagrams per delivered frame on top of the frame's one, fanout of 100 at
	/// 5 fps; see docs/bench.md). Not on a server: there, publishers' connections took 53 KiB
	/// more each (the relay benchmark's chat of 20, 416 against 363 KiB per connection, same run)
	/// for the MAX_STREAMS the relay sends them, and a server holds many connections.
	fn grow_allowance(&mut self, dir: Dir) {
		let allowance = self.proto.max_concurrent_streams(dir);
		if allowance >= self.max_streams {
			return;
		}
		let i = dir_index(dir);
		let crowded = self.proto.streams().remote_open_streams(dir) * 2 >= allowance;
		let churning = self.proto.side().is_client()
			&& allowance < CHURN_ALLOWANCE
			&& self.accepted[i] - self.grown_at[i] >= 2 * allowance;
		if !crowded && !churning {
			return;
		}
		self.grown_at[i] = self.accepted[i];
		let floor = if churning { CHURN_ALLOWANCE } else { 1 };
		let count = (allowance * 2).max(floor).min(self.max_streams);
		self.proto
			.set_max_concurrent_streams(dir, VarInt::from_u64(count).unwrap_or(VarInt::MAX));
	}

	/// The peer stopped a stream: drop what is queued, and reset it with the same code.
	fn on_stopped(&mut self, id: StreamId, code: u64) {
		// A reset drops what quinn-proto holds unsent of the stream, by an amount not known here:
		// zero keeps the estimate at or below the truth.
		self.unsent = 0;
		let Some(stream) = self.streams.get_mut(&id) else {
			// A stream of the peer's not accepted yet: quinn-proto has not counted it among our
			// send streams, and resetting it now would free it uncounted (its counter
			// underflows). The stop waits for the accept.
			if id.initiator() != self.proto.side() && id.index() >= self.accepted[dir_index(id.dir())] {
				self.early_stops.insert(id, code);
				return;
			}
			let _ = self
				.proto
				.send_stream(id)
				.reset(VarInt::from_u64(code).unwrap_or(VarInt::MAX));
			return;
		};
		if let Some(half) = stream.send.as_mut() {
			half.stopped = Some(code);
			self.queue.drop_queue(half);
			if !half.done {
				half.done = true;
				self.scheduler.remove_stream(half.slot);
				let _ = self
					.proto
					.send_stream(id)
					.reset(VarInt::from_u64(code).unwrap_or(VarInt::MAX));
			}
		}
		stream.waiters.wake();
		self.collect(id);
	}

	/// Starts tracking stream `id`: a handle for each half we hold, and for a half we send on, its
	/// own send group (at priority 0) in the scheduler.
	fn track(&mut self, id: StreamId, send: bool, recv: bool) {
		let send = send.then(|| {
			let group = self.scheduler.insert_group(0);
			SendHalf {
				queue: Chunks::default(),
				queued: self.queue.bytes.empty(),
				records: self.queue.records.empty(),
				finishing: false,
				done: false,
				slot: self.scheduler.insert_stream(group, stream_key(id)),
				group,
				shared_group: None,
				stopped: None,
				blocked: false,
				taken: 0,
			}
		});
		let handles = u8::from(send.is_some()) + u8::from(recv);
		let entry = StreamState {
			send,
			handles,
			waiters: WaiterList::new(),
			readable: true,
		};
		self.streams.insert(id, entry);
		if let Some(code) = self.early_stops.remove(&id) {
			self.on_stopped(id, code);
		}
	}

	/// Forgets a stream's entry once no handle is left and nothing remains to hand over.
	fn collect(&mut self, id: StreamId) {
		let Some(stream) = self.streams.get(&id) else {
			return;
		};
		if stream.handles > 0 || stream.send.as_ref().is_some_and(|half| !half.done) {
			return;
		}
		let stream = self.streams.remove(&id).expect("looked up above");
		if let Some(half) = stream.send {
			self.release_group(half.group, half.shared_group);
		}
	}

	fn release_group(&mut self, group: GroupId, shared: Option<u64>) {
		match shared {
			None => self.scheduler.retire_group(group),
			Some(key) => {
				let entry = self.groups.get_mut(&key).expect("a shared group is counted");
				entry.streams -= 1;
				if entry.streams == 0 {
					self.groups.remove(&key);
					self.scheduler.retire_group(group);
				}
			}
		}
	}

	/// Hands queued data to quinn-proto, in the scheduler's order, up to `budget` bytes; returns
	/// how much it took.
	fn feed(&mut self, budget: usize) -> usize {
		let mut fed = 0;
		// Bounded: each pick sends, or takes its stream off the scheduler (drained, blocked until
		// `Writable`, or done).
		while fed < budget {
			let Some(pick) = self.scheduler.pick() else {
				break;
			};
			let id = key_stream(pick.key);
			let half = self
				.streams
				.get_mut(&id)
				.and_then(|s| s.send.as_mut())
				.expect("a scheduled stream has a send half");
			let allowance = pick.allowance.min(budget - fed);
			let mut sent = 0;
			let mut outcome = After::Drained;
			let mut full = false;
			let mut closed = false;
			let mut stream = self.proto.send_stream(id);
			while sent < allowance {
				let Some(mut chunk) = half.queue.pop_front() else {
					break;
				};
				let mut part = if chunk.len() > allowance - sent {
					chunk.split_to(allowance - sent)
				} else {
					std::mem::take(&mut chunk)
				};
				let offered = part.len();
				match stream.write_chunks(std::slice::from_mut(&mut part)) {
					Ok(written) => {
						sent += written.bytes;
						half.taken = half.taken.saturating_add(written.bytes);
						self.queue.give(&mut half.queued, written.bytes);
						// What quinn-proto did not take goes back in front, in order.
						if !chunk.is_empty() {
							half.queue.push_front(chunk);
						}
						if !part.is_empty() {
							half.queue.push_front(part);
						}
						if written.bytes < offered {
							// quinn-proto's window is full; the stream itself can go on. (Only a
							// write refused outright puts a stream on the list `Writable` is
							// reported from.)
							full = true;
							break;
						}
					}
					Err(quinn_proto::WriteError::Blocked) => {
						if !chunk.is_empty() {
							half.queue.push_front(chunk);
						}
						half.queue.push_front(part);
						outcome = After::Blocked;
						break;
					}
					Err(quinn_proto::WriteError::Stopped(code)) => {
						half.stopped = Some(code.into_inner());
						self.queue.drop_queue(half);
						break;
					}
					Err(quinn_proto::WriteError::ClosedStream) => {
						self.queue.drop_queue(half);
						closed = true;
						break;
					}
				}
			}
			self.queue.count_chunks(half);
			if outcome == After::Blocked {
				half.blocked = true;
			} else {
				outcome = if queued(half) > 0 { After::Ready } else { After::Drained };
			}
			let mut finished = false;
			// quinn-proto no longer knows the stream: nothing more can go out on it (later writes
			// fail with `Closed`).
			if closed && !half.done {
				half.done = true;
				finished = true;
			}
			if queued(half) == 0 && (half.finishing || half.stopped.is_some()) && !half.done {
				if half.stopped.is_none() {
					let _ = stream.finish();
				}
				half.done = true;
				finished = true;
			}
			let woke = queued(half) < half.limit();
			fed += sent;
			self.scheduler.sent(pick, sent, outcome);
			if finished {
				self.scheduler.remove_stream(pick.stream);
				self.collect(id);
			}
			if woke {
				self.wake_stream(id);
			}
			if full {
				break;
			}
		}
		fed
	}
}

/// Drives one connection until it has drained.
pub(crate) async fn drive(shared: Rc<ConnShared>) {
	let Some(endpoint) = shared.endpoint.upgrade() else {
		return;
	};
	let mut deadline = Deadline::new(None);
	// A server connection that has not completed its handshake by then is closed (limits.rs).
	let handshake_by = {
		let state = shared.state.borrow();
		let timeout = endpoint.state.borrow().config.handshakes.limits().handshake_timeout;
		state.unannounced.then(|| kio::time::now() + timeout)
	};
	// The sender's queue was full: wait for room before producing more.
	let mut tx_blocked = false;
	loop {
		kio::wait(|w| {
			if tx_blocked && endpoint.poll_tx_space(w) {
				tx_blocked = false;
				return Poll::Ready(());
			}
			let mut state = shared.state.borrow_mut();
			if state.dirty && !tx_blocked {
				return Poll::Ready(());
			}
			state.driver.register(w);
			drop(state);
			deadline.poll_elapsed(w)
		})
		.await;
		let outcome = turn(&shared, &endpoint);
		let mut next = shared.state.borrow_mut().proto.poll_timeout();
		if let Some(by) = handshake_by
			&& !shared.state.borrow().established
		{
			if kio::time::now() >= by {
				shared.close(0, b"handshake timeout");
			} else {
				next = Some(next.map_or(by, |next| next.min(by)));
			}
		}
		deadline.set(next);
		match outcome {
			Turn::Drained => {
				endpoint.forget(shared.handle);
				return;
			}
			Turn::Again => kio::yield_now().await,
			Turn::TxFull => tx_blocked = true,
			Turn::Idle => {}
		}
	}
}

enum Turn {
	Idle,
	Again,
	TxFull,
	Drained,
}

fn turn(shared: &Rc<ConnShared>, endpoint: &Rc<EndpointShared>) -> Turn {
	let now = kio::time::now();
	let mut state = shared.state.borrow_mut();
	state.dirty = false;
	while let Some(event) = state.inbox.pop_front() {
		state.proto.handle_event(event);
	}
	if state.proto.poll_timeout().is_some_and(|at| at <= now) {
		state.proto.handle_timeout(now);
	}
	let mut drained = false;
	while let Some(event) = state.proto.poll_endpoint_events() {
		drained |= event.is_drained();
		let back = endpoint.state.borrow_mut().proto.handle_event(shared.handle, event);
		if let Some(back) = back {
			state.proto.handle_event(back);
		}
	}
	let mut announce = false;
	while let Some(event) = state.proto.poll() {
		announce |= state.on_event(event);
	}
	if announce {
		drop(state);
		endpoint.established(Connection::new(shared.clone(), None));
		state = shared.state.borrow_mut();
	}
	if drained {
		let reason = state.lost.clone().unwrap_or(ConnectionError::LocallyClosed);
		state.lose(reason);
		return Turn::Drained;
	}

	// What the send streams hold queued, counted in the connection's memory (see `Memory::queued`).
	let queued = state.queue.bytes.used();
	if let Some(memory) = &mut state.memory
		&& !memory.queued.resize(queued)
	{
		let more = queued - memory.queued.amount();
		memory.queued.force(more);
	}

	// The cap on quinn-proto's buffer: about one congestion window past what is in flight. What it
	// holds unsent is kept to about a batch below, by `unsent`.
	let mtu = usize::from(state.proto.current_mtu());
	let batch = state.gso_segments * mtu;
	let window = state.proto.congestion_state().window();
	state
		.proto
		.set_send_window((2 * window + 2 * batch as u64).max(MIN_SEND_WINDOW));

	// `poll_transmit` writes into a buffer with room for a whole batch (13 KB). A transmit of one
	// datagram is copied out into a buffer of its own size and the big one serves the next
	// transmit; what is queued then holds about what it carries, and the big buffers go back to
	// the endpoint's pool when the turn ends. Keeping a big buffer per connection between turns
	// cost 13 KB per connection, and one per queued transmit 12 KB per connection at 100 viewers
	// (dhat and the relay benchmark).
	let mut scratch: Option<Vec<u8>> = None;
	let turn = produce(&mut state, endpoint, now, batch, &mut scratch);
	if let Some(buf) = scratch {
		endpoint.recycle(buf);
	}
	turn
}

/// The `poll_transmit` loop of [`turn`].
fn produce(
	state: &mut ConnState,
	endpoint: &EndpointShared,
	now: Instant,
	batch: usize,
	scratch: &mut Option<Vec<u8>>,
) -> Turn {
	let mut datagrams = 0;
	loop {
		if datagrams >= TX_DATAGRAM_BUDGET {
			state.dirty = true;
			return Turn::Again;
		}
		// Top quinn-proto's unsent data up to one batch, what this `poll_transmit` can take.
		let budget = batch.saturating_sub(state.unsent);
		if budget > 0 && !state.scheduler.is_empty() {
			let fed = state.feed(budget);
			state.unsent += fed;
		}
		// Checked before producing, so a produced transmit always has a place.
		if !endpoint.has_tx_space() {
			state.dirty = true;
			return Turn::TxFull;
		}
		let mut buf = scratch.take().unwrap_or_else(|| endpoint.take_buf());
		let max_datagrams = state.gso_segments;
		let Some(transmit) = state.proto.poll_transmit(now, max_datagrams, &mut buf) else {
			*scratch = Some(buf);
			return Turn::Idle;
		};
		let count = transmit.segment_size.map_or(1, |s| transmit.size.div_ceil(s));
		datagrams += count;
		// At most this much of it was our stream data (see `MIN_DATAGRAM_OVERHEAD`).
		let carried = transmit.size.saturating_sub(count * MIN_DATAGRAM_OVERHEAD);
		state.unsent = state.unsent.saturating_sub(carried);
		let buf = if transmit.size <= endpoint::SMALL_BUF {
			let mut small = endpoint.take_small_buf();
			small.extend_from_slice(&buf[..transmit.size]);
			buf.clear();
			*scratch = Some(buf);
			small
		} else {
			buf.truncate(transmit.size);
			buf
		};
		endpoint.queue(Outgoing {
			destination: transmit.destination,
			ecn: transmit.ecn,
			src_ip: transmit.src_ip,
			segment_size: transmit.segment_size,
			buf,
		});
	}
}

/// A QUIC connection. Cheap to clone; when the last clone (and the last stream) is dropped, the
/// connection is closed with code 0.
#[derive(Clone)]
pub struct Connection(pub(crate) Rc<ConnHandle>);

pub(crate) struct ConnHandle {
	pub(crate) shared: Rc<ConnShared>,
	/// Keeps a client's endpoint (and so its tasks) alive while the connection is in use.
	_endpoint: Option<Endpoint>,
}

impl Drop for ConnHandle {
	fn drop(&mut self) {
		self.shared.close(0, b"");
	}
}

impl Connection {
	pub(crate) fn new(shared: Rc<ConnShared>, endpoint: Option<Endpoint>) -> Self {
		Self(Rc::new(ConnHandle {
			shared,
			_endpoint: endpoint,
		}))
	}

	fn state(&self) -> std::cell::RefMut<'_, ConnState> {
		self.0.shared.state.borrow_mut()
	}

	/// Ready once the handshake completed (`Ok`) or failed.
	pub fn poll_established(&self, waiter: &Waiter) -> Poll<Result<(), ConnectionError>> {
		let mut state = self.state();
		if state.established {
			return Poll::Ready(Ok(()));
		}
		if let Some(reason) = &state.lost {
			return Poll::Ready(Err(reason.clone()));
		}
		state.state_waiters.register(waiter);
		Poll::Pending
	}

	/// See [`Self::poll_established`].
	pub async fn established(&self) -> Result<(), ConnectionError> {
		kio::wait(|w| self.poll_established(w)).await
	}

	/// The negotiated ALPN protocol.
	pub fn alpn(&self) -> Option<Vec<u8>> {
		let state = self.state();
		let data = state.proto.crypto_session().handshake_data()?;
		data.downcast::<quinn_proto::crypto::rustls::HandshakeData>()
			.ok()?
			.protocol
	}

	/// The server name the client asked for (SNI).
	pub fn server_name(&self) -> Option<String> {
		let state = self.state();
		let data = state.proto.crypto_session().handshake_data()?;
		data.downcast::<quinn_proto::crypto::rustls::HandshakeData>()
			.ok()?
			.server_name
	}

	/// The peer's address.
	pub fn remote_address(&self) -> std::net::SocketAddr {
		self.state().proto.remote_address()
	}

	/// Streams of `dir` the peer may have open at once now: it starts at the transport's
	/// setting and grows with use up to [`crate::Config::max_streams`].
	pub fn stream_allowance(&self, dir: Dir) -> u64 {
		self.state().proto.max_concurrent_streams(dir)
	}

	/// quinn-proto's statistics.
	pub fn stats(&self) -> quinn_proto::ConnectionStats {
		self.state().proto.stats()
	}

	/// The current round-trip estimate.
	pub fn rtt(&self) -> std::time::Duration {
		self.state().proto.rtt()
	}

	/// The budget this connection's memory is charged to, if its endpoint charges memory
	/// ([`crate::Config::with_memory`]): what it costs and its receive window are charged there
	/// already; the application charges what it holds for the connection too.
	pub fn memory(&self) -> Option<Budget> {
		self.state().memory.as_ref().map(|memory| memory.budget.clone())
	}

	/// Makes the connection's receive window, over all its streams, `bytes`: what the peer may
	/// send that we have not read. On a connection whose memory is charged, growing it charges the
	/// difference and is refused (`false`, the window unchanged) if the budget has no room;
	/// shrinking gives the difference back at once (quinn-proto takes the credit back as the peer
	/// uses what it was granted, so the peer may hold the old window for a round trip).
	pub fn set_receive_window(&self, bytes: u64) -> bool {
		let mut state = self.state();
		let state = &mut *state;
		if let Some(memory) = &mut state.memory
			&& !memory.window.resize(bytes)
		{
			return false;
		}
		state
			.proto
			.set_receive_window(VarInt::from_u64(bytes).unwrap_or(VarInt::MAX));
		state.mark_dirty();
		true
	}

	/// What this connection's send buffer holds: the bytes its streams queue and their chunks'
	/// cost, at most [`crate::Config::send_buffer`].
	pub fn send_buffer_used(&self) -> usize {
		self.state().queue.bytes.used() as usize
	}

	/// Bytes this connection's send streams hold queued, not yet handed to quinn-proto (at most
	/// [`crate::Config::send_buffer`]).
	pub fn stream_queued(&self) -> usize {
		self.state().queue.data()
	}

	/// Live stream entries and scheduler groups (for tests that state is freed).
	pub fn tracked(&self) -> (usize, usize) {
		let state = self.state();
		(state.streams.len(), state.scheduler.groups())
	}

	/// Opens a stream (`Dir::Uni` or `Dir::Bi`); waits while the peer's stream limit is reached.
	pub fn poll_open(&self, waiter: &Waiter, dir: Dir) -> Poll<Result<StreamId, StreamError>> {
		let mut state = self.state();
		if let Some(e) = state.lost_error() {
			return Poll::Ready(Err(e));
		}
		match state.proto.streams().open(dir) {
			Some(id) => {
				state.track(id, true, dir == Dir::Bi);
				Poll::Ready(Ok(id))
			}
			None => {
				state.open_waiters[dir_index(dir)].register(waiter);
				Poll::Pending
			}
		}
	}

	/// Opens a unidirectional stream.
	pub async fn open_uni(&self) -> Result<SendStream, StreamError> {
		let id = kio::wait(|w| self.poll_open(w, Dir::Uni)).await?;
		Ok(SendStream::new(self.clone(), id))
	}

	/// Opens a bidirectional stream.
	pub async fn open_bi(&self) -> Result<(SendStream, RecvStream), StreamError> {
		let id = kio::wait(|w| self.poll_open(w, Dir::Bi)).await?;
		Ok(self.halves(id))
	}

	/// Accepts the peer's next stream of `dir`.
	pub fn poll_accept(&self, waiter: &Waiter, dir: Dir) -> Poll<Result<StreamId, StreamError>> {
		let mut state = self.state();
		match state.proto.streams().accept(dir) {
			Some(id) => {
				state.accepted[dir_index(dir)] += 1;
				state.grow_allowance(dir);
				state.track(id, dir == Dir::Bi, true);
				// Accepting may raise the peer's stream limit: MAX_STREAMS goes out.
				state.mark_dirty();
				Poll::Ready(Ok(id))
			}
			None => {
				if let Some(e) = state.lost_error() {
					return Poll::Ready(Err(e));
				}
				state.accept_waiters[dir_index(dir)].register(waiter);
				Poll::Pending
			}
		}
	}

	/// Accepts the peer's next unidirectional stream.
	pub async fn accept_uni(&self) -> Result<RecvStream, StreamError> {
		let id = kio::wait(|w| self.poll_accept(w, Dir::Uni)).await?;
		Ok(RecvStream::new(self.clone(), id))
	}

	/// Accepts the peer's next bidirectional stream.
	pub async fn accept_bi(&self) -> Result<(SendStream, RecvStream), StreamError> {
		let id = kio::wait(|w| self.poll_accept(w, Dir::Bi)).await?;
		Ok(self.halves(id))
	}

	/// The two handles of bidirectional stream `id`.
	pub(crate) fn halves(&self, id: StreamId) -> (SendStream, RecvStream) {
		(SendStream::new(self.clone(), id), RecvStream::new(self.clone(), id))
	}

	/// Sends an unreliable datagram (the oldest queued one is dropped if the buffer is full).
	pub fn send_datagram(&self, payload: Bytes) -> Result<(), StreamError> {
		let mut state = self.state();
		if let Some(e) = state.lost_error() {
			return Err(e);
		}
		let result = state.proto.datagrams().send(payload, true);
		state.mark_dirty();
		result.map_err(|_| StreamError::Closed)
	}

	/// The largest datagram the peer accepts now, if it accepts any.
	pub fn max_datagram_size(&self) -> Option<usize> {
		self.state().proto.datagrams().max_size()
	}

	/// The next received datagram.
	pub fn poll_recv_datagram(&self, waiter: &Waiter) -> Poll<Result<Bytes, StreamError>> {
		let mut state = self.state();
		if let Some(datagram) = state.proto.datagrams().recv() {
			return Poll::Ready(Ok(datagram));
		}
		if let Some(e) = state.lost_error() {
			return Poll::Ready(Err(e));
		}
		state.datagram_waiters.register(waiter);
		Poll::Pending
	}

	/// See [`Self::poll_recv_datagram`].
	pub async fn recv_datagram(&self) -> Result<Bytes, StreamError> {
		kio::wait(|w| self.poll_recv_datagram(w)).await
	}

	/// Closes the connection with an application `code`; the peer sees it.
	pub fn close(&self, code: u64, reason: &str) {
		self.0.shared.close(code, reason.as_bytes());
	}

	/// Ready with the reason once the connection has ended.
	pub fn poll_closed(&self, waiter: &Waiter) -> Poll<ConnectionError> {
		let mut state = self.state();
		if let Some(reason) = &state.lost {
			return Poll::Ready(reason.clone());
		}
		state.state_waiters.register(waiter);
		Poll::Pending
	}

	/// See [`Self::poll_closed`].
	pub async fn closed(&self) -> ConnectionError {
		kio::wait(|w| self.poll_closed(w)).await
	}

	// ---- stream operations, called by the stream handles ----

	pub(crate) fn poll_write(&self, waiter: &Waiter, id: StreamId, data: &mut Bytes) -> Poll<Result<(), StreamError>> {
		let mut state = self.state();
		let lost = state.lost_error();
		let ConnState {
			streams,
			scheduler,
			queue,
			..
		} = &mut *state;
		let stream = streams.get_mut(&id).expect("a handle keeps its entry");
		let half = stream.send.as_mut().expect("a send handle has a send half");
		if let Some(code) = half.stopped {
			return Poll::Ready(Err(StreamError::Stopped(code)));
		}
		if let Some(e) = lost {
			return Poll::Ready(Err(e));
		}
		if half.finishing || half.done {
			return Poll::Ready(Err(StreamError::Closed));
		}
		// Ahead of what the peer has credited (see `SendHalf::limit`): wait for the queue to drain.
		if !data.is_empty() && queued(half) >= half.limit() {
			stream.waiters.register(waiter);
			return Poll::Pending;
		}
		while !data.is_empty() {
			let room = STREAM_BUFFER.saturating_sub(queued(half));
			if room == 0 {
				stream.waiters.register(waiter);
				break;
			}
			// A chunk takes its cost from the connection's room too.
			let room = room.min(queue.room().saturating_sub(CHUNK_COST as usize));
			if room == 0 {
				// Woken by room in the connection's queue, or by whatever ends this stream (a
				// STOP_SENDING must not wait for other streams to drain).
				queue.waiters.register(waiter);
				stream.waiters.register(waiter);
				break;
			}
			let take = room.min(data.len());
			// Both fit: the room was counted just above, and nothing else takes it meanwhile.
			if !half.records.grow(CHUNK_COST) {
				queue.waiters.register(waiter);
				break;
			}
			if !half.queued.grow(take as u64) {
				half.records.shrink(CHUNK_COST);
				queue.waiters.register(waiter);
				break;
			}
			half.queue.push_back(data.split_to(take));
		}
		// A blocked stream waits for `Writable`, however much more is written to it.
		if queued(half) > 0 && !half.blocked {
			scheduler.ready(half.slot);
			state.mark_dirty();
		}
		if data.is_empty() {
			Poll::Ready(Ok(()))
		} else {
			Poll::Pending
		}
	}

	pub(crate) fn finish(&self, id: StreamId) -> Result<(), StreamError> {
		let mut state = self.state();
		let ConnState { streams, scheduler, .. } = &mut *state;
		let half = streams
			.get_mut(&id)
			.and_then(|s| s.send.as_mut())
			.expect("a send handle has a send half");
		// The peer stopped reading: the stream is already over, and finishing it is moot (what a
		// request-response exchange sees when the responder drops its side after answering).
		if half.stopped.is_some() {
			return Ok(());
		}
		if half.finishing || half.done {
			return Err(StreamError::Closed);
		}
		half.finishing = true;
		// An empty stream still needs its FIN sent: the scheduler hands it over (a blocked one
		// once `Writable` comes).
		if !half.blocked {
			scheduler.ready(half.slot);
			state.mark_dirty();
		}
		Ok(())
	}

	pub(crate) fn reset(&self, id: StreamId, code: u64) {
		let mut state = self.state();
		let ConnState {
			streams,
			scheduler,
			proto,
			queue,
			..
		} = &mut *state;
		let Some(half) = streams.get_mut(&id).and_then(|s| s.send.as_mut()) else {
			return;
		};
		if half.done && half.stopped.is_some() {
			return;
		}
		queue.drop_queue(half);
		if !half.done {
			half.done = true;
			scheduler.remove_stream(half.slot);
		}
		// Resetting after finish abandons what is still unacknowledged.
		let _ = proto
			.send_stream(id)
			.reset(VarInt::from_u64(code).unwrap_or(VarInt::MAX));
		// quinn-proto dropped what it held unsent of the stream (see `on_stopped`).
		state.unsent = 0;
		state.mark_dirty();
	}

	pub(crate) fn set_priority(&self, id: StreamId, priority: i32) {
		let mut state = self.state();
		let ConnState {
			streams,
			scheduler,
			proto,
			..
		} = &mut *state;
		if let Some(half) = streams.get_mut(&id).and_then(|s| s.send.as_mut()) {
			scheduler.set_priority(half.group, priority);
			let _ = proto.send_stream(id).set_priority(priority);
		}
	}

	pub(crate) fn set_group(&self, id: StreamId, key: u64) {
		let mut state = self.state();
		let Some(half) = state.streams.get_mut(&id).and_then(|s| s.send.as_mut()) else {
			return;
		};
		if half.shared_group == Some(key) || half.done {
			return;
		}
		let (old, old_key, slot) = (half.group, half.shared_group, half.slot);
		let priority = state.scheduler.priority(old);
		let group = match state.groups.get_mut(&key) {
			Some(entry) => {
				entry.streams += 1;
				entry.id
			}
			None => {
				let id = state.scheduler.insert_group(priority);
				state.groups.insert(key, SharedGroup { id, streams: 1 });
				id
			}
		};
		state.scheduler.move_stream(slot, group);
		let half = state
			.streams
			.get_mut(&id)
			.and_then(|s| s.send.as_mut())
			.expect("checked above");
		half.group = group;
		half.shared_group = Some(key);
		state.release_group(old, old_key);
	}

	pub(crate) fn poll_stopped(&self, waiter: &Waiter, id: StreamId) -> Poll<Result<u64, StreamError>> {
		let mut state = self.state();
		let lost = state.lost_error();
		let stream = state.streams.get_mut(&id).expect("a handle keeps its entry");
		if let Some(code) = stream.send.as_ref().and_then(|h| h.stopped) {
			return Poll::Ready(Ok(code));
		}
		if let Some(e) = lost {
			return Poll::Ready(Err(e));
		}
		stream.waiters.register(waiter);
		Poll::Pending
	}

	pub(crate) fn poll_read(&self, waiter: &Waiter, id: StreamId) -> Poll<Result<Option<Bytes>, StreamError>> {
		let mut state = self.state();
		let entry = state.streams.get_mut(&id).expect("a handle keeps its entry");
		if !entry.readable {
			entry.waiters.register(waiter);
			return Poll::Pending;
		}
		let mut stream = state.proto.recv_stream(id);
		let mut chunks = match stream.read(true) {
			Ok(chunks) => chunks,
			Err(quinn_proto::ReadableError::ClosedStream) => return Poll::Ready(Ok(None)),
			Err(quinn_proto::ReadableError::IllegalOrderedRead) => return Poll::Ready(Err(StreamError::Closed)),
		};
		let result = chunks.next(usize::MAX);
		let transmit = chunks.finalize().should_transmit();
		if transmit {
			state.mark_dirty();
		}
		match result {
			Ok(Some(chunk)) => Poll::Ready(Ok(Some(chunk.bytes))),
			Ok(None) => Poll::Ready(Ok(None)),
			Err(quinn_proto::ReadError::Reset(code)) => Poll::Ready(Err(StreamError::Reset(code.into_inner()))),
			Err(quinn_proto::ReadError::Blocked) => {
				if let Some(e) = state.lost_error() {
					return Poll::Ready(Err(e));
				}
				let entry = state.streams.get_mut(&id).expect("a handle keeps its entry");
				entry.readable = false;
				entry.waiters.register(waiter);
				Poll::Pending
			}
		}
	}

	pub(crate) fn stop(&self, id: StreamId, code: u64) {
		let mut state = self.state();
		let _ = state
			.proto
			.recv_stream(id)
			.stop(VarInt::from_u64(code).unwrap_or(VarInt::MAX));
		state.mark_dirty();
	}

	/// A stream handle went away.
	pub(crate) fn release(&self, id: StreamId) {
		let mut state = self.state();
		if let Some(stream) = state.streams.get_mut(&id) {
			stream.handles = stream.handles.saturating_sub(1);
		}
		state.collect(id);
	}
}

impl std::fmt::Debug for Connection {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("Connection")
			.field("handle", &self.0.shared.handle.0)
			.finish_non_exhaustive()
	}
}

#[cfg(test)]
mod tests {
	use std::sync::Arc;
	use std::sync::atomic::{AtomicBool, Ordering};
	use std::task::{Wake, Waker};

	use super::*;

	struct Flag(AtomicBool);

	impl Wake for Flag {
		fn wake(self: Arc<Self>) {
			self.0.store(true, Ordering::Relaxed);
		}
	}

	#[test]
	fn a_writer_waiting_for_room_wakes_when_a_stopped_stream_gives_its_queue_back() {
		let mut queue = QueueBudget::new(1_000);
		// A stream holds 950 bytes in 4 chunks: room for less than a chunk is left.
		let mut data = queue.bytes.charge(950 - 4 * CHUNK_COST).unwrap();
		let mut records = queue.records.charge(4 * CHUNK_COST).unwrap();
		assert!(queue.bytes.room() <= CHUNK_COST);
		let flag = Arc::new(Flag(AtomicBool::new(false)));
		let waiter: Waiter = Waiter::new(Waker::from(flag.clone()));
		queue.waiters.register(&waiter);
		// The peer stops it: its whole queue goes at once.
		queue.give_all(&mut data, &mut records);
		assert_eq!(queue.bytes.used(), 0);
		assert!(flag.0.load(Ordering::Relaxed), "the waiting writer was not woken");
	}
}
