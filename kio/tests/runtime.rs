//! The executor's contracts on a real ring: cross-thread unpark, woken-while-running, the budget
//! against starvation, teardown, join handles, cross-worker spawns and the refusal path.
//!
//! Hangs fail through nextest's timeout (`.config/nextest.toml`); every wait here is on an
//! explicit signal or the runtime's clock, never a sleep.

use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use kio::sync::{Producer, Queue};
use kio::{Builder, JoinError, Runtime};

fn single() -> Runtime {
	Builder::single().build().expect("runtime starts")
}

/// Spins (yielding the CPU) until `cond` holds; a bounded wait so a broken test fails, not hangs.
fn spin_until(what: &str, cond: impl Fn() -> bool) {
	let deadline = Instant::now() + Duration::from_secs(20);
	while !cond() {
		assert!(Instant::now() < deadline, "timed out waiting for {what}");
		std::thread::yield_now();
	}
}

#[test]
fn a_wake_from_another_thread_wakes_a_parked_worker() {
	let rt = single();
	let queue = Queue::unbounded();
	let pusher = queue.clone();
	let monitor = rt.monitor(0).unwrap();
	let thread = std::thread::spawn(move || {
		// Push only once the worker is parked in io_uring_enter, so the unpark path is the one
		// under test.
		spin_until("the worker to park", || monitor.is_parked());
		pusher.try_push(42).unwrap();
	});
	let got = rt.block_on(queue.pop());
	thread.join().unwrap();
	assert_eq!(got, Some(42));
	assert!(rt.stats(0).parks >= 1, "the worker parked: {:?}", rt.stats(0));
}

#[test]
fn a_task_woken_by_io_after_a_park_sees_the_time_it_was_woken_at() {
	let rt = single();
	let monitor = rt.monitor(0).unwrap();
	let (seen, sent, slept, asked) = rt.block_on(async {
		let socket = kio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).expect("binds");
		let to = socket.local_addr();
		let thread = std::thread::spawn(move || {
			// The worker read its clock before it parked; `sent` is later than that reading.
			spin_until("the worker to park", || monitor.is_parked());
			let sent = Instant::now();
			let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("binds");
			peer.send_to(b"wake", to).expect("sends");
			sent
		});
		let mut buf = [0u8; 16];
		socket.recv_from(&mut buf).await.expect("receives");
		let seen = kio::time::now();
		// A sleep measured from a stale time would end early, by however long the worker slept.
		// Measured on the runtime's clock (a sleep's deadline is the loop's time plus its length):
		// on `Instant::now()`, read a moment after the loop's time, it could look a few µs short
		// (4.946 ms of 5 once in CI) with nothing wrong.
		let asked = Duration::from_millis(5);
		let from = kio::time::now();
		kio::time::sleep(asked).await;
		let slept = kio::time::now() - from;
		let sent = thread.join().expect("the sender does not panic");
		(seen, sent, slept, asked)
	});
	assert!(seen >= sent, "the loop's time is {:?} before the wake", sent - seen);
	assert!(slept >= asked, "a {asked:?} sleep ended after {slept:?}");
}

#[test]
fn many_cross_thread_wakes_are_all_delivered() {
	let rt = single();
	let queue = Queue::unbounded();
	let pusher = queue.clone();
	let thread = std::thread::spawn(move || {
		for i in 0..10_000u32 {
			pusher.try_push(i).unwrap();
			if i % 64 == 0 {
				std::thread::yield_now();
			}
		}
		pusher.close();
	});
	let sum = rt.block_on(async {
		let mut sum = 0u64;
		while let Some(i) = queue.pop().await {
			sum += u64::from(i);
		}
		sum
	});
	thread.join().unwrap();
	assert_eq!(sum, (0..10_000u64).sum());
}

