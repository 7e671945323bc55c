//! The exhaustive waiter model checker.
//!
//! It drives the **real** [`Waiter<R>`] and [`WaiterList`] (with `R`, the number of records, as a
//! const generic) and the real key words of a worker registry entry, through every interleaving of
//! a small world, and checks after every step that no wake was lost and no list grew without bound.
//!
//! # The world
//!
//! - `lists` waiter lists, each guarding one condition whose state is a **fire counter**.
//! - A few task **slots**. A slot holds one task at a time; when its task ends (completes or is
//!   dropped) the slot may be reused by the next task of its [`Plan`]. A slot's tasks reach the
//!   model either through the registry ([`Via::Slot`]: `Waiter::for_task`, wakes come back as
//!   `Msg::WakeEntry` / `Msg::WakeTask` in the worker's inbox, filtered by the slot's key exactly as
//!   the executor filters them) or through a `std` waker ([`Via::Foreign`]: `Waiter::new`).
//! - Each task follows a [`Script`]: its polls *walk* a list of lists (poll `n` walks
//!   `walks[n % walks.len()]`, so consecutive polls may register on different lists). At each
//!   list of the walk it observes the fire counter and then registers on the list (the
//!   observation and the registration are one atomic step, like "under the same lock"). A task's
//!   **condition** is "some list of my last walk fired since I last looked at it"; what it does
//!   when it sees a fire depends on its [`Kind`].
//!
//! # The operations
//!
//! The executor side (one thread):
//! - `Start(t)`: picks a queued task and calls `waiter.prepare()` (it retires the waiter if the
//!   previous poll overflowed its records), then the walk begins;
//! - `Step`: the running task walks its next segment of lists (see the reduction below);
//! - `End`: the poll returns; a task woken while it ran is queued again (invariant 4);
//! - `Drop(t)`: the task is dropped between polls; the slot's key moves on like `exec::free` does;
//! - `Spawn(s)`: the slot's next task starts, with a new waiter (slot reuse);
//! - `Retire(t)`: an explicit `waiter.retire()` of a queued task, before its poll (invariant 3
//!   allows nothing else; `Park::poll` does this when a new waker polls).
//!
//! The environment (other threads), allowed at any point, also in the middle of a walk:
//! - `Fire(l)`: bumps list `l`'s counter and drains it with `take()`; the wakes are delivered at
//!   once, or **held** (a foreign wake: delivered later by a separately scheduled `Deliver`, after
//!   which the executor may have retired or replaced the waiter it names);
//! - `Replace(l)`: closes list `l` (a fire), drops it, and puts a new list (a new id) in its place;
//! - `Deliver(i)`: delivers held wakes `i`.
//!
//! A delivered wake for a dead key is dropped, as the executor drops it.
//!
//! # The oracles
//!
//! 1. **Lost wake.** In every quiescent state (no task running or queued, no held wakes), no live
//!    task is parked while its condition holds, and no task that woke itself is parked. With
//!    `coverage` (on by default) the checker also looks one step ahead: every parked task must
//!    have a live entry in every list of its last walk (invariant 1, counted per list), since
//!    otherwise the next fire of that list would be lost.
//! 2. **Bounded lists.** For every list, (a) live entries ≤ live waiters: a waiter never has two
//!    live entries in one list (records make re-registration idempotent, and an overflowed waiter
//!    is retired before it registers again); and (b) `len ≤ 2·slots + 4`. Why (b) holds:
//!    `WaiterList::push` sweeps dead entries before it would grow its vector, so the vector grows
//!    from capacity `c` only when all `c` entries are live, hence only while `c ≤ slots` by (a):
//!    the capacity never exceeds `max(4, 2·slots)`, 4 being `Vec`'s first allocation for an
//!    element this size, and `len ≤ capacity`. Drained vectors are recycled through a
//!    thread-local pool, but libtest runs each test on a thread of its own, so the pool only ever
//!    holds vectors of this test's lists, which obey the same bound. Only a registration can
//!    lengthen a list or add a live entry, so (a) and (b) are checked on the lists each step
//!    registers on, and on every list in quiescent states.
//!
//! # The bound, and why it is enough
//!
//! The search is bounded by a **budget of environment events** per interleaving (fires, held
//! fires, replacements, drops, spawns, retires: see [`Budget`] and each scenario in [`suite`]),
//! not by a step count. Executor steps are enumerated without limit, because without new events
//! every path reaches quiescence in finitely many steps (a poll only consumes fires; the only
//! wakes come from events). The budgets are 3 events per interleaving, 2 for the heaviest worlds
//! (two tasks on 32 or `2R` lists, a task that wakes itself). A safety cap on the number of
//! operations (`depth`) would truncate a longer path, which is then **settled** (held wakes
//! delivered, queued tasks run, no new events) and checked, so every leaf is a quiescent state;
//! the exhaustive scenarios never reach it.
//!
//! Why that is enough: each known way to lose a wake needs at most three events in a world of
//! one or two tasks: a record that survives a drain (fire, re-poll, fire); a fire that lands in a
//! walk before or after that list's step; a held wake delivered after a retire or a slot reuse
//! (held fire, drop or retire, deliver); a list replaced while a record of its old id remains; an
//! overflow whose next poll does not retire. The record paths themselves (hit, stale epoch, new
//! record, overflow at the `R+1`-th list, a table full of records of lists from older walks) are
//! reached by the walks alone, which cost no budget: walks of `R-1`, `R`, `R+1` and `2R` lists,
//! and alternating walks over disjoint halves. Bugs that need many registrations on one list
//! (sweeps) are beyond any affordable exhaustive budget: seeded random walks with budgets of 40
//! events over worlds where every list may fire, and a 2000-round register-and-drop loop, cover
//! them.
//!
//! # Reductions (sound: they only skip interleavings equivalent to ones that are explored)
//!
//! - A fire of list `x` commutes with every walk step that does not touch `x`: it touches only
//!   `x`'s counter and entries, and its wakes only set "queued" and "notified" flags, which a step
//!   never reads. So a walk is cut into segments around the lists that may fire (each such list
//!   is a segment of its own, the lists between are walked in one step), and during a walk a fire
//!   of `x` is offered only at the walk's start (before `x`'s step) or right after `x`'s step.
//! - For the same reason held wakes are delivered during a walk only at its start.
//! - A held fire of an empty list holds nothing, so it is only offered when the list has entries.
//! - Sleep sets (Godefroid): events on different lists commute with each other, and a fire of an
//!   empty list commutes with the executor's `Start`, `End`, `Drop` and `Retire`; once one order
//!   of two commuting events is explored, the other is skipped (see `Model::independent`).
//!
//! The `2R`-list worlds are explored exhaustively with fires on representative lists (the first,
//! the `R`-th and the `R+1`-th of the walk, where records run out, and the last), then by the
//! random walks in which every list may fire.
//!
//! The search is stateless: the real types cannot be cloned, so each branch replays its prefix
//! from a fresh world; every replay moves the slots' keys on, so nothing of an earlier replay is
//! live. The counts printed per scenario are search-tree nodes ("states"), maximal interleavings,
//! and quiescent states checked.

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::Instant;

