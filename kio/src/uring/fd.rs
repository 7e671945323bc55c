//! File descriptors owned by kio.
//!
//! A socket's fd is shared (`Rc<Fd>`) by the socket and by every operation that names it, so it
//! is closed only when the socket is gone **and** every such operation reached its terminal
//! completion: an SQE carries the fd *number*, and a number closed and reused before the SQE is
//! submitted would aim the operation at another file.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::count;

/// An open file descriptor, closed on drop; counted in [`IoCounters::fds`](super::IoCounters).
#[derive(Debug)]
pub(crate) struct Fd(RawFd);

impl Fd {
	/// Takes ownership of `raw`, which the caller just created.
	pub(crate) fn new(raw: RawFd) -> Self {
		count(|c| &c.fds, 1);
		Self(raw)
	}

	/// Takes ownership of an fd an accept completion produced (already counted by the driver
	/// when it reaped the completion).
	pub(crate) fn adopt(raw: RawFd) -> Self {
		Self(raw)
	}

	pub(crate) fn raw(&self) -> RawFd {
		self.0
	}

	/// Hands the fd over to std (no longer counted or closed by kio).
	pub(crate) fn into_owned(self) -> OwnedFd {
		let raw = self.0;
		std::mem::forget(self);
		count(|c| &c.fds, -1);
		// SAFETY: OwnedFd::from_raw_fd needs an open fd that nothing else owns: this `Fd` owned
		// it and was consumed without closing it.
		unsafe { OwnedFd::from_raw_fd(raw) }
	}
}

impl Drop for Fd {
	fn drop(&mut self) {
		close(self.0);
	}
}

/// Closes an fd the driver owns (an accepted connection nobody claimed).
pub(crate) fn close(raw: RawFd) {
	// SAFETY: close(2) on an fd this process owns and nothing else references: an `Fd` is
	// dropped once, and the driver closes only fds its own completions produced and never
	// handed out.
	let rc = unsafe { libc::close(raw) };
	debug_assert!(rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EINTR));
	count(|c| &c.fds, -1);
}