#[test]
fn invariant_4_woken_while_running_a_task_woken_during_its_poll_is_polled_again() {
	let rt = single();
	let polls = Rc::new(Cell::new(0));
	let counted = polls.clone();
	let done = rt.block_on(async move {
		let task = kio::spawn(poll_fn(move |cx| {
			counted.set(counted.get() + 1);
			if counted.get() == 1 {
				// The wake lands while this poll runs; the executor must poll again.
				cx.waker().wake_by_ref();
				return Poll::Pending;
			}
			Poll::Ready(counted.get())
		}));
		task.await.unwrap()
	});
	assert_eq!(done, 2);
	assert_eq!(polls.get(), 2);
}

#[test]
fn invariant_4_woken_while_running_a_list_drained_during_the_registering_poll_causes_another_poll() {
	let rt = single();
	let polls = rt.block_on(rt.spawn(async {
		let producer = Producer::new(0u32);
		let consumer = producer.consume();
		let mut polls = 0;
		kio::wait(|waiter| {
			polls += 1;
			match consumer.poll(waiter, |&v| if v > 0 { Poll::Ready(()) } else { Poll::Pending }) {
				Poll::Ready(_) => Poll::Ready(polls),
				Poll::Pending => {
					if polls == 1 {
						// Drains the list this poll just registered on: the task is running, so
						// the wake must turn into another poll.
						*producer.write().unwrap() = 1;
					}
					Poll::Pending
				}
			}
		})
		.await
	}));
	assert_eq!(polls.unwrap(), 2);
}

#[test]
fn a_self_waking_task_does_not_starve_a_due_timer() {
	let rt = Builder::single().paused_clock(true).build().unwrap();
	let fired = Rc::new(Cell::new(false));
	let spins = Rc::new(Cell::new(0u64));
	let (flag, counter) = (fired.clone(), spins.clone());
	let spins_at_fire = rt.block_on(async move {
		let spinner = kio::spawn(async move {
			// Advances the paused clock 1 ms per poll and never parks.
			while !flag.get() {
				counter.set(counter.get() + 1);
				assert!(counter.get() < 100_000, "the timer never fired: starved");
				kio::time::advance(Duration::from_millis(1));
				kio::yield_now().await;
			}
		});
		kio::time::sleep(Duration::from_millis(10)).await;
		fired.set(true);
		let at_fire = spins.get();
		spinner.await.unwrap();
		at_fire
	});
	// The timer is due after 10 spins; it must fire within the next loop turn, which runs at
	// most one budget of polls.
	assert!(spins_at_fire >= 10, "fired early: {spins_at_fire}");
	assert!(
		spins_at_fire <= 10 + 2 * kio::exec::DEFAULT_BUDGET as u64,
		"fired late: {spins_at_fire}"
	);
}

#[test]
fn a_self_waking_task_does_not_starve_a_timer_on_the_real_clock() {
	let rt = single();
	let stop = Rc::new(Cell::new(false));
	let flag = stop.clone();
	rt.block_on(async move {
		let spinner = kio::spawn(async move {
			while !flag.get() {
				kio::yield_now().await;
			}
		});
		kio::time::sleep(Duration::from_millis(2)).await;
		stop.set(true);
		spinner.await.unwrap();
	});
}

#[test]
fn a_self_waking_task_does_not_starve_a_cross_thread_wake() {
	let rt = single();
	let queue = Queue::unbounded();
	let pusher = queue.clone();
	let started = Arc::new(AtomicBool::new(false));
	let go = started.clone();
	let thread = std::thread::spawn(move || {
		spin_until("the spinner to start", || go.load(Ordering::SeqCst));
		pusher.try_push(()).unwrap();
	});
	let stop = Rc::new(Cell::new(false));
	let flag = stop.clone();
	rt.block_on(async move {
		let spinner = kio::spawn(async move {
			started.store(true, Ordering::SeqCst);
			while !flag.get() {
				kio::yield_now().await;
			}
		});
		queue.pop().await.unwrap();
		stop.set(true);
		spinner.await.unwrap();
	});
	thread.join().unwrap();
}

