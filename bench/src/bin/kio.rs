//! kio's runtime operations, counted: the executor, waiters and timers.
//!
//! ```text
//! cargo run --release -p bench --bin kio -- [--source callgrind|perf|task-clock|time] [--save] [FILTER...]
//! ```
//! (`just bench-kio`). With callgrind (the default on a host without a PMU) every case runs as a
//! child of this binary twice under `valgrind --tool=callgrind`, once with N iterations and once
//! with 0 after the same set-up; the value is `(Ir_N - Ir_0) / (ops_N - ops_0)`: the loader,
//! runtime start, set-up and teardown are in both runs and cancel out. Callgrind counts
//! user-space instructions only (the `io_uring_enter` of each loop turn counts its user-space
//! side). Without valgrind, or with `--source time`, each case runs in this process (10x the
//! iterations, median of 5) and only its measured loop is timed with `Instant`. `--save` writes
//! `bench/results/kio.{md,json}` through the shared report writer; it refuses a FILTER.
//!
//! # What each case isolates
//!
//! Executor cases run on a single-worker runtime (`workers(1).pin(false)`) and are driven by a
//! *driver* task that does one step per poll and wakes itself, so every cycle is decided by explicit
//! wakes, never by sleeps or other threads. The driver's own poll is in every cycle; `task/yield`
//! measures exactly that poll, as the baseline to subtract by eye.
//!
//! - `task/yield`: one task that wakes itself and returns `Pending`: run-queue pop, `prepare`,
//!   waker, poll, re-queue, plus its share of the loop turn (one `io_uring_enter` per 64 polls).
//! - `waiter/reregister/R`: `WaiterList::register` of a waiter already on the list, with R lists
//!   recorded and the looked-up one last: the record fast path (a scan of R records, no append).
//!   No executor; a foreign waiter (`Waiter::new`).
//! - `waiter/park_cycle/L`: a task's own waiter registers on L lists through `kio::wait`; the
//!   driver drains list 0; the task is re-polled and re-registers: list 0 appends (its record went
//!   stale), lists 1..L hit their records. L = 16 overflows the 8 records, so every poll starts with
//!   a retire and re-walks, appending on all 16 lists. Per cycle (driver poll + task poll).
//! - `waiter/fanout/N`: N tasks parked on one list; the driver drains it (one `take`, N wakes);
//!   all N re-poll and re-register. Per woken waiter.
//! - `tasks/spawn_drain/1000`: the driver spawns 1,000 trivial tasks, drops their handles and
//!   yields once; all 1,000 run, finish and are freed before it resumes. Per task.
//! - `tasks/wake_16_of/1000`: 1,000 tasks, each parked in `pop` on its own `Queue`; the driver
//!   pushes to 16 of them (rotating) and yields; the 16 pop, loop and park again. Per cycle.
//! - `timers/W/kio/L`: kio's timers (the hierarchical timing wheel of `kio/src/time.rs`, through
//!   `kio::bench_support::Timers`) with L timers live, on QUIC-like churn; `timers/W/null/L` stores
//!   nothing and measures the workload's own share. A loop turn is 64 ops followed by the clock
//!   moving 1 ms, `expire` (fired timers are woken, as kio's loop does) and `next_deadline` (the
//!   enter timeout).
//!   - `reset`: re-arm timer i (round robin) to now + its delay (200 ms to 30 s), always further
//!     out: the idle and loss timers pushed back by every packet. None fires. Per re-arm.
//!   - `churn`: cancel the oldest timer, insert a new one (delay 200 ms to 1 s): timers cancelled
//!     before they fire. None fires. Per insert + cancel pair.
//!   - `expire`: nothing but turns; timers (delays 10 to 200 ms) fire and are re-armed. Per fired
//!     timer (expire, wake, re-arm).
//!
//! The wheel was chosen over kio's earlier indexed 4-ary heap by this harness (docs/kio.md §3
//! gives the figures); the heap is gone, and so is the bench's own copy of the wheel.

