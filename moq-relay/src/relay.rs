//! [`Relay`]: what every worker shares, whatever transport a session came by. Sockets,
//! certificates and the runtime are the server's ([`crate::server`]); this is the state a
//! session is served from, so a simulated cluster ([`crate::cluster::sim`]) runs the same.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kio::sync::{Budget, Charge, Consumer, Producer, Shares};
use moq_net::lite::session::{self, Counters};
use moq_net::model::{BroadcastProducer, Origin, Pool, Publication};

use crate::auth::Auth;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::limits::Limits;
use crate::metrics::{Sources, Stats};

/// What every worker shares.
pub struct Relay {
	/// The broadcasts, tracks and cache every session serves from and publishes into.
	pub(crate) origin: Origin,
	pub(crate) auth: Auth,
	pub(crate) limits: Limits,
	/// Everything peers make the relay hold, in bytes (`--max-memory`), shared fairly by their
	/// addresses: each address's budget is a share of it, each connection's a budget under its
	/// address's ([`moq_quic::Config::with_memory`]).
	pub(crate) memory: Arc<Shares<u64>>,
	/// The cache's byte budget, under the memory ceiling; a publishing session fills a child of it.
	pub(crate) pool: Pool,
	/// What sessions move and hold, summed over all of them.
	pub(crate) counters: Arc<Counters>,
	pub(crate) stats: Stats,
	pub(crate) cluster: Cluster,
	/// Connections open, at most `--max-connections`, shared fairly by addresses.
	pub(crate) slots: Slots,
	pub(crate) shutdown_timeout: Duration,
	/// The pace of each address's requests (see [`Relay::pace_for`]).
	paces: Mutex<HashMap<u64, Arc<session::Pace>>>,
	/// This relay's node URL, announced to its cluster for as long as it runs.
	_membership: Option<(BroadcastProducer, Publication)>,
}

impl Relay {
	/// A relay serving `origin` as `config` says, its figures read from `sources` too.
	pub fn new(config: &Config, origin: Origin, sources: Sources) -> anyhow::Result<Self> {
		Self::with_auth(config, origin, Auth::new(&config.auth)?, sources)
	}

	/// [`new`](Self::new), with `auth` in place of the configuration's.
	pub fn with_auth(config: &Config, origin: Origin, auth: Auth, sources: Sources) -> anyhow::Result<Self> {
		let cluster = Cluster::new(&config.cluster)?;
		let membership = cluster.join(&origin)?;
		let max_connections = config.max_connections.map_or(u64::MAX, |max| max as u64);
		let ceiling = Budget::new(config.limits.memory_for(config.cache_size));
		let pool = ceiling.child(config.cache_size);
		Ok(Self {
			auth,
			limits: config.limits,
			memory: Arc::new(Shares::new(ceiling, config.limits.address_memory)),
			pool,
			counters: Arc::new(Counters::default()),
			stats: Stats::new(config.workers, sources),
			cluster,
			slots: Slots::new(max_connections),
			shutdown_timeout: config.shutdown_timeout,
			paces: Mutex::new(HashMap::new()),
			origin,
			_membership: membership,
		})
	}

	/// This relay's id in hop chains.
	pub fn id(&self) -> u64 {
		self.origin.id()
	}

	/// The origin sessions serve from.
	pub fn origin(&self) -> &Origin {
		&self.origin
	}

	/// Connections open now.
	pub(crate) fn connections_open(&self) -> u64 {
		self.slots.shares.total().used()
	}

	/// The memory budget of the address `ip` belongs to (an IPv4 address, an IPv6 /64): what
	/// every connection from there is charged to, QUIC or HTTP.
	pub(crate) fn address_memory(&self, ip: IpAddr) -> Budget {
		self.memory.get(&address_requester(ip))
	}

	/// Where the QUIC endpoints charge their connections' memory.
	pub(crate) fn memory_accounts(self: &Arc<Self>) -> Arc<dyn moq_quic::MemoryAccounts> {
		Arc::new(Accounts(self.clone()))
	}

	/// The pace every session from the address `key` shares (see [`address_requester`]): a peer
	/// that reconnects, or opens many connections, gets no fresh burst of requests. Kept while a
	/// session from the address is open or its requests are still owed turns (a pace past both is
	/// as good as new); the map forgets the others as it grows.
	pub(crate) fn pace_for(&self, key: u64) -> Arc<session::Pace> {
		let now = kio::time::now();
		let mut paces = self.paces.lock().expect("not poisoned");
		if let Some(pace) = paces.get(&key) {
			return pace.clone();
		}
		if paces.len() >= 64 && paces.len().is_power_of_two() {
			paces.retain(|_, pace| Arc::strong_count(pace) > 1 || !pace.is_fresh(now));
		}
		let limits = &self.limits;
		let pace = Arc::new(session::Pace::new(
			limits.address_request_rate,
			limits.address_request_burst,
			now,
		));
		paces.insert(key, pace.clone());
		pace
	}
}

