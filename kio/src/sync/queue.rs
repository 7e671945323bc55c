//! [`Queue`]: a bounded or unbounded FIFO with close.
//!
//! Two waiter lists: `on_pop` (poppers waiting for an item, drained by every push) and `on_push`
//! (pushers waiting for space, drained by every pop of a bounded queue). Close drains both.
//! Items queued before a close are still popped; only then does `pop` report the end.

use std::collections::VecDeque;
use std::fmt;
use std::task::Poll;

use super::{Closed, Lock};
use crate::{Waiter, WaiterList, Wakes};

struct State<T> {
	items: VecDeque<T>,
	capacity: Option<usize>,
	closed: bool,
	on_pop: WaiterList,
	on_push: WaiterList,
}

/// A FIFO shared by clones of one handle, across tasks and workers.
pub struct Queue<T> {
	state: Lock<State<T>>,
}

/// Why [`Queue::try_push`] did not queue the item, which it hands back.
#[derive(PartialEq, Eq)]
#[non_exhaustive]
pub enum PushError<T> {
	/// The bounded queue is full.
	Full(T),
	/// The queue is closed.
	Closed(T),
}

impl<T> PushError<T> {
	/// The item that was not pushed.
	pub fn into_inner(self) -> T {
		match self {
			Self::Full(item) | Self::Closed(item) => item,
		}
	}
}

impl<T> fmt::Debug for PushError<T> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Full(_) => f.write_str("Full(..)"),
			Self::Closed(_) => f.write_str("Closed(..)"),
		}
	}
}

impl<T> Queue<T> {
	/// A queue that holds at most `capacity` items (at least one).
	pub fn bounded(capacity: usize) -> Self {
		Self::with_capacity(Some(capacity.max(1)))
	}

	/// A queue without a bound.
	pub fn unbounded() -> Self {
		Self::with_capacity(None)
	}

	fn with_capacity(capacity: Option<usize>) -> Self {
		Self {
			state: Lock::new(State {
				items: VecDeque::new(),
				capacity,
				closed: false,
				on_pop: WaiterList::new(),
				on_push: WaiterList::new(),
			}),
		}
	}

	/// Queues `item` if there is room.
	pub fn try_push(&self, item: T) -> Result<(), PushError<T>> {
		let wakes = {
			let mut state = self.state.lock();
			if state.closed {
				return Err(PushError::Closed(item));
			}
			if state.capacity.is_some_and(|capacity| state.items.len() >= capacity) {
				return Err(PushError::Full(item));
			}
			state.items.push_back(item);
			state.on_pop.take()
		};
		drop(wakes);
		Ok(())
	}

	/// Queues the item in `slot` once there is room; registers for space otherwise. On a closed
	/// queue the item stays in `slot`.
	pub fn poll_push(&self, waiter: &Waiter, slot: &mut Option<T>) -> Poll<Result<(), Closed>> {
		let wakes = {
			let mut state = self.state.lock();
			if state.closed {
				return Poll::Ready(Err(Closed));
			}
			if state.capacity.is_some_and(|capacity| state.items.len() >= capacity) {
				state.on_push.register(waiter);
				return Poll::Pending;
			}
			let Some(item) = slot.take() else {
				return Poll::Ready(Ok(()));
			};
			state.items.push_back(item);
			state.on_pop.take()
		};
		drop(wakes);
		Poll::Ready(Ok(()))
	}

	/// Queues `item`, waiting for room. On a closed queue the item comes back.
	pub async fn push(&self, item: T) -> Result<(), PushError<T>> {
		let mut slot = Some(item);
		match crate::wait(|waiter| self.poll_push(waiter, &mut slot)).await {
			Ok(()) => Ok(()),
			Err(Closed) => Err(PushError::Closed(
				slot.take().expect("a refused item stays in its slot"),
			)),
		}
	}

	/// Takes the oldest item if there is one. `Err(Closed)` once closed and empty.
	pub fn try_pop(&self) -> Result<Option<T>, Closed> {
		let (item, wakes) = {
			let mut state = self.state.lock();
			match state.items.pop_front() {
				Some(item) => (item, space_freed(&mut state)),
				None if state.closed => return Err(Closed),
				None => return Ok(None),
			}
		};
		drop(wakes);
		Ok(Some(item))
	}

	/// Takes the oldest item; registers for the next push otherwise. `Ready(None)` once the
	/// queue is closed and empty.
	pub fn poll_pop(&self, waiter: &Waiter) -> Poll<Option<T>> {
		let (item, wakes) = {
			let mut state = self.state.lock();
			match state.items.pop_front() {
				Some(item) => (item, space_freed(&mut state)),
				None if state.closed => return Poll::Ready(None),
				None => {
					state.on_pop.register(waiter);
					return Poll::Pending;
				}
			}
		};
		drop(wakes);
		Poll::Ready(Some(item))
	}

	/// Takes the oldest item, waiting for one. `None` once the queue is closed and empty.
	pub async fn pop(&self) -> Option<T> {
		crate::wait(|waiter| self.poll_pop(waiter)).await
	}

	/// Closes the queue: pushes fail, pops drain what is queued and then end.
	pub fn close(&self) {
		let wakes = {
			let mut state = self.state.lock();
			state.closed = true;
			let mut wakes = state.on_pop.take();
			wakes.append(state.on_push.take());
			wakes
		};
		drop(wakes);
	}

	/// Whether the queue is closed.
	pub fn is_closed(&self) -> bool {
		self.state.lock().closed
	}

	/// The number of queued items.
	pub fn len(&self) -> usize {
		self.state.lock().items.len()
	}

	/// Whether no item is queued.
	pub fn is_empty(&self) -> bool {
		self.len() == 0
	}
}

fn space_freed<T>(state: &mut State<T>) -> Wakes {
	if state.capacity.is_some() {
		state.on_push.take()
	} else {
		Wakes::none()
	}
}

impl<T> Clone for Queue<T> {
	fn clone(&self) -> Self {
		Self {
			state: self.state.clone(),
		}
	}
}

impl<T> fmt::Debug for Queue<T> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str("Queue { .. }")
	}
}
