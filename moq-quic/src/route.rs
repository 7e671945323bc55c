//! Datagrams between the workers of one server, which share its port.
//!
//! Every worker binds the server's port with `SO_REUSEPORT`, and the kernel picks a worker for
//! each datagram by a hash of the client's address. A client whose address changes mid-connection
//! (a NAT rebinding its port, a phone moving from Wi-Fi to mobile data) therefore usually lands on
//! another worker, whose endpoint does not know the connection and would answer with a stateless
//! reset. With a [`Router`], each worker's endpoint issues connection ids whose first byte is its
//! index, and a worker that receives a short-header packet (the only kind a connection sends once
//! its handshake is over) addressed to another worker's id hands the datagram to that worker,
//! which handles it as if it had arrived on its own socket: quinn-proto sees the new address,
//! validates the path and carries on, answering from the same port. Long-header packets are never
//! forwarded: a client's Initial picks its own destination id, and a handshake does not migrate.
//!
//! What a peer can make the relay hold here is bounded: each worker's inbox takes at most
//! [`Router::new`]'s `queue_bytes` of datagrams, each charged its payload and its bookkeeping (a
//! datagram past it is dropped, as a full socket buffer would); one too short to be a packet is
//! never forwarded, every forwarded one is counted, and none is forwarded twice.
//!
//! What it costs (from review):
//! - The first byte of every id names a worker, so an observer can tell which worker's
//!   connections a packet belongs to, and link a connection's ids across a migration to a set of
//!   1 in the worker count (QUIC-LB's unencrypted server ids make the same trade).
//! - A stateless reset a client sends looks like a short-header packet with random bytes; when
//!   its second byte names another worker it goes there, and the connection it was for waits for
//!   its idle timeout instead of closing at once.
//! - Datagrams for a worker whose endpoint is gone (at shutdown) wait in its inbox, within the
//!   bound, and are never answered.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;

use bytes::BytesMut;
use kio::Waiter;
use kio::sync::{Budget, Charge, Queue};
use quinn_proto::{ConnectionId, ConnectionIdGenerator, EcnCodepoint, RandomConnectionIdGenerator};

/// The length of the connection ids a routed endpoint issues: quinn-proto's default, the first
/// byte the worker's index and the other seven random.
pub(crate) const CID_LEN: usize = 8;

/// The shortest datagram forwarded: a short header (1 byte), the destination id, the longest
/// packet number (4 bytes) and the 16-byte sample header protection takes; anything shorter is
/// no packet of a connection, and handled (dropped) where it arrived.
const MIN_PACKET: usize = 1 + CID_LEN + 4 + 16;

/// What a queued datagram costs beyond its payload: its record and the payload's allocation,
/// rounded up. Charged with the payload, so a flood of tiny datagrams cannot hold ten times the
/// limit in bookkeeping (9-byte datagrams: about 116 k of them would fit 1 MiB uncharged).
const OVERHEAD: usize = size_of::<Forwarded>() + 32;

/// Routes datagrams to the worker whose endpoint holds their connection (see the module docs).
/// One per server, shared by its workers' endpoints ([`Config::with_router`](crate::Config::with_router)).
pub struct Router {
	inboxes: Box<[Inbox]>,
	forwarded: AtomicU64,
	dropped: AtomicU64,
}

struct Inbox {
	/// Each datagram with its charge to `bytes`, given back when it is taken.
	datagrams: Queue<(Forwarded, Charge)>,
	bytes: Budget,
}

/// A datagram handed from the worker that received it to the one that owns its connection.
pub(crate) struct Forwarded {
	pub(crate) from: SocketAddr,
	pub(crate) local_ip: Option<IpAddr>,
	pub(crate) ecn: Option<EcnCodepoint>,
	pub(crate) payload: BytesMut,
}

impl Forwarded {
	/// What it holds while queued: its payload and its bookkeeping.
	fn cost(&self) -> u64 {
		(self.payload.len() + OVERHEAD) as u64
	}
}

/// A [`Router`]'s counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterStats {
	/// Datagrams handed to the worker that owns their connection.
	pub forwarded: u64,
	/// Datagrams dropped because that worker's inbox was full.
	pub dropped: u64,
	/// Bytes of datagrams waiting in the workers' inboxes now.
	pub queued_bytes: u64,
}

impl Router {
	/// A router for `workers` endpoints, each holding at most `queue_bytes` of datagrams
	/// forwarded to it and not yet handled.
	///
	/// # Panics
	///
	/// Unless `workers` is 1 to 256: a connection id names its worker in one byte.
	pub fn new(workers: usize, queue_bytes: usize) -> Arc<Self> {
		assert!((1..=256).contains(&workers), "a router serves 1 to 256 workers");
		Arc::new(Self {
			inboxes: (0..workers)
				.map(|_| Inbox {
					datagrams: Queue::unbounded(),
					bytes: Budget::new(queue_bytes as u64),
				})
				.collect(),
			forwarded: AtomicU64::new(0),
			dropped: AtomicU64::new(0),
		})
	}

	/// The number of workers it routes between.
	pub fn workers(&self) -> usize {
		self.inboxes.len()
	}

