//! The executor: workers, their run loop, spawning and `block_on`.
//!
//! # Threading
//!
//! A [`Runtime`] has N workers. Worker 0 is the thread that built the runtime (the runtime is
//! `!Send`, and [`Runtime::block_on`] drives worker 0); workers 1..N are threads of their own.
//! Each worker owns one io_uring, one task slab, one run queue and one timer wheel, and is pinned
//! to one CPU when pinning is on. Tasks are `!Send` and never leave their worker; work reaches
//! another worker only through `Send` primitives ([`crate::sync`]) and [`spawn_on`].
//!
//! # One loop turn
//!
//! 1. Drain the inbox (wakes and spawns from other threads).
//! 2. Run ready tasks: every task queued when the turn began gets its poll (up to the
//!    submission queue's size), and at least [`Builder::budget`] polls run if tasks are ready.
//!    A task woken during the turn goes behind the ones already queued, so a task that keeps
//!    waking itself cannot starve timers or I/O (see [`DEFAULT_BUDGET`]).
//! 3. Read the clock (once per turn) and fire due timers.
//! 4. Enter the ring once: submit what is staged, reap completions, and, if nothing is runnable,
//!    park in `io_uring_enter` with the next timer deadline as the timeout. Another thread's
//!    wake unparks the worker through the ring's eventfd read. After a park the clock is read
//!    again: the tasks the completions woke run at the time they were woken, not at the time the
//!    worker went to sleep (QUIC stamps sent packets and ACK arrivals with it; a stale time
//!    made the relay's probe timers fire early: docs/kio.md §3).
//!
//! # Task states
//!
//! `IDLE -> QUEUED` on a wake; `QUEUED -> RUNNING` when polled; a wake while `RUNNING` sets
//! `NOTIFIED`, and the task goes back to the tail of the queue after its poll (invariant 4:
//! a wake that lands during a poll causes another poll). A finished task frees its slot and
//! moves the slot's key on, which kills every waker and list entry of the old task.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use slab::Slab;

use crate::sys;
use crate::task::raw::{Run, TaskCell};
use crate::task::{JoinHandle, RemoteJoinHandle};
use crate::time::{Clock, Timers};
use crate::uring::{Ring, RingStats, Woken};
use crate::waker::{self, MAIN_SLOT, Msg, WorkerShared};
use crate::{Error, Waiter};

const IDLE: u8 = 0;
const QUEUED: u8 = 1;
const RUNNING: u8 = 2;
const NOTIFIED: u8 = 3;

/// Polls a loop turn may run before timers and I/O get their turn, when fewer tasks than this
/// were queued as it began.
///
/// Tokio and compio use 61; 64 keeps a self-waking task to at most 64 polls between two looks
/// at the clock and the completion queue.
///
/// A turn that begins with more tasks queued polls each of them first (the sweep), capped at
/// the submission queue's size so what they stage fits in it without spilling. Entering the
/// ring in the middle of a sweep would not run anything sooner: the queue is FIFO, so a
/// completion reaped then waits behind every task already queued, and the enter is only a
/// syscall. With a flat 64, 100 TCP echo connections entered the ring 0.062 times per round
/// trip against monoio's 0.020, and spent 1.04 of monoio's CPU (`tcp-echo-16kx100`,
/// bench/results/peers.md at 53f4382); docs/kio.md §3 has the figures after.
pub const DEFAULT_BUDGET: usize = 64;
const DEFAULT_RING_ENTRIES: u32 = 256;

/// Configures a [`Runtime`].
#[derive(Clone, Debug)]
pub struct Builder {
	workers: usize,
	pin: bool,
	paused_clock: bool,
	budget: usize,
	ring_entries: u32,
	denied: Vec<&'static str>,
}

impl Default for Builder {
	fn default() -> Self {
		Self::new()
	}
}

impl Builder {
	/// One worker per available CPU, pinned, on the real clock.
	pub fn new() -> Self {
		let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
		Self {
			workers,
			pin: true,
			paused_clock: false,
			budget: DEFAULT_BUDGET,
			ring_entries: DEFAULT_RING_ENTRIES,
			denied: Vec::new(),
		}
	}

	/// A single worker on the calling thread, not pinned: no threads are started.
	pub fn single() -> Self {
		Self {
			workers: 1,
			pin: false,
			..Self::new()
		}
	}

