//! Groups: append-only lists of frames, read while they are written.
//!
//! A group keeps its frames until its byte cap is exceeded; then it drops the oldest frames
//! (never the newest), and a reader that had not read them yet gets [`Error::Lagged`] once and
//! continues from the oldest frame still kept. One waiter list (`on_frame`) is drained by every
//! write, by finish and by abort.
//!
//! # Accounting
//!
//! Every frame costs its payload plus [`ENTRY_OVERHEAD`], for the group's byte cap and for the
//! pool alike, so a flood of empty frames fills the cap like a flood of bytes does. A frame shed
//! by the cap gives its charge back to the pool at once. A pool that cannot take a frame (it is at
//! its capacity, or a parent pool is), even after the track evicted what it could, refuses it: the
//! write fails with [`Error::Evicted`] and the group ends with that error, its frames still cached
//! and still charged until the track evicts the group, so what the cache holds never exceeds its
//! budget.
//!
//! A group the cache lets go (evicted for room, or expired) gives its charge back and drops its
//! frames at once, for its readers too: one that had not read them gets the eviction's error. A
//! reader that kept them instead (a subscriber that never reads, its group streams in flight)
//! would hold bytes the pool no longer counts, as many as the publisher sends. A group whose track
//! ends with an error is not the cache's choice: readers still read what it holds, and it stays
//! charged until the last of them drops it.

use std::collections::VecDeque;
use std::fmt;
use std::task::Poll;

use kio::sync::{Charge, Lock};
use kio::{Waiter, WaiterList, Wakes};

use super::pool::ENTRY_OVERHEAD;
use super::track::{TrackState, relieve_for};
use super::{Error, Frame, Pool};

/// The default byte cap of one group, which is also the largest frame a group takes.
pub const MAX_GROUP_BYTES: usize = 32 << 20;

pub(crate) struct GroupState {
	frames: VecDeque<Frame>,
	/// Frames dropped from the front by the byte cap: the index of `frames[0]`.
	dropped: u64,
	bytes: usize,
	cap: usize,
	end: Option<Result<(), Error>>,
	on_frame: WaiterList,
	/// The frames' cost, charged to the cache's pool (none for a group outside any).
	charge: Option<Charge>,
	/// Why the cache let the group go, dropping its frames: what a reader that had not read them
	/// gets.
	gone: Option<Error>,
}

impl GroupState {
	fn ended(&mut self, end: Result<(), Error>) -> Wakes {
		if self.end.is_none() {
			self.end = Some(end);
		}
		self.on_frame.take()
	}

	/// Gives this group's bytes back to the pool and stops charging it.
	pub(crate) fn release_pool(&mut self) {
		self.charge = None;
	}
}

/// A shared handle to a group's state, as the track cache holds it.
pub(crate) type GroupRef = Lock<GroupState>;

/// Writes a group. Dropping it without [`finish`](Self::finish) aborts the group with
/// [`Error::Dropped`].
pub struct GroupProducer {
	sequence: u64,
	state: GroupRef,
	done: bool,
	/// The track that created it, which makes room in the pool when it is full (only for groups
	/// that charge a pool).
	pub(crate) track: Option<Lock<TrackState>>,
}

impl GroupProducer {
	/// A group with sequence `sequence`, outside any track (tracks create theirs with
	/// [`TrackProducer::create_group`](super::TrackProducer::create_group)).
	pub fn new(sequence: u64) -> Self {
		Self::with(sequence, MAX_GROUP_BYTES, None)
	}

	pub(crate) fn with(sequence: u64, cap: usize, pool: Option<Pool>) -> Self {
		let state = Lock::new(GroupState {
			frames: VecDeque::new(),
			dropped: 0,
			bytes: 0,
			cap,
			end: None,
			on_frame: WaiterList::new(),
			charge: pool.as_ref().map(Pool::empty),
			gone: None,
		});
		Self {
			sequence,
			state,
			done: false,
			track: None,
		}
	}