#![forbid(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::hint::black_box;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bench::counter::{self, median};
use bench::report::Table;
use kio::bench_support::Timers;
use kio::sync::Queue;
use kio::{Waiter, WaiterList};

/// Iterations of `time` mode, as a multiple of `count` mode's.
const TIME_SCALE: u64 = 10;
/// Runs of `time` mode, of which the median is reported.
const TIME_SAMPLES: usize = 5;

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

/// What one run of a case did: how many ops its measured loop performed, and how long it took.
struct Run {
	ops: u64,
	elapsed: Duration,
}

/// A case's body: `(param, iterations)` to what its measured loop did.
type Runner = fn(u64, u64) -> Run;

struct Case {
	/// The case without its parameter, e.g. `waiter/park_cycle`.
	name: &'static str,
	param: u64,
	/// What the parameter counts.
	param_name: &'static str,
	/// What one op is.
	op: &'static str,
	/// Iterations in `count` mode.
	iters: u64,
	run: Runner,
}

impl Case {
	fn id(&self) -> String {
		format!("{}/{}", self.name, self.param)
	}
}

fn cases() -> Vec<Case> {
	let mut cases = vec![
		Case {
			name: "task/yield",
			param: 1,
			param_name: "tasks",
			op: "self-wake + poll",
			iters: 10_000,
			run: task_yield,
		},
		case_reregister(1),
		case_reregister(8),
	];
	for lists in [1, 2, 4, 8, 16] {
		cases.push(Case {
			name: "waiter/park_cycle",
			param: lists,
			param_name: "lists",
			op: "cycle (drain list 0, re-poll, re-register on all lists)",
			iters: 10_000,
			run: park_cycle,
		});
	}
	for waiters in [8, 32, 128, 512] {
		cases.push(Case {
			name: "waiter/fanout",
			param: waiters,
			param_name: "waiters",
			op: "woken waiter (share of the drain, wake, re-poll, re-register)",
			iters: 65_536 / waiters,
			run: fanout,
		});
	}
	cases.push(Case {
		name: "tasks/spawn_drain",
		param: 1000,
		param_name: "tasks",
		op: "task (spawn, run, finish, free)",
		iters: 20,
		run: spawn_drain,
	});
	cases.push(Case {
		name: "tasks/wake_16_of",
		param: 1000,
		param_name: "tasks",
		op: "cycle (16 pushes, 16 wakes, 16 pop + re-park)",
		iters: 2_000,
		run: wake_16,
	});
	const RESET: &str = "re-arm (further out)";
	const CHURN: &str = "insert + cancel";
	const EXPIRE: &str = "fired timer (expire, wake, re-arm)";
	for live in [100, 10_000] {
		// About 10,000 timers fire in either size: 3.5 per turn at 100 live, 350 at 10,000.
		let turns = 300_000 / live;
		let timers: [(&'static str, &'static str, u64, Runner); 5] = [
			("timers/reset/null", RESET, 20_000, timers_reset::<Null>),
			("timers/reset/kio", RESET, 20_000, timers_reset::<Timers>),
			("timers/churn/null", CHURN, 20_000, timers_churn::<Null>),
			("timers/churn/kio", CHURN, 20_000, timers_churn::<Timers>),
			("timers/expire/kio", EXPIRE, turns, timers_expire::<Timers>),
		];
		for (name, op, iters, run) in timers {
			cases.push(timer_case(name, live, op, iters, run));
		}
	}
	cases
}

fn case_reregister(recorded: u64) -> Case {
	Case {
		name: "waiter/reregister",
		param: recorded,
		param_name: "recorded lists",
		op: "register (record hit)",
		iters: 100_000,
		run: reregister,
	}
}

fn timer_case(name: &'static str, live: u64, op: &'static str, iters: u64, run: Runner) -> Case {
	Case {
		name,
		param: live,
		param_name: "live timers",
		op,
		iters,
		run,
	}
}

fn runtime() -> kio::Runtime {
	kio::Runtime::builder()
		.workers(1)
		.pin(false)
		.build()
		.unwrap_or_else(|e| panic!("kio: cannot start a runtime: {e}"))
}

