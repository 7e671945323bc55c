//! The send scheduler: which stream a connection writes into quinn-proto next, and how much.
//!
//! # Order
//!
//! Three tiers, outermost first:
//!
//! 1. **Priority levels, strict.** A higher `i32` always goes first; a lower level sends only
//!    while every higher level has nothing ready.
//! 2. **Send groups, deficit round robin** within a level. The group at the front of a level's
//!    ring starts its turn with `quantum` bytes of deficit and keeps the front until it has
//!    written them (then it rotates to the tail) or until it has nothing ready left (then it
//!    leaves the ring, and [`Scheduler::ready`] brings it back at the tail). Streams write at
//!    byte granularity, so a turn always uses its whole quantum and nothing carries over: every
//!    group of a level gets `quantum` bytes per round.
//! 3. **Streams within a group, FIFO.** The front stream writes for the whole turn; when the
//!    turn ends with it still ready it goes to the back, so a group's streams take turns too.
//!
//! # Structure
//!
//! Groups and streams live in slot vectors, each with a free list threaded through its free
//! records, and link to each other by `u32` slot, so nothing moves and nothing is allocated
//! once the vectors have grown to their working size.
//!
//! * A level's ring is a circular doubly linked list threaded through the group slots
//!   (`prev`/`next`; `next == NIL` exactly when a group is in no ring). A level has no record
//!   of its own: the level map holds its front group, the tail is the front's `prev`, and the
//!   front carries a mark, so taking a group out of its ring (reprioritizing, retiring) touches
//!   its two neighbours and, only if it was the front, the map: O(1) wherever it sits and
//!   however long the ring is.
//! * A group's ready streams form the same kind of circular list through the stream slots, so
//!   removing a stream, ready or not, is O(1).
//! * Levels are found by priority, and ordered, in one map (`LevelMap`): up to four levels in a
//!   sorted array of `(priority, front group)`, a relay connection's usual count, then a 64-ary
//!   radix tree over the priorities (`Radix`: a root for the top two bits, five tiers of six, a
//!   bitmap of present children in each node) whose leaves hold the front groups. The leaf last
//!   reached is kept, and the session's priorities are mostly consecutive, so creating or
//!   dropping a level usually touches that one leaf; otherwise it walks the six tiers. The next
//!   level down is in the same leaf or a climb of the path. Nothing depends on how many levels
//!   there are. The MoQ session gives every group stream its own priority, so thousands of
//!   levels of one group each are the normal case.
//! * The highest level's front is kept at hand for [`Scheduler::pick`]. When that level drops,
//!   the next one down is not looked for until a `pick` needs it: in the session's pattern a
//!   newer group, which ranks higher, usually arrives first and becomes the highest itself.
//!
//! Instructions per operation (callgrind, `bench/results/scheduler.md`; 16 to 16,384 groups in
//! 2 or 8 levels, at the front, middle and tail of a ring alike; release profile with fat LTO):
//! reprioritizing to an existing level 95 to 196 (8 levels are past the array; moving a ring's
//! front re-points the map, which with 8 levels far apart is a lookup through the tree's
//! `recent` entries: 196 at the front, 152 elsewhere); retiring (the group's stream, then the
//! group) 77 to 149. A level per group (the session's pattern, every operation creating a level
//! and dropping one): reprioritizing to a new priority 114 to 118; retiring a group and
//! inserting one at its priority 232 to 237, the same at 16 levels as at 16,384. Of each
//! retire-and-insert row, some 43 are the benchmark loop's two out-of-line calls. With two or
//! four levels of one group, a relay connection's case (`--sizes 2,4 --levels 2`), the array
//! makes a level's retire and insert 213 to 260 and the reprioritize 88 to 137.
//!
//! Reprioritizing a group alone in its level to a priority no level has re-keys the level in
//! place instead of dropping it and creating another.
//!
//! # Lazy removal
//!
//! A group that loses its last ready stream while it is *not* in its turn (its stream was
//! removed or moved away) keeps its ring place: if a stream of it becomes ready again before the
//! round robin reaches it, it is served where it stood, as though it had never left. When
//! [`Scheduler::pick`] meets a dry group at a ring's front, it unlinks it then.
//!
//! A group that runs dry *during* its turn (in [`Scheduler::sent`], or by losing its streams
//! between a pick and the next) leaves its ring at once, as in deficit round robin proper. If it
//! kept the front instead, a stream that the application refills between two picks would start a
//! fresh turn every time and could keep its peers waiting indefinitely.
//!
//! # Contract
//!
//! [`Scheduler::sent`] must report the [`Pick`] most recently returned, before the picked group
//! or stream is reprioritized, moved, removed or retired (other streams and groups may change in
//! between). [`Scheduler::retire_group`] requires the group's streams to be removed first.
//! Handles of removed streams and retired groups must not be used again: their slots are reused
//! (debug builds catch a handle used while its slot is free).

use std::cell::Cell;
use std::ops::{Index, IndexMut};

/// The "no slot" link.
const NIL: u32 = u32::MAX;

/// Slot of a send group in the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupId(u32);

/// Slot of a stream in the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamSlot(u32);

/// What the scheduler says to send next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
	/// The stream to write.
	pub stream: StreamSlot,
	/// The caller's id of that stream (its QUIC stream id), as given to [`Scheduler::insert_stream`].
	pub key: u64,
	/// The stream's send group.
	pub group: GroupId,
	/// Bytes the group may still write in this turn; always more than zero.
	pub allowance: usize,
}

/// How a stream stands after a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
	/// It still has data queued.
	Ready,
	/// It has nothing queued now.
	Drained,
	/// Flow control stopped it; it is not ready until [`Scheduler::ready`] is called again.
	Blocked,
}

#[derive(Clone, Debug)]
struct Group {
	/// Its level's priority, in a ring or not.
	priority: i32,
	/// Ring neighbours (group slots); `next == NIL` exactly when the group is in no ring.
	prev: u32,
	next: u32,
	/// Bytes left in the current turn. Non-zero only for the front group of a ring during its
	/// turn, which is how a turn in progress is told from one about to start.
	deficit: usize,
	/// The front of the circular list of ready streams, or `NIL`.
	first: u32,
	/// Streams of this group, ready or not (retiring needs it to be zero); `FREE` when the slot
	/// is free.
	members: u32,
	/// Whether it is the front of its ring (the group the level map holds), so that taking a
	/// group out of a ring needs no lookup to know whether the front moves.
	front: bool,
}

#[derive(Clone, Debug)]
struct Stream {
	key: u64,
	/// The stream's group; `FREE` when the slot is free.
	group: u32,
	/// Neighbours in the group's ready list; `next == NIL` exactly when the stream is not in it.
	prev: u32,
	next: u32,
}

/// Marks a free slot (in the field named on each record).
const FREE: u32 = u32::MAX - 1;

impl Record for Group {
	fn vacate(&mut self, next: u32) {
		self.members = FREE;
		self.next = next;
	}

	fn next_free(&self) -> u32 {
		self.next
	}
}

impl Record for Stream {
	fn vacate(&mut self, next: u32) {
		self.group = FREE;
		self.prev = next;
	}

	fn next_free(&self) -> u32 {
		self.prev
	}
}

/// Records in a vector, addressed by `u32` slot, with freed slots reused last-in first-out.
/// The free list is threaded through the free records themselves ([`Record`]), so freeing a
/// slot is two stores into a record the caller has at hand and no second buffer exists.
#[derive(Debug)]
struct Slots<T> {
	items: Vec<T>,
	/// The first free slot, `NIL` if none.
	free: u32,
}

/// A record that can stand in a [`Slots`] free list.
trait Record {
	/// Marks the record free (in its `FREE` field) and links it to the free slot `next`.
	fn vacate(&mut self, next: u32);
	/// The free slot after this free record.
	fn next_free(&self) -> u32;
}

impl<T: Record> Slots<T> {
	fn with_capacity(capacity: usize) -> Self {
		Self {
			items: Vec::with_capacity(capacity),
			free: NIL,
		}
	}

	#[inline(always)]
	fn insert(&mut self, item: T) -> u32 {
		let slot = self.free;
		if slot != NIL {
			let record = &mut self.items[slot as usize];
			self.free = record.next_free();
			*record = item;
			return slot;
		}
		let slot = slot_u32(self.items.len());
		self.items.push(item);
		slot
	}

	/// Records in use, by a walk of the free list: for tests and statistics, so the hot paths
	/// keep no count.
	fn len(&self) -> usize {
		let mut free = 0;
		let mut at = self.free;
		while at != NIL {
			free += 1;
			at = self.items[at as usize].next_free();
		}
		self.items.len() - free
	}
}

impl<T> Index<u32> for Slots<T> {
	type Output = T;

	fn index(&self, slot: u32) -> &T {
		&self.items[slot as usize]
	}
}

impl<T> IndexMut<u32> for Slots<T> {
	fn index_mut(&mut self, slot: u32) -> &mut T {
		&mut self.items[slot as usize]
	}
}

/// The levels by priority, in order: which level a priority has, and the highest level below a
/// priority. Up to [`SMALL_LEVELS`] of them sit in a sorted array, which is the whole of it on
/// most of the relay's connections (one to three group streams in flight: 32 bytes and no
/// allocation); past that they move to a [`Radix`] tree, and back once the tree is empty.
/// Every operation is bounded by the array's size or the tree's height, whatever the count.
#[derive(Debug)]
struct LevelMap {
	/// Ascending by priority; `small_len` of them, while not `spilled`.
	small: [(i32, u32); SMALL_LEVELS],
	small_len: usize,
	spilled: bool,
	/// The levels while `spilled`; it allocates on the first spill.
	radix: Radix,
}

