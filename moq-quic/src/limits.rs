//! What a peer can make an endpoint hold before and around its handshake.
//!
//! A handshake in progress costs a `quinn_proto::Connection` (crypto state, buffers, sent-packet
//! records) and our driver task: about 25 KB each here (see the relay's README for the
//! measurement). Without a cap, one socket sending thousands of Initials held hundreds of
//! megabytes for the idle timeout. [`HandshakeBudget`] caps handshakes in progress in total and
//! per source address, and past a threshold asks unvalidated addresses for a QUIC Retry first: a
//! Retry costs us nothing to keep (the token is stateless), and a spoofed source never comes back
//! with it. Handshakes that do not finish within [`Limits::handshake_timeout`] are closed.
//!
//! The budget is shared by every endpoint made from one [`Config`](crate::Config) (a relay's
//! workers), so the caps hold for the process, not per worker.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kio::sync::{Budget, Charge, KeyAccount, Keyed};

/// The caps on handshakes in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
	/// Handshakes in progress at once, from everywhere; more are refused.
	pub handshakes: usize,
	/// Handshakes in progress at once from one IP address; more are refused.
	pub handshakes_per_ip: usize,
	/// Handshakes in progress beyond which a client whose address is not validated is sent a
	/// Retry before anything is kept for it.
	pub retry_above: usize,
	/// How long a handshake may take before the connection is closed.
	pub handshake_timeout: Duration,
}

impl Default for Limits {
	fn default() -> Self {
		Self {
			handshakes: 1024,
			handshakes_per_ip: 32,
			retry_above: 64,
			handshake_timeout: Duration::from_secs(10),
		}
	}
}

/// What to do with a new connection attempt.
#[derive(Debug)]
pub(crate) enum Admit {
	/// Accept it; the charge counts it until the handshake ends.
	Accept(Handshake),
	/// Ask for address validation first.
	Retry,
	/// Refuse it.
	Refuse,
}

/// A handshake in progress, counted against its address's share and the total until it drops.
pub(crate) type Handshake = Charge<KeyAccount<IpAddr>>;

/// Handshakes in progress, in total and per source address, shared across endpoints.
#[derive(Debug)]
pub struct HandshakeBudget {
	limits: Limits,
	in_progress: Arc<Keyed<IpAddr>>,
	retries: AtomicU64,
	refused: AtomicU64,
}

impl Default for HandshakeBudget {
	fn default() -> Self {
		Self::new(Limits::default())
	}
}

/// A snapshot of a [`HandshakeBudget`], for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandshakeStats {
	/// Handshakes in progress.
	pub in_progress: u64,
	/// Retries sent.
	pub retries: u64,
	/// Connection attempts refused by the caps.
	pub refused: u64,
}

impl HandshakeBudget {
	/// A budget with `limits`.
	pub fn new(limits: Limits) -> Self {
		let total = Budget::new(limits.handshakes as u64);
		Self {
			limits,
			in_progress: Keyed::new(limits.handshakes_per_ip as u64, total),
			retries: AtomicU64::new(0),
			refused: AtomicU64::new(0),
		}
	}

	/// The caps.
	pub fn limits(&self) -> Limits {
		self.limits
	}

	pub(crate) fn admit(&self, ip: IpAddr, validated: bool, may_retry: bool) -> Admit {
		let total = self.in_progress.total().used() as usize;
		if total >= self.limits.retry_above && !validated {
			let full =
				total >= self.limits.handshakes || self.in_progress.held(&ip) >= self.limits.handshakes_per_ip as u64;
			if may_retry && !full {
				self.retries.fetch_add(1, Ordering::Relaxed);
				return Admit::Retry;
			}
			self.refused.fetch_add(1, Ordering::Relaxed);
			return Admit::Refuse;
		}
		match self.in_progress.charge(ip, 1) {
			Some(handshake) => Admit::Accept(handshake),
			None => {
				self.refused.fetch_add(1, Ordering::Relaxed);
				Admit::Refuse
			}
		}
	}

	/// Counters now.
	pub fn stats(&self) -> HandshakeStats {
		HandshakeStats {
			in_progress: self.in_progress.total().used(),
			retries: self.retries.load(Ordering::Relaxed),
			refused: self.refused.load(Ordering::Relaxed),
		}
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn caps_total_and_per_address_and_retries_unvalidated_past_the_threshold() {
		let budget = HandshakeBudget::new(Limits {
			handshakes: 4,
			handshakes_per_ip: 2,
			retry_above: 3,
			handshake_timeout: Duration::from_secs(1),
		});
		let a: IpAddr = "10.0.0.1".parse().unwrap();
		let b: IpAddr = "10.0.0.2".parse().unwrap();
		let c: IpAddr = "10.0.0.3".parse().unwrap();
		let accept = |admit: Admit| match admit {
			Admit::Accept(handshake) => handshake,
			other => panic!("{other:?}"),
		};
		let a1 = accept(budget.admit(a, false, true));
		let _a2 = accept(budget.admit(a, false, true));
		assert!(
			matches!(budget.admit(a, true, true), Admit::Refuse),
			"a's share is spent"
		);
		let _b1 = accept(budget.admit(b, false, true));
		assert!(
			matches!(budget.admit(c, false, true), Admit::Retry),
			"past the threshold, validate first"
		);
		assert!(
			matches!(budget.admit(c, false, false), Admit::Refuse),
			"a retried client that is still unvalidated"
		);
		let _c1 = accept(budget.admit(c, true, true));
		assert!(
			matches!(budget.admit(c, true, true), Admit::Refuse),
			"the total is spent"
		);
		drop(a1);
		let _c2 = accept(budget.admit(c, true, true));
		assert_eq!(budget.stats().in_progress, 4);
		drop((_a2, _b1, _c1, _c2));
		assert_eq!(budget.stats().in_progress, 0);
		assert_eq!(budget.in_progress.keys(), 0, "no address is remembered");
	}
}
