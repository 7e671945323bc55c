//! Packed wakers and the worker registry.
//!
//! A kio waker carries its whole identity in the data pointer: `worker:16 | slot:24 | tgen:24`.
//! Cloning and dropping it copy a word; `will_wake` works because the vtable is one `static`.
//! Waking it on its own worker schedules the task directly; on any other thread it posts a
//! message to the worker's inbox and unparks the worker only if it is parked.
//!
//! Each worker has a [`WorkerShared`] record in a process-wide registry. Records are allocated
//! once per worker index and reused by later runtimes, never freed, so a waker or a list entry
//! that outlives its runtime still points at valid memory and simply finds a key that moved on.
//! The record holds one key word per task slot (`tgen:32 | waiter generation:32`), readable by
//! any thread: a [`WaiterList`](crate::WaiterList) on any thread can tell a dead entry from a
//! live one without touching the owning worker.
//!
//! This module holds the only `unsafe` outside `uring/`: building a `Waker` from its vtable.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::{RawWaker, RawWakerVTable, Waker};

use crate::Waiter;
use crate::exec;
use crate::sys;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("kio packs wakers into a 64-bit data pointer");

/// How many workers may run at once in one process.
pub(crate) const MAX_WORKERS: usize = 1024;
const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNKS: usize = 1 << 12;
/// Task slots per worker; the last one is the `block_on` future's.
pub(crate) const MAX_SLOTS: u32 = (CHUNK * CHUNKS) as u32;
/// The slot of the future driven by `block_on`.
pub(crate) const MAIN_SLOT: u32 = MAX_SLOTS - 1;
const TGEN_MASK: u32 = (1 << 24) - 1;

/// A message for a worker from another thread.
pub(crate) enum Msg {
	/// A list entry's wake: valid only if the slot's key is still `key`.
	WakeEntry { slot: u32, key: u64 },
	/// A `std` waker's wake: valid while the slot holds the task generation `tgen`.
	WakeTask { slot: u32, tgen: u32 },
	/// Run a closure on the worker (spawning from another thread).
	Run(Box<dyn FnOnce() + Send>),
	/// Stop the worker's loop.
	Stop,
}

pub(crate) struct Inbox {
	alive: bool,
	eventfd: i32,
	pub(crate) msgs: Vec<Msg>,
}

/// Counters a worker publishes once per loop turn, readable from any thread.
#[derive(Default)]
pub(crate) struct SharedStats {
	pub(crate) turns: AtomicU64,
	pub(crate) polls: AtomicU64,
	pub(crate) parks: AtomicU64,
	pub(crate) enters: AtomicU64,
	pub(crate) submissions: AtomicU64,
	pub(crate) completions: AtomicU64,
}

impl SharedStats {
	fn reset(&self) {
		for counter in [
			&self.turns,
			&self.polls,
			&self.parks,
			&self.enters,
			&self.submissions,
			&self.completions,
		] {
			counter.store(0, Ordering::Relaxed);
		}
	}
}

/// The part of a worker that other threads may touch.
pub(crate) struct WorkerShared {
	keys: Box<[OnceLock<Box<[AtomicU64]>>]>,
	inbox: Mutex<Inbox>,
	/// Set when the inbox has messages; lets the loop skip the inbox lock when idle.
	pending: AtomicBool,
	/// Set while the worker is (about to be) parked in `io_uring_enter`.
	parked: AtomicBool,
	pub(crate) stats: SharedStats,
}

static WORKERS: [OnceLock<&'static WorkerShared>; MAX_WORKERS] = [const { OnceLock::new() }; MAX_WORKERS];
static FREE_WORKERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static NEXT_WORKER: AtomicUsize = AtomicUsize::new(0);

/// Takes a free worker index and marks its inbox alive with `eventfd` as its unpark signal.
pub(crate) fn acquire_worker(eventfd: i32) -> Option<(u32, &'static WorkerShared)> {
	let id = match FREE_WORKERS.lock().unwrap().pop() {
		Some(id) => id,
		None => {
			let id = NEXT_WORKER.fetch_add(1, Ordering::Relaxed);
			if id >= MAX_WORKERS {
				return None;
			}
			id as u32
		}
	};
	let shared = *WORKERS[id as usize].get_or_init(|| {
		Box::leak(Box::new(WorkerShared {
			keys: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
			inbox: Mutex::new(Inbox {
				alive: false,
				eventfd: -1,
				msgs: Vec::new(),
			}),
			pending: AtomicBool::new(false),
			parked: AtomicBool::new(false),
			stats: SharedStats::default(),
		}))
	});
	// The counters published are the new holder's: a reused record must not show the last
	// holder's until the new worker's first turn ends (a benchmark reading them across that
	// first park saw its counters go down).
	shared.stats.reset();
	let mut inbox = shared.inbox.lock().unwrap();
	inbox.alive = true;
	inbox.eventfd = eventfd;
	inbox.msgs.clear();
	drop(inbox);
	Some((id, shared))
}

/// Closes the worker's inbox (later messages are dropped) and returns its index to the pool.
/// Returns the messages that were still queued, to be dropped by the caller.
pub(crate) fn release_worker(id: u32, shared: &WorkerShared) -> Vec<Msg> {
	let mut inbox = shared.inbox.lock().unwrap();
	inbox.alive = false;
	inbox.eventfd = -1;
	let msgs = std::mem::take(&mut inbox.msgs);
	drop(inbox);
	shared.pending.store(false, Ordering::Relaxed);
	FREE_WORKERS.lock().unwrap().push(id);
	msgs
}

pub(crate) fn shared(worker: u32) -> Option<&'static WorkerShared> {
	WORKERS.get(worker as usize).and_then(|cell| cell.get().copied())
}

