//! Waiters, waiter lists and records: how a task parks on state it does not own.
//!
//! # The mechanism
//!
//! A [`WaiterList`] lives inside the state it guards (usually behind that state's lock). A poll
//! function that finds the state not ready registers the caller's [`Waiter`] on the list **under the
//! same lock as the observation**, then returns `Pending`. A writer that changes the state
//! **drains** the list with [`WaiterList::take`] while it still holds the lock and wakes every
//! drained entry after releasing it ([`Wakes`]). There is no wake-one: a drain wakes every entry,
//! so a waiter that went away can never swallow a wake meant for another.
//!
//! An entry is a small copyable identity: a task slot of a kio worker plus the waiter's
//! **key**, or (for futures polled by another executor) a shared cell holding a `std` waker plus
//! its key. The key changes when the waiter *retires* and when a task slot is reused, so every
//! entry made under an older key is *dead*: it wakes nothing and the list reclaims it in place
//! (a list sweeps its dead entries before it would grow, so register-and-drop loops never grow
//! it).
//!
//! # Records
//!
//! A waiter remembers up to `R` lists it sits on (list id plus the list's epoch at registration),
//! so re-registering on a list it already sits on costs one scan of at most `R` records and no
//! append. Each list's id comes from a global counter and is never reused; its epoch moves on at
//! every drain. A record claims "present" only while its epoch equals the list's: entries leave a
//! list only by a drain (which bumps the epoch) or by the dead-entry sweep (which cannot remove an
//! entry under the waiter's current key), and records are cleared whenever the key changes.
//!
//! When a poll registers on a list it has no record for and the table is full, the entry is still
//! appended (so this poll's coverage holds) and the waiter is marked **overflowed**. Whoever polls
//! next (the executor, or [`crate::wait`] for foreign executors) retires the waiter *before* the
//! poll starts: the key moves on, every old entry dies, the records are cleared, and the poll walks
//! again from scratch. A waiter is therefore never invalidated in the middle of a poll, and
//! correctness does not depend on `R`; `R` only decides how often a busy waiter re-walks.
//!
//! # Invariants (each has a test named after it)
//!
//! 1. *Coverage*: when a poll returns `Pending`, every condition it saw as not ready has a live
//!    entry for the waiter's current key.
//! 2. *Record soundness*: a record claims presence only while the entry is in the list.
//! 3. *Retire placement*: a waiter is retired only before a poll, never in the middle of one.
//! 4. *Woken while running*: a wake that lands during a poll causes another poll (executor).
//! 5. *Wake outside locks*: [`Wakes`] runs no waker while the list's lock is held.
//! 6. *Bounded lists*: dead entries are reclaimed; register-and-drop loops never grow a list.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering as StdOrdering};
use std::task::Waker;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, Mutex};
use crate::waker;

/// The default number of lists a waiter remembers.
///
/// Eight covers the common parks (a value list, a closed list, a timer and a few group lists)
/// without a re-walk; a poll that parks on more lists re-walks once per wake, which the model
/// checker proves is still correct.
pub const RECORDS: usize = 8;

