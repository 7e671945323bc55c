//! Time: the loop's clock, user-space timers, [`Sleep`] and the re-armable [`Deadline`].
//!
//! Timers live in user space, in a per-worker **indexed 4-ary min-heap**: the earliest deadline
//! is the timeout of the worker's one `io_uring_enter` per turn, so a timer costs no SQE. Each
//! timer's heap position is kept in its slab entry, so re-arming a [`Deadline`] moves its entry
//! in place (O(log₄ n), no allocation) and cancelling removes it at once: the heap never holds
//! garbage. The heap was chosen over a hierarchical wheel by measurement; see
//! `kio/benches/results/README.md` (`timers` benchmark) for the numbers.
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

use slab::Slab;

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

const NOT_QUEUED: usize = usize::MAX;
const ARITY: usize = 4;

struct Timer {
	at: Instant,
	/// Ties break by arming order, so equal deadlines fire first-armed first.
	seq: u64,
	pos: usize,
	waker: Option<Waker>,
}

/// The per-worker timer heap (public only for kio's benchmarks).
#[derive(Default)]
pub struct Timers {
	heap: Vec<usize>,
	timers: Slab<Timer>,
	seq: u64,
}

impl Timers {
	/// Arms a new timer; returns its id.
	pub fn insert(&mut self, at: Instant, waker: Waker) -> usize {
		let id = self.timers.insert(Timer {
			at,
			seq: 0,
			pos: NOT_QUEUED,
			waker: Some(waker),
		});
		self.queue(id, at);
		id
	}

	/// Re-arms timer `id` for `at` (or disarms it with `None`), in place.
	pub fn reset(&mut self, id: usize, at: Option<Instant>) {
		if self.timers[id].pos != NOT_QUEUED {
			self.unqueue(id);
		}
		if let Some(at) = at {
			self.queue(id, at);
		}
	}

	/// Points timer `id` at `waker` (kept if it would wake the same task).
	pub fn set_waker(&mut self, id: usize, waker: &Waker) {
		match &mut self.timers[id].waker {
			Some(current) if current.will_wake(waker) => {}
			slot => *slot = Some(waker.clone()),
		}
	}

	/// Whether timer `id` is armed.
	pub fn is_queued(&self, id: usize) -> bool {
		self.timers[id].pos != NOT_QUEUED
	}

	/// Forgets timer `id`.
	pub fn remove(&mut self, id: usize) {
		if self.timers.contains(id) {
			if self.timers[id].pos != NOT_QUEUED {
				self.unqueue(id);
			}
			self.timers.remove(id);
		}
	}

	/// The earliest armed deadline.
	pub fn next_deadline(&self) -> Option<Instant> {
		self.heap.first().map(|&id| self.timers[id].at)
	}

	/// The number of armed timers.
	pub fn len(&self) -> usize {
		self.heap.len()
	}

	/// Pops every timer due at `now`, in deadline order, and collects its waker.
	pub fn expire(&mut self, now: Instant, fired: &mut Vec<Waker>) {
		while let Some(&id) = self.heap.first() {
			if self.timers[id].at > now {
				break;
			}
			self.unqueue(id);
			if let Some(waker) = self.timers[id].waker.take() {
				fired.push(waker);
			}
		}
	}

	fn queue(&mut self, id: usize, at: Instant) {
		self.seq += 1;
		let timer = &mut self.timers[id];
		timer.at = at;
		timer.seq = self.seq;
		timer.pos = self.heap.len();
		self.heap.push(id);
		self.sift_up(self.heap.len() - 1);
	}

	fn unqueue(&mut self, id: usize) {
		let pos = self.timers[id].pos;
		self.timers[id].pos = NOT_QUEUED;
		let last = self.heap.pop().expect("a queued timer is in the heap");
		if pos < self.heap.len() {
			self.heap[pos] = last;
			self.timers[last].pos = pos;
			self.sift_down(pos);
			self.sift_up(self.timers[last].pos);
		}
	}