/// The loop turn each of `tasks` spawned-at-once tasks first ran in, on a ring of
/// `ring_entries`.
fn turns_of_spawned(tasks: usize, ring_entries: u32) -> Vec<u64> {
	let rt = Builder::single().ring_entries(ring_entries).build().unwrap();
	rt.block_on(async move {
		let ran: Rc<std::cell::RefCell<Vec<u64>>> = Rc::default();
		let handles: Vec<_> = (0..tasks)
			.map(|_| {
				let ran = ran.clone();
				kio::spawn(async move { ran.borrow_mut().push(kio::stats().turns) })
			})
			.collect();
		for handle in handles {
			handle.await.unwrap();
		}
		Rc::try_unwrap(ran).unwrap().into_inner()
	})
}

#[test]
fn a_turn_polls_every_task_queued_when_it_began() {
	// 200 tasks are three budgets' worth: they still run in one sweep, with one ring enter after
	// it rather than three between.
	let turns = turns_of_spawned(200, 256);
	assert_eq!(turns.len(), 200);
	assert!(
		turns.iter().all(|&turn| turn == turns[0]),
		"the sweep was split: {turns:?}"
	);
}

#[test]
fn a_sweep_stops_at_the_submission_queue_s_size() {
	// What the swept tasks stage must fit in the submission queue: 64 entries here, so 200
	// queued tasks take four turns (the first three of 64 each).
	let turns = turns_of_spawned(200, 64);
	let mut per_turn = std::collections::BTreeMap::<u64, usize>::new();
	for turn in turns {
		*per_turn.entry(turn).or_default() += 1;
	}
	let sizes: Vec<usize> = per_turn.into_values().collect();
	assert_eq!(sizes, [64, 64, 64, 8], "tasks per turn");
}

struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
	fn drop(&mut self) {
		self.0.fetch_add(1, Ordering::SeqCst);
	}
}

#[test]
fn dropping_a_runtime_releases_pending_tasks_and_timers() {
	let dropped = Arc::new(AtomicUsize::new(0));
	let rt = Builder::new().workers(2).pin(false).build().unwrap();
	let never = Queue::<()>::unbounded();
	let handles: Vec<_> = (0..10)
		.map(|i| {
			let guard = DropCount(dropped.clone());
			let never = never.clone();
			rt.spawn(async move {
				let _guard = guard;
				if i % 2 == 0 {
					kio::time::sleep(Duration::from_secs(3600)).await;
				} else {
					never.pop().await;
				}
			})
		})
		.collect();
	let remote_guard = DropCount(dropped.clone());
	let remote_started = Arc::new(AtomicBool::new(false));
	let started = remote_started.clone();
	let remote = rt.spawn_on(1, move || async move {
		let _guard = remote_guard;
		started.store(true, Ordering::SeqCst);
		kio::time::sleep(Duration::from_secs(3600)).await;
	});
	// Let every local task reach its wait, and the remote one start.
	rt.block_on(async {
		for _ in 0..4 {
			kio::yield_now().await;
		}
	});
	spin_until("the remote task to start", || remote_started.load(Ordering::SeqCst));
	assert_eq!(dropped.load(Ordering::SeqCst), 0);
	drop(rt);
	assert_eq!(
		dropped.load(Ordering::SeqCst),
		11,
		"every pending task was dropped with the runtime"
	);
	for handle in handles {
		assert!(handle.is_finished());
	}
	// The remote task's output channel closed without a value.
	let rt = single();
	assert!(rt.block_on(remote).unwrap_err().is_cancelled());
}

