//! The publisher half: serves the peer's Announce, Track, Subscribe and Fetch streams from an
//! origin.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kio::{JoinHandle, Waiter, WaiterList};
use tracing::trace;

use super::budget::{Budget, Resource};
use super::io::{self, Reader, Sending};
use super::{Counters, GroupLoss, Inner, SessionError};
use crate::coding::{DecodeError, Encode, EncodeError};
use crate::lite::{
	Announce, AnnounceOk, AnnounceRequest, AnnounceStatus, ControlType, DataType, ErrorCode, Fetch, FrameHeader,
	GroupHeader, Subscribe, SubscribeResponse, SubscribeUpdate, Track, TrackInfo as WireTrackInfo, Version,
	VersionedEncode,
};
use crate::model::{
	self, BroadcastConsumer, GroupConsumer, Origin, OriginConsumer, Path, Subscription, TrackConsumer, TrackInfo,
	Update,
};
use crate::transport::{RecvStream, SendStream, SendStreamExt, Transport, TransportError, TransportExt};

/// What one request the peer opens costs while it is served, beyond what it reads in part: its
/// task with the handler's state (boxed, 1-2 KB) and the stream's state in the transport
/// (quinn-proto's send and receive records), rounded up.
const REQUEST_COST: u64 = 4 << 10;

/// Accepts the peer's bidirectional streams and serves each in its own task.
/// Each is a request paced by [`Limits::request_rate`](super::Limits::request_rate): one that
/// must wait holds the next ones back, and the peer's streams past its allowance with them.
pub(super) async fn run<T: Transport + 'static>(inner: Rc<Inner<T>>, publish: Option<OriginConsumer>) {
	while let Ok((send, recv)) = inner.transport.accept_bi().await {
		inner.pace.admit().await;
		inner.spawn(serve(inner.clone(), send, recv, publish.clone()));
	}
}

async fn serve<T: Transport + 'static>(
	inner: Rc<Inner<T>>,
	send: T::SendHalf,
	recv: T::RecvHalf,
	publish: Option<OriginConsumer>,
) {
	// What serving the request costs while it lasts (its task and state, the stream's in the
	// transport), charged to the connection's memory where a relay charges it.
	let _cost = inner.budget.charge(Resource::Requests, REQUEST_COST);
	let mut reader = Reader::charged(recv, &inner.budget);
	let mut send = Sending::new(send);
	let kind = match reader.decode::<ControlType>().await {
		Ok(Some(kind)) => kind,
		Ok(None) => return,
		Err(SessionError::Decode(DecodeError::UnexpectedStream(_))) => {
			// An unknown stream type is never fatal to the session.
			send.reset(ErrorCode::UnexpectedStream.code());
			reader.stop(ErrorCode::UnexpectedStream.code());
			return;
		}
		Err(err) => return conclude(&inner, &mut send, Err(err)),
	};
	// Each handler's future is boxed: a stream's task lives as long as its request, and inline
	// it would be the size of the largest handler whatever the request (1.2 KB a stream).
	let result = match (kind, &publish) {
		(ControlType::Announce, Some(origin)) => Box::pin(announce(&inner, &mut send, &mut reader, origin)).await,
		(ControlType::Track, Some(origin)) => Box::pin(track(&mut send, &mut reader, origin)).await,
		(ControlType::Subscribe, Some(origin)) => Box::pin(subscribe(&inner, &mut send, &mut reader, origin)).await,
		(ControlType::Fetch, Some(origin)) => Box::pin(fetch(&mut send, &mut reader, origin)).await,
		// Nothing to publish: the peer hears an empty set (and nothing more until it ends the
		// stream), not a refusal. Some peers end the whole session on a refused ANNOUNCE_REQUEST,
		// and "nothing announced" is simply true.
		(ControlType::Announce, None) => {
			Box::pin(announce(&inner, &mut send, &mut reader, &Origin::new(0).consumer())).await
		}
		(ControlType::Track | ControlType::Subscribe | ControlType::Fetch, None) => {
			Err(SessionError::Refused(ErrorCode::InvalidRole))
		}
		// 03 and 04 peers open a Probe stream unasked, and `@moq/lite` 0.2.2 ends its whole
		// connection if it is reset: read it quietly to its end.
		(ControlType::Probe, _) if !inner.config.version.has_setup_stream() => {
			probe(&mut reader, inner.config.version).await
		}
		// We advertise no Probe level, so a Probe stream is refused.
		(ControlType::Probe, _) => Err(SessionError::Refused(ErrorCode::Unsupported)),
		// GOAWAY is only logged by the reference implementation; read it and move on.
		(ControlType::Goaway, _) => goaway(&mut reader).await,
		(ControlType::Session, _) => Err(SessionError::Refused(ErrorCode::UnexpectedStream)),
	};
	conclude(&inner, &mut send, result);
}

/// Ends a served stream: a fatal error closes the session; anything else resets only this
/// stream (with Cancel when the transport failed under it: the code is ours, not the peer's).
fn conclude<T: Transport + 'static, S: SendStream>(
	inner: &Inner<T>,
	send: &mut Sending<S>,
	result: Result<(), SessionError>,
) {
	match result {
		Ok(()) => {}
		Err(err) if err.is_fatal() => inner.fail(&err),
		Err(SessionError::Transport(_)) => send.reset(ErrorCode::Cancel.code()),
		Err(err) => send.reset(err.code()),
	}
}