	pub(crate) fn state(&self) -> &GroupRef {
		&self.state
	}

	/// The group's sequence number.
	pub fn sequence(&self) -> u64 {
		self.sequence
	}

	/// Appends a frame. A frame whose cost (payload plus [`ENTRY_OVERHEAD`]) is over the byte cap
	/// is refused with [`Error::TooLarge`]; frames that push the group over its cap drop the
	/// oldest frames. A frame the pool cannot take ends the group with [`Error::Evicted`].
	pub fn write_frame(&mut self, frame: Frame) -> Result<(), Error> {
		let cost = frame_cost(&frame);
		let mut frame = Some(frame);
		// The common case takes the group's lock once: the pool's charge is an atomic, no lock.
		match self.try_write(&mut frame, cost) {
			Written::Done(result) => return result,
			Written::PoolFull => {}
		}
		// The pool is full: the track makes room by evicting its own stalest groups. That locks
		// the track, and the track locks groups under its own lock, so the group's lock is not
		// held here.
		if let Some(track) = &self.track {
			relieve_for(track, self.sequence, cost);
		}
		match self.try_write(&mut frame, cost) {
			Written::Done(result) => result,
			Written::PoolFull => {
				self.done = true;
				// The frames already written stay cached, and charged, until the track evicts the
				// group or it is dropped: releasing the charge here would leave them uncounted.
				let wakes = self.state.lock().ended(Err(Error::Evicted));
				drop(wakes);
				Err(Error::Evicted)
			}
		}
	}

	/// Appends `frame` if the pool (if any) takes its cost.
	fn try_write(&mut self, frame: &mut Option<Frame>, cost: u64) -> Written {
		let wakes = {
			let mut state = self.state.lock();
			if let Some(end) = &state.end {
				return Written::Done(Err(end.clone().err().unwrap_or(Error::Finished)));
			}
			if cost > state.cap as u64 {
				return Written::Done(Err(Error::TooLarge));
			}
			if let Some(charge) = &mut state.charge
				&& !charge.grow(cost)
			{
				return Written::PoolFull;
			}
			state.bytes += cost as usize;
			state.frames.push_back(frame.take().expect("written once"));
			while state.bytes > state.cap && state.frames.len() > 1 {
				let oldest = state.frames.pop_front().expect("more than one frame");
				let shed = frame_cost(&oldest);
				state.bytes -= shed as usize;
				state.dropped += 1;
				if let Some(charge) = &mut state.charge {
					charge.shrink(shed);
				}
			}
			state.on_frame.take()
		};
		drop(wakes);
		Written::Done(Ok(()))
	}

	/// Ends the group cleanly: readers see the end after the last frame.
	pub fn finish(&mut self) -> Result<(), Error> {
		self.end(Ok(()))
	}

	/// Ends the group with an error.
	pub fn abort(&mut self, error: Error) {
		let _ = self.end(Err(error));
	}

	fn end(&mut self, end: Result<(), Error>) -> Result<(), Error> {
		self.done = true;
		let wakes = {
			let mut state = self.state.lock();
			if state.end.is_some() {
				return Err(Error::Finished);
			}
			state.ended(end)
		};
		drop(wakes);
		Ok(())
	}

	/// A reader from the group's first frame.
	pub fn consume(&self) -> GroupConsumer {
		GroupConsumer::new(self.sequence, self.state.clone())
	}
}

impl Drop for GroupProducer {
	fn drop(&mut self) {
		if !self.done {
			self.abort(Error::Dropped);
		}
	}
}

impl fmt::Debug for GroupProducer {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("GroupProducer")
			.field("sequence", &self.sequence)
			.finish()
	}
}

enum Written {
	Done(Result<(), Error>),
	PoolFull,
}

