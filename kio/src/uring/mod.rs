//! The io_uring driver: ring set-up and feature probe, the one `io_uring_enter` per loop turn,
//! the unpark signal, and teardown.
//!
//! All `unsafe` of kio's I/O lives in this module. Each block names the rule it relies on; the
//! rules are the ring's: an SQE's buffers must stay valid and unmoved until its terminal CQE, and
//! nothing the kernel may still write is freed, even at teardown (it is leaked instead).
//!
//! # Set-up
//!
//! The ring is created on its worker's thread with `SINGLE_ISSUER | DEFER_TASKRUN |
//! COOP_TASKRUN`: completions are posted only when the worker enters with `GETEVENTS`, so the
//! kernel never interrupts it to run task work. A kernel without one of these flags, without
//! `EXT_ARG` (the enter timeout) or `NODROP`, or with io_uring disabled is refused with an
//! [`Error::Unsupported`](crate::Error::Unsupported) that names what is missing.
//!
//! # Unpark
//!
//! Each ring keeps one read armed on a blocking eventfd. Another thread that wakes a parked
//! worker writes to the eventfd; the read completes and the worker's `io_uring_enter` returns.

pub(crate) mod sys;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, squeue, types};

use crate::Error;

/// `user_data` of the eventfd read.
const WAKE: u64 = u64::MAX;
/// `user_data` of a cancel at teardown.
const CANCEL: u64 = u64::MAX - 1;
/// How long teardown waits for in-flight operations to finish before leaking their memory.
const TEARDOWN_DEADLINE: Duration = Duration::from_secs(2);

/// The setup flags kio requires, by name, in the order they are probed.
pub(crate) const REQUIRED: [&str; 5] = [
	"IORING_SETUP_SINGLE_ISSUER",
	"IORING_SETUP_COOP_TASKRUN",
	"IORING_SETUP_DEFER_TASKRUN",
	"IORING_FEAT_EXT_ARG",
	"IORING_FEAT_NODROP",
];

/// Counters of the ring's work, per worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
	/// `io_uring_enter` calls.
	pub enters: u64,
	/// SQEs handed to the kernel.
	pub submissions: u64,
	/// CQEs reaped.
	pub completions: u64,
}

pub(crate) struct Ring {
	ring: IoUring,
	wake_fd: OwnedFd,
	/// The eventfd read's buffer: owned here, leaked if teardown cannot prove the read is over.
	wake_buf: Option<Box<u64>>,
	wake_armed: bool,
	pub(crate) stats: RingStats,
}

impl Ring {
	/// Creates the ring on the calling thread. `denied` names features to treat as missing
	/// (for tests of the refusal path).
	pub(crate) fn new(entries: u32, denied: &[&'static str]) -> Result<Self, Error> {
		let ring = build(entries, denied)?;
		let wake_fd = sys::eventfd().map_err(Error::Io)?;
		Ok(Self {
			ring,
			wake_fd,
			wake_buf: Some(Box::new(0)),
			wake_armed: false,
			stats: RingStats::default(),
		})
	}

	pub(crate) fn wake_fd(&self) -> i32 {
		self.wake_fd.as_raw_fd()
	}

	fn arm_wake(&mut self) {
		if self.wake_armed {
			return;
		}
		let buf = self.wake_buf.as_mut().expect("wake buffer lives until teardown");
		let sqe = opcode::Read::new(types::Fd(self.wake_fd.as_raw_fd()), (&raw mut **buf).cast(), 8)
			.build()
			.user_data(WAKE);
		// SAFETY: io_uring rule "buffers stay valid until the terminal CQE": the read's 8-byte
		// buffer is a Box owned by the ring struct, never moved (Box contents are stable), and
		// freed only after teardown has reaped this read's CQE (or leaked otherwise).
		if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
			self.wake_armed = true;
		}
	}

