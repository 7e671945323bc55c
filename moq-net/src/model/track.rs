//! Tracks: a cache of groups, and cursors that read it.
//!
//! # Cache
//!
//! Groups are kept in **arrival order** (`arrival`, a deque indexed by a monotonically rising
//! arrival index; an evicted group leaves a hole) and indexed **by sequence** (`by_sequence`).
//! The **latest** group (the highest sequence) is never evicted. Non-latest groups expire once
//! their last access is older than the track's `latency_max`, and when the shared [`Pool`] cannot
//! take a frame a track writes, that track first evicts its own stalest non-latest groups.
//! Expiry runs when the track creates a group, after the insert (so the group it displaced as the
//! latest may expire at once), and scans at most [`EVICT_SCAN`] entries; pool eviction runs when
//! a frame does not fit, never evicts the group being written, and only when evicting could make
//! room ([`Pool::could_fit`]). [`TrackProducer::start_over`] empties the cache and forgets every
//! sequence, for a source that numbers its groups afresh (a relay's next upstream subscription).
//!
//! # Cursors
//!
//! A [`TrackConsumer`] is a cursor with its own position:
//! - [`recv_group`](TrackConsumer::recv_group) yields every group once, in arrival order, from
//!   a start floor, up to an end cap; groups above the cap are held and re-offered (lowest
//!   first) when the cap rises;
//! - [`next_group`](TrackConsumer::next_group) yields a rising sequence and skips late groups;
//! - [`latest`](TrackConsumer::latest) and [`finished`](TrackConsumer::finished).
//!
//! A live reader that takes each group as it arrives pays O(1) per group: one lock of the track,
//! an index into the arrival deque, one reference-count increment for the group, and (when it
//! parks again) a registration that the waiter's records usually make free. It walks no
//! history and clones no shared list. The missed-group check is one comparison of its arrival
//! index with the deque's base, which moves only when something was evicted.
//!
//! # Demand
//!
//! A consumer made with [`TrackProducer::subscribe`] (or that calls
//! [`TrackConsumer::subscribe`]) carries a [`Subscription`]. The track aggregates them and the
//! producer watches the aggregate with [`TrackProducer::subscription_changed`], and whether there
//! is any demand with [`used`](TrackProducer::used) / [`unused`](TrackProducer::unused): a relay
//! forwards one upstream subscription and cancels it when demand ends.
//!
//! The aggregate is what serves every subscriber at once, so no subscriber can make it serve
//! another less:
//! - **priority**: the highest; **ordered**: only if all want order; **latency**: the longest;
//! - **start**: an absent start means "from the latest group", not "no opinion". If every
//!   subscriber names a start, the aggregate is the lowest. If some subscriber wants the latest,
//!   the aggregate is absent (the latest) unless another names a start at or below the latest
//!   group this track has seen, which is history the latest does not cover: then that start. A
//!   start in the future never hides the latest from the others;
//! - **end**: the highest, and an open end wins.
//!
//! When a subscriber leaves or updates, the aggregate is recomputed from those that remain: a
//! far-future start that a subscriber set and then withdrew leaves nothing behind. The publisher
//! side of a session follows the aggregate exactly: an update that lowers a start rewinds the
//! cursor, one that clears it goes back to the latest group ([`TrackConsumer::clear_start`]).
//!
//! # Bounds
//!
//! A cursor with an end cap keeps the sequences of groups above its cap to re-offer them when the
//! cap rises: sequences, not groups, so it holds no cached memory outside the pool's budget (a
//! held group that was evicted meanwhile is skipped), and at most [`MAX_HELD`] of them (the
//! lowest are forgotten first).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::task::Poll;
use std::time::{Duration, Instant};

use kio::sync::Lock;
use kio::{Waiter, WaiterList, Wakes};
use slab::Slab;

use super::group::{self, GroupRef, MAX_GROUP_BYTES};
use super::{Error, Frame, GroupConsumer, GroupProducer, Pool};

/// Cached entries examined per eviction pass: bounded work per written group.
pub const EVICT_SCAN: usize = 4;

/// Sequences a cursor holds above its end cap, at most; the lowest are forgotten first.
pub const MAX_HELD: usize = 256;

/// The publisher's properties of a track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackInfo {
	/// Timestamp ticks per second.
	pub timescale: u64,
	/// How long a non-latest group stays cached after its last access.
	pub latency_max: Duration,
	/// The publisher's priority (a tie-break between subscribers' priorities).
	pub priority: u8,
	/// Whether the publisher prefers groups delivered in order.
	pub ordered: bool,
}

impl Default for TrackInfo {
	fn default() -> Self {
		Self {
			timescale: 1000,
			latency_max: Duration::from_secs(5),
			priority: 0,
			ordered: false,
		}
	}
}

