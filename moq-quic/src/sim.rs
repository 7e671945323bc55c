//! A simulated network: endpoints exchange datagrams in memory, on the worker's clock.
//!
//! Run it on a runtime with a paused clock (`kio::Builder::paused_clock(true)`): time then moves
//! only when every task is idle, straight to the next timer, so a test of seconds of QUIC traffic
//! runs in milliseconds and does the same thing every time. Each datagram is lost with the seeded
//! probability, queued behind the link's earlier datagrams when a rate is set (tail-dropped when
//! the queue would exceed its limit: congestion QUIC must react to), and delivered after the
//! latency plus a random jitter; jitter larger than the gap between two datagrams reorders them.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::rc::{Rc, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use kio::time::Deadline;
use kio::{JoinHandle, Waiter, WaiterList};
use quinn_proto::EcnCodepoint;

use crate::endpoint::Outgoing;

/// How the simulated links behave (every direction between two ports alike).
#[derive(Clone, Debug)]
pub struct SimConfig {
	/// One-way delay.
	pub latency: Duration,
	/// A uniformly random extra delay in `[0, jitter)` per datagram.
	pub jitter: Duration,
	/// Probability that a datagram is lost, in `[0, 1]`.
	pub loss: f64,
	/// Link rate in bytes per second; `None` is unlimited.
	pub rate: Option<u64>,
	/// The longest a datagram may wait for the link before it is dropped (the bottleneck's buffer).
	pub queue: Duration,
	/// Seeds the loss and jitter draws.
	pub seed: u64,
}

impl Default for SimConfig {
	fn default() -> Self {
		Self {
			latency: Duration::from_millis(10),
			jitter: Duration::ZERO,
			loss: 0.0,
			rate: None,
			queue: Duration::from_millis(50),
			seed: 1,
		}
	}
}

/// What the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
	/// Datagrams handed to the network.
	pub sent: u64,
	/// Datagrams delivered.
	pub delivered: u64,
	/// Datagrams lost at random.
	pub lost: u64,
	/// Datagrams dropped because the link's queue was full.
	pub dropped: u64,
	/// Datagrams delivered out of order (after one sent later on the same link).
	pub reordered: u64,
	/// Datagrams dropped because their hosts were cut apart ([`Network::cut`]).
	pub cut: u64,
}

pub(crate) struct SimDatagram {
	pub(crate) from: SocketAddr,
	pub(crate) ecn: Option<EcnCodepoint>,
	pub(crate) payload: Vec<u8>,
}

struct Flight {
	at: Instant,
	seq: u64,
	to: SocketAddr,
	datagram: SimDatagram,
}

impl PartialEq for Flight {
	fn eq(&self, other: &Self) -> bool {
		(self.at, self.seq) == (other.at, other.seq)
	}
}
impl Eq for Flight {}
impl PartialOrd for Flight {
	fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
		Some(self.cmp(other))
	}
}
impl Ord for Flight {
	fn cmp(&self, other: &Self) -> std::cmp::Ordering {
		(self.at, self.seq).cmp(&(other.at, other.seq))
	}
}

#[derive(Default)]
struct PortState {
	inbox: VecDeque<SimDatagram>,
	waiters: WaiterList,
}

struct Net {
	config: SimConfig,
	rng: Cell<u64>,
	ports: RefCell<HashMap<SocketAddr, Rc<RefCell<PortState>>>>,
	flights: RefCell<BinaryHeap<Reverse<Flight>>>,
	/// When each directed link is free again, and the last sequence delivered on it.
	links: RefCell<HashMap<(SocketAddr, SocketAddr), (Instant, u64)>>,
	seq: Cell<u64>,
	pump: RefCell<WaiterList>,
	stats: Cell<SimStats>,
	/// Pairs of hosts that cannot reach each other, lower address first.
	cuts: RefCell<HashSet<(IpAddr, IpAddr)>>,
}

/// A simulated network. Create it inside a kio runtime (its delivery task runs there).
#[derive(Clone)]
pub struct Network(Rc<NetHandle>);

struct NetHandle {
	net: Rc<Net>,
	pump: JoinHandle<()>,
}

impl Drop for NetHandle {
	fn drop(&mut self) {
		self.pump.abort();
	}
}

impl Network {
	/// A network whose links all behave as `config` says.
	pub fn new(config: SimConfig) -> Self {
		let seed = config.seed;
		let net = Rc::new(Net {
			config,
			rng: Cell::new(seed ^ 0x9e37_79b9_7f4a_7c15),
			ports: RefCell::new(HashMap::new()),
			flights: RefCell::new(BinaryHeap::new()),
			links: RefCell::new(HashMap::new()),
			seq: Cell::new(0),
			pump: RefCell::new(WaiterList::new()),
			stats: Cell::new(SimStats::default()),
			cuts: RefCell::new(HashSet::new()),
		});
		let pump = kio::spawn(pump(Rc::downgrade(&net)));
		Self(Rc::new(NetHandle { net, pump }))
	}

	/// What happened so far.
	pub fn stats(&self) -> SimStats {
		self.0.net.stats.get()
	}

	/// Cuts hosts `a` and `b` (every port of each) apart, both ways: a partition. Datagrams in
	/// flight still land.
	pub fn cut(&self, a: IpAddr, b: IpAddr) {
		self.0.net.cuts.borrow_mut().insert(host_pair(a, b));
	}

	/// Undoes every [`cut`](Self::cut): the partition heals.
	pub fn heal(&self) {
		self.0.net.cuts.borrow_mut().clear();
	}

