//! The subscriber half: takes the peer's announcements into an origin, fetches tracks on
//! demand, and ingests group streams and datagrams.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use tracing::trace;

use super::budget::{Held, Resource};
use super::io::{self, Reader, Sending};
use super::publisher::Owned;
use super::{GroupLoss, Inner, MAX_FRAME, SessionError};
use crate::coding::DecodeError;
use crate::lite::{
	Announce, AnnounceOk, AnnounceRequest, AnnounceStatus, ControlType, DataType, Datagram, ErrorCode, FrameHeader,
	GroupHeader, Subscribe, SubscribeResponse, SubscribeUpdate, Track, TrackInfo as WireTrackInfo,
};
use crate::model::{
	self, BroadcastProducer, Frame, OriginProducer, Path, Publication, Route, Subscription, Timestamp, TrackInfo,
	TrackProducer,
};
use crate::transport::{RecvStream, Transport, TransportError, TransportExt};

/// How often a peer that resets our announcement request for overflow is asked again, at most.
const RESYNC_PAUSE: Duration = Duration::from_secs(1);

/// Requests the peer's announcements and mirrors them into `origin`. A peer that could not keep
/// up with what changed (its queue for us past its bound) resets the request with BoundsExceeded:
/// we ask again, keep what we mirror, and end what the new request's current set no longer has.
pub(super) async fn run<T: Transport + 'static>(inner: Rc<Inner<T>>, origin: OriginProducer) {
	let mut mirrored = Mirrors {
		inner: &inner,
		map: HashMap::new(),
	};
	let mut asked = kio::time::now();
	loop {
		match announcements(&inner, &origin, &mut mirrored.map).await {
			Err(SessionError::Transport(TransportError::Reset(code))) if code == ErrorCode::BoundsExceeded.code() => {
				// Each request makes the peer send its whole current set again: a peer that keeps
				// overflowing is asked at most once every `RESYNC_PAUSE`, not as fast as it resets.
				kio::time::sleep_until(asked + RESYNC_PAUSE).await;
				asked = kio::time::now();
				continue;
			}
			Err(err) if err.is_fatal() => inner.fail(&err),
			Err(_) => {}
			// The peer's FIN ends them all cleanly; a failure leaves them to `Mirrors`' drop.
			Ok(()) => {
				for (_, broadcast) in mirrored.map.drain() {
					broadcast.end(true);
				}
			}
		}
		return;
	}
}

/// A broadcast this session announced into the origin on the peer's behalf.
struct Mirrored {
	broadcast: BroadcastProducer,
	_publication: Publication,
	_tracks: Owned,
	_charge: Held,
}

impl Mirrored {
	/// Ends it: cleanly on the peer's `ended`, as a dropped publisher when the stream is lost.
	fn end(self, clean: bool) {
		if clean {
			self.broadcast.finish();
		} else {
			self.broadcast.abort(model::Error::Dropped);
		}
	}

	/// Keeps it announced for `linger` after its peer was lost, then ends it as a dropped
	/// publisher. Its tracks stop now (nothing feeds them); a watcher that holds it simply hears
	/// nothing new. Any live route of the path outranks it from now on
	/// ([`Publication::linger`]): one that is there already takes over at once, and so does a
	/// publisher that reconnects meanwhile, through this relay or another, after which this one
	/// is a backup nobody sees go.
	fn linger(self, linger: Duration) {
		let Self {
			broadcast,
			_publication: publication,
			_charge: charge,
			..
		} = self;
		publication.linger();
		// A track asked of it while it lingers would wait for a publisher that is gone; asked
		// elsewhere (a relay's subscriber), it is found missing or dropped now, and a subscriber
		// of a reconnecting owner follows the owner's next publication.
		broadcast.stop_serving();
		// Outside a worker (the runtime is being torn down) there is nothing to linger for. The
		// announcement stays charged (and in the gauges) until it goes.
		let _detached = kio::try_spawn(async move {
			kio::time::sleep(linger).await;
			broadcast.abort(model::Error::Dropped);
			drop(publication);
			drop(charge);
		});
	}
}

