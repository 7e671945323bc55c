//! [`Budget`] and [`Charge`]: what a holder may take of something countable (bytes, streams,
//! connections), and a guard that gives back what it took when it drops.
//!
//! A budget is a counter with a capacity, shared by handles on any thread. A [`Charge`] is the
//! only way to take from one: it is made by taking, it grows and shrinks with what it accounts
//! for ([`Charge::resize`]: a reassembly buffer, a cached group's frames), and dropping it gives
//! back all it holds. A refund cannot be forgotten: the owner of the memory owns its charge, and
//! the two go together.
//!
//! Budgets form a tree: a [`child`](Budget::child) takes from its own capacity and from every
//! ancestor's, all or nothing, so a per-session share, the per-address share above it and a
//! process-wide ceiling above that are one take. A budget of [`u64::MAX`] refuses nothing and is
//! a gauge of what its children hold.
//!
//! [`Account`] is what a charge takes from. [`Budget`] is the common one; an account whose
//! counts are keyed (per source address, say) implements it too, and its charges are the same
//! guard.

#[cfg(not(loom))]
use std::collections::HashMap;
use std::fmt;
#[cfg(not(loom))]
use std::hash::Hash;

use super::Arc;
#[cfg(not(loom))]
use super::Mutex;
use super::atomic::{AtomicU64, Ordering};

/// Something a [`Charge`] takes from and gives back to.
pub trait Account {
	/// Takes `amount` if there is room for all of it; `false` (and nothing taken) otherwise.
	fn try_take(&self, amount: u64) -> bool;
	/// Gives back `amount` taken before.
	fn give(&self, amount: u64);
}

/// A shared counter with a capacity, and a parent whose capacity it also takes from. Cloning
/// shares it.
#[derive(Clone)]
pub struct Budget {
	node: Arc<Node>,
}

struct Node {
	capacity: AtomicU64,
	used: AtomicU64,
	parent: Option<Budget>,
}

impl Budget {
	/// A budget of `capacity`.
	pub fn new(capacity: u64) -> Self {
		Self::with_parent(capacity, None)
	}

	/// A budget that refuses nothing: a gauge of what is charged to it.
	pub fn unlimited() -> Self {
		Self::new(u64::MAX)
	}

	/// A budget of `capacity` whose charges also take from this one.
	pub fn child(&self, capacity: u64) -> Self {
		Self::with_parent(capacity, Some(self.clone()))
	}

	fn with_parent(capacity: u64, parent: Option<Self>) -> Self {
		Self {
			node: Arc::new(Node {
				capacity: AtomicU64::new(capacity),
				used: AtomicU64::new(0),
				parent,
			}),
		}
	}

	/// The capacity.
	pub fn capacity(&self) -> u64 {
		self.node.capacity.load(Ordering::Relaxed)
	}

	/// Changes the capacity. What is charged stays charged: a budget made smaller than what it
	/// holds refuses every take until enough is given back ([`is_over`](Self::is_over) says so).
	pub fn set_capacity(&self, capacity: u64) {
		self.node.capacity.store(capacity, Ordering::Relaxed);
	}

	/// What is charged now.
	pub fn used(&self) -> u64 {
		self.node.used.load(Ordering::Relaxed)
	}

	/// What a charge could still take here, ancestors aside.
	pub fn room(&self) -> u64 {
		self.capacity().saturating_sub(self.used())
	}

	/// The parent, if any.
	pub fn parent(&self) -> Option<&Self> {
		self.node.parent.as_ref()
	}

	/// Whether more is charged than the capacity, here or in an ancestor (a [`Charge::force`]
	/// can put it there).
	pub fn is_over(&self) -> bool {
		self.used() > self.capacity() || self.parent().is_some_and(Self::is_over)
	}

	/// Whether `amount` more would fit, here and in every ancestor.
	pub fn has_room(&self, amount: u64) -> bool {
		self.used().saturating_add(amount) <= self.capacity() && self.parent().is_none_or(|p| p.has_room(amount))
	}

	/// Whether `amount` could ever fit: no more than the capacity here and in every ancestor.
	pub fn could_fit(&self, amount: u64) -> bool {
		amount <= self.capacity() && self.parent().is_none_or(|p| p.could_fit(amount))
	}

