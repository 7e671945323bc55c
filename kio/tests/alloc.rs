//! Zero heap allocations in steady state, counted by a global allocator: per wake cycle (local
//! and cross-worker), per waker clone and drop, per re-registration on a recorded list, and per
//! deadline re-arm.
//!
//! The allocator counts only on threads that opted in (a thread-local flag), so the test
//! harness's own threads do not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::poll_fn;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use kio::sync::{Consumer, Producer};
use kio::{Builder, WaiterList};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
	static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn counting() -> bool {
	COUNTING.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: GlobalAlloc contract: every call forwards to the system allocator with the same
// layout and pointer; the counter is a side effect that never allocates (const thread-local).
unsafe impl GlobalAlloc for Counting {
	unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
		if counting() {
			ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
		}
		// SAFETY: same layout the caller passed, per the GlobalAlloc contract.
		unsafe { System.alloc(layout) }
	}

	unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
		// SAFETY: `ptr` came from `System.alloc` with this layout.
		unsafe { System.dealloc(ptr, layout) }
	}

	unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
		if counting() {
			ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
		}
		// SAFETY: `ptr` came from `System.alloc` with `layout`.
		unsafe { System.realloc(ptr, layout, new_size) }
	}
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Counts this thread's allocations from `start` until `stop`; spans `.await`s, since a
/// worker's tasks all run on its thread.
fn start() -> usize {
	COUNTING.with(|c| c.set(true));
	ALLOCATIONS.load(Ordering::Relaxed)
}

fn stop(from: usize) -> usize {
	COUNTING.with(|c| c.set(false));
	ALLOCATIONS.load(Ordering::Relaxed) - from
}

const WARM_UP: u64 = 1_000;
const CYCLES: u64 = 10_000;

/// A ping-pong between two tasks: each cycle is a write, a drain, a wake, a poll and a
/// re-registration on a recorded list, on each side.
async fn ping_pong(ping: &Producer<u64>, pong: &Consumer<u64>, from: u64, to: u64) {
	for i in from..to {
		*ping.write().unwrap() = i;
		pong.wait(|&v| if v == i { Poll::Ready(()) } else { Poll::Pending })
			.await
			.unwrap();
	}
}

async fn echo(ping: Consumer<u64>, pong: Producer<u64>) {
	let mut last = 0;
	while let Ok(v) = ping
		.wait(|&v| if v != last { Poll::Ready(v) } else { Poll::Pending })
		.await
	{
		last = v;
		*pong.write().unwrap() = v;
	}
}

#[test]
fn a_local_wake_cycle_allocates_nothing() {
	let rt = Builder::single().build().unwrap();
	let (ping, pong) = (Producer::new(0u64), Producer::new(0u64));
	let (ping_rx, pong_rx) = (ping.consume(), pong.consume());
	let echo = rt.spawn(echo(ping_rx, pong));
	let allocations = rt.block_on(async {
		ping_pong(&ping, &pong_rx, 1, WARM_UP).await;
		let from = start();
		ping_pong(&ping, &pong_rx, WARM_UP, WARM_UP + CYCLES).await;
		stop(from)
	});
	drop(ping);
	rt.block_on(echo).unwrap();
	assert_eq!(allocations, 0, "allocations in {CYCLES} local wake cycles");
}

#[test]
fn a_cross_worker_wake_cycle_allocates_nothing_on_the_waking_worker() {
	let rt = Builder::new().workers(2).pin(false).build().unwrap();
	let (ping, pong) = (Producer::new(0u64), Producer::new(0u64));
	let (ping_rx, pong_rx) = (ping.consume(), pong.consume());
	let echo = rt.spawn_on(1, move || echo(ping_rx, pong));
	let allocations = rt.block_on(async {
		ping_pong(&ping, &pong_rx, 1, WARM_UP).await;
		let from = start();
		ping_pong(&ping, &pong_rx, WARM_UP, WARM_UP + CYCLES).await;
		stop(from)
	});
	drop(ping);
	rt.block_on(echo).unwrap();
	assert_eq!(
		allocations, 0,
		"allocations on worker 0 in {CYCLES} cross-worker wake cycles"
	);
}

#[test]
fn waker_clone_and_drop_allocate_nothing() {
	let rt = Builder::single().build().unwrap();
	let allocations = rt.block_on(rt.spawn(poll_fn(|cx| {
		let from = start();
		for _ in 0..CYCLES {
			let waker = cx.waker().clone();
			assert!(waker.will_wake(cx.waker()));
			drop(waker);
		}
		Poll::Ready(stop(from))
	})));
	assert_eq!(allocations.unwrap(), 0);
}

#[test]
fn re_registering_on_a_recorded_list_allocates_nothing() {
	let rt = Builder::single().build().unwrap();
	let (allocations, len) = rt
		.block_on(rt.spawn(async {
			let mut list = WaiterList::new();
			kio::wait(|waiter| {
				list.register(waiter);
				let from = start();
				for _ in 0..CYCLES {
					list.register(waiter);
				}
				Poll::Ready((stop(from), list.len()))
			})
			.await
		}))
		.unwrap();
	assert_eq!(allocations, 0);
	assert_eq!(len, 1, "the records kept the list at one entry");
}

#[test]
fn re_arming_a_deadline_allocates_nothing() {
	let rt = Builder::single().paused_clock(true).build().unwrap();
	let allocations = rt.block_on(async {
		let start_at = kio::time::now();
		let mut deadline = kio::time::Deadline::new(Some(start_at + Duration::from_millis(1)));
		deadline.elapsed().await;
		let from = start();
		for i in 0..CYCLES {
			deadline.set(Some(start_at + Duration::from_millis(2 + i % 50)));
		}
		kio::wait(|waiter| {
			assert!(deadline.poll_elapsed(waiter).is_pending());
			Poll::Ready(())
		})
		.await;
		stop(from)
	});
	assert_eq!(allocations, 0);
}