use crate::waiter::{Waiter, WaiterList, Wakes};
use crate::waker::{self, Msg, WorkerShared};

/// What a task does when its walk meets a list that fired since it last looked at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
	/// Consumes the event and walks on, registering on every list: a reader in a loop.
	Loop,
	/// Completes: the walk stops, the poll returns `Ready` and the slot is freed. Entries made
	/// earlier in that walk stay behind, dead.
	Once,
	/// Handles one event per poll: the walk stops, the task wakes itself through
	/// [`Waiter::waker`] and returns `Pending` (a `yield_now` after a unit of work).
	Yield,
}

/// How a slot's tasks are reached by wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
	/// A kio task slot: `Waiter::for_task`, wakes through the worker's inbox and key words.
	Slot,
	/// A future on another executor: `Waiter::new` with a `std` waker.
	Foreign,
}

#[derive(Clone, Debug)]
struct Script {
	kind: Kind,
	/// Poll `n` walks `walks[n % walks.len()]`.
	walks: Vec<Vec<usize>>,
}

/// A slot: how it is reached, and the scripts of its successive tasks (cycled).
#[derive(Clone, Debug)]
struct Plan {
	via: Via,
	tasks: Vec<Script>,
}

/// The most events of each kind one interleaving may contain.
#[derive(Clone, Copy, Debug, Default)]
struct Budget {
	/// All events together (held deliveries do not count: their fire did).
	events: usize,
	fires: usize,
	/// Fires whose wakes are held for a later `Deliver`.
	held: usize,
	replaces: usize,
	drops: usize,
	spawns: usize,
	retires: usize,
}

#[derive(Clone, Debug)]
struct Scenario {
	name: String,
	lists: usize,
	/// Which lists may fire (or be replaced).
	firable: Vec<bool>,
	plans: Vec<Plan>,
	budget: Budget,
	/// Safety cap on operations per interleaving; a path that reaches it is settled.
	depth: usize,
	/// Build every list with the known-bad `unsound_keep_epoch` hook.
	unsound: bool,
	/// Also check coverage in quiescent states (see [`Violation::Uncovered`]).
	coverage: bool,
}

impl Scenario {
	fn new(name: impl Into<String>, lists: usize, firable: &[usize], plans: Vec<Plan>, budget: Budget) -> Self {
		let mut mask = vec![false; lists];
		for &list in firable {
			mask[list] = true;
		}
		Self {
			name: name.into(),
			lists,
			firable: mask,
			plans,
			budget,
			depth: 200,
			unsound: false,
			coverage: true,
		}
	}

	fn unsound(mut self) -> Self {
		self.unsound = true;
		self.name.push_str(" (unsound)");
		self
	}

	fn firable(&self) -> impl Iterator<Item = usize> + '_ {
		(0..self.lists).filter(|&list| self.firable[list])
	}
}

/// One step of an interleaving (see the module docs). Ordered only so sleep sets can be sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
	/// The executor: `prepare()` the slot's queued task and begin its poll.
	Start(usize),
	/// The executor: the running task walks its next segment.
	Step,
	/// The executor: the running poll returns.
	End,
	/// The environment: bump the list's counter and drain it; deliver now or hold the wakes.
	Fire { list: usize, held: bool },
	/// The environment: fire the list, drop it and put a new one (a new id) in its place.
	Replace(usize),
	/// The environment: deliver the held wakes with this id.
	Deliver(usize),
	/// The executor: drop the slot's task between polls.
	Drop(usize),
	/// The executor: start the slot's next task.
	Spawn(usize),
	/// The executor: retire the slot's queued task before its poll.
	Retire(usize),
}

/// A task's scheduling state, as the executor keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sched {
	Idle,
	Queued,
	Running,
}

/// How a poll stopped walking early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
	Ready,
	Yield,
}

/// The poll in progress.
#[derive(Clone, Copy, Debug)]
struct Run {
	slot: usize,
	walk: usize,
	/// How many lists of the walk have been walked.
	pos: usize,
	/// A wake landed during this poll.
	notified: bool,
	exit: Option<Exit>,
	/// The list of the last step, if it may fire.
	last: Option<usize>,
}

struct Task<'s, const R: usize> {
	waiter: Waiter<R>,
	script: &'s Script,
	/// Unique per task, so a foreign wake can tell a slot's tasks apart.
	life: u64,
	polls: usize,
	/// The fire counter of each list when this task last looked at it.
	seen: Vec<u32>,
	/// The walk of the last poll, over which the condition is evaluated.
	parked_on: Option<usize>,
	/// The last poll woke itself (Yield).
	yielded: bool,
	sched: Sched,
}

/// Records the wakes of foreign waiters: `(slot, life)`.
struct Recorder {
	slot: usize,
	life: u64,
	log: Arc<Mutex<Vec<(usize, u64)>>>,
}

impl Wake for Recorder {
	fn wake(self: Arc<Self>) {
		self.wake_by_ref();
	}

	fn wake_by_ref(self: &Arc<Self>) {
		self.log.lock().unwrap().push((self.slot, self.life));
	}
}

/// A worker registry entry of our own: its inbox receives the wakes of `Via::Slot` tasks. Tests
/// run in parallel, and each holds its own entry, so no test sees another's wakes.
struct Registry {
	id: u32,
	shared: &'static WorkerShared,
}

impl Registry {
	fn acquire() -> Self {
		// No eventfd: the unpark signal ignores -1, and nobody parks on this entry.
		let (id, shared) = waker::acquire_worker(-1).expect("kio model: no free worker index");
		Self { id, shared }
	}
}