impl WorkerShared {
	fn key_word(&self, slot: u32) -> Option<&AtomicU64> {
		let chunk = self.keys.get((slot >> CHUNK_BITS) as usize)?.get()?;
		Some(&chunk[slot as usize & (CHUNK - 1)])
	}

	/// Makes sure `slot` has a key word, and returns its current key.
	pub(crate) fn ensure_slot(&self, slot: u32) -> u64 {
		let chunk =
			self.keys[(slot >> CHUNK_BITS) as usize].get_or_init(|| (0..CHUNK).map(|_| AtomicU64::new(0)).collect());
		chunk[slot as usize & (CHUNK - 1)].load(Ordering::Relaxed)
	}

	pub(crate) fn key(&self, slot: u32) -> u64 {
		self.key_word(slot)
			.map_or(u64::MAX, |word| word.load(Ordering::Acquire))
	}

	pub(crate) fn set_key(&self, slot: u32, key: u64) {
		if let Some(word) = self.key_word(slot) {
			word.store(key, Ordering::Release);
		}
	}

	/// Posts `msg`; returns it back if the worker has stopped.
	pub(crate) fn send(&self, msg: Msg) -> Result<(), Msg> {
		let mut inbox = self.inbox.lock().unwrap();
		if !inbox.alive {
			return Err(msg);
		}
		inbox.msgs.push(msg);
		self.pending.store(true, Ordering::SeqCst);
		// Under the inbox lock, so the eventfd cannot be closed (and its number reused) between
		// this check and the write: the worker marks the inbox dead under the same lock first.
		if self.parked.swap(false, Ordering::SeqCst) {
			sys::signal_eventfd(inbox.eventfd);
		}
		Ok(())
	}

	/// Moves queued messages into `out`.
	pub(crate) fn drain(&self, out: &mut Vec<Msg>) {
		if !self.pending.swap(false, Ordering::SeqCst) {
			return;
		}
		let mut inbox = self.inbox.lock().unwrap();
		std::mem::swap(out, &mut inbox.msgs);
	}

	/// Announces that the worker is about to park. Returns false (and does not park) if a
	/// message arrived; a sender that sees the flag set signals the eventfd.
	pub(crate) fn try_park(&self) -> bool {
		self.parked.store(true, Ordering::SeqCst);
		if self.pending.load(Ordering::SeqCst) {
			self.parked.store(false, Ordering::SeqCst);
			return false;
		}
		true
	}

	pub(crate) fn unparked(&self) {
		self.parked.store(false, Ordering::SeqCst);
	}

	pub(crate) fn is_parked(&self) -> bool {
		self.parked.load(Ordering::SeqCst)
	}
}

/// The key word of `slot` on `worker`, or `u64::MAX` (which no live key reaches) if none.
pub(crate) fn key(worker: u32, slot: u32) -> u64 {
	shared(worker).map_or(u64::MAX, |shared| shared.key(slot))
}

pub(crate) fn set_key(worker: u32, slot: u32, key: u64) {
	if let Some(shared) = shared(worker) {
		shared.set_key(slot, key);
	}
}

/// The next waiter generation within the same task generation.
pub(crate) fn retired_key(key: u64) -> u64 {
	(key & !0xFFFF_FFFF) | u64::from((key as u32).wrapping_add(1))
}

/// The first key of the slot's next task.
pub(crate) fn next_task_key(key: u64) -> u64 {
	((key >> 32).wrapping_add(1)) << 32
}

pub(crate) fn tgen_of(key: u64) -> u32 {
	(key >> 32) as u32 & TGEN_MASK
}

/// Wakes a list entry: on its own worker directly, elsewhere through the inbox.
pub(crate) fn wake_entry(worker: u32, slot: u32, key: u64) {
	if exec::wake_local_entry(worker, slot, key) {
		return;
	}
	if let Some(shared) = shared(worker) {
		let _ = shared.send(Msg::WakeEntry { slot, key });
	}
}

fn wake_task(worker: u32, slot: u32, tgen: u32) {
	if exec::wake_local_task(worker, slot, tgen) {
		return;
	}
	if let Some(shared) = shared(worker) {
		let _ = shared.send(Msg::WakeTask { slot, tgen });
	}
}

fn pack(worker: u32, slot: u32, tgen: u32) -> usize {
	((worker as usize) << 48) | ((slot as usize) << 24) | (tgen & TGEN_MASK) as usize
}

