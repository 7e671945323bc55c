//! The cache pool: one byte budget shared by many tracks.
//!
//! Groups charge their payload bytes plus [`ENTRY_OVERHEAD`] per frame when frames are written,
//! and give them back when their track evicts them, when the group's cap sheds them, or when the
//! last handle drops. While the pool is over its capacity, a track that creates a group first
//! evicts its own stalest non-latest groups, so the cost of pressure falls on the tracks that
//! write. A charge that would take the pool past its capacity is refused
//! ([`try_charge`](Pool::try_charge)): latest groups are never evicted, so without that refusal
//! many tracks' latest groups together could exceed any budget.
//!
//! A pool may have a **parent** ([`Pool::child`]): a charge counts against both, and is refused if
//! either is full. A relay gives each session a child of its cache pool, so one publisher can
//! fill its own share and no more.

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
	parent: Option<Pool>,
}

impl Pool {
	/// A pool of `capacity` bytes.
	pub fn new(capacity: u64) -> Self {
		Self {
			shared: Arc::new(Shared {
				capacity,
				used: AtomicU64::new(0),
				parent: None,
			}),
		}
	}

	/// A pool of `capacity` bytes whose charges also count against this one.
	pub fn child(&self, capacity: u64) -> Self {
		Self {
			shared: Arc::new(Shared {
				capacity,
				used: AtomicU64::new(0),
				parent: Some(self.clone()),
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

	/// Whether more is charged than the budget, here or in a parent.
	pub fn is_over(&self) -> bool {
		self.used() > self.shared.capacity || self.shared.parent.as_ref().is_some_and(Self::is_over)
	}

	/// Whether `bytes` more fit, here and in the parents.
	pub fn has_room(&self, bytes: u64) -> bool {
		self.used().saturating_add(bytes) <= self.shared.capacity
			&& self.shared.parent.as_ref().is_none_or(|parent| parent.has_room(bytes))
	}

	/// Whether `bytes` could ever fit: no more than the capacity here and in every parent.
	pub fn could_fit(&self, bytes: u64) -> bool {
		bytes <= self.shared.capacity && self.shared.parent.as_ref().is_none_or(|parent| parent.could_fit(bytes))
	}

	/// Charges `bytes` unless that would take this pool or a parent past its capacity.
	pub fn try_charge(&self, bytes: u64) -> bool {
		let taken = self
			.shared
			.used
			.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
				let after = used.checked_add(bytes)?;
				(after <= self.shared.capacity).then_some(after)
			})
			.is_ok();
		if !taken {
			return false;
		}
		if let Some(parent) = &self.shared.parent
			&& !parent.try_charge(bytes)
		{
			self.shared.used.fetch_sub(bytes, Ordering::Relaxed);
			return false;
		}
		true
	}

	/// Gives back `bytes` charged before, here and in the parents.
	pub fn release(&self, bytes: u64) {
		self.shared.used.fetch_sub(bytes, Ordering::Relaxed);
		if let Some(parent) = &self.shared.parent {
			parent.release(bytes);
		}
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn a_child_charges_its_parent_and_either_can_refuse() {
		let parent = Pool::new(1000);
		let a = parent.child(600);
		let b = parent.child(600);
		assert!(a.try_charge(600));
		assert!(!a.try_charge(1), "the child is full");
		assert!(b.try_charge(400));
		assert!(!b.try_charge(1), "the parent is full though the child is not");
		assert_eq!((a.used(), b.used(), parent.used()), (600, 400, 1000));
		a.release(600);
		assert_eq!(parent.used(), 400);
		assert!(b.try_charge(200));
	}
}