/// Levels the sorted array holds: past a few, its moves cost more than the tree's walk.
const SMALL_LEVELS: usize = 4;

impl LevelMap {
	fn new() -> Self {
		Self {
			small: [(0, NIL); SMALL_LEVELS],
			small_len: 0,
			spilled: false,
			radix: Radix::new(),
		}
	}

	#[cfg(test)]
	fn len(&self) -> usize {
		match self.spilled {
			false => self.small_len,
			true => self.radix.len(),
		}
	}

	/// The front group of `priority`'s level, `NIL` if none.
	#[inline(always)]
	fn get(&self, priority: i32) -> u32 {
		if self.spilled {
			return self.radix.get(order_key(priority));
		}
		for &(p, level) in &self.small[..self.small_len] {
			if p == priority {
				return level;
			}
		}
		NIL
	}

	/// Replaces the value of `priority`, which must be present.
	#[inline(always)]
	fn set(&mut self, priority: i32, value: u32) {
		if self.spilled {
			return self.radix.set(order_key(priority), value);
		}
		for entry in &mut self.small[..self.small_len] {
			if entry.0 == priority {
				entry.1 = value;
			}
		}
	}

	/// The value of `priority` if present; otherwise adds it with `value` and returns `NIL`.
	/// One lookup where `get` and then `insert` would make two.
	#[inline(always)]
	fn get_or_insert(&mut self, priority: i32, value: u32) -> u32 {
		if self.spilled {
			return self.radix.get_or_insert(order_key(priority), value);
		}
		let found = self.get(priority);
		if found == NIL {
			self.insert(priority, value);
		}
		found
	}

	/// Adds `priority`, which must be absent, with `level`.
	#[inline(always)]
	fn insert(&mut self, priority: i32, level: u32) {
		if !self.spilled {
			let len = self.small_len;
			if len < SMALL_LEVELS {
				// Insertion into a handful: plain moves beat a binary search and a `memmove`.
				let mut at = len;
				while at > 0 && self.small[at - 1].0 > priority {
					self.small[at] = self.small[at - 1];
					at -= 1;
				}
				self.small[at] = (priority, level);
				self.small_len = len + 1;
				return;
			}
			for &(p, l) in &self.small[..len] {
				self.radix.insert(order_key(p), l);
			}
			self.small_len = 0;
			self.spilled = true;
		}
		self.radix.insert(order_key(priority), level);
	}

	/// Removes `priority`, which must be present.
	#[inline(always)]
	fn remove(&mut self, priority: i32) {
		if !self.spilled {
			let len = self.small_len;
			let mut at = 0;
			while self.small[at].0 != priority {
				at += 1;
			}
			while at + 1 < len {
				self.small[at] = self.small[at + 1];
				at += 1;
			}
			self.small_len = len - 1;
			return;
		}
		if self.radix.remove(order_key(priority)) {
			// The tree emptied: back to the array. (Moving back at half, as a hysteresis,
			// needs a count kept on every insert and remove; the relay's connections often
			// empty between frames anyway.)
			self.spilled = false;
		}
	}

	/// The highest priority present and its value.
	#[cfg(test)]
	fn max(&self) -> Option<(i32, u32)> {
		match self.spilled {
			false => self.small[..self.small_len].last().copied(),
			true => self.radix.max().map(|(key, level)| (order_priority(key), level)),
		}
	}

	/// The highest priority present below `priority` (present or not), and its value.
	#[inline(always)]
	fn below(&self, priority: i32) -> Option<(i32, u32)> {
		match self.spilled {
			false => self.small[..self.small_len]
				.iter()
				.rev()
				.find(|&&(p, _)| p < priority)
				.copied(),
			true => self
				.radix
				.below(order_key(priority))
				.map(|(key, level)| (order_priority(key), level)),
		}
	}
}

/// A priority as an unsigned key in the same order.
fn order_key(priority: i32) -> u32 {
	(priority as u32) ^ 0x8000_0000
}

fn order_priority(key: u32) -> i32 {
	(key ^ 0x8000_0000) as i32
}

/// A 64-ary radix tree over 32-bit keys, from key to value (a level's front group): a root for
/// the top two bits, then five tiers of six bits, the last of them the leaves, whose children
/// are the values.
/// Each node has a bitmap of the children it has, so a child is read only where its bit is
/// set, a freed node needs no clearing, and the highest child below a place is one
/// `leading_zeros`. Nodes with no children are freed, so the tree holds only the paths to its
/// keys.
///
/// The leaf last reached is kept with its prefix. The session's priorities are mostly
/// consecutive (a new group ranks next to the last), so most operations find their key's leaf
/// there and touch one node. Otherwise an operation walks the six tiers from the root, which is
/// still independent of the number of keys.
#[derive(Debug)]
struct Radix {
	/// `nodes[0]` is the root, once there is one.
	nodes: Vec<Node>,
	/// Freed nodes, linked through their first child.
	free: u32,
	/// The leaf last reached, `NIL` if none (or freed since), and its keys' `key >> 6`. A
	/// cell, so that lookups, which fill it, need no `&mut`.
	leaf: Cell<(u32, u32)>,
	/// Keys recently reached by a walk (a lookup or a `set`) and their leaves, direct-mapped by
	/// a hash of the key; an entry goes when its key does (so a leaf is never freed under one).
	/// Levels of several subscriber priorities on one connection differ in their high bits, so
	/// their lookups take turns missing the leaf and walking six tiers: at 8 such levels a
	/// reprioritize cost 214 instructions without these entries and 157 with (when they held
	/// levels; now 152, and 196 for a ring's front, which re-points the map too).
	recent: [Cell<(u32, u32)>; RECENT],
}

/// Entries of [`Radix::recent`].
const RECENT: usize = 8;

fn recent_slot(key: u32) -> usize {
	(key.wrapping_mul(0x9e37_79b9) >> (32 - RECENT.trailing_zeros())) as usize
}

#[derive(Clone, Debug)]
struct Node {
	bits: u64,
	/// Node slots below (the values, in a leaf); meaningful only where `bits` is set.
	child: [u32; 64],
}

/// Tiers below the root; tier 0 holds the leaves.
const RADIX_TIERS: u32 = 5;

/// The child index of `key` in a node of `tier` (`RADIX_TIERS` is the root).
fn radix_index(key: u32, tier: u32) -> usize {
	((key as u64 >> (6 * tier)) & 63) as usize
}

fn highest(word: u64) -> usize {
	63 - word.leading_zeros() as usize
}

impl Radix {
	/// An empty tree; it allocates on the first insert.
	fn new() -> Self {
		Self {
			nodes: Vec::new(),
			free: NIL,
			leaf: Cell::new((NIL, 0)),
			recent: [const { Cell::new((0, NIL)) }; RECENT],
		}
	}

	/// The cached leaf, if it is the one of `key`'s place.
	#[inline(always)]
	fn cached_leaf(&self, key: u32) -> Option<u32> {
		let (leaf, prefix) = self.leaf.get();
		(leaf != NIL && prefix == key >> 6).then_some(leaf)
	}

	/// The leaf holding `key`'s place, `NIL` if there is none, by a walk from the root; it
	/// becomes the cached leaf.
	#[inline(never)]
	fn walk(&self, key: u32) -> u32 {
		if self.nodes.is_empty() {
			return NIL;
		}
		let mut node = 0;
		for tier in (1..=RADIX_TIERS).rev() {
			let n = &self.nodes[node as usize];
			let i = radix_index(key, tier);
			if n.bits & (1 << i) == 0 {
				return NIL;
			}
			node = n.child[i];
		}
		self.leaf.set((node, key >> 6));
		node
	}

	/// The value of `key`, `NIL` if absent: from the cached leaf, else from `recent`, else by a
	/// walk.
	#[inline(always)]
	fn get(&self, key: u32) -> u32 {
		match self.cached_leaf(key) {
			Some(leaf) => self.value_in(leaf, key),
			None => self.get_uncached(key),
		}
	}

	/// `get` when the cached leaf is not `key`'s.
	fn get_uncached(&self, key: u32) -> u32 {
		match self.leaf_uncached(key) {
			NIL => NIL,
			leaf => self.value_in(leaf, key),
		}
	}

	/// The value of `key` in its `leaf`, `NIL` if absent.
	#[inline(always)]
	fn value_in(&self, leaf: u32, key: u32) -> u32 {
		let n = &self.nodes[leaf as usize];
		let i = radix_index(key, 0);
		if n.bits & (1 << i) == 0 {
			return NIL;
		}
		n.child[i]
	}

	/// The leaf holding `key`'s place, `NIL` if there is none, from `recent` or by a walk; a
	/// walk's leaf goes into `recent` if `key` is present (an entry names a present key).
	#[inline(never)]
	fn leaf_uncached(&self, key: u32) -> u32 {
		let recent = &self.recent[recent_slot(key)];
		let (k, leaf) = recent.get();
		if leaf != NIL && k == key {
			return leaf;
		}
		let leaf = self.walk(key);
		if leaf != NIL && self.value_in(leaf, key) != NIL {
			recent.set((key, leaf));
		}
		leaf
	}

	/// Adds `key`, which must be absent, with `level`.
	#[inline(always)]
	fn insert(&mut self, key: u32, level: u32) {
		let leaf = match self.cached_leaf(key) {
			Some(leaf) => leaf,
			None => self.make_path(key),
		};
		let n = &mut self.nodes[leaf as usize];
		let i = radix_index(key, 0);
		n.bits |= 1 << i;
		n.child[i] = level;
	}