/// The broadcasts one announcement stream mirrors. Whatever is left when it drops (the stream
/// failed, or the session's tasks were stopped) ends as its peer did: a peer lost abruptly
/// ([`Inner::lost_abruptly`]) leaves them announced for [`Config::linger`](super::Config::linger);
/// otherwise they end at once as dropped publishers.
struct Mirrors<'a, T: Transport + 'static> {
	inner: &'a Inner<T>,
	map: HashMap<Path, Mirrored>,
}

impl<T: Transport + 'static> Drop for Mirrors<'_, T> {
	fn drop(&mut self) {
		let linger = self.inner.config.linger;
		let lingers = !linger.is_zero() && self.inner.lost_abruptly();
		for (_, broadcast) in self.map.drain() {
			match lingers {
				true => broadcast.linger(linger),
				false => broadcast.end(false),
			}
		}
	}
}

async fn announcements<T: Transport + 'static>(
	inner: &Rc<Inner<T>>,
	origin: &OriginProducer,
	mirrored: &mut HashMap<Path, Mirrored>,
) -> Result<(), SessionError> {
	let (send, recv) = inner.transport.open_bi().await.map_err(SessionError::Transport)?;
	let mut send = Sending::new(send);
	let mut reader = Reader::charged(recv, &inner.budget);
	let request = AnnounceRequest {
		prefix: Path::default(),
		exclude_hop: inner.config.origin,
	};
	let version = inner.config.version;
	io::write_typed_for(&mut send.send, u64::from(ControlType::Announce), &request, version).await?;
	// 05 names the sender in ANNOUNCE_OK (and leaves it out of the chains); on 03 and 04 each
	// chain ends with the sender already.
	let (peer, initial) = if version.has_announce_ok() {
		let Some(ok) = reader.decode::<AnnounceOk>().await? else {
			return Ok(());
		};
		(ok.origin, Some(ok.active))
	} else {
		(0, None)
	};
	let result = mirror(inner, origin, &mut reader, peer, mirrored, initial).await;
	let _ = send.finish();
	result
}

/// Mirrors what the announcement stream says. `initial` is how many ANNOUNCEs make up the
/// current set (05's ANNOUNCE_OK): what we mirror already (a request asked again) is kept if the
/// set has it, ended if not, once the set is read.
async fn mirror<T: Transport + 'static, R: RecvStream>(
	inner: &Rc<Inner<T>>,
	origin: &OriginProducer,
	reader: &mut Reader<R>,
	peer: u64,
	mirrored: &mut HashMap<Path, Mirrored>,
	initial: Option<u64>,
) -> Result<(), SessionError> {
	// The paths mirrored before this request that its current set has not named yet.
	let mut unconfirmed: Option<std::collections::HashSet<Path>> =
		(!mirrored.is_empty()).then(|| mirrored.keys().cloned().collect());
	let mut initial = initial.unwrap_or(0);
	if initial == 0 {
		end_unconfirmed(mirrored, &mut unconfirmed);
	}
	while let Some(announce) = reader.decode_for::<Announce>(inner.config.version).await? {
		let in_current_set = initial > 0;
		initial = initial.saturating_sub(1);
		if let Some(unconfirmed) = &mut unconfirmed {
			unconfirmed.remove(&announce.suffix);
		}
		match announce.status {
			// The current set names a broadcast we mirror already: it goes on as it is.
			AnnounceStatus::Active if in_current_set && mirrored.contains_key(&announce.suffix) => {}
			AnnounceStatus::Active | AnnounceStatus::Restart => {
				let mut hops = announce.hops;
				if peer != 0 {
					hops.push(peer);
				}
				// Our own id in the chain: the broadcast came from us. Never take it back.
				if inner.config.origin != 0 && hops.contains(&inner.config.origin) {
					continue;
				}
				if let Some(old) = mirrored.remove(&announce.suffix) {
					old.end(true);
				}
				// Past the session's budget, further announcements are ignored: the peer's other
				// broadcasts go on.
				let Some(charge) = inner.budget.hold(Resource::Announces) else {
					continue;
				};
				// Serving requests starts before the announcement, so a consumer on another worker
				// that sees it at once finds the broadcast ready.
				let broadcast = BroadcastProducer::new();
				if let Some(pool) = &inner.config.pool {
					broadcast.set_pool(pool.clone());
				}
				broadcast.serve_requests();
				// A path outside what this session may publish into is ignored.
				let route = match inner.config.cluster {
					true => Route::cluster(hops),
					false => Route::new(hops),
				};
				let Ok(publication) = origin.publish(&announce.suffix, broadcast.consume(), route) else {
					continue;
				};
				let mut tracks = Owned::default();
				tracks.push(kio::spawn(serve_requests(
					inner.clone(),
					announce.suffix.clone(),
					broadcast.clone(),
				)));
				mirrored.insert(
					announce.suffix,
					Mirrored {
						broadcast,
						_publication: publication,
						_tracks: tracks,
						_charge: charge,
					},
				);
			}
			AnnounceStatus::Ended => {
				if let Some(old) = mirrored.remove(&announce.suffix) {
					old.end(true);
				}
			}
		}
		if initial == 0 {
			end_unconfirmed(mirrored, &mut unconfirmed);
		}
	}
	Ok(())
}