async fn probe<R: RecvStream>(reader: &mut Reader<R>, version: Version) -> Result<(), SessionError> {
	while reader.decode_for::<crate::lite::Probe>(version).await?.is_some() {}
	Ok(())
}

async fn goaway<R: RecvStream>(reader: &mut Reader<R>) -> Result<(), SessionError> {
	while reader.decode::<crate::lite::Goaway>().await?.is_some() {}
	Ok(())
}

/// The most bytes of announcements written at once, so a large set goes out in chunks of this.
const ANNOUNCE_BATCH: usize = 8 << 10;

enum AnnounceEvent {
	Update(Update),
	/// The updates the peer did not read passed the session's budget.
	Overflow,
	End(Result<bool, SessionError>),
}

async fn announce<T: Transport + 'static, S: SendStream, R: RecvStream>(
	inner: &Inner<T>,
	send: &mut Sending<S>,
	reader: &mut Reader<R>,
	origin: &OriginConsumer,
) -> Result<(), SessionError> {
	let version = inner.config.version;
	let Some(request) = reader.decode_for::<AnnounceRequest>(version).await? else {
		return Ok(());
	};
	// Never reflect a route back through the peer: by its request, or by its SETUP Origin.
	let exclude = if request.exclude_hop != 0 {
		request.exclude_hop
	} else {
		inner.peer.origin
	};
	// A cluster peer hears only what our own clients publish: what we learned from a peer, each
	// other peer learns from that peer itself (no transit).
	let cursor = if inner.config.cluster {
		origin.announced_to_peer(&request.prefix, exclude)
	} else if exclude != 0 {
		origin.announced_excluding(&request.prefix, exclude)
	} else {
		origin.announced(&request.prefix)
	};
	// What changes while the peer does not read is queued, charged to the session: past its
	// budget the request is reset, and the peer asks again to hear the current set.
	let mut cursor = cursor.bounded(inner.budget.account(Resource::AnnounceBytes));
	// 05 names the sender once, in ANNOUNCE_OK, and leaves it out of every chain; 03 and 04 have
	// no ANNOUNCE_OK, and the sender puts itself at the end of each chain.
	if version.has_announce_ok() {
		let ok = AnnounceOk {
			origin: inner.config.origin,
			active: cursor.queued() as u64,
		};
		io::write(&mut send.send, &ok).await?;
	}
	let sender = (!version.has_announce_ok() && inner.config.origin != 0).then_some(inner.config.origin);
	loop {
		let event = kio::wait(|waiter| {
			match cursor.poll_next_bounded(waiter) {
				Poll::Ready(Ok(update)) => return Poll::Ready(AnnounceEvent::Update(update)),
				Poll::Ready(Err(_)) => return Poll::Ready(AnnounceEvent::Overflow),
				Poll::Pending => {}
			}
			reader.poll_end(waiter).map(AnnounceEvent::End)
		})
		.await;
		match event {
			AnnounceEvent::Update(first) => {
				// What the cursor has ready goes in one write, up to a few KiB: a walk of a large
				// set as one chunk per message would cost the stream's queue and quinn-proto a
				// record per few dozen bytes.
				let mut out = Vec::new();
				let mut next = Some(first);
				while let Some(update) = next {
					let suffix = update.path.strip_prefix(&request.prefix).unwrap_or(update.path);
					let message = match update.broadcast {
						Some(_) => {
							let mut hops = update.route.hops;
							hops.extend(sender);
							Announce {
								status: AnnounceStatus::Active,
								suffix,
								hops,
							}
						}
						None => Announce {
							status: AnnounceStatus::Ended,
							suffix,
							hops: Vec::new(),
						},
					};
					// One update that cannot be encoded is skipped, never the stream that carries the
					// others (the origin refuses such paths where they are made; this is the
					// backstop).
					let at = out.len();
					if message.try_encode_for(version, &mut out).is_err() {
						out.truncate(at);
					}
					next = (out.len() < ANNOUNCE_BATCH).then(|| cursor.try_next()).flatten();
				}
				if !out.is_empty() {
					SendStreamExt::write(&mut send.send, Bytes::from(out))
						.await
						.map_err(SessionError::Transport)?;
				}
			}
			AnnounceEvent::Overflow => {
				inner.budget.refused();
				return Err(SessionError::Refused(ErrorCode::BoundsExceeded));
			}
			// The subscriber's FIN: no more updates wanted.
			AnnounceEvent::End(Ok(true)) => return send.finish(),
			AnnounceEvent::End(Ok(false)) => return Err(SessionError::Protocol(ErrorCode::UnexpectedMessage)),
			AnnounceEvent::End(Err(err)) => return Err(err),
		}
	}
}

/// The broadcast at `path`: Unauthorized (6) outside what this session may subscribe to,
/// NotFound (13) where nothing is announced.
fn broadcast(origin: &OriginConsumer, path: &Path) -> Result<BroadcastConsumer, SessionError> {
	origin.broadcast(path).map_err(SessionError::Model)
}

/// A cursor on track `name` of the broadcast at `path`, and its info once known (an on-demand
/// track's info comes from upstream: this waits for it).
async fn resolve(origin: &OriginConsumer, path: &Path, name: &str) -> Result<(TrackConsumer, TrackInfo), SessionError> {
	let track = broadcast(origin, path)?.track(name).map_err(SessionError::Model)?;
	let info = track.info_known().await.map_err(SessionError::Model)?;
	Ok((track, info))
}

