//! Origins: paths to broadcasts, and announcements.
//!
//! An [`Origin`] maps [`Path`]s to announced broadcasts, each with a [`Route`] (the hop chain of
//! origin ids it came through, oldest first). Handles are views: [`with_root`](OriginConsumer::with_root)
//! re-roots them (paths inside are relative to the root) and [`scope`](OriginConsumer::scope)
//! restricts them to some prefixes; publishing outside a producer's scope is
//! [`Error::Unauthorized`].
//!
//! An announcement cursor ([`OriginConsumer::announced`]) yields the current set first (in path
//! order), then live updates: `Some(broadcast)` when a path is announced, `None` when it goes
//! away. Each cursor owns its pending updates; an announcement reaches the cursors whose prefix
//! and scope match (announcements are rare next to media, so this O(cursors) fan-out is cheap).
//! [`announced_excluding`](OriginConsumer::announced_excluding) skips routes whose hop chain
//! contains a peer, so a relay never reflects a broadcast back to the peer it came from, and
//! [`announced_to_peer`](OriginConsumer::announced_to_peer) also skips routes learned from
//! cluster peers ([`Route::cluster`]): a relay announces to its cluster peers only what its own
//! clients publish, never what it learned from another peer (no transit, so announce state grows
//! with the broadcasts, not with the square of the relays).
//!
//! # Bounds
//!
//! A cursor reads the **current set from the origin** as it yields it (a walk in path order), so
//! the set costs a cursor nothing however many broadcasts there are; only changes to paths the
//! walk has passed are queued. Those are **coalesced per path**: at most one entry per path,
//! which says whether the cursor must first hear the path go (it saw an announcement that is gone
//! or replaced) and what is announced there now. A watcher that stops reading while a publisher
//! flaps a path a million times holds one entry, not a million. A **bounded** cursor
//! ([`AnnounceCursor::bounded`]) charges each entry to a budget (a session's, and its
//! connection's memory): past it, the queue is dropped and the cursor says so, for the watcher
//! to start over from the current set. An unannouncement of a path the cursor never heard of
//! cancels the pending announcement instead of queueing a pair.
//!
//! Every path an origin stores is checked where it is made, by joining a view's root and the
//! caller's path: one longer than [`MAX_PATH_LEN`](super::path::MAX_PATH_LEN) bytes or deeper
//! than [`MAX_PATH_SEGMENTS`](super::path::MAX_PATH_SEGMENTS) segments is refused with
//! [`Error::BoundsExceeded`], so no announcement can fail to encode for a watcher rooted above
//! the publisher.
//!
//! # Several publishers of one path
//!
//! A path may be published more than once (a publisher reconnecting before its old connection
//! timed out, routes through several cluster peers). The **best** publication is the one
//! announced and served ([`Route::outranks`]): a live publication before one kept only for a
//! linger after its publisher was lost ([`Publication::linger`]), a local publisher before a
//! route learned from a cluster peer, then the shorter hop chain, then, between cluster routes,
//! the lower hop chain (so every relay of a cluster picks the same upstream for a path published
//! on two relays, whatever order it heard them in), then the **newest**, so a reconnecting
//! publisher takes over at once instead of waiting for its stale twin to time out. The others are kept,
//! best last, as backups: when the active one ends, the best remaining backup is announced again
//! (watchers see the path go, then come back): that is a relay's failover to another route.
//! Refusing the second publisher instead would leave a reconnecting publisher locked out until its
//! old connection's idle timeout; forgetting the first left the path empty for good when the
//! second left.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::ops::Bound;
use std::task::Poll;

use kio::sync::{Budget, Charge, Lock};
use kio::{Waiter, WaiterList, Wakes};
use slab::Slab;

use super::{BroadcastConsumer, BroadcastProducer, Error, Path};

/// An origin's identity in hop chains.
pub type OriginId = u64;

/// The longest hop chain a route may carry.
pub const MAX_HOPS: usize = 32;

/// How an announced broadcast reached this origin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
	/// Origin ids the announcement passed through, oldest (the publisher's) first.
	pub hops: Vec<OriginId>,
	/// Learned from a cluster peer: served to clients, never announced to other cluster peers
	/// ([`OriginConsumer::announced_to_peer`]) unless under the origin's transit prefix
	/// ([`Origin::set_transit`]).
	pub cluster: bool,
}

impl Route {
	/// A route through `hops`, from a client (a publisher, or a relay connected as one).
	pub fn new(hops: Vec<OriginId>) -> Self {
		Self { hops, cluster: false }
	}

	/// A route through `hops` learned from a cluster peer.
	pub fn cluster(hops: Vec<OriginId>) -> Self {
		Self { hops, cluster: true }
	}

	/// Whether the route passed through `origin`.
	pub fn contains(&self, origin: OriginId) -> bool {
		origin != 0 && self.hops.contains(&origin)
	}