/// The current set is read: what it did not name is over.
fn end_unconfirmed(mirrored: &mut HashMap<Path, Mirrored>, unconfirmed: &mut Option<std::collections::HashSet<Path>>) {
	for path in unconfirmed.take().into_iter().flatten() {
		if let Some(old) = mirrored.remove(&path) {
			old.end(true);
		}
	}
}

/// Serves the tracks downstream asks for on a mirrored broadcast, each from upstream, at most
/// [`Limits::track_requests`](super::Limits::track_requests) at once over all the session's
/// broadcasts. The budget is shared by every peer asking for them, so when it is spent a new
/// request takes the place of another (see [`Requests::make_room`]), which ends with
/// BoundsExceeded; only when none may go is the new one refused. Refusing the newest whatever the
/// others were would let names one viewer asked for (and left, or asked of a publisher slow to
/// answer) keep every other viewer from the publisher's tracks.
async fn serve_requests<T: Transport + 'static>(inner: Rc<Inner<T>>, path: Path, broadcast: BroadcastProducer) {
	let serving = Serving::new(&inner.requests);
	while let Some(track) = broadcast.requested_track().await {
		if inner.budget.is_full(Resource::TrackRequests) {
			inner.requests.borrow_mut().make_room(track.requester());
		}
		let Some(charge) = inner.budget.hold(Resource::TrackRequests) else {
			broadcast.remove_track(&track);
			track.abort(model::Error::BoundsExceeded);
			continue;
		};
		let charge = Rc::new(Cell::new(Some(charge)));
		let task = kio::spawn(forward(
			inner.clone(),
			path.clone(),
			broadcast.clone(),
			track.clone(),
			charge.clone(),
		));
		inner.requests.borrow_mut().push(Request {
			track,
			broadcast: broadcast.clone(),
			serving: serving.id,
			task,
			charge,
		});
	}
}

/// A track being served from upstream: its broadcast and which [`serve_requests`] took it, its
/// task, and the charge it holds (given back by the task when it ends, or by eviction at once, so
/// the request that evicted it can take it).
struct Request {
	track: TrackProducer,
	broadcast: BroadcastProducer,
	serving: u64,
	task: kio::JoinHandle<()>,
	charge: Rc<Cell<Option<Held>>>,
}

impl Request {
	/// Ends the request at once and forgets its track.
	fn evict(self) {
		self.task.abort();
		self.charge.take();
		self.broadcast.remove_track(&self.track);
		self.track.abort(model::Error::BoundsExceeded);
	}
}

/// Requesters past which a track is held too widely to count against any (see
/// [`Requests::make_room`]).
const HOLDERS_COUNTED: usize = 16;

/// The tracks a session serves from upstream, over all its mirrored broadcasts, oldest first;
/// their tasks are aborted when it drops (with the session).
#[derive(Default)]
pub(super) struct Requests {
	requests: VecDeque<Request>,
	/// The id the next [`Serving`] takes.
	next_serving: u64,
}

impl Requests {
	fn push(&mut self, request: Request) {
		// Ended requests are dropped now and then, not on each push (as `Owned` does).
		let len = self.requests.len();
		if len >= 16 && len.is_power_of_two() {
			self.requests.retain(|request| !request.task.is_finished());
		}
		self.requests.push_back(request);
	}