/// A task's identity for wake-ups, with a table of the lists it is registered on.
///
/// Poll functions take `&Waiter` and register it on the lists they depend on. Inside a kio task
/// the waiter is the task's own (it lives in the task, so registering costs no allocation and no
/// reference count). [`crate::wait`] supplies it; code that drives futures on another executor
/// can build one from a `std` [`Waker`] with [`Waiter::new`].
pub struct Waiter<const R: usize = RECORDS> {
	target: Target,
	/// The current key; entries made under another key are dead.
	key: Cell<u64>,
	records: [Cell<Record>; R],
	len: Cell<usize>,
	overflowed: Cell<bool>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Record {
	list: u64,
	epoch: u64,
}

/// Where a waiter's wakes go.
enum Target {
	/// A kio task: its worker's registry index and its slot. The key word lives in the worker's
	/// registry so any thread can tell whether an entry is still live.
	Task { worker: u32, slot: u32 },
	/// Anything else: a shared cell with a `std` waker.
	Foreign(Arc<Foreign>),
}

/// The shared half of a foreign waiter.
pub(crate) struct Foreign {
	key: AtomicU64,
	waker: Mutex<Waker>,
}

/// One registration in a [`WaiterList`].
pub(crate) enum Entry {
	Task { worker: u32, slot: u32, key: u64 },
	Foreign { target: Arc<Foreign>, key: u64 },
}

impl Entry {
	/// Whether the waiter that made this entry still has the same key.
	pub(crate) fn is_live(&self) -> bool {
		match self {
			Self::Task { worker, slot, key } => waker::key(*worker, *slot) == *key,
			Self::Foreign { target, key } => target.key.load(Ordering::Acquire) == *key,
		}
	}

	fn wake(&self) {
		match self {
			Self::Task { worker, slot, key } => waker::wake_entry(*worker, *slot, *key),
			Self::Foreign { target, key } => {
				if target.key.load(Ordering::Acquire) == *key {
					// Clone out so the waker runs without the cell's lock: a waker may poll inline
					// and re-enter this waiter.
					let waker = target.waker.lock().unwrap().clone();
					waker.wake();
				}
			}
		}
	}
}

impl<const R: usize> Waiter<R> {
	/// A waiter that wakes `waker`, for futures driven by another executor.
	///
	/// Dropping it retires it: every entry it made dies and is reclaimed by its list.
	pub fn new(waker: Waker) -> Self {
		let foreign = Arc::new(Foreign {
			key: AtomicU64::new(0),
			waker: Mutex::new(waker),
		});
		Self::with_target(Target::Foreign(foreign), 0)
	}

	pub(crate) fn for_task(worker: u32, slot: u32, key: u64) -> Self {
		Self::with_target(Target::Task { worker, slot }, key)
	}

	fn with_target(target: Target, key: u64) -> Self {
		Self {
			target,
			key: Cell::new(key),
			records: std::array::from_fn(|_| Cell::new(Record::default())),
			len: Cell::new(0),
			overflowed: Cell::new(false),
		}
	}

	/// Whether a poll registered on more lists than this waiter records, so the next poll must
	/// start with [`Waiter::retire`].
	pub fn is_overflowed(&self) -> bool {
		self.overflowed.get()
	}

	/// The number of lists currently recorded.
	pub fn records(&self) -> usize {
		self.len.get()
	}

	/// Moves the key on: every entry made so far dies, and the records are cleared.
	///
	/// Call this only between polls (invariant 3): a poll that has already registered would
	/// lose its coverage.
	pub fn retire(&self) {
		let key = waker::retired_key(self.key.get());
		self.key.set(key);
		match &self.target {
			Target::Task { worker, slot } => waker::set_key(*worker, *slot, key),
			Target::Foreign(foreign) => foreign.key.store(key, Ordering::Release),
		}
		self.len.set(0);
		self.overflowed.set(false);
	}

	/// Retires the waiter if the previous poll overflowed its records. Returns whether it did.
	pub fn prepare(&self) -> bool {
		let overflowed = self.is_overflowed();
		if overflowed {
			self.retire();
		}
		overflowed
	}

	/// Whether wakes of this waiter reach `waker` (foreign waiters) or `waker`'s task.
	pub(crate) fn will_wake(&self, other: &Waker) -> bool {
		match &self.target {
			Target::Task { .. } => false,
			Target::Foreign(foreign) => foreign.waker.lock().unwrap().will_wake(other),
		}
	}

	/// Points a foreign waiter at a new waker. The entries stay live: they now wake `waker`.
	pub(crate) fn set_waker(&self, waker: &Waker) {
		if let Target::Foreign(foreign) = &self.target {
			foreign.waker.lock().unwrap().clone_from(waker);
		}
	}