	/// A charge of `amount`, if it fits here and in every ancestor.
	pub fn charge(&self, amount: u64) -> Option<Charge> {
		Charge::take(self.clone(), amount)
	}

	/// An empty charge, to grow later ([`Charge::resize`]).
	pub fn empty(&self) -> Charge {
		Charge::empty(self.clone())
	}

	/// Whether two handles share one budget.
	pub fn ptr_eq(&self, other: &Self) -> bool {
		Arc::ptr_eq(&self.node, &other.node)
	}

	fn add(&self, amount: u64) {
		self.node.used.fetch_add(amount, Ordering::Relaxed);
		if let Some(parent) = self.parent() {
			parent.add(amount);
		}
	}
}

impl Account for Budget {
	fn try_take(&self, amount: u64) -> bool {
		let node = &*self.node;
		let capacity = node.capacity.load(Ordering::Relaxed);
		let taken = node
			.used
			.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
				used.checked_add(amount).filter(|after| *after <= capacity)
			})
			.is_ok();
		if !taken {
			return false;
		}
		if let Some(parent) = &node.parent
			&& !parent.try_take(amount)
		{
			node.used.fetch_sub(amount, Ordering::Relaxed);
			return false;
		}
		true
	}

	fn give(&self, amount: u64) {
		let before = self.node.used.fetch_sub(amount, Ordering::Relaxed);
		debug_assert!(before >= amount, "a budget given back more than was taken");
		if let Some(parent) = self.parent() {
			parent.give(amount);
		}
	}
}

/// Two accounts charged together, all or nothing: a session's share of a resource and the
/// memory of the connection it runs on, say.
impl<A: Account, B: Account> Account for (A, B) {
	fn try_take(&self, amount: u64) -> bool {
		if !self.0.try_take(amount) {
			return false;
		}
		if !self.1.try_take(amount) {
			self.0.give(amount);
			return false;
		}
		true
	}

	fn give(&self, amount: u64) {
		self.0.give(amount);
		self.1.give(amount);
	}
}

/// An account that may be absent: `None` takes anything and holds nothing.
impl<A: Account> Account for Option<A> {
	fn try_take(&self, amount: u64) -> bool {
		self.as_ref().is_none_or(|account| account.try_take(amount))
	}

	fn give(&self, amount: u64) {
		if let Some(account) = self {
			account.give(amount);
		}
	}
}

impl fmt::Debug for Budget {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Budget")
			.field("used", &self.used())
			.field("capacity", &self.capacity())
			.field("parent", &self.node.parent)
			.finish()
	}
}

/// What its holder took from an [`Account`]; given back when it drops.
#[must_use = "a charge dropped at once gives back what it took"]
pub struct Charge<A: Account = Budget> {
	account: A,
	amount: u64,
}

impl<A: Account> Charge<A> {
	/// A charge of nothing from `account`.
	pub fn empty(account: A) -> Self {
		Self { account, amount: 0 }
	}

	/// A charge of `amount` from `account`, if it has room.
	pub fn take(account: A, amount: u64) -> Option<Self> {
		// Built only once taken: a charge that drops gives back what it holds.
		if account.try_take(amount) {
			Some(Self { account, amount })
		} else {
			None
		}
	}

	/// What the charge holds.
	pub fn amount(&self) -> u64 {
		self.amount
	}

	/// The account it holds from.
	pub fn account(&self) -> &A {
		&self.account
	}

	/// Makes the charge `amount`: growing takes the difference if there is room (`false`, and the
	/// charge unchanged, if not); shrinking gives it back.
	pub fn resize(&mut self, amount: u64) -> bool {
		if amount > self.amount {
			if !self.account.try_take(amount - self.amount) {
				return false;
			}
		} else if amount < self.amount {
			self.account.give(self.amount - amount);
		}
		self.amount = amount;
		true
	}

	/// Grows the charge by `amount` if there is room.
	pub fn grow(&mut self, amount: u64) -> bool {
		self.resize(self.amount.saturating_add(amount))
	}

	/// Gives back `amount` of the charge (all of it if it holds less).
	pub fn shrink(&mut self, amount: u64) {
		debug_assert!(amount <= self.amount, "a charge shrunk by more than it holds");
		self.resize(self.amount.saturating_sub(amount));
	}
}

