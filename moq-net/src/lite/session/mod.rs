//! moq-lite sessions over a [`Transport`]: 05, and 04 and 03 for older clients
//! ([`Config::version`]; what differs is in docs/moq-lite-versions.md: no SETUP, no TRACK,
//! SUBSCRIBE_OK first, frames without timestamps, the sender in its own hop chains).
//!
//! # Flow
//!
//! 1. [`setup`]: each side opens one uni stream `[0x01][SETUP]` and finishes it, without waiting
//!    for the other; then reads the peer's. The peer's SETUP carries its Path (a client over raw
//!    QUIC), Role and Origin id. A relay roots the session at that path before [`start`].
//! 2. [`start`]: two halves run as kio tasks on the caller's worker.
//!    - The **publisher half** serves the peer's requests from an [`OriginConsumer`]:
//!      ANNOUNCE_REQUEST (the current set, then live updates; never a route whose hop chain holds
//!      the peer), TRACK (TRACK_INFO from the origin, asking upstream if the track is on demand),
//!      SUBSCRIBE (from the latest group or the start floor; SUBSCRIBE_START, one uni stream per
//!      group with priority by subscriber priority then newest group first (oldest first when the
//!      subscription is `ordered`), SUBSCRIBE_UPDATE,
//!      SUBSCRIBE_END and FIN when the track ends, subscriber FIN to cancel) and FETCH (from the
//!      cache).
//!    - The **subscriber half** (when given an [`OriginProducer`]) asks the peer for its
//!      announcements and turns them into broadcasts in the origin (hop chain = the peer's hops
//!      plus the peer's id; reflections of our own id are dropped). A track asked for on such a
//!      broadcast is fetched on first demand: TRACK, then SUBSCRIBE with the track's aggregate
//!      demand, SUBSCRIBE_UPDATE when it changes, FIN when it ends. Group streams are ingested
//!      into the track's cache.
//!
//! # Bad input
//!
//! Nothing the peer sends panics. A message that does not decode, a SETUP out of place, a group
//! stream for a subscription never made, a frame over [`MAX_FRAME`], or a stream that ends inside
//! a message or frame closes the session with the spec's code ([`SessionError::code`]). A
//! stream of an unknown type is reset alone. The origin, its caches and other sessions are
//! untouched: everything this session published ends (as a dropped publisher does), nothing
//! else.
//!
//! # Tasks
//!
//! The session's work runs in kio tasks on the caller's worker, owned by the [`Session`]:
//! dropping it (or [`Session::close`]) closes the transport and aborts them. Nothing outlives it.

mod budget;
pub(crate) use budget::Budget;
pub use budget::Pace;
mod io;
pub(crate) use io::{Reader, Sending};
mod publisher;
pub(crate) use publisher::stream_priority;
mod subscriber;
pub(crate) use subscriber::TRACK_IDLE_LINGER;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use kio::JoinHandle;

use crate::coding::{DecodeError, EncodeError};
use crate::lite::{DataType, ErrorCode, Role, Setup, Version};
use crate::model::{self, OriginConsumer, OriginId, OriginProducer, TrackProducer};
use crate::transport::{Transport, TransportError, TransportExt};

/// The largest frame a session accepts (FrameTooLarge, 27, above it): a group's byte cap.
pub const MAX_FRAME: u64 = model::group::MAX_GROUP_BYTES as u64;

/// Why a session, or one of its streams, ended. The one error policy of both halves:
/// [`is_fatal`](Self::is_fatal) says whether it closes the session or only the stream it
/// happened on, and [`code`](Self::code) is the code it closes or resets with.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionError {
	/// The transport failed or was closed, or the peer reset or stopped the stream.
	Transport(TransportError),
	/// The peer sent bytes that do not decode: fatal.
	Decode(DecodeError),
	/// A value we meant to send cannot be encoded: this stream only.
	Encode(EncodeError),
	/// The peer broke the protocol: fatal.
	Protocol(ErrorCode),
	/// A request refused on its own stream (a role that does not allow it, a stream type we do not
	/// serve, a budget spent): this stream only.
	Refused(ErrorCode),
	/// The model refused (unknown track, duplicate group, an evicted group, ...): this stream
	/// only.
	Model(model::Error),
}

