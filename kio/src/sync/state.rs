//! [`Producer`] / [`Consumer`]: a shared value that consumers wait on.
//!
//! The state has three waiter lists, split by condition so a wake reaches only those who care:
//! `on_value` (drained by every modification and by close), `on_closed` (drained by close only)
//! and `on_consumer` (drained when the consumer count goes between zero and one, and by close).
//! Counts live under the lock with the lists, so a count change and the wake it owes are decided
//! together.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::task::Poll;

use super::{Closed, Lock, LockGuard};
use crate::{Waiter, WaiterList, Wakes};

struct State<T> {
	value: T,
	closed: bool,
	producers: usize,
	consumers: usize,
	on_value: WaiterList,
	on_closed: WaiterList,
	on_consumer: WaiterList,
}

impl<T> State<T> {
	fn close(&mut self) -> Wakes {
		self.closed = true;
		let mut wakes = self.on_value.take();
		wakes.append(self.on_closed.take());
		wakes.append(self.on_consumer.take());
		wakes
	}
}

/// The writing half. Cloneable; the state closes when the last producer drops.
pub struct Producer<T> {
	state: Lock<State<T>>,
}

/// The reading half. Cloneable.
pub struct Consumer<T> {
	state: Lock<State<T>>,
}

impl<T> Producer<T> {
	/// A new open state holding `value`, with no consumers.
	pub fn new(value: T) -> Self {
		Self {
			state: Lock::new(State {
				value,
				closed: false,
				producers: 1,
				consumers: 0,
				on_value: WaiterList::new(),
				on_closed: WaiterList::new(),
				on_consumer: WaiterList::new(),
			}),
		}
	}

	/// A new consumer of this state.
	pub fn consume(&self) -> Consumer<T> {
		let wakes = {
			let mut state = self.state.lock();
			state.consumers += 1;
			if state.consumers == 1 {
				state.on_consumer.take()
			} else {
				Wakes::none()
			}
		};
		drop(wakes);
		Consumer {
			state: self.state.clone(),
		}
	}

	/// Reads the value.
	pub fn read(&self) -> Ref<'_, T> {
		Ref {
			guard: self.state.lock(),
		}
	}

	/// Locks the value for writing. Consumers are woken when the guard drops, if it was
	/// mutably dereferenced.
	pub fn write(&self) -> Result<Mut<'_, T>, Closed> {
		let guard = self.state.lock();
		if guard.closed {
			return Err(Closed);
		}
		Ok(Mut {
			guard: Some(guard),
			modified: false,
		})
	}

	/// Closes the state: consumers see [`Closed`] once they have read what they need.
	pub fn close(&self) -> Result<(), Closed> {
		let wakes = {
			let mut state = self.state.lock();
			if state.closed {
				return Err(Closed);
			}
			state.close()
		};
		drop(wakes);
		Ok(())
	}

	/// Whether the state is closed.
	pub fn is_closed(&self) -> bool {
		self.state.lock().closed
	}

	/// The number of live consumers.
	pub fn consumers(&self) -> usize {
		self.state.lock().consumers
	}

	/// Ready once at least one consumer exists (or the state is closed).
	pub fn poll_used(&self, waiter: &Waiter) -> Poll<()> {
		self.poll_consumers(waiter, true)
	}

	/// Waits until at least one consumer exists (or the state is closed).
	pub async fn used(&self) {
		crate::wait(|waiter| self.poll_used(waiter)).await;
	}

	/// Ready once no consumer exists (or the state is closed).
	pub fn poll_unused(&self, waiter: &Waiter) -> Poll<()> {
		self.poll_consumers(waiter, false)
	}

	/// Waits until no consumer exists (or the state is closed).
	pub async fn unused(&self) {
		crate::wait(|waiter| self.poll_unused(waiter)).await;
	}

	fn poll_consumers(&self, waiter: &Waiter, used: bool) -> Poll<()> {
		let mut state = self.state.lock();
		if state.closed || (state.consumers > 0) == used {
			return Poll::Ready(());
		}
		state.on_consumer.register(waiter);
		Poll::Pending
	}
}