async fn track<S: SendStream, R: RecvStream>(
	send: &mut Sending<S>,
	reader: &mut Reader<R>,
	origin: &OriginConsumer,
) -> Result<(), SessionError> {
	let Some(request) = reader.decode::<Track>().await? else {
		return Ok(());
	};
	let (_track, info) = resolve(origin, &request.broadcast, &request.track).await?;
	let reply = WireTrackInfo {
		priority: info.priority,
		ordered: info.ordered,
		latency_max: info.latency_max,
		timescale: info.timescale,
	};
	io::write(&mut send.send, &reply).await?;
	send.finish()
}

/// Aborts the tasks it holds when dropped, so an abandoned subscription stops its groups.
#[derive(Default)]
pub(super) struct Owned(Vec<JoinHandle<()>>);

impl Owned {
	pub(super) fn push(&mut self, task: JoinHandle<()>) {
		if self.0.len() >= 16 && self.0.len().is_power_of_two() {
			self.0.retain(|task| !task.is_finished());
		}
		self.0.push(task);
	}
}

impl Drop for Owned {
	fn drop(&mut self) {
		for task in &self.0 {
			task.abort();
		}
	}
}

enum SubscribeEvent {
	Group(Result<Option<GroupConsumer>, model::Error>),
	Update(Result<Option<SubscribeUpdate>, SessionError>),
}

/// Group sequences past a subscription's first group that still rank apart: the priority has
/// 23 bits below the subscriber's 8.
const SEQUENCE_RANKS: u64 = (1 << 23) - 1;

/// The send priority of a group stream: the subscriber's priority first, then, by the
/// subscription's `ordered`, newer groups first (live: the newest is what a viewer wants) or older
/// groups first (in sequence order, as an ordered subscriber asked). Ranks count from the
/// subscription's first group, so a sequence that crosses a power of two never inverts; past
/// 2^23 groups into one subscription, groups tie instead, and the scheduler's round robin shares
/// the link between them.
pub(crate) fn stream_priority(priority: u8, ordered: bool, first: u64, sequence: u64) -> i32 {
	let rank = sequence.saturating_sub(first).min(SEQUENCE_RANKS);
	let rank = if ordered { SEQUENCE_RANKS - rank } else { rank };
	(i32::from(priority) << 23) | rank as i32
}

/// A subscription's group streams in flight, oldest first, at most `limit` of them: past it the
/// oldest is reset, and so is one that a newer group superseded longer than the track's latency
/// ago (a group may stay open for as long as its publisher writes it; what ages it is being
/// superseded). A subscriber that stops reading makes us hold a bounded number of groups, for a
/// bounded time.
struct InFlight {
	/// When the next group superseded it (`None` for the newest), its sequence, and its task.
	tasks: VecDeque<(Option<Instant>, u64, JoinHandle<()>)>,
	limit: usize,
	/// The subscribe id, for the trace.
	subscription: u64,
}

impl InFlight {
	fn new(limit: usize, subscription: u64) -> Self {
		Self {
			tasks: VecDeque::new(),
			limit: limit.max(1),
			subscription,
		}
	}

	/// A new group arrived: it supersedes the newest in flight. Finished groups leave from the
	/// front, and a stale one there is reset. O(1) per group, amortised: no walk of the queue.
	fn supersede(&mut self, now: Instant, max_age: Duration, budget: &Budget) {
		if let Some((superseded, ..)) = self.tasks.back_mut() {
			superseded.get_or_insert(now);
		}
		while let Some((superseded, sequence, oldest)) = self.tasks.front() {
			let stale = superseded.is_some_and(|at| now.duration_since(at) > max_age);
			if oldest.is_finished() {
				self.tasks.pop_front();
			} else if stale {
				trace!(subscription = self.subscription, sequence, "group out: reset, stale");
				oldest.abort();
				budget.refused();
				budget.lost(GroupLoss::Stale);
				self.tasks.pop_front();
			} else {
				break;
			}
		}
	}

	/// A group served by a task of its own. At the limit, the oldest (the front: one still in
	/// flight there while later ones finished is the oldest) is reset to make room.
	fn push(&mut self, task: JoinHandle<()>, sequence: u64, budget: &Budget) {
		while self.tasks.len() >= self.limit {
			let Some((_, oldest_sequence, oldest)) = self.tasks.pop_front() else {
				break;
			};
			if !oldest.is_finished() {
				trace!(
					subscription = self.subscription,
					sequence = oldest_sequence,
					"group out: reset, in-flight limit"
				);
				oldest.abort();
				budget.refused();
				budget.lost(GroupLoss::InFlight);
			}
		}
		self.tasks.push_back((None, sequence, task));
	}

	/// Waits for the groups in flight to be sent, for at most `limit`; the rest are reset.
	async fn join(&mut self, limit: Duration, budget: &Budget) {
		let mut deadline = kio::time::Deadline::new(Some(kio::time::now() + limit));
		kio::wait(|waiter| {
			while let Some((_, _, task)) = self.tasks.front() {
				if task.poll_join(waiter).is_pending() {
					return deadline.poll_elapsed(waiter);
				}
				self.tasks.pop_front();
			}
			Poll::Ready(())
		})
		.await;
		let unsent = self.tasks.iter().filter(|(.., task)| !task.is_finished()).count();
		if unsent > 0 {
			trace!(subscription = self.subscription, unsent, "group out: reset, ending");
		}
		budget.lost_many(GroupLoss::Ending, unsent as u64);
	}
}

