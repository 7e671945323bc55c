//! Time: the loop's clock, user-space timers, [`Sleep`] and the re-armable [`Deadline`].
//!
//! Timers live in user space, in a per-worker **hierarchical timing wheel**: the earliest deadline
//! is the timeout of the worker's one `io_uring_enter` per turn, so a timer costs no SQE. The wheel
//! has 6 levels of 64 slots over 1 ms ticks (level l's slots are 64^l ms wide, 64^6 ms ≈ 2.2 years
//! in all; later deadlines wait in the top level and are placed again when it comes round). Each
//! slot is a doubly linked list threaded through the timer slab by index, so arming, re-arming a
//! [`Deadline`] and cancelling are a list splice and a bitmap bit: O(1), no allocation, and the
//! wheel never holds garbage. A timer placed above level 0 moves down ("cascades") when the clock
//! reaches its slot, at most once per level.
//!
//! It was chosen over the indexed 4-ary heap kio had before by measurement (`timers` in
//! `kio/benches/results/README.md`, callgrind instructions per op, at revision 2fdcb10): re-arm
//! 214 vs 458 (100 live timers) and 217 vs 595 (10,000); insert + cancel 325 vs 570 and 329 vs
//! 755; fired timer 429 vs 1068 and 291 vs 1619. A heap operation is a sift over log₄ n levels of
//! slab lookups on an `(Instant, seq)` key; the wheel's cost does not grow with the number of
//! timers, and the QUIC-style timers that dominate (pushed back or cancelled before they fire)
//! never cascade.
//!
//! **Resolution.** Ticks only bucket timers: each timer keeps its exact deadline, and whether it is
//! due is decided on that, so it fires at the first `expire` at or after its deadline, never early
//! and not rounded up to a tick. [`Timers::next_deadline`] is the exact earliest deadline (found in
//! the next slot to process, whatever its level, and cached until the timer holding it leaves):
//! the worker sleeps until it and no longer (no wake-up just to cascade, no spinning through the
//! rest of a tick), and a paused clock jumps onto it exactly. Timers fire in deadline order, and
//! those due at the same instant in arming order, as they did from the heap: a slot lists its
//! timers in arming order, and one slot's due timers are sorted by deadline (stably) when they are
//! not already in order.
//!
//! The clock is read once per loop turn; [`now`] returns that reading. A runtime built with
//! [`Builder::paused_clock`](crate::Builder::paused_clock) never reads the system clock: time moves
//! by [`advance`], or jumps to the next timer when the worker has nothing else to run.

use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::exec::with_core;
use crate::{Park, Waiter};

/// A worker's clock: the system's, or a paused one that only moves when told.
pub(crate) enum Clock {
	Real,
	Paused { base: Instant, offset: Cell<Duration> },
}

impl Clock {
	pub(crate) fn new(paused: bool) -> Self {
		if paused {
			Self::Paused {
				base: Instant::now(),
				offset: Cell::new(Duration::ZERO),
			}
		} else {
			Self::Real
		}
	}

	pub(crate) fn now(&self) -> Instant {
		match self {
			Self::Real => Instant::now(),
			Self::Paused { base, offset } => *base + offset.get(),
		}
	}

	pub(crate) fn is_paused(&self) -> bool {
		matches!(self, Self::Paused { .. })
	}

	pub(crate) fn advance_to(&self, at: Instant) {
		if let Self::Paused { base, offset } = self {
			offset.set(offset.get().max(at.saturating_duration_since(*base)));
		}
	}
}

/// The loop turn's time on a worker; `Instant::now()` elsewhere.
pub fn now() -> Instant {
	with_core(|core| core.now()).unwrap_or_else(Instant::now)
}

/// Moves a paused clock forward by `by` and fires what came due. Panics on a real clock or
/// outside a worker.
pub fn advance(by: Duration) {
	with_core(|core| {
		assert!(core.clock().is_paused(), "kio::time::advance needs a paused clock");
		core.clock().advance_to(core.now() + by);
		core.refresh_now();
	})
	.expect("kio::time::advance called outside a kio worker");
}

