//! Helpers shared by the socket tests (each test file includes this module).

#![allow(dead_code)] // Each test crate uses a different subset.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;

/// A loopback address with a port the kernel picks.
pub(crate) fn local() -> SocketAddr {
	"127.0.0.1:0".parse().unwrap()
}

/// Polls `fut` once and returns it (so its operation is staged, spilled or in the kernel).
pub(crate) async fn poll_once<F: Future + Unpin>(mut fut: F) -> F {
	std::future::poll_fn(|cx| {
		let _ = Pin::new(&mut fut).poll(cx);
		Poll::Ready(())
	})
	.await;
	fut
}