/// One subscriber's demand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Subscription {
	/// Higher is more important.
	pub priority: u8,
	/// Whether the subscriber wants groups in order.
	pub ordered: bool,
	/// How old a group may be and still be worth delivering.
	pub latency_max: Duration,
	/// The first group wanted; `None` means "from the latest".
	pub start: Option<u64>,
	/// The last group wanted (inclusive); `None` means "no end".
	pub end: Option<u64>,
}

impl Subscription {
	/// The aggregate of many (see the [module docs](self)): max priority, all ordered, max
	/// latency, the lowest start where every start is named or one names history at or below
	/// `latest` (else "from the latest"), max end with an open end winning.
	pub fn aggregate<'a>(subscriptions: impl IntoIterator<Item = &'a Self>, latest: Option<u64>) -> Option<Self> {
		let mut iter = subscriptions.into_iter();
		let mut total = *iter.next()?;
		let mut wants_latest = total.start.is_none();
		for sub in iter {
			total.priority = total.priority.max(sub.priority);
			total.ordered &= sub.ordered;
			total.latency_max = total.latency_max.max(sub.latency_max);
			wants_latest |= sub.start.is_none();
			total.start = match (total.start, sub.start) {
				(Some(a), Some(b)) => Some(a.min(b)),
				(a, b) => a.or(b),
			};
			total.end = match (total.end, sub.end) {
				(Some(a), Some(b)) => Some(a.max(b)),
				_ => None,
			};
		}
		if wants_latest
			&& total
				.start
				.is_some_and(|start| latest.is_none_or(|latest| start > latest))
		{
			total.start = None;
		}
		Some(total)
	}
}

struct Cached {
	sequence: u64,
	group: GroupRef,
	accessed: Instant,
}

pub(crate) struct TrackState {
	name: String,
	info: TrackInfo,
	/// Whether `info` is the publisher's (false for a requested track until its handler sets it).
	info_known: bool,
	arrival: VecDeque<Option<Cached>>,
	/// The arrival index of `arrival[0]`.
	base: u64,
	/// Sequence to arrival index, for every cached group.
	by_sequence: BTreeMap<u64, u64>,
	/// The arrival index of the latest group (the highest sequence), which is never evicted.
	latest: Option<u64>,
	max_sequence: Option<u64>,
	final_sequence: Option<u64>,
	error: Option<Error>,
	/// Drained by every new group, finish and abort.
	on_group: WaiterList,
	/// Each cursor's demand, and who it subscribes for (see
	/// [`OriginConsumer::requesting_as`](super::OriginConsumer::requesting_as)).
	subscriptions: Slab<(Subscription, Option<u64>)>,
	demand: Option<Subscription>,
	demand_version: u64,
	/// Drained when the aggregate demand changes.
	on_demand: WaiterList,
	producers: usize,
	pool: Option<Pool>,
	group_cap: usize,
	/// How many times [`TrackProducer::start_over`] emptied the cache; a cursor that saw fewer
	/// forgets the sequences it had passed.
	restarts: u64,
	/// Who asked for the track, if it was created on request (see [`TrackProducer::requester`]),
	/// or who last asked for it without subscribing while it lingered (see [`TrackProducer::asked`]).
	requester: Option<u64>,
	/// The `demand_version` at which a consumer without demand asked for the track while it
	/// lingered: it is not abandoned until demand changes again.
	asked_at: Option<u64>,
	/// The distinct requesters of `subscriptions`, with how many each has, kept as they come and
	/// go: a spent request budget asks every requested track who holds it on each new request,
	/// and walking the subscriptions made that cost grow with the subscriptions a peer opened
	/// (a peer with many sessions of 1,024 subscriptions each to the same names).
	subscribers: Vec<(Option<u64>, usize)>,
}

impl TrackState {
	/// Whether the track had subscribers and has none now: it lingers, if its handler lets it.
	fn lingers(&self) -> bool {
		self.demand.is_none() && self.demand_version > 0
	}

	fn cached(&self, arrival: u64) -> Option<&Cached> {
		self.arrival.get(arrival.checked_sub(self.base)? as usize)?.as_ref()
	}

	/// Not aborted: its cache can still be read.
	pub(crate) fn is_live(&self) -> bool {
		self.error.is_none()
	}

	fn is_complete(&self) -> bool {
		self.final_sequence
			.is_some_and(|end| self.max_sequence.map_or(0, |max| max + 1) >= end)
	}

	fn evict(&mut self, arrival: u64, evicted: &mut Vec<(GroupRef, Error)>, error: Error) {
		let index = (arrival - self.base) as usize;
		if let Some(cached) = self.arrival[index].take() {
			self.by_sequence.remove(&cached.sequence);
			evicted.push((cached.group, error));
		}
		while matches!(self.arrival.front(), Some(None)) {
			self.arrival.pop_front();
			self.base += 1;
		}
	}