	fn before(&self, a: usize, b: usize) -> bool {
		let (a, b) = (&self.timers[a], &self.timers[b]);
		(a.at, a.seq) < (b.at, b.seq)
	}

	fn place(&mut self, pos: usize, id: usize) {
		self.heap[pos] = id;
		self.timers[id].pos = pos;
	}

	fn sift_up(&mut self, mut pos: usize) {
		let id = self.heap[pos];
		while pos > 0 {
			let parent = (pos - 1) / ARITY;
			if !self.before(id, self.heap[parent]) {
				break;
			}
			self.place(pos, self.heap[parent]);
			pos = parent;
		}
		self.place(pos, id);
	}

	fn sift_down(&mut self, mut pos: usize) {
		let id = self.heap[pos];
		loop {
			let first = pos * ARITY + 1;
			if first >= self.heap.len() {
				break;
			}
			let last = (first + ARITY).min(self.heap.len());
			let mut best = first;
			for child in first + 1..last {
				if self.before(self.heap[child], self.heap[best]) {
					best = child;
				}
			}
			if !self.before(self.heap[best], id) {
				break;
			}
			self.place(pos, self.heap[best]);
			pos = best;
		}
		self.place(pos, id);
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

	/// Re-arms (or disarms) in place.
	pub fn set(&mut self, at: Option<Instant>) {
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
	use super::*;

	#[test]
	fn heap_pops_in_deadline_then_arming_order_and_moves_in_place() {
		let base = Instant::now();
		let mut timers = Timers::default();
		let at = |ms: u64| base + Duration::from_millis(ms);
		let ids: Vec<usize> = [50, 10, 30, 10, 70, 20, 60, 40]
			.iter()
			.map(|&ms| timers.insert(at(ms), Waker::noop().clone()))
			.collect();
		timers.reset(ids[4], Some(at(5))); // 70 -> 5
		timers.reset(ids[6], None); // 60 disarmed
		timers.remove(ids[7]); // 40 gone
		let mut order = Vec::new();
		while let Some(next) = timers.next_deadline() {
			let id = timers.heap[0];
			order.push((next.duration_since(base).as_millis(), id));
			timers.unqueue(id);
		}
		let ms: Vec<u128> = order.iter().map(|&(ms, _)| ms).collect();
		assert_eq!(ms, vec![5, 10, 10, 20, 30, 50]);
		assert_eq!(order[1].1, ids[1], "equal deadlines fire in arming order");
		assert_eq!(order[2].1, ids[3]);
	}

	#[test]
	fn random_operations_match_a_sorted_reference() {
		let base = Instant::now();
		let mut timers = Timers::default();
		let mut reference: Vec<(u64, usize)> = Vec::new();
		let mut live: Vec<usize> = Vec::new();
		let mut state = 0x2545_f491_4f6c_dd1du64;
		let mut rand = move || {
			state ^= state << 13;
			state ^= state >> 7;
			state ^= state << 17;
			state
		};
		for _ in 0..20_000 {
			match rand() % 4 {
				0 | 1 => {
					let ms = rand() % 1000;
					let id = timers.insert(base + Duration::from_millis(ms), Waker::noop().clone());
					live.push(id);
					reference.push((ms, id));
				}
				2 if !live.is_empty() => {
					let id = live[(rand() as usize) % live.len()];
					let ms = rand() % 1000;
					timers.reset(id, Some(base + Duration::from_millis(ms)));
					reference.retain(|&(_, other)| other != id);
					reference.push((ms, id));
				}
				_ if !live.is_empty() => {
					let index = (rand() as usize) % live.len();
					let id = live.swap_remove(index);
					timers.remove(id);
					reference.retain(|&(_, other)| other != id);
				}
				_ => {}
			}
			let expected = reference.iter().map(|&(ms, _)| ms).min();
			let got = timers
				.next_deadline()
				.map(|at| at.duration_since(base).as_millis() as u64);
			assert_eq!(got, expected);
			assert_eq!(timers.len(), reference.len());
		}
	}
}
