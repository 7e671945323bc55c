//! Broadcasts: named tracks, and on-demand track requests served by a handler.
//!
//! A consumer asks for a track by name. An existing track is returned at once. Otherwise, if
//! the producer serves requests ([`BroadcastProducer::serve_requests`]), the track is created
//! empty, recorded under its name (so concurrent requests coalesce) and handed to the
//! producer's [`requested_track`](BroadcastProducer::requested_track) queue; the consumer's
//! cursor fills as the handler writes. Without a handler the request fails with
//! [`Error::NotFound`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::task::Poll;

use kio::sync::Lock;
use kio::{Waiter, WaiterList, Wakes};

use super::track::TrackState;
use super::{Error, Pool, Subscription, TrackConsumer, TrackInfo, TrackProducer};

struct BroadcastState {
	tracks: HashMap<String, Lock<TrackState>>,
	requests: VecDeque<TrackProducer>,
	serving: bool,
	/// The byte pool requested tracks charge, if any.
	pool: Option<Pool>,
	end: Option<Result<(), Error>>,
	/// Drained by a new request and by the end.
	on_request: WaiterList,
	/// Drained by the end.
	on_end: WaiterList,
	producers: usize,
}

impl BroadcastState {
	fn ended(&mut self, end: Result<(), Error>) -> (Wakes, Vec<TrackProducer>) {
		self.end = Some(end);
		let mut wakes = self.on_request.take();
		wakes.append(self.on_end.take());
		(wakes, self.requests.drain(..).collect())
	}
}

/// Publishes a broadcast's tracks. Cloneable; dropping the last clone without
/// [`finish`](Self::finish) aborts it with [`Error::Dropped`].
pub struct BroadcastProducer {
	state: Lock<BroadcastState>,
}

impl Default for BroadcastProducer {
	fn default() -> Self {
		Self::new()
	}
}

impl BroadcastProducer {
	/// An empty broadcast.
	pub fn new() -> Self {
		Self {
			state: Lock::new(BroadcastState {
				tracks: HashMap::new(),
				requests: VecDeque::new(),
				serving: false,
				pool: None,
				end: None,
				on_request: WaiterList::new(),
				on_end: WaiterList::new(),
				producers: 1,
			}),
		}
	}

	/// Adds a track. A live track with the same name is [`Error::Duplicate`]; an ended one is
	/// replaced.
	pub fn create_track(&self, name: &str, info: TrackInfo) -> Result<TrackProducer, Error> {
		self.insert_track(TrackProducer::new(name, info))
	}

	/// Adds a track built elsewhere (with a pool, say).
	pub fn insert_track(&self, track: TrackProducer) -> Result<TrackProducer, Error> {
		let mut state = self.state.lock();
		if let Some(end) = &state.end {
			return Err(end.clone().err().unwrap_or(Error::Finished));
		}
		let name = track.name();
		if let Some(existing) = state.tracks.get(&name)
			&& TrackProducer::is_live(existing)
		{
			return Err(Error::Duplicate);
		}
		state.tracks.insert(name, track.state().clone());
		Ok(track)
	}

	/// Forgets `track` if it is the one recorded under its name (a requested track whose handler
	/// is done with it), so a name asked for once is not kept for the broadcast's life.
	pub fn remove_track(&self, track: &TrackProducer) {
		let name = track.name();
		let mut state = self.state.lock();
		if state.tracks.get(&name).is_some_and(|kept| kept.ptr_eq(track.state())) {
			state.tracks.remove(&name);
		}
	}

	/// Requested tracks created from now on charge `pool` (a relay's shared cache budget).
	pub fn set_pool(&self, pool: Pool) {
		self.state.lock().pool = Some(pool);
	}

	/// Starts serving requests for tracks that do not exist: they queue for
	/// [`requested_track`](Self::requested_track).
	pub fn serve_requests(&self) {
		self.state.lock().serving = true;
	}

	/// Stops serving requests for tracks that do not exist: nobody will fill them (its publisher
	/// went, and it only lingers). A track asked for from now on is one it has, or not found; the
	/// requests waiting are aborted as dropped, so their subscribers learn it now rather than at
	/// the linger's end.
	pub fn stop_serving(&self) {
		let waiting = {
			let mut state = self.state.lock();
			state.serving = false;
			std::mem::take(&mut state.requests)
		};
		for track in waiting {
			track.abort(Error::Dropped);
		}
	}

	/// The next requested track, to fill (set its info, write its groups) or abort; `None` once
	/// the broadcast ended.
	pub fn poll_requested_track(&self, waiter: &Waiter) -> Poll<Option<TrackProducer>> {
		let mut state = self.state.lock();
		if let Some(track) = state.requests.pop_front() {
			return Poll::Ready(Some(track));
		}
		if state.end.is_some() {
			return Poll::Ready(None);
		}
		state.on_request.register(waiter);
		Poll::Pending
	}

