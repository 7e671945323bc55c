//! The io_uring driver: ring set-up and feature probe, the one `io_uring_enter` per loop turn,
//! operations and their ownership, cancellation, provided buffer rings, and teardown.
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
//! `EXT_ARG` (the enter timeout) or `NODROP`, without one of the opcodes kio issues, or with
//! io_uring disabled is refused with an [`Error::Unsupported`](crate::Error::Unsupported) that
//! names what is missing.
//!
//! # Operations (`op`)
//!
//! An operation is a slot in the ring's op slab. The slot **owns everything the kernel may touch**
//! (the fd, buffers, `msghdr`, cmsg space, socket address: one heap box whose contents never move)
//! from the moment its SQE is staged until its **terminal CQE** (the one without `F_MORE`). The
//! future or socket that started it holds only a key: `(slot index, generation)`, which is also
//! the SQE's `user_data`, so a CQE or a cancel can never reach a reused slot.
//!
//! Lifecycle of a slot:
//!
//! ```text
//!   start ──> Spilled ──(SQ has room)──> Staged ──(enter)──> InKernel ──(terminal CQE)──> Done
//!                │                                              │                          │
//!            owner drops: freed at once                     owner drops: Orphan,        owner polls:
//!            (the kernel never saw it)                      cancel SQE sent              result + box
//!                                                           terminal CQE: cleanup, free  handed back, free
//! ```
//!
//! - A full submission queue **spills** to a user-space queue, drained in order before every
//!   enter; starting an operation never fails because the ring is busy.
//! - An **orphan** (its owner dropped before the terminal CQE) keeps its box; a best-effort
//!   `ASYNC_CANCEL` keyed by the generation-tagged `user_data`, flagged `CQE_SKIP_SUCCESS`, is
//!   sent. The target's own terminal CQE, not the cancel, frees the slot. A completion that
//!   produced a resource for an orphan is cleaned up: an accepted fd is closed, a provided buffer
//!   goes back to its ring.
//! - A failed `io_uring_enter` never frees anything: slots are freed only by their terminal CQE
//!   (or, for spilled entries, before the kernel could see them).
//! - **Multishot** operations (receive, accept) queue every CQE in their slot while `F_MORE` is
//!   set; the CQE without it ends the operation, and the owner re-arms explicitly.
//!
//! # Waking
//!
//! Single-shot operations store one `Waker` (the owner is the only poller; for a kio task the
//! waker is a packed word, so storing it costs no allocation and no reference count). Multishot
//! operations belong to a socket that any number of tasks may poll through `&self`, so they keep a
//! [`WaiterList`](crate::WaiterList) and the CQE drains it (broadcast: a receiver that went away
//! cannot swallow a wake another needed). Dispatch only collects wakes into a [`Woken`]; the
//! executor runs them after it has released the ring's borrow, so no waker, and no user code,
//! ever runs while the ring is borrowed.
//!
//! # Unpark
//!
//! Each ring keeps one read armed on a blocking eventfd. Another thread that wakes a parked
//! worker writes to the eventfd; the read completes and the worker's `io_uring_enter` returns.
//!
//! # Teardown (`Drop for Ring`)
//!
//! 1. Every live operation becomes an orphan (its owner can no longer poll it); entries still in
//!    the spill queue never reached the kernel and are freed at once.
//! 2. Staged entries are submitted together with one `ASYNC_CANCEL_ANY`, re-sent every
//!    [`TEARDOWN_RECANCEL`] for requests that were not cancellable yet (`EALREADY`).
//! 3. The ring is reaped until no operation (and no eventfd read) is in flight, within
//!    [`TEARDOWN_DEADLINE`].
//! 4. The ring closes (the `IoUring` field is declared first, so it drops first), and only then
//!    is the memory the kernel could have touched freed. If the deadline passed with requests in
//!    flight, that memory is **leaked** instead: the kernel may still write it.

pub(crate) mod addr;
mod buf;
mod cmsg;
mod fd;
mod op;
pub(crate) mod tcp;
pub(crate) mod udp;

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::task::Waker;
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, squeue, types};