impl SessionError {
	/// Whether the error closes the session (the peer's bytes do not decode, or it broke the
	/// protocol), rather than only the stream it happened on.
	pub fn is_fatal(&self) -> bool {
		matches!(self, Self::Decode(_) | Self::Protocol(_))
	}

	/// The docs/moq-lite-05.md §2.8 code to reset a stream or close the session with.
	pub fn code(&self) -> u64 {
		match self {
			Self::Transport(
				TransportError::Closed(code) | TransportError::Reset(code) | TransportError::Stopped(code),
			) => *code,
			Self::Transport(_) => ErrorCode::Transport.code(),
			Self::Decode(err) => err.code(),
			Self::Encode(err) => err.code(),
			Self::Protocol(code) | Self::Refused(code) => code.code(),
			Self::Model(err) => model_code(err),
		}
	}
}

impl fmt::Display for SessionError {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Transport(err) => write!(f, "transport: {err}"),
			Self::Decode(err) => write!(f, "decode: {err}"),
			Self::Encode(err) => write!(f, "encode: {err}"),
			Self::Protocol(code) => write!(f, "protocol violation: {code:?}"),
			Self::Refused(code) => write!(f, "refused: {code:?}"),
			Self::Model(err) => write!(f, "{err}"),
		}
	}
}

impl std::error::Error for SessionError {
	fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
		match self {
			Self::Transport(err) => Some(err),
			Self::Decode(err) => Some(err),
			Self::Encode(err) => Some(err),
			Self::Model(err) => Some(err),
			Self::Protocol(_) | Self::Refused(_) => None,
		}
	}
}

/// The docs/moq-lite-05.md §2.8 code of a model error.
pub fn model_code(err: &model::Error) -> u64 {
	let code = match err {
		model::Error::Dropped => ErrorCode::Dropped,
		model::Error::Old => ErrorCode::Old,
		model::Error::Evicted => ErrorCode::Evicted,
		model::Error::Lagged => ErrorCode::Lagged,
		model::Error::Duplicate => ErrorCode::Duplicate,
		model::Error::NotFound => ErrorCode::NotFound,
		model::Error::Unauthorized => ErrorCode::Unauthorized,
		model::Error::TooLarge => ErrorCode::FrameTooLarge,
		model::Error::Finished => ErrorCode::Closed,
		model::Error::BoundsExceeded => ErrorCode::BoundsExceeded,
		model::Error::Taken => ErrorCode::Unauthorized,
		model::Error::Aborted(code) => return *code,
		_ => ErrorCode::Cancel,
	};
	code.code()
}

/// What one session may make this side hold. Each limit is charged where the memory is taken
/// and released where it is freed; the totals over every session sharing a [`Counters`] show
/// there as gauges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
	/// Broadcasts the peer may announce to us at once; further announcements are ignored (and
	/// counted in [`Counters::budget_refusals`]).
	pub announces: usize,
	/// SUBSCRIBEs the peer may have open toward our publisher half; another is refused with
	/// BoundsExceeded (11) on its stream.
	pub subscriptions: usize,
	/// Tracks the peer's broadcasts may be asked for at once (each an upstream TRACK and
	/// SUBSCRIBE on the peer's session); another is refused with BoundsExceeded.
	pub track_requests: usize,
	/// Group streams in flight per subscription toward the peer; past it the oldest group is
	/// reset (code 0), so a subscriber that lags loses old groups, not our memory.
	pub groups_in_flight: usize,
	/// Bytes of messages and frames received in part (split across chunks) the session may buffer
	/// over all its streams; a stream that needs more is stopped with BoundsExceeded.
	pub partial_bytes: u64,
	/// Bytes of announcement updates the session may hold queued for the peer, over all its
	/// ANNOUNCE_REQUESTs, whatever the number of broadcasts announced (the current set is read
	/// from the origin as it is sent, not queued); a request whose updates do not fit is reset
	/// with BoundsExceeded, and the peer asks again to hear the current set.
	pub announce_queue: u64,
	/// Requests the peer may make per second, after [`request_burst`](Self::request_burst) at
	/// once: every bidirectional stream it opens (SUBSCRIBE, TRACK, FETCH, ANNOUNCE_REQUEST, and
	/// the rest: Probe, GOAWAY, unknown types) and SUBSCRIBE_UPDATEs that ask for history again. A
	/// request past it waits (and its stream with it), and so does every request stream after it;
	/// nothing is refused. 0 (the default) paces nothing.
	pub request_rate: u32,
	/// Requests the peer may make at once before [`request_rate`](Self::request_rate) paces them.
	pub request_burst: u32,
}