impl Drop for InFlight {
	fn drop(&mut self) {
		for (.., task) in &self.tasks {
			task.abort();
		}
	}
}

/// A subscribe id open toward us, forgotten when the subscription ends.
struct Served<'a, T: Transport>(&'a Inner<T>, u64);

impl<T: Transport> Drop for Served<'_, T> {
	fn drop(&mut self) {
		self.0.served.borrow_mut().remove(&self.1);
	}
}

async fn subscribe<T: Transport + 'static, S: SendStream, R: RecvStream>(
	inner: &Rc<Inner<T>>,
	send: &mut Sending<S>,
	reader: &mut Reader<R>,
	origin: &OriginConsumer,
) -> Result<(), SessionError> {
	let Some(request) = reader.decode::<Subscribe>().await? else {
		return Ok(());
	};
	if !inner.served.borrow_mut().insert(request.id) {
		return Err(SessionError::Protocol(ErrorCode::Duplicate));
	}
	let _served = Served(inner, request.id);
	let _charge = inner
		.budget
		.hold(Resource::Subscriptions)
		.ok_or(SessionError::Refused(ErrorCode::BoundsExceeded))?;
	let mut broadcast = broadcast(origin, &request.broadcast)?;
	// Whose broadcast it is: if its publisher goes and the same owner publishes the path again
	// (a reconnect), the subscription carries on from the new one.
	let owner = origin.owner(&request.broadcast);
	let mut subscription = Subscription {
		priority: request.priority,
		ordered: request.ordered,
		latency_max: request.latency_max,
		start: request.start,
		end: request.end,
	};
	let mut cursor = broadcast
		.subscribe_track(&request.track, subscription)
		.map_err(SessionError::Model)?;
	let version = inner.config.version;
	if !version.has_track_stream() {
		// 03 and 04: SUBSCRIBE_OK before anything else; the reference publisher echoes the
		// priority and zeroes the rest.
		let ok = SubscribeResponse::Ok {
			priority: request.priority,
			ordered: false,
			latency_max: Duration::ZERO,
			start: None,
			end: None,
		};
		io::write_for(&mut send.send, &ok, version).await?;
	}
	let mut first = None;
	let mut info = None;
	let mut groups = InFlight::new(inner.config.limits.groups_in_flight, request.id);
	let open_order = Rc::new(OpenOrder::default());
	// Groups taken from a cursor that has stayed ready since the request stream was last read.
	let mut taken = 0;
	// The cursor's skipped groups already counted as lost.
	let mut counted_skips = 0;
	loop {
		// The cursor first: a group that is ready is taken without a look at the request
		// stream, which is read whenever no group is (so a parked subscription waits on both).
		// Reading it first cost a stream poll more per group per subscriber. A cursor that
		// stays ready (a backlog of cached groups) has the stream read first after every
		// `UPDATES_AFTER` groups, so an update or the FIN waits for that many at most.
		let event = kio::wait(|waiter| {
			let stream_first = taken >= UPDATES_AFTER;
			if !stream_first && let Poll::Ready(group) = cursor.poll_recv_group(waiter) {
				taken += 1;
				return Poll::Ready(SubscribeEvent::Group(group));
			}
			taken = 0;
			if let Poll::Ready(update) = reader.poll_decode::<SubscribeUpdate>(waiter) {
				return Poll::Ready(SubscribeEvent::Update(update));
			}
			match stream_first {
				true => cursor.poll_recv_group(waiter).map(|group| {
					taken = 1;
					SubscribeEvent::Group(group)
				}),
				false => Poll::Pending,
			}
		})
		.await;
		// Groups the cache dropped before this subscription's turn.
		let skipped = cursor.skipped();
		if skipped > counted_skips {
			trace!(
				subscription = request.id,
				lost = skipped - counted_skips,
				"group out: dropped by the cache first"
			);
			inner.budget.lost_many(GroupLoss::Cache, skipped - counted_skips);
			counted_skips = skipped;
		}
		match event {
			SubscribeEvent::Group(Ok(Some(group))) => {
				let first = match first {
					Some(first) => first,
					None => {
						first = Some(group.sequence());
						if version.has_track_stream() {
							io::write(
								&mut send.send,
								&SubscribeResponse::Start {
									group: group.sequence(),
								},
							)
							.await?;
						}
						group.sequence()
					}
				};
				let priority = stream_priority(subscription.priority, subscription.ordered, first, group.sequence());
				// Known by the time a group arrives (a requested track's info comes first), and
				// fixed for the track's life: read once, not under the track's lock per group.
				let info = *info.get_or_insert_with(|| cursor.info());
				groups.supersede(kio::time::now(), info.latency_max, &inner.budget);
				let mut stream = GroupStream::new(inner.clone(), request.id, group, priority, info.timescale, version);
				// In place only a group that has all its frames, and only while none of this
				// subscription's groups is in flight: one waiting for stream credit was first and
				// opens first (see `OpenOrder`).
				let served = groups.tasks.is_empty()
					&& stream.group.is_ended()
					&& kio::wait(|waiter| Poll::Ready(stream.poll(waiter).is_ready())).await;
				trace!(
					broadcast = %request.broadcast,
					track = %request.track,
					subscription = request.id,
					sequence = stream.group.sequence(),
					served,
					"group out"
				);
				if !served {
					if stream.send.is_none() {
						stream.turn = Some(OpenOrder::take_turn(&open_order));
					}
					let sequence = stream.group.sequence();
					groups.push(kio::spawn(stream.serve()), sequence, &inner.budget);
				}
			}
			SubscribeEvent::Group(Ok(None)) => {
				let end = cursor.finished().await.map_err(SessionError::Model)?;
				// 03 and 04 have no SUBSCRIBE_END: the FIN below says it.
				if version.has_track_stream() {
					io::write(&mut send.send, &SubscribeResponse::End { group: end }).await?;
				}
				// The last groups get the track's latency to be taken; a subscriber that stopped
				// reading does not hold them longer.
				groups.join(cursor.info().latency_max, &inner.budget).await;
				return send.finish();
			}
			SubscribeEvent::Group(Err(model::Error::Dropped)) if owner.is_some() => {
				let patience = cursor.info().latency_max.max(inner.config.linger);
				let owner = owner.expect("matched above");
				let Some(next) = origin.successor(&request.broadcast, &broadcast, owner, patience).await else {
					return Err(SessionError::Model(model::Error::Dropped));
				};
				// From the new publisher's latest group on: what the old one had sent is sent.
				let resumed = Subscription {
					start: None,
					..subscription
				};
				cursor = next
					.subscribe_track(&request.track, resumed)
					.map_err(SessionError::Model)?;
				broadcast = next;
				info = None;
				counted_skips = 0;
			}
			SubscribeEvent::Group(Err(err)) => return Err(SessionError::Model(err)),
			SubscribeEvent::Update(Ok(Some(mut update))) => {
				// History asked for again is a request like a new SUBSCRIBE (up to
				// `groups_in_flight` cached groups sent again), and paced like one. While it
				// waits its turn the stream is still read: the peer's FIN ends the subscription at
				// once, and a later update takes the waiting one's place (and its turn).
				if rewinds(&subscription, &update)
					&& let Some(at) = inner.pace.turn()
				{
					let mut turn = kio::time::Deadline::new(Some(at));
					loop {
						let next = kio::wait(|waiter| match turn.poll_elapsed(waiter) {
							Poll::Ready(()) => Poll::Ready(None),
							Poll::Pending => reader.poll_decode::<SubscribeUpdate>(waiter).map(Some),
						})
						.await;
						match next {
							None => break,
							Some(Ok(Some(later))) => update = later,
							Some(Ok(None)) => return send.finish(),
							Some(Err(err)) => return Err(err),
						}
					}
				}
				apply_update(&mut cursor, &mut subscription, &update)
			}
			// The subscriber's FIN: unsubscribe. In-flight groups are reset (code 0) as `groups`
			// drops.
			SubscribeEvent::Update(Ok(None)) => return send.finish(),
			SubscribeEvent::Update(Err(err)) => return Err(err),
		}
	}
}

