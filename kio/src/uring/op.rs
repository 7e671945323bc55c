//! Operation slots, their keys, dispatch, orphans and cancels (see the [module docs](super)).
//!
//! `user_data` of an operation is `generation:31 | index:32` (bit 63 clear, which keeps the
//! driver's own tags `WAKE` and `CANCEL` apart). A slot's generation moves on every time it is
//! freed, so a late cancel, or a handle that outlived its operation, never touches the slot's
//! next operation (mitchellh/libxev#233 was a cancel that hit a reused `user_data`).

use std::any::Any;
use std::collections::VecDeque;
use std::io;
use std::marker::PhantomData;
use std::rc::Rc;
use std::task::{Poll, Waker};

use io_uring::{cqueue, squeue};

use super::buf::BufRing;
use super::{Ring, Woken, count, fd, no_ring, with_ring};
use crate::{Waiter, WaiterList};

const GEN_MASK: u32 = 0x7FFF_FFFF;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OpKey {
	idx: u32,
	generation: u32,
}

impl OpKey {
	fn user_data(self) -> u64 {
		(u64::from(self.generation) << 32) | u64::from(self.idx)
	}

	fn from_user_data(user_data: u64) -> Option<Self> {
		(user_data >> 63 == 0).then_some(Self {
			idx: user_data as u32,
			generation: (user_data >> 32) as u32,
		})
	}
}

/// What a completion may hand over, and so what the driver must release when nobody takes it.
pub(super) enum Produces {
	Nothing,
	/// A new fd in the result (accept): closed if unclaimed.
	Fd,
	/// A buffer picked from this ring (flags carry its id): returned to the ring if unclaimed.
	Buf(Rc<BufRing>),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
	Free,
	/// In the user-space spill queue: the kernel has not seen it.
	Spilled,
	/// In the submission queue or in the kernel.
	Staged,
	/// The terminal completion arrived.
	Done,
}

struct Slot {
	generation: u32,
	stage: Stage,
	orphan: bool,
	multishot: bool,
	/// Completions not yet taken by the owner.
	results: VecDeque<(i32, u32)>,
	/// Single-shot: the owner's waker.
	waker: Option<Waker>,
	/// Multishot: every task polling the socket that owns it.
	waiters: WaiterList,
	/// Everything the kernel may touch, until the terminal completion.
	keep: Option<Box<dyn Any>>,
	produces: Produces,
}

/// The op slab. Slots are never removed, only reset, so each keeps its generation and the
/// capacity of its result queue.
#[derive(Default)]
pub(super) struct Slots {
	slots: Vec<Slot>,
	free: Vec<u32>,
	live: usize,
}

impl Slots {
	fn alloc(&mut self, keep: Option<Box<dyn Any>>, produces: Produces, multishot: bool) -> OpKey {
		let idx = match self.free.pop() {
			Some(idx) => idx,
			None => {
				self.slots.push(Slot {
					generation: 0,
					stage: Stage::Free,
					orphan: false,
					multishot: false,
					results: VecDeque::new(),
					waker: None,
					waiters: WaiterList::new(),
					keep: None,
					produces: Produces::Nothing,
				});
				u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 operations")
			}
		};
		let slot = &mut self.slots[idx as usize];
		debug_assert_eq!(slot.stage, Stage::Free);
		slot.stage = Stage::Staged;
		slot.multishot = multishot;
		slot.keep = keep;
		slot.produces = produces;
		self.live += 1;
		count(|c| &c.ops, 1);
		OpKey {
			idx,
			generation: slot.generation,
		}
	}

	fn get_mut(&mut self, key: OpKey) -> Option<&mut Slot> {
		self.slots
			.get_mut(key.idx as usize)
			.filter(|slot| slot.generation == key.generation && slot.stage != Stage::Free)
	}

	fn key_of(&self, user_data: u64) -> Option<OpKey> {
		let key = OpKey::from_user_data(user_data)?;
		let slot = self.slots.get(key.idx as usize)?;
		(slot.generation == key.generation && slot.stage != Stage::Free).then_some(key)
	}

	pub(super) fn live(&self) -> usize {
		self.live
	}

	pub(super) fn mark_staged(&mut self, user_data: u64) {
		if let Some(key) = self.key_of(user_data)
			&& let Some(slot) = self.get_mut(key)
			&& slot.stage == Stage::Spilled
		{
			slot.stage = Stage::Staged;
		}
	}