	/// Ends a request to make room for one from `requester`, and gives its charge back:
	/// - the oldest whose subscribers have all left (it only lingers) and nobody has asked for
	///   since ([`TrackProducer::is_abandoned`]);
	/// - or else one of the requester that holds the most (see [`TrackProducer::holders`] and
	///   `of_the_greediest`), if that is at least two more than `requester` holds, so nobody is
	///   held below another's share. A name asked for by a TRACK and not yet subscribed to is its
	///   asker's: a viewer between its TRACK and its SUBSCRIBE keeps it unless it holds the most.
	///
	/// Requests without a requester (the application's own) count as one requester's. Only when
	/// the budget is spent: it walks every request.
	fn make_room(&mut self, requester: Option<u64>) {
		self.requests.retain(|request| !request.task.is_finished());
		let abandoned = self.requests.iter().position(|request| request.track.is_abandoned());
		let Some(at) = abandoned.or_else(|| self.of_the_greediest(requester)) else {
			return;
		};
		self.requests.remove(at).expect("found above").evict();
	}

	/// A request of the requester holding the most, if that is two more than `requester` holds.
	/// A track held by k requesters counts 1/k to each (so two peers asking for the same names
	/// cannot pin them all), and one held by more than [`HOLDERS_COUNTED`] to none. Of the
	/// greediest one's requests, one upstream has not answered goes first (a name that may never
	/// be), then the least shared, then the newest: a long-watched track outlasts a burst of new
	/// names, whoever else shares the requester (a cluster peer's viewers, an address's).
	fn of_the_greediest(&self, requester: Option<u64>) -> Option<usize> {
		let holders: Vec<Option<Vec<Option<u64>>>> = self
			.requests
			.iter()
			.map(|request| request.track.holders(HOLDERS_COUNTED))
			.collect();
		let mut held: HashMap<Option<u64>, f64> = HashMap::new();
		for shared in holders.iter().flatten() {
			for holder in shared {
				*held.entry(*holder).or_default() += 1.0 / shared.len() as f64;
			}
		}
		let mine = held.get(&requester).copied().unwrap_or(0.0);
		let (&greediest, &most) = held.iter().max_by(|a, b| a.1.total_cmp(b.1))?;
		if most < mine + 2.0 {
			return None;
		}
		holders
			.iter()
			.enumerate()
			.filter_map(|(at, shared)| Some((at, shared.as_ref()?)))
			.filter(|(_, shared)| shared.contains(&greediest))
			.min_by_key(|&(at, shared)| (self.requests[at].track.has_info(), shared.len(), std::cmp::Reverse(at)))
			.map(|(at, _)| at)
	}
}

impl Drop for Requests {
	fn drop(&mut self) {
		for request in &self.requests {
			request.task.abort();
		}
	}
}

/// One [`serve_requests`]: when it ends (its broadcast ended, or was replaced), so do the
/// requests it took.
struct Serving<'a> {
	requests: &'a RefCell<Requests>,
	id: u64,
}

impl<'a> Serving<'a> {
	fn new(requests: &'a RefCell<Requests>) -> Self {
		let mut all = requests.borrow_mut();
		let id = all.next_serving;
		all.next_serving += 1;
		Self { requests, id }
	}
}

impl Drop for Serving<'_> {
	fn drop(&mut self) {
		let mut all = self.requests.borrow_mut();
		all.requests.retain(|request| {
			let mine = request.serving == self.id;
			if mine {
				// The charge at once, not when the aborted task next runs: a request on another
				// broadcast in the meantime finds the room.
				request.task.abort();
				request.charge.take();
			}
			!mine
		});
	}
}

/// How long a track fetched from upstream stays after its last subscriber left (or after its
/// info, if nobody subscribes): a viewer that comes back within it finds the track and its info
/// (its cache went with the upstream subscription that filled it); past it the track ends and
/// its name is forgotten, so names asked for once are not kept.
pub(crate) const TRACK_IDLE_LINGER: Duration = Duration::from_secs(10);

