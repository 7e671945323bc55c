//! Waiting for whichever of two futures finishes first: a session or a deadline, an accept or
//! the shutdown.
//!
//! [`race`] is a plain future that holds its two futures once, in place. An `async fn` taking
//! both by value and pinning them into locals holds each twice (the argument and the local), and
//! a race of a race four times: on the relay, a session's final wait measured 2.2 KB, 0.6 KB of
//! it the three futures it waits on.

use std::pin::Pin;
use std::task::{Context, Poll};

/// Which future finished.
#[derive(Debug, PartialEq, Eq)]
pub enum Either<A, B> {
	/// The first one, with its output.
	Left(A),
	/// The second one, with its output.
	Right(B),
}

pin_project_lite::pin_project! {
	/// See [`race`].
	#[must_use = "futures do nothing unless awaited"]
	pub struct Race<A, B> {
		#[pin]
		a: A,
		#[pin]
		b: B,
	}
}

/// The first of two futures to finish; the left one wins a tie. The other is dropped with the
/// race.
pub fn race<A: Future, B: Future>(a: A, b: B) -> Race<A, B> {
	Race { a, b }
}

impl<A: Future, B: Future> Future for Race<A, B> {
	type Output = Either<A::Output, B::Output>;

	fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
		let this = self.project();
		if let Poll::Ready(out) = this.a.poll(cx) {
			return Poll::Ready(Either::Left(out));
		}
		this.b.poll(cx).map(Either::Right)
	}
}