	/// Its counters.
	pub fn stats(&self) -> RouterStats {
		RouterStats {
			forwarded: self.forwarded.load(Ordering::Relaxed),
			dropped: self.dropped.load(Ordering::Relaxed),
			queued_bytes: self.inboxes.iter().map(|inbox| inbox.bytes.used()).sum(),
		}
	}

	/// The worker other than `me` that owns `datagram`'s connection, if it is a short-header
	/// packet addressed to a connection id another of these workers issued.
	pub(crate) fn owner(&self, me: u8, datagram: &[u8]) -> Option<usize> {
		// A short header: the form bit clear, then the destination id (RFC 9000 §17.3).
		let (&first, id) = datagram.split_first()?;
		if first & 0x80 != 0 || datagram.len() < MIN_PACKET {
			return None;
		}
		let owner = id[0];
		(owner != me && usize::from(owner) < self.inboxes.len()).then_some(usize::from(owner))
	}

	/// Hands `datagram` to worker `to`, or drops it if that worker's inbox is full.
	pub(crate) fn forward(&self, to: usize, datagram: Forwarded) {
		let inbox = &self.inboxes[to];
		let queued = inbox
			.bytes
			.charge(datagram.cost())
			.is_some_and(|charge| inbox.datagrams.try_push((datagram, charge)).is_ok());
		let counter = if queued { &self.forwarded } else { &self.dropped };
		counter.fetch_add(1, Ordering::Relaxed);
	}

	/// The next datagram forwarded to worker `me`.
	pub(crate) fn poll_take(&self, me: u8, waiter: &Waiter) -> Poll<Forwarded> {
		let inbox = &self.inboxes[usize::from(me)];
		match inbox.datagrams.poll_pop(waiter) {
			Poll::Ready(Some((datagram, _charge))) => Poll::Ready(datagram),
			// The queue is never closed: it lives as long as the router.
			Poll::Ready(None) | Poll::Pending => Poll::Pending,
		}
	}
}

/// Connection ids whose first byte names the worker that issued them.
pub(crate) struct WorkerIds {
	worker: u8,
	random: RandomConnectionIdGenerator,
}

impl WorkerIds {
	pub(crate) fn new(worker: u8) -> Self {
		Self {
			worker,
			random: RandomConnectionIdGenerator::new(CID_LEN),
		}
	}
}

impl ConnectionIdGenerator for WorkerIds {
	fn generate_cid(&mut self) -> ConnectionId {
		let mut id = [0; CID_LEN];
		id.copy_from_slice(&self.random.generate_cid());
		id[0] = self.worker;
		ConnectionId::new(&id)
	}

	fn cid_len(&self) -> usize {
		CID_LEN
	}

	fn cid_lifetime(&self) -> Option<std::time::Duration> {
		None
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	fn datagram(payload: usize) -> Forwarded {
		Forwarded {
			from: "127.0.0.1:1".parse().unwrap(),
			local_ip: None,
			ecn: None,
			payload: BytesMut::zeroed(payload),
		}
	}

	#[test]
	fn only_short_headers_for_another_workers_ids_are_forwarded() {
		let router = Router::new(4, 1 << 20);
		let short = |owner: u8| [&[0x40, owner][..], &[7; 40]].concat();
		assert_eq!(router.owner(0, &short(2)), Some(2));
		assert_eq!(router.owner(2, &short(2)), None, "its own");
		assert_eq!(router.owner(0, &short(4)), None, "no such worker");
		let mut long = short(2);
		long[0] = 0xc0;
		assert_eq!(router.owner(0, &long), None, "a long header");
		assert_eq!(
			router.owner(0, &short(2)[..MIN_PACKET - 1]),
			None,
			"shorter than a packet"
		);
		assert_eq!(router.owner(0, &short(2)[..MIN_PACKET]), Some(2));
		assert_eq!(router.owner(0, &[]), None);
	}

	#[test]
	fn an_inbox_holds_at_most_its_bytes() {
		let router = Router::new(2, 3000);
		router.forward(1, datagram(1200));
		router.forward(1, datagram(1200));
		router.forward(1, datagram(1200));
		let each = (1200 + OVERHEAD) as u64;
		assert_eq!(
			router.stats(),
			RouterStats {
				forwarded: 2,
				dropped: 1,
				queued_bytes: 2 * each
			}
		);
		let waiter = Waiter::new(std::task::Waker::noop().clone());
		assert!(router.poll_take(1, &waiter).is_ready());
		assert!(router.poll_take(0, &waiter).is_pending(), "worker 0 got nothing");
		assert_eq!(router.stats().queued_bytes, each);
	}

	#[test]
	fn tiny_datagrams_are_charged_their_bookkeeping() {
		let router = Router::new(2, 64 << 10);
		for _ in 0..10_000 {
			router.forward(1, datagram(MIN_PACKET));
		}
		let stats = router.stats();
		assert!(stats.queued_bytes <= 64 << 10, "{stats:?}");
		assert_eq!(stats.forwarded, (64 << 10) / (MIN_PACKET + OVERHEAD) as u64);
	}

	#[test]
	fn a_workers_ids_start_with_its_index() {
		let mut ids = WorkerIds::new(3);
		let (a, b) = (ids.generate_cid(), ids.generate_cid());
		assert_eq!((a.len(), a[0], b[0]), (CID_LEN, 3, 3));
		assert_ne!(a, b);
	}
}