impl Drop for Registry {
	fn drop(&mut self) {
		drop(waker::release_worker(self.id, self.shared));
	}
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Violation {
	/// Oracle 1: a parked task whose condition holds in a quiescent state.
	LostWake { slot: usize, list: usize },
	/// Oracle 1: a task that woke itself is parked.
	LostSelfWake { slot: usize },
	/// Oracle 1 (coverage, optional): in a quiescent state a list has fewer live entries than
	/// tasks parked on it; the next fire of that list would be lost.
	Uncovered { list: usize, live: usize, parked: usize },
	/// Oracle 2a: a list holds more live entries than there are live waiters.
	DuplicateEntries { list: usize, live: usize, waiters: usize },
	/// Oracle 2b: a list is longer than the bound.
	ListTooLong { list: usize, len: usize, bound: usize },
}

#[derive(Debug)]
struct Failure {
	scenario: String,
	violation: Violation,
	trace: Vec<Op>,
	state: String,
}

impl fmt::Display for Failure {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		writeln!(f, "{}: {:?}", self.scenario, self.violation)?;
		writeln!(f, "interleaving ({} ops):", self.trace.len())?;
		for (i, op) in self.trace.iter().enumerate() {
			writeln!(f, "  {i:3}: {op:?}")?;
		}
		write!(f, "state:\n{}", self.state)
	}
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
	/// Distinct op sequences (nodes of the search tree), the root included.
	states: u64,
	/// Maximal interleavings.
	leaves: u64,
	/// Quiescent states checked against oracle 1.
	quiescent: u64,
	/// Paths cut by the safety cap.
	truncated: u64,
	/// Operations executed, replays included.
	ops: u64,
	longest_list: usize,
}

impl Stats {
	fn add(&mut self, other: Self) {
		self.states += other.states;
		self.leaves += other.leaves;
		self.quiescent += other.quiescent;
		self.truncated += other.truncated;
		self.ops += other.ops;
		self.longest_list = self.longest_list.max(other.longest_list);
	}
}

fn new_list(unsound: bool) -> WaiterList {
	let mut list = WaiterList::new();
	list.unsound_keep_epoch = unsound;
	list
}

/// One world: the real lists and waiters, and the model's side of everything else (the
/// conditions' counters, the executor's scheduling states, held wakes, the budget spent).
struct Model<'s, const R: usize> {
	sc: &'s Scenario,
	worker: u32,
	shared: &'static WorkerShared,
	lists: Vec<WaiterList>,
	fires: Vec<u32>,
	tasks: Vec<Option<Task<'s, R>>>,
	/// How many tasks each slot has had.
	spawned: Vec<usize>,
	next_life: u64,
	run: Option<Run>,
	/// Held wakes, by the id their `Deliver` names.
	held: Vec<(usize, Wakes)>,
	next_held: usize,
	used: Budget,
	msgs: Vec<Msg>,
	log: Arc<Mutex<Vec<(usize, u64)>>>,
	trace: Vec<Op>,
	/// The lists the last op registered on: only a registration can lengthen a list, or add a
	/// live entry, so oracle 2 looks at these (and at every list in quiescent states).
	touched: Vec<usize>,
}

impl<'s, const R: usize> Model<'s, R> {
	fn new(sc: &'s Scenario, registry: &Registry) -> Self {
		let shared = registry.shared;
		// Wakes sent when the previous replay's held wakes were dropped: stale, discard them.
		let mut msgs = Vec::new();
		shared.drain(&mut msgs);
		msgs.clear();
		let mut model = Self {
			sc,
			worker: registry.id,
			shared,
			lists: (0..sc.lists).map(|_| new_list(sc.unsound)).collect(),
			fires: vec![0; sc.lists],
			tasks: (0..sc.plans.len()).map(|_| None).collect(),
			spawned: vec![0; sc.plans.len()],
			next_life: 0,
			run: None,
			held: Vec::new(),
			next_held: 0,
			used: Budget::default(),
			msgs,
			log: Arc::default(),
			trace: Vec::new(),
			touched: Vec::new(),
		};
		for slot in 0..sc.plans.len() {
			if sc.plans[slot].via == Via::Slot {
				// A fresh task generation per replay: every entry of earlier replays is dead.
				let slot = slot as u32;
				let key = shared.ensure_slot(slot);
				shared.set_key(slot, waker::next_task_key(key));
			}
			model.spawn(slot);
		}
		model
	}

	fn spawn(&mut self, slot: usize) {
		let plan = &self.sc.plans[slot];
		let script = &plan.tasks[self.spawned[slot] % plan.tasks.len()];
		self.spawned[slot] += 1;
		self.next_life += 1;
		let life = self.next_life;
		let waiter = match plan.via {
			Via::Slot => Waiter::for_task(self.worker, slot as u32, self.shared.key(slot as u32)),
			Via::Foreign => Waiter::new(Waker::from(Arc::new(Recorder {
				slot,
				life,
				log: self.log.clone(),
			}))),
		};
		self.tasks[slot] = Some(Task {
			waiter,
			script,
			life,
			polls: 0,
			seen: self.fires.clone(),
			parked_on: None,
			yielded: false,
			sched: Sched::Queued,
		});
	}

	/// Ends the slot's task the way the executor frees a slot: the key moves on, then the task
	/// (and its waiter) is dropped. A foreign waiter retires itself when dropped.
	fn free(&mut self, slot: usize) {
		if self.sc.plans[slot].via == Via::Slot {
			let key = self.shared.key(slot as u32);
			self.shared.set_key(slot as u32, waker::next_task_key(key));
		}
		self.tasks[slot] = None;
	}

	fn schedule(&mut self, slot: usize) {
		let Some(task) = self.tasks.get_mut(slot).and_then(Option::as_mut) else {
			return;
		};
		match task.sched {
			Sched::Idle => task.sched = Sched::Queued,
			Sched::Running => self.run.as_mut().expect("running task without a run").notified = true,
			Sched::Queued => {}
		}
	}

	/// The executor's inbox drain (and the foreign executor's wake queue): wakes for a key that
	/// moved on are dropped.
	fn drain(&mut self) {
		let mut msgs = std::mem::take(&mut self.msgs);
		self.shared.drain(&mut msgs);
		for msg in msgs.drain(..) {
			let (slot, live) = match msg {
				Msg::WakeEntry { slot, key } => (slot, self.shared.key(slot) == key),
				Msg::WakeTask { slot, tgen } => (slot, waker::tgen_of(self.shared.key(slot)) == tgen),
				_ => continue,
			};
			let slot = slot as usize;
			if live && self.sc.plans.get(slot).is_some_and(|plan| plan.via == Via::Slot) {
				self.schedule(slot);
			}
		}
		self.msgs = msgs;
		let woken = std::mem::take(&mut *self.log.lock().unwrap());
		for (slot, life) in woken {
			if self.tasks[slot].as_ref().is_some_and(|task| task.life == life) {
				self.schedule(slot);
			}
		}
	}