/// Whether `update` moves the subscription's start back (or sets one where there was none): its
/// cursor will offer cached groups again.
fn rewinds(subscription: &Subscription, update: &SubscribeUpdate) -> bool {
	match (subscription.start, update.start) {
		(Some(old), Some(new)) => new < old,
		(None, Some(_)) => true,
		(_, None) => false,
	}
}

/// Applies a SUBSCRIBE_UPDATE to the subscription and its cursor. The cursor follows a changed
/// start exactly: a lower one rewinds (history asked for), a higher one only raises the floor
/// (nothing is offered twice), none goes back to the latest group (a start the peer withdraws
/// leaves nothing behind). An update that keeps the start (a new priority, say) moves nothing.
fn apply_update(cursor: &mut TrackConsumer, subscription: &mut Subscription, update: &SubscribeUpdate) {
	let previous = subscription.start;
	*subscription = Subscription {
		priority: update.priority,
		ordered: update.ordered,
		latency_max: update.latency_max,
		start: update.start,
		end: update.end,
	};
	cursor.subscribe(*subscription);
	cursor.end_at(update.end);
	match (previous, update.start) {
		(old, new) if old == new => {}
		(Some(old), Some(new)) if new > old => cursor.raise_start(new),
		(_, Some(new)) => cursor.start_at(new),
		(_, None) => cursor.clear_start(),
	}
}

/// Groups a subscription takes from a cursor that stays ready before it reads its request
/// stream first (see `subscribe`).
const UPDATES_AFTER: u32 = 16;

/// One group on its own uni stream: header, then frames as they are written, then FIN.
///
/// A state machine polled by whichever task serves it, rather than an `async fn` in a task of
/// its own: a group that has ended by the time its subscription takes it (a one-frame group
/// whose frame and end came with its header, as a live audio track's or the benchmark's do) is
/// polled once in place and, with stream credit and room in the stream's queue, handed to the
/// transport with no task at all. Any other group gets a task ([`GroupStream::serve`]), and so
/// does one whose in-place poll had to wait; that poll leaves the subscription's waiter on the
/// stream credit or the stream's queue, a spurious wake at most. A group still being written
/// is not polled in place: the subscription would sit on its frame list and wake with every
/// next frame's writer. A task per one-frame group cost 1,173 instructions per group per
/// subscriber (12,683 against 11,510; callgrind, session fan-out at 512 subscribers): the
/// spawn, the task's own polls and its join handle.
struct GroupStream<T: Transport> {
	inner: Rc<Inner<T>>,
	/// The subscribe id it answers, for the trace.
	subscription: u64,
	group: GroupConsumer,
	priority: i32,
	/// The stream, once opened.
	send: Option<Sending<T::SendHalf>>,
	/// Its place among the subscription's groups waiting to open, if it is one of them.
	turn: Option<Turn>,
	frames: FrameWriter,
}

