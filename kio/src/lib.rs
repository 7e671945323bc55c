//! kio: a thread-per-core async runtime that drives io_uring directly.
//!
//! # Layers
//!
//! - [`waiter`]: the wake mechanism everything else is built on. State owns [`WaiterList`]s; a
//!   poll registers the task's [`Waiter`] under the same lock as its observation; a writer drains
//!   the list under the lock and wakes after releasing it. Its invariants are specified in the
//!   module and checked by an exhaustive model checker (`src/testing/`) and loom (`tests/loom.rs`).
//! - [`sync`]: [`Lock`](sync::Lock), [`Producer`](sync::Producer)/[`Consumer`](sync::Consumer)
//!   and [`Queue`](sync::Queue), `Send` primitives that cross workers.
//! - [`exec`]: the [`Runtime`] and its workers, each with a task slab, a run queue with a
//!   budget, a timer wheel and an io_uring; [`spawn`], [`block_on`], [`yield_now`].
//! - [`race`]: the first of two futures to finish (a session or its deadline).
//! - [`time`]: the loop's clock, [`sleep`](time::sleep) and the re-armable
//!   [`Deadline`](time::Deadline).
//! - `uring` (private): ring set-up, the one `io_uring_enter` per loop turn, operations that own
//!   what the kernel may touch until their terminal completion, cancellation, provided buffer
//!   rings, unpark, teardown.
//! - [`net`]: [`UdpSocket`](net::UdpSocket) (multishot receive with GRO, GSO sends with a
//!   fallback, ECN and `PKTINFO`), [`TcpListener`](net::TcpListener) and
//!   [`TcpStream`](net::TcpStream), in safe code over `uring`.
//!
//! # The calling convention
//!
//! Every operation that may wait exists twice: `poll_x(&self, waiter: &Waiter) -> Poll<T>`,
//! which checks the state and registers the waiter when it is not ready, and `async fn x`,
//! which is one line: `kio::wait(|w| self.poll_x(w)).await`.
//!
//! # unsafe
//!
//! Only in `uring/` (system calls and ring buffers), `waker` (building a `Waker` from its
//! vtable) and `task/raw` (pinning a task's future in its cell); each block has a `// SAFETY:`
//! comment naming the rule it relies on.

#![deny(unsafe_code)]

pub mod exec;
pub mod net;
mod race;
pub mod sync;
#[allow(unsafe_code)] // System calls outside the ring: see the module docs.
mod sys;
pub mod task;
pub mod time;
#[allow(unsafe_code)] // System calls and ring buffers: see the module docs.
mod uring;
pub mod waiter;
#[allow(unsafe_code)] // Building a Waker from its static vtable.
mod waker;

#[cfg(test)]
mod testing;

/// Internals exposed for kio's own benchmarks only; not a stable API.
#[doc(hidden)]
pub mod bench_support {
	pub use crate::time::Timers;
}

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

pub use exec::{Builder, Monitor, Runtime, Stats, spawn, spawn_on, stats, try_spawn, worker_count, worker_index};
pub use race::{Either, Race, race};
#[doc(hidden)]
pub use sys::{pin_current_thread, process_cpu_time};
pub use task::{JoinError, JoinHandle, Panic, RemoteJoinHandle, yield_now};

/// Process signals for a server (shutdown, reload): block them everywhere first, then wait for one
/// on a thread of its own (no handler runs; nothing async-signal-unsafe can happen).
pub mod signal {
	pub use crate::sys::{block_signals, wait_signal};
	pub use libc::{SIGHUP, SIGINT, SIGTERM};
}
pub use uring::{IoCounters, RingStats, io_counters};
pub use waiter::{RECORDS, Waiter, WaiterList, Wakes};

