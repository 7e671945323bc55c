//! Waiting for whichever of two futures finishes first: a session or a deadline, an accept or
//! the shutdown.

use std::pin::pin;
use std::task::Poll;

/// Which future finished.
#[derive(Debug, PartialEq, Eq)]
pub enum Either<A, B> {
	/// The first one, with its output.
	Left(A),
	/// The second one, with its output.
	Right(B),
}

/// The first of two futures to finish; the left one wins a tie. The other is dropped.
pub async fn race<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
	let mut a = pin!(a);
	let mut b = pin!(b);
	std::future::poll_fn(|cx| {
		if let Poll::Ready(out) = a.as_mut().poll(cx) {
			return Poll::Ready(Either::Left(out));
		}
		if let Poll::Ready(out) = b.as_mut().poll(cx) {
			return Poll::Ready(Either::Right(out));
		}
		Poll::Pending
	})
	.await
}