impl<T: Transport + 'static> GroupStream<T> {
	fn new(
		inner: Rc<Inner<T>>,
		subscribe_id: u64,
		group: GroupConsumer,
		priority: i32,
		timescale: u64,
		version: Version,
	) -> Self {
		let header = GroupHeader {
			subscribe_id,
			sequence: group.sequence(),
		};
		Self {
			inner,
			subscription: subscribe_id,
			group,
			priority,
			send: None,
			turn: None,
			frames: FrameWriter::new(timescale, Some(header), version),
		}
	}

	/// Serves the rest of the group in a task of its own.
	async fn serve(mut self) {
		// Only a gauge (the limit is per subscription, in `InFlight`): nothing to count without
		// one. A group served in place is never in flight.
		let _in_flight = self
			.inner
			.config
			.counters
			.is_some()
			.then(|| self.inner.budget.hold(Resource::GroupsInFlight));
		kio::wait(|waiter| self.poll(waiter)).await;
	}

	/// Ready once the group is served: finished, reset, or dropped for want of a stream. Not to
	/// be polled again after that.
	fn poll(&mut self, waiter: &Waiter) -> Poll<()> {
		let send = match &mut self.send {
			Some(send) => send,
			None => {
				if let Some(turn) = &self.turn {
					ready!(turn.poll_first(waiter));
				}
				let opened = ready!(self.inner.transport.poll_open_uni(waiter));
				// Opened or failed: the next group's turn.
				self.turn = None;
				let Ok(mut send) = opened else {
					return Poll::Ready(());
				};
				send.set_priority(self.priority);
				let mut send = Sending::new(send);
				// An unencodable header resets the stream at once, uncounted, rather than at the
				// first frame. The check encodes it into the scratch (some 20 bytes); the first
				// chunk encodes it again. (No frame has been taken yet, so the header is there.)
				if let Some(header) = &self.frames.header
					&& HEADS
						.with_borrow_mut(|heads| {
							heads.clear();
							encode_group(header, heads)
						})
						.is_err()
				{
					send.reset(ErrorCode::Encode.code());
					return Poll::Ready(());
				}
				if let Some(counters) = self.inner.config.counters.as_deref() {
					counters.groups_out.fetch_add(1, Ordering::Relaxed);
				}
				self.send.insert(send)
			}
		};
		let counters = self.inner.config.counters.as_deref();
		match ready!(self.frames.poll(waiter, &mut send.send, &mut self.group, counters)) {
			Ok(()) => {
				let _ = send.finish();
			}
			Err(err) => {
				trace!(
					subscription = self.subscription,
					sequence = self.group.sequence(),
					%err,
					"group out: cut"
				);
				match &err {
					SessionError::Model(_) => self.inner.budget.lost(GroupLoss::Aborted),
					SessionError::Transport(TransportError::Stopped(_)) => self.inner.budget.lost(GroupLoss::Stopped),
					// The connection is gone: nothing is lost that its end does not explain.
					_ => {}
				}
				send.reset(err.code());
			}
		}
		Poll::Ready(())
	}
}

/// The order in which a subscription's groups that wait for a stream open one: the order it took
/// them. Stream credit is the connection's, and a group task spawned while the credit was out
/// would otherwise take the next stream before the older ones woken by that credit had run: a
/// viewer saw groups 19 and 20 before 15 to 18 (the e2e fan-out test, 1 run in 15 in a debug
/// build). Once open, a group's data goes by its priority (newest first unless `ordered`).
#[derive(Default)]
struct OpenOrder {
	/// The oldest turn not yet over.
	first: Cell<u64>,
	/// Turns handed out.
	taken: Cell<u64>,
	/// Turns past `first` that are over (their group opened, failed or was dropped first), by
	/// their distance from it: a dropped group ends its turn out of order.
	over: RefCell<VecDeque<bool>>,
	/// Groups waiting for their turn.
	waiting: RefCell<WaiterList>,
}

impl OpenOrder {
	fn take_turn(order: &Rc<Self>) -> Turn {
		let turn = order.taken.get();
		order.taken.set(turn + 1);
		Turn {
			order: order.clone(),
			turn,
		}
	}
}

/// A group's place in its subscription's [`OpenOrder`]; dropping it ends the turn.
struct Turn {
	order: Rc<OpenOrder>,
	turn: u64,
}

impl Turn {
	/// Ready once every older group has had its turn.
	fn poll_first(&self, waiter: &Waiter) -> Poll<()> {
		if self.order.first.get() == self.turn {
			return Poll::Ready(());
		}
		self.order.waiting.borrow_mut().register(waiter);
		Poll::Pending
	}
}