	fn walk(&self, run: &Run) -> &'s [usize] {
		let script: &'s Script = self.tasks[run.slot].as_ref().expect("running task").script;
		&script.walks[run.walk]
	}

	fn queued(&self) -> impl Iterator<Item = usize> + '_ {
		(0..self.tasks.len()).filter(|&slot| self.tasks[slot].as_ref().is_some_and(|t| t.sched == Sched::Queued))
	}

	fn quiescent(&self) -> bool {
		self.run.is_none() && self.held.is_empty() && self.queued().next().is_none()
	}

	fn enabled(&self) -> Vec<Op> {
		let mut ops = Vec::new();
		if let Some(run) = &self.run {
			if run.exit.is_some() || run.pos == self.walk(run).len() {
				ops.push(Op::End);
			} else {
				ops.push(Op::Step);
			}
			if run.pos == 0 {
				ops.extend(self.held.iter().map(|&(id, _)| Op::Deliver(id)));
				for list in self.sc.firable() {
					self.fire_ops(list, &mut ops);
				}
			} else if let Some(list) = run.last {
				self.fire_ops(list, &mut ops);
			}
			return ops;
		}
		ops.extend(self.queued().map(Op::Start));
		ops.extend(self.held.iter().map(|&(id, _)| Op::Deliver(id)));
		for list in self.sc.firable() {
			self.fire_ops(list, &mut ops);
		}
		let (budget, used) = (&self.sc.budget, &self.used);
		if used.events < budget.events {
			if used.retires < budget.retires {
				ops.extend(self.queued().map(Op::Retire));
			}
			if used.drops < budget.drops {
				ops.extend(
					(0..self.tasks.len())
						.filter(|&slot| self.tasks[slot].is_some())
						.map(Op::Drop),
				);
			}
			if used.spawns < budget.spawns {
				ops.extend(
					(0..self.tasks.len())
						.filter(|&slot| self.tasks[slot].is_none())
						.map(Op::Spawn),
				);
			}
		}
		ops
	}

	fn fire_ops(&self, list: usize, ops: &mut Vec<Op>) {
		let (budget, used) = (&self.sc.budget, &self.used);
		if used.events >= budget.events {
			return;
		}
		if used.fires < budget.fires {
			ops.push(Op::Fire { list, held: false });
			if used.held < budget.held && !self.lists[list].is_empty() {
				ops.push(Op::Fire { list, held: true });
			}
		}
		if used.replaces < budget.replaces {
			ops.push(Op::Replace(list));
		}
	}

	fn apply(&mut self, op: Op) {
		self.trace.push(op);
		self.touched.clear();
		match op {
			Op::Start(slot) => {
				let task = self.tasks[slot].as_mut().expect("start of an empty slot");
				// Retire placement: only here, before the poll (like `exec::run_task`).
				task.waiter.prepare();
				task.sched = Sched::Running;
				task.yielded = false;
				let walk = task.polls % task.script.walks.len();
				task.polls += 1;
				self.run = Some(Run {
					slot,
					walk,
					pos: 0,
					notified: false,
					exit: None,
					last: None,
				});
			}
			Op::Step => self.step(),
			Op::End => {
				let run = self.run.take().expect("end without a run");
				if run.exit == Some(Exit::Ready) {
					self.free(run.slot);
				} else {
					let task = self.tasks[run.slot].as_mut().expect("running task");
					task.parked_on = Some(run.walk);
					task.sched = if run.notified { Sched::Queued } else { Sched::Idle };
				}
			}
			Op::Fire { list, held } => {
				self.used.events += 1;
				self.used.fires += 1;
				self.fires[list] += 1;
				let wakes = self.lists[list].take();
				if held {
					self.used.held += 1;
					self.held.push((self.next_held, wakes));
					self.next_held += 1;
				} else {
					drop(wakes);
					self.drain();
				}
			}
			Op::Replace(list) => {
				self.used.events += 1;
				self.used.replaces += 1;
				self.fires[list] += 1;
				let wakes = self.lists[list].take();
				// The old list (and its id) goes away; the next registrations meet a new id.
				self.lists[list] = new_list(self.sc.unsound);
				drop(wakes);
				self.drain();
			}
			Op::Deliver(id) => {
				let i = self
					.held
					.iter()
					.position(|&(held, _)| held == id)
					.expect("deliver of unknown wakes");
				drop(self.held.remove(i));
				self.drain();
			}
			Op::Drop(slot) => {
				self.used.events += 1;
				self.used.drops += 1;
				self.free(slot);
			}
			Op::Spawn(slot) => {
				self.used.events += 1;
				self.used.spawns += 1;
				self.spawn(slot);
			}
			Op::Retire(slot) => {
				self.used.events += 1;
				self.used.retires += 1;
				self.tasks[slot]
					.as_ref()
					.expect("retire of an empty slot")
					.waiter
					.retire();
			}
		}
	}

	/// Walks the next segment: one list that may fire, or the run of lists up to the next one.
	fn step(&mut self) {
		let mut run = self.run.expect("step without a run");
		let walk = self.walk(&run);
		let sc: &'s Scenario = self.sc;
		let firable = &sc.firable;
		let end = if firable[walk[run.pos]] {
			run.pos + 1
		} else {
			(run.pos..walk.len())
				.find(|&pos| firable[walk[pos]])
				.unwrap_or(walk.len())
		};
		let task = self.tasks[run.slot].as_mut().expect("running task");
		let mut self_wake = None;
		while run.pos < end {
			let list = walk[run.pos];
			run.pos += 1;
			// Observe and register in one step: "under the same lock as the observation".
			let fired = self.fires[list] > task.seen[list];
			task.seen[list] = self.fires[list];
			if fired {
				match task.script.kind {
					Kind::Loop => {}
					Kind::Once => {
						run.exit = Some(Exit::Ready);
						break;
					}
					Kind::Yield => {
						run.exit = Some(Exit::Yield);
						task.yielded = true;
						self_wake = Some(task.waiter.waker());
						break;
					}
				}
			}
			self.lists[list].register(&task.waiter);
			self.touched.push(list);
		}
		let list = walk[run.pos - 1];
		run.last = firable[list].then_some(list);
		self.run = Some(run);
		if let Some(waker) = self_wake {
			waker.wake();
			self.drain();
		}
	}

	/// Runs the world to quiescence without new events: held wakes first, then queued tasks.
	fn settle(&mut self, stats: &mut Stats) -> Result<(), Violation> {
		loop {
			let op = if let Some(run) = &self.run {
				if run.exit.is_some() || run.pos == self.walk(run).len() {
					Op::End
				} else {
					Op::Step
				}
			} else if let Some(&(id, _)) = self.held.first() {
				Op::Deliver(id)
			} else if let Some(slot) = self.queued().next() {
				Op::Start(slot)
			} else {
				return Ok(());
			};
			self.apply(op);
			stats.ops += 1;
			self.check(stats)?;
		}
	}

	fn check(&self, stats: &mut Stats) -> Result<(), Violation> {
		let quiescent = self.quiescent();
		let waiters = self.tasks.iter().flatten().count();
		let bound = 2 * self.tasks.len() + 4;
		let all = 0..if quiescent { self.lists.len() } else { 0 };
		for list in self.touched.iter().copied().chain(all) {
			let entries = &self.lists[list];
			let len = entries.len();
			stats.longest_list = stats.longest_list.max(len);
			if len > bound {
				return Err(Violation::ListTooLong { list, len, bound });
			}
			let live = entries.live();
			if live > waiters {
				return Err(Violation::DuplicateEntries { list, live, waiters });
			}
		}
		if !quiescent {
			return Ok(());
		}
		stats.quiescent += 1;
		for (slot, task) in self.tasks.iter().enumerate() {
			let Some(task) = task else { continue };
			debug_assert_eq!(task.sched, Sched::Idle);
			if task.yielded {
				return Err(Violation::LostSelfWake { slot });
			}
			let walk = &task.script.walks[task.parked_on.expect("an idle task has polled")];
			if let Some(&list) = walk.iter().find(|&&list| self.fires[list] > task.seen[list]) {
				return Err(Violation::LostWake { slot, list });
			}
		}
		if self.sc.coverage {
			// Invariant 1, checked before any fire can expose it: every parked task has a live
			// entry in every list of its last walk (a task has at most one per list, see 2a).
			let mut parked = vec![0; self.lists.len()];
			for task in self.tasks.iter().flatten() {
				for &list in &task.script.walks[task.parked_on.expect("an idle task has polled")] {
					parked[list] += 1;
				}
			}
			for (list, &parked) in parked.iter().enumerate() {
				let live = if parked > 0 { self.lists[list].live() } else { 0 };
				if live < parked {
					return Err(Violation::Uncovered { list, live, parked });
				}
			}
		}
		Ok(())
	}

	fn failure(&self, violation: Violation) -> Failure {
		let mut state = String::new();
		for (slot, task) in self.tasks.iter().enumerate() {
			match task {
				None => writeln!(state, "  slot {slot}: empty"),
				Some(task) => writeln!(
					state,
					"  slot {slot}: {:?} {:?} polls {} parked_on {:?} {:?}",
					task.script.kind, task.sched, task.polls, task.parked_on, task.waiter
				),
			}
			.unwrap();
		}
		for (i, list) in self.lists.iter().enumerate() {
			if list.is_empty() && self.fires[i] == 0 {
				continue;
			}
			writeln!(
				state,
				"  list {i}: fires {} live {} {list:?}",
				self.fires[i],
				list.live()
			)
			.unwrap();
		}
		Failure {
			scenario: self.sc.name.clone(),
			violation,
			trace: self.trace.clone(),
			state,
		}
	}
}