	/// The value of `key` if present; otherwise adds it with `value` and returns `NIL`.
	#[inline(always)]
	fn get_or_insert(&mut self, key: u32, value: u32) -> u32 {
		let leaf = match self.cached_leaf(key) {
			Some(leaf) => leaf,
			None => {
				let found = self.get_uncached(key);
				if found != NIL {
					return found;
				}
				self.make_path(key)
			}
		};
		let n = &mut self.nodes[leaf as usize];
		let i = radix_index(key, 0);
		if n.bits & (1 << i) != 0 {
			return n.child[i];
		}
		n.bits |= 1 << i;
		n.child[i] = value;
		NIL
	}

	/// Replaces the value of `key`, which must be present.
	#[inline(always)]
	fn set(&mut self, key: u32, value: u32) {
		let leaf = match self.cached_leaf(key) {
			Some(leaf) => leaf,
			None => self.leaf_uncached(key),
		};
		self.nodes[leaf as usize].child[radix_index(key, 0)] = value;
	}

	/// Creates the nodes missing on `key`'s path and returns its leaf, which it caches.
	#[inline(never)]
	fn make_path(&mut self, key: u32) -> u32 {
		if self.nodes.is_empty() {
			self.nodes.push(Node {
				bits: 0,
				child: [NIL; 64],
			});
		}
		let mut node = 0;
		for tier in (1..=RADIX_TIERS).rev() {
			let i = radix_index(key, tier);
			let n = &self.nodes[node as usize];
			node = if n.bits & (1 << i) != 0 {
				n.child[i]
			} else {
				let new = self.alloc();
				let n = &mut self.nodes[node as usize];
				n.bits |= 1 << i;
				n.child[i] = new;
				new
			};
		}
		self.leaf.set((node, key >> 6));
		node
	}

	/// A node with no children.
	fn alloc(&mut self) -> u32 {
		if self.free != NIL {
			let node = self.free;
			self.free = self.nodes[node as usize].child[0];
			return node;
		}
		let node = slot_u32(self.nodes.len());
		self.nodes.push(Node {
			bits: 0,
			child: [NIL; 64],
		});
		node
	}

	/// Removes `key`, which must be present; true if the tree is left empty.
	#[inline(always)]
	fn remove(&mut self, key: u32) -> bool {
		let recent = &self.recent[recent_slot(key)];
		if recent.get().0 == key {
			recent.set((0, NIL));
		}
		let leaf = match self.cached_leaf(key) {
			Some(leaf) => leaf,
			None => self.walk(key),
		};
		let n = &mut self.nodes[leaf as usize];
		n.bits &= !(1 << radix_index(key, 0));
		n.bits == 0 && self.prune(key)
	}

	/// Frees `key`'s leaf, which has just emptied, and every node above it that this empties
	/// (the root stays); true if that leaves the tree empty.
	#[inline(never)]
	fn prune(&mut self, key: u32) -> bool {
		let mut path = [0u32; RADIX_TIERS as usize + 1];
		for tier in (1..=RADIX_TIERS).rev() {
			let node = path[tier as usize];
			path[tier as usize - 1] = self.nodes[node as usize].child[radix_index(key, tier)];
		}
		self.leaf.set((NIL, 0));
		for tier in 0..RADIX_TIERS {
			let node = path[tier as usize];
			self.nodes[node as usize].child[0] = self.free;
			self.free = node;
			let parent = &mut self.nodes[path[tier as usize + 1] as usize];
			parent.bits &= !(1 << radix_index(key, tier + 1));
			if parent.bits != 0 {
				return false;
			}
		}
		true
	}

	/// Keys present: the children of every leaf reachable from the root.
	#[cfg(test)]
	fn len(&self) -> usize {
		fn under(tree: &Radix, node: u32, tier: u32) -> usize {
			let n = &tree.nodes[node as usize];
			if tier == 0 {
				return n.bits.count_ones() as usize;
			}
			let (mut bits, mut keys) = (n.bits, 0);
			while bits != 0 {
				keys += under(tree, n.child[bits.trailing_zeros() as usize], tier - 1);
				bits &= bits - 1;
			}
			keys
		}
		match self.nodes.is_empty() {
			true => 0,
			false => under(self, 0, RADIX_TIERS),
		}
	}

	/// The highest key and its value.
	#[cfg(test)]
	fn max(&self) -> Option<(u32, u32)> {
		let root = self.nodes.first()?;
		if root.bits == 0 {
			return None;
		}
		Some(self.descend(0, highest(root.bits), RADIX_TIERS, 0))
	}

	/// The highest key below `key` (present or not) and its value.
	#[inline(always)]
	fn below(&self, key: u32) -> Option<(u32, u32)> {
		let (leaf, prefix) = self.leaf.get();
		if leaf != NIL && prefix == key >> 6 {
			let n = &self.nodes[leaf as usize];
			let lower = n.bits & ((1 << (key & 63)) - 1);
			if lower != 0 {
				let i = highest(lower);
				return Some(((key & !63) | i as u32, n.child[i]));
			}
		}
		self.below_walk(key)
	}

	/// `below` when the answer is not in the cached leaf.
	#[inline(never)]
	fn below_walk(&self, key: u32) -> Option<(u32, u32)> {
		// Walk down `key`'s path as far as it goes, noting the deepest node with a child below
		// the path's: the answer is the highest key under that child.
		let mut node = 0;
		let mut best = None;
		if self.nodes.is_empty() {
			return None;
		}
		for tier in (0..=RADIX_TIERS).rev() {
			let n = &self.nodes[node as usize];
			let i = radix_index(key, tier);
			let lower = n.bits & ((1 << i) - 1);
			if lower != 0 {
				best = Some((node, highest(lower), tier));
			}
			if n.bits & (1 << i) == 0 || tier == 0 {
				break;
			}
			node = n.child[i];
		}
		let (node, i, tier) = best?;
		// The key's bits above `tier`'s, then the child's index.
		let above = if tier == RADIX_TIERS {
			0
		} else {
			(key as u64 >> (6 * tier + 6)) << (6 * tier + 6)
		};
		Some(self.descend(node, i, tier, above as u32))
	}

	/// Follows the highest children from child `i` of `node` (of `tier`), whose key bits above
	/// the tier are `above`, down to a key and its value.
	fn descend(&self, mut node: u32, mut i: usize, tier: u32, above: u32) -> (u32, u32) {
		let mut key = above as u64 | ((i as u64) << (6 * tier));
		for t in (0..tier).rev() {
			node = self.nodes[node as usize].child[i];
			i = highest(self.nodes[node as usize].bits);
			key |= (i as u64) << (6 * t);
		}
		(key as u32, self.nodes[node as usize].child[i])
	}
}

/// The send scheduler of one connection: strict priority levels, deficit round robin of send
/// groups within a level, streams within a group (see the module docs).
#[derive(Debug)]
pub struct Scheduler {
	quantum: usize,
	groups: Slots<Group>,
	streams: Slots<Stream>,
	/// The levels by priority, in order, each with the front group of its ring.
	by_priority: LevelMap,
	/// The front group of the highest level, the one `pick` serves (the map holds it too); or
	/// `NIL` when that level is not known yet, and every level is below `top_priority`.
	///
	/// Dropping the highest level leaves it unknown rather than looking for the next one down:
	/// in the session's pattern a newer group usually arrives above before the next `pick`
	/// (leaving it unknown took the benchmark's retire and insert at the front from 309
	/// instructions to 279; callgrind). `pick` looks it up when it needs it.
	top: u32,
	/// The priority of the highest level while `top != NIL`; otherwise a bound above every
	/// level.
	top_priority: i32,
	/// Streams in a ready list, anywhere.
	ready: usize,
}

impl Scheduler {
	/// A scheduler whose groups may write `quantum` bytes per round-robin turn.
	///
	/// # Panics
	///
	/// If `quantum` is zero.
	pub fn new(quantum: usize) -> Self {
		Self::with_capacity(quantum, 0, 0)
	}

	/// Like [`Scheduler::new`], with room for `groups` groups and `streams` streams before the
	/// slot vectors grow.
	pub fn with_capacity(quantum: usize, groups: usize, streams: usize) -> Self {
		assert!(quantum > 0, "a zero quantum would never let a group send");
		Self {
			quantum,
			groups: Slots::with_capacity(groups),
			streams: Slots::with_capacity(streams),
			by_priority: LevelMap::new(),
			top: NIL,
			top_priority: i32::MIN,
			ready: 0,
		}
	}

	/// The bytes a group may write per turn.
	pub fn quantum(&self) -> usize {
		self.quantum
	}

	/// A new group with no ready stream (so in no ring yet).
	#[inline]
	pub fn insert_group(&mut self, priority: i32) -> GroupId {
		GroupId(self.groups.insert(Group {
			priority,
			prev: NIL,
			next: NIL,
			deficit: 0,
			first: NIL,
			members: 0,
			front: false,
		}))
	}

	/// Moves `group` to `priority`. If it is in a ring, it leaves it and, if it has a stream
	/// ready, joins the new level's tail: a reprioritized group waits for a full round there.
	/// A turn in progress ends. The same priority is a no-op. O(1), a created or dropped level
	/// included (a walk of the level map's six tiers at worst).
	pub fn set_priority(&mut self, group: GroupId, priority: i32) {
		let g = self.group_mut(group.0);
		let old = g.priority;
		if old == priority {
			return;
		}
		if g.next == NIL {
			g.priority = priority;
			return;
		}
		g.deficit = 0;
		let has_ready = g.first != NIL;
		// Alone in its ring and bound for a priority no level has (the session's pattern): the
		// level changes key instead of being dropped and created again.
		let alone = g.next == group.0;
		if has_ready && alone && self.by_priority.get(priority) == NIL {
			self.groups[group.0].priority = priority;
			self.rekey(group.0, old, priority);
			return;
		}
		self.unlink(group.0);
		self.groups[group.0].priority = priority;
		if has_ready {
			self.link_tail(group.0, priority);
		}
	}