impl Drop for Turn {
	fn drop(&mut self) {
		let order = &self.order;
		let mut over = order.over.borrow_mut();
		let distance = (self.turn - order.first.get()) as usize;
		if over.len() <= distance {
			over.resize(distance + 1, false);
		}
		over[distance] = true;
		let mut first = order.first.get();
		while over.front() == Some(&true) {
			over.pop_front();
			first += 1;
		}
		drop(over);
		if first != order.first.get() {
			order.first.set(first);
			let wakes = order.waiting.borrow_mut().take();
			wakes.wake();
		}
	}
}

/// Frames up to this size travel in one chunk with their header: copying them (a few hundred
/// bytes) costs less than the allocation, queue entry and stream write a separate chunk takes on
/// every subscriber's stream. Larger frames are handed over as they are, shared with the cache.
const COALESCE_MAX: usize = 1200;

thread_local! {
	/// Where a chunk's headers are encoded before the chunk is allocated at its exact size (a
	/// `Bytes` made from a `Vec` with room to spare allocates again for its shared header). One
	/// per worker: tasks never move, and nothing awaits while it is borrowed.
	static HEADS: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(64));
}

/// A group stream's type and header.
fn encode_group(header: &GroupHeader, out: &mut Vec<u8>) -> Result<(), EncodeError> {
	u64::from(DataType::Group).try_encode(out)?;
	header.try_encode(out)
}

/// One chunk: the group's stream type and header if `group` is given (in front of the first
/// frame), the frame header if `frame` is given, then `payload`; allocated once, at its size.
fn chunk(
	group: Option<&GroupHeader>,
	frame: Option<&FrameHeader>,
	payload: &[u8],
	version: Version,
) -> Result<Bytes, SessionError> {
	HEADS
		.with_borrow_mut(|heads| {
			heads.clear();
			if let Some(header) = group {
				encode_group(header, heads)?;
			}
			if let Some(header) = frame {
				header.try_encode_for(version, heads)?;
			}
			let mut chunk = Vec::with_capacity(heads.len() + payload.len());
			chunk.extend_from_slice(heads);
			chunk.extend_from_slice(payload);
			Ok(Bytes::from(chunk))
		})
		.map_err(SessionError::Encode)
}

/// Writes a group's frames (timestamps as deltas in `timescale`) until it ends, with the stream
/// type and `header` (if any) in front of the first frame's header; a group without frames
/// still sends its header.
struct FrameWriter {
	timescale: u64,
	version: Version,
	/// The group's header, until it has gone out in front of the first frame.
	header: Option<GroupHeader>,
	/// The previous frame's timestamp, for the next delta.
	last: i64,
	/// Encoded and not yet taken by the stream: a chunk, then a large frame's payload after its
	/// header; and the payload bytes they carry, counted once the stream has taken them.
	writing: Option<Bytes>,
	then: Option<Bytes>,
	bytes: u64,
}

impl FrameWriter {
	fn new(timescale: u64, header: Option<GroupHeader>, version: Version) -> Self {
		Self {
			timescale,
			version,
			header,
			last: 0,
			writing: None,
			then: None,
			bytes: 0,
		}
	}

	/// Ready when the group has ended and everything is written, or on the first error.
	fn poll<S: SendStream>(
		&mut self,
		waiter: &Waiter,
		send: &mut S,
		group: &mut GroupConsumer,
		counters: Option<&Counters>,
	) -> Poll<Result<(), SessionError>> {
		loop {
			while let Some(data) = &mut self.writing {
				ready!(send.poll_write(waiter, data)).map_err(SessionError::Transport)?;
				self.writing = self.then.take();
			}
			if let Some(counters) = counters.filter(|_| self.bytes > 0) {
				counters.bytes_out.fetch_add(self.bytes, Ordering::Relaxed);
			}
			self.bytes = 0;
			let Some(frame) = ready!(group.poll_read_frame(waiter)).map_err(SessionError::Model)? else {
				let Some(header) = self.header.take() else {
					return Poll::Ready(Ok(()));
				};
				self.writing = Some(chunk(Some(&header), None, &[], self.version)?);
				continue;
			};
			let stamp = if frame.timestamp.timescale == self.timescale {
				frame.timestamp.value
			} else {
				frame.timestamp.rescale(self.timescale).map_or(0, |stamp| stamp.value)
			};
			let stamp = stamp.min(i64::MAX as u64) as i64;
			let frame_header = FrameHeader {
				timestamp_delta: stamp - self.last,
				size: frame.payload.len() as u64,
			};
			self.last = stamp;
			let group_header = self.header.take();
			let size = frame.payload.len();
			if size <= COALESCE_MAX {
				self.writing = Some(chunk(
					group_header.as_ref(),
					Some(&frame_header),
					&frame.payload,
					self.version,
				)?);
			} else {
				self.writing = Some(chunk(group_header.as_ref(), Some(&frame_header), &[], self.version)?);
				self.then = Some(frame.payload);
			}
			self.bytes = size as u64;
		}
	}
}

async fn fetch<S: SendStream, R: RecvStream>(
	send: &mut Sending<S>,
	reader: &mut Reader<R>,
	origin: &OriginConsumer,
) -> Result<(), SessionError> {
	let Some(request) = reader.decode::<Fetch>().await? else {
		return Ok(());
	};
	let (track, info) = resolve(origin, &request.broadcast, &request.track).await?;
	let mut group = track
		.get_group(request.group)
		.ok_or(SessionError::Model(model::Error::NotFound))?;
	let mut frames = FrameWriter::new(info.timescale, None, Version::Lite05);
	kio::wait(|waiter| frames.poll(waiter, &mut send.send, &mut group, None)).await?;
	send.finish()
}