	/// Whether this route is preferred to `other` on its own merits: a client's before a cluster
	/// peer's, then the shorter hop chain, then, between two cluster routes, the lower hop chain
	/// (compared id by id from the publisher's end), so that every relay of a cluster picks the
	/// same publisher of a path published on two relays whatever order it heard them in. Between
	/// routes neither outranks (two clients' routes of one length, or one chain heard twice), the
	/// newer wins: a reconnecting publisher takes over at once.
	pub fn outranks(&self, other: &Self) -> bool {
		let key = |route: &Self| (route.cluster, route.hops.len());
		match key(self).cmp(&key(other)) {
			std::cmp::Ordering::Equal => self.cluster && self.hops < other.hops,
			order => order.is_lt(),
		}
	}
}

/// An announcement seen by a cursor.
#[derive(Clone, Debug)]
pub struct Update {
	/// The path, relative to the cursor's root.
	pub path: Path,
	/// The broadcast, or `None` when the path was unannounced.
	pub broadcast: Option<BroadcastConsumer>,
	/// The route of an announcement (empty for an unannouncement).
	pub route: Route,
}

struct Announced {
	broadcast: BroadcastConsumer,
	route: Route,
	/// Who published it ([`OriginProducer::owned_by`]), if anyone said.
	owner: Option<u64>,
	serial: u64,
	/// Its publisher was lost and it is kept only for a linger ([`Publication::linger`]): every
	/// live publication of the path outranks it.
	lingering: bool,
}

impl Announced {
	fn outranks(&self, other: &Self) -> bool {
		match (self.lingering, other.lingering) {
			(false, true) => true,
			(true, false) => false,
			_ => self.route.outranks(&other.route),
		}
	}
}

struct Cursor {
	/// Absolute prefixes this cursor sees (its root joined with each allowed prefix).
	prefixes: Vec<Path>,
	root: Path,
	exclude: Option<OriginId>,
	/// Skip routes learned from cluster peers: this cursor feeds a cluster peer.
	local_only: bool,
	/// The origin's transit prefix ([`Origin::set_transit`]): a `local_only` cursor still sees
	/// peers' routes under it.
	transit: Option<Path>,
	/// Absolute prefixes this cursor never sees ([`OriginConsumer::hide`]).
	hidden: Vec<Path>,
	/// Where the walk of the origin's current set stands: the set is read from the origin as the
	/// cursor yields it, never copied, so a cursor costs nothing per broadcast announced.
	walk: Walk,
	/// Paths with a pending update, in the order they first became pending: only paths the walk
	/// has passed (it sees the others as they are when it gets there).
	order: VecDeque<Path>,
	/// The pending update of each path in `order` (absolute paths).
	pending: HashMap<Path, Pending>,
	/// What `pending` holds, charged to a budget ([`AnnounceCursor::bounded`]).
	charge: Option<QueueCharge>,
	/// The budget refused an update: the queue was dropped, and the cursor says nothing more.
	overflowed: bool,
	/// Also hears a path announced again by the same owner ([`OriginState::continued`]).
	continuations: bool,
	on_update: WaiterList,
}

/// How far a cursor's walk of the current set has gone.
#[derive(Clone, Debug)]
enum Walk {
	/// Not begun: every path is ahead.
	Start,
	/// Past this path (absolute).
	After(Path),
	/// The whole set was walked.
	Done,
}

impl Walk {
	/// Whether the walk has yet to reach `path`.
	fn ahead(&self, path: &Path) -> bool {
		match self {
			Self::Start => true,
			Self::After(last) => path > last,
			Self::Done => false,
		}
	}
}

/// What a bounded cursor's queue is charged to: a session's budget for it, and the connection's
/// memory when there is one.
pub type QueueAccount = (Budget, Option<Budget>);
type QueueCharge = Charge<QueueAccount>;

/// What one queued update is charged: its entry in the map and the queue (the path twice, the
/// broadcast's handle, the route with up to [`MAX_HOPS`] hops), rounded up; measured at about
/// 289 bytes a queued update for short paths.
fn queue_cost(path: &Path) -> u64 {
	512 + 2 * path.as_str().len() as u64
}

/// What a cursor has yet to hear about one path.
struct Pending {
	/// The cursor was told of an announcement here that has since gone: it hears `None` first.
	unannounce: bool,
	/// What is announced here now, if the cursor has not heard it yet.
	announce: Option<(BroadcastConsumer, Route)>,
}

impl Cursor {
	fn sees(&self, path: &Path, route: Option<&Route>) -> bool {
		let learned = route.is_some_and(|route| route.cluster);
		let passed_on = || self.transit.as_ref().is_some_and(|transit| path.has_prefix(transit));
		let through_peer = matches!((self.exclude, route), (Some(peer), Some(route)) if route.contains(peer));
		self.prefixes.iter().any(|prefix| path.has_prefix(prefix))
			&& !self.hidden.iter().any(|hidden| path.has_prefix(hidden))
			&& !through_peer
			&& (!self.local_only || !learned || passed_on())
	}