#[test]
fn join_handles_detach_abort_and_report_panics() {
	let rt = single();
	rt.block_on(async {
		// Detached: dropping the handle does not stop the task.
		let ran = Rc::new(Cell::new(false));
		let flag = ran.clone();
		drop(kio::spawn(async move {
			kio::yield_now().await;
			flag.set(true);
		}));
		for _ in 0..3 {
			kio::yield_now().await;
		}
		assert!(ran.get(), "a detached task keeps running");

		// Abort: the future is dropped and the handle says Cancelled.
		let dropped = Arc::new(AtomicUsize::new(0));
		let guard = DropCount(dropped.clone());
		let never = Queue::<()>::unbounded();
		let waiting = never.clone();
		let task = kio::spawn(async move {
			let _guard = guard;
			waiting.pop().await;
		});
		kio::yield_now().await;
		task.abort();
		assert!(task.await.unwrap_err().is_cancelled());
		assert_eq!(dropped.load(Ordering::SeqCst), 1);

		// Panic: caught and reported; the worker keeps running.
		let task = kio::spawn(async { panic!("boom") });
		match task.await {
			Err(JoinError::Panicked(panic)) => assert_eq!(panic.into_inner().downcast_ref::<&str>(), Some(&"boom")),
			other => panic!("expected a panic, got {other:?}"),
		}
		// A JoinError is Send + Sync: `?` carries it into a Box<dyn Error + Send + Sync> (and so
		// into anyhow), its message with it.
		let boxed: Box<dyn std::error::Error + Send + Sync> =
			kio::spawn(async { panic!("boom") }).await.unwrap_err().into();
		assert_eq!(boxed.to_string(), "task panicked: boom");
		assert_eq!(kio::spawn(async { 5 }).await.unwrap(), 5);
	});
}

#[test]
fn a_consumer_on_another_worker_is_woken_by_a_producer_here() {
	let rt = Builder::new().workers(2).pin(false).build().unwrap();
	let producer = Producer::new(0u64);
	let consumer = producer.consume();
	let remote = rt.spawn_on(1, move || async move {
		assert_eq!(kio::worker_index(), 1);
		let mut last = 0;
		while let Ok(value) = consumer
			.wait(|&v| if v > last { Poll::Ready(v) } else { Poll::Pending })
			.await
		{
			last = value;
			if value == 1000 {
				break;
			}
		}
		last
	});
	let got = rt.block_on(async move {
		for i in 1..=1000 {
			*producer.write().unwrap() = i;
			if i % 100 == 0 {
				kio::yield_now().await;
			}
		}
		remote.await.unwrap()
	});
	assert_eq!(got, 1000);
}

#[test]
fn spawn_on_runs_on_every_worker() {
	let rt = Builder::new().workers(3).pin(true).build().unwrap();
	assert_eq!(rt.workers(), 3);
	let handles: Vec<_> = (0..3)
		.map(|i| rt.spawn_on(i, move || async move { (kio::worker_index(), i) }))
		.collect();
	let got = rt.block_on(async move {
		let mut got = Vec::new();
		for handle in handles {
			got.push(handle.await.unwrap());
		}
		got
	});
	assert_eq!(got, vec![(0, 0), (1, 1), (2, 2)]);
}

#[test]
fn the_paused_clock_jumps_to_the_next_timer_in_order() {
	let rt = Builder::single().paused_clock(true).build().unwrap();
	let order = rt.block_on(async {
		let start = kio::time::now();
		let log = Rc::new(std::cell::RefCell::new(Vec::new()));
		let tasks: Vec<_> = [30u64, 10, 20, 10]
			.into_iter()
			.enumerate()
			.map(|(i, ms)| {
				let log = log.clone();
				kio::spawn(async move {
					kio::time::sleep(Duration::from_millis(ms)).await;
					log.borrow_mut()
						.push((i, kio::time::now().duration_since(start).as_millis()));
				})
			})
			.collect();
		for task in tasks {
			task.await.unwrap();
		}
		log.take()
	});
	assert_eq!(order, vec![(1, 10), (3, 10), (2, 20), (0, 30)]);
}