/// A task body that runs `warm` steps, then `iters` timed steps, one per poll, waking itself after
/// each: every step is followed by one pass of the run queue, so whatever the step woke runs before
/// the next step. Resolves to the time the `iters` steps took.
fn drive(warm: u64, iters: u64, mut step: impl FnMut()) -> impl Future<Output = Duration> {
	let mut left = warm + iters;
	let mut start = None;
	std::future::poll_fn(move |cx| {
		if left == iters && start.is_none() {
			start = Some(Instant::now());
		}
		if left == 0 {
			return Poll::Ready(start.map_or(Duration::ZERO, |start| start.elapsed()));
		}
		left -= 1;
		step();
		cx.waker().wake_by_ref();
		Poll::Pending
	})
}

/// Steps the driver runs before the measured ones, in both callgrind runs alike, so the first
/// cycles' allocations (recycled entry vectors, run-queue growth) stay out of the difference.
const WARM: u64 = 4;

fn task_yield(_: u64, iters: u64) -> Run {
	let rt = runtime();
	let elapsed = rt.block_on(async move { kio::spawn(drive(WARM, iters, || {})).await.unwrap() });
	Run { ops: iters, elapsed }
}

fn reregister(recorded: u64, iters: u64) -> Run {
	let waiter: Waiter = Waiter::new(Waker::noop().clone());
	let mut lists: Vec<WaiterList> = (0..recorded).map(|_| WaiterList::new()).collect();
	for list in &mut lists {
		list.register(&waiter);
	}
	let last = lists.last_mut().expect("at least one list");
	let start = Instant::now();
	for _ in 0..iters {
		black_box(&mut *last).register(black_box(&waiter));
	}
	let elapsed = start.elapsed();
	assert_eq!(last.len(), 1, "a record hit must not append");
	Run { ops: iters, elapsed }
}

fn park_cycle(lists: u64, iters: u64) -> Run {
	let rt = runtime();
	let lists: Rc<RefCell<Vec<WaiterList>>> = Rc::new(RefCell::new((0..lists).map(|_| WaiterList::new()).collect()));
	let polls = Rc::new(Cell::new(0u64));
	let elapsed = rt.block_on({
		let polls = polls.clone();
		async move {
			let parker = {
				let lists = lists.clone();
				kio::spawn(async move {
					kio::wait(|waiter| {
						for list in lists.borrow_mut().iter_mut() {
							list.register(waiter);
						}
						polls.set(polls.get() + 1);
						Poll::<()>::Pending
					})
					.await;
				})
			};
			let driver = kio::spawn(drive(WARM, iters, move || {
				// Taken under the borrow, woken after it: the same rule as under a lock.
				let wakes = lists.borrow_mut()[0].take();
				assert_eq!(wakes.len(), 1, "the parked task must be on list 0");
				drop(wakes);
			}));
			// The parked task never finishes; the runtime drops it (in both callgrind runs alike).
			drop(parker);
			driver.await.unwrap()
		}
	});
	assert_eq!(polls.get(), WARM + iters + 1, "one re-poll per drain");
	Run { ops: iters, elapsed }
}

fn fanout(waiters: u64, iters: u64) -> Run {
	let rt = runtime();
	let list = Rc::new(RefCell::new(WaiterList::new()));
	let polls = Rc::new(Cell::new(0u64));
	let elapsed = rt.block_on({
		let polls = polls.clone();
		async move {
			let parked: Vec<_> = (0..waiters)
				.map(|_| {
					let list = list.clone();
					let polls = polls.clone();
					kio::spawn(async move {
						kio::wait(|waiter| {
							list.borrow_mut().register(waiter);
							polls.set(polls.get() + 1);
							Poll::<()>::Pending
						})
						.await;
					})
				})
				.collect();
			let driver = kio::spawn(drive(WARM, iters, move || {
				let wakes = list.borrow_mut().take();
				assert_eq!(wakes.len() as u64, waiters, "every waiter must be on the list");
				drop(wakes);
			}));
			drop(parked);
			driver.await.unwrap()
		}
	});
	assert_eq!(
		polls.get(),
		waiters * (WARM + iters + 1),
		"one re-poll per waiter per drain"
	);
	Run {
		ops: iters * waiters,
		elapsed,
	}
}

