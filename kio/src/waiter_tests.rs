//! The waiter invariants, one test each (numbers as in the `waiter` module docs). Invariant 4
//! (woken while running) is the executor's: `tests/runtime.rs` names it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};

use super::*;

#[derive(Default)]
struct CountingWake(AtomicUsize);

impl Wake for CountingWake {
	fn wake(self: Arc<Self>) {
		self.0.fetch_add(1, Ordering::SeqCst);
	}
}

fn counting_waiter<const R: usize>() -> (Waiter<R>, Arc<CountingWake>) {
	let wakes = Arc::new(CountingWake::default());
	(Waiter::new(Waker::from(wakes.clone())), wakes)
}

#[test]
fn invariant_1_coverage_every_list_of_a_pending_poll_has_a_live_entry() {
	// Within the records, and past them (R = 2 with 5 lists): coverage never depends on R.
	let (waiter, wakes) = counting_waiter::<2>();
	let mut lists: Vec<WaiterList> = (0..5).map(|_| WaiterList::new()).collect();
	for list in &mut lists {
		list.register(&waiter);
	}
	assert!(lists.iter().all(|list| list.live() == 1));
	for (fired, list) in lists.iter_mut().enumerate() {
		list.wake();
		assert_eq!(wakes.0.load(Ordering::SeqCst), fired + 1);
	}
}

#[test]
fn invariant_2_record_soundness_present_only_while_the_entry_is_in_the_list() {
	let (waiter, wakes) = counting_waiter::<8>();
	let mut list = WaiterList::new();
	list.register(&waiter);
	list.register(&waiter);
	assert_eq!(
		list.len(),
		1,
		"a record at the list's epoch means present: no second entry"
	);

	// A drain moves the epoch on: the record now says absent, so the next register appends.
	list.take().wake();
	assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
	assert!(list.is_empty());
	list.register(&waiter);
	assert_eq!(list.len(), 1, "re-registered after the drain");
	list.wake();
	assert_eq!(wakes.0.load(Ordering::SeqCst), 2, "the re-registration is heard");

	// Retiring clears the records, and the old entry dies.
	list.register(&waiter);
	waiter.retire();
	assert_eq!(waiter.records(), 0);
	assert_eq!(list.live(), 0);
	list.register(&waiter);
	assert_eq!(list.live(), 1);

	// List ids are never reused, so a record for a dropped list cannot match a new one.
	let mut a = WaiterList::new();
	a.register(&waiter);
	let old_id = a.id;
	drop(a);
	let mut b = WaiterList::new();
	b.register(&waiter);
	assert_ne!(b.id, old_id);
	assert_eq!(b.len(), 1);
}

#[test]
fn invariant_3_retire_placement_overflow_retires_only_at_the_next_poll() {
	let (waiter, _) = counting_waiter::<2>();
	let mut lists: Vec<WaiterList> = (0..3).map(|_| WaiterList::new()).collect();
	for list in &mut lists {
		list.register(&waiter);
	}
	// The overflowing poll keeps every entry it made: nothing is invalidated mid-poll.
	assert!(waiter.is_overflowed());
	assert!(lists.iter().all(|list| list.live() == 1));
	// The next poll starts with prepare(), which retires and walks again from scratch.
	assert!(waiter.prepare());
	assert!(!waiter.is_overflowed());
	assert_eq!(waiter.records(), 0);
	assert!(lists.iter().all(|list| list.live() == 0));
	// Without an overflow, prepare() keeps the registrations.
	lists[0].register(&waiter);
	assert!(!waiter.prepare());
	assert_eq!(lists[0].live(), 1);
}

#[test]
fn invariant_5_wakes_run_outside_the_lock() {
	struct CheckUnlocked {
		state: Mutex<Option<Arc<Mutex<WaiterList>>>>,
		unlocked: AtomicUsize,
	}
	impl Wake for CheckUnlocked {
		fn wake(self: Arc<Self>) {
			let state = self.state.lock().unwrap().clone().unwrap();
			if state.try_lock().is_ok() {
				self.unlocked.fetch_add(1, Ordering::SeqCst);
			}
		}
	}
	let check = Arc::new(CheckUnlocked {
		state: Mutex::new(None),
		unlocked: AtomicUsize::new(0),
	});
	let state = Arc::new(Mutex::new(WaiterList::new()));
	*check.state.lock().unwrap() = Some(state.clone());
	let waiter: Waiter = Waiter::new(Waker::from(check.clone()));
	state.lock().unwrap().register(&waiter);
	// The discipline every primitive follows: take under the lock, wake after releasing it.
	let wakes = state.lock().unwrap().take();
	assert_eq!(check.unlocked.load(Ordering::SeqCst), 0, "take() itself wakes nobody");
	wakes.wake();
	assert_eq!(check.unlocked.load(Ordering::SeqCst), 1);
}

#[test]
fn invariant_5_primitives_wake_outside_their_lock() {
	// A waker that re-enters the queue's lock would deadlock if it ran under it: run the push on
	// a thread and fail on a timeout instead of hanging.
	struct Reenter(crate::sync::Queue<u32>, AtomicUsize);
	impl Wake for Reenter {
		fn wake(self: Arc<Self>) {
			let _ = self.0.len();
			self.1.fetch_add(1, Ordering::SeqCst);
		}
	}
	let queue = crate::sync::Queue::unbounded();
	let reenter = Arc::new(Reenter(queue.clone(), AtomicUsize::new(0)));
	let waiter: Waiter = Waiter::new(Waker::from(reenter.clone()));
	assert!(queue.poll_pop(&waiter).is_pending());
	let (done_tx, done_rx) = std::sync::mpsc::channel();
	let pusher = queue;
	std::thread::spawn(move || {
		pusher.try_push(1).unwrap();
		pusher.close();
		done_tx.send(()).unwrap();
	});
	done_rx
		.recv_timeout(std::time::Duration::from_secs(10))
		.expect("a wake ran under the queue's lock");
	assert!(reenter.1.load(Ordering::SeqCst) >= 1);
}

#[test]
fn invariant_6_bounded_lists_register_and_drop_loops_never_grow_a_list() {
	let mut list = WaiterList::new();
	for _ in 0..10_000 {
		let (waiter, _) = counting_waiter::<8>();
		list.register(&waiter);
	}
	assert!(list.len() <= 4, "abandoned waiters are reclaimed: {}", list.len());

	// Retire-and-walk-again loops, the same waiter under a new key each time.
	let (waiter, _) = counting_waiter::<8>();
	for _ in 0..10_000 {
		list.register(&waiter);
		waiter.retire();
	}
	assert!(list.len() <= 4, "retired entries are reclaimed: {}", list.len());

	// With live waiters present, churn stays within twice the live count.
	let live: Vec<_> = (0..100).map(|_| counting_waiter::<8>()).collect();
	for (waiter, _) in &live {
		list.register(waiter);
	}
	for _ in 0..10_000 {
		let (waiter, _) = counting_waiter::<8>();
		list.register(&waiter);
	}
	assert_eq!(list.live(), 100);
	assert!(list.len() <= 2 * 100 + 4, "{}", list.len());
}