	/// A `std` waker that wakes this waiter's task, for wake sources that keep a waker (timers,
	/// foreign futures). Cloning it never allocates for kio tasks.
	pub fn waker(&self) -> Waker {
		match &self.target {
			Target::Task { worker, slot } => waker::task_waker(*worker, *slot, waker::tgen_of(self.key.get())),
			Target::Foreign(foreign) => foreign.waker.lock().unwrap().clone(),
		}
	}

	fn entry(&self) -> Entry {
		let key = self.key.get();
		match &self.target {
			Target::Task { worker, slot } => Entry::Task {
				worker: *worker,
				slot: *slot,
				key,
			},
			Target::Foreign(foreign) => Entry::Foreign {
				target: foreign.clone(),
				key,
			},
		}
	}

	fn find(&self, list: u64) -> Option<&Cell<Record>> {
		self.records[..self.len.get()]
			.iter()
			.find(|record| record.get().list == list)
	}
}

impl<const R: usize> Drop for Waiter<R> {
	fn drop(&mut self) {
		// A task's key word belongs to its slot, which the executor moves on when it frees the
		// slot; touching it here could kill the entries of the slot's next task.
		if let Target::Foreign(foreign) = &self.target {
			foreign.key.store(waker::retired_key(self.key.get()), Ordering::Release);
		}
	}
}

impl<const R: usize> fmt::Debug for Waiter<R> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		let target = match &self.target {
			Target::Task { worker, slot } => format!("task {worker}:{slot}"),
			Target::Foreign(_) => "foreign".to_owned(),
		};
		f.debug_struct("Waiter")
			.field("target", &target)
			.field("key", &self.key.get())
			.field("records", &self.len.get())
			.field("overflowed", &self.overflowed.get())
			.finish()
	}
}

/// List ids start at 1; 0 means "not yet assigned", so `WaiterList::new` is free and `const`.
static NEXT_LIST_ID: StdAtomicU64 = StdAtomicU64::new(1);

/// The waiters parked on one condition of some state. See the [module docs](self).
pub struct WaiterList {
	id: u64,
	epoch: u64,
	entries: Vec<Entry>,
	/// Test hook for the model checker's known-bad variant: drains without moving the epoch on,
	/// so records claim presence after their entries are gone.
	#[cfg(test)]
	pub(crate) unsound_keep_epoch: bool,
}

impl Default for WaiterList {
	fn default() -> Self {
		Self::new()
	}
}

impl WaiterList {
	/// An empty list. Costs nothing until the first registration.
	pub const fn new() -> Self {
		Self {
			id: 0,
			epoch: 0,
			entries: Vec::new(),
			#[cfg(test)]
			unsound_keep_epoch: false,
		}
	}

	/// Registers `waiter`, unless its records prove it is already here.
	///
	/// Call it under the same lock as the observation that found the state not ready.
	pub fn register<const R: usize>(&mut self, waiter: &Waiter<R>) {
		if self.id == 0 {
			// Relaxed: the id only has to be unique, and the list is behind its owner's lock.
			self.id = NEXT_LIST_ID.fetch_add(1, StdOrdering::Relaxed);
		}
		let current = Record {
			list: self.id,
			epoch: self.epoch,
		};
		match waiter.find(self.id) {
			Some(record) if record.get().epoch == self.epoch => return,
			Some(record) => record.set(current),
			None if waiter.len.get() < R => {
				let len = waiter.len.get();
				waiter.records[len].set(current);
				waiter.len.set(len + 1);
			}
			None => waiter.overflowed.set(true),
		}
		self.push(waiter.entry());
	}

	fn push(&mut self, entry: Entry) {
		if self.entries.len() == self.entries.capacity() && !self.entries.is_empty() {
			// Sweep before growing: amortised O(1), and the list stays within twice its live
			// entries however many waiters register and go away.
			self.entries.retain(Entry::is_live);
		}
		self.entries.push(entry);
	}