fn spawn_drain(tasks: u64, iters: u64) -> Run {
	let rt = runtime();
	let ran = Rc::new(Cell::new(0u64));
	let elapsed = rt.block_on({
		let ran = ran.clone();
		async move {
			let driver = kio::spawn(async move {
				let mut start = Instant::now();
				for round in 0..WARM + iters {
					if round == WARM {
						start = Instant::now();
					}
					for _ in 0..tasks {
						let ran = ran.clone();
						drop(kio::spawn(async move { ran.set(ran.get() + 1) }));
					}
					// FIFO run queue: the yield puts the driver behind all the tasks just spawned.
					kio::yield_now().await;
					assert_eq!(
						ran.get(),
						(round + 1) * tasks,
						"every task ran before the driver resumed"
					);
				}
				start.elapsed()
			});
			driver.await.unwrap()
		}
	});
	assert_eq!(ran.get(), tasks * (WARM + iters), "every task ran");
	Run {
		ops: iters * tasks,
		elapsed,
	}
}

fn wake_16(tasks: u64, iters: u64) -> Run {
	const WOKEN: u64 = 16;
	let warm = WARM + tasks.div_ceil(WOKEN);
	let rt = runtime();
	let popped = Rc::new(Cell::new(0u64));
	let elapsed = rt.block_on({
		let popped = popped.clone();
		async move {
			let queues: Vec<Queue<u64>> = (0..tasks).map(|_| Queue::unbounded()).collect();
			for queue in &queues {
				let queue = queue.clone();
				let popped = popped.clone();
				drop(kio::spawn(async move {
					while let Some(item) = queue.pop().await {
						popped.set(popped.get() + item);
					}
				}));
			}
			let mut next = 0;
			// Warm until every queue has been pushed once: a queue's first push allocates its
			// buffer, which is set-up, not the cost of a wake.
			let driver = kio::spawn(drive(warm, iters, move || {
				for _ in 0..WOKEN {
					queues[next as usize].try_push(1).unwrap();
					next = (next + 1) % tasks;
				}
			}));
			driver.await.unwrap()
		}
	});
	assert_eq!(popped.get(), WOKEN * (warm + iters), "every push was popped");
	Run { ops: iters, elapsed }
}

// ---------------------------------------------------------------------------------------------
// Timers: kio's timing wheel, and a queue that stores nothing
// ---------------------------------------------------------------------------------------------

/// What the timer workloads need of a timer queue: kio's timers API.
trait TimerQueue {
	/// Whether this is the do-nothing queue that measures the workload's own overhead.
	const NULL: bool = false;
	fn new(origin: Instant) -> Self;
	fn insert(&mut self, at: Instant, waker: Waker) -> usize;
	fn reset(&mut self, id: usize, at: Option<Instant>);
	fn set_waker(&mut self, id: usize, waker: &Waker);
	fn remove(&mut self, id: usize);
	fn expire(&mut self, now: Instant, fired: &mut Vec<Waker>);
	fn next_deadline(&self) -> Option<Instant>;
	fn len(&self) -> usize;
}

impl TimerQueue for Timers {
	fn new(_: Instant) -> Self {
		Self::default()
	}
	fn insert(&mut self, at: Instant, waker: Waker) -> usize {
		Self::insert(self, at, waker)
	}
	fn reset(&mut self, id: usize, at: Option<Instant>) {
		Self::reset(self, id, at);
	}
	fn set_waker(&mut self, id: usize, waker: &Waker) {
		Self::set_waker(self, id, waker);
	}
	fn remove(&mut self, id: usize) {
		Self::remove(self, id);
	}
	fn expire(&mut self, now: Instant, fired: &mut Vec<Waker>) {
		Self::expire(self, now, fired);
	}
	fn next_deadline(&self) -> Option<Instant> {
		Self::next_deadline(self)
	}
	fn len(&self) -> usize {
		Self::len(self)
	}
}