/// Bits of a tick that index one level's slots: 64 slots per level, one `u64` occupancy bitmap.
const BITS: u32 = 6;
const SLOTS: usize = 1 << BITS;
/// Level l's slots are 64^l ticks wide; six levels of 1 ms ticks span 64^6 ms, about 2.2 years.
const LEVELS: usize = 6;
/// Ticks the wheel spans. A later deadline waits in the top level's farthest slot and is placed
/// again when that slot comes round.
const SPAN: u64 = 1 << (BITS * LEVELS as u32);
const NIL: u32 = u32::MAX;
/// `loc` of a timer that exists but is not armed.
const UNQUEUED: u16 = u16::MAX;
/// `loc` of a free entry: its `next` links the free list.
const VACANT: u16 = u16::MAX - 1;

struct Timer {
	/// The exact deadline. The wheel only buckets timers by millisecond; whether one is due is
	/// always decided on this, so none fires early and a paused clock lands on it exactly.
	at: Instant,
	prev: u32,
	/// The next timer in the same slot, or the next free entry.
	next: u32,
	/// `level * SLOTS + slot`, `UNQUEUED` or `VACANT`.
	loc: u16,
	waker: Option<Waker>,
}

/// The per-worker hierarchical timing wheel (public only for kio's benchmarks).
pub struct Timers {
	/// Tick 0. Deadlines before it count as tick 0; they are past anyway.
	origin: Instant,
	/// The tick of the latest [`expire`](Self::expire): every slot that starts before it has been
	/// processed. Its own level-0 slot may still hold timers of this tick not yet due, and timers
	/// armed since with a deadline already past.
	elapsed: u64,
	entries: Vec<Timer>,
	free: u32,
	/// Each slot is a doubly linked list threaded through `entries` by index, appended at the tail,
	/// so a slot lists its timers in arming order (see `queue`).
	heads: [u32; LEVELS * SLOTS],
	tails: [u32; LEVELS * SLOTS],
	/// Per level, which slots are non-empty: the next one is a rotate and a `trailing_zeros`.
	occupied: [u64; LEVELS],
	len: usize,
	/// The exact earliest deadline, valid while `earliest_known`. The loop asks twice per turn and
	/// finding it means scanning a slot, so it is kept until the timer holding it leaves.
	earliest: Cell<Option<Instant>>,
	earliest_known: Cell<bool>,
	/// One slot's due timers, to fire in deadline order; kept so its buffer is reused.
	due: Vec<u32>,
}

impl Default for Timers {
	fn default() -> Self {
		Self {
			origin: Instant::now(),
			elapsed: 0,
			entries: Vec::new(),
			free: NIL,
			heads: [NIL; LEVELS * SLOTS],
			tails: [NIL; LEVELS * SLOTS],
			occupied: [0; LEVELS],
			len: 0,
			earliest: Cell::new(None),
			earliest_known: Cell::new(true),
			due: Vec::new(),
		}
	}
}

impl Timers {
	/// Arms a new timer; returns its id.
	pub fn insert(&mut self, at: Instant, waker: Waker) -> usize {
		let timer = Timer {
			at,
			prev: NIL,
			next: NIL,
			loc: UNQUEUED,
			waker: Some(waker),
		};
		let id = if self.free == NIL {
			let id = u32::try_from(self.entries.len())
				.ok()
				.filter(|&id| id != NIL)
				.expect("fewer than 2^32 - 1 timers per worker");
			self.entries.push(timer);
			id
		} else {
			let id = self.free;
			self.free = self.entries[id as usize].next;
			self.entries[id as usize] = timer;
			id
		};
		self.queue(id, at);
		id as usize
	}

	/// Re-arms timer `id` for `at` (or disarms it with `None`), in place.
	pub fn reset(&mut self, id: usize, at: Option<Instant>) {
		debug_assert_ne!(self.entries[id].loc, VACANT, "reset of a removed timer");
		if self.is_queued(id) {
			self.unqueue(id as u32);
		}
		if let Some(at) = at {
			self.queue(id as u32, at);
		}
	}