async fn forward<T: Transport + 'static>(
	inner: Rc<Inner<T>>,
	path: Path,
	broadcast: BroadcastProducer,
	track: TrackProducer,
	charge: Rc<Cell<Option<Held>>>,
) {
	if let Err(err) = fetch_track(&inner, &path, &track).await {
		if err.is_fatal() {
			inner.fail(&err);
		}
		// A publisher lost with its connection is a dropped producer, whatever the transport
		// said: its viewers may follow the same owner's next broadcast (see the publisher's
		// `subscribe`).
		let error = match inner.lost_abruptly() {
			true => model::Error::Dropped,
			false => model::Error::Aborted(err.code()),
		};
		track.abort(error);
	}
	broadcast.remove_track(&track);
	charge.take();
}

/// TRACK for the info, then one upstream SUBSCRIBE per period of demand, each filling the cache
/// afresh, until the track has had no demand for [`TRACK_IDLE_LINGER`].
async fn fetch_track<T: Transport + 'static>(
	inner: &Rc<Inner<T>>,
	path: &Path,
	track: &TrackProducer,
) -> Result<(), SessionError> {
	if inner.config.version.has_track_stream() {
		let (send, recv) = inner.transport.open_bi().await.map_err(SessionError::Transport)?;
		let mut send = Sending::new(send);
		let mut reader = Reader::charged(recv, &inner.budget);
		let request = Track {
			broadcast: path.clone(),
			track: track.name(),
		};
		io::write_typed(&mut send.send, u64::from(ControlType::Track), &request).await?;
		let info: WireTrackInfo = reader
			.decode()
			.await?
			.ok_or(SessionError::Protocol(ErrorCode::ProtocolViolation))?;
		track.set_info(TrackInfo {
			timescale: info.timescale,
			latency_max: info.latency_max,
			priority: info.priority,
			ordered: info.ordered,
		});
		send.finish()?;
	} else {
		// 03 and 04 have no TRACK: what the public implementation assumes of such a track.
		track.set_info(TrackInfo {
			timescale: 1000,
			latency_max: Duration::from_secs(5),
			priority: 0,
			ordered: false,
		});
	}
	let mut seen = 0;
	loop {
		let mut linger = kio::time::Deadline::new(Some(kio::time::now() + TRACK_IDLE_LINGER));
		let idle = kio::wait(|waiter| {
			if track.poll_used(waiter).is_ready() {
				return Poll::Ready(false);
			}
			linger.poll_elapsed(waiter).map(|()| true)
		})
		.await;
		if idle {
			return Ok(());
		}
		if track.is_ended() {
			return Ok(());
		}
		let Some(demand) = track.subscription() else {
			continue;
		};
		subscribe(inner, path, track, demand, &mut seen).await?;
	}
}

enum UpstreamEvent {
	Response(Result<Option<SubscribeResponse>, SessionError>),
	Demand(Option<Subscription>),
}

/// Retires a subscribe id when the upstream subscription ends.
struct Retire<'a, T: Transport>(&'a Inner<T>, u64);

impl<T: Transport> Drop for Retire<'_, T> {
	fn drop(&mut self) {
		self.0.subscriptions.borrow_mut().remove(&self.1);
	}
}