	/// Records that `path` is now `announced` (or gone), coalescing with what is pending there.
	/// A path the walk has yet to reach is left to it; one past it is queued, charged, and a
	/// charge the budget refuses overflows the cursor.
	fn push(&mut self, path: &Path, announced: Option<&Announced>) -> Wakes {
		if path.strip_prefix(&self.root).is_none() || self.overflowed || self.walk.ahead(path) {
			return Wakes::none();
		}
		let announce = announced.map(|a| (a.broadcast.clone(), a.route.clone()));
		match self.pending.get_mut(path) {
			Some(pending) => {
				pending.announce = announce;
				if !pending.unannounce && pending.announce.is_none() {
					// Announced and gone before the cursor heard of it: nothing to say.
					self.forget(path);
					self.order.retain(|queued| queued != path);
					return Wakes::none();
				}
			}
			None => {
				if let Some(charge) = &mut self.charge
					&& !charge.grow(queue_cost(path))
				{
					self.overflow();
					return self.on_update.take();
				}
				self.pending.insert(
					path.clone(),
					Pending {
						unannounce: announce.is_none(),
						announce,
					},
				);
				self.order.push_back(path.clone());
			}
		}
		self.on_update.take()
	}

	/// Drops the queue: the cursor can no longer say what changed.
	fn overflow(&mut self) {
		self.overflowed = true;
		self.pending = HashMap::new();
		self.order = VecDeque::new();
		if let Some(charge) = &mut self.charge {
			charge.resize(0);
		}
	}

	/// Forgets `path`'s entry, giving back its charge.
	fn forget(&mut self, path: &Path) {
		self.pending.remove(path);
		if let Some(charge) = &mut self.charge {
			charge.shrink(queue_cost(path));
		}
	}

	/// The next path of the walk the cursor sees, and its announcement; the walk moves past it.
	fn walk(&mut self, broadcasts: &BTreeMap<Path, Vec<Announced>>) -> Option<Update> {
		loop {
			let from = match &self.walk {
				Walk::Start => Bound::Unbounded,
				Walk::After(last) => Bound::Excluded(last.clone()),
				Walk::Done => return None,
			};
			let Some((path, stack)) = broadcasts.range((from, Bound::Unbounded)).next() else {
				self.walk = Walk::Done;
				return None;
			};
			self.walk = Walk::After(path.clone());
			let announced = stack.last().expect("no empty stacks");
			if !self.sees(path, Some(&announced.route)) {
				continue;
			}
			let Some(relative) = path.strip_prefix(&self.root) else {
				continue;
			};
			return Some(Update {
				path: relative,
				broadcast: Some(announced.broadcast.clone()),
				route: announced.route.clone(),
			});
		}
	}

	/// The next update: the current set first, walked in path order, then what changed since, in
	/// the order paths became pending.
	fn pop(&mut self, broadcasts: &BTreeMap<Path, Vec<Announced>>) -> Option<Update> {
		if let Some(update) = self.walk(broadcasts) {
			return Some(update);
		}
		let path = self.order.front()?.clone();
		let relative = path
			.strip_prefix(&self.root)
			.expect("only paths under the root are queued");
		let pending = self.pending.get_mut(&path).expect("queued paths are pending");
		if pending.unannounce {
			pending.unannounce = false;
			if pending.announce.is_none() {
				self.forget(&path);
				self.order.pop_front();
			}
			return Some(Update {
				path: relative,
				broadcast: None,
				route: Route::default(),
			});
		}
		let (broadcast, route) = pending.announce.take().expect("a pending entry says something");
		self.forget(&path);
		self.order.pop_front();
		Some(Update {
			path: relative,
			broadcast: Some(broadcast),
			route,
		})
	}

	/// Updates pending: the rest of the walk, then one per path, two for a path that goes and
	/// comes back.
	fn queued(&self, broadcasts: &BTreeMap<Path, Vec<Announced>>) -> usize {
		let from = match &self.walk {
			Walk::Start => Bound::Unbounded,
			Walk::After(last) => Bound::Excluded(last.clone()),
			Walk::Done => Bound::Unbounded,
		};
		let walking = match self.walk {
			Walk::Done => 0,
			_ => (broadcasts.range((from, Bound::Unbounded)))
				.filter(|(path, stack)| {
					let route = &stack.last().expect("no empty stacks").route;
					self.sees(path, Some(route)) && path.strip_prefix(&self.root).is_some()
				})
				.count(),
		};
		let queued: usize = (self.pending.values())
			.map(|pending| usize::from(pending.unannounce) + usize::from(pending.announce.is_some()))
			.sum();
		walking + queued
	}
}