	/// Points timer `id` at `waker` (kept if it would wake the same task).
	pub fn set_waker(&mut self, id: usize, waker: &Waker) {
		match &mut self.entries[id].waker {
			Some(current) if current.will_wake(waker) => {}
			slot => *slot = Some(waker.clone()),
		}
	}

	/// Whether timer `id` is armed.
	pub fn is_queued(&self, id: usize) -> bool {
		self.entries[id].loc < VACANT
	}

	/// Forgets timer `id`.
	pub fn remove(&mut self, id: usize) {
		if id >= self.entries.len() || self.entries[id].loc == VACANT {
			return;
		}
		if self.is_queued(id) {
			self.unqueue(id as u32);
		}
		let timer = &mut self.entries[id];
		timer.loc = VACANT;
		timer.waker = None;
		timer.next = self.free;
		self.free = id as u32;
	}

	/// The earliest armed deadline, exactly (not the start of its slot): the worker sleeps until
	/// it, and a paused clock jumps to it.
	pub fn next_deadline(&self) -> Option<Instant> {
		if !self.earliest_known.get() {
			// Lower levels' slots all end before higher levels' start, and a level's slots are
			// disjoint, so the earliest deadline is in the next slot to process, at any level.
			let earliest = self.next_slot().and_then(|(loc, _)| {
				let mut earliest = None::<Instant>;
				let mut id = self.heads[loc];
				while id != NIL {
					let timer = &self.entries[id as usize];
					earliest = Some(earliest.map_or(timer.at, |e| e.min(timer.at)));
					id = timer.next;
				}
				earliest
			});
			self.earliest.set(earliest);
			self.earliest_known.set(true);
		}
		self.earliest.get()
	}

	/// The number of armed timers.
	pub fn len(&self) -> usize {
		self.len
	}

	/// Whether no timer is armed.
	pub fn is_empty(&self) -> bool {
		self.len == 0
	}

	/// Fires every timer due at `now` (deadline at or before it), in deadline order and, for equal
	/// deadlines, in arming order, and collects its waker.
	pub fn expire(&mut self, now: Instant, fired: &mut Vec<Waker>) {
		// A clock read earlier than the latest one moves nothing back; the current slot is still
		// checked against it exactly.
		let now_tick = self.tick(now).max(self.elapsed);
		while let Some((loc, start)) = self.next_slot() {
			if start > now_tick {
				break;
			}
			self.elapsed = start;
			if loc >= SLOTS {
				self.cascade(loc);
			} else {
				self.fire_slot(loc, now, fired);
				if start == now_tick {
					// What is left in this slot is due later in the tick; nothing else is due.
					break;
				}
			}
		}
		self.elapsed = now_tick;
	}

	/// The millisecond tick `at` falls in (rounded down: the wheel buckets, `at` decides).
	fn tick(&self, at: Instant) -> u64 {
		let since = at.saturating_duration_since(self.origin);
		since
			.as_secs()
			.saturating_mul(1000)
			.saturating_add(u64::from(since.subsec_millis()))
	}

	/// The level whose slots tell `tick` apart from `elapsed`: the highest 6-bit group in which
	/// they differ (0 if they are equal).
	fn level_for(elapsed: u64, tick: u64) -> usize {
		let masked = ((elapsed ^ tick) | (SLOTS as u64 - 1)).min(SPAN - 1);
		(63 - masked.leading_zeros() as usize) / BITS as usize
	}

	/// Appends timer `id` to the slot of `at`. A slot's list stays in arming order: timers reach
	/// a slot either by cascading from the one slot above that covers it, which happens before
	/// the clock lets any timer be armed into it directly, or armed directly, in arming order.
	/// Timers due in the same tick therefore always share a slot, in arming order.
	fn queue(&mut self, id: u32, at: Instant) {
		// A deadline already past waits in the current tick's slot and fires at the next expire.
		let tick = self.tick(at).clamp(self.elapsed, self.elapsed.saturating_add(SPAN - 1));
		let level = Self::level_for(self.elapsed, tick);
		let slot = (tick >> (level as u32 * BITS)) as usize & (SLOTS - 1);
		let loc = level * SLOTS + slot;
		let tail = self.tails[loc];
		let timer = &mut self.entries[id as usize];
		timer.at = at;
		timer.loc = loc as u16;
		timer.prev = tail;
		timer.next = NIL;
		if tail == NIL {
			self.heads[loc] = id;
			self.occupied[level] |= 1 << slot;
		} else {
			self.entries[tail as usize].next = id;
		}
		self.tails[loc] = id;
		self.len += 1;
		if self.earliest_known.get() && self.earliest.get().is_none_or(|earliest| at < earliest) {
			self.earliest.set(Some(at));
		}
	}