	/// One `io_uring_enter`: submits what is staged, and waits for a completion (up to
	/// `timeout`, or without limit) when `wait` is set. Returns the number of CQEs reaped.
	pub(crate) fn enter(&mut self, wait: bool, timeout: Option<Duration>) -> io::Result<usize> {
		self.arm_wake();
		let staged = self.ring.submission().len();
		let submitter = self.ring.submitter();
		let result = match (wait, timeout) {
			(true, Some(timeout)) => {
				let ts = types::Timespec::from(timeout);
				submitter.submit_with_args(1, &types::SubmitArgs::new().timespec(&ts))
			}
			(true, None) => submitter.submit_and_wait(1),
			// SAFETY: io_uring_enter(2) with no argument struct (`None`, size of sigset_t is
			// ignored without EXT_ARG); GETEVENTS with min_complete 0 runs deferred task work
			// so completions are posted, without waiting.
			(false, _) => unsafe {
				submitter.enter::<libc::sigset_t>(staged as u32, 0, io_uring::EnterFlags::GETEVENTS.bits(), None)
			},
		};
		self.stats.enters += 1;
		match result {
			Ok(submitted) => self.stats.submissions += submitted as u64,
			// ETIME: the timeout passed; EINTR: a signal; EBUSY: the CQ is full, reap first.
			Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
			Err(e) => return Err(e),
		}
		Ok(self.reap())
	}

	fn reap(&mut self) -> usize {
		let mut reaped = 0;
		for cqe in self.ring.completion() {
			reaped += 1;
			if cqe.user_data() == WAKE {
				self.wake_armed = false;
			}
		}
		self.stats.completions += reaped as u64;
		reaped
	}
}

impl Drop for Ring {
	fn drop(&mut self) {
		// Cancel the eventfd read and reap until its terminal CQE, within a deadline.
		if self.wake_armed {
			let cancel = opcode::AsyncCancel::new(WAKE)
				.build()
				.user_data(CANCEL)
				.flags(squeue::Flags::SKIP_SUCCESS);
			// SAFETY: a cancel SQE carries no buffer.
			let _ = unsafe { self.ring.submission().push(&cancel) };
			let deadline = Instant::now() + TEARDOWN_DEADLINE;
			while self.wake_armed {
				let left = deadline.saturating_duration_since(Instant::now());
				if left.is_zero() || self.enter(true, Some(left)).is_err() {
					break;
				}
			}
		}
		if self.wake_armed {
			// The kernel may still write the buffer: leak it rather than free it.
			std::mem::forget(self.wake_buf.take());
		}
	}
}

fn build(entries: u32, denied: &[&'static str]) -> Result<IoUring, Error> {
	let unsupported = |feature: &'static str, source: Option<io::Error>| Error::Unsupported { feature, source };
	let plain = IoUring::new(8).map_err(|e| unsupported("io_uring", Some(e)))?;
	drop(plain);
	let mut builder = IoUring::builder();
	let steps: [(&'static str, fn(&mut io_uring::Builder)); 3] = [
		(REQUIRED[0], |b| {
			b.setup_single_issuer();
		}),
		(REQUIRED[1], |b| {
			b.setup_coop_taskrun();
		}),
		(REQUIRED[2], |b| {
			b.setup_defer_taskrun();
		}),
	];
	// Add the flags one at a time so a refusal names the flag the kernel does not know.
	for (feature, add) in steps {
		add(&mut builder);
		if denied.contains(&feature) {
			return Err(unsupported(feature, None));
		}
		if let Err(e) = builder.build(8) {
			return Err(unsupported(feature, Some(e)));
		}
	}
	builder.setup_cqsize(entries.saturating_mul(4).max(64));
	let ring = builder.build(entries).map_err(Error::Io)?;
	let params = ring.params();
	for (feature, present) in [
		(REQUIRED[3], params.is_feature_ext_arg()),
		(REQUIRED[4], params.is_feature_nodrop()),
	] {
		if !present || denied.contains(&feature) {
			return Err(unsupported(feature, None));
		}
	}
	Ok(ring)
}
