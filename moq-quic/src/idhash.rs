//! The hasher of the maps keyed by ids this side hands out or bounds: stream ids, send-group
//! keys, connection handles. A peer cannot choose them freely (quinn-proto refuses a stream id
//! past the stream limit it granted; the rest are ours), so SipHash's resistance to chosen-key
//! flooding buys nothing there, while it cost 6.8% of the relay's user-space instructions per
//! delivered frame (`BuildHasher::hash_one`, inclusive, bench/results/relay-callgrind.md). With
//! this hasher the relay went from 35,389 to 32,952 instructions per delivered frame (−6.9%;
//! callgrind, fanout 1x100 at 5 fps, medians of 2 rounds side by side, spread 0.1%), and
//! `hash_one` left the top functions. Maps keyed by what a peer picks (subscribe ids, paths) keep
//! the standard hasher.
//!
//! One xor-multiply step per word (as rustc's Fx hash), finished by folding the well-mixed high
//! half into the low one: hashbrown picks buckets from the low bits, and stream ids step by 4,
//! which a bare multiply leaves constant in its two lowest bits (and a rotation alone spreads
//! badly: 105 of 256 buckets for 256 stream ids, against 183 with the fold; a random hash fills
//! about 162).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by ids (see the module docs).
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// See the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

const SEED: u64 = 0xf135_7aea_2e62_a9c5;

impl Hasher for IdHasher {
	fn finish(&self) -> u64 {
		self.0 ^ (self.0 >> 32)
	}

	fn write(&mut self, bytes: &[u8]) {
		for chunk in bytes.chunks(8) {
			let mut word = [0u8; 8];
			word[..chunk.len()].copy_from_slice(chunk);
			self.write_u64(u64::from_le_bytes(word));
		}
	}

	fn write_u64(&mut self, word: u64) {
		self.0 = (self.0 ^ word).wrapping_mul(SEED);
	}

	fn write_usize(&mut self, word: usize) {
		self.write_u64(word as u64);
	}

	fn write_u32(&mut self, word: u32) {
		self.write_u64(u64::from(word));
	}
}

#[cfg(test)]
mod tests {
	use std::collections::HashSet;
	use std::hash::BuildHasher;

	use super::*;

	#[test]
	fn stream_ids_spread_over_the_low_bits() {
		// Client-initiated unidirectional stream ids: 2, 6, 10, ... (a step of 4). A table of 256
		// buckets should see most of them used, not a quarter.
		let build = BuildHasherDefault::<IdHasher>::default();
		let buckets: HashSet<u64> = (0..256u64).map(|n| build.hash_one(4 * n + 2) & 255).collect();
		assert!(buckets.len() > 160, "{} of 256 buckets", buckets.len());
	}

	#[test]
	fn maps_work() {
		let mut map: IdMap<u64, u64> = IdMap::default();
		for n in 0..10_000 {
			map.insert(n * 4, n);
		}
		assert!((0..10_000).all(|n| map.get(&(n * 4)) == Some(&n)));
	}
}