pub(crate) use self::addr::for_family;
pub(crate) use self::buf::{BufRing, RxBuf};
pub(crate) use self::cmsg::{SendMeta, UDP_GRO};
pub(crate) use self::fd::Fd;
pub(crate) use self::op::{MultiOp, Op};
use crate::Error;
use crate::waiter::Wakes;

/// `user_data` of the eventfd read. Operation `user_data` never sets bit 63 (see `op`).
const WAKE: u64 = u64::MAX;
/// `user_data` of cancels (per-op cancels and the teardown's cancel-any).
const CANCEL: u64 = u64::MAX - 1;
/// How long teardown waits for in-flight operations to finish before leaking their memory.
///
/// Socket operations cancel at once (they wait on poll, not in io-wq): `tests/teardown.rs`, with
/// 56 operations in flight (51 multishot receives, an accept, a read, a blocked write, a staged
/// send), measured 0.9-1.1 ms for the whole teardown. Two seconds only bounds a kernel that
/// cannot cancel something (a regular-file read in io-wq, say).
pub(crate) const TEARDOWN_DEADLINE: Duration = Duration::from_secs(2);
/// How often teardown repeats its cancel-any for requests that were running (`EALREADY`).
const TEARDOWN_RECANCEL: Duration = Duration::from_millis(50);
/// Extra enters one turn may spend draining the spill queue or a CQ overflow backlog, before it
/// lets tasks run again (the next turn continues, and does not park while anything is spilled).
const MAX_EXTRA_ENTERS: usize = 16;

/// The setup flags kio requires, by name, in the order they are probed.
pub(crate) const REQUIRED: [&str; 5] = [
	"IORING_SETUP_SINGLE_ISSUER",
	"IORING_SETUP_COOP_TASKRUN",
	"IORING_SETUP_DEFER_TASKRUN",
	"IORING_FEAT_EXT_ARG",
	"IORING_FEAT_NODROP",
];

