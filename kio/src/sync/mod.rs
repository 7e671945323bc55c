//! Synchronisation primitives built on [`WaiterList`](crate::WaiterList)s.
//!
//! Every primitive keeps its state and its waiter lists behind one [`Lock`], decides a state
//! change and the wakes it owes under that lock, and wakes after releasing it. Each operation that
//! may wait exists twice: `poll_x(&self, &Waiter) -> Poll<_>` and `async fn x`, which is
//! `kio::wait(|w| self.poll_x(w)).await`.
//!
//! - [`Lock`]: the `Send` state cell everything here is built on (not an async mutex).
//! - [`Producer`] / [`Consumer`]: a shared value with separate lists for writes, close, and the
//!   consumer count going between zero and one.
//! - [`Queue`]: a bounded or unbounded FIFO with close.
//! - [`Budget`] and [`Charge`]: what a holder may take of something countable, given back when
//!   the charge drops; [`Keyed`] shares per key (a source address).
//!
//! Under `cfg(loom)` the locks and atomics come from loom, so the loom models in `tests/loom.rs`
//! permute every cross-thread handoff.

mod budget;
mod lock;
mod queue;
mod state;

pub use budget::{Account, Budget, Charge};
#[cfg(not(loom))]
pub use budget::{KeyAccount, Keyed, Shares};
pub use lock::{Lock, LockGuard};
pub use queue::{PushError, Queue};
pub use state::{Consumer, Mut, Producer, Ref};

/// Returned by an operation on a closed primitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

impl std::fmt::Display for Closed {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.write_str("closed")
	}
}

impl std::error::Error for Closed {}

#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard, atomic};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard, atomic};
