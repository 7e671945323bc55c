//! The cache pool: one byte budget shared by many tracks.
//!
//! Groups charge their payload bytes plus [`ENTRY_OVERHEAD`] when frames are written, and give
//! them back when their track evicts them or when the last handle drops. While the pool is over
//! its capacity, a track that creates a group first evicts its own stalest non-latest groups, so
//! the cost of pressure falls on the tracks that write.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes charged per cached frame beyond its payload (bookkeeping, allocation slack).
pub const ENTRY_OVERHEAD: u64 = 256;

/// A shared byte budget. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Pool {
	shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
	capacity: u64,
	used: AtomicU64,
}

impl Pool {
	/// A pool of `capacity` bytes.
	pub fn new(capacity: u64) -> Self {
		Self {
			shared: Arc::new(Shared {
				capacity,
				used: AtomicU64::new(0),
			}),
		}
	}

	/// The budget.
	pub fn capacity(&self) -> u64 {
		self.shared.capacity
	}

	/// Bytes currently charged.
	pub fn used(&self) -> u64 {
		self.shared.used.load(Ordering::Relaxed)
	}

	/// Whether more is charged than the budget.
	pub fn is_over(&self) -> bool {
		self.used() > self.shared.capacity
	}

	pub(crate) fn charge(&self, bytes: u64) {
		self.shared.used.fetch_add(bytes, Ordering::Relaxed);
	}

	pub(crate) fn release(&self, bytes: u64) {
		self.shared.used.fetch_sub(bytes, Ordering::Relaxed);
	}
}
