//! The task cell: one allocation per spawned task, holding its future (pinned in place), its
//! waiter, its output and the list its join handle parks on.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::JoinError;
use crate::{Waiter, WaiterList};

/// What the executor needs of a task, whatever its future type.
pub(crate) trait Run {
	/// Polls the future. `Ready` means the task is over (finished, panicked or aborted).
	fn run(&self, cx: &mut Context<'_>) -> Poll<()>;
	fn waiter(&self) -> &Waiter;
	/// Drops the future now (runtime shutdown); joiners see `Cancelled`.
	fn cancel(&self);
}

/// What a join handle needs of a task with output `T`.
pub(crate) trait Join<T> {
	fn poll_join(&self, waiter: &Waiter) -> Poll<Result<T, JoinError>>;
	fn abort(&self);
	fn is_finished(&self) -> bool;
}

enum Stage<F: Future> {
	Running(F),
	Finished(Result<F::Output, JoinError>),
	Consumed,
}

pub(crate) struct TaskCell<F: Future> {
	slot: u32,
	waiter: Waiter,
	stage: RefCell<Stage<F>>,
	joiners: RefCell<WaiterList>,
	aborted: Cell<bool>,
}

impl<F: Future> TaskCell<F> {
	#[inline(always)]
	pub(crate) fn new(future: F, slot: u32, waiter: Waiter) -> Self {
		Self {
			slot,
			waiter,
			stage: RefCell::new(Stage::Running(future)),
			joiners: RefCell::new(WaiterList::new()),
			aborted: Cell::new(false),
		}
	}

	/// A cell that never runs: for spawns refused during shutdown.
	pub(crate) fn cancelled(future: F, waiter: Waiter) -> Self {
		drop(future);
		Self {
			slot: u32::MAX,
			waiter,
			stage: RefCell::new(Stage::Finished(Err(JoinError::Cancelled))),
			joiners: RefCell::new(WaiterList::new()),
			aborted: Cell::new(true),
		}
	}

	fn finish(&self, result: Result<F::Output, JoinError>) {
		// The future drops here, in place (it is pinned there: a future that borrows from itself
		// reads its own fields as it drops), and then its result takes the place. Moved out
		// first (`mem::replace`, as before), an aborted future's drop read the place after the
		// result overwrote it: an async fn's guard holding a reference to its caller's argument
		// faulted (`a_finished_or_aborted_task_s_future_drops_where_it_was_pinned`). The stage
		// is borrowed meanwhile; what a drop may call on its own task (`is_finished`,
		// `poll_join`, `abort`) only tries to borrow it.
		*self.stage.borrow_mut() = Stage::Finished(result);
		self.joiners.borrow_mut().wake();
	}
}

impl<F: Future> Run for TaskCell<F> {
	fn run(&self, cx: &mut Context<'_>) -> Poll<()> {
		if self.aborted.get() {
			if matches!(*self.stage.borrow(), Stage::Running(_)) {
				self.finish(Err(JoinError::Cancelled));
			}
			return Poll::Ready(());
		}
		let mut stage = self.stage.borrow_mut();
		let Stage::Running(future) = &mut *stage else {
			return Poll::Ready(());
		};
		// SAFETY: Pin contract: the future lives inside the task's `Rc` allocation, which never
		// moves; it is never moved out of the stage, only dropped in place when the stage is
		// overwritten (`finish`) or when the cell drops.
		let future = unsafe { Pin::new_unchecked(future) };
		let result = catch_unwind(AssertUnwindSafe(|| future.poll(cx)));
		drop(stage);
		match result {
			Ok(Poll::Pending) => Poll::Pending,
			Ok(Poll::Ready(output)) => {
				self.finish(Ok(output));
				Poll::Ready(())
			}
			Err(panic) => {
				self.finish(Err(JoinError::Panicked(super::Panic::new(panic))));
				Poll::Ready(())
			}
		}
	}

	fn waiter(&self) -> &Waiter {
		&self.waiter
	}

	fn cancel(&self) {
		self.aborted.set(true);
		if matches!(*self.stage.borrow(), Stage::Running(_)) {
			self.finish(Err(JoinError::Cancelled));
		}
	}
}

impl<F: Future> Join<F::Output> for TaskCell<F> {
	fn poll_join(&self, waiter: &Waiter) -> Poll<Result<F::Output, JoinError>> {
		// A task joining itself would find its stage borrowed: it parks (forever, as it should).
		let Ok(mut stage) = self.stage.try_borrow_mut() else {
			self.joiners.borrow_mut().register(waiter);
			return Poll::Pending;
		};
		match std::mem::replace(&mut *stage, Stage::Consumed) {
			Stage::Finished(result) => Poll::Ready(result),
			Stage::Consumed => Poll::Ready(Err(JoinError::Cancelled)),
			running @ Stage::Running(_) => {
				*stage = running;
				self.joiners.borrow_mut().register(waiter);
				Poll::Pending
			}
		}
	}

	fn abort(&self) {
		if !self.aborted.replace(true) && !self.is_finished() {
			crate::exec::schedule_current(self.slot);
		}
	}

	fn is_finished(&self) -> bool {
		!matches!(self.stage.try_borrow().as_deref(), Ok(Stage::Running(_)) | Err(_))
	}
}

/// A panic payload's message, for reports.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
	payload
		.downcast_ref::<&str>()
		.copied()
		.or_else(|| payload.downcast_ref::<String>().map(String::as_str))
		.unwrap_or("(non-string panic payload)")
}