/// Why a runtime could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
	/// The kernel lacks something kio requires; `feature` names it (`"io_uring"` itself, or one
	/// of `IORING_SETUP_SINGLE_ISSUER`, `IORING_SETUP_COOP_TASKRUN`, `IORING_SETUP_DEFER_TASKRUN`,
	/// `IORING_FEAT_EXT_ARG`, `IORING_FEAT_NODROP`, or an opcode such as `IORING_OP_RECVMSG`).
	Unsupported {
		/// The missing feature.
		feature: &'static str,
		/// The kernel's answer, when it gave one.
		source: Option<io::Error>,
	},
	/// More workers than kio's registry holds are running in this process.
	TooManyWorkers,
	/// A system call failed.
	Io(io::Error),
}

impl fmt::Display for Error {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Unsupported {
				feature,
				source: Some(source),
			} => {
				write!(f, "the kernel does not support {feature}, which kio requires: {source}")
			}
			Self::Unsupported { feature, source: None } => {
				write!(f, "the kernel does not support {feature}, which kio requires")
			}
			Self::TooManyWorkers => write!(f, "more than {} kio workers in one process", waker::MAX_WORKERS),
			Self::Io(e) => write!(f, "{e}"),
		}
	}
}

impl std::error::Error for Error {
	fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
		match self {
			Self::Unsupported {
				source: Some(source), ..
			}
			| Self::Io(source) => Some(source),
			_ => None,
		}
	}
}

/// Bridges `std::task::Context` to a [`Waiter`]: inside a kio task it lends the task's own
/// waiter; under any other executor it keeps a waiter of its own that wakes the context's waker.
///
/// Keep it in a field disjoint from the state being polled. A foreign waiter is reused while the
/// waker stays the same, retired when another waker polls it (the old interest dies with it),
/// and retired before a poll whose predecessor overflowed its records.
///
/// The foreign waiter is boxed: a park is in every kio future that waits (every `JoinHandle`,
/// every [`wait`]), and inside kio tasks, where almost all of them run, it is never made. Inline
/// it made each park 176 bytes; a relay's session keeps dozens of them per connection.
#[derive(Default)]
pub struct Park {
	foreign: Option<Box<Waiter>>,
}

impl Park {
	/// An empty park.
	pub const fn new() -> Self {
		Self { foreign: None }
	}

	/// Runs `poll` with the waiter for `cx`.
	pub fn poll<T>(&mut self, cx: &mut Context<'_>, poll: impl FnOnce(&Waiter) -> Poll<T>) -> Poll<T> {
		let poll = match waker::with_polling_waiter(cx.waker(), poll) {
			Ok(result) => return result,
			Err(poll) => poll,
		};
		let waker = cx.waker();
		let waiter = match &mut self.foreign {
			Some(waiter) if waiter.will_wake(waker) => {
				waiter.prepare();
				waiter
			}
			Some(waiter) => {
				waiter.retire();
				waiter.set_waker(waker);
				waiter
			}
			slot @ None => slot.insert(Box::new(Waiter::new(waker.clone()))),
		};
		poll(waiter)
	}
}

impl fmt::Debug for Park {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Park").field("foreign", &self.foreign).finish()
	}
}

/// The future of [`wait`].
#[must_use = "futures do nothing unless awaited"]
pub struct Wait<F> {
	poll: F,
	park: Park,
}

// Never pin-projected: `poll` is called through `&mut`, so pinning `Wait` pins nothing.
impl<F> Unpin for Wait<F> {}

impl<T, F: FnMut(&Waiter) -> Poll<T>> Future for Wait<F> {
	type Output = T;

	fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
		let this = self.get_mut();
		let poll = &mut this.poll;
		this.park.poll(cx, |waiter| poll(waiter))
	}
}

/// Turns a `poll_x(&Waiter)` function into a future: `kio::wait(|w| state.poll_x(w)).await`.
pub fn wait<T, F: FnMut(&Waiter) -> Poll<T>>(poll: F) -> Wait<F> {
	Wait {
		poll,
		park: Park::new(),
	}
}

/// Runs `future` on a single-worker runtime on this thread, then drops the runtime.
///
/// Panics if the runtime cannot start (see [`Error`]).
pub fn block_on<F: Future>(future: F) -> F::Output {
	let runtime = Builder::single()
		.build()
		.unwrap_or_else(|e| panic!("kio: cannot start a runtime: {e}"));
	runtime.block_on(future)
}