struct OriginState {
	id: OriginId,
	/// Every publication of each path, worst first; the last is the one announced (see the
	/// module docs: best route, then newest).
	broadcasts: BTreeMap<Path, Vec<Announced>>,
	cursors: Slab<Cursor>,
	serial: u64,
	/// Routes learned from cluster peers under this prefix are passed on to other peers.
	transit: Option<Path>,
}

impl OriginState {
	/// Tells the cursors that follow continuations ([`OriginConsumer::successor`]'s) that the
	/// path's publisher announced it again: the others hear nothing, the path never went.
	fn continued(&mut self, path: &Path) -> Wakes {
		let active = self.broadcasts.get(path).and_then(|stack| stack.last());
		let mut wakes = Wakes::none();
		for (_, cursor) in &mut self.cursors {
			if cursor.continuations && active.is_some_and(|a| cursor.sees(path, Some(&a.route))) {
				wakes.append(cursor.push(path, active));
			}
		}
		wakes
	}

	/// Tells the cursors that saw the path's `old` active route (if there was one) that it went,
	/// and those that see its new active route (if any) that it came.
	fn replaced(&mut self, path: &Path, old: Option<&Route>) -> Wakes {
		let active = self.broadcasts.get(path).and_then(|stack| stack.last());
		let new_route = active.map(|announced| announced.route.clone());
		let mut wakes = Wakes::none();
		for (_, cursor) in &mut self.cursors {
			let saw_old = old.is_some_and(|old| cursor.sees(path, Some(old)));
			let sees_new = new_route.as_ref().is_some_and(|route| cursor.sees(path, Some(route)));
			if saw_old && !sees_new {
				wakes.append(cursor.push(path, None));
			}
			if saw_old && sees_new {
				// The old one goes, then the new one comes: two updates, coalesced in one entry.
				// (Wakes are collected, never dropped here: dropping wakes them under the lock.)
				wakes.append(cursor.push(path, None));
				wakes.append(cursor.push(path, active));
			} else if sees_new {
				wakes.append(cursor.push(path, active));
			}
		}
		wakes
	}
}

/// An origin: create it once, then hand out producer and consumer views.
#[derive(Clone)]
pub struct Origin {
	state: Lock<OriginState>,
}

impl Origin {
	/// An origin identified by `id` in hop chains (0 for none).
	pub fn new(id: OriginId) -> Self {
		Self {
			state: Lock::new(OriginState {
				id,
				broadcasts: BTreeMap::new(),
				cursors: Slab::new(),
				serial: 0,
				transit: None,
			}),
		}
	}

	/// Passes on routes learned from cluster peers under `prefix` (absolute) to other peers,
	/// hop chains stopping loops: the one exception to "a cluster peer hears only local routes"
	/// ([`OriginConsumer::announced_to_peer`]), for what every relay of a cluster must hear from
	/// every other through any of them, such as which relays there are. Cursors made before the
	/// call keep the rule they were made with.
	pub fn set_transit(&self, prefix: &Path) {
		self.state.lock().transit = Some(prefix.clone());
	}

	/// Broadcasts announced now outside `prefix` (absolute): the whole count less the paths under
	/// it, which sort together (a walk of those only).
	pub fn broadcasts_outside(&self, prefix: &Path) -> usize {
		let state = self.state.lock();
		state.broadcasts.len() - Self::under(&state, prefix).count()
	}

	/// Publications kept as backups outside `prefix` (absolute).
	pub fn backups_outside(&self, prefix: &Path) -> usize {
		let state = self.state.lock();
		let backups = |stack: &Vec<Announced>| stack.len() - 1;
		let all: usize = state.broadcasts.values().map(backups).sum();
		all - Self::under(&state, prefix)
			.map(|(_, stack)| backups(stack))
			.sum::<usize>()
	}

	/// The paths under `prefix` and their publications. Paths that start with its text sort
	/// together from it on (`a`, `a-b`, `a/b`, `ab`), and those under it are among them.
	fn under<'a>(state: &'a OriginState, prefix: &'a Path) -> impl Iterator<Item = (&'a Path, &'a Vec<Announced>)> {
		state
			.broadcasts
			.range(prefix.clone()..)
			.take_while(move |(path, _)| path.as_str().starts_with(prefix.as_str()))
			.filter(move |(path, _)| path.has_prefix(prefix))
	}

	/// This origin's id.
	pub fn id(&self) -> OriginId {
		self.state.lock().id
	}

	/// Broadcasts announced now, at any path.
	pub fn broadcasts(&self) -> usize {
		self.state.lock().broadcasts.len()
	}

	/// Publications kept as backups behind the announced one, at any path.
	pub fn backups(&self) -> usize {
		self.state.lock().broadcasts.values().map(|stack| stack.len() - 1).sum()
	}

	/// A producer view at the root, allowed everywhere.
	pub fn producer(&self) -> OriginProducer {
		OriginProducer {
			view: View::root(self.state.clone()),
			owner: None,
		}
	}

	/// A consumer view at the root, allowed everywhere.
	pub fn consumer(&self) -> OriginConsumer {
		OriginConsumer {
			view: View::root(self.state.clone()),
			requester: None,
		}
	}
}