/// Stores nothing: with it, a workload measures its own overhead (deadline arithmetic, the waker
/// clone and drop, the loop turns), which is in kio's numbers too.
struct Null(usize);

impl TimerQueue for Null {
	const NULL: bool = true;
	fn new(_: Instant) -> Self {
		Self(0)
	}
	fn insert(&mut self, at: Instant, waker: Waker) -> usize {
		black_box((at, waker));
		self.0 += 1;
		self.0
	}
	fn reset(&mut self, id: usize, at: Option<Instant>) {
		black_box((id, at));
	}
	fn set_waker(&mut self, id: usize, waker: &Waker) {
		black_box((id, waker));
	}
	fn remove(&mut self, id: usize) {
		black_box(id);
	}
	fn expire(&mut self, now: Instant, fired: &mut Vec<Waker>) {
		black_box((now, fired));
	}
	fn next_deadline(&self) -> Option<Instant> {
		None
	}
	fn len(&self) -> usize {
		0
	}
}

thread_local! {
	/// Timer numbers (the bench's, not the queue's ids) whose wakers were woken.
	static FIRED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A waker that reports which timer fired: the bench needs to know what to re-arm, and a real
/// loop wakes every fired waker anyway. Both timer queues pay the same for it.
struct TimerWake(usize);

impl Wake for TimerWake {
	fn wake(self: Arc<Self>) {
		self.wake_by_ref();
	}

	fn wake_by_ref(self: &Arc<Self>) {
		FIRED.with(|fired| fired.borrow_mut().push(self.0));
	}
}

/// A deterministic generator (xorshift64), so both callgrind runs and both queues see the same
/// operations.
struct Rng(u64);

impl Rng {
	fn next(&mut self) -> u64 {
		self.0 ^= self.0 << 13;
		self.0 ^= self.0 >> 7;
		self.0 ^= self.0 << 17;
		self.0
	}

	fn pick(&mut self, from: &[u64]) -> u64 {
		from[(self.next() % from.len() as u64) as usize]
	}
}

/// Delays (ms) of timers that are pushed back by traffic: loss/PTO, handshake and idle timers.
/// All exceed the 157 ms a round of 10,000 re-arms takes at 64 per turn, so none fires: the
/// workload is re-arming alone.
const RESET_DELAYS: [u64; 6] = [200, 250, 333, 1_000, 3_000, 30_000];
/// Delays (ms) of short-lived timers, cancelled (after at most 157 ms, as above) before they fire.
const CHURN_DELAYS: [u64; 5] = [200, 250, 300, 500, 1_000];
/// Delays (ms) of timers that fire: ack delay, pacing, PTO.
const EXPIRE_DELAYS: [u64; 5] = [10, 25, 50, 100, 200];
/// Operations per loop turn; the clock moves 1 ms per turn.
const OPS_PER_TURN: u64 = 64;

/// `Instant::now()` moved forward to the next whole second of the monotonic clock.
///
/// Deadline arithmetic branches on its operands: `Instant + Duration` carries into the seconds
/// only for some nanosecond values, and comparisons stop early when the seconds differ. From a
/// random base the timer cases' counts wobble by a few percent between runs; from a whole second
/// they repeat exactly. std exposes the nanoseconds only through `Debug` (`tv_nsec` on Unix); if
/// that ever changes, the base stays unaligned and only exactness is lost.
fn whole_second_now() -> Instant {
	let now = Instant::now();
	let debug = format!("{now:?}");
	let nanos = debug.split("tv_nsec:").nth(1).and_then(|rest| {
		rest.trim_end_matches(|c: char| !c.is_ascii_digit())
			.trim()
			.parse::<u64>()
			.ok()
	});
	match nanos {
		Some(nanos) => now + Duration::from_nanos((1_000_000_000 - nanos % 1_000_000_000) % 1_000_000_000),
		None => now,
	}
}

/// The timers of one workload and the loop around them.
struct Bench<T> {
	queue: T,
	base: Instant,
	now_ms: u64,
	wakers: Vec<Waker>,
	delays: Vec<u64>,
	/// The queue's id of each timer number.
	ids: Vec<usize>,
	fired: Vec<Waker>,
	rng: Rng,
}

impl<T: TimerQueue> Bench<T> {
	/// `live` timers, each with a delay from `delays`, first due at a random point within it so
	/// they do not fire in step.
	fn new(live: u64, delays: &[u64]) -> Self {
		let base = whole_second_now();
		let mut this = Self {
			queue: T::new(base),
			base,
			now_ms: 0,
			wakers: (0..live as usize)
				.map(|n| Waker::from(Arc::new(TimerWake(n))))
				.collect(),
			delays: Vec::with_capacity(live as usize),
			ids: Vec::with_capacity(live as usize),
			fired: Vec::new(),
			rng: Rng(0x2545_f491_4f6c_dd1d),
		};
		for n in 0..live as usize {
			let delay = this.rng.pick(delays);
			let first = 1 + this.rng.next() % delay;
			let id = this.queue.insert(this.at(first), this.wakers[n].clone());
			this.delays.push(delay);
			this.ids.push(id);
		}
		this
	}

	fn at(&self, after_ms: u64) -> Instant {
		self.base + Duration::from_millis(self.now_ms + after_ms)
	}

	/// The end of a loop turn: the clock moves 1 ms, due timers fire and are woken, and the next
	/// deadline is read for the enter timeout. Returns how many fired.
	fn turn(&mut self) -> u64 {
		self.now_ms += 1;
		let now = self.base + Duration::from_millis(self.now_ms);
		self.queue.expire(now, &mut self.fired);
		let fired = self.fired.len() as u64;
		for waker in self.fired.drain(..) {
			waker.wake();
		}
		black_box(self.queue.next_deadline());
		fired
	}

	/// Re-arms every timer that fired, as a task polling its `Deadline` again would.
	fn rearm_fired(&mut self) {
		let mut fired = FIRED.with(|fired| std::mem::take(&mut *fired.borrow_mut()));
		for &n in &fired {
			let id = self.ids[n];
			self.queue.set_waker(id, &self.wakers[n]);
			self.queue.reset(id, Some(self.at(self.delays[n])));
		}
		// Handed back empty, so the buffer is reused and a turn allocates nothing.
		fired.clear();
		FIRED.with(|slot| *slot.borrow_mut() = fired);
	}

	fn reset_op(&mut self, op: u64) {
		let n = (op % self.ids.len() as u64) as usize;
		self.queue.reset(self.ids[n], Some(self.at(self.delays[n])));
	}

	fn churn_op(&mut self, op: u64) {
		let n = (op % self.ids.len() as u64) as usize;
		self.queue.remove(self.ids[n]);
		let delay = self.rng.pick(&CHURN_DELAYS);
		self.ids[n] = self.queue.insert(self.at(delay), self.wakers[n].clone());
	}
}

/// Runs `warm` then `iters` ops of `op`, with a loop turn every 64 ops.
fn timed_ops<T: TimerQueue>(
	bench: &mut Bench<T>,
	warm: u64,
	iters: u64,
	rearm: bool,
	mut op: impl FnMut(&mut Bench<T>, u64),
) -> Duration {
	let mut start = Instant::now();
	for i in 0..warm + iters {
		if i == warm {
			start = Instant::now();
		}
		op(bench, i);
		if i % OPS_PER_TURN == OPS_PER_TURN - 1 {
			let fired = bench.turn();
			// The first round (the warm-up) fires the timers whose random first deadline came
			// before their first re-arm; after it, nothing may fire, or the case is not pure.
			assert!(
				i < warm || fired == 0,
				"a timer fired in a workload meant to never fire"
			);
			if rearm {
				bench.rearm_fired();
			} else {
				FIRED.with(|fired| fired.borrow_mut().clear());
			}
		}
	}
	start.elapsed()
}

fn timers_reset<T: TimerQueue>(live: u64, iters: u64) -> Run {
	let mut bench = Bench::<T>::new(live, &RESET_DELAYS);
	let elapsed = timed_ops(&mut bench, live.max(1_000), iters, true, Bench::reset_op);
	assert!(T::NULL || bench.queue.len() as u64 == live);
	Run { ops: iters, elapsed }
}

fn timers_churn<T: TimerQueue>(live: u64, iters: u64) -> Run {
	let mut bench = Bench::<T>::new(live, &CHURN_DELAYS);
	let elapsed = timed_ops(&mut bench, live.max(1_000), iters, false, Bench::churn_op);
	assert!(T::NULL || bench.queue.len() as u64 == live);
	Run { ops: iters, elapsed }
}

fn timers_expire<T: TimerQueue>(live: u64, turns: u64) -> Run {
	let mut bench = Bench::<T>::new(live, &EXPIRE_DELAYS);
	// One longest delay of turns first, so every timer has fired and been re-armed once.
	let warm = EXPIRE_DELAYS[EXPIRE_DELAYS.len() - 1];
	let mut fired = 0;
	let mut start = Instant::now();
	for turn in 0..warm + turns {
		if turn == warm {
			start = Instant::now();
		}
		let n = bench.turn();
		bench.rearm_fired();
		if turn >= warm {
			fired += n;
		}
	}
	let elapsed = start.elapsed();
	assert_eq!(bench.queue.len() as u64, live);
	Run { ops: fired, elapsed }
}

// ---------------------------------------------------------------------------------------------
// Measuring and reporting
// ---------------------------------------------------------------------------------------------

/// One measured case.
struct Row<'a> {
	case: &'a Case,
	value: f64,
	ops: u64,
}