	/// Age expiry: non-latest groups whose last access is older than `latency_max`.
	fn expire(&mut self, now: Instant, evicted: &mut Vec<(GroupRef, Error)>) {
		let Some(oldest) = now.checked_sub(self.info.latency_max) else {
			return;
		};
		let candidates: Vec<u64> = (self.base..self.base + self.arrival.len() as u64)
			.filter(|&arrival| Some(arrival) != self.latest && self.cached(arrival).is_some())
			.take(EVICT_SCAN)
			.filter(|&arrival| self.cached(arrival).is_some_and(|cached| cached.accessed <= oldest))
			.collect();
		for arrival in candidates {
			self.evict(arrival, evicted, Error::Old);
		}
	}

	/// Pool pressure: while the pool cannot take `room` more bytes, evict this track's stalest
	/// non-latest group among the oldest few, never the group with sequence `keep` (the one being
	/// written). Nothing is evicted for what could never fit.
	fn relieve(&mut self, evicted: &mut Vec<(GroupRef, Error)>, room: u64, keep: u64) {
		let Some(pool) = self.pool.clone() else {
			return;
		};
		if !pool.could_fit(room) {
			return;
		}
		let keep = self.by_sequence.get(&keep).copied();
		while !pool.has_room(room) {
			let stalest = (self.base..self.base + self.arrival.len() as u64)
				.filter(|&arrival| Some(arrival) != self.latest && Some(arrival) != keep)
				.filter_map(|arrival| Some((self.cached(arrival)?.accessed, arrival)))
				.take(EVICT_SCAN)
				.min();
			let Some((_, arrival)) = stalest else {
				break;
			};
			// The pool is released under the group's lock at once, so `has_room` sees it.
			let index = (arrival - self.base) as usize;
			if let Some(cached) = &self.arrival[index] {
				cached.group.lock().release_pool();
			}
			self.evict(arrival, evicted, Error::Evicted);
		}
	}

	fn set_demand(&mut self) -> Wakes {
		let demand = Subscription::aggregate(self.subscriptions.iter().map(|(_, (sub, _))| sub), self.max_sequence);
		if demand == self.demand {
			return Wakes::none();
		}
		self.demand = demand;
		self.demand_version += 1;
		self.on_demand.take()
	}

	fn end(&mut self, error: Option<Error>, evicted: &mut Vec<(GroupRef, Error)>) -> Wakes {
		if let Some(error) = error {
			self.base += self.arrival.len() as u64;
			for cached in self.arrival.drain(..).flatten() {
				evicted.push((cached.group, error.clone()));
			}
			self.by_sequence.clear();
			self.latest = None;
			self.error = Some(error);
		}
		let mut wakes = self.on_group.take();
		wakes.append(self.on_demand.take());
		wakes
	}
}

/// Makes room in the pool for `room` bytes of group `sequence` by evicting the track's own stalest
/// groups (a full pool refuses a frame otherwise).
pub(crate) fn relieve_for(track: &Lock<TrackState>, sequence: u64, room: u64) {
	let mut evicted = Vec::new();
	track.lock().relieve(&mut evicted, room, sequence);
	abort_all(evicted);
}

/// Aborts evicted groups after the track's lock is released, so their readers' wakes run
/// outside every lock.
fn abort_all(evicted: Vec<(GroupRef, Error)>) {
	for (group, error) in evicted {
		group::abort_ref(&group, error);
	}
}

/// Writes a track: creates its groups, ends it, watches its demand.
///
/// Cloneable; when the last clone drops without [`finish`](Self::finish), the track aborts
/// with [`Error::Dropped`].
pub struct TrackProducer {
	state: Lock<TrackState>,
}

impl TrackProducer {
	/// A new track named `name`, caching without a pool.
	pub fn new(name: &str, info: TrackInfo) -> Self {
		Self::build(name, info, None)
	}

	/// A new track whose groups charge `pool`.
	pub fn with_pool(name: &str, info: TrackInfo, pool: Pool) -> Self {
		Self::build(name, info, Some(pool))
	}

	fn build(name: &str, info: TrackInfo, pool: Option<Pool>) -> Self {
		Self {
			state: Lock::new(TrackState {
				name: name.to_owned(),
				info,
				info_known: true,
				arrival: VecDeque::new(),
				base: 0,
				by_sequence: BTreeMap::new(),
				latest: None,
				max_sequence: None,
				final_sequence: None,
				error: None,
				on_group: WaiterList::new(),
				subscriptions: Slab::new(),
				demand: None,
				demand_version: 0,
				on_demand: WaiterList::new(),
				producers: 1,
				pool,
				group_cap: MAX_GROUP_BYTES,
				restarts: 0,
				requester: None,
				asked_at: None,
				subscribers: Vec::new(),
			}),
		}
	}

	pub(crate) fn state(&self) -> &Lock<TrackState> {
		&self.state
	}

	/// The track's name.
	pub fn name(&self) -> String {
		self.state.lock().name.clone()
	}

	/// The publisher's properties.
	pub fn info(&self) -> TrackInfo {
		self.state.lock().info
	}