fn unpack(data: *const ()) -> (u32, u32, u32) {
	let word = data.addr();
	(
		(word >> 48) as u32,
		((word >> 24) as u32) & (MAX_SLOTS - 1),
		word as u32 & TGEN_MASK,
	)
}

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone_raw, wake_raw, wake_raw, drop_raw);

fn clone_raw(data: *const ()) -> RawWaker {
	RawWaker::new(data, &VTABLE)
}

fn wake_raw(data: *const ()) {
	let (worker, slot, tgen) = unpack(data);
	wake_task(worker, slot, tgen);
}

fn drop_raw(_: *const ()) {}

/// The waker of task `slot` (generation `tgen`) on `worker`.
pub(crate) fn task_waker(worker: u32, slot: u32, tgen: u32) -> Waker {
	let data = std::ptr::without_provenance(pack(worker, slot, tgen));
	// SAFETY: RawWaker contract: the vtable functions never dereference `data` (it is a packed
	// integer, not a pointer), they are safe to call from any thread (`wake_task` goes through
	// the registry's locks and atomics), and clone/drop own no resource.
	unsafe { Waker::new(data, &VTABLE) }
}

thread_local! {
	/// The task being polled on this thread: its packed waker data and its waiter.
	static POLLING: Cell<(usize, *const Waiter)> = const { Cell::new((0, std::ptr::null())) };
}

/// Marks a task as being polled until dropped (restoring what was marked before).
pub(crate) struct Polling {
	previous: (usize, *const Waiter),
}

/// Marks `waiter` as the waiter of the task polled with `waker`, for the guard's lifetime.
///
/// The caller keeps `waiter` alive and unmoved until the guard drops: the executor holds the
/// task's `Rc` (which owns the waiter) across the whole poll, and the `block_on` waiter lives in
/// the worker's core, which outlives the poll.
pub(crate) fn polling(waker: &Waker, waiter: &Waiter) -> Polling {
	let previous = POLLING.with(|polling| polling.replace((waker.data().addr(), waiter)));
	Polling { previous }
}

impl Drop for Polling {
	fn drop(&mut self) {
		POLLING.with(|polling| polling.set(self.previous));
	}
}

/// Runs `poll` with the waiter of the task being polled, if `waker` is that task's waker;
/// hands `poll` back otherwise (a foreign executor, or a combinator's own waker).
pub(crate) fn with_polling_waiter<R, F: FnOnce(&Waiter) -> R>(waker: &Waker, poll: F) -> Result<R, F> {
	let (data, waiter) = POLLING.with(Cell::get);
	if waiter.is_null() || waker.data().addr() != data || !is_task_waker(waker) {
		return Err(poll);
	}
	// `waiter` was stored by `polling` from a live `&Waiter` whose owner keeps it alive and
	// unmoved until the `Polling` guard drops (see `polling`); the guard is alive because the
	// pointer is non-null on this thread. Matching the waker's data proves `waker` belongs to
	// that task. `Waiter`'s interior mutability is `Cell`s used on this thread alone.
	// SAFETY: shared-reference validity: the pointee is alive, unmoved and only shared here.
	Ok(poll(unsafe { &*waiter }))
}

/// Whether `waker` is a kio task waker.
pub(crate) fn is_task_waker(waker: &Waker) -> bool {
	std::ptr::eq(waker.vtable(), &VTABLE)
}

/// If `waker` is a kio task waker, its `(worker, slot, tgen)`.
#[cfg(test)]
pub(crate) fn task_of(waker: &Waker) -> Option<(u32, u32, u32)> {
	std::ptr::eq(waker.vtable(), &VTABLE).then(|| unpack(waker.data()))
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn pack_round_trips_and_will_wake() {
		let a = task_waker(3, 12345, 77);
		assert_eq!(task_of(&a), Some((3, 12345, 77)));
		assert!(a.will_wake(&a.clone()));
		assert!(!a.will_wake(&task_waker(3, 12345, 78)));
		assert_eq!(task_of(&Waker::noop().clone()), None);
	}

	#[test]
	fn a_reused_worker_record_starts_with_zero_counters() {
		for _ in 0..2 {
			let (id, shared) = acquire_worker(-1).unwrap();
			assert_eq!(shared.stats.enters.load(Ordering::Relaxed), 0);
			assert_eq!(shared.stats.turns.load(Ordering::Relaxed), 0);
			shared.stats.enters.store(120_000, Ordering::Relaxed);
			shared.stats.turns.store(7, Ordering::Relaxed);
			drop(release_worker(id, shared));
		}
	}

	#[test]
	fn keys_move_on() {
		let key = (5u64 << 32) | 9;
		assert_eq!(retired_key(key), (5u64 << 32) | 10);
		assert_eq!(retired_key((5u64 << 32) | 0xFFFF_FFFF), 5u64 << 32);
		assert_eq!(next_task_key(key), 6u64 << 32);
		assert_eq!(tgen_of(next_task_key(key)), 6);
	}
}