	/// The number of workers (at least one; worker 0 is the calling thread).
	pub fn workers(mut self, workers: usize) -> Self {
		self.workers = workers.max(1);
		self
	}

	/// Whether to pin each worker to its own CPU (worker 0's thread is restored when the runtime
	/// drops).
	pub fn pin(mut self, pin: bool) -> Self {
		self.pin = pin;
		self
	}

	/// Starts every worker's clock paused: time moves only through [`crate::time::advance`], or
	/// jumps to the next timer when a worker has nothing else to do. For deterministic tests.
	pub fn paused_clock(mut self, paused: bool) -> Self {
		self.paused_clock = paused;
		self
	}

	/// The polls a loop turn may run before timers and I/O when few tasks are queued (see
	/// [`DEFAULT_BUDGET`]).
	pub fn budget(mut self, budget: usize) -> Self {
		self.budget = budget.max(1);
		self
	}

	/// Submission queue entries per ring.
	pub fn ring_entries(mut self, entries: u32) -> Self {
		self.ring_entries = entries.max(8);
		self
	}

	/// Treats a ring feature (one of the names in [`Error::Unsupported`]) as missing, to test
	/// the refusal path on a kernel that has it.
	#[doc(hidden)]
	pub fn deny_feature(mut self, feature: &'static str) -> Self {
		self.denied.push(feature);
		self
	}

	/// Starts the workers. Fails if the kernel lacks a ring feature kio needs.
	pub fn build(self) -> Result<Runtime, Error> {
		Runtime::start(self)
	}
}

/// Per-worker counters. Ring counters make "syscalls per operation" a printable number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
	/// Loop turns.
	pub turns: u64,
	/// Task polls (the `block_on` future included).
	pub polls: u64,
	/// Turns that parked in `io_uring_enter`.
	pub parks: u64,
	/// The ring's counters.
	pub ring: RingStats,
}

struct RuntimeShared {
	/// Registry ids of the workers, by index.
	workers: OnceLock<Vec<u32>>,
}

struct Slot {
	task: Rc<dyn Run>,
	state: Cell<u8>,
}

/// A worker's own state. Lives in a thread-local while the worker runs.
pub(crate) struct Core {
	id: u32,
	index: usize,
	serial: u64,
	shared: &'static WorkerShared,
	runtime: Arc<RuntimeShared>,
	tasks: RefCell<Slab<Slot>>,
	queue: RefCell<VecDeque<u32>>,
	main_waiter: Waiter,
	main_woken: Cell<bool>,
	pub(crate) timers: RefCell<Timers>,
	clock: Clock,
	now: Cell<Instant>,
	ring: RefCell<Ring>,
	budget: usize,
	/// The longest sweep of a turn: the submission queue's size.
	sweep_cap: usize,
	closed: Cell<bool>,
	stopping: Cell<bool>,
	released: Cell<bool>,
	turns: Cell<u64>,
	polls: Cell<u64>,
	parks: Cell<u64>,
	fired: RefCell<Vec<Waker>>,
	/// Wakes the ring's completions owe, run after its borrow is released.
	io_woken: RefCell<Woken>,
	inbox: RefCell<Vec<Msg>>,
}

thread_local! {
	static CORE: RefCell<Option<Rc<Core>>> = const { RefCell::new(None) };
}

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// Runs `f` with this thread's worker, if it is one.
pub(crate) fn with_core<R>(f: impl FnOnce(&Rc<Core>) -> R) -> Option<R> {
	CORE.try_with(|core| core.borrow().as_ref().map(f)).ok().flatten()
}

fn expect_core<R>(what: &str, f: impl FnOnce(&Rc<Core>) -> R) -> R {
	with_core(f).unwrap_or_else(|| panic!("{what} called outside a kio worker"))
}

/// Installs a core in the thread-local for the guard's lifetime.
struct Enter;

impl Enter {
	fn new(core: &Rc<Core>) -> Self {
		Self::try_new(core).expect("kio: the thread-local worker slot is gone (thread exiting)")
	}