	/// The priority of `group`.
	pub fn priority(&self, group: GroupId) -> i32 {
		self.group(group.0).priority
	}

	/// Frees `group`, taking it out of its ring wherever it stands (O(1), dropping its level
	/// included).
	///
	/// # Panics
	///
	/// If the group still has streams: remove them first ([`Scheduler::remove_stream`]), so no
	/// `StreamSlot` held by the caller is left pointing at a freed group.
	#[inline(always)]
	pub fn retire_group(&mut self, group: GroupId) {
		// The record is freed first, from the fields at hand, and the ring mended after: one
		// bounds check fewer than freeing the slot at the end.
		let Slots { items, free } = &mut self.groups;
		let g = &mut items[group.0 as usize];
		debug_assert!(g.members != FREE, "group {} used after retire_group", group.0);
		assert!(
			g.members == 0,
			"retire_group: the group still has {} streams",
			g.members
		);
		let (priority, prev, next, front) = (g.priority, g.prev, g.next, g.front);
		g.vacate(*free);
		*free = group.0;
		if next != NIL {
			self.leave_ring(group.0, priority, prev, next, front);
		}
	}

	/// A new stream in `group`, known to the caller as `key`; not ready until [`Scheduler::ready`].
	#[inline]
	pub fn insert_stream(&mut self, group: GroupId, key: u64) -> StreamSlot {
		self.group_mut(group.0).members += 1;
		StreamSlot(self.streams.insert(Stream {
			key,
			group: group.0,
			prev: NIL,
			next: NIL,
		}))
	}

	/// Moves `stream` to `group`. A ready stream leaves its old group's list and joins the back
	/// of the new group's (which joins its ring's tail if it is in no ring).
	pub fn move_stream(&mut self, stream: StreamSlot, group: GroupId) {
		let s = self.stream(stream.0);
		let old = s.group;
		if old == group.0 {
			return;
		}
		let queued = s.next != NIL;
		if queued && self.dequeue(stream.0) {
			self.settle_dry(old);
		}
		self.group_mut(group.0).members += 1;
		self.groups[old].members -= 1;
		self.streams[stream.0].group = group.0;
		if queued {
			self.enqueue(stream.0, group.0);
		}
	}

	/// Frees `stream`, ready or not (O(1)).
	#[inline(always)]
	pub fn remove_stream(&mut self, stream: StreamSlot) {
		let Slots { items: streams, free } = &mut self.streams;
		let s = &mut streams[stream.0 as usize];
		debug_assert!(s.group != FREE, "stream {} used after remove_stream", stream.0);
		let (group, prev, next) = (s.group, s.prev, s.next);
		// The group first: a stream removed twice (a free record's group is `FREE`) panics
		// here, before the free list is touched.
		let g = &mut self.groups.items[group as usize];
		s.vacate(*free);
		*free = stream.0;
		g.members -= 1;
		if next != NIL {
			// `dequeue` and `settle_dry`, with the slices at hand: calling them instead costs 33
			// instructions more per retire and insert (callgrind, scheduler benchmark).
			self.ready -= 1;
			if next == stream.0 {
				g.first = NIL;
				if g.deficit > 0 {
					g.deficit = 0;
					self.unlink(group);
				}
			} else {
				streams[prev as usize].next = next;
				streams[next as usize].prev = prev;
				if g.first == stream.0 {
					g.first = next;
				}
			}
		}
	}

	/// `stream` has data: it joins the back of its group's ready list unless it is in it, and the
	/// group joins its level's tail unless it is in the ring (a dry group still in the ring keeps
	/// its place).
	#[inline(always)]
	pub fn ready(&mut self, stream: StreamSlot) {
		let s = &self.streams.items[stream.0 as usize];
		debug_assert!(s.group != FREE, "stream {} used after remove_stream", stream.0);
		if s.next == NIL {
			let group = s.group;
			self.enqueue(stream.0, group);
		}
	}

	/// What to write next: the front stream of the front group of the highest level with a ready
	/// group. A group starting its turn gets `quantum` bytes of deficit here; `allowance` is what
	/// is left of it. Dry groups met at a ring's front are unlinked on the way. Picking twice
	/// without [`Scheduler::sent`] returns the same pick.
	pub fn pick(&mut self) -> Option<Pick> {
		loop {
			if self.top == NIL && !self.find_top() {
				return None;
			}
			let group = self.top;
			let g = &mut self.groups[group];
			if g.first == NIL {
				self.unlink(group);
				continue;
			}
			if g.deficit == 0 {
				g.deficit = self.quantum;
			}
			let stream = g.first;
			return Some(Pick {
				stream: StreamSlot(stream),
				key: self.streams[stream].key,
				group: GroupId(group),
				allowance: g.deficit,
			});
		}
	}

	/// Finds the highest level when it is not known; false if there is no level.
	#[inline(never)]
	fn find_top(&mut self) -> bool {
		match self.by_priority.below(self.top_priority) {
			Some((priority, head)) => {
				self.top = head;
				self.top_priority = priority;
				true
			}
			None => false,
		}
	}

	/// Accounts a write of `bytes` (at most `pick.allowance`) for `pick`, which must be the last
	/// pick (see the module docs). `Drained` and `Blocked` take the stream off its group's list.
	/// When the turn's deficit is used up, the group rotates to its ring's tail and, if the
	/// stream is still `Ready`, the stream to the back of its group's list. A group left with no
	/// ready stream ends its turn and leaves its ring.
	pub fn sent(&mut self, pick: Pick, bytes: usize, after: After) {
		let group = pick.group.0;
		let stream = pick.stream.0;
		debug_assert!(
			bytes <= pick.allowance,
			"sent {bytes} bytes of an allowance of {}",
			pick.allowance
		);
		debug_assert!(self.group(group).first == stream, "sent() must report the latest pick");
		let g = &mut self.groups[group];
		g.deficit = g.deficit.saturating_sub(bytes);
		let used_up = g.deficit == 0;
		match after {
			After::Ready => {
				if used_up {
					g.first = self.streams[stream].next;
					self.rotate(group);
				}
			}
			After::Drained | After::Blocked => {
				if self.dequeue(stream) {
					self.groups[group].deficit = 0;
					self.unlink(group);
				} else if used_up {
					self.rotate(group);
				}
			}
		}
	}

	/// Whether no stream is ready anywhere.
	pub fn is_empty(&self) -> bool {
		self.ready == 0
	}

	/// Live groups.
	pub fn groups(&self) -> usize {
		self.groups.len()
	}

	/// Live streams.
	pub fn streams(&self) -> usize {
		self.streams.len()
	}

	/// The group of `stream`.
	pub fn group_of(&self, stream: StreamSlot) -> GroupId {
		GroupId(self.stream(stream.0).group)
	}

	/// Whether `stream` is in its group's ready list.
	pub fn is_ready(&self, stream: StreamSlot) -> bool {
		self.stream(stream.0).next != NIL
	}

	/// A caller's group handle, checked (in debug builds) to be live.
	fn group(&self, group: u32) -> &Group {
		let g = &self.groups[group];
		debug_assert!(g.members != FREE, "group {group} used after retire_group");
		g
	}

	fn group_mut(&mut self, group: u32) -> &mut Group {
		let g = &mut self.groups[group];
		debug_assert!(g.members != FREE, "group {group} used after retire_group");
		g
	}

	/// A caller's stream handle, checked (in debug builds) to be live.
	fn stream(&self, stream: u32) -> &Stream {
		let s = &self.streams[stream];
		debug_assert!(s.group != FREE, "stream {stream} used after remove_stream");
		s
	}

	/// Appends `stream` to `group`'s ready list, linking the group into its ring if it is in none.
	///
	/// Here and in the other hot paths the slot vectors are borrowed as slices first: indexing
	/// `self.streams` after a store through another slot made the compiler reload the vector's
	/// pointer and length (the store might have changed them), a load and a bounds check more
	/// per access.
	#[inline(always)]
	fn enqueue(&mut self, stream: u32, group: u32) {
		self.ready += 1;
		let streams = &mut self.streams.items[..];
		let g = &mut self.groups.items[group as usize];
		let first = g.first;
		if first == NIL {
			g.first = stream;
			let s = &mut streams[stream as usize];
			s.prev = stream;
			s.next = stream;
			if g.next == NIL {
				let priority = g.priority;
				self.link_tail(group, priority);
			}
			return;
		}
		let last = streams[first as usize].prev;
		streams[last as usize].next = stream;
		streams[first as usize].prev = stream;
		let s = &mut streams[stream as usize];
		s.prev = last;
		s.next = first;
	}

	/// Takes a ready `stream` off its group's list; true if the group has no ready stream left.
	/// The caller decides what that means for the group's ring place.
	#[inline]
	fn dequeue(&mut self, stream: u32) -> bool {
		self.ready -= 1;
		let streams = &mut self.streams.items[..];
		let s = &mut streams[stream as usize];
		let (group, prev, next) = (s.group, s.prev, s.next);
		s.prev = NIL;
		s.next = NIL;
		let g = &mut self.groups.items[group as usize];
		if next == stream {
			g.first = NIL;
			return true;
		}
		streams[prev as usize].next = next;
		streams[next as usize].prev = prev;
		if g.first == stream {
			g.first = next;
		}
		false
	}

	/// `group` lost its last ready stream outside [`Scheduler::sent`]. Out of its turn it keeps
	/// its ring place (lazy removal); in its turn (only the front group has a deficit) the turn
	/// ends and it leaves, as it would have in `sent`.
	#[inline]
	fn settle_dry(&mut self, group: u32) {
		let g = &mut self.groups[group];
		if g.deficit > 0 {
			g.deficit = 0;
			self.unlink(group);
		}
	}