impl fmt::Debug for Origin {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Origin").field("id", &self.id()).finish()
	}
}

/// A root and the prefixes (relative to it) a handle may use.
#[derive(Clone)]
struct View {
	state: Lock<OriginState>,
	root: Path,
	allowed: Vec<Path>,
	/// Absolute prefixes this view can neither use nor see.
	hidden: Vec<Path>,
}

impl View {
	fn root(state: Lock<OriginState>) -> Self {
		Self {
			state,
			root: Path::default(),
			allowed: vec![Path::default()],
			hidden: Vec::new(),
		}
	}

	fn hide(&self, prefix: &Path) -> Self {
		let mut hidden = self.hidden.clone();
		hidden.push(self.root.join(prefix));
		Self {
			state: self.state.clone(),
			root: self.root.clone(),
			allowed: self.allowed.clone(),
			hidden,
		}
	}

	fn with_root(&self, prefix: &Path) -> Self {
		// Keep only the allowed prefixes that meet the new root, re-expressed under it.
		let allowed = self
			.allowed
			.iter()
			.filter_map(|allowed| {
				prefix
					.strip_prefix(allowed)
					.map(|_| Path::default())
					.or_else(|| allowed.strip_prefix(prefix))
			})
			.collect();
		Self {
			state: self.state.clone(),
			root: self.root.join(prefix),
			allowed,
			hidden: self.hidden.clone(),
		}
	}

	fn scope(&self, prefixes: &[Path]) -> Self {
		let allowed = prefixes
			.iter()
			.filter(|prefix| self.allowed.iter().any(|allowed| prefix.has_prefix(allowed)))
			.cloned()
			.collect();
		Self {
			state: self.state.clone(),
			root: self.root.clone(),
			allowed,
			hidden: self.hidden.clone(),
		}
	}

	fn absolute(&self, path: &Path) -> Result<Path, Error> {
		if !self.allowed.iter().any(|allowed| path.has_prefix(allowed)) {
			return Err(Error::Unauthorized);
		}
		let absolute = self.root.join(path);
		if self.hidden.iter().any(|hidden| absolute.has_prefix(hidden)) {
			return Err(Error::Unauthorized);
		}
		if !absolute.fits() {
			return Err(Error::BoundsExceeded);
		}
		Ok(absolute)
	}
}

/// Publishes broadcasts into an origin, under its root and scope.
#[derive(Clone)]
pub struct OriginProducer {
	view: View,
	/// Who publishes through this view ([`owned_by`](Self::owned_by)).
	owner: Option<u64>,
}

impl OriginProducer {
	/// This view, re-rooted at `prefix` (relative to the current root).
	pub fn with_root(&self, prefix: &Path) -> Self {
		Self {
			view: self.view.with_root(prefix),
			owner: self.owner,
		}
	}

	/// This view, restricted to `prefixes` (relative to the root, within the current scope).
	pub fn scope(&self, prefixes: &[Path]) -> Self {
		Self {
			view: self.view.scope(prefixes),
			owner: self.owner,
		}
	}

	/// This view without `prefix` (relative to the root): publishing under it is
	/// [`Error::Unauthorized`], whatever the scope says.
	pub fn hide(&self, prefix: &Path) -> Self {
		Self {
			view: self.view.hide(prefix),
			owner: self.owner,
		}
	}

	/// This view, publishing as `owner` (an identity: a relay gives a token's subject, or the
	/// client's address). A path a live publication of another owner holds is then refused
	/// ([`Error::Taken`]); a publication of the same owner takes it over without its watchers
	/// hearing it go, and viewers of the old one follow it ([`OriginConsumer::successor`]).
	/// Publications without an owner (a cluster peer's routes) neither hold nor are held.
	pub fn owned_by(&self, owner: u64) -> Self {
		Self {
			view: self.view.clone(),
			owner: Some(owner),
		}
	}