/// How the numbers are taken.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
	/// Exact user-space instructions under callgrind.
	Count,
	/// Wall time of the measured loop, in this process.
	Time,
}

impl Mode {
	fn unit(self) -> &'static str {
		match self {
			Self::Count => "instructions/op",
			Self::Time => "ns/op",
		}
	}

	fn source(self) -> &'static str {
		match self {
			Self::Count => counter::Source::Callgrind.describe(),
			Self::Time => "std Instant around the measured loop, median of 5 runs (wall time)",
		}
	}
}

fn main() -> ExitCode {
	let args: Vec<String> = std::env::args().skip(1).collect();
	if counter::is_child() {
		return child(&args);
	}
	let mut mode = None;
	let mut save = false;
	let mut filters = Vec::new();
	let mut args = args.into_iter();
	while let Some(arg) = args.next() {
		match arg.as_str() {
			"--bench" => {}
			"--save" => save = true,
			"--source" => match args.next().as_deref() {
				Some("callgrind") => mode = Some(Mode::Count),
				Some("time" | "task-clock") => mode = Some(Mode::Time),
				other => {
					eprintln!("kio: unknown source {other:?} (callgrind, time)");
					return ExitCode::FAILURE;
				}
			},
			flag if flag.starts_with('-') => {
				eprintln!("kio: unknown flag {flag}; usage: kio [--source callgrind|time] [--save] [FILTER...]");
				return ExitCode::FAILURE;
			}
			filter => filters.push(filter.to_owned()),
		}
	}
	let all = cases();
	let selected: Vec<&Case> = all
		.iter()
		.filter(|case| filters.is_empty() || filters.iter().any(|f| case.id().contains(f.as_str())))
		.collect();
	if save && selected.len() != all.len() {
		eprintln!("kio: --save writes the full result set; drop the filter");
		return ExitCode::FAILURE;
	}
	if cfg!(debug_assertions) {
		// What `cargo test --all-targets` builds: run every case briefly, with its assertions.
		for case in &selected {
			(case.run)(case.param, case.iters.min(3));
		}
		eprintln!(
			"kio: {} cases ran (an unoptimized build prints no numbers)",
			selected.len()
		);
		return ExitCode::SUCCESS;
	}
	let mode = mode.unwrap_or_else(|| match counter::valgrind_available() {
		true => Mode::Count,
		false => {
			eprintln!("kio: valgrind not found: timing instead (ns/op, wall time, not instructions)");
			Mode::Time
		}
	});
	let mut rows = Vec::new();
	for case in selected {
		let measured = match mode {
			Mode::Count => count(case),
			Mode::Time => Ok(time(case)),
		};
		match measured {
			Ok((value, ops)) => {
				println!("{:<28} {value:>12.1} {} per {}", case.id(), mode.unit(), case.op);
				rows.push(Row { case, value, ops });
			}
			Err(e) => {
				eprintln!("kio: {}: {e}", case.id());
				return ExitCode::FAILURE;
			}
		}
	}
	if save && let Err(e) = table(&rows, mode).save() {
		eprintln!("kio: cannot save results: {e}");
		return ExitCode::FAILURE;
	}
	ExitCode::SUCCESS
}