/// What an operation costs, in budget units: events, fires, held, replaces, drops, spawns,
/// retires.
fn cost(op: Op) -> [usize; 7] {
	match op {
		Op::Fire { held, .. } => [1, 1, usize::from(held), 0, 0, 0, 0],
		Op::Replace(_) => [1, 0, 0, 1, 0, 0, 0],
		Op::Drop(_) => [1, 0, 0, 0, 1, 0, 0],
		Op::Spawn(_) => [1, 0, 0, 0, 0, 1, 0],
		Op::Retire(_) => [1, 0, 0, 0, 0, 0, 1],
		Op::Start(_) | Op::Step | Op::End | Op::Deliver(_) => [0; 7],
	}
}

impl<const R: usize> Model<'_, R> {
	/// Whether `a` and `b`, both enabled here, commute: each leaves the other enabled and both
	/// orders reach the same state.
	///
	/// - Environment events on different lists commute: a fire touches its own list's counter and
	///   entries, and its wakes only move tasks from idle to queued or mark the running one
	///   notified, the same in either order; the key checks read keys that no environment event
	///   changes. Two held fires, or two replacements, stay dependent because their order names
	///   them differently (held ids, list ids).
	/// - A fire (or replacement) of an **empty** list wakes nobody, so it also commutes with the
	///   executor's `Start`, `End`, `Drop` and `Retire`, none of which reads fire counters. Not
	///   with `Step` (a walk reads counters, and the walk position decides which fires are
	///   offered) nor `Spawn` (a new task's baseline is the current counters).
	///
	/// Either way both must fit in what is left of the budget, or one would disable the other.
	fn independent(&self, a: Op, b: Op) -> bool {
		let silent = |op| match op {
			Op::Fire { list, held: false } | Op::Replace(list) => self.lists[list].is_empty(),
			_ => false,
		};
		let env = |op| matches!(op, Op::Fire { .. } | Op::Replace(_) | Op::Deliver(_));
		let quiet_exec = |op| matches!(op, Op::Start(_) | Op::End | Op::Drop(_) | Op::Retire(_));
		let list = |op| match op {
			Op::Fire { list, .. } | Op::Replace(list) => Some(list),
			_ => None,
		};
		let commute = match (a, b) {
			(Op::Replace(_), Op::Replace(_)) | (Op::Fire { held: true, .. }, Op::Fire { held: true, .. }) => false,
			_ if env(a) && env(b) => list(a).is_none() || list(a) != list(b),
			_ => (silent(a) && quiet_exec(b)) || (silent(b) && quiet_exec(a)),
		};
		if !commute {
			return false;
		}
		let (budget, used) = (&self.sc.budget, &self.used);
		let limits = [
			budget.events - used.events,
			budget.fires - used.fires,
			budget.held - used.held,
			budget.replaces - used.replaces,
			budget.drops - used.drops,
			budget.spawns - used.spawns,
			budget.retires - used.retires,
		];
		let (ca, cb) = (cost(a), cost(b));
		(0..limits.len()).all(|i| ca[i] + cb[i] <= limits[i])
	}
}

/// One node on the current search path.
struct Level {
	ops: Vec<Op>,
	choice: usize,
	/// The sleep set: ops whose every continuation from here was covered by an earlier branch.
	sleep: Vec<Op>,
}

impl Level {
	fn next_awake(&self, from: usize) -> Option<usize> {
		(from..self.ops.len()).find(|&i| !self.sleep.contains(&self.ops[i]))
	}