	/// Announces `broadcast` at `path` with `route`. The announcement lasts until the returned
	/// [`Publication`] drops. If the path is already published, this publication becomes the
	/// active one unless the active one's route outranks it ([`Route::outranks`]); the other is
	/// kept as a backup, announced again if the active one ends first (see the
	/// [module docs](self)). A route whose hop chain already holds this origin's id, or is
	/// longer than [`MAX_HOPS`], is refused ([`Error::Unauthorized`]); so is a path outside the
	/// view's scope, and a path that joined under the view's root is too long or too deep
	/// ([`Error::BoundsExceeded`]).
	pub fn publish(&self, path: &Path, broadcast: BroadcastConsumer, route: Route) -> Result<Publication, Error> {
		let path = self.view.absolute(path)?;
		let (serial, wakes) = {
			let mut state = self.view.state.lock();
			if route.contains(state.id) || route.hops.len() > MAX_HOPS {
				return Err(Error::Unauthorized);
			}
			state.serial += 1;
			let serial = state.serial;
			let stack = state.broadcasts.entry(path.clone()).or_default();
			let previous = stack.last().map(|announced| (announced.route.clone(), announced.owner));
			// A path a live publisher holds is not taken by another owner: the audience of a
			// broadcast is its publisher's, not the next peer's to announce the same name. The
			// same owner (a publisher reconnecting) takes over, and its viewers carry on.
			let owner = self.owner;
			let held = |other: &Announced| !other.lingering && other.owner.is_some() && other.owner != owner;
			if owner.is_some() && stack.iter().any(held) {
				return Err(Error::Taken);
			}
			let announced = Announced {
				broadcast,
				route,
				owner,
				serial,
				lingering: false,
			};
			// Below every publication that outranks this one; above the rest, so it beats its
			// equals by being newer.
			let at = stack
				.iter()
				.position(|other| other.outranks(&announced))
				.unwrap_or(stack.len());
			let active = at == stack.len();
			stack.insert(at, announced);
			// A replacement: cursors see the old one go, then the new one come. A backup changes
			// nothing anyone sees.
			let wakes = match (active, previous) {
				// The same owner's new broadcast continues the path: watchers need not hear it
				// go and come back (viewers follow it, see `OriginConsumer::successor`).
				(true, Some((_, Some(old)))) if owner == Some(old) => state.continued(&path),
				(true, previous) => state.replaced(&path, previous.as_ref().map(|(route, _)| route)),
				(false, _) => Wakes::none(),
			};
			(serial, wakes)
		};
		drop(wakes);
		Ok(Publication {
			state: self.view.state.clone(),
			path,
			serial,
		})
	}

	/// Creates a broadcast and announces it at `path`; the announcement ends when the returned
	/// producer (its last clone) drops, or the publication is dropped by the caller.
	pub fn create_broadcast(&self, path: &Path, route: Route) -> Result<(BroadcastProducer, Publication), Error> {
		let broadcast = BroadcastProducer::new();
		let publication = self.publish(path, broadcast.consume(), route)?;
		Ok((broadcast, publication))
	}
}

impl fmt::Debug for OriginProducer {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("OriginProducer").field("root", &self.view.root).finish()
	}
}

/// Keeps a broadcast announced; dropping it unannounces the path (unless it was replaced).
#[must_use = "dropping a Publication unannounces it"]
pub struct Publication {
	state: Lock<OriginState>,
	path: Path,
	serial: u64,
}

impl Publication {
	/// Marks this publication as kept only for a linger after its publisher was lost: every live
	/// publication of the path outranks it from now on, so a publisher that came back through
	/// another route (another relay of the cluster, a peer that is still up) is served at once
	/// instead of when the linger ends. If it was the announced one and a live one is there, the
	/// live one is announced in its place (watchers see the path go and come back).
	pub fn linger(&self) {
		let wakes = {
			let mut state = self.state.lock();
			let Some((mut announced, was_active)) = self.take(&mut state) else {
				return;
			};
			let stack = state.broadcasts.entry(self.path.clone()).or_default();
			announced.lingering = true;
			// Above what it still outranks (worst first, so a prefix), below its equals (other
			// lingering publications, which have lingered longer).
			let at = stack
				.iter()
				.position(|other| !announced.outranks(other))
				.unwrap_or(stack.len());
			let old = announced.route.clone();
			stack.insert(at, announced);
			let still_active = at + 1 == stack.len();
			match was_active && !still_active {
				true => state.replaced(&self.path, Some(&old)),
				false => Wakes::none(),
			}
		};
		drop(wakes);
	}

	/// Takes this publication out of its path's stack (the path goes with its last one), and
	/// whether it was the announced one.
	fn take(&self, state: &mut OriginState) -> Option<(Announced, bool)> {
		let stack = state.broadcasts.get_mut(&self.path)?;
		let index = stack.iter().position(|announced| announced.serial == self.serial)?;
		let was_active = index + 1 == stack.len();
		let announced = stack.remove(index);
		if stack.is_empty() {
			state.broadcasts.remove(&self.path);
		}
		Some((announced, was_active))
	}
}

impl Drop for Publication {
	/// Withdraws this publication: if it was the active one, the best backup (if any) is
	/// announced in its place.
	fn drop(&mut self) {
		let wakes = {
			let mut state = self.state.lock();
			let Some((old, was_active)) = self.take(&mut state) else {
				return;
			};
			match was_active {
				true => state.replaced(&self.path, Some(&old.route)),
				false => Wakes::none(),
			}
		};
		drop(wakes);
	}
}