impl Charge<Budget> {
	/// Grows the charge by `amount` whether or not there is room: for what is already held and
	/// must be counted (the budget then reads as [over](Budget::is_over) until it is given back).
	pub fn force(&mut self, amount: u64) {
		self.account.add(amount);
		self.amount += amount;
	}
}

impl<A: Account> Drop for Charge<A> {
	fn drop(&mut self) {
		if self.amount > 0 {
			self.account.give(self.amount);
		}
	}
}

impl<A: Account + fmt::Debug> fmt::Debug for Charge<A> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Charge")
			.field("amount", &self.amount)
			.field("account", &self.account)
			.finish()
	}
}

/// Counts per key (a source address, say), each at most `per_key`, all of them charged to one
/// [`Budget`] too. A key is forgotten once it holds nothing.
#[cfg(not(loom))]
pub struct Keyed<K> {
	per_key: u64,
	total: Budget,
	counts: Mutex<HashMap<K, u64>>,
}

/// The share of one key in a [`Keyed`]: the account its charges take from.
#[cfg(not(loom))]
pub struct KeyAccount<K: Hash + Eq + Clone> {
	keyed: Arc<Keyed<K>>,
	key: K,
}

#[cfg(not(loom))]
impl<K: Hash + Eq + Clone> Keyed<K> {
	/// Keys of at most `per_key` each, together charged to `total`.
	pub fn new(per_key: u64, total: Budget) -> Arc<Self> {
		Arc::new(Self {
			per_key,
			total,
			counts: Mutex::new(HashMap::new()),
		})
	}

	/// A charge of `amount` to `key`, if its share and the total have room.
	pub fn charge(self: &Arc<Self>, key: K, amount: u64) -> Option<Charge<KeyAccount<K>>> {
		let account = KeyAccount {
			keyed: self.clone(),
			key,
		};
		Charge::take(account, amount)
	}

	/// What `key` holds now.
	pub fn held(&self, key: &K) -> u64 {
		self.lock().get(key).copied().unwrap_or(0)
	}

	/// How many keys hold something.
	pub fn keys(&self) -> usize {
		self.lock().len()
	}

	/// The key holding the most, and what it holds.
	pub fn greediest(&self) -> Option<(K, u64)> {
		let counts = self.lock();
		counts
			.iter()
			.max_by_key(|(_, held)| **held)
			.map(|(key, held)| (key.clone(), *held))
	}

	/// The budget every key's charges also take from.
	pub fn total(&self) -> &Budget {
		&self.total
	}

	/// Each key's cap.
	pub fn per_key(&self) -> u64 {
		self.per_key
	}

	fn lock(&self) -> super::MutexGuard<'_, HashMap<K, u64>> {
		self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
	}
}

#[cfg(not(loom))]
impl<K: Hash + Eq + Clone> Account for KeyAccount<K> {
	fn try_take(&self, amount: u64) -> bool {
		let mut counts = self.keyed.lock();
		let held = counts.get(&self.key).copied().unwrap_or(0);
		let fits = held
			.checked_add(amount)
			.is_some_and(|after| after <= self.keyed.per_key);
		if !fits || !self.keyed.total.try_take(amount) {
			return false;
		}
		*counts.entry(self.key.clone()).or_insert(0) += amount;
		true
	}

	fn give(&self, amount: u64) {
		let mut counts = self.keyed.lock();
		if let Some(held) = counts.get_mut(&self.key) {
			*held -= amount;
			if *held == 0 {
				counts.remove(&self.key);
			}
		}
		self.keyed.total.give(amount);
	}
}

#[cfg(not(loom))]
impl<K: Hash + Eq + Clone> KeyAccount<K> {
	/// The key.
	pub fn key(&self) -> &K {
		&self.key
	}
}

#[cfg(not(loom))]
impl<K> fmt::Debug for Keyed<K> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Keyed")
			.field("per_key", &self.per_key)
			.field("total", &self.total)
			.finish_non_exhaustive()
	}
}