	/// Teardown ran out of time: the kernel may still use what the slots keep.
	pub(super) fn leak(&mut self) {
		std::mem::forget(std::mem::take(&mut self.slots));
	}
}

/// Releases what an unclaimed completion produced.
fn release(produces: &Produces, res: i32, flags: u32, woken: &mut Option<crate::waiter::Wakes>) {
	match produces {
		Produces::Nothing => {}
		Produces::Fd => {
			if res >= 0 {
				fd::close(res);
			}
		}
		Produces::Buf(ring) => {
			if let Some(bid) = cqueue::buffer_select(flags) {
				let wakes = ring.put(bid);
				if !wakes.is_empty() {
					match woken {
						Some(lists) => lists.append(wakes),
						None => *woken = Some(wakes),
					}
				}
			}
		}
	}
}

impl Ring {
	/// Starts an operation: the slot takes `keep` and `produces` until the terminal completion.
	///
	/// # Safety
	///
	/// Every pointer in `sqe` must point into `keep`'s heap contents (which moving the box does
	/// not move), or into memory `produces` keeps alive, or into memory otherwise valid until
	/// the operation's terminal completion.
	unsafe fn start(
		&mut self,
		sqe: squeue::Entry,
		keep: Option<Box<dyn Any>>,
		produces: Produces,
		multishot: bool,
	) -> OpKey {
		if let Produces::Buf(ring) = &produces {
			ring.op_started();
		}
		let key = self.ops.alloc(keep, produces, multishot);
		// SAFETY: forwarded from this function's contract; the slot now owns what the entry
		// points to, and frees it only after the terminal completion.
		let spilled = unsafe { self.push(sqe.user_data(key.user_data())) };
		if spilled && let Some(slot) = self.ops.get_mut(key) {
			slot.stage = Stage::Spilled;
		}
		key
	}

	/// Dispatches one completion.
	pub(super) fn complete(&mut self, user_data: u64, res: i32, flags: u32, woken: &mut Woken) {
		let Some(key) = self.ops.key_of(user_data) else {
			count(|c| &c.stray, 1);
			debug_assert!(false, "kio: a completion for no live operation ({user_data:#x})");
			return;
		};
		let slot = self.ops.get_mut(key).expect("key_of checked the slot");
		let more = slot.multishot && cqueue::more(flags);
		match &slot.produces {
			Produces::Buf(ring) if cqueue::buffer_select(flags).is_some() => ring.taken(),
			Produces::Fd if res >= 0 => count(|c| &c.fds, 1),
			_ => {}
		}
		if slot.orphan {
			release(&slot.produces, res, flags, &mut self.lists);
			if !more {
				self.free(key);
			}
			return;
		}
		slot.results.push_back((res, flags));
		if !more {
			slot.stage = Stage::Done;
		}
		if let Some(waker) = slot.waker.take() {
			woken.wakers.push(waker);
		}
		let wakes = slot.waiters.take();
		woken.list(wakes);
	}

	fn free(&mut self, key: OpKey) {
		let Some(slot) = self.ops.get_mut(key) else {
			return;
		};
		slot.stage = Stage::Free;
		slot.generation = slot.generation.wrapping_add(1) & GEN_MASK;
		slot.results.clear();
		if slot.orphan {
			count(|c| &c.orphans, -1);
		}
		slot.orphan = false;
		if let Some(waker) = slot.waker.take() {
			self.graveyard.push(waker);
		}
		let wakes = slot.waiters.take();
		let keep = slot.keep.take();
		let produces = std::mem::replace(&mut slot.produces, Produces::Nothing);
		self.ops.free.push(key.idx);
		self.ops.live -= 1;
		count(|c| &c.ops, -1);
		if !wakes.is_empty() {
			match &mut self.lists {
				Some(lists) => lists.append(wakes),
				None => self.lists = Some(wakes),
			}
		}
		// Only kio's own types are kept (buffers, headers, `Rc<Fd>`): dropping them runs no
		// user code, so it may happen under the ring's borrow.
		drop(keep);
		if let Produces::Buf(ring) = produces {
			ring.op_finished();
			let bgid = ring.bgid();
			drop(ring);
			self.maybe_unregister(bgid);
		}
	}