impl fmt::Debug for Publication {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Publication").field("path", &self.path).finish()
	}
}

/// Reads an origin, under its root and scope.
#[derive(Clone)]
pub struct OriginConsumer {
	view: View,
	/// Whose requests for tracks that do not exist yet this view makes (see
	/// [`requesting_as`](Self::requesting_as)).
	requester: Option<u64>,
}

impl OriginConsumer {
	/// This view, re-rooted at `prefix` (relative to the current root).
	pub fn with_root(&self, prefix: &Path) -> Self {
		Self {
			view: self.view.with_root(prefix),
			requester: self.requester,
		}
	}

	/// This view, restricted to `prefixes` (relative to the root, within the current scope).
	pub fn scope(&self, prefixes: &[Path]) -> Self {
		Self {
			view: self.view.scope(prefixes),
			requester: self.requester,
		}
	}

	/// This view without `prefix` (relative to the root): nothing under it is seen or got,
	/// whatever the scope says.
	pub fn hide(&self, prefix: &Path) -> Self {
		Self {
			view: self.view.hide(prefix),
			requester: self.requester,
		}
	}

	/// This view, recording the tracks it makes a broadcast's handler create as `requester`'s: a
	/// handler that must refuse requests can then share its room fairly among requesters, so one
	/// of them cannot take it all (a relay's sessions each request as one; see
	/// [`TrackProducer::requester`](super::TrackProducer::requester)).
	pub fn requesting_as(&self, requester: u64) -> Self {
		Self {
			view: self.view.clone(),
			requester: Some(requester),
		}
	}

	/// Whose requests this view makes, if it says (see [`requesting_as`](Self::requesting_as)).
	pub fn requester(&self) -> Option<u64> {
		self.requester
	}

	/// The prefixes this view may see, relative to its root.
	pub fn allowed(&self) -> &[Path] {
		&self.view.allowed
	}

	/// The broadcast announced at `path`: [`Error::Unauthorized`] outside this view's scope,
	/// [`Error::NotFound`] where nothing is announced.
	pub fn broadcast(&self, path: &Path) -> Result<BroadcastConsumer, Error> {
		let path = self.view.absolute(path)?;
		self.view
			.state
			.lock()
			.broadcasts
			.get(&path)
			.and_then(|stack| stack.last())
			.map(|announced| announced.broadcast.requested_by(self.requester))
			.ok_or(Error::NotFound)
	}

	/// The broadcast announced at `path`, if any (and in scope).
	pub fn get_broadcast(&self, path: &Path) -> Option<BroadcastConsumer> {
		self.broadcast(path).ok()
	}

	/// Who published the broadcast announced at `path` ([`OriginProducer::owned_by`]), if
	/// anyone said.
	pub fn owner(&self, path: &Path) -> Option<u64> {
		let path = self.view.absolute(path).ok()?;
		let state = self.view.state.lock();
		state.broadcasts.get(&path)?.last()?.owner
	}

	/// The broadcast that continues `old` at `path`: the one `owner` (the owner of `old`) has
	/// announced there since, once `old` is closed (its publisher gone, or replaced by the same
	/// owner). Waits for it while `old`'s place is empty or still `old`'s; `None` once another
	/// owner's broadcast, or none at all for `patience`, is what `path` has.
	pub async fn successor(
		&self,
		path: &Path,
		old: &BroadcastConsumer,
		owner: u64,
		patience: std::time::Duration,
	) -> Option<BroadcastConsumer> {
		let mut cursor = self.announced(path);
		cursor.state.lock().cursors[cursor.key].continuations = true;
		let mut deadline = kio::time::Deadline::new(Some(kio::time::now() + patience));
		loop {
			match self.broadcast(path) {
				Ok(next) if !next.same(old) && !next.is_closed() => {
					return (self.owner(path) == Some(owner)).then_some(next);
				}
				_ => {}
			}
			let changed = kio::wait(|waiter| match cursor.poll_next(waiter) {
				Poll::Ready(_) => Poll::Ready(true),
				Poll::Pending => deadline.poll_elapsed(waiter).map(|()| false),
			})
			.await;
			if !changed {
				return None;
			}
		}
	}

	/// An announcement cursor for `prefix` (relative to the root): the current set, then live
	/// updates.
	pub fn announced(&self, prefix: &Path) -> AnnounceCursor {
		self.cursor(prefix, None, false)
	}

	/// Like [`announced`](Self::announced), skipping routes that passed through `peer`.
	pub fn announced_excluding(&self, prefix: &Path, peer: OriginId) -> AnnounceCursor {
		self.cursor(prefix, Some(peer), false)
	}