	/// `None` while the thread's locals are being destroyed (a runtime kept in a thread-local
	/// and dropped with it): shutdown then runs without a current worker.
	fn try_new(core: &Rc<Core>) -> Option<Self> {
		CORE.try_with(|slot| {
			let mut slot = slot.borrow_mut();
			assert!(
				slot.is_none(),
				"a kio worker is already running on this thread (nested block_on?)"
			);
			*slot = Some(core.clone());
		})
		.ok()
		.map(|()| Self)
	}
}

impl Drop for Enter {
	fn drop(&mut self) {
		let core = CORE.try_with(|slot| slot.borrow_mut().take()).ok().flatten();
		drop(core);
	}
}

pub(crate) fn wake_local_entry(worker: u32, slot: u32, key: u64) -> bool {
	with_core(|core| {
		if core.id != worker {
			return false;
		}
		if core.shared.key(slot) == key {
			core.schedule(slot);
		}
		true
	})
	.unwrap_or(false)
}

pub(crate) fn wake_local_task(worker: u32, slot: u32, tgen: u32) -> bool {
	with_core(|core| {
		if core.id != worker {
			return false;
		}
		if waker::tgen_of(core.shared.key(slot)) == tgen {
			core.schedule(slot);
		}
		true
	})
	.unwrap_or(false)
}

/// Schedules a slot of the current worker (abort).
pub(crate) fn schedule_current(slot: u32) {
	with_core(|core| core.schedule(slot));
}

impl Core {
	fn new(index: usize, builder: &Builder, runtime: Arc<RuntimeShared>) -> Result<Rc<Self>, Error> {
		let ring = Ring::new(builder.ring_entries, &builder.denied)?;
		let (id, shared) = waker::acquire_worker(ring.wake_fd()).ok_or(Error::TooManyWorkers)?;
		let main_key = shared.ensure_slot(MAIN_SLOT);
		let clock = Clock::new(builder.paused_clock);
		let now = clock.now();
		Ok(Rc::new(Self {
			id,
			index,
			serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
			shared,
			runtime,
			tasks: RefCell::new(Slab::new()),
			queue: RefCell::new(VecDeque::new()),
			main_waiter: Waiter::for_task(id, MAIN_SLOT, main_key),
			main_woken: Cell::new(false),
			timers: RefCell::new(Timers::default()),
			clock,
			now: Cell::new(now),
			sweep_cap: ring.sq_entries(),
			ring: RefCell::new(ring),
			budget: builder.budget,
			closed: Cell::new(false),
			stopping: Cell::new(false),
			released: Cell::new(false),
			turns: Cell::new(0),
			polls: Cell::new(0),
			parks: Cell::new(0),
			fired: RefCell::new(Vec::new()),
			io_woken: RefCell::new(Woken::default()),
			inbox: RefCell::new(Vec::new()),
		}))
	}

	pub(crate) fn serial(&self) -> u64 {
		self.serial
	}

	/// The worker's ring, for I/O operations (`crate::uring::with_ring`). Never borrowed across
	/// user code: the turn releases it before running the wakes its completions collected.
	pub(crate) fn ring(&self) -> &RefCell<Ring> {
		&self.ring
	}

	pub(crate) fn now(&self) -> Instant {
		self.now.get()
	}

	pub(crate) fn clock(&self) -> &Clock {
		&self.clock
	}

	pub(crate) fn refresh_now(&self) {
		self.now.set(self.clock.now());
	}

	fn schedule(&self, slot: u32) {
		if slot == MAIN_SLOT {
			self.main_woken.set(true);
			return;
		}
		let tasks = self.tasks.borrow();
		let Some(task) = tasks.get(slot as usize) else {
			return;
		};
		match task.state.get() {
			IDLE => {
				task.state.set(QUEUED);
				self.queue.borrow_mut().push_back(slot);
			}
			RUNNING => task.state.set(NOTIFIED),
			_ => {}
		}
	}