	/// The owner of `key` is gone: release what its queued completions produced, and free the
	/// slot now (done, or never seen by the kernel) or after its terminal completion (cancel
	/// sent when `cancel`).
	fn orphan(&mut self, key: OpKey, cancel: bool) {
		let Some(slot) = self.ops.get_mut(key) else {
			return;
		};
		if slot.orphan {
			return;
		}
		for (res, flags) in slot.results.drain(..) {
			release(&slot.produces, res, flags, &mut self.lists);
		}
		if let Some(waker) = slot.waker.take() {
			self.graveyard.push(waker);
		}
		let wakes = slot.waiters.take();
		if !wakes.is_empty() {
			match &mut self.lists {
				Some(lists) => lists.append(wakes),
				None => self.lists = Some(wakes),
			}
		}
		let Some(slot) = self.ops.get_mut(key) else {
			return;
		};
		match slot.stage {
			Stage::Done => self.free(key),
			Stage::Spilled | Stage::Staged => {
				slot.orphan = true;
				count(|c| &c.orphans, 1);
				// A spilled entry is discarded when the spill queue reaches it.
				if slot.stage == Stage::Staged && cancel {
					self.cancel(key.user_data());
				}
			}
			Stage::Free => {}
		}
	}

	/// For the spill drain: frees and returns true if `user_data` is an operation orphaned
	/// while its entry waited in the spill queue (the entry is then dropped unsubmitted).
	pub(super) fn discard_if_orphaned_in_spill(&mut self, user_data: u64) -> bool {
		let Some(key) = self.ops.key_of(user_data) else {
			return false;
		};
		let slot = self.ops.get_mut(key).expect("key_of checked the slot");
		if slot.stage == Stage::Spilled && slot.orphan {
			self.free(key);
			return true;
		}
		false
	}

	/// Teardown: every live operation becomes an orphan (the cancel-any covers them).
	pub(super) fn orphan_all(&mut self) {
		let keys: Vec<OpKey> = (0..self.ops.slots.len() as u32)
			.filter_map(|idx| {
				let slot = &self.ops.slots[idx as usize];
				(slot.stage != Stage::Free).then_some(OpKey {
					idx,
					generation: slot.generation,
				})
			})
			.collect();
		for key in keys {
			self.orphan(key, false);
		}
	}

	/// Teardown: entries still spilled never reached the kernel; free their operations.
	pub(super) fn discard_spill(&mut self) {
		while let Some(entry) = self.spill.pop_front() {
			if let Some(key) = self.ops.key_of(entry.get_user_data()) {
				self.free(key);
			}
		}
	}

	fn poll_single(&mut self, key: OpKey, waiter: &Waiter) -> Poll<Option<Completed>> {
		let Some(slot) = self.ops.get_mut(key) else {
			return Poll::Ready(None);
		};
		if let Some((res, flags)) = slot.results.pop_front() {
			let keep = slot.keep.take();
			self.free(key);
			return Poll::Ready(Some((res, flags, keep)));
		}
		let waker = waiter.waker();
		match &slot.waker {
			Some(current) if current.will_wake(&waker) => {}
			_ => {
				if let Some(old) = slot.waker.replace(waker) {
					self.graveyard.push(old);
				}
			}
		}
		Poll::Pending
	}

	fn poll_multi(&mut self, key: OpKey, waiter: &Waiter) -> Poll<Option<(i32, u32)>> {
		let Some(slot) = self.ops.get_mut(key) else {
			return Poll::Ready(None);
		};
		if let Some(result) = slot.results.pop_front() {
			return Poll::Ready(Some(result));
		}
		if slot.stage == Stage::Done {
			self.free(key);
			return Poll::Ready(None);
		}
		slot.waiters.register(waiter);
		Poll::Pending
	}
}

/// A single-shot completion as the slab hands it over: result, flags, the box it kept.
type Completed = (i32, u32, Option<Box<dyn Any>>);

/// A single-shot operation's completion, with the box it kept handed back.
pub(crate) struct Done<T> {
	/// The CQE's result: a count, or a negated errno.
	pub(crate) res: i32,
	pub(crate) keep: Box<T>,
}

impl<T> Done<T> {
	/// The result as `io::Result`.
	pub(crate) fn result(&self) -> io::Result<usize> {
		if self.res < 0 {
			Err(io::Error::from_raw_os_error(-self.res))
		} else {
			Ok(self.res as usize)
		}
	}
}

/// The owner's handle of a single-shot operation that keeps a `T` until its terminal
/// completion. Dropping it before then orphans the operation (see the module docs).
#[must_use = "dropping an operation cancels it"]
pub(crate) struct Op<T: 'static> {
	key: Option<OpKey>,
	serial: u64,
	_keeps: PhantomData<(Box<T>, *const ())>,
}