#[cfg(not(loom))]
impl<K: Hash + Eq + Clone + fmt::Debug> fmt::Debug for KeyAccount<K> {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("KeyAccount").field("key", &self.key).finish()
	}
}

/// Per-key budgets under one total (the relay's memory ceiling, per source address), each
/// allowed a fair share: the larger of `floor` and the total's capacity divided among the keys
/// that hold a budget now. A key's budget lives while some handle of it does, and the shares are
/// set again when a key comes or goes ([`rebalance`](Self::rebalance)), so a key that was alone
/// and took much finds its share shrunk when others come: it is refused more until it gives back.
#[cfg(not(loom))]
pub struct Shares<K> {
	total: Budget,
	floor: u64,
	keys: Mutex<HashMap<K, Budget>>,
}

#[cfg(not(loom))]
impl<K: Hash + Eq + Clone> Shares<K> {
	/// Shares of `total`, none smaller than `floor`.
	pub fn new(total: Budget, floor: u64) -> Self {
		Self {
			total,
			floor,
			keys: Mutex::new(HashMap::new()),
		}
	}

	/// The budget of `key`, a child of the total at the fair share; made if `key` holds none.
	pub fn get(&self, key: &K) -> Budget {
		let mut keys = self.lock();
		if let Some(budget) = keys.get(key) {
			return budget.clone();
		}
		let budget = self.total.child(self.floor);
		keys.insert(key.clone(), budget.clone());
		self.rebalance_locked(&mut keys);
		budget
	}

	/// Forgets the keys nobody holds a budget of, and sets every key's share again.
	pub fn rebalance(&self) {
		let mut keys = self.lock();
		self.rebalance_locked(&mut keys);
	}

	fn rebalance_locked(&self, keys: &mut HashMap<K, Budget>) {
		keys.retain(|_, budget| Arc::strong_count(&budget.node) > 1 || budget.used() > 0);
		let share = self.share_of(keys.len());
		for budget in keys.values() {
			budget.set_capacity(share);
		}
	}

	fn share_of(&self, keys: usize) -> u64 {
		(self.total.capacity() / keys.max(1) as u64).max(self.floor)
	}

	/// Each key's share now.
	pub fn share(&self) -> u64 {
		self.share_of(self.lock().len())
	}

	/// How many keys hold a budget.
	pub fn keys(&self) -> usize {
		self.lock().len()
	}

	/// The key whose budget holds the most, and what it holds.
	pub fn greediest(&self) -> Option<(K, u64)> {
		let keys = self.lock();
		(keys.iter())
			.map(|(key, budget)| (key, budget.used()))
			.max_by_key(|(_, used)| *used)
			.map(|(key, used)| (key.clone(), used))
	}

	/// What `key` holds now.
	pub fn held(&self, key: &K) -> u64 {
		self.lock().get(key).map_or(0, Budget::used)
	}

	/// The keys holding more than their share (charges [forced](Charge::force) past it), and by
	/// how much.
	pub fn over(&self) -> Vec<(K, u64)> {
		let keys = self.lock();
		(keys.iter())
			.filter(|(_, budget)| budget.used() > budget.capacity())
			.map(|(key, budget)| (key.clone(), budget.used() - budget.capacity()))
			.collect()
	}

	/// The budget every key's takes from.
	pub fn total(&self) -> &Budget {
		&self.total
	}

	fn lock(&self) -> super::MutexGuard<'_, HashMap<K, Budget>> {
		self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
	}
}

#[cfg(all(test, not(loom)))]
mod tests {
	use super::*;

	#[test]
	fn a_child_takes_from_its_parent_and_either_can_refuse() {
		let parent = Budget::new(1000);
		let a = parent.child(600);
		let b = parent.child(600);
		let full_a = a.charge(600).expect("room");
		assert!(a.charge(1).is_none(), "the child is full");
		let mut held_b = b.charge(400).expect("room");
		assert!(b.charge(1).is_none(), "the parent is full though the child is not");
		assert_eq!((a.used(), b.used(), parent.used()), (600, 400, 1000));
		drop(full_a);
		assert_eq!((a.used(), parent.used()), (0, 400));
		assert!(held_b.grow(200));
		assert_eq!((b.used(), parent.used()), (600, 600));
		assert!(!held_b.grow(1), "b is full");
		assert_eq!(held_b.amount(), 600, "a refused growth changes nothing");
		held_b.shrink(100);
		assert_eq!((b.used(), parent.used()), (500, 500));
		drop(held_b);
		assert_eq!(parent.used(), 0);
	}