	#[inline]
	fn spawn<F: Future + 'static>(&self, future: F) -> JoinHandle<F::Output> {
		let mut tasks = self.tasks.borrow_mut();
		let entry = tasks.vacant_entry();
		let slot = entry.key() as u32;
		if self.closed.get() || slot >= MAIN_SLOT {
			drop(tasks);
			assert!(self.closed.get(), "kio: more than {MAIN_SLOT} tasks on one worker");
			let waiter = Waiter::for_task(self.id, MAIN_SLOT, u64::MAX);
			return JoinHandle::new(Rc::new(TaskCell::cancelled(future, waiter)));
		}
		let key = self.shared.ensure_slot(slot);
		let task = Rc::new(TaskCell::new(future, slot, Waiter::for_task(self.id, slot, key)));
		entry.insert(Slot {
			task: task.clone(),
			state: Cell::new(QUEUED),
		});
		drop(tasks);
		self.queue.borrow_mut().push_back(slot);
		JoinHandle::new(task)
	}

	fn run_task(&self, slot: u32) {
		let task = {
			let tasks = self.tasks.borrow();
			let Some(entry) = tasks.get(slot as usize) else {
				return;
			};
			if entry.state.get() != QUEUED {
				return;
			}
			entry.state.set(RUNNING);
			entry.task.clone()
		};
		// Retire placement (invariant 3): only here, before the poll starts.
		task.waiter().prepare();
		let tgen = waker::tgen_of(self.shared.key(slot));
		let waker = waker::task_waker(self.id, slot, tgen);
		let polling = waker::polling(&waker, task.waiter());
		let poll = task.run(&mut Context::from_waker(&waker));
		drop(polling);
		drop(task);
		self.polls.set(self.polls.get() + 1);
		match poll {
			Poll::Ready(()) => self.free(slot),
			Poll::Pending => {
				let tasks = self.tasks.borrow();
				let Some(entry) = tasks.get(slot as usize) else {
					return;
				};
				if entry.state.get() == NOTIFIED {
					entry.state.set(QUEUED);
					self.queue.borrow_mut().push_back(slot);
				} else {
					entry.state.set(IDLE);
				}
			}
		}
	}

	fn free(&self, slot: u32) {
		let removed = self.tasks.borrow_mut().try_remove(slot as usize);
		let key = self.shared.key(slot);
		self.shared.set_key(slot, waker::next_task_key(key));
		// Dropped outside the slab's borrow: a task's destructors may spawn or wake.
		drop(removed);
	}

	/// Polls the `block_on` future if it was woken.
	fn poll_main<F: Future>(&self, future: std::pin::Pin<&mut F>) -> Option<F::Output> {
		if !self.main_woken.replace(false) {
			return None;
		}
		self.main_waiter.prepare();
		let waker = waker::task_waker(self.id, MAIN_SLOT, waker::tgen_of(self.shared.key(MAIN_SLOT)));
		let polling = waker::polling(&waker, &self.main_waiter);
		let poll = future.poll(&mut Context::from_waker(&waker));
		drop(polling);
		self.polls.set(self.polls.get() + 1);
		match poll {
			Poll::Ready(output) => Some(output),
			Poll::Pending => None,
		}
	}

	fn drain_inbox(&self) {
		let mut msgs = std::mem::take(&mut *self.inbox.borrow_mut());
		self.shared.drain(&mut msgs);
		for msg in msgs.drain(..) {
			match msg {
				Msg::WakeEntry { slot, key } => {
					if self.shared.key(slot) == key {
						self.schedule(slot);
					}
				}
				Msg::WakeTask { slot, tgen } => {
					if waker::tgen_of(self.shared.key(slot)) == tgen {
						self.schedule(slot);
					}
				}
				Msg::Run(run) => run(),
				Msg::Stop => self.stopping.set(true),
			}
		}
		*self.inbox.borrow_mut() = msgs;
	}

	fn fire_timers(&self) {
		let mut fired = std::mem::take(&mut *self.fired.borrow_mut());
		self.timers.borrow_mut().expire(self.now.get(), &mut fired);
		for waker in fired.drain(..) {
			waker.wake();
		}
		*self.fired.borrow_mut() = fired;
	}

	fn idle(&self) -> bool {
		self.queue.borrow().is_empty() && !self.main_woken.get() && !self.stopping.get()
	}

	/// One loop turn (see the module docs).
	fn turn(&self) -> io::Result<()> {
		self.turns.set(self.turns.get() + 1);
		self.drain_inbox();
		let sweep = self.queue.borrow().len().min(self.sweep_cap);
		for _ in 0..self.budget.max(sweep) {
			let next = self.queue.borrow_mut().pop_front();
			match next {
				Some(slot) => self.run_task(slot),
				None => break,
			}
		}
		self.refresh_now();
		self.fire_timers();
		let next_timer = self.timers.borrow().next_deadline();
		if self.idle()
			&& let Some(next) = next_timer
			&& self.clock.is_paused()
		{
			// A paused clock jumps to the next timer instead of sleeping until it.
			self.clock.advance_to(next);
			self.refresh_now();
			self.fire_timers();
		}
		// Entries waiting in the ring's spill queue must reach the kernel first: no parking.
		let wait = self.idle() && !self.ring.borrow().has_spill() && self.shared.try_park();
		let timeout = self
			.timers
			.borrow()
			.next_deadline()
			.map(|at| at.saturating_duration_since(self.now.get()));
		let mut woken = std::mem::take(&mut *self.io_woken.borrow_mut());
		let result = self.ring.borrow_mut().enter(wait, timeout, &mut woken);
		// Completions only collected their wakes; run them now that the ring is not borrowed.
		woken.wake();
		*self.io_woken.borrow_mut() = woken;
		if wait {
			self.shared.unparked();
			self.parks.set(self.parks.get() + 1);
			self.refresh_now();
		}
		self.publish_stats();
		result.map(drop)
	}

	pub(crate) fn stats(&self) -> Stats {
		Stats {
			turns: self.turns.get(),
			polls: self.polls.get(),
			parks: self.parks.get(),
			ring: self.ring.borrow().stats,
		}
	}

	fn publish_stats(&self) {
		let stats = self.stats();
		let shared = &self.shared.stats;
		shared.turns.store(stats.turns, Ordering::Relaxed);
		shared.polls.store(stats.polls, Ordering::Relaxed);
		shared.parks.store(stats.parks, Ordering::Relaxed);
		shared.enters.store(stats.ring.enters, Ordering::Relaxed);
		shared.submissions.store(stats.ring.submissions, Ordering::Relaxed);
		shared.completions.store(stats.ring.completions, Ordering::Relaxed);
	}

	/// Drops every task and timer, then closes the inbox. The ring is torn down when the core
	/// drops.
	fn shutdown(&self) {
		self.closed.set(true);
		loop {
			let slots: Vec<usize> = self.tasks.borrow().iter().map(|(slot, _)| slot).collect();
			if slots.is_empty() {
				break;
			}
			for slot in slots {
				let removed = self.tasks.borrow_mut().try_remove(slot);
				let key = self.shared.key(slot as u32);
				self.shared.set_key(slot as u32, waker::next_task_key(key));
				// Cancelling drops the future, whose destructors may wake or (refused) spawn.
				if let Some(removed) = removed {
					removed.task.cancel();
				}
			}
		}
		self.queue.borrow_mut().clear();
		let timers = std::mem::take(&mut *self.timers.borrow_mut());
		drop(timers);
		self.release();
	}

	fn release(&self) {
		if self.released.replace(true) {
			return;
		}
		let main_key = self.shared.key(MAIN_SLOT);
		self.shared.set_key(MAIN_SLOT, waker::next_task_key(main_key));
		let leftover = waker::release_worker(self.id, self.shared);
		drop(leftover);
	}
}