	/// Ends the turn of `group`, the front of its ring: the next group becomes the front, which
	/// puts this one at the tail.
	fn rotate(&mut self, group: u32) {
		let groups = &mut self.groups.items[..];
		let g = &mut groups[group as usize];
		let (priority, next) = (g.priority, g.next);
		debug_assert!(g.front, "only the front group rotates");
		if next != group {
			g.front = false;
			groups[next as usize].front = true;
			self.set_head(priority, next);
		}
	}

	/// Makes `group` the front of the ring at `priority`, which must exist.
	#[inline(always)]
	fn set_head(&mut self, priority: i32, group: u32) {
		self.by_priority.set(priority, group);
		if priority == self.top_priority {
			self.top = group;
		}
	}

	/// Takes a linked `group` out of its ring, dropping the level if the ring empties.
	#[inline(always)]
	fn unlink(&mut self, group: u32) {
		let groups = &mut self.groups.items[..];
		let g = &mut groups[group as usize];
		let (priority, prev, next, front) = (g.priority, g.prev, g.next, g.front);
		g.next = NIL;
		g.front = false;
		self.leave_ring(group, priority, prev, next, front);
	}

	/// Mends the ring that `group` (with the fields given) has left, dropping the level if the
	/// ring is empty; `group`'s own record is not touched.
	#[inline(always)]
	fn leave_ring(&mut self, group: u32, priority: i32, prev: u32, next: u32, front: bool) {
		if next == group {
			return self.drop_level(priority);
		}
		let groups = &mut self.groups.items[..];
		groups[prev as usize].next = next;
		let n = &mut groups[next as usize];
		n.prev = prev;
		if front {
			n.front = true;
			self.set_head(priority, next);
		}
	}

	/// Links `group` (in no ring) at the tail of the ring of its `priority`, creating the level
	/// if there is none.
	#[inline(always)]
	fn link_tail(&mut self, group: u32, priority: i32) {
		let head = self.by_priority.get_or_insert(priority, group);
		if head == NIL {
			return self.create_level(group, priority);
		}
		let groups = &mut self.groups.items[..];
		let tail = groups[head as usize].prev;
		groups[tail as usize].next = group;
		groups[head as usize].prev = group;
		let g = &mut groups[group as usize];
		g.prev = tail;
		g.next = head;
	}

	/// A level at `priority`, just added to the map, whose ring is just `group`.
	#[inline(always)]
	fn create_level(&mut self, group: u32, priority: i32) {
		if self.top_priority < priority || (self.top == NIL && self.top_priority == priority) {
			self.top = group;
			self.top_priority = priority;
		}
		let g = &mut self.groups.items[group as usize];
		g.prev = group;
		g.next = group;
		g.front = true;
	}

	/// Drops the level at `priority`, whose ring has emptied.
	#[inline(always)]
	fn drop_level(&mut self, priority: i32) {
		self.by_priority.remove(priority);
		if self.top_priority == priority {
			// It was the highest: every level left is below it.
			self.top = NIL;
		}
	}

	/// Moves the level at `old`, whose ring is just `group`, to `priority`, which no level has.
	#[inline]
	fn rekey(&mut self, group: u32, old: i32, priority: i32) {
		self.by_priority.remove(old);
		self.by_priority.insert(priority, group);
		if self.top_priority == old {
			// It was the highest (an unknown highest has no level at the bound): moving up it
			// still is; moving down, every level is below its old priority.
			if priority > old {
				self.top_priority = priority;
			} else {
				self.top = NIL;
			}
		} else if self.top_priority < priority || (self.top == NIL && self.top_priority == priority) {
			self.top = group;
			self.top_priority = priority;
		}
	}
}

/// A slot index as a link. Slots stay far below `u32::MAX` (that many groups would take over
/// 100 GB), and `NIL` and `FREE` must never be real slots.
fn slot_u32(slot: usize) -> u32 {
	match u32::try_from(slot) {
		Ok(slot) if slot < FREE => slot,
		_ => panic!("scheduler slot {slot} does not fit a u32 link"),
	}
}

#[cfg(test)]
mod tests {
	use std::collections::HashMap;

	use super::*;

	impl Scheduler {
		/// Walks every ring, ready list, free list and level map entry and checks each link,
		/// count, mark and cached value.
		fn check(&self) {
			// The checks below look levels up, which fills the map's caches: they are put back
			// at the end, so that the next operation meets the caches it would have met.
			let radix = &self.by_priority.radix;
			let caches = (radix.leaf.get(), radix.recent.clone());
			self.check_caches();
			let live = |n: usize, free: &dyn Fn(u32) -> bool| (0..n as u32).filter(|&x| !free(x)).collect::<Vec<u32>>();
			let groups = live(self.groups.items.len(), &|g| self.groups[g].members == FREE);
			let streams = live(self.streams.items.len(), &|s| self.streams[s].group == FREE);
			assert_eq!(
				(groups.len(), streams.len()),
				(
					self.groups.items.len() - free_list(&self.groups, |g| g.members == FREE),
					self.streams.items.len() - free_list(&self.streams, |s| s.group == FREE),
				),
				"free lists and free marks disagree"
			);
			assert_eq!((groups.len(), streams.len()), (self.groups(), self.streams()));
			// The map walks its levels down from the top, each with the front of its ring.
			let mut levels = Vec::new();
			let mut next = self.by_priority.max();
			while let Some((priority, head)) = next {
				assert!(levels.len() < groups.len(), "the map holds more levels than groups");
				assert_eq!(self.by_priority.get(priority), head, "get and the walk disagree");
				levels.push((priority, head));
				next = self.by_priority.below(priority);
			}
			assert_eq!(self.by_priority.len(), levels.len());
			match (self.top, levels.first()) {
				(NIL, None) => {}
				(NIL, Some(&(priority, _))) => {
					assert!(priority < self.top_priority, "an unknown top below a level")
				}
				(top, Some(&(priority, head))) => {
					assert_eq!(
						(top, self.top_priority),
						(head, priority),
						"top is not the highest level"
					)
				}
				(top, None) => panic!("top {top} with no level"),
			}
			let mut linked = 0;
			for &(priority, head) in &levels {
				let mut at = head;
				loop {
					let g = &self.groups[at];
					assert!(g.members != FREE, "a free group in a ring");
					assert_eq!(g.priority, priority, "group {at} in the wrong level");
					assert_eq!(g.front, at == head, "group {at}'s front mark");
					assert_eq!(self.groups[g.next].prev, at, "broken ring link after {at}");
					linked += 1;
					assert!(linked <= groups.len(), "a ring that does not close");
					at = g.next;
					if at == head {
						break;
					}
				}
			}
			assert_eq!(linked, groups.iter().filter(|&&g| self.groups[g].next != NIL).count());
			assert!(
				groups
					.iter()
					.all(|&g| self.groups[g].next != NIL || !self.groups[g].front)
			);
			let mut ready = 0;
			for &slot in &groups {
				let g = &self.groups[slot];
				if g.deficit > 0 {
					assert!(g.front, "a deficit off the front");
				}
				if g.first != NIL {
					assert!(g.next != NIL, "group {slot} has ready streams but no ring");
					let mut at = g.first;
					loop {
						let s = &self.streams[at];
						assert_eq!(s.group, slot);
						assert_eq!(self.streams[s.next].prev, at);
						ready += 1;
						assert!(ready <= streams.len(), "a ready list that does not close");
						at = s.next;
						if at == g.first {
							break;
						}
					}
				}
				let members = streams.iter().filter(|&&s| self.streams[s].group == slot).count();
				assert_eq!(g.members as usize, members, "group {slot} member count");
			}
			assert_eq!(ready, self.ready);
			assert_eq!(ready, streams.iter().filter(|&&s| self.streams[s].next != NIL).count());
			radix.leaf.set(caches.0);
			for (cell, saved) in radix.recent.iter().zip(caches.1) {
				cell.set(saved.get());
			}
		}

		/// The level map's shape and caches, read without filling them: the array is in use
		/// exactly while the tree is empty, the cached leaf is the leaf of its prefix, and each
		/// `recent` entry names a present key and its leaf.
		fn check_caches(&self) {
			let map = &self.by_priority;
			let radix = &map.radix;
			let root_bits = radix.nodes.first().map_or(0, |root| root.bits);
			match map.spilled {
				true => assert!(map.small_len == 0 && root_bits != 0, "a spilled map with an empty tree"),
				false => assert_eq!(root_bits, 0, "keys in the tree while the array is in use"),
			}
			let path_leaf = |key: u32| {
				let mut node = 0;
				for tier in (1..=RADIX_TIERS).rev() {
					let n = &radix.nodes[node as usize];
					if n.bits & (1 << radix_index(key, tier)) == 0 {
						return NIL;
					}
					node = n.child[radix_index(key, tier)];
				}
				node
			};
			let (leaf, prefix) = radix.leaf.get();
			if leaf != NIL {
				assert_eq!(path_leaf(prefix << 6), leaf, "the cached leaf is not its prefix's");
			}
			for entry in &radix.recent {
				let (key, leaf) = entry.get();
				if leaf != NIL {
					assert_eq!(path_leaf(key), leaf, "a recent entry with another leaf");
					assert!(
						radix.nodes[leaf as usize].bits & (1 << radix_index(key, 0)) != 0,
						"a recent entry for an absent key"
					);
				}
			}
		}
	}