	/// Drains every entry under the caller's lock. Wake them with [`Wakes::wake`] (or by
	/// dropping the result) **after** releasing that lock.
	pub fn take(&mut self) -> Wakes {
		#[cfg(test)]
		let keep_epoch = self.unsound_keep_epoch;
		#[cfg(not(test))]
		let keep_epoch = false;
		if !keep_epoch {
			self.epoch += 1;
		}
		if self.entries.is_empty() {
			return Wakes { entries: Vec::new() };
		}
		let mut entries = spare_vec();
		std::mem::swap(&mut entries, &mut self.entries);
		Wakes { entries }
	}

	/// Drains and wakes now. Only for lists that are not behind a lock.
	pub fn wake(&mut self) {
		self.take().wake();
	}

	/// The number of entries, live or dead.
	pub fn len(&self) -> usize {
		self.entries.len()
	}

	/// Whether the list holds no entries.
	pub fn is_empty(&self) -> bool {
		self.entries.is_empty()
	}

	/// The number of live entries.
	pub fn live(&self) -> usize {
		self.entries.iter().filter(|entry| entry.is_live()).count()
	}
}

impl fmt::Debug for WaiterList {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("WaiterList")
			.field("id", &self.id)
			.field("epoch", &self.epoch)
			.field("entries", &self.entries.len())
			.finish()
	}
}

/// Entries drained from a [`WaiterList`], to be woken once its lock is released.
///
/// Dropping it wakes them too, so a wake is never lost; drop it after the guard.
#[must_use = "wake after releasing the lock"]
pub struct Wakes {
	entries: Vec<Entry>,
}

impl Wakes {
	/// No wakes.
	pub const fn none() -> Self {
		Self { entries: Vec::new() }
	}

	/// Adds another list's drained entries.
	pub fn append(&mut self, mut other: Self) {
		if self.entries.is_empty() {
			std::mem::swap(&mut self.entries, &mut other.entries);
		} else {
			self.entries.append(&mut other.entries);
		}
	}

	/// The number of entries drained.
	pub fn len(&self) -> usize {
		self.entries.len()
	}

	/// Whether nothing was drained.
	pub fn is_empty(&self) -> bool {
		self.entries.is_empty()
	}

	/// Wakes every drained entry that is still live.
	pub fn wake(self) {
		drop(self);
	}
}

impl Drop for Wakes {
	fn drop(&mut self) {
		if self.entries.is_empty() {
			return;
		}
		for entry in &self.entries {
			entry.wake();
		}
		self.entries.clear();
		recycle_vec(std::mem::take(&mut self.entries));
	}
}

/// Drained entry vectors are recycled per thread, so a drain-and-wake cycle allocates nothing
/// in steady state: the list swaps its full vector for an empty one with capacity.
#[cfg(not(loom))]
const SPARE_VECS: usize = 16;

#[cfg(not(loom))]
thread_local! {
	static SPARES: std::cell::RefCell<Vec<Vec<Entry>>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(not(loom))]
fn spare_vec() -> Vec<Entry> {
	SPARES
		.try_with(|spares| spares.borrow_mut().pop())
		.ok()
		.flatten()
		.unwrap_or_default()
}

#[cfg(not(loom))]
fn recycle_vec(entries: Vec<Entry>) {
	let _ = SPARES.try_with(|spares| {
		let mut spares = spares.borrow_mut();
		if spares.len() < SPARE_VECS {
			spares.push(entries);
		}
	});
}

// Loom runs its threads on one OS thread: a thread-local cache would be shared between them.
#[cfg(loom)]
fn spare_vec() -> Vec<Entry> {
	Vec::new()
}

#[cfg(loom)]
fn recycle_vec(_entries: Vec<Entry>) {}

#[cfg(test)]
#[path = "waiter_tests.rs"]
mod tests;