impl Relay {
	/// Holds every address to its share of the memory ceiling: what is counted past a share
	/// without being refused (send queues, which never make a writer wait on the ceiling) is
	/// freed by closing the address's connections that hold the most. Called every second.
	pub(crate) fn enforce_memory(&self) {
		for (key, excess) in self.memory.over() {
			self.slots.evict_to_free(key, excess);
		}
	}
}

/// The QUIC endpoints' view of the memory ceiling: each address's share, and room made for an
/// address within its share when the ceiling is full.
struct Accounts(Arc<Relay>);

impl moq_quic::MemoryAccounts for Accounts {
	fn account(&self, ip: IpAddr) -> Budget {
		self.0.address_memory(ip)
	}

	/// An address within its share finds room when the ceiling is full: the connection holding
	/// the most of the greediest address (past its share) is closed. One at or past its share is
	/// refused: it makes room from itself, by giving back.
	fn make_room(&self, ip: IpAddr, amount: u64) -> bool {
		let relay = &self.0;
		let key = address_requester(ip);
		let share = relay.memory.share();
		if relay.memory.held(&key).saturating_add(amount) > share {
			return false;
		}
		match relay.memory.greediest() {
			Some((greediest, held)) if greediest != key && held > share => relay.slots.evict_largest(greediest),
			_ => false,
		}
	}
}

/// Connection slots (`--max-connections`), shared fairly by the addresses connected: an address
/// may hold the slots over the addresses (at least one). When every slot is taken, a connection
/// from an address below its share takes one from the address holding the most, whose newest
/// connection is closed; one from an address at its share is refused. So one address that opens
/// every slot locks nobody else out.
pub(crate) struct Slots {
	shares: Shares<u64>,
	/// Open connections by address, oldest first, each with the trigger that evicts it.
	open: Mutex<Evictions>,
	next: AtomicU64,
	/// Connections closed to make room for another address's.
	pub(crate) evicted: AtomicU64,
}

/// Each address's open connections, oldest first: their ids, the triggers that evict them and
/// their memory budgets.
type Evictions = HashMap<u64, Vec<(u64, Producer<()>, Option<Budget>)>>;

/// One connection's slot; given back when it drops.
pub(crate) struct Slot<'a> {
	slots: &'a Slots,
	key: u64,
	id: u64,
	_charge: Charge,
	/// Closed when the connection must give its slot to another address's.
	pub(crate) eviction: Consumer<()>,
}

impl Slots {
	fn new(max: u64) -> Self {
		Self {
			shares: Shares::new(Budget::new(max), 1),
			open: Mutex::new(HashMap::new()),
			next: AtomicU64::new(0),
			evicted: AtomicU64::new(0),
		}
	}

	/// A slot for a connection from `ip` whose memory is charged to `memory`, if its address may
	/// have one (see [`Slots`]).
	pub(crate) fn admit(&self, ip: IpAddr, memory: Option<Budget>) -> Option<Slot<'_>> {
		let key = address_requester(ip);
		let budget = self.shares.get(&key);
		let charge = match budget.charge(1) {
			Some(charge) => charge,
			None => {
				let share = self.shares.share();
				let (greediest, held) = self.shares.greediest()?;
				if budget.used() >= share || held <= share || greediest == key {
					return None;
				}
				self.evict_newest(greediest);
				// The evicted connection gives its slot back as it closes: until then the total is
				// one over, which the slot it frees makes good.
				let mut charge = budget.empty();
				charge.force(1);
				charge
			}
		};
		let id = self.next.fetch_add(1, Ordering::Relaxed);
		let trigger = Producer::new(());
		let eviction = trigger.consume();
		self.lock().entry(key).or_default().push((id, trigger, memory));
		Some(Slot {
			slots: self,
			key,
			id,
			_charge: charge,
			eviction,
		})
	}

	/// Gives the shares of addresses that left back to those still here.
	pub(crate) fn rebalance(&self) {
		self.shares.rebalance();
	}

	fn evict_newest(&self, key: u64) {
		if let Some((_, trigger, _)) = self.lock().get_mut(&key).and_then(Vec::pop) {
			let _ = trigger.close();
			self.evicted.fetch_add(1, Ordering::Relaxed);
		}
	}

	/// Closes the connection of address `key` that holds the most memory; whether there was one.
	fn evict_largest(&self, key: u64) -> bool {
		self.evict_to_free(key, 1) > 0
	}

	/// Closes the connections of address `key` that hold the most memory until they hold
	/// `amount` together (or none is left); what they hold.
	fn evict_to_free(&self, key: u64, amount: u64) -> u64 {
		let mut open = self.lock();
		let Some(connections) = open.get_mut(&key) else {
			return 0;
		};
		let used = |memory: &Option<Budget>| memory.as_ref().map_or(0, Budget::used);
		let mut freed = 0;
		while freed < amount {
			let Some(at) = (0..connections.len()).max_by_key(|&at| used(&connections[at].2)) else {
				break;
			};
			let (_, trigger, memory) = connections.remove(at);
			// At least one byte, so a connection that holds nothing counts as freeing something.
			freed += used(&memory).max(1);
			let _ = trigger.close();
			self.evicted.fetch_add(1, Ordering::Relaxed);
		}
		freed
	}

	fn lock(&self) -> std::sync::MutexGuard<'_, Evictions> {
		self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
	}
}