	/// Replaces the publisher's properties (for a track created before its info was known);
	/// wakes consumers waiting in [`TrackConsumer::info_known`].
	pub fn set_info(&self, info: TrackInfo) {
		let wakes = {
			let mut state = self.state.lock();
			state.info = info;
			state.info_known = true;
			state.on_group.take()
		};
		drop(wakes);
	}

	/// A track whose info is not known yet: consumers wait in [`TrackConsumer::info_known`]
	/// until [`set_info`](Self::set_info).
	pub(crate) fn pending(name: &str, pool: Option<Pool>, requester: Option<u64>) -> Self {
		let track = Self::build(name, TrackInfo::default(), pool);
		let mut state = track.state.lock();
		state.info_known = false;
		state.requester = requester;
		drop(state);
		track
	}

	/// Who asked for this track, for a track created on request by a consumer that said (see
	/// [`OriginConsumer::requesting_as`](super::OriginConsumer::requesting_as)).
	pub fn requester(&self) -> Option<u64> {
		self.state.lock().requester
	}

	/// Who holds the track: the distinct requesters its subscriptions are for, or, with nobody
	/// subscribed, whoever asked for it ([`requester`](Self::requester)); `None` past `max` of
	/// them (so widely held, it is nobody's in particular).
	pub fn holders(&self, max: usize) -> Option<Vec<Option<u64>>> {
		let state = self.state.lock();
		if state.subscriptions.is_empty() {
			return Some(vec![state.requester]);
		}
		if state.subscribers.len() > max {
			return None;
		}
		Some(state.subscribers.iter().map(|&(requester, _)| requester).collect())
	}

	/// Whether the publisher's properties are known (false for a requested track until its
	/// handler sets them: upstream has not answered).
	pub fn has_info(&self) -> bool {
		self.state.lock().info_known
	}

	/// Whether the track had subscribers and has none now (it lingers, if its handler lets it),
	/// and nobody has asked for it since.
	pub fn is_abandoned(&self) -> bool {
		let state = self.state.lock();
		state.lingers() && state.asked_at != Some(state.demand_version)
	}

	/// `requester` asked for the track without subscribing (a TRACK or a FETCH). If it lingers,
	/// it is then `requester`'s until demand changes, as a new name asked for by a TRACK is its
	/// asker's: a viewer returning to a track it left asks for it with a TRACK before its
	/// SUBSCRIBE, and between the two the track was the first to go for a new request.
	pub(crate) fn asked(state: &Lock<TrackState>, requester: Option<u64>) {
		let mut state = state.lock();
		if state.lingers() {
			state.requester = requester;
			state.asked_at = Some(state.demand_version);
		}
	}

	/// Sets the byte cap of groups created from now on.
	pub fn set_group_cap(&self, cap: usize) {
		self.state.lock().group_cap = cap;
	}

	/// Creates group `sequence` and offers it to every cursor at once (frames stream as they are
	/// written). Runs the bounded expiry pass after the insert (pool pressure is met when a frame does
	/// not fit: [`GroupProducer::write_frame`]).
	pub fn create_group(&self, sequence: u64) -> Result<GroupProducer, Error> {
		let now = kio::time::now();
		let mut evicted = Vec::new();
		let (producer, wakes) = {
			let mut state = self.state.lock();
			if let Some(error) = &state.error {
				return Err(error.clone());
			}
			if state.final_sequence.is_some_and(|end| sequence >= end) {
				return Err(Error::Finished);
			}
			if state.by_sequence.contains_key(&sequence) {
				return Err(Error::Duplicate);
			}
			let mut producer = GroupProducer::with(sequence, state.group_cap, state.pool.clone());
			if state.pool.is_some() {
				producer.track = Some(self.state.clone());
			}
			let arrival = state.base + state.arrival.len() as u64;
			state.arrival.push_back(Some(Cached {
				sequence,
				group: producer.state().clone(),
				accessed: now,
			}));
			state.by_sequence.insert(sequence, arrival);
			if state.max_sequence.is_none_or(|max| sequence > max) {
				state.max_sequence = Some(sequence);
				state.latest = Some(arrival);
			}
			// After the insert, so the group this one displaced as the latest can expire now.
			state.expire(now, &mut evicted);
			(producer, state.on_group.take())
		};
		abort_all(evicted);
		drop(wakes);
		Ok(producer)
	}

	/// Creates the group after the highest sequence so far.
	pub fn append_group(&self) -> Result<GroupProducer, Error> {
		let next = self.state.lock().max_sequence.map_or(0, |max| max + 1);
		self.create_group(next)
	}

	/// Publishes `frame` as a one-frame group after the highest sequence so far.
	pub fn write_frame(&self, frame: Frame) -> Result<u64, Error> {
		let mut group = self.append_group()?;
		group.write_frame(frame)?;
		group.finish()?;
		Ok(group.sequence())
	}

