//! A session's budgets: what the peer may make it hold, each a [`kio::sync::Budget`] taken through
//! a [`Charge`] where the memory is taken, and given back when the charge drops where it is freed.
//!
//! Each resource has a per-session limit from [`Limits`] and, when the session shares
//! [`Counters`] with others (a relay), takes from that gauge of the total over every session too,
//! which `/metrics` shows. What is memory (bytes received in part, announcement updates queued)
//! is charged to the connection's memory as well when the session is given it
//! ([`Config::memory`](super::Config::memory)): a relay's memory ceiling, shared by addresses.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kio::sync::Charge;

use super::{Counters, GroupLoss, Limits};

/// What a budget counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resource {
	/// Broadcasts the peer announced to us.
	Announces,
	/// The peer's SUBSCRIBEs open toward us.
	Subscriptions,
	/// Tracks asked of the peer's broadcasts.
	TrackRequests,
	/// Group streams in flight toward the peer (limited per subscription, not here).
	GroupsInFlight,
	/// Bytes received in part.
	PartialBytes,
	/// Bytes of announcement updates queued for the peer.
	AnnounceBytes,
	/// Bytes the peer's open requests cost (limited by the transport's stream limits, not here).
	Requests,
}

const RESOURCES: usize = 7;

/// A charge to one of a session's budgets, and to the connection's memory for what is memory.
pub(crate) type Held = Charge<(kio::sync::Budget, Option<kio::sync::Budget>)>;

pub(crate) struct Budget {
	budgets: [kio::sync::Budget; RESOURCES],
	counters: Option<Arc<Counters>>,
	/// The connection's memory, which byte resources are charged to too.
	memory: Option<kio::sync::Budget>,
}

impl Budget {
	pub(crate) fn new(limits: Limits, counters: Option<Arc<Counters>>, memory: Option<kio::sync::Budget>) -> Rc<Self> {
		let limit = |resource| match resource {
			Resource::Announces => limits.announces as u64,
			Resource::Subscriptions => limits.subscriptions as u64,
			Resource::TrackRequests => limits.track_requests as u64,
			Resource::GroupsInFlight => u64::MAX,
			Resource::PartialBytes => limits.partial_bytes,
			Resource::AnnounceBytes => limits.announce_queue,
			Resource::Requests => u64::MAX,
		};
		let budget = |resource| match &counters {
			Some(counters) => counters.gauge(resource).child(limit(resource)),
			None => kio::sync::Budget::new(limit(resource)),
		};
		let budgets = [
			Resource::Announces,
			Resource::Subscriptions,
			Resource::TrackRequests,
			Resource::GroupsInFlight,
			Resource::PartialBytes,
			Resource::AnnounceBytes,
			Resource::Requests,
		]
		.map(budget);
		Rc::new(Self {
			budgets,
			counters,
			memory,
		})
	}

	fn budget(&self, resource: Resource) -> &kio::sync::Budget {
		&self.budgets[resource as usize]
	}

	/// What a charge of `resource` takes from: its budget, and the connection's memory if it is
	/// bytes.
	pub(crate) fn account(&self, resource: Resource) -> (kio::sync::Budget, Option<kio::sync::Budget>) {
		let memory = match resource {
			Resource::PartialBytes | Resource::AnnounceBytes | Resource::Requests => self.memory.clone(),
			_ => None,
		};
		(self.budget(resource).clone(), memory)
	}

	/// `amount` of `resource` if the session's limit allows; a refusal is counted.
	pub(crate) fn charge(&self, resource: Resource, amount: u64) -> Option<Held> {
		let charge = Charge::take(self.account(resource), amount);
		if charge.is_none() {
			self.refused();
		}
		charge
	}

	/// A charge of nothing yet, to [resize](Charge::resize) as what it accounts for grows.
	pub(crate) fn empty(&self, resource: Resource) -> Held {
		Charge::empty(self.account(resource))
	}

	/// Makes `charge` (one of this session's) `amount`; a refusal is counted.
	pub(crate) fn resize(&self, charge: &mut Held, amount: u64) -> bool {
		let resized = charge.resize(amount);
		if !resized {
			self.refused();
		}
		resized
	}