impl<T> Clone for Producer<T> {
	fn clone(&self) -> Self {
		self.state.lock().producers += 1;
		Self {
			state: self.state.clone(),
		}
	}
}

impl<T> Drop for Producer<T> {
	fn drop(&mut self) {
		let wakes = {
			let mut state = self.state.lock();
			state.producers -= 1;
			if state.producers == 0 && !state.closed {
				state.close()
			} else {
				Wakes::none()
			}
		};
		drop(wakes);
	}
}

impl<T> Consumer<T> {
	/// Reads the value.
	pub fn read(&self) -> Ref<'_, T> {
		Ref {
			guard: self.state.lock(),
		}
	}

	/// Runs `check` on the value under the lock; if it is pending, registers for the next
	/// modification. Returns `Err(Closed)` only once `check` is pending on a closed state, so a
	/// consumer can always read what was written before the close.
	pub fn poll<R>(&self, waiter: &Waiter, check: impl FnOnce(&T) -> Poll<R>) -> Poll<Result<R, Closed>> {
		let mut state = self.state.lock();
		if let Poll::Ready(result) = check(&state.value) {
			return Poll::Ready(Ok(result));
		}
		if state.closed {
			return Poll::Ready(Err(Closed));
		}
		state.on_value.register(waiter);
		Poll::Pending
	}

	/// Waits until `check` is ready on the value.
	pub async fn wait<R>(&self, mut check: impl FnMut(&T) -> Poll<R>) -> Result<R, Closed> {
		crate::wait(|waiter| self.poll(waiter, &mut check)).await
	}

	/// Ready once the state is closed.
	pub fn poll_closed(&self, waiter: &Waiter) -> Poll<()> {
		let mut state = self.state.lock();
		if state.closed {
			return Poll::Ready(());
		}
		state.on_closed.register(waiter);
		Poll::Pending
	}

	/// Waits until the state is closed.
	pub async fn closed(&self) {
		crate::wait(|waiter| self.poll_closed(waiter)).await;
	}

	/// Whether the state is closed.
	pub fn is_closed(&self) -> bool {
		self.state.lock().closed
	}
}

impl<T> Clone for Consumer<T> {
	fn clone(&self) -> Self {
		self.state.lock().consumers += 1;
		Self {
			state: self.state.clone(),
		}
	}
}

impl<T> Drop for Consumer<T> {
	fn drop(&mut self) {
		let wakes = {
			let mut state = self.state.lock();
			state.consumers -= 1;
			if state.consumers == 0 {
				state.on_consumer.take()
			} else {
				Wakes::none()
			}
		};
		drop(wakes);
	}
}

impl<T> fmt::Debug for Producer<T> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str("Producer { .. }")
	}
}

impl<T> fmt::Debug for Consumer<T> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str("Consumer { .. }")
	}
}

/// A locked read of the value.
pub struct Ref<'a, T> {
	guard: LockGuard<'a, State<T>>,
}

impl<T> Deref for Ref<'_, T> {
	type Target = T;

	fn deref(&self) -> &T {
		&self.guard.value
	}
}

/// A locked write of the value; wakes consumers on drop if it was mutably dereferenced.
pub struct Mut<'a, T> {
	guard: Option<LockGuard<'a, State<T>>>,
	modified: bool,
}

impl<T> Deref for Mut<'_, T> {
	type Target = T;

	fn deref(&self) -> &T {
		&self.guard.as_ref().expect("guard lives until drop").value
	}
}

impl<T> DerefMut for Mut<'_, T> {
	fn deref_mut(&mut self) -> &mut T {
		self.modified = true;
		&mut self.guard.as_mut().expect("guard lives until drop").value
	}
}

impl<T> Drop for Mut<'_, T> {
	fn drop(&mut self) {
		let Some(mut guard) = self.guard.take() else {
			return;
		};
		let wakes = if self.modified {
			guard.on_value.take()
		} else {
			Wakes::none()
		};
		// Wake outside the lock (invariant 5).
		drop(guard);
		drop(wakes);
	}
}