/// One upstream SUBSCRIBE: follows demand with SUBSCRIBE_UPDATE, FINs when demand ends.
async fn subscribe<T: Transport + 'static>(
	inner: &Rc<Inner<T>>,
	path: &Path,
	track: &TrackProducer,
	demand: Subscription,
	seen: &mut u64,
) -> Result<(), SessionError> {
	let id = inner.next_subscribe_id.get();
	inner.next_subscribe_id.set(id + 1);
	inner
		.subscriptions
		.borrow_mut()
		.insert(id, (path.clone(), track.clone()));
	let _retire = Retire(inner, id);
	let (send, recv) = inner.transport.open_bi().await.map_err(SessionError::Transport)?;
	let mut send = Sending::new(send);
	let mut reader = Reader::charged(recv, &inner.budget);
	let request = Subscribe {
		id,
		broadcast: path.clone(),
		track: track.name(),
		priority: demand.priority,
		ordered: demand.ordered,
		latency_max: demand.latency_max,
		start: demand.start,
		end: demand.end,
	};
	io::write_typed(&mut send.send, u64::from(ControlType::Subscribe), &request).await?;
	loop {
		let event = kio::wait(|waiter| {
			if let Poll::Ready(response) = reader.poll_decode_for::<SubscribeResponse>(waiter, inner.config.version) {
				return Poll::Ready(UpstreamEvent::Response(response));
			}
			track.poll_subscription_changed(waiter, seen).map(UpstreamEvent::Demand)
		})
		.await;
		match event {
			UpstreamEvent::Response(Ok(Some(SubscribeResponse::End { group }))) => {
				// The track's final boundary; groups below it may still be on their way.
				let _ = track.finish_at(group);
			}
			UpstreamEvent::Response(Ok(Some(_))) => {}
			// The publisher's FIN: every group up to the end was sent. Their streams may still be
			// arriving, so the subscription stays live until they have (or demand ends).
			UpstreamEvent::Response(Ok(None)) => {
				if !track.is_ended() {
					let _ = track.finish();
				}
				kio::wait(|waiter| {
					loop {
						if track.poll_complete(waiter).is_ready() {
							return Poll::Ready(());
						}
						match track.poll_subscription_changed(waiter, seen) {
							Poll::Ready(None) => return Poll::Ready(()),
							Poll::Ready(Some(_)) => continue,
							Poll::Pending => return Poll::Pending,
						}
					}
				})
				.await;
				return send.finish();
			}
			UpstreamEvent::Response(Err(SessionError::Transport(TransportError::Reset(code)))) => {
				return Err(SessionError::Model(model::Error::Aborted(code)));
			}
			UpstreamEvent::Response(Err(err)) => return Err(err),
			UpstreamEvent::Demand(Some(demand)) => {
				let update = SubscribeUpdate {
					priority: demand.priority,
					ordered: demand.ordered,
					latency_max: demand.latency_max,
					start: demand.start,
					end: demand.end,
				};
				io::write(&mut send.send, &update).await?;
			}
			// Nobody downstream wants it any more: cancel upstream, and start the cache over,
			// since the next subscription's groups may be numbered afresh (the public JavaScript
			// publisher serves each from 0): kept, it would refuse them as duplicates and serve
			// this subscription's stale groups instead. Unless a subscriber came back meanwhile
			// (on another worker): then the subscription goes on, and the next turn sends its
			// demand.
			UpstreamEvent::Demand(None) => {
				if track.start_over() {
					return send.finish();
				}
			}
		}
	}
}

/// Accepts the peer's uni streams: group data for our subscriptions.
pub(super) async fn accept_groups<T: Transport + 'static>(inner: Rc<Inner<T>>) {
	while let Ok(recv) = inner.transport.accept_uni().await {
		inner.spawn(ingest(inner.clone(), recv));
	}
}

/// Reads the peer's QUIC datagrams (05): each a group of one frame for one of our subscriptions,
/// written to its track as a group stream's would be (the cache charges it the same way; the
/// transport bounds what waits unread). One for a subscription we no longer have is dropped, as
/// the draft says; one that does not decode is a protocol error, as a bad stream is.
pub(super) async fn accept_datagrams<T: Transport + 'static>(inner: Rc<Inner<T>>) {
	while let Ok(datagram) = inner.transport.recv_datagram().await {
		let datagram = match Datagram::decode_bytes(&datagram) {
			Ok(datagram) => datagram,
			Err(err) => return inner.fail(&SessionError::Decode(err)),
		};
		let Some((path, track)) = inner.subscriptions.borrow().get(&datagram.subscribe_id).cloned() else {
			continue;
		};
		trace!(broadcast = %path, track = %track.name(), sequence = datagram.sequence, "group in: datagram");
		if let Some(counters) = inner.config.counters.as_deref() {
			counters.groups_in.fetch_add(1, Ordering::Relaxed);
			counters
				.bytes_in
				.fetch_add(datagram.payload.len() as u64, Ordering::Relaxed);
		}
		// A group the track already has, or one too old for it, is dropped like a late stream's.
		let Ok(mut group) = track.create_group(datagram.sequence) else {
			inner.budget.lost(GroupLoss::Refused);
			continue;
		};
		let stamp = Timestamp::new(datagram.timestamp, track.info().timescale);
		// Copied out (at most a packet): a slice would keep the buffer it arrived in, which the
		// cache does not charge.
		let payload = bytes::Bytes::copy_from_slice(&datagram.payload);
		if group.write_frame(Frame::new(stamp, payload)).is_ok() {
			let _ = group.finish();
		}
	}
}