	/// Unlinks armed timer `id` from its slot.
	fn unqueue(&mut self, id: u32) {
		let timer = &mut self.entries[id as usize];
		let loc = timer.loc as usize;
		timer.loc = UNQUEUED;
		let (prev, next, at) = (timer.prev, timer.next, timer.at);
		if prev == NIL {
			self.heads[loc] = next;
		} else {
			self.entries[prev as usize].next = next;
		}
		if next == NIL {
			self.tails[loc] = prev;
		} else {
			self.entries[next as usize].prev = prev;
		}
		if self.heads[loc] == NIL {
			self.occupied[loc / SLOTS] &= !(1 << (loc % SLOTS));
		}
		self.len -= 1;
		if self.len == 0 {
			self.earliest.set(None);
			self.earliest_known.set(true);
		} else if self.earliest.get() == Some(at) {
			self.earliest_known.set(false);
		}
	}

	/// The next slot to process and the tick it starts at. Lower levels come first: a level-l
	/// timer shares `elapsed`'s 64^(l+1)-tick block but not its 64^l one, so every lower-level
	/// slot ends before any higher-level one starts.
	fn next_slot(&self) -> Option<(usize, u64)> {
		for level in 0..LEVELS {
			let occupied = self.occupied[level];
			if occupied == 0 {
				continue;
			}
			let shift = level as u32 * BITS;
			let now_slot = (self.elapsed >> shift) as u32 & (SLOTS as u32 - 1);
			let slot = (occupied.rotate_right(now_slot).trailing_zeros() + now_slot) % SLOTS as u32;
			let level_span = 1u64 << (shift + BITS);
			let mut start = (self.elapsed & !(level_span - 1)) + (u64::from(slot) << shift);
			if start < self.elapsed {
				// Only the top level wraps: a timer beyond the span sits in a slot "behind" now.
				start += level_span;
			}
			return Some((level * SLOTS + slot as usize, start));
		}
		None
	}

	/// Places the timers of higher-level slot `loc`, whose start `elapsed` has reached, again:
	/// each lands a level or more lower, in the same order.
	fn cascade(&mut self, loc: usize) {
		let mut id = std::mem::replace(&mut self.heads[loc], NIL);
		self.tails[loc] = NIL;
		self.occupied[loc / SLOTS] &= !(1 << (loc % SLOTS));
		while id != NIL {
			let timer = &self.entries[id as usize];
			let (next, at) = (timer.next, timer.at);
			// Still armed, and at or after the earliest deadline: `queue` counts it again.
			self.len -= 1;
			self.queue(id, at);
			id = next;
		}
	}

	/// Fires the timers of level-0 slot `loc` that are due at `now`; the others stay, in order.
	fn fire_slot(&mut self, loc: usize, now: Instant, fired: &mut Vec<Waker>) {
		let mut due = std::mem::take(&mut self.due);
		let mut sorted = true;
		let mut last = None;
		let mut id = self.heads[loc];
		while id != NIL {
			let timer = &self.entries[id as usize];
			let (next, at) = (timer.next, timer.at);
			if at <= now {
				sorted &= last.is_none_or(|last| last <= at);
				last = Some(at);
				self.unqueue(id);
				due.push(id);
			}
			id = next;
		}
		if !sorted {
			// Stable, so timers due at the same instant keep the slot's arming order.
			due.sort_by_key(|&id| self.entries[id as usize].at);
		}
		for id in due.drain(..) {
			if let Some(waker) = self.entries[id as usize].waker.take() {
				fired.push(waker);
			}
		}
		self.due = due;
	}
}