/// What a frame costs the group's cap and the pool: its payload plus [`ENTRY_OVERHEAD`].
fn frame_cost(frame: &Frame) -> u64 {
	frame.payload.len() as u64 + ENTRY_OVERHEAD
}

/// Aborts a group from the track's side, whoever holds its producer: evicted or expired by the
/// cache ([`Error::Evicted`], [`Error::Old`]: its frames go, see the module docs), or its track
/// ended with `error`.
pub(crate) fn abort_ref(state: &GroupRef, error: Error) {
	let (wakes, frames) = {
		let mut state = state.lock();
		let mut frames = VecDeque::new();
		if matches!(error, Error::Evicted | Error::Old) {
			state.release_pool();
			frames = std::mem::take(&mut state.frames);
			state.dropped += frames.len() as u64;
			state.bytes = 0;
			state.gone = Some(error.clone());
		}
		let wakes = match state.end.is_some() {
			// Readers waiting for a frame of an ended group: none (they would have its end).
			true => Wakes::none(),
			false => state.ended(Err(error)),
		};
		(wakes, frames)
	};
	// Freed and woken outside the lock.
	drop(frames);
	drop(wakes);
}

/// Reads a group's frames in order, from the first (or wherever it was cloned).
#[derive(Clone)]
pub struct GroupConsumer {
	sequence: u64,
	state: GroupRef,
	/// The index of the next frame to read.
	next: u64,
}

impl GroupConsumer {
	pub(crate) fn new(sequence: u64, state: GroupRef) -> Self {
		Self {
			sequence,
			state,
			next: 0,
		}
	}

	/// The group's sequence number.
	pub fn sequence(&self) -> u64 {
		self.sequence
	}

	/// The next frame; `Ok(None)` at a clean end; registers for the next write otherwise.
	pub fn poll_read_frame(&mut self, waiter: &Waiter) -> Poll<Result<Option<Frame>, Error>> {
		let mut state = self.state.lock();
		if self.next < state.dropped {
			self.next = state.dropped;
			return Poll::Ready(Err(state.gone.clone().unwrap_or(Error::Lagged)));
		}
		if let Some(frame) = state.frames.get((self.next - state.dropped) as usize) {
			self.next += 1;
			return Poll::Ready(Ok(Some(frame.clone())));
		}
		match &state.end {
			Some(Ok(())) => Poll::Ready(Ok(None)),
			Some(Err(error)) => Poll::Ready(Err(error.clone())),
			None => {
				state.on_frame.register(waiter);
				Poll::Pending
			}
		}
	}

	/// The next frame; `Ok(None)` at a clean end.
	pub async fn read_frame(&mut self) -> Result<Option<Frame>, Error> {
		kio::wait(|waiter| self.poll_read_frame(waiter)).await
	}

	/// Whether the group has ended (finished or aborted): every frame it will have is here.
	pub fn is_ended(&self) -> bool {
		self.state.lock().end.is_some()
	}

	/// Ready when the group has ended.
	pub fn poll_finished(&self, waiter: &Waiter) -> Poll<Result<(), Error>> {
		let mut state = self.state.lock();
		match &state.end {
			Some(end) => Poll::Ready(end.clone()),
			None => {
				state.on_frame.register(waiter);
				Poll::Pending
			}
		}
	}

	/// Waits until the group has ended.
	pub async fn finished(&self) -> Result<(), Error> {
		kio::wait(|waiter| self.poll_finished(waiter)).await
	}
}

impl fmt::Debug for GroupConsumer {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("GroupConsumer")
			.field("sequence", &self.sequence)
			.field("next", &self.next)
			.finish()
	}
}

#[cfg(test)]
mod tests {
	use super::*;
	use crate::model::Timestamp;

	fn frame(byte: u8, len: usize) -> Frame {
		Frame::new(Timestamp::new(u64::from(byte), 1000), vec![byte; len])
	}