impl Drop for Core {
	fn drop(&mut self) {
		self.release();
	}
}

/// A set of workers; see the [module docs](self). `!Send`: worker 0 is the thread that built it.
pub struct Runtime {
	core: Rc<Core>,
	runtime: Arc<RuntimeShared>,
	threads: Vec<std::thread::JoinHandle<()>>,
	restore_affinity: Option<Vec<usize>>,
}

impl Runtime {
	/// A runtime with default settings: one pinned worker per available CPU.
	pub fn new() -> Result<Self, Error> {
		Builder::new().build()
	}

	/// Configure a runtime.
	pub fn builder() -> Builder {
		Builder::new()
	}

	fn start(builder: Builder) -> Result<Self, Error> {
		let cpus = if builder.pin {
			sys::allowed_cpus().map_err(Error::Io)?
		} else {
			Vec::new()
		};
		let runtime = Arc::new(RuntimeShared {
			workers: OnceLock::new(),
		});
		let mut restore_affinity = None;
		if let Some(&cpu) = cpus.first() {
			restore_affinity = Some(cpus.clone());
			sys::set_affinity(&[cpu]).map_err(Error::Io)?;
		}
		let core = match Core::new(0, &builder, runtime.clone()) {
			Ok(core) => core,
			Err(e) => {
				if let Some(cpus) = &restore_affinity {
					let _ = sys::set_affinity(cpus);
				}
				return Err(e);
			}
		};
		let mut this = Self {
			core,
			runtime: runtime.clone(),
			threads: Vec::new(),
			restore_affinity,
		};
		let mut ids = vec![this.core.id];
		for index in 1..builder.workers {
			let (ready_tx, ready_rx) = std::sync::mpsc::channel();
			let builder = builder.clone();
			let runtime = runtime.clone();
			let cpu = (!cpus.is_empty()).then(|| cpus[index % cpus.len()]);
			let thread = std::thread::Builder::new()
				.name(format!("kio-worker-{index}"))
				.spawn(move || worker_main(index, cpu, &builder, runtime, ready_tx))
				.map_err(Error::Io)?;
			this.threads.push(thread);
			match ready_rx.recv() {
				Ok(Ok(id)) => ids.push(id),
				Ok(Err(e)) => return Err(e),
				Err(_) => return Err(Error::Io(io::Error::other("kio worker thread died while starting"))),
			}
		}
		let _ = runtime.workers.set(ids);
		Ok(this)
	}