	/// The sleep set of the child reached by `ops[choice]`: what slept here or was explored
	/// before it, and commutes with it.
	fn child_sleep<const R: usize>(&self, model: &Model<'_, R>) -> Vec<Op> {
		let chosen = self.ops[self.choice];
		let mut sleep: Vec<Op> = self.sleep.clone();
		sleep.extend_from_slice(&self.ops[..self.choice]);
		sleep.retain(|&op| model.independent(op, chosen));
		sleep.sort_unstable();
		sleep.dedup();
		sleep
	}
}

/// Every interleaving of the scenario, depth first, with sleep sets (Godefroid) to skip
/// reorderings of commuting events. The real types cannot be cloned, so each branch replays its
/// prefix from a fresh world (stateless search).
fn explore<const R: usize>(sc: &Scenario, registry: &Registry) -> Result<Stats, Box<Failure>> {
	let mut stats = Stats::default();
	let mut path: Vec<Level> = Vec::new();
	let mut root = true;
	loop {
		let mut model = Model::<R>::new(sc, registry);
		let mut sleep = Vec::new();
		if let Some((last, prefix)) = path.split_last() {
			for level in prefix {
				model.apply(level.ops[level.choice]);
				stats.ops += 1;
			}
			// The world is deterministic, so the replay meets the same choices; check that much.
			assert_eq!(model.enabled(), last.ops, "{}: replay diverged", sc.name);
			sleep = last.child_sleep(&model);
			model.apply(last.ops[last.choice]);
			stats.ops += 1;
		}
		// The last op of the path is a new branch (or the root is new): check it.
		if root || !path.is_empty() {
			root = false;
			stats.states += 1;
			model.check(&mut stats).map_err(|v| Box::new(model.failure(v)))?;
		}
		let mut settle = true;
		loop {
			if path.len() >= sc.depth {
				stats.truncated += 1;
				break;
			}
			let ops = model.enabled();
			let mut level = Level {
				ops,
				choice: 0,
				sleep: std::mem::take(&mut sleep),
			};
			let Some(choice) = level.next_awake(0) else {
				// Nothing enabled: a real leaf. Everything asleep: covered by another branch.
				settle = level.ops.is_empty();
				break;
			};
			level.choice = choice;
			sleep = level.child_sleep(&model);
			let op = level.ops[choice];
			path.push(level);
			model.apply(op);
			stats.ops += 1;
			stats.states += 1;
			model.check(&mut stats).map_err(|v| Box::new(model.failure(v)))?;
		}
		if settle {
			model.settle(&mut stats).map_err(|v| Box::new(model.failure(v)))?;
			stats.leaves += 1;
		}
		drop(model);
		loop {
			let Some(level) = path.last_mut() else {
				return Ok(stats);
			};
			if let Some(next) = level.next_awake(level.choice + 1) {
				level.choice = next;
				break;
			}
			path.pop();
		}
	}
}

/// A small xorshift generator: deterministic, so a failing random walk can be replayed.
struct Rng(u64);

impl Rng {
	fn below(&mut self, n: usize) -> usize {
		self.0 ^= self.0 << 13;
		self.0 ^= self.0 >> 7;
		self.0 ^= self.0 << 17;
		(self.0 % n as u64) as usize
	}
}

/// `walks` seeded random interleavings of the scenario (same ops, same oracles), each settled
/// and checked at its end: for worlds too big to enumerate.
fn wander<const R: usize>(sc: &Scenario, registry: &Registry, seed: u64, walks: usize) -> Result<Stats, Box<Failure>> {
	let mut stats = Stats::default();
	let mut rng = Rng(seed | 1);
	let is_env = |op: &Op| matches!(op, Op::Fire { .. } | Op::Replace(_) | Op::Deliver(_));
	for _ in 0..walks {
		let mut model = Model::<R>::new(sc, registry);
		stats.states += 1;
		// How often the environment moves when the executor could: from every other op to one
		// in 32, so some walks are storms and some reach quiescence between events.
		let rate = 2 << rng.below(5);
		while model.trace.len() < sc.depth {
			let ops = model.enabled();
			let (env, exec): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(is_env);
			let pick = match (env.is_empty(), exec.is_empty()) {
				(true, true) => break,
				(false, false) if rng.below(rate) == 0 => &env,
				(false, false) => &exec,
				(false, true) => &env,
				(true, false) => &exec,
			};
			model.apply(pick[rng.below(pick.len())]);
			stats.ops += 1;
			stats.states += 1;
			model.check(&mut stats).map_err(|v| Box::new(model.failure(v)))?;
		}
		if model.trace.len() >= sc.depth {
			stats.truncated += 1;
		}
		model.settle(&mut stats).map_err(|v| Box::new(model.failure(v)))?;
		stats.leaves += 1;
	}
	Ok(stats)
}

// Scenario building blocks.

fn plan(via: Via, tasks: Vec<Script>) -> Plan {
	Plan { via, tasks }
}

fn script(kind: Kind, walks: Vec<Vec<usize>>) -> Script {
	Script { kind, walks }
}

/// Lists `from..to`.
fn span(from: usize, to: usize) -> Vec<usize> {
	(from..to).collect()
}

/// The lists of a `2R`-list world where something changes: the first, the last two that fit in
/// the records, the first that does not, and the last.
fn landmarks<const R: usize>(lists: usize) -> Vec<usize> {
	let mut marks = vec![0, R.saturating_sub(1), R, lists - 1];
	marks.retain(|&list| list < lists);
	marks.sort_unstable();
	marks.dedup();
	marks
}

/// A budget of `events` events, at most `fires` fires of which at most `held` are held.
fn budget(events: usize, fires: usize, held: usize) -> Budget {
	Budget {
		events,
		fires,
		held,
		..Budget::default()
	}
}