	/// Ends the track after the highest sequence so far.
	pub fn finish(&self) -> Result<(), Error> {
		let end = self.state.lock().max_sequence.map_or(0, |max| max + 1);
		self.finish_at(end)
	}

	/// Ends the track at `end` (exclusive): groups below it may still arrive; none at or above.
	pub fn finish_at(&self, end: u64) -> Result<(), Error> {
		let mut evicted = Vec::new();
		let wakes = {
			let mut state = self.state.lock();
			if let Some(error) = &state.error {
				return Err(error.clone());
			}
			if state.final_sequence.is_some() || state.max_sequence.is_some_and(|max| end <= max) {
				return Err(Error::Finished);
			}
			state.final_sequence = Some(end);
			state.end(None, &mut evicted)
		};
		drop(wakes);
		Ok(())
	}

	/// Whether nobody subscribes; if so, and the track has not ended, drops every cached group and
	/// every sequence seen, so the groups that come next may be numbered afresh, from any
	/// sequence. The track, its info and its cursors stay, and each cursor goes on from the next
	/// group to arrive. A relay does this as it ends an upstream subscription: the public
	/// JavaScript publisher serves each subscription from a track of its own, numbered from 0, so
	/// the next subscription's groups would otherwise be refused as duplicates of the stale ones,
	/// or skipped as older. Checking for demand under the same lock means no subscriber can
	/// arrive between the two and be served the old numbering: one that came first keeps the
	/// subscription going.
	pub fn start_over(&self) -> bool {
		let mut evicted = Vec::new();
		{
			let mut state = self.state.lock();
			if state.demand.is_some() {
				return false;
			}
			if !state.is_live() || state.final_sequence.is_some() {
				return true;
			}
			// One arrival index past the end is skipped, so every cursor made before is behind the
			// new base: the check that sees it (`poll_recv_group`) costs a live reader nothing.
			state.base += state.arrival.len() as u64 + 1;
			for cached in state.arrival.drain(..).flatten() {
				evicted.push((cached.group, Error::Cancelled));
			}
			state.by_sequence.clear();
			state.latest = None;
			state.max_sequence = None;
			state.restarts += 1;
		}
		abort_all(evicted);
		true
	}

	/// Ends the track with an error and clears its cache; every cursor sees the error.
	pub fn abort(&self, error: Error) {
		let mut evicted = Vec::new();
		let wakes = {
			let mut state = self.state.lock();
			if state.error.is_some() {
				return;
			}
			state.end(Some(error), &mut evicted)
		};
		abort_all(evicted);
		drop(wakes);
	}

	/// Ready once every group below the final sequence has arrived (or the track aborted).
	pub fn poll_complete(&self, waiter: &Waiter) -> Poll<()> {
		let mut state = self.state.lock();
		if state.error.is_some() || state.is_complete() {
			return Poll::Ready(());
		}
		state.on_group.register(waiter);
		Poll::Pending
	}

	/// Whether the track ended (finished or aborted).
	pub fn is_ended(&self) -> bool {
		let state = self.state.lock();
		!state.is_live() || state.final_sequence.is_some()
	}

	/// The aggregate demand, `None` when nobody subscribes.
	pub fn subscription(&self) -> Option<Subscription> {
		self.state.lock().demand
	}

	/// Ready with the aggregate demand once it differs from the version in `seen` (start at 0),
	/// which it updates.
	pub fn poll_subscription_changed(&self, waiter: &Waiter, seen: &mut u64) -> Poll<Option<Subscription>> {
		let mut state = self.state.lock();
		if state.demand_version != *seen {
			*seen = state.demand_version;
			return Poll::Ready(state.demand);
		}
		state.on_demand.register(waiter);
		Poll::Pending
	}

	/// Waits for the aggregate demand to change from version `seen`.
	pub async fn subscription_changed(&self, seen: &mut u64) -> Option<Subscription> {
		kio::wait(|waiter| self.poll_subscription_changed(waiter, seen)).await
	}

	/// Ready once someone subscribes (or the track ended).
	pub fn poll_used(&self, waiter: &Waiter) -> Poll<()> {
		self.poll_demand(waiter, true)
	}

	/// Waits until someone subscribes (or the track ended).
	pub async fn used(&self) {
		kio::wait(|waiter| self.poll_used(waiter)).await;
	}

	/// Ready once nobody subscribes (or the track ended).
	pub fn poll_unused(&self, waiter: &Waiter) -> Poll<()> {
		self.poll_demand(waiter, false)
	}

	/// Waits until nobody subscribes (or the track ended).
	pub async fn unused(&self) {
		kio::wait(|waiter| self.poll_unused(waiter)).await;
	}

	fn poll_demand(&self, waiter: &Waiter, used: bool) -> Poll<()> {
		let mut state = self.state.lock();
		if state.demand.is_some() == used || state.error.is_some() || state.final_sequence.is_some() {
			return Poll::Ready(());
		}
		state.on_demand.register(waiter);
		Poll::Pending
	}