	/// Runs `future` to completion on worker 0 (this thread), running every task of worker 0
	/// meanwhile. Panics if called from inside a worker.
	pub fn block_on<F: Future>(&self, future: F) -> F::Output {
		let _enter = Enter::new(&self.core);
		let core = &self.core;
		let mut future = pin!(future);
		core.main_woken.set(true);
		loop {
			if let Some(output) = core.poll_main(future.as_mut()) {
				return output;
			}
			if let Err(e) = core.turn() {
				panic!("kio: io_uring_enter failed: {e}");
			}
		}
	}

	/// Spawns a task on worker 0; it runs while [`Runtime::block_on`] runs.
	pub fn spawn<F: Future + 'static>(&self, future: F) -> JoinHandle<F::Output> {
		self.core.spawn(future)
	}

	/// Spawns, on worker `index`, the future that `make` builds there.
	pub fn spawn_on<M, F>(&self, index: usize, make: M) -> RemoteJoinHandle<F::Output>
	where
		M: FnOnce() -> F + Send + 'static,
		F: Future + 'static,
		F::Output: Send + 'static,
	{
		spawn_on_ids(self.runtime.workers.get().map_or(&[][..], Vec::as_slice), index, make)
	}

	/// The number of workers.
	pub fn workers(&self) -> usize {
		self.threads.len() + 1
	}

	/// A `Send` view of worker `index`'s published state, for other threads and tests.
	pub fn monitor(&self, index: usize) -> Option<Monitor> {
		let id = *self.runtime.workers.get()?.get(index)?;
		Some(Monitor {
			shared: waker::shared(id)?,
		})
	}

	/// Worker `index`'s counters, as published at the end of its last loop turn.
	pub fn stats(&self, index: usize) -> Stats {
		self.monitor(index).map(|monitor| monitor.stats()).unwrap_or_default()
	}
}

/// A `Send` view of one worker: whether it is parked, and its counters as published at the end
/// of its last loop turn.
#[derive(Clone, Copy)]
pub struct Monitor {
	shared: &'static WorkerShared,
}

impl Monitor {
	/// Whether the worker is parked in `io_uring_enter` (or about to be).
	pub fn is_parked(&self) -> bool {
		self.shared.is_parked()
	}

	/// The worker's counters.
	pub fn stats(&self) -> Stats {
		let s = &self.shared.stats;
		Stats {
			turns: s.turns.load(Ordering::Relaxed),
			polls: s.polls.load(Ordering::Relaxed),
			parks: s.parks.load(Ordering::Relaxed),
			ring: RingStats {
				enters: s.enters.load(Ordering::Relaxed),
				submissions: s.submissions.load(Ordering::Relaxed),
				completions: s.completions.load(Ordering::Relaxed),
			},
		}
	}
}

impl std::fmt::Debug for Monitor {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("Monitor").field("parked", &self.is_parked()).finish()
	}
}

impl Drop for Runtime {
	fn drop(&mut self) {
		if let Some(ids) = self.runtime.workers.get() {
			for &id in &ids[1..] {
				if let Some(shared) = waker::shared(id) {
					let _ = shared.send(Msg::Stop);
				}
			}
		}
		for thread in self.threads.drain(..) {
			let _ = thread.join();
		}
		{
			let _enter = Enter::try_new(&self.core);
			self.core.shutdown();
		}
		if let Some(cpus) = &self.restore_affinity {
			let _ = sys::set_affinity(cpus);
		}
	}
}