impl Limits {
	/// No limits (tests, trusted peers).
	pub const UNLIMITED: Self = Self {
		announces: usize::MAX,
		subscriptions: usize::MAX,
		track_requests: usize::MAX,
		groups_in_flight: usize::MAX,
		partial_bytes: u64::MAX,
		announce_queue: u64::MAX,
		request_rate: 0,
		request_burst: u32::MAX,
	};
}

impl Default for Limits {
	/// Generous for a real publisher or viewer, small next to a relay's memory: see the relay's
	/// README for what they add up to per connection.
	fn default() -> Self {
		Self {
			announces: 1024,
			subscriptions: 1024,
			track_requests: 1024,
			groups_in_flight: 64,
			partial_bytes: 8 << 20,
			// About 3,500 updates of a few hundred bytes each (a path and its route): a watcher that
			// reads them as they come holds a handful.
			announce_queue: 1 << 20,
			// Not paced: a publisher's peer is usually a relay asking for every track its viewers
			// want (a TRACK and a SUBSCRIBE each), and a relay sets its own pace for the peers it
			// serves (moq-relay's `--max-request-rate`).
			request_rate: 0,
			request_burst: 256,
		}
	}
}

/// What this side says in its SETUP.
#[derive(Clone, Debug, Default)]
pub struct Config {
	/// This endpoint's origin id (0 for none): sent as SETUP Origin, and never accepted back in
	/// an announced hop chain.
	pub origin: OriginId,
	/// The connection path and query (a client over raw QUIC).
	pub path: Option<String>,
	/// The client's role; `None` sends none (both).
	pub role: Option<Role>,
	/// The byte pool the tracks this session ingests charge (a relay's cache budget); `None`
	/// leaves them unbounded but for their expiry.
	pub pool: Option<model::Pool>,
	/// Counts what this session moves, for a relay's metrics; shared by every session that gets a
	/// clone.
	pub counters: Option<Arc<Counters>>,
	/// What the peer may make this session hold.
	pub limits: Limits,
	/// The moq-lite version the connection negotiated (its ALPN or WebTransport sub-protocol).
	pub version: Version,
	/// The peer is a relay of our cluster: the routes it announces are marked as learned from a
	/// cluster peer ([`Route::cluster`](model::Route::cluster)), and we announce to it only the
	/// routes our own clients publish.
	pub cluster: bool,
	/// How long a broadcast the peer announced stays announced after the peer is lost abruptly
	/// (its connection failed or timed out, rather than the peer ending the announcement or
	/// closing the session): a publisher that reconnects within it takes over the path without
	/// every watcher hearing it go. Zero: withdrawn at once.
	pub linger: std::time::Duration,
	/// A pace the peer's requests also keep, shared with other sessions (a relay gives all
	/// sessions of one address one, so reconnecting buys no fresh burst), besides the session's
	/// own from [`Limits::request_rate`] and [`Limits::request_burst`].
	pub shared_pace: Option<Arc<Pace>>,
	/// The connection's memory budget (a relay's memory ceiling, shared by addresses): bytes the
	/// session holds for the peer are charged there too.
	pub memory: Option<kio::sync::Budget>,
}