	#[test]
	fn frames_stream_in_order_then_end() {
		kio::block_on(async {
			let mut group = GroupProducer::new(7);
			let mut reader = group.consume();
			let task = kio::spawn(async move {
				let mut got = Vec::new();
				while let Some(frame) = reader.read_frame().await.unwrap() {
					got.push(frame.payload[0]);
				}
				got
			});
			for byte in 0..5 {
				group.write_frame(frame(byte, 10)).unwrap();
				kio::yield_now().await;
			}
			group.finish().unwrap();
			assert_eq!(task.await.unwrap(), vec![0, 1, 2, 3, 4]);
		});
	}

	#[test]
	fn a_byte_cap_drops_the_oldest_frames_and_a_reader_that_wanted_them_lags() {
		kio::block_on(async {
			// Room for two frames of 40 bytes and their bookkeeping, not three.
			let cap = 3 * (40 + ENTRY_OVERHEAD as usize) - 1;
			let mut group = GroupProducer::with(0, cap, None);
			let mut slow = group.consume();
			let mut fast = group.consume();
			group.write_frame(frame(1, 40)).unwrap();
			assert_eq!(fast.read_frame().await.unwrap().unwrap().payload[0], 1);
			group.write_frame(frame(2, 40)).unwrap();
			group.write_frame(frame(3, 40)).unwrap(); // over the cap: frame 1 is dropped
			assert_eq!(
				fast.read_frame().await.unwrap().unwrap().payload[0],
				2,
				"fast had read frame 1"
			);
			assert_eq!(slow.read_frame().await, Err(Error::Lagged));
			assert_eq!(slow.read_frame().await.unwrap().unwrap().payload[0], 2);
			assert_eq!(group.write_frame(frame(4, cap)), Err(Error::TooLarge));
		});
	}

	#[test]
	fn empty_frames_count_against_the_cap_and_the_pool() {
		// An empty frame that cost the cap nothing would let a group of a million of them stay
		// under any cap while holding a million entries.
		let pool = Pool::new(1 << 20);
		let cap = 10 * ENTRY_OVERHEAD as usize;
		let mut group = GroupProducer::with(0, cap, Some(pool.clone()));
		let reader = group.consume();
		for i in 0..1000u16 {
			group.write_frame(frame(i as u8, 0)).unwrap();
		}
		let state = reader.state.lock();
		assert_eq!(state.frames.len(), 10, "the cap holds ten empty frames");
		assert_eq!(state.dropped, 990);
		drop(state);
		assert_eq!(pool.used(), 10 * ENTRY_OVERHEAD, "shed frames gave their charge back");
	}

	#[test]
	fn a_full_pool_refuses_the_frame_and_ends_the_group() {
		let pool = Pool::new(3 * (100 + ENTRY_OVERHEAD));
		let mut group = GroupProducer::with(0, MAX_GROUP_BYTES, Some(pool.clone()));
		let mut reader = group.consume();
		for byte in 0..3 {
			group.write_frame(frame(byte, 100)).unwrap();
		}
		assert_eq!(group.write_frame(frame(3, 100)), Err(Error::Evicted));
		// The frames written before are still cached, so still charged: releasing them here would
		// leave the cache holding what the pool no longer counts.
		assert_eq!(
			pool.used(),
			3 * (100 + ENTRY_OVERHEAD),
			"only the refused frame is not charged"
		);
		kio::block_on(async {
			assert_eq!(reader.read_frame().await.unwrap().unwrap().payload[0], 0);
			while let Ok(Some(_)) = reader.read_frame().await {}
			assert_eq!(reader.finished().await, Err(Error::Evicted));
		});
		drop((group, reader));
		assert_eq!(pool.used(), 0, "the charge goes when the group does");
	}

	#[test]
	fn dropping_the_producer_aborts_the_group() {
		kio::block_on(async {
			let group = GroupProducer::new(0);
			let mut reader = group.consume();
			drop(group);
			assert_eq!(reader.read_frame().await, Err(Error::Dropped));
		});
	}
}
