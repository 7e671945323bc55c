//! [`Lock`]: the shared state cell every primitive is built on.

use std::fmt;
use std::ops::{Deref, DerefMut};

use super::{Arc, Mutex, MutexGuard};

/// A cloneable, `Send` handle to state behind a mutex. Not an async lock: hold the guard only
/// for a short, non-blocking critical section, and never across an `.await`.
pub struct Lock<T> {
	inner: Arc<Mutex<T>>,
}

impl<T> Lock<T> {
	/// Wraps `value`.
	pub fn new(value: T) -> Self {
		Self {
			inner: Arc::new(Mutex::new(value)),
		}
	}

	/// Locks the state. A panic while locked does not poison it for others: kio's states stay
	/// consistent at every step that can panic (user callbacks run outside the lock).
	pub fn lock(&self) -> LockGuard<'_, T> {
		LockGuard {
			guard: self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
		}
	}

	/// Whether two handles share one state.
	pub fn ptr_eq(&self, other: &Self) -> bool {
		Arc::ptr_eq(&self.inner, &other.inner)
	}
}

impl<T> Clone for Lock<T> {
	fn clone(&self) -> Self {
		Self {
			inner: self.inner.clone(),
		}
	}
}

impl<T: Default> Default for Lock<T> {
	fn default() -> Self {
		Self::new(T::default())
	}
}

impl<T> fmt::Debug for Lock<T> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str("Lock { .. }")
	}
}

/// A held [`Lock`].
pub struct LockGuard<'a, T> {
	guard: MutexGuard<'a, T>,
}

impl<T> Deref for LockGuard<'_, T> {
	type Target = T;

	fn deref(&self) -> &T {
		&self.guard
	}
}

impl<T> DerefMut for LockGuard<'_, T> {
	fn deref_mut(&mut self) -> &mut T {
		&mut self.guard
	}
}