/// What sessions moved (relaxed atomics: totals for metrics, not a protocol), and gauges of what
/// they hold: unlimited budgets every session's own budgets take from.
#[derive(Debug)]
pub struct Counters {
	/// Group streams received and ingested.
	pub groups_in: AtomicU64,
	/// Frame payload bytes received.
	pub bytes_in: AtomicU64,
	/// Group streams sent.
	pub groups_out: AtomicU64,
	/// Frame payload bytes sent.
	pub bytes_out: AtomicU64,
	/// Broadcasts peers announce to us now (gauge).
	pub announces: kio::sync::Budget,
	/// SUBSCRIBEs peers have open toward us (gauge).
	pub subscriptions: kio::sync::Budget,
	/// Tracks asked of peers' broadcasts now (gauge).
	pub track_requests: kio::sync::Budget,
	/// Group streams in flight toward peers (gauge).
	pub groups_in_flight: kio::sync::Budget,
	/// Bytes of partly received messages and frames buffered (gauge).
	pub partial_bytes: kio::sync::Budget,
	/// Bytes of announcement updates queued for peers (gauge).
	pub announce_bytes: kio::sync::Budget,
	/// Bytes the requests peers have open cost (gauge).
	pub request_bytes: kio::sync::Budget,
	/// Requests, streams and groups refused or cut because a budget was spent.
	pub budget_refusals: AtomicU64,
	/// Requests that waited for their session's request rate ([`Limits::request_rate`]).
	pub requests_paced: AtomicU64,
	/// Groups lost on their way through, by why ([`GroupLoss`], indexed by `as usize`).
	pub groups_lost: [AtomicU64; GroupLoss::ALL.len()],
}

impl Counters {
	/// How many groups were lost for `why`.
	pub fn lost(&self, why: GroupLoss) -> u64 {
		self.groups_lost[why as usize].load(std::sync::atomic::Ordering::Relaxed)
	}
}

/// Why a group was not delivered whole: every group a session drops is counted under one
/// ([`Counters::groups_lost`]), so a gap a viewer sees has a reason in the relay's `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupLoss {
	/// Reset to keep its subscription within its groups in flight ([`Limits::groups_in_flight`]):
	/// the subscriber reads slower than the track comes.
	InFlight,
	/// Reset: a newer group superseded it longer ago than the track's latency.
	Stale,
	/// Reset: not sent within the track's latency after the subscription's end.
	Ending,
	/// Never sent: the cache dropped it (by age, or to make room) before the subscriber's turn.
	Cache,
	/// Cut while it was sent: the group itself ended badly (its publisher reset it, or the cache
	/// evicted it mid-read).
	Aborted,
	/// Stopped by the subscriber (STOP_SENDING): its choice.
	Stopped,
	/// From a publisher, not taken: a sequence the track already has, or one older than it keeps.
	Refused,
}

impl GroupLoss {
	/// Every reason, in index order.
	pub const ALL: [Self; 7] = [
		Self::InFlight,
		Self::Stale,
		Self::Ending,
		Self::Cache,
		Self::Aborted,
		Self::Stopped,
		Self::Refused,
	];

	/// Its label in metrics.
	pub fn name(self) -> &'static str {
		match self {
			Self::InFlight => "in_flight",
			Self::Stale => "stale",
			Self::Ending => "ending",
			Self::Cache => "cache",
			Self::Aborted => "aborted",
			Self::Stopped => "stopped",
			Self::Refused => "refused",
		}
	}
}

impl Default for Counters {
	fn default() -> Self {
		let gauge = kio::sync::Budget::unlimited;
		Self {
			groups_in: AtomicU64::new(0),
			bytes_in: AtomicU64::new(0),
			groups_out: AtomicU64::new(0),
			bytes_out: AtomicU64::new(0),
			announces: gauge(),
			subscriptions: gauge(),
			track_requests: gauge(),
			groups_in_flight: gauge(),
			partial_bytes: gauge(),
			announce_bytes: gauge(),
			request_bytes: gauge(),
			budget_refusals: AtomicU64::new(0),
			requests_paced: AtomicU64::new(0),
			groups_lost: Default::default(),
		}
	}
}