impl<T: 'static> Op<T> {
	/// Stages `sqe` on this worker's ring; the slot keeps `keep` until the terminal completion.
	///
	/// # Safety
	///
	/// Every pointer in `sqe` must point into `keep`'s heap contents (which moving the box does
	/// not move) or into memory that is valid until the operation's terminal completion.
	pub(super) unsafe fn start(sqe: squeue::Entry, keep: Box<T>) -> io::Result<Self> {
		with_ring(None, move |ring, serial| {
			// SAFETY: forwarded from this function's contract.
			let key = unsafe { ring.start(sqe, Some(keep as Box<dyn Any>), Produces::Nothing, false) };
			Self {
				key: Some(key),
				serial,
				_keeps: PhantomData,
			}
		})
		.ok_or_else(no_ring)
	}

	/// Ready with the completion (and the box back) once the terminal CQE arrived; otherwise
	/// stores `waiter`'s waker for the dispatch to wake.
	pub(crate) fn poll(&mut self, waiter: &Waiter) -> Poll<io::Result<Done<T>>> {
		let Some(key) = self.key else {
			return Poll::Ready(Err(io::Error::other("kio: operation polled after it completed")));
		};
		match with_ring(Some(self.serial), |ring, _| ring.poll_single(key, waiter)) {
			Some(Poll::Pending) => Poll::Pending,
			Some(Poll::Ready(Some((res, _flags, keep)))) => {
				self.key = None;
				let keep = keep
					.and_then(|keep| keep.downcast::<T>().ok())
					.expect("an operation's box has its type");
				Poll::Ready(Ok(Done { res, keep }))
			}
			Some(Poll::Ready(None)) | None => {
				self.key = None;
				Poll::Ready(Err(no_ring()))
			}
		}
	}
}

impl<T: 'static> Drop for Op<T> {
	fn drop(&mut self) {
		if let Some(key) = self.key.take() {
			with_ring(Some(self.serial), |ring, _| ring.orphan(key, true));
		}
	}
}

/// The owner's handle of a multishot operation. Its completions queue in the slot until taken;
/// [`MultiOp::poll_next`] returns `None` once the terminal one has been taken.
#[must_use = "dropping an operation cancels it"]
pub(crate) struct MultiOp {
	key: Option<OpKey>,
	serial: u64,
	_not_send: PhantomData<*const ()>,
}

impl MultiOp {
	/// Stages a multishot `sqe` on the ring of worker `serial` (this worker's if `None`); the slot
	/// keeps `keep` and `produces` until the terminal completion.
	///
	/// # Safety
	///
	/// As [`Op::start`]; buffers selected from a ring must come from the ring in `produces`.
	pub(super) unsafe fn start(
		serial: Option<u64>,
		sqe: squeue::Entry,
		keep: Box<dyn Any>,
		produces: Produces,
	) -> io::Result<Self> {
		with_ring(serial, move |ring, serial| {
			// SAFETY: forwarded from this function's contract.
			let key = unsafe { ring.start(sqe, Some(keep), produces, true) };
			Self {
				key: Some(key),
				serial,
				_not_send: PhantomData,
			}
		})
		.ok_or_else(no_ring)
	}

	/// The next completion `(result, flags)`, or `None` once the operation has ended (its
	/// terminal completion was taken; re-arm to continue). Pending registers `waiter`.
	pub(crate) fn poll_next(&mut self, waiter: &Waiter) -> Poll<Option<(i32, u32)>> {
		let Some(key) = self.key else {
			return Poll::Ready(None);
		};
		match with_ring(Some(self.serial), |ring, _| ring.poll_multi(key, waiter)) {
			Some(Poll::Pending) => Poll::Pending,
			Some(Poll::Ready(Some(result))) => Poll::Ready(Some(result)),
			Some(Poll::Ready(None)) | None => {
				self.key = None;
				Poll::Ready(None)
			}
		}
	}
}

impl Drop for MultiOp {
	fn drop(&mut self) {
		if let Some(key) = self.key.take() {
			with_ring(Some(self.serial), |ring, _| ring.orphan(key, true));
		}
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn user_data_round_trips_and_never_collides_with_driver_tags() {
		let key = OpKey {
			idx: u32::MAX,
			generation: GEN_MASK,
		};
		let ud = key.user_data();
		assert_eq!(OpKey::from_user_data(ud), Some(key));
		assert!(ud < super::super::CANCEL);
		assert_eq!(OpKey::from_user_data(super::super::WAKE), None);
		assert_eq!(OpKey::from_user_data(super::super::CANCEL), None);
	}
}