	/// The length of a slot vector's free list, checking that it holds only free records and
	/// no slot twice.
	fn free_list<T: Record>(slots: &Slots<T>, is_free: impl Fn(&T) -> bool) -> usize {
		let mut seen = vec![false; slots.items.len()];
		let (mut at, mut len) = (slots.free, 0);
		while at != NIL {
			assert!(!seen[at as usize], "the free list comes back to {at}");
			seen[at as usize] = true;
			assert!(
				is_free(&slots.items[at as usize]),
				"slot {at} is on the free list and in use"
			);
			len += 1;
			at = slots.items[at as usize].next_free();
		}
		len
	}

	/// `n` picks, each writing its whole allowance and staying ready: the order of the rings.
	fn turns(s: &mut Scheduler, n: usize) -> Vec<GroupId> {
		(0..n)
			.map(|_| {
				let pick = s.pick().expect("a ready group");
				s.sent(pick, pick.allowance, After::Ready);
				s.check();
				pick.group
			})
			.collect()
	}

	/// Groups at `priority` with one ready stream each (keys 0, 1, ...).
	fn ready_groups(s: &mut Scheduler, priority: i32, n: usize) -> Vec<(GroupId, StreamSlot)> {
		(0..n)
			.map(|i| {
				let g = s.insert_group(priority);
				let stream = s.insert_stream(g, i as u64);
				s.ready(stream);
				(g, stream)
			})
			.collect()
	}

	#[test]
	fn removal_from_the_front_middle_and_tail_of_a_ring() {
		let mut s = Scheduler::new(100);
		let all = ready_groups(&mut s, 0, 6);
		let g: Vec<GroupId> = all.iter().map(|&(g, _)| g).collect();
		// Retire the middle, then the front, then the tail, checking the ring each time.
		for &at in &[2, 0, 5] {
			s.remove_stream(all[at].1);
			s.retire_group(all[at].0);
			s.check();
		}
		assert_eq!(turns(&mut s, 6), [g[1], g[3], g[4], g[1], g[3], g[4]]);
		// Taking groups out by reprioritizing: the front (g[1] is the front again), the middle, the tail.
		s.set_priority(g[1], -1);
		s.check();
		assert_eq!(turns(&mut s, 2), [g[3], g[4]]);
		s.set_priority(g[4], -1);
		s.check();
		assert_eq!(turns(&mut s, 2), [g[3], g[3]]);
		s.set_priority(g[3], -1);
		s.check();
		assert_eq!(turns(&mut s, 3), [g[1], g[4], g[3]]);
	}

	#[test]
	fn a_reprioritized_group_joins_its_new_levels_tail() {
		let mut s = Scheduler::new(100);
		let low = ready_groups(&mut s, 1, 3);
		let high = ready_groups(&mut s, 2, 2);
		assert_eq!(turns(&mut s, 3), [high[0].0, high[1].0, high[0].0]);
		// high[1] is at the front now; low[0] goes behind high[0].
		s.set_priority(low[0].0, 2);
		s.check();
		assert_eq!(s.priority(low[0].0), 2);
		assert_eq!(turns(&mut s, 4), [high[1].0, high[0].0, low[0].0, high[1].0]);
		// The same priority again changes nothing, not even the place.
		s.set_priority(high[0].0, 2);
		assert_eq!(turns(&mut s, 3), [high[0].0, low[0].0, high[1].0]);
		// Emptying the top level hands over to the level below, where low[0] is now last.
		s.set_priority(high[0].0, 1);
		s.set_priority(high[1].0, 1);
		s.set_priority(low[0].0, 1);
		s.check();
		assert_eq!(s.by_priority.len(), 1);
		assert_eq!(turns(&mut s, 5), [low[1].0, low[2].0, high[0].0, high[1].0, low[0].0]);
	}

	#[test]
	fn reprioritizing_ends_a_turn() {
		let mut s = Scheduler::new(1000);
		let a = ready_groups(&mut s, 0, 2);
		let pick = s.pick().unwrap();
		s.sent(pick, 300, After::Ready);
		assert_eq!(s.pick().unwrap().allowance, 700);
		// Away and back: a[0] is behind a[1] and starts a fresh turn when it is reached.
		s.set_priority(a[0].0, 5);
		s.set_priority(a[0].0, 0);
		s.check();
		let pick = s.pick().unwrap();
		assert_eq!((pick.group, pick.allowance), (a[1].0, 1000));
		s.sent(pick, 1000, After::Ready);
		let pick = s.pick().unwrap();
		assert_eq!((pick.group, pick.allowance), (a[0].0, 1000));
	}

	#[test]
	fn priority_is_strict_across_levels() {
		let mut s = Scheduler::new(500);
		let low = ready_groups(&mut s, -7, 1)[0];
		let mid = ready_groups(&mut s, 0, 1)[0];
		let high = ready_groups(&mut s, i32::MAX, 1)[0];
		assert_eq!(turns(&mut s, 3), [high.0, high.0, high.0]);
		let pick = s.pick().unwrap();
		s.sent(pick, 10, After::Drained);
		assert_eq!(turns(&mut s, 2), [mid.0, mid.0]);
		// The low group starts a turn; a higher level that becomes ready preempts it at the next
		// pick, and the low group's turn resumes afterwards with what was left of it.
		s.remove_stream(mid.1);
		let pick = s.pick().unwrap();
		assert_eq!((pick.group, pick.allowance), (low.0, 500));
		s.sent(pick, 200, After::Ready);
		s.ready(high.1);
		let pick = s.pick().unwrap();
		assert_eq!(pick.group, high.0);
		s.sent(pick, 1, After::Drained);
		let pick = s.pick().unwrap();
		assert_eq!((pick.group, pick.allowance), (low.0, 300));
		s.check();
	}

	#[test]
	fn deficits_rotate_groups_in_quantum_sized_turns() {
		// Three groups of one stream with 2,500, 700 and 1,500 bytes; the driver writes at most
		// 600 bytes per call (a GSO batch), so turns take several picks.
		let mut s = Scheduler::new(1000);
		let groups = ready_groups(&mut s, 3, 3);
		let mut left = [2500, 700, 1500];
		let mut seen = Vec::new();
		while let Some(pick) = s.pick() {
			let at = groups.iter().position(|&(g, _)| g == pick.group).unwrap();
			let bytes = pick.allowance.min(600).min(left[at]);
			left[at] -= bytes;
			let after = if left[at] == 0 { After::Drained } else { After::Ready };
			s.sent(pick, bytes, after);
			s.check();
			seen.push((at, pick.allowance, bytes));
		}
		assert_eq!(
			seen,
			[
				(0, 1000, 600),
				(0, 400, 400),
				(1, 1000, 600),
				(1, 400, 100),
				(2, 1000, 600),
				(2, 400, 400),
				(0, 1000, 600),
				(0, 400, 400),
				(2, 1000, 500),
				(0, 1000, 500),
			]
		);
		assert!(s.is_empty());
		assert_eq!(s.by_priority.len(), 0, "drained groups leave their rings");
	}

	#[test]
	fn streams_of_a_group_take_turns_by_group_turn() {
		let mut s = Scheduler::new(100);
		let g = s.insert_group(0);
		let streams: Vec<StreamSlot> = (0..3).map(|k| s.insert_stream(g, 10 + k)).collect();
		for &stream in &streams {
			s.ready(stream);
		}
		let mut keys = Vec::new();
		for _ in 0..6 {
			// Two writes of 50 per turn: the same stream twice, then the next one.
			let pick = s.pick().unwrap();
			keys.push(pick.key);
			s.sent(pick, 50, After::Ready);
		}
		assert_eq!(keys, [10, 10, 11, 11, 12, 12]);
	}

	#[test]
	fn a_dry_group_away_from_the_front_keeps_its_place_until_reached() {
		let mut s = Scheduler::new(100);
		let all = ready_groups(&mut s, 0, 4);
		let g: Vec<GroupId> = all.iter().map(|&(g, _)| g).collect();
		// g[1] runs dry out of its turn and is refilled before the round robin reaches it: it is
		// served where it stood.
		s.remove_stream(all[1].1);
		s.check();
		let refill = s.insert_stream(g[1], 99);
		s.ready(refill);
		assert_eq!(turns(&mut s, 4), g);
		// g[3] runs dry and stays dry: passing the front unlinks it ...
		s.remove_stream(all[3].1);
		assert_eq!(turns(&mut s, 5), [g[0], g[1], g[2], g[0], g[1]]);
		assert_eq!(s.groups[g[3].0].next, NIL);
		// ... so when it is refilled it queues at the tail, behind g[1].
		let refill = s.insert_stream(g[3], 98);
		s.ready(refill);
		s.check();
		assert_eq!(turns(&mut s, 4), [g[2], g[0], g[1], g[3]]);
	}

	#[test]
	fn a_group_that_runs_dry_in_its_turn_leaves_its_ring() {
		let mut s = Scheduler::new(1000);
		let all = ready_groups(&mut s, 0, 3);
		// Drained in sent(): refilled before the next pick, it still goes to the tail.
		let pick = s.pick().unwrap();
		s.sent(pick, 300, After::Drained);
		s.ready(all[0].1);
		s.check();
		assert_eq!(turns(&mut s, 3), [all[1].0, all[2].0, all[0].0]);
		// Its only stream removed in the middle of a turn: the same.
		let pick = s.pick().unwrap();
		assert_eq!(pick.group, all[1].0);
		s.sent(pick, 300, After::Ready);
		s.remove_stream(all[1].1);
		let refill = s.insert_stream(all[1].0, 7);
		s.ready(refill);
		s.check();
		assert_eq!(turns(&mut s, 3), [all[2].0, all[0].0, all[1].0]);
	}