/// What the peer said in its SETUP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSetup {
	/// The connection path and query, if the peer sent one.
	pub path: Option<String>,
	/// The peer's role.
	pub role: Role,
	/// The peer's origin id (0 for none).
	pub origin: OriginId,
}

/// Sends our SETUP and reads the peer's. On failure the transport is closed with the error's
/// code.
pub async fn setup<T: Transport>(transport: &T, config: &Config) -> Result<PeerSetup, SessionError> {
	// 03 and 04 exchange nothing before the first request: the peer is anonymous, has no path,
	// and may both publish and subscribe.
	if !config.version.has_setup_stream() {
		return Ok(PeerSetup {
			path: None,
			role: Role::Both,
			origin: 0,
		});
	}
	let result = exchange(transport, config).await;
	if let Err(err) = &result {
		// Our own code: a peer that resets its SETUP stream with code N does not choose the code
		// its connection is closed with.
		let code = match err {
			SessionError::Transport(_) => ErrorCode::Transport.code(),
			err => err.code(),
		};
		transport.close(code, "setup failed");
	}
	result
}

async fn exchange<T: Transport>(transport: &T, config: &Config) -> Result<PeerSetup, SessionError> {
	let mut ours = Setup::new().with_origin(config.origin);
	if let Some(path) = &config.path {
		ours = ours.with_path(path);
	}
	if let Some(role) = config.role {
		ours = ours.with_role(role);
	}
	let mut send = transport.open_uni().await.map_err(SessionError::Transport)?;
	io::write_typed(&mut send, u64::from(DataType::Setup), &ours).await?;
	crate::transport::SendStream::finish(&mut send).map_err(SessionError::Transport)?;
	loop {
		let recv = transport.accept_uni().await.map_err(SessionError::Transport)?;
		let mut reader = Reader::new(recv);
		match reader.decode::<DataType>().await {
			Ok(Some(DataType::Setup)) => {}
			// Streams before the SETUP are refused one by one (the reference server does the same).
			Ok(Some(_)) | Err(SessionError::Decode(DecodeError::UnexpectedStream(_))) => {
				reader.stop(ErrorCode::UnexpectedStream.code());
				continue;
			}
			Ok(None) => continue,
			Err(err) => return Err(err),
		}
		let theirs: Setup = reader.decode().await?.ok_or(SessionError::Decode(DecodeError::Short))?;
		// Exactly one SETUP, then FIN.
		if reader.decode::<Setup>().await?.is_some() {
			return Err(SessionError::Protocol(ErrorCode::ProtocolViolation));
		}
		return Ok(PeerSetup {
			path: theirs.path().map(str::to_owned),
			role: theirs.role(),
			origin: theirs.origin().unwrap_or(0),
		});
	}
}

struct Inner<T: Transport> {
	transport: T,
	config: Config,
	peer: PeerSetup,
	tasks: RefCell<Vec<JoinHandle<()>>>,
	/// The subscriber half's live subscriptions: subscribe id to the track its groups feed. Ids
	/// are issued in order, so one below `next_subscribe_id` that is not live was issued and
	/// cancelled: a late group stream for it is stopped, not fatal (and no set of retired ids grows
	/// with the session's age).
	subscriptions: RefCell<HashMap<u64, (crate::Path, TrackProducer)>>,
	next_subscribe_id: Cell<u64>,
	/// Subscribe ids of the peer's SUBSCRIBEs open toward our publisher half (a second SUBSCRIBE
	/// with a live id is a Duplicate); bounded by [`Limits::subscriptions`].
	served: RefCell<HashSet<u64>>,
	budget: Rc<Budget>,
	/// The peer's requests, paced by [`Limits::request_rate`] and [`Config::shared_pace`].
	pace: budget::Paces,
	/// Tracks asked of the peer's broadcasts, served from upstream.
	requests: RefCell<subscriber::Requests>,
}