async fn ingest<T: Transport + 'static>(inner: Rc<Inner<T>>, recv: T::RecvHalf) {
	let mut reader = Reader::charged(recv, &inner.budget);
	match read_group(&inner, &mut reader).await {
		Ok(()) => {}
		Err(err) if err.is_fatal() => inner.fail(&err),
		Err(err) => reader.stop(err.code()),
	}
}

/// Now, since the Unix epoch, in units of `timescale` per second (for frames without a timestamp).
fn arrival_millis(timescale: u64) -> u64 {
	let now = std::time::SystemTime::now()
		.duration_since(std::time::UNIX_EPOCH)
		.unwrap_or_default();
	(now.as_millis() as u64).saturating_mul(timescale) / 1000
}

async fn read_group<T: Transport + 'static, R: RecvStream>(
	inner: &Inner<T>,
	reader: &mut Reader<R>,
) -> Result<(), SessionError> {
	match reader.decode::<DataType>().await {
		Ok(Some(DataType::Group)) => {}
		// Exactly one SETUP per direction, and it came first.
		Ok(Some(DataType::Setup)) => return Err(SessionError::Protocol(ErrorCode::ProtocolViolation)),
		Ok(None) => return Ok(()),
		Err(SessionError::Decode(DecodeError::UnexpectedStream(_))) => {
			reader.stop(ErrorCode::UnexpectedStream.code());
			return Ok(());
		}
		Err(err) => return Err(err),
	}
	let header: GroupHeader = reader.decode().await?.ok_or(SessionError::Decode(DecodeError::Short))?;
	let (path, track) = {
		let subscriptions = inner.subscriptions.borrow();
		match subscriptions.get(&header.subscribe_id) {
			Some((path, track)) => (path.clone(), track.clone()),
			// A late group of a subscription we cancelled: not the peer's fault.
			None if header.subscribe_id < inner.next_subscribe_id.get() => {
				return Err(SessionError::Model(model::Error::Cancelled));
			}
			None => return Err(SessionError::Protocol(ErrorCode::ProtocolViolation)),
		}
	};
	let timescale = track.info().timescale;
	let mut group = track.create_group(header.sequence).map_err(|err| {
		trace!(broadcast = %path, track = %track.name(), sequence = header.sequence, %err, "group in: refused");
		inner.budget.lost(GroupLoss::Refused);
		SessionError::Model(err)
	})?;
	trace!(broadcast = %path, track = %track.name(), sequence = header.sequence, "group in");
	let counters = inner.config.counters.as_deref();
	if let Some(counters) = counters {
		counters.groups_in.fetch_add(1, Ordering::Relaxed);
	}
	let version = inner.config.version;
	let mut stamp = 0u64;
	loop {
		let frame = match reader.decode_for::<FrameHeader>(version).await {
			Ok(Some(frame)) => frame,
			Ok(None) => return group.finish().map_err(SessionError::Model),
			// The stream ended inside a frame header.
			Err(SessionError::Decode(DecodeError::Short)) => return Err(SessionError::Protocol(ErrorCode::WrongSize)),
			Err(err) => return Err(err),
		};
		if frame.size > MAX_FRAME {
			group.abort(model::Error::TooLarge);
			return Err(SessionError::Protocol(ErrorCode::FrameTooLarge));
		}
		stamp = if version.has_track_stream() {
			stamp
				.checked_add_signed(frame.timestamp_delta)
				.ok_or(SessionError::Protocol(ErrorCode::ProtocolViolation))?
		} else {
			// 03 and 04 frames carry no timestamp: their arrival time, in the synthesised
			// timescale's milliseconds since the Unix epoch.
			arrival_millis(timescale)
		};
		let payload = kio::wait(|waiter| reader.poll_read_exact(waiter, frame.size as usize))
			.await?
			.ok_or(SessionError::Protocol(ErrorCode::WrongSize))?;
		if let Some(counters) = counters {
			counters.bytes_in.fetch_add(payload.len() as u64, Ordering::Relaxed);
		}
		group
			.write_frame(Frame::new(Timestamp::new(stamp, timescale), payload))
			.map_err(|err| {
				// The cache refused the frame (the group was evicted, say): this stream alone stops.
				SessionError::Model(err)
			})?;
	}
}