	#[test]
	fn a_charge_follows_what_it_accounts_for_and_gives_it_all_back() {
		let budget = Budget::new(100);
		let mut charge = budget.empty();
		assert!(charge.resize(70));
		assert!(!charge.resize(101), "past the capacity");
		assert_eq!(budget.used(), 70);
		assert!(charge.resize(10));
		assert_eq!(budget.used(), 10);
		charge.force(200);
		assert!(budget.is_over() && !budget.has_room(0));
		assert_eq!(charge.amount(), 210);
		drop(charge);
		assert_eq!(budget.used(), 0);
		assert!(!budget.is_over());
	}

	#[test]
	fn an_unlimited_parent_is_a_gauge_of_its_children() {
		let gauge = Budget::unlimited();
		let sessions: Vec<Budget> = (0..3).map(|_| gauge.child(2)).collect();
		let held: Vec<Charge> = sessions.iter().filter_map(|s| s.charge(2)).collect();
		assert_eq!(gauge.used(), 6);
		assert!(sessions[0].charge(1).is_none());
		assert!(gauge.could_fit(u64::MAX) && !sessions[0].could_fit(3));
		drop(held);
		assert_eq!(gauge.used(), 0);
	}

	#[test]
	fn pairs_are_charged_together_or_not_at_all() {
		let (a, b) = (Budget::new(10), Budget::new(5));
		let pair = Charge::take((a.clone(), b.clone()), 5).expect("both have room");
		assert!(Charge::take((a.clone(), b.clone()), 1).is_none(), "b is full");
		assert_eq!((a.used(), b.used()), (5, 5), "a gave back what b refused");
		drop(pair);
		assert_eq!((a.used(), b.used()), (0, 0));
		let alone = Charge::take((a, None::<Budget>), 7).expect("no second account");
		assert_eq!(alone.amount(), 7);
	}

	#[test]
	fn shares_divide_the_total_among_the_keys_that_hold_one() {
		let shares = Shares::new(Budget::new(1000), 100);
		let a = shares.get(&0u32);
		assert_eq!(a.capacity(), 1000, "alone, a key may take it all");
		let mut held = a.charge(900).expect("room");
		let b = shares.get(&1);
		assert_eq!((a.capacity(), b.capacity()), (500, 500));
		assert!(a.charge(1).is_none(), "a holds more than its share now");
		let _b = b.charge(100).expect("b takes its share while a is over");
		assert_eq!(shares.greediest(), Some((0, 900)));
		assert_eq!(shares.over(), vec![(0, 400)], "a is 400 past its share");
		held.shrink(500);
		assert!(shares.over().is_empty());
		assert!(a.charge(50).is_some(), "back under its share");
		let c: Vec<Budget> = (2..22).map(|key| shares.get(&key)).collect();
		assert_eq!(c[0].capacity(), 100, "never below the floor");
		drop((c, held, _b, b));
		shares.rebalance();
		assert_eq!(shares.keys(), 1, "only a's handle is left");
		assert_eq!(a.capacity(), 1000);
	}

	#[test]
	fn keys_share_a_total_and_are_forgotten_when_empty() {
		let total = Budget::new(5);
		let keyed = Keyed::new(3, total.clone());
		let a: Vec<_> = (0..4).filter_map(|_| keyed.charge("a", 1)).collect();
		assert_eq!(a.len(), 3, "a's share is 3");
		let b: Vec<_> = (0..4).filter_map(|_| keyed.charge("b", 1)).collect();
		assert_eq!(b.len(), 2, "the total is 5");
		assert_eq!(keyed.greediest(), Some(("a", 3)));
		assert_eq!((keyed.held(&"a"), keyed.keys(), total.used()), (3, 2, 5));
		drop(a);
		assert_eq!((keyed.held(&"a"), keyed.keys(), total.used()), (0, 1, 2));
		drop(b);
		assert_eq!((keyed.keys(), total.used()), (0, 0));
	}
}