	/// A cursor from the latest group, without demand.
	pub fn consume(&self) -> TrackConsumer {
		TrackConsumer::new(self.state.clone())
	}

	/// A cursor that carries `subscription` as demand; starts at `subscription.start`, or at the
	/// latest group.
	pub fn subscribe(&self, subscription: Subscription) -> TrackConsumer {
		TrackConsumer::subscribed(self.state.clone(), subscription, None)
	}
}

impl Clone for TrackProducer {
	fn clone(&self) -> Self {
		self.state.lock().producers += 1;
		Self {
			state: self.state.clone(),
		}
	}
}

impl Drop for TrackProducer {
	fn drop(&mut self) {
		let ended = {
			let mut state = self.state.lock();
			state.producers -= 1;
			state.producers == 0 && state.error.is_none() && state.final_sequence.is_none()
		};
		if ended {
			self.abort(Error::Dropped);
		}
	}
}

impl fmt::Debug for TrackProducer {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("TrackProducer")
			.field("name", &self.state.lock().name)
			.finish()
	}
}

/// A cursor over a track's groups. See the [module docs](self).
pub struct TrackConsumer {
	state: Lock<TrackState>,
	/// The arrival index `recv_group` reads next.
	next_arrival: u64,
	passed: Passed,
	start: Option<u64>,
	end: Option<u64>,
	subscription: Option<usize>,
	/// Who this cursor subscribes for (see [`TrackProducer::holders`]).
	requester: Option<u64>,
	/// Groups `recv_group` passed over because the cache dropped them first ([`skipped`](Self::skipped)).
	skipped: u64,
}

/// What a cursor has passed, by sequence: meaningful only in the numbering it was read in. Every
/// method that reads it, or moves the cursor to the base, first calls [`Passed::follow`].
#[derive(Clone, Default)]
struct Passed {
	/// The highest sequence `recv_group` has yielded, if any.
	yielded: Option<u64>,
	/// The lowest sequence `next_group` may yield next.
	next_sequence: u64,
	/// Sequences of groups above the end cap, re-offered when it rises (at most [`MAX_HELD`]).
	held: BTreeSet<u64>,
	/// The track's `restarts` when the cursor last looked.
	restarts: u64,
}

impl Passed {
	/// Forgets every sequence if the track has started over (`restarts` is the track's count)
	/// since the cursor last looked: they belong to the old numbering.
	fn follow(&mut self, restarts: u64) {
		if self.restarts != restarts {
			*self = Self {
				restarts,
				..Self::default()
			};
		}
	}
}

impl TrackConsumer {
	pub(crate) fn new(state: Lock<TrackState>) -> Self {
		let (next_arrival, next_sequence, restarts) = {
			let track = state.lock();
			let end = track.base + track.arrival.len() as u64;
			(
				track.latest.unwrap_or(end),
				track.max_sequence.unwrap_or(0),
				track.restarts,
			)
		};
		Self {
			state,
			next_arrival,
			passed: Passed {
				next_sequence,
				restarts,
				..Passed::default()
			},
			start: None,
			end: None,
			subscription: None,
			requester: None,
			skipped: 0,
		}
	}

	/// This cursor, subscribing (if it does) for `requester`.
	pub(crate) fn for_requester(mut self, requester: Option<u64>) -> Self {
		self.requester = requester;
		self
	}

	pub(crate) fn subscribed(state: Lock<TrackState>, subscription: Subscription, requester: Option<u64>) -> Self {
		let mut consumer = Self::new(state).for_requester(requester);
		if let Some(start) = subscription.start {
			consumer.start_at(start);
		}
		consumer.end_at(subscription.end);
		consumer.subscribe(subscription);
		consumer
	}

	/// The track's name.
	pub fn name(&self) -> String {
		self.state.lock().name.clone()
	}

	/// The publisher's properties.
	pub fn info(&self) -> TrackInfo {
		self.state.lock().info
	}

	/// Ready with the publisher's properties once they are known (at once for a track created
	/// with its info; after the handler's [`TrackProducer::set_info`] for a requested one).
	pub fn poll_info_known(&self, waiter: &Waiter) -> Poll<Result<TrackInfo, Error>> {
		let mut state = self.state.lock();
		if state.info_known {
			return Poll::Ready(Ok(state.info));
		}
		if let Some(error) = &state.error {
			return Poll::Ready(Err(error.clone()));
		}
		state.on_group.register(waiter);
		Poll::Pending
	}

	/// Waits until the publisher's properties are known.
	pub async fn info_known(&self) -> Result<TrackInfo, Error> {
		kio::wait(|waiter| self.poll_info_known(waiter)).await
	}