/// The scenarios every `RECORDS` value explores exhaustively, each within its budget.
fn suite<const R: usize>() -> Vec<Scenario> {
	let wide = 2 * R;
	let marks = landmarks::<R>(wide);
	let mut scenarios = vec![
		// Two tasks on three lists, one through the registry and one foreign (which completes and
		// is followed in its slot by a reader): records, epochs, drains in the middle of a walk,
		// held wakes, drops, slot reuse and explicit retires.
		Scenario::new(
			"pair",
			3,
			&[1, 2],
			vec![
				plan(
					Via::Slot,
					vec![script(Kind::Loop, vec![vec![0, 1], vec![2], vec![1, 2, 0]])],
				),
				plan(
					Via::Foreign,
					vec![
						script(Kind::Once, vec![vec![1, 2]]),
						script(Kind::Loop, vec![vec![2, 0]]),
					],
				),
			],
			Budget {
				drops: 1,
				spawns: 1,
				retires: 1,
				..budget(3, 3, 1)
			},
		),
		// Slot reuse through the registry: a task that completes or is dropped and its slot's
		// next task, while held wakes for the old key are still in flight.
		Scenario::new(
			"reuse",
			2,
			&[0, 1],
			vec![
				plan(
					Via::Slot,
					vec![
						script(Kind::Once, vec![vec![0, 1]]),
						script(Kind::Loop, vec![vec![1], vec![0, 1]]),
					],
				),
				plan(Via::Slot, vec![script(Kind::Loop, vec![vec![1]])]),
			],
			Budget {
				drops: 1,
				spawns: 1,
				..budget(3, 2, 1)
			},
		),
		// A list closed and replaced (a new id) while records of the old one remain.
		Scenario::new(
			"replace",
			2,
			&[0, 1],
			vec![
				plan(Via::Slot, vec![script(Kind::Loop, vec![vec![0, 1], vec![1]])]),
				plan(Via::Foreign, vec![script(Kind::Loop, vec![vec![1]])]),
			],
			Budget {
				replaces: 1,
				..budget(3, 2, 0)
			},
		),
		// One task walking all 2R lists, then R+1, then R: the overflow path (retire and walk
		// again) against the record fast path, with fires where the records run out.
		Scenario::new(
			"wide",
			wide,
			&marks,
			vec![plan(
				Via::Slot,
				vec![script(Kind::Loop, vec![span(0, wide), span(0, R + 1), span(0, R)])],
			)],
			Budget {
				retires: 1,
				..budget(3, 3, 1)
			},
		),
		// Alternating disjoint halves: the second walk finds the records full of the first
		// walk's lists and overflows, so the third must start with a retire.
		Scenario::new(
			"halves",
			wide,
			&marks,
			vec![plan(
				Via::Slot,
				vec![script(Kind::Loop, vec![span(0, R), span(R, wide)])],
			)],
			budget(3, 3, 1),
		),
		// The same (foreign this time), next to a task that handles one event per poll on the two
		// lists where the halves meet and wakes itself through `Waiter::waker`, which comes back
		// through the registry as `Msg::WakeTask` (two events: the self-waking task multiplies
		// the schedules).
		Scenario::new(
			"halves+yield",
			wide,
			&marks,
			vec![
				plan(Via::Foreign, vec![script(Kind::Loop, vec![span(0, R), span(R, wide)])]),
				plan(
					Via::Slot,
					vec![script(Kind::Yield, vec![span(R.saturating_sub(1), R + 1)])],
				),
			],
			budget(2, 2, 1),
		),
	];
	if R > 1 {
		// Walks of R-1 and R+1 lists: both sides of the record limit, alternately.
		scenarios.push(Scenario::new(
			"edge",
			R + 1,
			&landmarks::<R>(R + 1),
			vec![plan(
				Via::Slot,
				vec![script(Kind::Loop, vec![span(0, R - 1), span(0, R + 1)])],
			)],
			budget(3, 3, 2),
		));
	}
	scenarios
}

/// Random walks through the `2R`-list world where **every** list may fire, with budgets no
/// exhaustive search could afford: two readers of all `2R` lists in opposite orders (so each
/// overflows at a different list) and a slot whose tasks come and go.
fn roam<const R: usize>() -> Scenario {
	let wide = 2 * R;
	let all: Vec<usize> = (0..wide).collect();
	let mut sc = Scenario::new(
		"roam",
		wide,
		&all,
		vec![
			plan(
				Via::Slot,
				vec![script(Kind::Loop, vec![span(0, wide), span(R / 2, R + 1)])],
			),
			plan(
				Via::Foreign,
				vec![script(Kind::Loop, vec![span(0, wide).into_iter().rev().collect()])],
			),
			plan(
				Via::Slot,
				vec![
					script(Kind::Once, vec![span(R.saturating_sub(1), wide)]),
					script(Kind::Yield, vec![vec![0, wide - 1]]),
				],
			),
		],
		Budget {
			events: 40,
			fires: 30,
			held: 8,
			replaces: 2,
			drops: 3,
			spawns: 3,
			retires: 3,
		},
	);
	sc.depth = 600;
	sc
}

fn report(what: &str, stats: &Stats, started: Instant) {
	eprintln!(
		"{what}: {} states, {} interleavings, {} quiescent states checked, {} truncated, {} ops, longest list {}, \
		 {:.2?}",
		stats.states,
		stats.leaves,
		stats.quiescent,
		stats.truncated,
		stats.ops,
		stats.longest_list,
		started.elapsed()
	);
}

fn exhaust<const R: usize>(registry: &Registry, scenarios: &[Scenario]) -> Stats {
	let mut total = Stats::default();
	for sc in scenarios {
		let started = Instant::now();
		let stats = explore::<R>(sc, registry).unwrap_or_else(|failure| panic!("model checker: {failure}"));
		report(&format!("model R={R} {}", sc.name), &stats, started);
		total.add(stats);
	}
	total
}

fn roam_randomly<const R: usize>(registry: &Registry, sc: &Scenario, seed: u64, walks: usize) -> Stats {
	let started = Instant::now();
	let stats = wander::<R>(sc, registry, seed, walks).unwrap_or_else(|failure| panic!("model checker: {failure}"));
	report(
		&format!("model R={R} {} (random, seed {seed})", sc.name),
		&stats,
		started,
	);
	stats
}

fn check_records<const R: usize>() {
	let started = Instant::now();
	let registry = Registry::acquire();
	let mut total = exhaust::<R>(&registry, &suite::<R>());
	total.add(roam_randomly::<R>(&registry, &roam::<R>(), 0x5eed_0000 + R as u64, 150));
	report(&format!("model R={R} total"), &total, started);
}

#[test]
fn model_records_1() {
	check_records::<1>();
}

#[test]
fn model_records_2() {
	check_records::<2>();
}

#[test]
fn model_records_3() {
	check_records::<3>();
}

#[test]
fn model_records_8() {
	check_records::<8>();
}

#[test]
fn model_records_16() {
	check_records::<16>();
}

#[test]
fn model_records_32() {
	check_records::<32>();
}