#[cfg(test)]
mod tests {
	use super::*;
	use crate::lite::session::model_code;

	#[test]
	fn a_turn_ended_out_of_order_waits_for_the_older_ones() {
		// A group reset for being stale or past the in-flight limit ends its turn whenever its
		// task is dropped, which need not be in order.
		let order = Rc::new(OpenOrder::default());
		let turns: Vec<Turn> = (0..4).map(|_| OpenOrder::take_turn(&order)).collect();
		let waiter = Waiter::new(std::task::Waker::noop().clone());
		let [zero, one, two, three] = <[Turn; 4]>::try_from(turns).ok().unwrap();
		assert!(zero.poll_first(&waiter).is_ready());
		assert!(one.poll_first(&waiter).is_pending());
		drop(two);
		assert!(three.poll_first(&waiter).is_pending(), "one is still before it");
		drop(zero);
		assert!(one.poll_first(&waiter).is_ready());
		drop(one);
		assert!(three.poll_first(&waiter).is_ready(), "two's turn is over already");
		assert!(order.over.borrow().is_empty());
	}

	#[test]
	fn an_ordered_subscription_sends_older_groups_first() {
		assert!(stream_priority(1, true, 0, 5) > stream_priority(1, true, 0, 6));
		assert!(stream_priority(1, true, 100, 100) > stream_priority(1, true, 100, 101));
		// The subscriber's priority still comes first.
		assert!(stream_priority(2, true, 0, 1_000_000) > stream_priority(1, true, 0, 0));
		assert!(stream_priority(1, true, 0, u64::MAX) >= 1 << 23);
	}

	#[test]
	fn subscriber_priority_then_newer_groups_first() {
		assert!(stream_priority(2, false, 0, 0) > stream_priority(1, false, 0, 1_000_000));
		assert!(stream_priority(1, false, 0, 6) > stream_priority(1, false, 0, 5));
		assert!(stream_priority(255, false, 0, 0x7f_ffff) > 0);
	}

	#[test]
	fn newer_groups_rank_higher_across_any_power_of_two() {
		// If only the low 23 bits of the sequence counted, group 2^23 would rank below group
		// 2^23 - 1, and a subscription crossing it would send its newest group last.
		for boundary in [1u64 << 23, 1 << 24, 1 << 40, 1 << 62] {
			let first = boundary - 100;
			assert!(
				stream_priority(1, false, first, boundary) > stream_priority(1, false, first, boundary - 1),
				"at {boundary}"
			);
		}
		// Far past the first group, newer groups tie rather than invert.
		assert!(stream_priority(1, false, 0, 1 << 30) >= stream_priority(1, false, 0, (1 << 30) - 1));
		assert!(stream_priority(2, false, 0, 0) > stream_priority(1, false, 0, u64::MAX));
	}

	#[test]
	fn a_long_group_ages_from_when_it_was_superseded_not_from_when_it_began() {
		// A group open longer than the track's latency (a minute-long group of a clock) must not be
		// reset as soon as the next group arrives, as it would be if its age counted from its start.
		kio::block_on(async {
			let budget = Budget::new(crate::lite::session::Limits::default(), None, None);
			let mut flight = InFlight::new(64, 0);
			let start = kio::time::now();
			let later = |secs| start + Duration::from_secs(secs);
			let pending = || kio::spawn(std::future::pending::<()>());
			let arrive = |flight: &mut InFlight, at| flight.supersede(at, Duration::from_secs(10), &budget);
			arrive(&mut flight, start);
			flight.push(pending(), 0, &budget);
			// A minute later the next group comes: the first is superseded now, not stale.
			arrive(&mut flight, later(60));
			flight.push(pending(), 1, &budget);
			assert_eq!(flight.tasks.len(), 2, "kept: superseded a moment ago");
			// Eleven seconds after that, the first has been superseded longer than the latency.
			arrive(&mut flight, later(71));
			assert_eq!(
				flight.tasks.len(),
				1,
				"the stale one is reset as the next group arrives"
			);
			flight.push(pending(), 2, &budget);
			// The count limit resets the oldest still in flight.
			let mut capped = InFlight::new(2, 0);
			for sequence in 0..5 {
				arrive(&mut capped, start);
				capped.push(pending(), sequence, &budget);
			}
			assert_eq!(capped.tasks.len(), 2);
			// A group served in place (it arrives, and is not pushed) takes no room, but it
			// supersedes the newest in flight like any other, which then ages out.
			arrive(&mut capped, start);
			assert_eq!(capped.tasks.len(), 2, "room is made only for a group in flight");
			assert!(capped.tasks.back().is_some_and(|(superseded, ..)| superseded.is_some()));
			arrive(&mut capped, later(11));
			assert!(capped.tasks.is_empty(), "both superseded longer than the latency ago");
		});
	}

	#[test]
	fn model_errors_carry_their_wire_codes() {
		assert_eq!(model_code(&model::Error::NotFound), 13);
		assert_eq!(model_code(&model::Error::Evicted), 31);
		assert_eq!(model_code(&model::Error::Aborted(30)), 30);
	}
}