	/// The cached group with sequence `sequence`, refreshing its last access (a fetch hit).
	pub fn get_group(&self, sequence: u64) -> Option<GroupConsumer> {
		let now = kio::time::now();
		let mut state = self.state.lock();
		let arrival = *state.by_sequence.get(&sequence)?;
		let index = (arrival - state.base) as usize;
		let cached = state.arrival[index].as_mut()?;
		cached.accessed = now;
		Some(GroupConsumer::new(sequence, cached.group.clone()))
	}

	/// Sets a floor: only groups with a sequence at or above `start` are yielded, and the cursor
	/// rewinds to the oldest cached group to find them.
	pub fn start_at(&mut self, start: u64) {
		let state = self.state.lock();
		self.passed.follow(state.restarts);
		self.start = Some(start);
		self.next_arrival = state.base;
		self.passed.next_sequence = start;
	}

	/// Raises the floor to `start` without going back: groups below it are no longer yielded,
	/// and nothing already passed is offered again.
	pub fn raise_start(&mut self, start: u64) {
		self.start = Some(start);
		self.passed.next_sequence = self.passed.next_sequence.max(start);
	}

	/// Removes the floor: the cursor goes on from the latest group, as a cursor made without a
	/// start does. If the floor had skipped the latest group (a start in the future), the cursor
	/// goes back to it; groups it already yielded are not yielded again.
	pub fn clear_start(&mut self) {
		let Some(start) = self.start.take() else {
			return;
		};
		let state = self.state.lock();
		self.passed.follow(state.restarts);
		if let (Some(latest), Some(max)) = (state.latest, state.max_sequence)
			&& max < start
			&& self.passed.yielded.is_none_or(|yielded| yielded < max)
		{
			// Every cached group was below the floor, so none was yielded: the latest comes next.
			self.next_arrival = self.next_arrival.min(latest);
			self.passed.next_sequence = max;
		}
	}

	/// Sets (or clears) an inclusive cap; groups above it are held until it rises.
	pub fn end_at(&mut self, end: Option<u64>) {
		self.end = end;
	}

	/// Registers (or updates) this cursor's demand.
	pub fn subscribe(&mut self, subscription: Subscription) {
		let wakes = {
			let mut state = self.state.lock();
			match self.subscription {
				Some(key) => state.subscriptions[key].0 = subscription,
				None => {
					self.subscription = Some(state.subscriptions.insert((subscription, self.requester)));
					match state.subscribers.iter_mut().find(|(who, _)| *who == self.requester) {
						Some((_, count)) => *count += 1,
						None => state.subscribers.push((self.requester, 1)),
					}
				}
			}
			state.set_demand()
		};
		drop(wakes);
	}

	/// Withdraws this cursor's demand.
	pub fn unsubscribe(&mut self) {
		let Some(key) = self.subscription.take() else {
			return;
		};
		let wakes = {
			let mut state = self.state.lock();
			let (_, requester) = state.subscriptions.remove(key);
			if let Some(at) = state.subscribers.iter().position(|(who, _)| *who == requester) {
				state.subscribers[at].1 -= 1;
				if state.subscribers[at].1 == 0 {
					state.subscribers.swap_remove(at);
				}
			}
			state.set_demand()
		};
		drop(wakes);
	}

	/// The lowest held group now within the cap `end` that is still cached.
	fn take_held(held: &mut BTreeSet<u64>, end: Option<u64>, state: &TrackState) -> Option<GroupConsumer> {
		while let Some(&sequence) = held.first() {
			if end.is_some_and(|end| sequence > end) {
				return None;
			}
			held.pop_first();
			let cached = state
				.by_sequence
				.get(&sequence)
				.and_then(|&arrival| state.cached(arrival));
			if let Some(cached) = cached {
				return Some(GroupConsumer::new(sequence, cached.group.clone()));
			}
		}
		None
	}

	fn hold(held: &mut BTreeSet<u64>, sequence: u64) {
		held.insert(sequence);
		if held.len() > MAX_HELD {
			held.pop_first();
		}
	}

	/// How many groups [`recv_group`](Self::recv_group) has passed over because the cache dropped
	/// them (by age or to make room) before this cursor read them: what its reader lost to the
	/// cache, as opposed to groups it chose not to take (below its start, above its end).
	pub fn skipped(&self) -> u64 {
		self.skipped
	}