/// A re-armable deadline: a timer that re-arming moves in place, without allocating.
///
/// Disarmed (`None`) it never elapses. Once elapsed it stays elapsed until re-armed. It belongs
/// to the worker that first polls it.
pub struct Deadline {
	at: Option<Instant>,
	/// `(core serial, timer id)` once the timer is in a worker's heap.
	timer: Option<(u64, usize)>,
	_not_send: PhantomData<*const ()>,
}

impl Default for Deadline {
	fn default() -> Self {
		Self::new(None)
	}
}

impl Deadline {
	/// A deadline at `at`, or disarmed.
	pub fn new(at: Option<Instant>) -> Self {
		Self {
			at,
			timer: None,
			_not_send: PhantomData,
		}
	}

	/// When it elapses, if armed.
	pub fn at(&self) -> Option<Instant> {
		self.at
	}

	/// Re-arms (or disarms) in place. The same instant again is free: whatever the timer's state,
	/// [`poll_elapsed`](Self::poll_elapsed) re-arms it when it is next polled.
	pub fn set(&mut self, at: Option<Instant>) {
		if at == self.at {
			return;
		}
		self.at = at;
		if let Some((serial, id)) = self.timer {
			with_core(|core| {
				if core.serial() == serial {
					core.timers.borrow_mut().reset(id, at);
				}
			});
		}
	}

	/// Ready once the loop's time reaches the deadline; otherwise arms the timer to wake
	/// `waiter`.
	pub fn poll_elapsed(&mut self, waiter: &Waiter) -> Poll<()> {
		let Some(at) = self.at else {
			return Poll::Pending;
		};
		let armed = with_core(|core| {
			if core.now() >= at {
				return true;
			}
			let mut timers = core.timers.borrow_mut();
			match self.timer {
				Some((serial, id)) if serial == core.serial() => {
					timers.set_waker(id, &waiter.waker());
					if !timers.is_queued(id) {
						timers.reset(id, Some(at));
					}
				}
				_ => self.timer = Some((core.serial(), timers.insert(at, waiter.waker()))),
			}
			false
		})
		.expect("kio timers need a kio worker");
		if armed { Poll::Ready(()) } else { Poll::Pending }
	}

	/// Waits until the deadline elapses.
	pub async fn elapsed(&mut self) {
		crate::wait(|waiter| self.poll_elapsed(waiter)).await;
	}
}

impl Drop for Deadline {
	fn drop(&mut self) {
		if let Some((serial, id)) = self.timer {
			with_core(|core| {
				if core.serial() == serial {
					core.timers.borrow_mut().remove(id);
				}
			});
		}
	}
}

/// A future that completes at a deadline.
pub struct Sleep {
	deadline: Deadline,
	park: Park,
}

impl Sleep {
	/// The deadline, to re-arm it.
	pub fn deadline(&mut self) -> &mut Deadline {
		&mut self.deadline
	}
}

impl Future for Sleep {
	type Output = ();

	fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
		let this = self.get_mut();
		let deadline = &mut this.deadline;
		this.park.poll(cx, |waiter| deadline.poll_elapsed(waiter))
	}
}

/// Completes `duration` after the loop turn's time.
pub fn sleep(duration: Duration) -> Sleep {
	sleep_until(now() + duration)
}

/// Completes at `at`.
pub fn sleep_until(at: Instant) -> Sleep {
	Sleep {
		deadline: Deadline::new(Some(at)),
		park: Park::new(),
	}
}

#[cfg(test)]
mod tests {
	use std::sync::{Arc, Mutex};
	use std::task::Wake;

	use super::*;

	/// A waker that logs its number when woken, so a test sees which timers fired, in what order.
	struct Logged(usize, Arc<Mutex<Vec<usize>>>);

	impl Wake for Logged {
		fn wake(self: Arc<Self>) {
			self.1.lock().unwrap().push(self.0);
		}
	}

	struct Log(Arc<Mutex<Vec<usize>>>);

	impl Log {
		fn new() -> Self {
			Self(Arc::default())
		}

		fn waker(&self, n: usize) -> Waker {
			Waker::from(Arc::new(Logged(n, self.0.clone())))
		}

