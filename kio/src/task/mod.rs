//! Tasks: spawning, joining, aborting.
//!
//! A task is a `!Send` future that runs on the worker that spawned it until it finishes; there
//! is no work stealing. [`spawn`](crate::spawn) costs one allocation (the task cell: future,
//! waiter, output and join list together) plus a slab slot.
//!
//! Dropping a [`JoinHandle`] **detaches** the task: it keeps running, and its output is dropped
//! when it finishes. Use [`JoinHandle::abort`] to stop it; the future is dropped at its next turn
//! on the run queue, and the handle then yields [`JoinError::Cancelled`]. When a runtime is
//! dropped, every task still alive is dropped with it (outputs never produced are `Cancelled`).

#[allow(unsafe_code)] // Pinning a task's future inside its cell.
pub(crate) mod raw;

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::sync::Queue;
use crate::{Park, Waiter};

/// Why a task produced no output. `Send + Sync`, so `?` carries it into `anyhow::Error` or a
/// `Box<dyn Error + Send + Sync>`.
#[non_exhaustive]
pub enum JoinError {
	/// The task was aborted, or its runtime was dropped before it finished.
	Cancelled,
	/// The task panicked; the payload is kept for [`std::panic::resume_unwind`].
	Panicked(Panic),
}

/// A task's panic payload. It sits behind a mutex only so that [`JoinError`] is `Sync` (a panic
/// payload is `Send` but not `Sync`); [`into_inner`](Self::into_inner) takes it out.
pub struct Panic(std::sync::Mutex<Box<dyn Any + Send>>);

impl Panic {
	pub(crate) fn new(payload: Box<dyn Any + Send>) -> Self {
		Self(std::sync::Mutex::new(payload))
	}

	/// The payload, for [`std::panic::resume_unwind`] or a `downcast`.
	pub fn into_inner(self) -> Box<dyn Any + Send> {
		self.0.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)
	}

	/// The panic's message, if it was a string.
	fn message(&self) -> String {
		let payload = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
		raw::panic_message(payload.as_ref()).to_owned()
	}
}

impl JoinError {
	/// The panic payload, if the task panicked.
	pub fn into_panic(self) -> Option<Box<dyn Any + Send>> {
		match self {
			Self::Panicked(panic) => Some(panic.into_inner()),
			Self::Cancelled => None,
		}
	}

	/// Whether the task was cancelled.
	pub fn is_cancelled(&self) -> bool {
		matches!(self, Self::Cancelled)
	}

	/// Whether the task panicked.
	pub fn is_panic(&self) -> bool {
		matches!(self, Self::Panicked(_))
	}
}

impl fmt::Debug for JoinError {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Cancelled => f.write_str("Cancelled"),
			Self::Panicked(panic) => write!(f, "Panicked({:?})", panic.message()),
		}
	}
}

impl fmt::Display for JoinError {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Cancelled => f.write_str("task cancelled"),
			Self::Panicked(panic) => write!(f, "task panicked: {}", panic.message()),
		}
	}
}

impl std::error::Error for JoinError {}

/// Awaits a task spawned on this worker. Dropping it detaches the task (see the module docs).
#[must_use = "dropping a JoinHandle detaches the task"]
pub struct JoinHandle<T> {
	task: Rc<dyn raw::Join<T>>,
	park: Park,
}

impl<T> JoinHandle<T> {
	pub(crate) fn new(task: Rc<dyn raw::Join<T>>) -> Self {
		Self {
			task,
			park: Park::new(),
		}
	}

	/// Takes the output if the task is over; otherwise registers `waiter` for its end.
	pub fn poll_join(&self, waiter: &Waiter) -> Poll<Result<T, JoinError>> {
		self.task.poll_join(waiter)
	}

	/// Stops the task: its future is dropped at its next turn, and joining yields `Cancelled`.
	pub fn abort(&self) {
		self.task.abort();
	}

	/// Whether the task is over.
	pub fn is_finished(&self) -> bool {
		self.task.is_finished()
	}
}

impl<T> Future for JoinHandle<T> {
	type Output = Result<T, JoinError>;

	fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
		let this = self.get_mut();
		let task = &this.task;
		this.park.poll(cx, |waiter| task.poll_join(waiter))
	}
}

/// Awaits a task spawned on another worker; `Send`, so any thread or task may hold it.
///
/// Dropping it detaches the task.
#[must_use = "dropping a RemoteJoinHandle detaches the task"]
pub struct RemoteJoinHandle<T> {
	output: Queue<Result<T, JoinError>>,
	park: Park,
}

impl<T> RemoteJoinHandle<T> {
	pub(crate) fn new(output: Queue<Result<T, JoinError>>) -> Self {
		Self {
			output,
			park: Park::new(),
		}
	}

	/// Takes the output if the task is over; otherwise registers `waiter` for its end.
	pub fn poll_join(&self, waiter: &Waiter) -> Poll<Result<T, JoinError>> {
		self.output
			.poll_pop(waiter)
			.map(|output| output.unwrap_or(Err(JoinError::Cancelled)))
	}
}

impl<T> Future for RemoteJoinHandle<T> {
	type Output = Result<T, JoinError>;

	fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
		let this = self.get_mut();
		let output = &this.output;
		this.park.poll(cx, |waiter| {
			output
				.poll_pop(waiter)
				.map(|output| output.unwrap_or(Err(JoinError::Cancelled)))
		})
	}
}

/// Yields once: the task goes to the back of the run queue, behind every task already runnable.
pub async fn yield_now() {
	let mut yielded = false;
	std::future::poll_fn(|cx| {
		if std::mem::replace(&mut yielded, true) {
			return Poll::Ready(());
		}
		cx.waker().wake_by_ref();
		Poll::Pending
	})
	.await;
}