/// A callgrind child: runs case `id` for `iters` iterations and says how many ops it did.
fn child(args: &[String]) -> ExitCode {
	let [id, iters] = args else {
		eprintln!("kio: a child takes CASE ITERS");
		return ExitCode::FAILURE;
	};
	let Ok(iters) = iters.parse::<u64>() else {
		eprintln!("kio: bad iteration count {iters}");
		return ExitCode::FAILURE;
	};
	let all = cases();
	let Some(case) = all.iter().find(|case| case.id() == *id) else {
		eprintln!("kio: no case {id}");
		return ExitCode::FAILURE;
	};
	let run = (case.run)(case.param, iters);
	println!("ops={}", run.ops);
	ExitCode::SUCCESS
}

/// Instructions per op of `case` under callgrind (N iterations minus 0), and the ops counted.
fn count(case: &Case) -> Result<(f64, u64), String> {
	let run = |iters: u64| -> Result<(u64, u64), String> {
		let (total, stdout) = counter::callgrind_run(&[case.id(), iters.to_string()]).map_err(|e| e.to_string())?;
		let ops = stdout
			.lines()
			.find_map(|line| line.strip_prefix("ops="))
			.and_then(|ops| ops.trim().parse().ok())
			.ok_or_else(|| format!("no op count in the child's output: {stdout}"))?;
		Ok((total, ops))
	};
	let (total_n, ops_n) = run(case.iters)?;
	let (total_0, ops_0) = run(0)?;
	if ops_n <= ops_0 || total_n < total_0 {
		return Err(format!(
			"no ops to divide by (N: {total_n} Ir, {ops_n} ops; 0: {total_0} Ir, {ops_0} ops)"
		));
	}
	Ok(((total_n - total_0) as f64 / (ops_n - ops_0) as f64, ops_n - ops_0))
}