		/// Expires `timers` at `now`, wakes what fired and returns the numbers, in firing order.
		fn expire(&self, timers: &mut Timers, now: Instant) -> Vec<usize> {
			let mut fired = Vec::new();
			timers.expire(now, &mut fired);
			fired.into_iter().for_each(Waker::wake);
			std::mem::take(&mut *self.0.lock().unwrap())
		}
	}

	#[test]
	fn fires_in_deadline_then_arming_order_and_moves_in_place() {
		let base = Instant::now();
		let mut timers = Timers::default();
		let log = Log::new();
		let at = |ms: u64| base + Duration::from_millis(ms);
		let ids: Vec<usize> = [50, 10, 30, 10, 70, 20, 60, 40]
			.iter()
			.enumerate()
			.map(|(n, &ms)| timers.insert(at(ms), log.waker(n)))
			.collect();
		timers.reset(ids[4], Some(at(5))); // 70 -> 5
		timers.reset(ids[6], None); // 60 disarmed
		timers.remove(ids[7]); // 40 gone
		assert_eq!(timers.len(), 6);
		let mut order = Vec::new();
		while let Some(next) = timers.next_deadline() {
			let fired = log.expire(&mut timers, next);
			assert!(!fired.is_empty(), "next_deadline is exact: something fires at it");
			order.extend(fired.into_iter().map(|n| (next.duration_since(base).as_millis(), n)));
		}
		assert_eq!(order, vec![(5, 4), (10, 1), (10, 3), (20, 5), (30, 2), (50, 0)]);
		assert!(timers.is_empty());
	}

	#[test]
	fn one_expire_fires_a_backlog_in_deadline_order_within_and_across_ticks() {
		let base = Instant::now();
		let mut timers = Timers::default();
		let log = Log::new();
		let at = |us: u64| base + Duration::from_micros(us);
		// Within one millisecond, armed out of order, with ties; then later ticks and levels.
		for (n, us) in [900, 100, 500, 100, 70_000, 3_500, 900, 1_000].into_iter().enumerate() {
			timers.insert(at(us), log.waker(n));
		}
		assert_eq!(timers.next_deadline(), Some(at(100)));
		// Not before the deadline, not even within its tick.
		assert_eq!(log.expire(&mut timers, at(99)), Vec::<usize>::new());
		assert_eq!(log.expire(&mut timers, at(500)), vec![1, 3, 2]);
		assert_eq!(timers.next_deadline(), Some(at(900)));
		assert_eq!(log.expire(&mut timers, at(100_000)), vec![0, 6, 7, 5, 4]);
		assert!(timers.is_empty());
		assert_eq!(timers.next_deadline(), None);
	}

	#[test]
	fn far_future_timers_fire_exactly_and_re_arm_across_levels() {
		let base = Instant::now();
		let mut timers = Timers::default();
		let log = Log::new();
		let hour = Duration::from_secs(3600);
		let day = 24 * hour;
		let deadlines = [
			base + hour,
			base + day + Duration::from_nanos(1),
			base + 30 * day,
			base + 3 * 365 * day, // beyond the wheel's span
			base + 9 * 365 * day,
			base + Duration::from_millis(64 * 64 * 64 + 1),
		];
		let ids: Vec<usize> = deadlines
			.iter()
			.enumerate()
			.map(|(n, &at)| timers.insert(at, log.waker(n)))
			.collect();
		// Later across levels, earlier across levels, and back.
		timers.reset(ids[0], Some(base + 2 * day));
		timers.reset(ids[0], Some(base + Duration::from_micros(5_500)));
		timers.reset(ids[2], Some(base + 400 * day));
		let expected = [
			(0, base + Duration::from_micros(5_500)),
			(5, deadlines[5]),
			(1, deadlines[1]),
			(2, base + 400 * day),
			(3, deadlines[3]),
			(4, deadlines[4]),
		];
		// As a paused clock does: jump to the next deadline, fire what is due there.
		for (n, at) in expected {
			assert_eq!(timers.next_deadline(), Some(at), "timer {n}");
			let just_before = at - Duration::from_nanos(1);
			assert_eq!(
				log.expire(&mut timers, just_before),
				Vec::<usize>::new(),
				"timer {n} fired early"
			);
			assert_eq!(timers.next_deadline(), Some(at), "timer {n} after cascading");
			assert_eq!(log.expire(&mut timers, at), vec![n]);
		}
		assert!(timers.is_empty());
		// Re-armed after firing, earlier than the clock: due at once.
		let late = timers.insert(base, log.waker(9));
		assert!(timers.is_queued(late));
		assert_eq!(log.expire(&mut timers, base + 1000 * day), vec![9]);
		assert!(!timers.is_queued(late));
	}