	/// The lowest port of `ip`, from `from` on, that no endpoint is bound to (what a client binding
	/// port 0 on a real network gets from the kernel).
	pub fn free_port(&self, ip: IpAddr, from: u16) -> u16 {
		let ports = self.0.net.ports.borrow();
		(from..=u16::MAX)
			.find(|port| !ports.contains_key(&SocketAddr::new(ip, *port)))
			.expect("a simulated host with every port bound")
	}

	pub(crate) fn bind(&self, addr: SocketAddr) -> Port {
		let state = Rc::new(RefCell::new(PortState::default()));
		self.0.net.ports.borrow_mut().insert(addr, state.clone());
		Port {
			network: self.clone(),
			addr,
			state,
		}
	}
}

impl std::fmt::Debug for Network {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("Network")
			.field("config", &self.0.net.config)
			.finish_non_exhaustive()
	}
}

fn host_pair(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
	if a <= b { (a, b) } else { (b, a) }
}

impl Net {
	/// splitmix64: small, seeded, good enough for loss and jitter draws.
	fn next_u64(&self) -> u64 {
		let mut z = self.rng.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
		self.rng.set(z);
		z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
		z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
		z ^ (z >> 31)
	}

	fn unit(&self) -> f64 {
		(self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
	}

	fn bump(&self, f: impl FnOnce(&mut SimStats)) {
		let mut stats = self.stats.get();
		f(&mut stats);
		self.stats.set(stats);
	}

	fn send(&self, from: SocketAddr, to: SocketAddr, ecn: Option<EcnCodepoint>, payload: &[u8]) {
		self.bump(|s| s.sent += 1);
		if self.cuts.borrow().contains(&host_pair(from.ip(), to.ip())) {
			self.bump(|s| s.cut += 1);
			return;
		}
		let now = kio::time::now();
		if self.unit() < self.config.loss {
			self.bump(|s| s.lost += 1);
			return;
		}
		let mut departure = now;
		if let Some(rate) = self.config.rate {
			let mut links = self.links.borrow_mut();
			let link = links.entry((from, to)).or_insert((now, 0));
			let start = link.0.max(now);
			if start.duration_since(now) > self.config.queue {
				self.bump(|s| s.dropped += 1);
				return;
			}
			departure = start + Duration::from_nanos(payload.len() as u64 * 1_000_000_000 / rate.max(1));
			link.0 = departure;
		}
		let jitter = if self.config.jitter.is_zero() {
			Duration::ZERO
		} else {
			self.config.jitter.mul_f64(self.unit())
		};
		let seq = self.seq.get() + 1;
		self.seq.set(seq);
		self.flights.borrow_mut().push(Reverse(Flight {
			at: departure + self.config.latency + jitter,
			seq,
			to,
			datagram: SimDatagram {
				from,
				ecn,
				payload: payload.to_vec(),
			},
		}));
		self.pump.borrow_mut().wake();
	}

	/// Delivers what is due; returns when the next flight lands.
	fn deliver_due(&self) -> Option<Instant> {
		let now = kio::time::now();
		loop {
			let mut flights = self.flights.borrow_mut();
			let at = flights.peek()?.0.at;
			if at > now {
				return Some(at);
			}
			let Reverse(flight) = flights.pop().expect("peeked");
			drop(flights);
			let Some(port) = self.ports.borrow().get(&flight.to).cloned() else {
				continue;
			};
			let mut links = self.links.borrow_mut();
			let link = links.entry((flight.datagram.from, flight.to)).or_insert((now, 0));
			if flight.seq < link.1 {
				self.bump(|s| s.reordered += 1);
			}
			link.1 = link.1.max(flight.seq);
			drop(links);
			self.bump(|s| s.delivered += 1);
			let mut port = port.borrow_mut();
			port.inbox.push_back(flight.datagram);
			port.waiters.wake();
		}
	}
}

/// Delivers every flight when it lands, until the network is gone.
///
/// The work is done in the poll itself: `kio::wait` polls again on every wake, so a wake by a new
/// flight and a wake by the deadline both deliver what is due and re-arm for the next landing.
/// Delivering only once `poll_elapsed` was ready lost the wakes by new flights: a flight sent
/// while no deadline was armed (an idle network, so the very first one) was never delivered, and
/// one landing before the armed deadline was delivered late.
async fn pump(net: Weak<Net>) {
	let mut deadline = Deadline::new(None);
	kio::wait(|w| {
		let Some(net) = net.upgrade() else {
			return Poll::Ready(());
		};
		deadline.set(net.deliver_due());
		net.pump.borrow_mut().register(w);
		// What is due was just delivered, so the next landing is later than now: this arms the
		// timer and is pending.
		let _ = deadline.poll_elapsed(w);
		Poll::Pending
	})
	.await
}

/// An endpoint's attachment to the network.
pub(crate) struct Port {
	network: Network,
	addr: SocketAddr,
	state: Rc<RefCell<PortState>>,
}

impl Port {
	pub(crate) fn send(&self, out: &Outgoing) {
		let net = &self.network.0.net;
		match out.segment_size {
			Some(size) if size < out.buf.len() => {
				for datagram in out.buf.chunks(size) {
					net.send(self.addr, out.destination, out.ecn, datagram);
				}
			}
			_ => net.send(self.addr, out.destination, out.ecn, &out.buf),
		}
	}

	fn poll_recv(&self, waiter: &Waiter) -> Poll<Option<SimDatagram>> {
		let mut state = self.state.borrow_mut();
		if let Some(datagram) = state.inbox.pop_front() {
			return Poll::Ready(Some(datagram));
		}
		state.waiters.register(waiter);
		Poll::Pending
	}

	pub(crate) async fn recv(&self) -> Option<SimDatagram> {
		kio::wait(|w| self.poll_recv(w)).await
	}
}

impl Drop for Port {
	fn drop(&mut self) {
		self.network.0.net.ports.borrow_mut().remove(&self.addr);
	}
}