	/// Waits for the next requested track.
	pub async fn requested_track(&self) -> Option<TrackProducer> {
		kio::wait(|waiter| self.poll_requested_track(waiter)).await
	}

	/// Ends the broadcast cleanly. Its tracks keep their own state.
	pub fn finish(&self) {
		self.end(Ok(()));
	}

	/// Ends the broadcast with an error; pending requests are aborted with it.
	pub fn abort(&self, error: Error) {
		self.end(Err(error));
	}

	fn end(&self, end: Result<(), Error>) {
		let error = end.clone().err();
		let (wakes, requests) = {
			let mut state = self.state.lock();
			if state.end.is_some() {
				return;
			}
			state.ended(end)
		};
		drop(wakes);
		for track in requests {
			track.abort(error.clone().unwrap_or(Error::NotFound));
		}
	}

	/// A consumer of this broadcast.
	pub fn consume(&self) -> BroadcastConsumer {
		BroadcastConsumer {
			state: self.state.clone(),
			requester: None,
		}
	}
}

impl TrackProducer {
	fn is_live(state: &Lock<TrackState>) -> bool {
		state.lock().is_live()
	}
}

impl Clone for BroadcastProducer {
	fn clone(&self) -> Self {
		self.state.lock().producers += 1;
		Self {
			state: self.state.clone(),
		}
	}
}

impl Drop for BroadcastProducer {
	fn drop(&mut self) {
		let last = {
			let mut state = self.state.lock();
			state.producers -= 1;
			state.producers == 0
		};
		if last {
			self.abort(Error::Dropped);
		}
	}
}

impl fmt::Debug for BroadcastProducer {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str("BroadcastProducer { .. }")
	}
}

/// Reads a broadcast: asks for its tracks by name.
#[derive(Clone)]
pub struct BroadcastConsumer {
	state: Lock<BroadcastState>,
	/// Recorded on the tracks this consumer's requests create.
	requester: Option<u64>,
}

impl BroadcastConsumer {
	/// This consumer, recording the tracks its requests create as `requester`'s (see
	/// [`OriginConsumer::requesting_as`](super::OriginConsumer::requesting_as)).
	pub fn requested_by(&self, requester: Option<u64>) -> Self {
		Self {
			state: self.state.clone(),
			requester,
		}
	}

	/// A cursor on track `name` from its latest group, carrying `subscription` as demand.
	/// Creates the track through the producer's request handler if it does not exist.
	pub fn subscribe_track(&self, name: &str, subscription: Subscription) -> Result<TrackConsumer, Error> {
		let state = self.track_state(name)?;
		Ok(TrackConsumer::subscribed(state, subscription, self.requester))
	}

	/// A cursor on track `name` without demand (see [`subscribe_track`](Self::subscribe_track)).
	pub fn track(&self, name: &str) -> Result<TrackConsumer, Error> {
		let state = self.track_state(name)?;
		TrackProducer::asked(&state, self.requester);
		Ok(TrackConsumer::new(state).for_requester(self.requester))
	}

	fn track_state(&self, name: &str) -> Result<Lock<TrackState>, Error> {
		let (track, wakes) = {
			let mut state = self.state.lock();
			if let Some(track) = state.tracks.get(name)
				&& TrackProducer::is_live(track)
			{
				return Ok(track.clone());
			}
			if let Some(end) = &state.end {
				return Err(end.clone().err().unwrap_or(Error::NotFound));
			}
			if !state.serving {
				return match state.tracks.get(name) {
					Some(track) => Ok(track.clone()),
					None => Err(Error::NotFound),
				};
			}
			let track = TrackProducer::pending(name, state.pool.clone(), self.requester);
			state.tracks.insert(name.to_owned(), track.state().clone());
			let shared = track.state().clone();
			state.requests.push_back(track);
			(shared, state.on_request.take())
		};
		drop(wakes);
		Ok(track)
	}

	/// The number of tracks recorded under a name (for tests and metrics).
	pub fn tracks(&self) -> usize {
		self.state.lock().tracks.len()
	}

	/// Whether the broadcast has ended.
	pub fn is_closed(&self) -> bool {
		self.state.lock().end.is_some()
	}

	/// Ready once the broadcast has ended.
	pub fn poll_closed(&self, waiter: &Waiter) -> Poll<Result<(), Error>> {
		let mut state = self.state.lock();
		if let Some(end) = &state.end {
			return Poll::Ready(end.clone());
		}
		state.on_end.register(waiter);
		Poll::Pending
	}

	/// Waits until the broadcast has ended.
	pub async fn closed(&self) -> Result<(), Error> {
		kio::wait(|waiter| self.poll_closed(waiter)).await
	}

	/// Whether two consumers read the same broadcast.
	pub fn same(&self, other: &Self) -> bool {
		self.state.ptr_eq(&other.state)
	}
}

impl fmt::Debug for BroadcastConsumer {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str("BroadcastConsumer { .. }")
	}
}