/// kio #3635's test, exhaustively: tasks registered on 32 lists, fires on subsets of them in
/// every order (also while a walk is in progress, also held), and every re-poll must register
/// again on every list (coverage) so that no later fire is lost. Each `R` takes a different
/// path: 32 lists overflow the records for `R < 32` (at the list after the `R`-th, which is
/// among those that fire) and just fit for `R = 32`.
fn partial_wakes<const R: usize>(registry: &Registry) -> Stats {
	const LISTS: usize = 32;
	// Fires where the records run out and at the end of the walk.
	let marks: Vec<usize> = landmarks::<R>(LISTS)
		.into_iter()
		.filter(|&list| list + 1 >= R || R >= LISTS)
		.collect();
	let forward = span(0, LISTS);
	let backward: Vec<usize> = forward.iter().rev().copied().collect();
	let one = Scenario::new(
		"partial wakes, one task",
		LISTS,
		&marks,
		vec![plan(Via::Slot, vec![script(Kind::Loop, vec![forward.clone()])])],
		budget(3, 3, 1),
	);
	// Two readers in opposite orders overflow at different lists; fires where the records of
	// the forward one run out.
	let limit: Vec<usize> = [R - 1, R].into_iter().filter(|&list| list < LISTS).collect();
	let two = Scenario::new(
		"partial wakes, two tasks",
		LISTS,
		&limit,
		vec![
			plan(Via::Slot, vec![script(Kind::Loop, vec![forward.clone()])]),
			plan(Via::Foreign, vec![script(Kind::Loop, vec![backward.clone()])]),
		],
		budget(2, 2, 1),
	);
	let all: Vec<usize> = (0..LISTS).collect();
	let mut random = Scenario::new(
		"partial wakes, every list fires",
		LISTS,
		&all,
		vec![
			plan(Via::Slot, vec![script(Kind::Loop, vec![forward])]),
			plan(Via::Foreign, vec![script(Kind::Loop, vec![backward])]),
		],
		Budget {
			retires: 2,
			..budget(40, 40, 10)
		},
	);
	random.depth = 1200;
	let mut stats = exhaust::<R>(registry, &[one, two]);
	stats.add(roam_randomly::<R>(registry, &random, 0x3635 + R as u64, 150));
	stats
}

#[test]
fn model_partial_wakes_across_32_lists() {
	let started = Instant::now();
	let registry = Registry::acquire();
	let mut total = partial_wakes::<1>(&registry);
	total.add(partial_wakes::<2>(&registry));
	total.add(partial_wakes::<3>(&registry));
	total.add(partial_wakes::<8>(&registry));
	total.add(partial_wakes::<16>(&registry));
	total.add(partial_wakes::<32>(&registry));
	report("model partial wakes total", &total, started);
}

/// The checker checks: with the known-bad list that drains without moving its epoch on (a
/// record then claims presence after its entry is gone), it must find a lost wake, for every
/// `R`, through oracle 1 alone; with the coverage check on it finds the missing entry earlier.
fn catches_surviving_record<const R: usize>(registry: &Registry) {
	let world = |coverage| {
		let mut sc = Scenario::new(
			"record survives a drain",
			2,
			&[0, 1],
			vec![
				plan(Via::Slot, vec![script(Kind::Loop, vec![vec![0, 1]])]),
				plan(Via::Foreign, vec![script(Kind::Loop, vec![vec![1]])]),
			],
			budget(3, 3, 1),
		)
		.unsound();
		sc.coverage = coverage;
		sc
	};
	for coverage in [false, true] {
		let failure = match explore::<R>(&world(coverage), registry) {
			Ok(stats) => panic!("R={R}: the unsound list went unnoticed after {} states", stats.states),
			Err(failure) => failure,
		};
		eprintln!("R={R}, coverage {coverage}: caught as expected: {failure}");
		match failure.violation {
			Violation::LostWake { .. } => {}
			Violation::Uncovered { .. } if coverage => {}
			other => panic!("R={R}: expected a lost wake, got {other:?}"),
		}
	}
	// And the same world with a sound list passes.
	let mut sound = world(true);
	sound.unsound = false;
	explore::<R>(&sound, registry).unwrap_or_else(|failure| panic!("sound variant: {failure}"));
}

#[test]
fn model_catches_record_that_survives_a_drain() {
	let registry = Registry::acquire();
	catches_surviving_record::<1>(&registry);
	catches_surviving_record::<2>(&registry);
	catches_surviving_record::<3>(&registry);
	catches_surviving_record::<8>(&registry);
	catches_surviving_record::<16>(&registry);
	catches_surviving_record::<32>(&registry);
}

/// Oracle 2 over long register-and-drop loops, which no exhaustive budget reaches: a task
/// registers on a list and is dropped, its slot reused, thousands of times, next to a task that
/// stays registered; through the registry and through foreign waiters. Without the sweep the
/// list would grow by one entry per round.
#[test]
fn model_register_and_drop_churn_keeps_lists_bounded() {
	const ROUNDS: usize = 2000;
	let registry = Registry::acquire();
	for via in [Via::Slot, Via::Foreign] {
		let mut sc = Scenario::new(
			"churn",
			2,
			&[0, 1],
			vec![
				plan(via, vec![script(Kind::Loop, vec![vec![0, 1]])]),
				plan(Via::Slot, vec![script(Kind::Loop, vec![vec![1]])]),
			],
			Budget {
				drops: ROUNDS,
				spawns: ROUNDS,
				..budget(2 * ROUNDS + 1, 1, 0)
			},
		);
		sc.depth = usize::MAX;
		let mut model = Model::<1>::new(&sc, &registry);
		let mut stats = Stats::default();
		let mut run = |model: &mut Model<'_, 1>, ops: &[Op]| {
			for &op in ops {
				model.apply(op);
				model
					.check(&mut stats)
					.unwrap_or_else(|v| panic!("{}", model.failure(v)));
			}
		};
		run(&mut model, &[Op::Start(1), Op::Step, Op::End]);
		for _ in 0..ROUNDS {
			run(
				&mut model,
				&[Op::Start(0), Op::Step, Op::Step, Op::End, Op::Drop(0), Op::Spawn(0)],
			);
		}
		// The survivor's registration is still there: a fire wakes it.
		run(
			&mut model,
			&[
				Op::Start(0),
				Op::Step,
				Op::Step,
				Op::End,
				Op::Fire { list: 1, held: false },
			],
		);
		model
			.settle(&mut stats)
			.unwrap_or_else(|v| panic!("{}", model.failure(v)));
		let bound = 2 * sc.plans.len() + 4;
		eprintln!(
			"churn via {via:?}: {ROUNDS} rounds, longest list {} (bound {bound})",
			stats.longest_list
		);
		assert!(stats.longest_list <= bound);
	}
}