	/// What a relay announces to a cluster peer: like
	/// [`announced_excluding`](Self::announced_excluding), also skipping the routes learned from
	/// cluster peers ([`Route::cluster`]), except under the origin's transit prefix
	/// ([`Origin::set_transit`]). A path whose best route is a peer's is not seen (outside that
	/// prefix).
	pub fn announced_to_peer(&self, prefix: &Path, peer: OriginId) -> AnnounceCursor {
		self.cursor(prefix, (peer != 0).then_some(peer), true)
	}

	fn cursor(&self, prefix: &Path, exclude: Option<OriginId>, local_only: bool) -> AnnounceCursor {
		// The cursor sees what both the prefix and the scope allow.
		let prefixes: Vec<Path> = self
			.view
			.allowed
			.iter()
			.filter_map(|allowed| {
				if prefix.has_prefix(allowed) {
					Some(prefix.clone())
				} else if allowed.has_prefix(prefix) {
					Some(allowed.clone())
				} else {
					None
				}
			})
			.map(|relative| self.view.root.join(&relative))
			.collect();
		let mut state = self.view.state.lock();
		let cursor = Cursor {
			prefixes,
			root: self.view.root.clone(),
			exclude,
			local_only,
			transit: state.transit.clone(),
			hidden: self.view.hidden.clone(),
			walk: Walk::Start,
			order: VecDeque::new(),
			pending: HashMap::new(),
			charge: None,
			overflowed: false,
			continuations: false,
			on_update: WaiterList::new(),
		};
		let key = state.cursors.insert(cursor);
		AnnounceCursor {
			state: self.view.state.clone(),
			key,
			requester: self.requester,
		}
	}
}

impl fmt::Debug for OriginConsumer {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("OriginConsumer").field("root", &self.view.root).finish()
	}
}

/// Yields announcements: the set current at creation, then live updates.
pub struct AnnounceCursor {
	state: Lock<OriginState>,
	key: usize,
	/// The view's requester, given to the broadcasts it yields.
	requester: Option<u64>,
}

impl AnnounceCursor {
	/// Charges the updates this cursor queues to `account`, each at a fixed cost per path (the
	/// current set it walks costs nothing): past what `account` allows, the queue is dropped and
	/// [`poll_next_bounded`](Self::poll_next_bounded) says so, for its caller to start over with a
	/// new cursor. So a watcher that stops reading holds a bounded amount, whatever the number of
	/// broadcasts and however often they change.
	pub fn bounded(self, account: QueueAccount) -> Self {
		self.state.lock().cursors[self.key].charge = Some(Charge::empty(account));
		self
	}

	/// The next update; registers for the next announcement otherwise. A cursor whose queue
	/// overflowed ([`bounded`](Self::bounded)) yields nothing more: see
	/// [`poll_next_bounded`](Self::poll_next_bounded).
	pub fn poll_next(&mut self, waiter: &Waiter) -> Poll<Update> {
		match self.poll_next_bounded(waiter) {
			Poll::Ready(Ok(update)) => Poll::Ready(update),
			_ => Poll::Pending,
		}
	}

	/// The next update, or [`Error::BoundsExceeded`] once the queue overflowed its budget.
	pub fn poll_next_bounded(&mut self, waiter: &Waiter) -> Poll<Result<Update, Error>> {
		let mut state = self.state.lock();
		let OriginState {
			cursors, broadcasts, ..
		} = &mut *state;
		let cursor = &mut cursors[self.key];
		if cursor.overflowed {
			return Poll::Ready(Err(Error::BoundsExceeded));
		}
		match cursor.pop(broadcasts) {
			Some(update) => Poll::Ready(Ok(self.carrying_requester(update))),
			None => {
				cursor.on_update.register(waiter);
				Poll::Pending
			}
		}
	}

	/// The next update.
	pub async fn next(&mut self) -> Update {
		kio::wait(|waiter| self.poll_next(waiter)).await
	}

	/// The number of updates to come now (at creation: the size of the current set).
	pub fn queued(&self) -> usize {
		let state = self.state.lock();
		state.cursors[self.key].queued(&state.broadcasts)
	}

	/// The next update if one is queued.
	pub fn try_next(&mut self) -> Option<Update> {
		let mut state = self.state.lock();
		let OriginState {
			cursors, broadcasts, ..
		} = &mut *state;
		let update = cursors[self.key].pop(broadcasts);
		drop(state);
		update.map(|update| self.carrying_requester(update))
	}

	fn carrying_requester(&self, mut update: Update) -> Update {
		if self.requester.is_some() {
			update.broadcast = update.broadcast.map(|broadcast| broadcast.requested_by(self.requester));
		}
		update
	}
}

impl Drop for AnnounceCursor {
	fn drop(&mut self) {
		self.state.lock().cursors.remove(self.key);
	}
}

impl fmt::Debug for AnnounceCursor {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str("AnnounceCursor { .. }")
	}
}
