//! Loom models for every cross-thread handoff of `kio::sync` and the foreign waiter.
//!
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p kio --release --test loom`.
//! Under `cfg(loom)` the primitives' `Arc`, `Mutex` and atomics come from loom. No future here
//! is polled by a kio task, so every poll parks through a *foreign* waiter (`Waiter::new(waker)`,
//! via `kio::wait` or `Park`). The lost-wake assertion is termination: a wake that never comes
//! leaves [`block_on`] blocked in loom's `Notify::wait`, which loom reports as a deadlock. Each
//! model also asserts the values it observed.
//!
//! Every model that polls a future runs twice (see [`Wakers`]): with one stable waker, so
//! `Park` keeps its waiter and re-registers through the record fast path, and with a fresh waker
//! per poll (what `loom::future::block_on`'s waker amounts to: it fails `will_wake` between
//! polls), so `Park` retires its waiter before every re-poll. The `Notify` behind the wakers may
//! wake spuriously, so loom also explores re-polls that no drain caused.
//!
//! Two-thread models explore every interleaving; three-thread models (and the two-pop close)
//! bound preemptions at 4 or 5 (`LOOM_MAX_PREEMPTIONS` overrides), which keeps the whole file
//! near a minute in release.
//!
//! Producer / Consumer:
//! - `write_vs_close`: a write races a close; the consumer waiting for the written value gets it
//!   exactly when the write succeeded, `Closed` otherwise, and then always hears the close.
//! - `two_racing_writers`: two writers on two threads; the consumer waiting for both writes
//!   hears the second (a live producer stays on the main thread, so no close can mask it).
//! - `last_producer_drop_wakes_consumer`: two producer clones dropped on two threads; a consumer
//!   parked in `wait` and one parked in `closed` both hear the close of whichever drop is last.
//! - `first_consumer_wakes_used`: `used` parked on the main thread hears `consume` on another.
//! - `last_consumer_drop_wakes_unused`: two consumer clones dropped on two threads; `unused`
//!   hears the last drop.
//!
//! Queue:
//! - `parked_pop_hears_push`: a popper (main) against a pusher (another thread).
//! - `parked_push_hears_pop`: a pusher parked on a full bounded queue against a popper that
//!   frees space.
//! - `close_wakes_parked_pop`: a push then a close on another thread; the popper gets the item,
//!   then the end.
//! - `close_wakes_parked_push`: a pusher parked on a full queue gets its item back on close.
//!
//! Foreign waiter:
//! - `foreign_wake_races_park_poll`: a future holding a `Park` polls (retiring or reusing its
//!   waiter, registering under the lock) while another thread mutates and drains the same list
//!   twice; no wake is lost across the re-registration.
//! - `foreign_wake_races_wait_poll`: the same with `kio::wait`, and two draining threads.
//! - `reused_waiter_hears_drained_list_again`: one `Waiter::new(waker)` held by hand for the
//!   whole model (its waker a loom `Notify`, so it never retires) registers, re-polls (the
//!   record says present: no second entry), is drained and woken, re-registers (a stale record:
//!   a new entry) and must hear the second drain too.
//!
//! Oracle check:
//! - `lost_wake_is_reported`: a writer that drains before it mutates loses a wake, and loom
//!   must report the deadlock.

// After the docs, not before: a crate that `cfg` strips first loses its docs too, and `missing_docs`
// would fail the normal `cargo clippy --all-targets -- -D warnings`.
#![cfg(loom)]

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc as StdArc;
use std::task::{Context, Poll, Wake, Waker};

use kio::sync::{Closed, Consumer, Lock, Producer, PushError, Queue};
use kio::{Park, Waiter, WaiterList};
use loom::sync::Notify;
use loom::thread;

/// How [`block_on`] hands wakers to the future it polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wakers {
	/// One waker for every poll, like a real executor: `Park` keeps its waiter and re-registers
	/// through the record fast path.
	Stable,
	/// A new waker (same wake target, new identity) for every poll, like `loom::future::block_on`
	/// whose waker fails `will_wake`: `Park` retires its waiter and re-registers from scratch.
	Fresh,
}

/// A waker whose wakes land in a loom [`Notify`] (which may also wake spuriously, so every
/// model is re-polled without a wake too).
struct Wakeup(StdArc<Notify>);

impl Wake for Wakeup {
	fn wake(self: StdArc<Self>) {
		self.0.notify();
	}

	fn wake_by_ref(self: &StdArc<Self>) {
		self.0.notify();
	}
}

/// `loom::future::block_on` (which needs loom's `futures` feature), with a choice of wakers. A
/// future that never gets woken blocks in `Notify::wait`: loom reports the deadlock.
fn block_on<F: Future>(wakers: Wakers, future: F) -> F::Output {
	let notify = StdArc::new(Notify::new());
	let mut future = pin!(future);
	let mut waker = Waker::from(StdArc::new(Wakeup(notify.clone())));
	loop {
		if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
			return output;
		}
		notify.wait();
		if wakers == Wakers::Fresh {
			waker = Waker::from(StdArc::new(Wakeup(notify.clone())));
		}
	}
}

/// Every interleaving: for the two-thread models, which finish in about a second regardless.
const EXHAUSTIVE: Option<usize> = None;

/// Checks `f` under loom, with `bound` preemptions per execution unless `LOOM_MAX_PREEMPTIONS`
/// sets a bound. Three-thread models take a bound so the file stays within a minute or so.
fn check(bound: Option<usize>, f: impl Fn() + Send + Sync + 'static) {
	let mut builder = loom::model::Builder::new();
	if builder.preemption_bound.is_none() {
		builder.preemption_bound = bound;
	}
	builder.check(f);
}

/// Checks `f` once per [`Wakers`] mode.
fn model(bound: Option<usize>, f: impl Fn(Wakers) + Send + Sync + Copy + 'static) {
	for wakers in [Wakers::Stable, Wakers::Fresh] {
		check(bound, move || f(wakers));
	}
}

/// Polls two futures to completion on one waker (each keeps its own `Park`).
fn join<A: Future, B: Future>(a: A, b: B) -> impl Future<Output = (A::Output, B::Output)> {
	let mut a = Box::pin(a);
	let mut b = Box::pin(b);
	let (mut out_a, mut out_b) = (None, None);
	std::future::poll_fn(move |cx| {
		if out_a.is_none()
			&& let Poll::Ready(value) = a.as_mut().poll(cx)
		{
			out_a = Some(value);
		}
		if out_b.is_none()
			&& let Poll::Ready(value) = b.as_mut().poll(cx)
		{
			out_b = Some(value);
		}
		match (out_a.take(), out_b.take()) {
			(Some(a), Some(b)) => Poll::Ready((a, b)),
			(a, b) => {
				(out_a, out_b) = (a, b);
				Poll::Pending
			}
		}
	})
}

// ---- Producer / Consumer ----

#[test]
fn write_vs_close() {
	model(Some(4), |wakers| {
		let producer = Producer::new(0u32);
		let consumer = producer.consume();
		let writer = producer.clone();
		let write = thread::spawn(move || writer.write().map(|mut value| *value = 1).is_ok());
		let closer = thread::spawn(move || producer.close());
		let seen = block_on(wakers, async {
			let seen = consumer
				.wait(|&value| if value == 1 { Poll::Ready(value) } else { Poll::Pending })
				.await;
			consumer.closed().await;
			seen
		});
		let wrote = write.join().unwrap();
		assert_eq!(closer.join().unwrap(), Ok(()));
		assert_eq!(seen, if wrote { Ok(1) } else { Err(Closed) });
		assert!(consumer.is_closed());
	});
}

#[test]
fn two_racing_writers() {
	model(Some(4), |wakers| {
		let producer = Producer::new(0u32);
		let consumer = producer.consume();
		let writers: Vec<_> = (0..2)
			.map(|_| {
				let writer = producer.clone();
				thread::spawn(move || *writer.write().unwrap() += 1)
			})
			.collect();
		let seen = block_on(
			wakers,
			consumer.wait(|&value| if value == 2 { Poll::Ready(value) } else { Poll::Pending }),
		);
		assert_eq!(seen, Ok(2));
		for writer in writers {
			writer.join().unwrap();
		}
		assert!(!consumer.is_closed());
		assert_eq!(*consumer.read(), 2);
	});
}

#[test]
fn last_producer_drop_wakes_consumer() {
	model(Some(4), |wakers| {
		let producer = Producer::new(0u32);
		let consumer = producer.consume();
		let clone = producer.clone();
		let drops = [
			thread::spawn(move || drop(producer)),
			thread::spawn(move || drop(clone)),
		];
		let (value, ()) = block_on(
			wakers,
			join(consumer.wait(|_: &u32| Poll::<()>::Pending), consumer.closed()),
		);
		assert_eq!(value, Err(Closed));
		assert!(consumer.is_closed());
		for dropper in drops {
			dropper.join().unwrap();
		}
	});
}

#[test]
fn first_consumer_wakes_used() {
	model(EXHAUSTIVE, |wakers| {
		let producer = Producer::new(0u32);
		let other = producer.clone();
		let consumer = thread::spawn(move || other.consume());
		block_on(wakers, producer.used());
		assert_eq!(producer.consumers(), 1);
		assert!(!producer.is_closed());
		let consumer: Consumer<u32> = consumer.join().unwrap();
		assert!(!consumer.is_closed());
	});
}

#[test]
fn last_consumer_drop_wakes_unused() {
	model(Some(5), |wakers| {
		let producer = Producer::new(0u32);
		let consumer = producer.consume();
		let clone = consumer.clone();
		assert_eq!(producer.consumers(), 2);
		let drops = [
			thread::spawn(move || drop(consumer)),
			thread::spawn(move || drop(clone)),
		];
		block_on(wakers, producer.unused());
		assert_eq!(producer.consumers(), 0);
		assert!(!producer.is_closed());
		for dropper in drops {
			dropper.join().unwrap();
		}
	});
}

// ---- Queue ----

#[test]
fn parked_pop_hears_push() {
	model(EXHAUSTIVE, |wakers| {
		let queue = Queue::unbounded();
		let pusher = queue.clone();
		let push = thread::spawn(move || pusher.try_push(7u32));
		assert_eq!(block_on(wakers, queue.pop()), Some(7));
		assert_eq!(push.join().unwrap(), Ok(()));
		assert!(queue.is_empty());
	});
}

#[test]
fn parked_push_hears_pop() {
	model(EXHAUSTIVE, |wakers| {
		let queue = Queue::bounded(1);
		queue.try_push(1u32).unwrap();
		let popper = queue.clone();
		let pop = thread::spawn(move || popper.try_pop());
		assert_eq!(block_on(wakers, queue.push(2)), Ok(()));
		assert_eq!(pop.join().unwrap(), Ok(Some(1)));
		assert_eq!(queue.try_pop(), Ok(Some(2)));
	});
}

#[test]
fn close_wakes_parked_pop() {
	model(Some(5), |wakers| {
		let queue = Queue::unbounded();
		let other = queue.clone();
		let closer = thread::spawn(move || {
			other.try_push(1u32).unwrap();
			other.close();
		});
		let popped = block_on(wakers, async { (queue.pop().await, queue.pop().await) });
		assert_eq!(popped, (Some(1), None));
		closer.join().unwrap();
		assert_eq!(queue.try_pop(), Err(Closed));
	});
}

#[test]
fn close_wakes_parked_push() {
	model(EXHAUSTIVE, |wakers| {
		let queue = Queue::bounded(1);
		queue.try_push(1u32).unwrap();
		let other = queue.clone();
		let closer = thread::spawn(move || other.close());
		assert_eq!(block_on(wakers, queue.push(2)), Err(PushError::Closed(2)));
		closer.join().unwrap();
		assert_eq!(queue.try_pop(), Ok(Some(1)));
		assert_eq!(queue.try_pop(), Err(Closed));
	});
}

// ---- The foreign waiter ----

/// A counter and the list of those waiting for it to grow.
#[derive(Default)]
struct Counter {
	value: u32,
	list: WaiterList,
}

/// Bumps the counter and drains its list under the lock; wakes after releasing it.
fn bump(state: &Lock<Counter>) {
	let wakes = {
		let mut state = state.lock();
		state.value += 1;
		state.list.take()
	};
	drop(wakes);
}

/// Observes-or-registers under one lock: ready once the counter reaches `target`.
fn poll_at_least(state: &Lock<Counter>, waiter: &Waiter, target: u32) -> Poll<u32> {
	let mut state = state.lock();
	if state.value >= target {
		return Poll::Ready(state.value);
	}
	state.list.register(waiter);
	Poll::Pending
}

/// A hand-written future that keeps its `Park` in a field disjoint from the polled state.
struct AtLeast {
	state: Lock<Counter>,
	target: u32,
	park: Park,
}

impl Future for AtLeast {
	type Output = u32;

	fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
		let this = self.get_mut();
		let (state, target) = (&this.state, this.target);
		this.park.poll(cx, |waiter| poll_at_least(state, waiter, target))
	}
}

#[test]
fn foreign_wake_races_park_poll() {
	model(EXHAUSTIVE, |wakers| {
		let state = Lock::<Counter>::default();
		let other = state.clone();
		let bumper = thread::spawn(move || {
			bump(&other);
			bump(&other);
		});
		let mut future = AtLeast {
			state: state.clone(),
			target: 2,
			park: Park::new(),
		};
		assert_eq!(block_on(wakers, &mut future), 2);
		bumper.join().unwrap();
		assert_eq!(state.lock().value, 2);
		// The mode took the path it claims: a stable waker never retires the held waiter (key 0).
		let park = format!("{:?}", future.park);
		assert!(park.contains("target: \"foreign\""), "{park}");
		if wakers == Wakers::Stable {
			assert!(park.contains("key: 0,"), "{park}");
		}
	});
}

#[test]
fn foreign_wake_races_wait_poll() {
	model(Some(4), |wakers| {
		let state = Lock::<Counter>::default();
		let bumpers: Vec<_> = (0..2)
			.map(|_| {
				let other = state.clone();
				thread::spawn(move || bump(&other))
			})
			.collect();
		assert_eq!(
			block_on(wakers, kio::wait(|waiter| poll_at_least(&state, waiter, 2))),
			2
		);
		for bumper in bumpers {
			bumper.join().unwrap();
		}
	});
}

/// Registers `waiter` for the counter reaching `target`, polling twice per park the way a
/// spuriously woken task does: the second poll hits the record (no new entry) unless a drain
/// came in between. Returns once the counter is there; a lost wake deadlocks `Notify::wait`.
fn park_until(state: &Lock<Counter>, waiter: &Waiter, notify: &Notify, target: u32) -> u32 {
	loop {
		for _ in 0..2 {
			let mut state = state.lock();
			if state.value >= target {
				return state.value;
			}
			state.list.register(waiter);
			// Records dedup: however often it re-polls, the waiter holds one entry, and a drain
			// (which empties the list) makes the next registration append again.
			assert_eq!(state.list.len(), 1);
			assert_eq!(state.list.live(), 1);
			assert_eq!(waiter.records(), 1);
		}
		notify.wait();
	}
}

#[test]
fn reused_waiter_hears_drained_list_again() {
	check(EXHAUSTIVE, || {
		let state = Lock::<Counter>::default();
		let notify = StdArc::new(Notify::new());
		// Held by hand for the whole model and never retired: every registration after the
		// first goes through the record (Present before a drain, stale after one).
		let waiter = Waiter::new(Waker::from(StdArc::new(Wakeup(notify.clone()))));
		let other = state.clone();
		let bumper = thread::spawn(move || {
			bump(&other);
			bump(&other);
		});
		let first = park_until(&state, &waiter, &notify, 1);
		assert!((1..=2).contains(&first));
		assert_eq!(park_until(&state, &waiter, &notify, 2), 2);
		assert!(!waiter.is_overflowed());
		assert!(format!("{waiter:?}").contains("key: 0,"), "{waiter:?}");
		bumper.join().unwrap();
		assert_eq!(state.lock().list.live(), 0);
	});
}

/// The oracle itself: a writer that drains *before* it mutates (in two critical sections) lets a
/// poll in between register on the emptied list and miss the mutation. Loom must report that
/// lost wake as a deadlock, or every model above proves nothing.
#[test]
#[should_panic(expected = "deadlock")]
fn lost_wake_is_reported() {
	check(EXHAUSTIVE, || {
		let state = Lock::<Counter>::default();
		let other = state.clone();
		let broken = thread::spawn(move || {
			let wakes = other.lock().list.take();
			drop(wakes);
			other.lock().value += 1;
		});
		assert_eq!(
			block_on(Wakers::Stable, kio::wait(|waiter| poll_at_least(&state, waiter, 1))),
			1
		);
		broken.join().unwrap();
	});
}