#[test]
fn a_deadline_re_arms_in_place() {
	let rt = Builder::single().paused_clock(true).build().unwrap();
	rt.block_on(async {
		let start = kio::time::now();
		let mut deadline = kio::time::Deadline::new(Some(start + Duration::from_millis(50)));
		deadline.set(Some(start + Duration::from_millis(5)));
		deadline.elapsed().await;
		assert_eq!(kio::time::now() - start, Duration::from_millis(5));
		deadline.set(Some(start + Duration::from_millis(20)));
		deadline.elapsed().await;
		assert_eq!(kio::time::now() - start, Duration::from_millis(20));
		// Elapsed stays elapsed until re-armed.
		deadline.elapsed().await;
		assert_eq!(kio::time::now() - start, Duration::from_millis(20));
	});
}

#[test]
fn a_zero_sleep_completes_without_parking() {
	let rt = single();
	rt.block_on(async {
		let parks = kio::stats().parks;
		for _ in 0..100 {
			kio::time::sleep(Duration::ZERO).await;
		}
		assert_eq!(kio::stats().parks, parks);
	});
}

#[test]
fn a_missing_ring_feature_is_refused_by_name() {
	for feature in [
		"IORING_SETUP_SINGLE_ISSUER",
		"IORING_SETUP_COOP_TASKRUN",
		"IORING_SETUP_DEFER_TASKRUN",
	] {
		let err = Builder::single().deny_feature(feature).build().err().expect("refused");
		match &err {
			kio::Error::Unsupported { feature: missing, .. } => assert_eq!(*missing, feature),
			other => panic!("expected Unsupported, got {other:?}"),
		}
		assert!(err.to_string().contains(feature), "{err}");
	}
	// And the refusal left nothing behind: a runtime still starts.
	assert_eq!(single().block_on(async { 1 }), 1);
}

#[test]
fn block_on_may_borrow_from_the_caller() {
	let rt = single();
	let mut local = vec![1, 2, 3];
	rt.block_on(async {
		kio::yield_now().await;
		local.push(4);
	});
	assert_eq!(local, [1, 2, 3, 4]);
}

#[test]
fn a_runtime_kept_in_a_thread_local_drops_with_the_thread() {
	thread_local! {
		static RUNTIME: std::cell::RefCell<Option<Runtime>> = const { std::cell::RefCell::new(None) };
	}
	let thread = std::thread::spawn(|| {
		RUNTIME.with(|runtime| {
			let runtime = runtime
				.borrow_mut()
				.insert(single())
				.block_on(async { kio::spawn(async { 3 }).await.unwrap() });
			assert_eq!(runtime, 3);
		});
		RUNTIME.with(|runtime| {
			// A pending task and timer are released when the thread's locals are destroyed.
			let runtime = runtime.borrow();
			let pending = runtime
				.as_ref()
				.unwrap()
				.spawn(async { kio::time::sleep(Duration::from_secs(3600)).await });
			drop(pending);
		});
	});
	thread
		.join()
		.expect("dropping the runtime during thread-local destruction does not panic");
}

/// Asserts at drop that what it points at is still what it was: a future that borrows from
/// itself (an async fn awaiting a call that borrows its argument) reads through such pointers
/// when it drops.
struct StillThere<'a>(&'a [u8; 64], Rc<Cell<Option<bool>>>);

impl Drop for StillThere<'_> {
	fn drop(&mut self) {
		self.1.set(Some(self.0.iter().all(|&b| b == 0xa5)));
	}
}

#[test]
fn a_finished_or_aborted_task_s_future_drops_where_it_was_pinned() {
	single().block_on(async {
		for abort in [true, false] {
			let seen = Rc::new(Cell::new(None));
			let (report, gate) = (seen.clone(), Queue::<()>::unbounded());
			let waiting = gate.clone();
			let task = kio::spawn(async move {
				let bytes = [0xa5u8; 64];
				let _check = StillThere(&bytes, report);
				if abort {
					std::future::pending::<()>().await;
				}
				let _ = waiting.pop().await;
			});
			kio::yield_now().await;
			match abort {
				true => task.abort(),
				false => drop(gate.try_push(())),
			}
			let _ = task.await;
			// Moved out of its place before it dropped, it read whatever the place held next.
			assert_eq!(seen.get(), Some(true), "abort: {abort}");
		}
	});
}