impl<T: Transport + 'static> Inner<T> {
	/// Spawns a task the session owns.
	fn spawn(&self, task: impl Future<Output = ()> + 'static) {
		let mut tasks = self.tasks.borrow_mut();
		if tasks.len() >= 64 && tasks.len().is_power_of_two() {
			tasks.retain(|task| !task.is_finished());
		}
		tasks.push(kio::spawn(task));
	}

	/// Closes the session with `err`'s code.
	fn fail(&self, err: &SessionError) {
		self.transport.close(err.code(), "protocol error");
	}

	/// Whether the connection is over without a goodbye: it failed or timed out (Transport, 4),
	/// or the peer closed it with an error, rather than being closed by us or by the peer with
	/// Cancel (0) or Closed (25, a relay shutting down).
	fn lost_abruptly(&self) -> bool {
		let waiter = kio::Waiter::new(std::task::Waker::noop().clone());
		match self.transport.poll_closed(&waiter) {
			std::task::Poll::Ready(code) => code != ErrorCode::Cancel.code() && code != ErrorCode::Closed.code(),
			std::task::Poll::Pending => false,
		}
	}
}

/// A running session. Dropping it closes the transport (code 0) and stops its tasks.
pub struct Session<T: Transport + 'static> {
	inner: Rc<Inner<T>>,
}

/// Each session's requester id, unless its `publish` view has one (see
/// [`OriginConsumer::requesting_as`]): unique in the process, never reused, below 2^62.
static NEXT_REQUESTER: AtomicU64 = AtomicU64::new(1);

/// Starts both halves: serve `publish` to the peer (if given), and take the peer's broadcasts
/// into `subscribe` (if given).
pub fn start<T: Transport + Clone + 'static>(
	transport: T,
	config: Config,
	peer: PeerSetup,
	publish: Option<OriginConsumer>,
	subscribe: Option<OriginProducer>,
) -> Session<T> {
	let budget = Budget::new(config.limits, config.counters.clone(), config.memory.clone());
	let pace = budget::Paces {
		own: Pace::new(
			config.limits.request_rate,
			config.limits.request_burst,
			kio::time::now(),
		),
		shared: config.shared_pace.clone(),
		paced: config.counters.clone(),
	};
	// The tracks this peer makes other sessions ask their peers for are recorded as its own (or
	// as whoever `publish` already requests as: a relay groups its sessions by address), so those
	// sessions share their track requests fairly among the peers asking.
	let publish = publish.map(|origin| match origin.requester() {
		Some(_) => origin,
		None => origin.requesting_as(NEXT_REQUESTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
	});
	let inner = Rc::new(Inner {
		transport,
		budget,
		config,
		peer,
		tasks: RefCell::new(Vec::new()),
		subscriptions: RefCell::new(HashMap::new()),
		next_subscribe_id: Cell::new(0),
		served: RefCell::new(HashSet::new()),
		pace,
		requests: RefCell::default(),
	});
	inner.spawn(publisher::run(inner.clone(), publish));
	inner.spawn(subscriber::accept_groups(inner.clone()));
	if inner.config.version.has_datagrams() {
		inner.spawn(subscriber::accept_datagrams(inner.clone()));
	}
	// A peer that said it only subscribes has nothing to announce: it is not asked.
	if let Some(subscribe) = subscribe
		&& inner.peer.role != Role::Subscriber
	{
		inner.spawn(subscriber::run(inner.clone(), subscribe));
	}
	Session { inner }
}

impl<T: Transport + 'static> Session<T> {
	/// What the peer said in its SETUP.
	pub fn peer(&self) -> &PeerSetup {
		&self.inner.peer
	}

	/// Closes the session with `code`.
	pub fn close(&self, code: u64) {
		self.inner.transport.close(code, "closed");
	}

	/// Waits until the session is closed (by either side); yields the close code.
	pub async fn closed(&self) -> u64 {
		self.inner.transport.closed().await
	}
}

impl<T: Transport + 'static> Drop for Session<T> {
	fn drop(&mut self) {
		self.inner.transport.close(ErrorCode::Cancel.code(), "session dropped");
		for task in self.inner.tasks.borrow_mut().drain(..) {
			task.abort();
		}
	}
}

impl<T: Transport + 'static> fmt::Debug for Session<T> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Session").field("peer", &self.inner.peer).finish()
	}
}