	#[test]
	fn a_blocked_stream_is_not_picked_until_ready_again() {
		let mut s = Scheduler::new(1000);
		let g = s.insert_group(0);
		let a = s.insert_stream(g, 1);
		let b = s.insert_stream(g, 2);
		s.ready(a);
		s.ready(b);
		let pick = s.pick().unwrap();
		assert_eq!(pick.key, 1);
		s.sent(pick, 100, After::Blocked);
		assert!(!s.is_ready(a));
		// The turn goes on with the other stream and what is left of the deficit.
		let pick = s.pick().unwrap();
		assert_eq!((pick.key, pick.allowance), (2, 900));
		s.sent(pick, 900, After::Ready);
		for _ in 0..4 {
			let pick = s.pick().unwrap();
			assert_eq!(pick.key, 2);
			s.sent(pick, 1000, After::Ready);
		}
		s.ready(a);
		assert_eq!(s.pick().unwrap().key, 2, "a unblocked stream queues at the back");
		let pick = s.pick().unwrap();
		s.sent(pick, 1000, After::Ready);
		assert_eq!(s.pick().unwrap().key, 1);
		// Blocked as the last ready stream: the group leaves its ring and nothing is picked.
		let pick = s.pick().unwrap();
		s.sent(pick, 0, After::Blocked);
		let pick = s.pick().unwrap();
		s.sent(pick, 0, After::Blocked);
		assert!(s.is_empty());
		assert_eq!(s.pick(), None);
		s.check();
	}

	#[test]
	fn a_moved_stream_keeps_its_readiness() {
		let mut s = Scheduler::new(100);
		let a = s.insert_group(1);
		let b = s.insert_group(2);
		let ready = s.insert_stream(a, 1);
		let idle = s.insert_stream(a, 2);
		s.ready(ready);
		s.move_stream(ready, b);
		s.move_stream(idle, b);
		s.check();
		assert_eq!(s.group_of(ready), b);
		assert!(s.is_ready(ready) && !s.is_ready(idle));
		let pick = s.pick().unwrap();
		assert_eq!((pick.group, pick.key), (b, 1));
		s.sent(pick, 10, After::Drained);
		assert_eq!(s.pick(), None);
		// The group it left is dry; passing it dropped its level.
		assert_eq!(s.by_priority.len(), 0);
	}

	#[test]
	fn picking_twice_returns_the_same_pick() {
		let mut s = Scheduler::new(100);
		ready_groups(&mut s, 0, 2);
		let first = s.pick();
		assert_eq!(s.pick(), first);
	}

	#[test]
	fn state_is_freed_after_retire() {
		let mut s = Scheduler::new(100);
		let mut all = ready_groups(&mut s, 0, 50);
		all.extend(ready_groups(&mut s, 1, 50));
		for &(g, _) in &all {
			let extra = s.insert_stream(g, 1000);
			s.ready(extra);
		}
		turns(&mut s, 30);
		for &(g, stream) in &all {
			let extra = s.insert_stream(g, 0);
			s.remove_stream(stream);
			s.remove_stream(extra);
		}
		// Each group has one stream (key 1000) left; remove it via a pick loop for some.
		while let Some(pick) = s.pick() {
			s.remove_stream(pick.stream);
		}
		for &(g, _) in &all {
			s.retire_group(g);
		}
		s.check();
		assert_eq!((s.groups(), s.streams()), (0, 0));
		assert!(s.is_empty() && s.top == NIL && s.by_priority.max().is_none());
		assert_eq!(s.by_priority.len(), 0);
		// Slots are reused: the same population again takes no new ones.
		let slots = (s.groups.items.len(), s.streams.items.len());
		ready_groups(&mut s, 0, 100);
		assert_eq!((s.groups.items.len(), s.streams.items.len()), slots);
	}

	#[test]
	#[should_panic(expected = "still has 1 streams")]
	fn retiring_a_group_with_streams_panics() {
		let mut s = Scheduler::new(100);
		let g = s.insert_group(0);
		s.insert_stream(g, 1);
		s.retire_group(g);
	}

	/// The reference: the same semantics over plain vectors and linear scans.
	struct Model {
		quantum: usize,
		groups: Vec<Option<ModelGroup>>,
		streams: Vec<Option<ModelStream>>,
		/// `(priority, groups front first)` of each level, in no order.
		rings: Vec<(i32, Vec<usize>)>,
	}

	struct ModelGroup {
		priority: i32,
		deficit: usize,
		ready: Vec<usize>,
		in_ring: bool,
		members: usize,
	}

	struct ModelStream {
		group: usize,
		key: u64,
		ready: bool,
	}

	impl Model {
		fn group(&mut self, g: usize) -> &mut ModelGroup {
			self.groups[g].as_mut().unwrap()
		}

		fn stream(&mut self, s: usize) -> &mut ModelStream {
			self.streams[s].as_mut().unwrap()
		}

		fn leave_ring(&mut self, g: usize) {
			self.group(g).in_ring = false;
			let at = self.rings.iter().position(|(_, ring)| ring.contains(&g)).unwrap();
			self.rings[at].1.retain(|&x| x != g);
			if self.rings[at].1.is_empty() {
				self.rings.remove(at);
			}
		}

		fn join_ring(&mut self, g: usize) {
			let priority = self.group(g).priority;
			self.group(g).in_ring = true;
			match self.rings.iter_mut().find(|(p, _)| *p == priority) {
				Some((_, ring)) => ring.push(g),
				None => self.rings.push((priority, vec![g])),
			}
		}

		fn insert_group(&mut self, priority: i32) -> usize {
			self.groups.push(Some(ModelGroup {
				priority,
				deficit: 0,
				ready: Vec::new(),
				in_ring: false,
				members: 0,
			}));
			self.groups.len() - 1
		}

		fn set_priority(&mut self, g: usize, priority: i32) {
			if self.group(g).priority == priority {
				return;
			}
			self.group(g).priority = priority;
			if self.group(g).in_ring {
				self.group(g).deficit = 0;
				self.leave_ring(g);
				if !self.group(g).ready.is_empty() {
					self.join_ring(g);
				}
			}
		}

		fn retire_group(&mut self, g: usize) {
			assert_eq!(self.group(g).members, 0);
			if self.group(g).in_ring {
				self.leave_ring(g);
			}
			self.groups[g] = None;
		}

		fn insert_stream(&mut self, g: usize, key: u64) -> usize {
			self.group(g).members += 1;
			self.streams.push(Some(ModelStream {
				group: g,
				key,
				ready: false,
			}));
			self.streams.len() - 1
		}

		/// Off its group's ready list; then, as `settle_dry`, a group dry in its turn leaves.
		fn unready(&mut self, s: usize) {
			self.stream(s).ready = false;
			let g = self.stream(s).group;
			self.group(g).ready.retain(|&x| x != s);
			if self.group(g).ready.is_empty() && self.group(g).deficit > 0 {
				self.group(g).deficit = 0;
				self.leave_ring(g);
			}
		}

		fn ready(&mut self, s: usize) {
			if self.stream(s).ready {
				return;
			}
			self.stream(s).ready = true;
			let g = self.stream(s).group;
			self.group(g).ready.push(s);
			if !self.group(g).in_ring {
				self.join_ring(g);
			}
		}

		fn move_stream(&mut self, s: usize, g: usize) {
			let old = self.stream(s).group;
			if old == g {
				return;
			}
			let was_ready = self.stream(s).ready;
			if was_ready {
				self.unready(s);
			}
			self.group(old).members -= 1;
			self.group(g).members += 1;
			self.stream(s).group = g;
			if was_ready {
				self.ready(s);
			}
		}

		fn remove_stream(&mut self, s: usize) {
			if self.stream(s).ready {
				self.unready(s);
			}
			let g = self.stream(s).group;
			self.group(g).members -= 1;
			self.streams[s] = None;
		}

		/// `(stream, key, group, allowance)`.
		fn pick(&mut self) -> Option<(usize, u64, usize, usize)> {
			loop {
				let (_, ring) = self.rings.iter().max_by_key(|(p, _)| *p)?;
				let g = ring[0];
				if self.group(g).ready.is_empty() {
					self.leave_ring(g);
					continue;
				}
				let quantum = self.quantum;
				let group = self.group(g);
				if group.deficit == 0 {
					group.deficit = quantum;
				}
				let (s, allowance) = (group.ready[0], group.deficit);
				return Some((s, self.stream(s).key, g, allowance));
			}
		}

		fn sent(&mut self, s: usize, g: usize, bytes: usize, after: After) {
			let ring = &mut self.rings.iter_mut().find(|(_, ring)| ring.contains(&g)).unwrap().1;
			assert_eq!(ring[0], g);
			let group = self.groups[g].as_mut().unwrap();
			assert_eq!(group.ready[0], s);
			group.deficit -= bytes;
			let used_up = group.deficit == 0;
			if after != After::Ready {
				group.ready.remove(0);
				self.stream(s).ready = false;
				if self.group(g).ready.is_empty() {
					self.group(g).deficit = 0;
					self.leave_ring(g);
					return;
				}
			} else if used_up {
				group.ready.rotate_left(1);
			}
			if used_up {
				let ring = &mut self.rings.iter_mut().find(|(_, ring)| ring.contains(&g)).unwrap().1;
				ring.rotate_left(1);
			}
		}
	}

	/// splitmix64: a small deterministic generator, enough to drive the operations.
	struct Rng(u64);

	impl Rng {
		fn next(&mut self) -> u64 {
			self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
			let mut z = self.0;
			z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
			z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
			z ^ (z >> 31)
		}

		fn below(&mut self, n: usize) -> usize {
			(self.next() % n as u64) as usize
		}