	/// Random inserts, re-arms, disarms, removals and clock steps (sub-millisecond to days, and
	/// jumps straight to the next deadline) against a sorted reference: the same timers fire at
	/// every `expire`, in the same order, and `next_deadline` is the exact minimum throughout.
	#[test]
	fn random_operations_match_a_sorted_reference() {
		let base = Instant::now();
		let mut timers = Timers::default();
		let log = Log::new();
		// (deadline, arming sequence, timer number) of every armed timer.
		let mut reference: Vec<(Instant, u64, usize)> = Vec::new();
		// The timer id of each timer number, if it exists.
		let mut ids: Vec<Option<usize>> = vec![None; 300];
		let mut seq = 0u64;
		let mut now = base;
		let mut state = 0x2545_f491_4f6c_dd1du64;
		let mut rand = move || {
			state ^= state << 13;
			state ^= state >> 7;
			state ^= state << 17;
			state
		};
		let mut fired_total = 0;
		for step in 0..60_000 {
			let n = (rand() % ids.len() as u64) as usize;
			let delay = match rand() % 8 {
				0 => Duration::from_nanos(rand() % 3_000_000),
				1..=3 => Duration::from_micros(rand() % 300_000),
				4 => Duration::from_millis(rand() % 100) * 1000,
				5 => Duration::from_secs(rand() % 400_000),
				6 => Duration::from_millis(rand() % 5),
				_ => Duration::from_millis(rand() % 10_000),
			};
			// Sometimes in the past: due at the next expire.
			let at = if rand() % 16 == 0 {
				now - delay.min(now - base)
			} else {
				now + delay
			};
			match (rand() % 6, ids[n]) {
				(0 | 1, None) => {
					ids[n] = Some(timers.insert(at, log.waker(n)));
					seq += 1;
					reference.push((at, seq, n));
				}
				(0..=2, Some(id)) => {
					// As `Deadline` does: a fired timer gave its waker away.
					timers.set_waker(id, &log.waker(n));
					timers.reset(id, Some(at));
					seq += 1;
					reference.retain(|&(_, _, other)| other != n);
					reference.push((at, seq, n));
				}
				(3, Some(id)) => {
					timers.reset(id, None);
					assert!(!timers.is_queued(id));
					reference.retain(|&(_, _, other)| other != n);
				}
				(4, Some(id)) => {
					timers.remove(id);
					ids[n] = None;
					reference.retain(|&(_, _, other)| other != n);
				}
				_ => {}
			}
			let expected = reference.iter().map(|&(at, _, _)| at).min();
			assert_eq!(timers.next_deadline(), expected, "step {step}");
			assert_eq!(timers.len(), reference.len());
			if rand() % 4 == 0 {
				now = match (rand() % 8, expected) {
					(0..=2, Some(next)) => now.max(next),
					(3, _) => now + Duration::from_secs(rand() % 100_000),
					_ => now + Duration::from_micros(rand() % 20_000),
				};
				reference.sort_unstable_by_key(|&(at, seq, _)| (at, seq));
				let due = reference.partition_point(|&(at, _, _)| at <= now);
				let want: Vec<usize> = reference.drain(..due).map(|(_, _, n)| n).collect();
				let got = log.expire(&mut timers, now);
				assert_eq!(got, want, "step {step}");
				fired_total += got.len();
				for &n in &got {
					assert!(!timers.is_queued(ids[n].unwrap()));
				}
				assert_eq!(timers.len(), reference.len());
			}
		}
		assert!(fired_total > 5_000, "the test must fire timers ({fired_total})");
	}
}