	/// The next group in arrival order; `Ok(None)` once the track is complete and every group was
	/// offered; registers for the next group otherwise.
	pub fn poll_recv_group(&mut self, waiter: &Waiter) -> Poll<Result<Option<GroupConsumer>, Error>> {
		let mut state = self.state.lock();
		if let Some(error) = &state.error {
			return Poll::Ready(Err(error.clone()));
		}
		// `TrackProducer::start_over` leaves every cursor that has not looked since behind the
		// base (`start_at` and `clear_start` look too), so a live reader pays one comparison for
		// this; the arrival index is corrected below, as after any eviction.
		// Groups of an old numbering passed at a start-over were not lost: they are not counted.
		let restarted = self.passed.restarts != state.restarts;
		if self.next_arrival < state.base {
			self.passed.follow(state.restarts);
		}
		if !self.passed.held.is_empty()
			&& let Some(group) = Self::take_held(&mut self.passed.held, self.end, &state)
		{
			return Poll::Ready(Ok(Some(group)));
		}
		loop {
			// Groups evicted before this cursor read them: skip to the oldest still cached.
			if self.next_arrival < state.base {
				if !restarted {
					self.skipped += state.base - self.next_arrival;
				}
				self.next_arrival = state.base;
			}
			let Some(slot) = state.arrival.get((self.next_arrival - state.base) as usize) else {
				break;
			};
			self.next_arrival += 1;
			let Some(cached) = slot else {
				self.skipped += 1;
				continue;
			};
			if self.start.is_some_and(|start| cached.sequence < start) {
				continue;
			}
			if self.end.is_some_and(|end| cached.sequence > end) {
				Self::hold(&mut self.passed.held, cached.sequence);
				continue;
			}
			self.passed.yielded = Some(self.passed.yielded.map_or(cached.sequence, |y| y.max(cached.sequence)));
			return Poll::Ready(Ok(Some(GroupConsumer::new(cached.sequence, cached.group.clone()))));
		}
		if state.is_complete() && self.passed.held.is_empty() {
			return Poll::Ready(Ok(None));
		}
		state.on_group.register(waiter);
		Poll::Pending
	}

	/// The next group in arrival order; `Ok(None)` once the track is complete.
	pub async fn recv_group(&mut self) -> Result<Option<GroupConsumer>, Error> {
		kio::wait(|waiter| self.poll_recv_group(waiter)).await
	}

	/// The lowest cached group at or above the next sequence (and the floor, within the cap);
	/// late groups below it are skipped. `Ok(None)` once nothing more can come.
	pub fn poll_next_group(&mut self, waiter: &Waiter) -> Poll<Result<Option<GroupConsumer>, Error>> {
		let mut state = self.state.lock();
		if let Some(error) = &state.error {
			return Poll::Ready(Err(error.clone()));
		}
		self.passed.follow(state.restarts);
		let from = self.passed.next_sequence.max(self.start.unwrap_or(0));
		if let Some((&sequence, &arrival)) = state.by_sequence.range(from..).next()
			&& self.end.is_none_or(|end| sequence <= end)
			&& let Some(cached) = state.cached(arrival)
		{
			self.passed.next_sequence = sequence + 1;
			return Poll::Ready(Ok(Some(GroupConsumer::new(sequence, cached.group.clone()))));
		}
		let beyond_end = self.end.is_some_and(|end| from > end);
		if beyond_end || state.final_sequence.is_some_and(|end| from >= end) {
			return Poll::Ready(Ok(None));
		}
		state.on_group.register(waiter);
		Poll::Pending
	}

	/// The next group in rising sequence order, skipping late ones.
	pub async fn next_group(&mut self) -> Result<Option<GroupConsumer>, Error> {
		kio::wait(|waiter| self.poll_next_group(waiter)).await
	}

	/// The latest group, if any is cached.
	pub fn latest(&self) -> Option<GroupConsumer> {
		let state = self.state.lock();
		let cached = state.cached(state.latest?)?;
		Some(GroupConsumer::new(cached.sequence, cached.group.clone()))
	}

	/// Ready with the final sequence (exclusive) once the track is finished, or its error.
	pub fn poll_finished(&self, waiter: &Waiter) -> Poll<Result<u64, Error>> {
		let mut state = self.state.lock();
		if let Some(error) = &state.error {
			return Poll::Ready(Err(error.clone()));
		}
		if let Some(end) = state.final_sequence {
			return Poll::Ready(Ok(end));
		}
		state.on_group.register(waiter);
		Poll::Pending
	}

	/// Waits until the track is finished; yields its final sequence (exclusive).
	pub async fn finished(&self) -> Result<u64, Error> {
		kio::wait(|waiter| self.poll_finished(waiter)).await
	}

	/// The number of cached groups (for tests and metrics).
	pub fn cached(&self) -> usize {
		self.state.lock().by_sequence.len()
	}

	/// The sequences of the cached groups, lowest first.
	pub fn cached_sequences(&self) -> Vec<u64> {
		self.state.lock().by_sequence.keys().copied().collect()
	}
}

impl Clone for TrackConsumer {
	/// Another cursor at the same position, without demand.
	fn clone(&self) -> Self {
		Self {
			state: self.state.clone(),
			next_arrival: self.next_arrival,
			passed: self.passed.clone(),
			start: self.start,
			end: self.end,
			subscription: None,
			requester: self.requester,
			skipped: 0,
		}
	}
}

impl Drop for TrackConsumer {
	fn drop(&mut self) {
		self.unsubscribe();
	}
}

impl fmt::Debug for TrackConsumer {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("TrackConsumer")
			.field("next_arrival", &self.next_arrival)
			.finish()
	}
}