		/// With `many`, mostly a level per group (the session's pattern, which works the order);
		/// otherwise mostly a few shared levels (rings of several groups); sometimes anywhere.
		fn priority(&mut self, many: bool) -> i32 {
			match (self.below(16), many) {
				(0 | 1, _) => self.next() as i32,
				// The ends of the range: the lazily found highest level is bounded by
				// `i32::MIN` when there is none, and `i32::MAX` is the key `NIL` in the tree.
				(2, _) => [i32::MIN, i32::MIN + 1, i32::MAX - 1, i32::MAX][self.below(4)],
				(_, true) => self.below(400) as i32 - 200,
				(_, false) => self.below(5) as i32 - 2,
			}
		}
	}

	/// One seeded run: `ops` random operations on the scheduler and the model side by side,
	/// comparing every pick and every count.
	fn differential(seed: u64, ops: usize, many: bool) {
		let mut rng = Rng(seed);
		let quantum = [1, 7, 100, 1200, 5000][rng.below(5)];
		let mut s = Scheduler::new(quantum);
		let mut m = Model {
			quantum,
			groups: Vec::new(),
			streams: Vec::new(),
			rings: Vec::new(),
		};
		// Live handles: (model id, scheduler handle), and the reverse for picks.
		let mut groups: Vec<(usize, GroupId)> = Vec::new();
		let mut streams: Vec<(usize, StreamSlot)> = Vec::new();
		let mut group_of: HashMap<GroupId, usize> = HashMap::new();
		let mut stream_of: HashMap<StreamSlot, usize> = HashMap::new();
		let mut picks = 0;
		for op in 0..ops {
			let context = format!("seed {seed}, op {op}");
			match rng.below(100) {
				0..8 if groups.len() < if many { 64 } else { 40 } => {
					let priority = rng.priority(many);
					let id = s.insert_group(priority);
					let model = m.insert_group(priority);
					groups.push((model, id));
					group_of.insert(id, model);
				}
				8..12 if !groups.is_empty() => {
					// Retiring takes the group's streams first, as the contract asks.
					let (model, id) = groups.swap_remove(rng.below(groups.len()));
					let mine: Vec<(usize, StreamSlot)> = streams
						.iter()
						.copied()
						.filter(|&(_, slot)| s.group_of(slot) == id)
						.collect();
					for (ms, slot) in mine {
						s.remove_stream(slot);
						m.remove_stream(ms);
						streams.retain(|&(x, _)| x != ms);
						stream_of.remove(&slot);
					}
					s.retire_group(id);
					m.retire_group(model);
					group_of.remove(&id);
				}
				12..22 if !groups.is_empty() => {
					let (model, id) = groups[rng.below(groups.len())];
					let priority = rng.priority(many);
					s.set_priority(id, priority);
					m.set_priority(model, priority);
				}
				22..32 if !groups.is_empty() && streams.len() < 80 => {
					let (model, id) = groups[rng.below(groups.len())];
					let key = rng.next();
					let slot = s.insert_stream(id, key);
					let ms = m.insert_stream(model, key);
					streams.push((ms, slot));
					stream_of.insert(slot, ms);
				}
				32..38 if !streams.is_empty() && !groups.is_empty() => {
					let (ms, slot) = streams[rng.below(streams.len())];
					let (model, id) = groups[rng.below(groups.len())];
					s.move_stream(slot, id);
					m.move_stream(ms, model);
				}
				38..44 if !streams.is_empty() => {
					let (ms, slot) = streams.swap_remove(rng.below(streams.len()));
					s.remove_stream(slot);
					m.remove_stream(ms);
					stream_of.remove(&slot);
				}
				44..62 if !streams.is_empty() => {
					let (ms, slot) = streams[rng.below(streams.len())];
					s.ready(slot);
					m.ready(ms);
				}
				62..66 => {
					// A pick not followed by sent: it must not change what comes next.
					let mine = s
						.pick()
						.map(|p| (stream_of[&p.stream], p.key, group_of[&p.group], p.allowance));
					assert_eq!(mine, m.pick(), "{context}: lone pick");
				}
				_ => {
					let pick = s.pick();
					let mine = pick.map(|p| (stream_of[&p.stream], p.key, group_of[&p.group], p.allowance));
					assert_eq!(mine, m.pick(), "{context}: pick");
					if let Some(pick) = pick {
						picks += 1;
						let bytes = match rng.below(4) {
							0 => pick.allowance,
							1 => 0,
							_ => rng.below(pick.allowance + 1),
						};
						let after = [After::Ready, After::Ready, After::Drained, After::Blocked][rng.below(4)];
						s.sent(pick, bytes, after);
						m.sent(stream_of[&pick.stream], group_of[&pick.group], bytes, after);
					}
				}
			}
			s.check();
			assert_eq!(s.groups(), groups.len(), "{context}");
			assert_eq!(s.streams(), streams.len(), "{context}");
			let ready = m.streams.iter().flatten().filter(|x| x.ready).count();
			assert_eq!(s.is_empty(), ready == 0, "{context}");
			for &(ms, slot) in &streams {
				assert_eq!(s.is_ready(slot), m.streams[ms].as_ref().unwrap().ready, "{context}");
			}
			for &(model, id) in &groups {
				assert_eq!(s.priority(id), m.groups[model].as_ref().unwrap().priority, "{context}");
			}
		}
		assert!(picks > ops / 5, "seed {seed}: only {picks} picks");
	}

	#[test]
	fn matches_the_reference_model() {
		for seed in 0..20 {
			differential(0x5eed_0000 + seed, 5_000, false);
		}
	}

	#[test]
	fn matches_the_reference_model_with_a_level_per_group() {
		for seed in 0..20 {
			differential(0x1e7e_0000 + seed, 5_000, true);
		}
	}

	/// The level map against a sorted map: random adds and removes over dense, sparse and
	/// extreme priorities; after each, the value of the key touched, the maximum and the next
	/// one below every probe agree, the keys are in the array only when there are few of them
	/// (and in the tree only while it holds some), and emptied, the tree holds no node but its
	/// root.
	#[test]
	fn the_level_map_agrees_with_a_sorted_map() {
		let mut map = LevelMap::new();
		let mut reference = std::collections::BTreeMap::new();
		let mut rng = 0x2545_f491_4f6c_dd1du64;
		let mut next = || {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			rng
		};
		let extremes = [
			i32::MIN,
			i32::MIN + 1,
			-1,
			0,
			1,
			63,
			64,
			4095,
			4096,
			i32::MAX - 1,
			i32::MAX,
		];
		// Phases that mostly add, then mostly remove, so the map crosses the array's size both
		// ways (into the tree and back) at sizes from none to thousands.
		let mut draining = false;
		let mut phase_left = 0;
		let (mut was_spilled, mut crossings, mut most) = (false, 0, 0);
		for step in 0..60_000u32 {
			if phase_left == 0 {
				draining = !draining;
				phase_left = 20 + next() % 3000;
			}
			phase_left -= 1;
			let r = next();
			let priority = match (draining && !reference.is_empty(), r % 4) {
				(true, _) => *reference.keys().nth((r >> 8) as usize % reference.len()).unwrap(),
				(false, 0) => extremes[(r >> 8) as usize % extremes.len()],
				(false, 1) => (r >> 8) as i32,
				// The session's pattern: a priority byte over a dense rank.
				(false, _) => (((r >> 8) % 3) as i32) << 23 | ((r >> 16) % 300) as i32,
			};
			assert_eq!(map.get(priority), reference.get(&priority).copied().unwrap_or(NIL));
			// Mostly an add of an absent key or a remove of a present one; one in five goes
			// through `get_or_insert` instead, and a present key then gets a new value (`set`).
			match (reference.get(&priority).copied(), next() % 5) {
				(None, 0) => {
					assert_eq!(map.get_or_insert(priority, step), NIL);
					reference.insert(priority, step);
				}
				(None, _) => {
					map.insert(priority, step);
					reference.insert(priority, step);
				}
				(Some(value), 0) => {
					assert_eq!(map.get_or_insert(priority, step), value);
					map.set(priority, step);
					reference.insert(priority, step);
				}
				(Some(_), _) => {
					reference.remove(&priority);
					map.remove(priority);
				}
			}
			assert_eq!(map.get(priority), reference.get(&priority).copied().unwrap_or(NIL));
			assert_eq!(map.len(), reference.len());
			most = most.max(reference.len());
			let last = reference.last_key_value().map(|(&p, &l)| (p, l));
			assert_eq!(map.max(), last, "max after step {step}");
			crossings += usize::from(map.spilled != was_spilled);
			was_spilled = map.spilled;
			if map.spilled {
				assert!(!reference.is_empty(), "an empty tree not given up");
			} else {
				assert!(reference.len() <= SMALL_LEVELS, "{} keys in the array", reference.len());
			}
			let probe = match next() % 3 {
				0 => priority,
				1 => extremes[(next() % extremes.len() as u64) as usize],
				_ => next() as i32,
			};
			let below = reference.range(..probe).next_back().map(|(&p, &l)| (p, l));
			assert_eq!(map.below(probe), below, "below {probe} at step {step}");
		}
		assert!(crossings >= 10, "only {crossings} moves between the array and the tree");
		assert!(most >= 1000, "the map never held more than {most} keys");
		while let Some((priority, _)) = reference.pop_first() {
			map.remove(priority);
		}
		assert_eq!((map.max(), map.spilled, map.radix.len()), (None, false, 0));
		// Every node but the root is on the free list.
		let mut free = 0;
		let mut node = map.radix.free;
		while node != NIL {
			free += 1;
			node = map.radix.nodes[node as usize].child[0];
		}
		assert_eq!(map.radix.nodes[0].bits, 0, "the root kept children");
		assert_eq!(free + 1, map.radix.nodes.len(), "the tree kept nodes");
	}
}