fn worker_main(
	index: usize,
	cpu: Option<usize>,
	builder: &Builder,
	runtime: Arc<RuntimeShared>,
	ready: std::sync::mpsc::Sender<Result<u32, Error>>,
) {
	if let Some(cpu) = cpu
		&& let Err(e) = sys::set_affinity(&[cpu])
	{
		let _ = ready.send(Err(Error::Io(e)));
		return;
	}
	let core = match Core::new(index, builder, runtime) {
		Ok(core) => core,
		Err(e) => {
			let _ = ready.send(Err(e));
			return;
		}
	};
	let _ = ready.send(Ok(core.id));
	let _enter = Enter::new(&core);
	while !core.stopping.get() {
		if let Err(e) = core.turn() {
			panic!("kio: io_uring_enter failed on worker {index}: {e}");
		}
	}
	core.shutdown();
}

/// Spawns a task on the current worker. Panics outside a kio worker.
///
/// The future may be `!Send`: it never leaves this worker.
pub fn spawn<F: Future + 'static>(future: F) -> JoinHandle<F::Output> {
	// The core is fetched first and the future passed straight down: moved through the closures
	// of `expect_core`, a future was copied four times before reaching its task (a MoQ relay
	// then spawned a task per group per subscriber; ~450 instructions of memcpy each, callgrind).
	let core = with_core(Rc::clone).unwrap_or_else(|| panic!("kio::spawn called outside a kio worker"));
	core.spawn(future)
}

/// Spawns a task on the current worker, or gives `None` (dropping `future`) outside one: for
/// destructors that hand work to a task when they can (a socket lingering to say goodbye).
pub fn try_spawn<F: Future + 'static>(future: F) -> Option<JoinHandle<F::Output>> {
	with_core(|core| core.spawn(future))
}

/// Spawns, on worker `index` of the current runtime, the future that `make` builds there.
pub fn spawn_on<M, F>(index: usize, make: M) -> RemoteJoinHandle<F::Output>
where
	M: FnOnce() -> F + Send + 'static,
	F: Future + 'static,
	F::Output: Send + 'static,
{
	let runtime = expect_core("kio::spawn_on", |core| core.runtime.clone());
	spawn_on_ids(runtime.workers.get().map_or(&[][..], Vec::as_slice), index, make)
}

fn spawn_on_ids<M, F>(ids: &[u32], index: usize, make: M) -> RemoteJoinHandle<F::Output>
where
	M: FnOnce() -> F + Send + 'static,
	F: Future + 'static,
	F::Output: Send + 'static,
{
	let output = crate::sync::Queue::bounded(1);
	let handle = RemoteJoinHandle::new(output.clone());
	let sender = CloseOnDrop(output);
	let run = move || {
		let inner = spawn(make());
		let outer = spawn(async move {
			let result = inner.await;
			let _ = sender.0.try_push(result);
		});
		drop(outer);
	};
	// A stopped or unknown worker drops `run`, and with it the queue: the handle sees Cancelled.
	if let Some(shared) = ids.get(index).and_then(|&id| waker::shared(id)) {
		let _ = shared.send(Msg::Run(Box::new(run)));
	}
	handle
}

/// Closes a remote task's output queue when the task (or its never-run spawn) is dropped, so the
/// handle sees `Cancelled` instead of waiting forever.
struct CloseOnDrop<T>(crate::sync::Queue<T>);

impl<T> Drop for CloseOnDrop<T> {
	fn drop(&mut self) {
		self.0.close();
	}
}

/// This worker's index in its runtime. Panics outside a kio worker.
pub fn worker_index() -> usize {
	expect_core("kio::worker_index", |core| core.index)
}

/// The number of workers in the current runtime. Panics outside a kio worker.
pub fn worker_count() -> usize {
	expect_core("kio::worker_count", |core| {
		core.runtime.workers.get().map_or(1, Vec::len)
	})
}

/// The current worker's counters. Panics outside a kio worker.
pub fn stats() -> Stats {
	expect_core("kio::stats", |core| core.stats())
}
