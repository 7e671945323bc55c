//! Jittered, doubling delays between attempts to reach a relay.

use std::time::Duration;

/// The first delay before dialling again.
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest delay between two attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Doubling delays between [`BACKOFF_MIN`] and [`BACKOFF_MAX`], each drawn from its upper half,
/// so clients (or relays) that lost a peer together do not all dial it at the same instant.
#[derive(Debug)]
pub struct Backoff {
	next: Duration,
	state: u64,
}

impl Backoff {
	/// A backoff whose jitter is drawn from `seed`.
	pub fn new(seed: u64) -> Self {
		Self {
			next: BACKOFF_MIN,
			state: seed | 1,
		}
	}

	/// The delay before the next attempt.
	pub fn delay(&mut self) -> Duration {
		// xorshift64: jitter, not secrecy.
		self.state ^= self.state << 13;
		self.state ^= self.state >> 7;
		self.state ^= self.state << 17;
		let fraction = 0.5 + (self.state >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
		let delay = self.next.mul_f64(fraction);
		self.next = (self.next * 2).min(BACKOFF_MAX);
		delay
	}

	/// Starts again from [`BACKOFF_MIN`].
	pub fn reset(&mut self) {
		self.next = BACKOFF_MIN;
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn backoff_doubles_to_its_cap_with_jitter_and_resets() {
		let mut backoff = Backoff::new(42);
		let delays: Vec<Duration> = (0..8).map(|_| backoff.delay()).collect();
		let caps = [1, 2, 4, 8, 10, 10, 10, 10].map(Duration::from_secs);
		for (delay, cap) in delays.iter().zip(caps) {
			assert!(
				*delay >= cap / 2 && *delay <= cap,
				"{delay:?} not in [{:?}, {cap:?}]",
				cap / 2
			);
		}
		assert!(delays[4..].windows(2).any(|w| w[0] != w[1]), "jittered: {delays:?}");
		backoff.reset();
		assert!(backoff.delay() <= BACKOFF_MIN);
	}
}
