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
//! away. Each cursor owns its queue of pending updates; an announcement appends to the queues of
//! the cursors whose prefix and scope match (announcements are rare next to media, so this
//! O(cursors) fan-out is cheap). [`announced_excluding`](OriginConsumer::announced_excluding)
//! skips routes whose hop chain contains a peer, so a relay never reflects a broadcast back to
//! the peer it came from.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::task::Poll;

use kio::sync::Lock;
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
}

impl Route {
	/// A route through `hops`.
	pub fn new(hops: Vec<OriginId>) -> Self {
		Self { hops }
	}

	/// Whether the route passed through `origin`.
	pub fn contains(&self, origin: OriginId) -> bool {
		origin != 0 && self.hops.contains(&origin)
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
	serial: u64,
}

struct Cursor {
	/// Absolute prefixes this cursor sees (its root joined with each allowed prefix).
	prefixes: Vec<Path>,
	root: Path,
	exclude: Option<OriginId>,
	updates: VecDeque<Update>,
	on_update: WaiterList,
}

impl Cursor {
	fn sees(&self, path: &Path, route: Option<&Route>) -> bool {
		self.prefixes.iter().any(|prefix| path.has_prefix(prefix))
			&& !matches!((self.exclude, route), (Some(peer), Some(route)) if route.contains(peer))
	}

	fn push(&mut self, path: &Path, announced: Option<&Announced>) -> Wakes {
		let Some(relative) = path.strip_prefix(&self.root) else {
			return Wakes::none();
		};
		self.updates.push_back(Update {
			path: relative,
			broadcast: announced.map(|a| a.broadcast.clone()),
			route: announced.map(|a| a.route.clone()).unwrap_or_default(),
		});
		self.on_update.take()
	}
}

struct OriginState {
	id: OriginId,
	broadcasts: BTreeMap<Path, Announced>,
	cursors: Slab<Cursor>,
	serial: u64,
}

impl OriginState {
	/// Queues an update of `path` for every cursor that sees it; `route` decides exclusion.
	fn notify(&mut self, path: &Path, route: &Route, announced: bool) -> Wakes {
		let mut wakes = Wakes::none();
		let entry = if announced { self.broadcasts.get(path) } else { None };
		for (_, cursor) in &mut self.cursors {
			if cursor.sees(path, Some(route)) {
				wakes.append(cursor.push(path, entry));
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
			}),
		}
	}

	/// This origin's id.
	pub fn id(&self) -> OriginId {
		self.state.lock().id
	}

	/// Broadcasts announced now, at any path.
	pub fn broadcasts(&self) -> usize {
		self.state.lock().broadcasts.len()
	}

	/// A producer view at the root, allowed everywhere.
	pub fn producer(&self) -> OriginProducer {
		OriginProducer {
			view: View::root(self.state.clone()),
		}
	}

