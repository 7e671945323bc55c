//! Smoke test: a runtime starts, runs tasks, sleeps and joins.

use std::time::Duration;

#[test]
fn block_on_spawn_sleep_join() {
	let rt = kio::Runtime::builder().workers(1).pin(false).build().unwrap();
	let out = rt.block_on(async {
		let h = kio::spawn(async {
			kio::time::sleep(Duration::from_millis(5)).await;
			7
		});
		kio::yield_now().await;
		h.await.unwrap()
	});
	assert_eq!(out, 7);
}