impl Drop for Slot<'_> {
	fn drop(&mut self) {
		let mut open = self.slots.lock();
		if let Some(connections) = open.get_mut(&self.key) {
			connections.retain(|(id, ..)| *id != self.id);
			if connections.is_empty() {
				open.remove(&self.key);
			}
		}
	}
}

/// The requester an address's sessions share: an IPv4 address, or an IPv6 /64 (what one host or
/// home is usually given), with the top bit set so no session's own id (counted up from 1) is
/// one. Distinct places that map to one key only share a fair share.
pub(crate) fn address_requester(ip: IpAddr) -> u64 {
	const ADDRESS: u64 = 1 << 63;
	match ip.to_canonical() {
		IpAddr::V4(v4) => ADDRESS | 1 << 62 | u64::from(u32::from(v4)),
		IpAddr::V6(v6) => ADDRESS | (u128::from(v6) >> 64) as u64,
	}
}

/// A relay's origin id in hop chains: random per process, never 0, and below 2^53: it travels in
/// SETUP, ANNOUNCE_OK and hop chains, and the browser library `@moq/lite` reads those integers as
/// JavaScript numbers, failing above 2^53 - 1 (docs/moq-lite-versions.md §3).
pub(crate) fn random_id() -> u64 {
	use std::hash::{BuildHasher, Hasher};
	let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
	hasher.write_u128(
		std::time::SystemTime::now()
			.duration_since(std::time::SystemTime::UNIX_EPOCH)
			.map_or(0, |d| d.as_nanos()),
	);
	hasher.write_u32(std::process::id());
	(hasher.finish() >> 11).max(1)
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn relay_ids_fit_a_javascript_number() {
		for _ in 0..1000 {
			let id = random_id();
			assert!(id > 0 && id < 1 << 53, "{id}");
		}
	}

	#[test]
	fn an_address_past_its_memory_share_loses_its_largest_connections_until_it_is_not() {
		let slots = Slots::new(u64::MAX);
		let memory = Shares::new(Budget::new(1000), 0);
		let ip: IpAddr = "192.0.2.7".parse().unwrap();
		let address = memory.get(&address_requester(ip));
		let connections: Vec<Budget> = (0..4).map(|_| address.child(u64::MAX)).collect();
		let slots_held: Vec<Slot<'_>> = connections
			.iter()
			.map(|budget| slots.admit(ip, Some(budget.clone())).unwrap())
			.collect();
		// Send queues counted past the share (what is never refused): 100, 400, 300 and 500.
		let mut held = Vec::new();
		for (budget, amount) in connections.iter().zip([100, 400, 300, 500]) {
			let mut charge = budget.empty();
			charge.force(amount);
			held.push(charge);
		}
		assert_eq!(memory.over(), vec![(address_requester(ip), 300)]);
		for (key, excess) in memory.over() {
			assert_eq!(slots.evict_to_free(key, excess), 500, "the largest alone covers it");
		}
		let closed: Vec<bool> = slots_held.iter().map(|slot| slot.eviction.is_closed()).collect();
		assert_eq!(closed, [false, false, false, true]);
		assert_eq!(slots.evicted.load(Ordering::Relaxed), 1);
		// Past by more than the largest holds: the next largest go too, the smallest stays.
		held[1].force(600);
		assert_eq!(slots.evict_to_free(address_requester(ip), 1200), 1300);
		let closed: Vec<bool> = slots_held.iter().map(|slot| slot.eviction.is_closed()).collect();
		assert_eq!(closed, [false, true, true, true]);
	}

	#[test]
	fn sessions_of_one_address_request_as_one() {
		let key = |ip: &str| address_requester(ip.parse().unwrap());
		assert_eq!(
			key("192.0.2.7"),
			key("::ffff:192.0.2.7"),
			"an IPv4-mapped address is its IPv4"
		);
		assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
		assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"), "one /64");
		assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
		// Never a session's own id (counted up from 1).
		assert!(key("0.0.0.0") >= 1 << 63 && key("::") >= 1 << 63);
	}
}
