//! Pieces shared by the harnesses that measure CPU time and throughput on a live kio runtime
//! (`udp`, `quic`) rather than instructions.

use std::time::Duration;

use kio::Runtime;

/// User + system CPU time of the whole process, every thread (living or exited):
/// `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`.
pub fn cpu_time() -> Duration {
	kio::process_cpu_time().expect("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)")
}

/// Waits (at most 5 s) until every other worker is parked, so the counters each publishes at
/// the end of a loop turn are those of its last turn. Runs on worker 0.
pub async fn settle(rt: &Runtime) {
	let deadline = kio::time::now() + Duration::from_secs(5);
	for index in 1..rt.workers() {
		let monitor = rt.monitor(index).unwrap();
		while !monitor.is_parked() && kio::time::now() < deadline {
			kio::yield_now().await;
		}
	}
}

/// The repeat whose `key` is the median.
pub fn median_by<T>(mut runs: Vec<T>, key: impl Fn(&T) -> f64) -> T {
	runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
	runs.swap_remove(runs.len() / 2)
}