	/// Counts a group lost for `why`.
	pub(crate) fn lost(&self, why: GroupLoss) {
		self.lost_many(why, 1);
	}

	/// Counts `count` groups lost for `why`.
	pub(crate) fn lost_many(&self, why: GroupLoss, count: u64) {
		if let Some(counters) = self.counters.as_deref().filter(|_| count > 0) {
			counters.groups_lost[why as usize].fetch_add(count, Ordering::Relaxed);
		}
	}

	/// Counts a request, stream or group refused or cut for want of budget.
	pub(crate) fn refused(&self) {
		if let Some(counters) = &self.counters {
			counters.budget_refusals.fetch_add(1, Ordering::Relaxed);
		}
	}

	/// One `resource`, held until the returned charge drops; `None` if the limit is reached.
	pub(crate) fn hold(&self, resource: Resource) -> Option<Held> {
		self.charge(resource, 1)
	}

	/// Whether one more `resource` would pass the session's limit.
	pub(crate) fn is_full(&self, resource: Resource) -> bool {
		!self.budget(resource).has_room(1)
	}

	/// How much of `resource` this session holds now.
	#[cfg(test)]
	pub(crate) fn used(&self, resource: Resource) -> u64 {
		self.budget(resource).used()
	}
}

impl Counters {
	/// The gauge every session's charges of `resource` also take from.
	fn gauge(&self, resource: Resource) -> &kio::sync::Budget {
		match resource {
			Resource::Announces => &self.announces,
			Resource::Subscriptions => &self.subscriptions,
			Resource::TrackRequests => &self.track_requests,
			Resource::GroupsInFlight => &self.groups_in_flight,
			Resource::PartialBytes => &self.partial_bytes,
			Resource::AnnounceBytes => &self.announce_bytes,
			Resource::Requests => &self.request_bytes,
		}
	}
}

/// Paces a peer's requests: `rate` a second once `burst` have gone at once, by the generic cell
/// rate algorithm (one instant: when the next request would be on time if requests came at
/// exactly `rate`). A request is admitted at once while that instant is at most `burst` requests
/// ahead of the clock, and waits for it otherwise; nothing is refused, so a well-behaved peer
/// that asks for a lot at once sees its requests served a little later.
///
/// One pace may be shared by several sessions, on any workers (a relay gives every session from
/// one address the same: reconnecting does not buy a fresh burst): the instant is an atomic.
#[derive(Debug)]
pub struct Pace {
	/// Between two requests at `rate`, in nanoseconds; zero paces nothing.
	interval: u64,
	/// How far ahead of the clock the next on-time instant may be: `burst` intervals.
	ahead: u64,
	/// Instants are kept as nanoseconds since this one.
	epoch: Instant,
	/// When the next request would be on time; 0 before the first.
	next: AtomicU64,
}

impl Pace {
	/// `rate` requests a second (0: not paced) past `burst` at once, counted from `epoch` (any
	/// instant not after the first request: a kio clock's `now()` when the pace is made).
	pub fn new(rate: u32, burst: u32, epoch: Instant) -> Self {
		// Rounded up to a nanosecond: a rate past 10^9 a second still paces.
		let interval = match rate {
			0 => 0,
			rate => 1_000_000_000u64.div_ceil(u64::from(rate)),
		};
		Self {
			interval,
			ahead: interval.saturating_mul(u64::from(burst.max(1))),
			epoch,
			next: AtomicU64::new(0),
		}
	}

	/// Takes a request's turn: `None` if it may go now, else the instant it may go at (the turn is
	/// taken either way, so requests keep their order and their rate).
	pub(crate) fn take(&self, now: Instant) -> Option<Instant> {
		if self.interval == 0 {
			return None;
		}
		let now = self.since_epoch(now);
		let mut previous = self.next.load(Ordering::Relaxed);
		let next = loop {
			let next = previous.max(now).saturating_add(self.interval);
			match self
				.next
				.compare_exchange_weak(previous, next, Ordering::Relaxed, Ordering::Relaxed)
			{
				Ok(_) => break next,
				Err(actual) => previous = actual,
			}
		};
		let at = next.saturating_sub(self.ahead);
		(at > now).then(|| self.epoch + Duration::from_nanos(at))
	}