	/// A consumer view at the root, allowed everywhere.
	pub fn consumer(&self) -> OriginConsumer {
		OriginConsumer {
			view: View::root(self.state.clone()),
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
}

impl View {
	fn root(state: Lock<OriginState>) -> Self {
		Self {
			state,
			root: Path::default(),
			allowed: vec![Path::default()],
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
		}
	}

	fn absolute(&self, path: &Path) -> Result<Path, Error> {
		if !self.allowed.iter().any(|allowed| path.has_prefix(allowed)) {
			return Err(Error::Unauthorized);
		}
		Ok(self.root.join(path))
	}
}

/// Publishes broadcasts into an origin, under its root and scope.
#[derive(Clone)]
pub struct OriginProducer {
	view: View,
}

impl OriginProducer {
	/// This view, re-rooted at `prefix` (relative to the current root).
	pub fn with_root(&self, prefix: &Path) -> Self {
		Self {
			view: self.view.with_root(prefix),
		}
	}

	/// This view, restricted to `prefixes` (relative to the root, within the current scope).
	pub fn scope(&self, prefixes: &[Path]) -> Self {
		Self {
			view: self.view.scope(prefixes),
		}
	}

	/// Announces `broadcast` at `path` with `route`. The announcement lasts until the returned
	/// [`Publication`] drops (or the broadcast is replaced at the same path). A route whose hop
	/// chain already holds this origin's id, or is longer than [`MAX_HOPS`], is refused.
	pub fn publish(&self, path: &Path, broadcast: BroadcastConsumer, route: Route) -> Result<Publication, Error> {
		let path = self.view.absolute(path)?;
		let (serial, wakes) = {
			let mut state = self.view.state.lock();
			if route.contains(state.id) || route.hops.len() > MAX_HOPS {
				return Err(Error::Unauthorized);
			}
			state.serial += 1;
			let serial = state.serial;
			let mut wakes = Wakes::none();
			if let Some(old) = state.broadcasts.remove(&path) {
				// A replacement: cursors see the old one go, then the new one come.
				wakes.append(state.notify(&path, &old.route, false));
			}
			state.broadcasts.insert(
				path.clone(),
				Announced {
					broadcast,
					route: route.clone(),
					serial,
				},
			);
			wakes.append(state.notify(&path, &route, true));
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

impl Drop for Publication {
	fn drop(&mut self) {
		let wakes = {
			let mut state = self.state.lock();
			match state.broadcasts.get(&self.path) {
				Some(announced) if announced.serial == self.serial => {
					let old = state.broadcasts.remove(&self.path).expect("just seen");
					state.notify(&self.path, &old.route, false)
				}
				_ => Wakes::none(),
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
}

impl OriginConsumer {
	/// This view, re-rooted at `prefix` (relative to the current root).
	pub fn with_root(&self, prefix: &Path) -> Self {
		Self {
			view: self.view.with_root(prefix),
		}
	}

	/// This view, restricted to `prefixes` (relative to the root, within the current scope).
	pub fn scope(&self, prefixes: &[Path]) -> Self {
		Self {
			view: self.view.scope(prefixes),
		}
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
			.map(|announced| announced.broadcast.clone())
			.ok_or(Error::NotFound)
	}

	/// The broadcast announced at `path`, if any (and in scope).
	pub fn get_broadcast(&self, path: &Path) -> Option<BroadcastConsumer> {
		self.broadcast(path).ok()
	}

	/// An announcement cursor for `prefix` (relative to the root): the current set, then live
	/// updates.
	pub fn announced(&self, prefix: &Path) -> AnnounceCursor {
		self.cursor(prefix, None)
	}

	/// Like [`announced`](Self::announced), skipping routes that passed through `peer`.
	pub fn announced_excluding(&self, prefix: &Path, peer: OriginId) -> AnnounceCursor {
		self.cursor(prefix, Some(peer))
	}

	fn cursor(&self, prefix: &Path, exclude: Option<OriginId>) -> AnnounceCursor {
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
		let mut cursor = Cursor {
			prefixes,
			root: self.view.root.clone(),
			exclude,
			updates: VecDeque::new(),
			on_update: WaiterList::new(),
		};
		let mut state = self.view.state.lock();
		for (path, announced) in &state.broadcasts {
			if cursor.sees(path, Some(&announced.route)) {
				drop(cursor.push(path, Some(announced)));
			}
		}
		let key = state.cursors.insert(cursor);
		AnnounceCursor {
			state: self.view.state.clone(),
			key,
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
}

impl AnnounceCursor {
	/// The next update; registers for the next announcement otherwise.
	pub fn poll_next(&mut self, waiter: &Waiter) -> Poll<Update> {
		let mut state = self.state.lock();
		let cursor = &mut state.cursors[self.key];
		match cursor.updates.pop_front() {
			Some(update) => Poll::Ready(update),
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

	/// The number of updates queued (at creation: the size of the current set).
	pub fn queued(&self) -> usize {
		self.state.lock().cursors[self.key].updates.len()
	}

	/// The next update if one is queued.
	pub fn try_next(&mut self) -> Option<Update> {
		self.state.lock().cursors[self.key].updates.pop_front()
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