/// The opcodes kio issues, by name; a kernel without one is refused when the runtime starts.
const REQUIRED_OPS: [(u8, &str); 9] = [
	(opcode::Read::CODE, "IORING_OP_READ"),
	(opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
	(opcode::SendMsg::CODE, "IORING_OP_SENDMSG"),
	(opcode::RecvMsg::CODE, "IORING_OP_RECVMSG"),
	(opcode::Accept::CODE, "IORING_OP_ACCEPT"),
	(opcode::Connect::CODE, "IORING_OP_CONNECT"),
	(opcode::Send::CODE, "IORING_OP_SEND"),
	(opcode::Recv::CODE, "IORING_OP_RECV"),
	(opcode::Shutdown::CODE, "IORING_OP_SHUTDOWN"),
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

/// The driver's resource counters for this thread (a kio worker is one thread), read by leak
/// tests: every one of `ops`, `orphans`, `bufs_out`, `buf_rings` and `fds` returns to zero once
/// every socket and operation is gone and their completions are reaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounters {
	/// Operation slots alive (owned or orphaned), in every ring on this thread.
	pub ops: u64,
	/// Of those, orphans: their owner dropped them before their terminal completion.
	pub orphans: u64,
	/// Provided buffers out of their rings: picked by the kernel and not yet returned (held by
	/// a received train, or queued in an operation's completions).
	pub bufs_out: u64,
	/// Provided buffer rings registered with a ring.
	pub buf_rings: u64,
	/// File descriptors owned by kio: sockets, and accepted connections not yet handed out.
	pub fds: u64,
	/// Cancels issued (total).
	pub cancels: u64,
	/// SQEs that went to the spill queue because the submission queue was full (total).
	pub spilled: u64,
	/// CQEs that matched no live operation (total; always zero unless kio has a bug).
	pub stray: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
	ops: Cell<u64>,
	orphans: Cell<u64>,
	bufs_out: Cell<u64>,
	buf_rings: Cell<u64>,
	fds: Cell<u64>,
	cancels: Cell<u64>,
	spilled: Cell<u64>,
	stray: Cell<u64>,
}

thread_local! {
	static COUNTERS: Counters = Counters::default();
}

/// Adds `delta` (wrapping, so a double release shows up as a huge number) to one counter.
pub(crate) fn count(which: fn(&Counters) -> &Cell<u64>, delta: i64) {
	let _ = COUNTERS.try_with(|counters| {
		let cell = which(counters);
		cell.set(cell.get().wrapping_add_signed(delta));
	});
}

/// This thread's driver counters (see [`IoCounters`]).
pub fn io_counters() -> IoCounters {
	COUNTERS
		.try_with(|c| IoCounters {
			ops: c.ops.get(),
			orphans: c.orphans.get(),
			bufs_out: c.bufs_out.get(),
			buf_rings: c.buf_rings.get(),
			fds: c.fds.get(),
			cancels: c.cancels.get(),
			spilled: c.spilled.get(),
			stray: c.stray.get(),
		})
		.unwrap_or_default()
}

/// Wakes collected while the ring was borrowed, run by the executor after it released it.
#[derive(Default)]
pub(crate) struct Woken {
	wakers: Vec<Waker>,
	lists: Option<Wakes>,
	/// Wakers replaced or dropped under the borrow: dropping a foreign waker is user code too.
	graveyard: Vec<Waker>,
}

impl Woken {
	fn list(&mut self, wakes: Wakes) {
		if wakes.is_empty() {
			return;
		}
		match &mut self.lists {
			Some(lists) => lists.append(wakes),
			None => self.lists = Some(wakes),
		}
	}

	/// Runs every wake and drops the replaced wakers. Call with no borrow of the ring held.
	pub(crate) fn wake(&mut self) {
		for waker in self.wakers.drain(..) {
			waker.wake();
		}
		if let Some(lists) = self.lists.take() {
			lists.wake();
		}
		self.graveyard.clear();
	}
}

pub(crate) struct Ring {
	// Field order is drop order: the ring (its fd and mappings) closes first; the memory the
	// kernel could have touched (`wake_buf`, the op slots' boxes, the buffer rings) is freed
	// only after that, and only when teardown proved nothing is in flight (else it is leaked).
	ring: IoUring,
	wake_fd: OwnedFd,
	/// The eventfd read's buffer: owned here, leaked if teardown cannot prove the read is over.
	wake_buf: Option<Box<u64>>,
	wake_armed: bool,
	/// Set by teardown: no more eventfd reads.
	closing: bool,
	ops: op::Slots,
	spill: VecDeque<squeue::Entry>,
	/// Registered provided-buffer rings, by buffer group id.
	buf_rings: Vec<Option<Rc<BufRing>>>,
	/// Completions copied out of the CQ before dispatch (dispatch may touch the ring).
	cqes: Vec<(u64, i32, u32)>,
	/// Test hook: the next enter reports this errno after the kernel consumed the entries.
	#[cfg(test)]
	fail_after_submit: Option<i32>,
	/// Wakers replaced under the borrow, handed to the next `Woken`.
	graveyard: Vec<Waker>,
	lists: Option<Wakes>,
	pub(crate) stats: RingStats,
}

impl Ring {
	/// Creates the ring on the calling thread. `denied` names features to treat as missing
	/// (for tests of the refusal path).
	pub(crate) fn new(entries: u32, denied: &[&'static str]) -> Result<Self, Error> {
		let ring = build(entries, denied)?;
		let wake_fd = crate::sys::eventfd().map_err(Error::Io)?;
		Ok(Self {
			ring,
			wake_fd,
			wake_buf: Some(Box::new(0)),
			wake_armed: false,
			closing: false,
			ops: op::Slots::default(),
			spill: VecDeque::new(),
			buf_rings: Vec::new(),
			cqes: Vec::new(),
			#[cfg(test)]
			fail_after_submit: None,
			graveyard: Vec::new(),
			lists: None,
			stats: RingStats::default(),
		})
	}

	pub(crate) fn wake_fd(&self) -> i32 {
		self.wake_fd.as_raw_fd()
	}

	/// How many entries the submission queue holds.
	pub(crate) fn sq_entries(&self) -> usize {
		self.ring.params().sq_entries() as usize
	}

	/// Whether entries wait in the spill queue: the worker must not park before they are in.
	pub(crate) fn has_spill(&self) -> bool {
		!self.spill.is_empty()
	}

	fn arm_wake(&mut self) {
		if self.wake_armed || self.closing {
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

	/// Stages `entry`, or spills it when the submission queue is full (or already spilling, to
	/// keep submission order). Returns whether it went to the spill queue.
	///
	/// # Safety
	///
	/// Every pointer in `entry` must stay valid until the entry's terminal CQE (for operations:
	/// it points into the slot's box or into a registered buffer ring the slot keeps alive).
	unsafe fn push(&mut self, entry: squeue::Entry) -> bool {
		if self.spill.is_empty() {
			// SAFETY: forwarded from this function's contract.
			if unsafe { self.ring.submission().push(&entry) }.is_ok() {
				return false;
			}
		}
		self.spill.push_back(entry);
		count(|c| &c.spilled, 1);
		true
	}

	/// Moves spilled entries into the submission queue while it has room, in order. An entry
	/// whose operation was dropped while it waited is discarded (the kernel never saw it).
	fn drain_spill(&mut self) {
		while let Some(entry) = self.spill.pop_front() {
			let user_data = entry.get_user_data();
			if self.discard_if_orphaned_in_spill(user_data) {
				continue;
			}
			// SAFETY: entries reach the spill queue only through `push`, whose contract covers
			// them; operations spilled were kept alive (not discarded above).
			if unsafe { self.ring.submission().push(&entry) }.is_err() {
				self.spill.push_front(entry);
				break;
			}
			self.ops.mark_staged(user_data);
		}
	}

	/// One loop turn's `io_uring_enter`: submits what is staged, and waits for a completion (up
	/// to `timeout`, or without limit) when `wait` is set; then reaps and dispatches every
	/// completion, collecting wakes into `woken`. Returns the number of CQEs reaped.
	///
	/// Extra enters happen only while the spill queue or a CQ overflow backlog needs them.
	pub(crate) fn enter(&mut self, wait: bool, timeout: Option<Duration>, woken: &mut Woken) -> io::Result<usize> {
		self.arm_wake();
		self.drain_spill();
		let wait = wait && self.spill.is_empty();
		let mut reaped = self.enter_once(wait, timeout, woken)?;
		for _ in 0..MAX_EXTRA_ENTERS {
			let overflow = self.ring.submission().cq_overflow();
			if self.spill.is_empty() && !overflow {
				break;
			}
			self.drain_spill();
			reaped += self.enter_once(false, None, woken)?;
		}
		woken.graveyard.append(&mut self.graveyard);
		if let Some(lists) = self.lists.take() {
			woken.list(lists);
		}
		Ok(reaped)
	}

	fn enter_once(&mut self, wait: bool, timeout: Option<Duration>, woken: &mut Woken) -> io::Result<usize> {
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
		// Count what the kernel consumed, error or not (ETIME and EINTR come after submission).
		let consumed = staged - self.ring.submission().len();
		self.stats.submissions += consumed as u64;
		#[cfg(test)]
		let result = match self.fail_after_submit.take() {
			Some(errno) => Err(io::Error::from_raw_os_error(errno)),
			None => result,
		};
		match result {
			Ok(_) => {}
			// ETIME: the timeout passed; EINTR: a signal; EBUSY: the CQ is full, reap first;
			// EAGAIN: the kernel could not allocate. Entries stay staged for the next enter, and
			// nothing is freed: the kernel may have consumed some of them.
			Err(e)
				if matches!(
					e.raw_os_error(),
					Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
				) => {}
			Err(e) => return Err(e),
		}
		Ok(self.reap(woken))
	}

	fn reap(&mut self, woken: &mut Woken) -> usize {
		let mut cqes = std::mem::take(&mut self.cqes);
		cqes.extend(
			self.ring
				.completion()
				.map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())),
		);
		let reaped = cqes.len();
		for &(user_data, result, flags) in &cqes {
			match user_data {
				WAKE => self.wake_armed = false,
				// Cancels skip their CQE on success; a failure (ENOENT: the target already
				// finished; EALREADY: it is running and will finish) changes nothing.
				CANCEL => {}
				_ => self.complete(user_data, result, flags, woken),
			}
		}
		cqes.clear();
		self.cqes = cqes;
		self.stats.completions += reaped as u64;
		reaped
	}

	/// Issues a best-effort cancel of the request tagged `user_data`.
	fn cancel(&mut self, user_data: u64) {
		let entry = opcode::AsyncCancel::new(user_data)
			.build()
			.user_data(CANCEL)
			.flags(squeue::Flags::SKIP_SUCCESS);
		count(|c| &c.cancels, 1);
		// SAFETY: a cancel SQE carries no pointer.
		unsafe { self.push(entry) };
	}

	/// Cancels every request in the ring (teardown).
	fn cancel_all(&mut self) {
		let entry = opcode::AsyncCancel2::new(types::CancelBuilder::any().all())
			.build()
			.user_data(CANCEL);
		count(|c| &c.cancels, 1);
		// SAFETY: a cancel SQE carries no pointer.
		let spilled = unsafe { self.push(entry) };
		if spilled {
			// Teardown empties the spill queue first, so this only happens when the SQ itself is
			// full of staged entries: submit them, then stage the cancel.
			let mut woken = Woken::default();
			let _ = self.enter_once(false, None, &mut woken);
			self.drain_spill();
		}
	}

	fn in_flight(&self) -> bool {
		self.wake_armed || self.ops.live() > 0
	}
}

impl Drop for Ring {
	fn drop(&mut self) {
		self.closing = true;
		let start = Instant::now();
		let deadline = start + TEARDOWN_DEADLINE;
		// 1. Nobody can poll these operations any more.
		self.orphan_all();
		self.discard_spill();
		// 2. Cancel everything, submitting staged entries with the cancel.
		let mut woken = Woken::default();
		let mut recancel = start;
		// 3. Reap to empty within the deadline.
		while self.in_flight() {
			let now = Instant::now();
			if now >= deadline {
				break;
			}
			if now >= recancel {
				self.cancel_all();
				recancel = now + TEARDOWN_RECANCEL;
			}
			let left = deadline.min(recancel).saturating_duration_since(now);
			if self
				.enter_once(true, Some(left.max(Duration::from_micros(100))), &mut woken)
				.is_err()
			{
				// An unexpected enter error: retry until the deadline rather than free early.
				continue;
			}
		}
		// Nothing to wake: every owner is gone. Drop what dispatch collected here, under no
		// borrow of anything else.
		woken.wake();
		self.graveyard.clear();
		drop(self.lists.take());
		if self.in_flight() {
			// 4. The kernel may still write these: leak them rather than free them.
			std::mem::forget(self.wake_buf.take());
			self.ops.leak();
			for ring in self.buf_rings.drain(..).flatten() {
				std::mem::forget(ring);
			}
			return;
		}
		// Nothing in flight: the fields now drop in order, the ring first (its close drops the
		// buffer registrations), then the memory. The counters forget those registrations here;
		// the buffer rings themselves stay in their field, which drops after the ring's.
		for ring in self.buf_rings.iter().flatten() {
			ring.unregistered();
		}
	}
}

impl Ring {
	/// Registers a provided-buffer ring of `entries` buffers of `buf_size` bytes.
	pub(crate) fn register_buf_ring(&mut self, entries: u16, buf_size: usize, serial: u64) -> io::Result<Rc<BufRing>> {
		let bgid = match self.buf_rings.iter().position(Option::is_none) {
			Some(free) => free,
			None if self.buf_rings.len() < usize::from(u16::MAX) => {
				self.buf_rings.push(None);
				self.buf_rings.len() - 1
			}
			None => return Err(io::Error::other("kio: every buffer group id is in use")),
		};
		let ring = Rc::new(BufRing::new(serial, bgid as u16, entries, buf_size)?);
		ring.register(&self.ring.submitter())?;
		self.buf_rings[bgid] = Some(ring.clone());
		Ok(ring)
	}

	/// Unregisters buffer group `bgid` as soon as no operation selects from it.
	pub(crate) fn close_buf_ring(&mut self, bgid: u16) {
		let Some(Some(ring)) = self.buf_rings.get(usize::from(bgid)) else {
			return;
		};
		ring.set_closing();
		self.maybe_unregister(bgid);
	}

	fn maybe_unregister(&mut self, bgid: u16) {
		let Some(Some(ring)) = self.buf_rings.get(usize::from(bgid)) else {
			return;
		};
		if !ring.is_closing() || ring.ops() > 0 {
			return;
		}
		// No request selects from the group any more: the kernel lets go of the ring memory here.
		let _ = self.ring.submitter().unregister_buf_ring(bgid);
		ring.unregistered();
		self.buf_rings[usize::from(bgid)] = None;
	}
}

/// Runs `f` with the current worker's ring, if this thread is a worker whose core serial is
/// `serial` (any worker when `None`) and the ring is not already borrowed.
pub(crate) fn with_ring<R>(serial: Option<u64>, f: impl FnOnce(&mut Ring, u64) -> R) -> Option<R> {
	crate::exec::with_core(|core| {
		if serial.is_some_and(|serial| serial != core.serial()) {
			return None;
		}
		// Only kio's own code borrows the ring, and never across user code; a failed borrow is
		// a kio bug, reported in debug builds and handled (as "no ring") in release builds.
		let Ok(mut ring) = core.ring().try_borrow_mut() else {
			debug_assert!(false, "kio: the ring is already borrowed");
			return None;
		};
		Some(f(&mut ring, core.serial()))
	})
	.flatten()
}

/// The error of an operation started or polled where its ring is not reachable.
pub(crate) fn no_ring() -> io::Error {
	io::Error::other("kio: I/O needs the kio worker that started it (is the runtime gone?)")
}

fn build(entries: u32, denied: &[&'static str]) -> Result<IoUring, Error> {
	let unsupported = |feature: &'static str, source: Option<io::Error>| Error::Unsupported { feature, source };
	let plain = IoUring::new(8).map_err(|e| unsupported("io_uring", Some(e)))?;
	drop(plain);
	let mut builder = IoUring::builder();
	type Step = (&'static str, fn(&mut io_uring::Builder));
	let steps: [Step; 3] = [
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
	// Room for every in-flight CQE, multishot bursts included; NODROP keeps overflow in the
	// kernel (and `enter` flushes it) rather than losing completions.
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
	let mut probe = io_uring::Probe::new();
	ring.submitter()
		.register_probe(&mut probe)
		.map_err(|e| unsupported("IORING_REGISTER_PROBE", Some(e)))?;
	for (code, name) in REQUIRED_OPS {
		if !probe.is_supported(code) || denied.contains(&name) {
			return Err(unsupported(name, None));
		}
	}
	Ok(ring)
}

#[cfg(test)]
mod tests {
	use std::io::Write;
	use std::os::fd::IntoRawFd;
	use std::task::Poll;

	use super::*;

	#[test]
	fn an_enter_that_fails_after_submitting_frees_nothing() {
		crate::block_on(async {
			let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
			let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
			let (server, _) = listener.accept().unwrap();
			let fd = Rc::new(Fd::new(server.into_raw_fd()));
			let mut op = tcp::recv(tcp::IoBuf::new(fd, 64)).unwrap();
			assert!(crate::wait(|w| Poll::Ready(op.poll(w).is_pending())).await);
			// Enter by hand: the kernel consumes the receive (it waits for data), then the enter
			// reports an error.
			let (result, unconsumed, live) = with_ring(None, |ring, _| {
				ring.fail_after_submit = Some(libc::EFAULT);
				let mut woken = Woken::default();
				let result = ring.enter(false, None, &mut woken);
				(result, ring.ring.submission().len(), ring.ops.live())
			})
			.unwrap();
			assert!(result.is_err(), "the hook made the enter fail");
			assert_eq!(unconsumed, 0, "the kernel took the entry before the error");
			assert_eq!(live, 1, "the operation, and the buffer the kernel may write, are kept");
			// The kernel still writes into the kept buffer, and the owner gets it back.
			client.write_all(b"still mine").unwrap();
			let done = crate::wait(|w| op.poll(w)).await.unwrap();
			assert_eq!(&done.keep.data[..done.result().unwrap()], b"still mine");
		});
		assert_eq!(io_counters().ops, 0);
		assert_eq!(io_counters().fds, 0);
	}
}