	/// Whether the pace is as if new at `now`: every request made so far is as far behind as a
	/// full burst. One that is may be forgotten and made again.
	pub fn is_fresh(&self, now: Instant) -> bool {
		self.next.load(Ordering::Relaxed) <= self.since_epoch(now)
	}

	/// `now` in nanoseconds since the epoch (0 before it).
	fn since_epoch(&self, now: Instant) -> u64 {
		u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
	}
}

/// A session's paces: its own, and one it shares with others if it is given one; a request takes
/// its turn in both and waits for the later.
pub(crate) struct Paces {
	pub(crate) own: Pace,
	pub(crate) shared: Option<Arc<Pace>>,
	/// Where requests that waited are counted.
	pub(crate) paced: Option<Arc<Counters>>,
}

impl Paces {
	/// Takes a request's turn in both paces: `None` if it may go now, else when it may (and it is
	/// counted as paced).
	pub(crate) fn turn(&self) -> Option<Instant> {
		let now = kio::time::now();
		let own = self.own.take(now);
		let shared = self.shared.as_ref().and_then(|shared| shared.take(now));
		let at = own.max(shared)?;
		if let Some(counters) = &self.paced {
			counters.requests_paced.fetch_add(1, Ordering::Relaxed);
		}
		Some(at)
	}

	/// Waits for a request's turn.
	pub(crate) async fn admit(&self) {
		if let Some(at) = self.turn() {
			kio::time::sleep_until(at).await;
		}
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn charges_are_limited_per_session_and_summed_in_the_shared_gauges() {
		let counters = Arc::new(Counters::default());
		let limits = Limits {
			subscriptions: 2,
			..Limits::default()
		};
		let a = Budget::new(limits, Some(counters.clone()), None);
		let b = Budget::new(limits, Some(counters.clone()), None);
		let held: Vec<Held> = (0..2).filter_map(|_| a.hold(Resource::Subscriptions)).collect();
		assert_eq!(held.len(), 2);
		assert!(a.hold(Resource::Subscriptions).is_none(), "a's budget is spent");
		let other = b.hold(Resource::Subscriptions).expect("b has its own budget");
		assert_eq!(counters.subscriptions.used(), 3);
		assert_eq!(counters.budget_refusals.load(Ordering::Relaxed), 1);
		drop(held);
		drop(other);
		assert_eq!(a.used(Resource::Subscriptions), 0);
		assert_eq!(counters.subscriptions.used(), 0);
	}

	#[test]
	fn requests_go_at_once_up_to_the_burst_then_at_the_rate() {
		let start = Instant::now();
		let at = |ms| start + Duration::from_millis(ms);
		let pace = Pace::new(10, 3, start);
		// Three at once, then one every 100 ms, in the order they came.
		assert_eq!(pace.take(start), None);
		assert_eq!(pace.take(start), None);
		assert_eq!(pace.take(start), None);
		assert_eq!(pace.take(start), Some(at(100)));
		assert_eq!(pace.take(start), Some(at(200)));
		// A request at 200 ms waits behind those two.
		assert_eq!(pace.take(at(200)), Some(at(300)));
		// A quiet second gives the burst back, and no more than it.
		let later = at(1_400);
		for _ in 0..3 {
			assert_eq!(pace.take(later), None);
		}
		assert_eq!(pace.take(later), Some(later + Duration::from_millis(100)));
		// Rate 0 paces nothing.
		let free = Pace::new(0, 1, start);
		assert!((0..10_000).all(|_| free.take(start).is_none()));
	}

	#[test]
	fn a_shared_pace_admits_one_burst_across_threads() {
		let start = Instant::now();
		let pace = Arc::new(Pace::new(10, 100, start));
		let takers: Vec<_> = (0..4)
			.map(|_| {
				let pace = pace.clone();
				std::thread::spawn(move || (0..100).filter(|_| pace.take(start).is_none()).count())
			})
			.collect();
		let admitted: usize = takers.into_iter().map(|taker| taker.join().unwrap()).sum();
		assert_eq!(admitted, 100, "one burst, whoever took it");
		// 400 turns taken at 10 a second: the last is on time at 40 s, and the pace new again.
		assert!(!pace.is_fresh(start + Duration::from_millis(39_900)));
		assert!(pace.is_fresh(start + Duration::from_secs(40)));
	}
}