/// Nanoseconds per op of `case`'s measured loop, median of [`TIME_SAMPLES`] runs in this process.
fn time(case: &Case) -> (f64, u64) {
	let iters = case.iters * TIME_SCALE;
	let mut ops = 0;
	let mut samples: Vec<f64> = (0..TIME_SAMPLES)
		.map(|_| {
			let run = (case.run)(case.param, iters);
			ops = run.ops;
			run.elapsed.as_nanos() as f64 / run.ops.max(1) as f64
		})
		.collect();
	(median(&mut samples), ops)
}

fn table(rows: &[Row<'_>], mode: Mode) -> Table {
	Table {
		name: "kio".into(),
		title: "kio: executor, waiters and timers".into(),
		unit: mode.unit().into(),
		source: mode.source().into(),
		notes: "What each case isolates is in the harness's docs (`bench/src/bin/kio.rs`). Every executor \
			case includes one driver poll per cycle (`task/yield` alone); `timers/*/null` is the timer \
			workloads' own share (deadline arithmetic, waker clones, loop turns), included in the \
			`kio` rows."
			.into(),
		columns: ["case", "param", "value", "per op", "ops counted"]
			.map(String::from)
			.to_vec(),
		rows: rows
			.iter()
			.map(|row| {
				vec![
					format!("`{}`", row.case.name),
					format!("{} {}", row.case.param, row.case.param_name),
					format!("{:.1}", row.value),
					row.case.op.to_owned(),
					row.ops.to_string(),
				]
			})
			.collect(),
		after: String::new(),
	}
}
