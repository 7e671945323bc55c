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

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
	/// Accept it; the budget now counts it.
	Accept,
	/// Ask for address validation first.
	Retry,
	/// Refuse it.
	Refuse,
}

/// Handshakes in progress, in total and per source address, shared across endpoints.
#[derive(Debug, Default)]
pub struct HandshakeBudget {
	limits: Limits,
	per_ip: Mutex<HashMap<IpAddr, usize>>,
	total: AtomicU64,
	retries: AtomicU64,
	refused: AtomicU64,
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
		Self {
			limits,
			..Self::default()
		}
	}

	/// The caps.
	pub fn limits(&self) -> Limits {
		self.limits
	}

	pub(crate) fn admit(&self, ip: IpAddr, validated: bool, may_retry: bool) -> Admit {
		let mut per_ip = self.per_ip.lock().expect("handshake budget lock");
		let total = self.total.load(Ordering::Relaxed) as usize;
		let from_ip = per_ip.get(&ip).copied().unwrap_or(0);
		if total >= self.limits.handshakes || from_ip >= self.limits.handshakes_per_ip {
			self.refused.fetch_add(1, Ordering::Relaxed);
			return Admit::Refuse;
		}
		if total >= self.limits.retry_above && !validated {
			if may_retry {
				self.retries.fetch_add(1, Ordering::Relaxed);
				return Admit::Retry;
			}
			self.refused.fetch_add(1, Ordering::Relaxed);
			return Admit::Refuse;
		}
		*per_ip.entry(ip).or_insert(0) += 1;
		self.total.fetch_add(1, Ordering::Relaxed);
		Admit::Accept
	}

	/// A handshake counted by `admit` ended (completed or failed).
	pub(crate) fn release(&self, ip: IpAddr) {
		let mut per_ip = self.per_ip.lock().expect("handshake budget lock");
		if let Some(count) = per_ip.get_mut(&ip) {
			*count -= 1;
			if *count == 0 {
				per_ip.remove(&ip);
			}
			self.total.fetch_sub(1, Ordering::Relaxed);
		}
	}

	/// Counters now.
	pub fn stats(&self) -> HandshakeStats {
		HandshakeStats {
			in_progress: self.total.load(Ordering::Relaxed),
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
		assert_eq!(budget.admit(a, false, true), Admit::Accept);
		assert_eq!(budget.admit(a, false, true), Admit::Accept);
		assert_eq!(budget.admit(a, true, true), Admit::Refuse, "a's share is spent");
		assert_eq!(budget.admit(b, false, true), Admit::Accept);
		assert_eq!(
			budget.admit(c, false, true),
			Admit::Retry,
			"past the threshold, validate first"
		);
		assert_eq!(
			budget.admit(c, false, false),
			Admit::Refuse,
			"a retried client that is still unvalidated"
		);
		assert_eq!(budget.admit(c, true, true), Admit::Accept);
		assert_eq!(budget.admit(c, true, true), Admit::Refuse, "the total is spent");
		budget.release(a);
		assert_eq!(budget.admit(c, true, true), Admit::Accept);
		assert_eq!(budget.stats().in_progress, 4);
		for ip in [a, b, c, c] {
			budget.release(ip);
		}
		assert_eq!(budget.stats().in_progress, 0);
		assert!(budget.per_ip.lock().unwrap().is_empty(), "no address is remembered");
	}
}
