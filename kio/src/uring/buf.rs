//! Provided buffer rings (`IORING_REGISTER_PBUF_RING`) and the leases of received buffers.
//!
//! One mapping holds the ring of buffer descriptors (page-aligned, as the kernel requires) and
//! then the buffers themselves, all of one fixed size: **not** an incremental ring
//! (`IOU_PBUF_RING_INC` is buggy with multishot `recvmsg`: axboe/liburing#1433, #1619). Pages are
//! faulted in lazily, so a large buffer that only ever receives small datagrams costs one page.
//!
//! # Ownership of a buffer id
//!
//! Every buffer id is in exactly one place: **in the ring** (the kernel may pick it and write it
//! at any time), or **out** (the kernel picked it and posted a completion naming it; nothing
//! writes it until it is put back). Out ids are held by an operation's queued completions, or by
//! an [`RxBuf`] lease; both put the id back (the driver for an orphan's completions, the lease on
//! drop). Only out buffers are ever read, so no read races a kernel write.
//!
//! The mapping is freed when the last `Rc` goes. The driver holds one while the ring is
//! registered, so the kernel never sees freed memory; a lease outliving its socket (or its
//! runtime) keeps the memory alive by itself.
//!
//! When every buffer is out, a multishot receive ends with `ENOBUFS` (axboe/liburing#1275). The
//! socket then waits on [`BufRing::poll_available`] and re-arms when a lease comes back.

use std::cell::{Cell, RefCell};
use std::io;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::task::Poll;

use io_uring::Submitter;
use io_uring::types::BufRingEntry;

use super::count;
use crate::Waiter;
use crate::waiter::{WaiterList, Wakes};

const PAGE: usize = 4096;

/// A registered ring of `entries` buffers of `buf_size` bytes for buffer group `bgid`.
pub(crate) struct BufRing {
	/// The core serial of the worker whose ring it is registered with.
	serial: u64,
	bgid: u16,
	entries: u16,
	buf_size: usize,
	map: NonNull<u8>,
	map_len: usize,
	/// Offset of buffer 0 in the mapping.
	bufs: usize,
	/// The next tail to publish (user space owns the tail; the kernel owns the head).
	tail: Cell<u16>,
	/// Buffer ids out of the ring.
	out: Cell<u32>,
	/// Operations in flight that select from this group.
	ops: Cell<u32>,
	registered: Cell<bool>,
	closing: Cell<bool>,
	/// Set when someone waits for a buffer to come back.
	starved: Cell<bool>,
	waiters: RefCell<WaiterList>,
}

impl BufRing {
	pub(super) fn new(serial: u64, bgid: u16, entries: u16, buf_size: usize) -> io::Result<Self> {
		if !entries.is_power_of_two() || entries > 1 << 15 || buf_size == 0 || buf_size > u32::MAX as usize {
			return Err(io::Error::new(
				io::ErrorKind::InvalidInput,
				"a buffer ring needs a power-of-two count up to 32768 of buffers up to 4 GiB",
			));
		}
		let ring_bytes = (usize::from(entries) * size_of::<BufRingEntry>()).next_multiple_of(PAGE);
		let map_len = ring_bytes + usize::from(entries) * buf_size;
		// SAFETY: mmap(2) of fresh anonymous private memory; no existing mapping is touched.
		let map = unsafe {
			libc::mmap(
				std::ptr::null_mut(),
				map_len,
				libc::PROT_READ | libc::PROT_WRITE,
				libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
				-1,
				0,
			)
		};
		if map == libc::MAP_FAILED {
			return Err(io::Error::last_os_error());
		}
		let this = Self {
			serial,
			bgid,
			entries,
			buf_size,
			map: NonNull::new(map.cast()).expect("mmap never returns null on success"),
			map_len,
			bufs: ring_bytes,
			tail: Cell::new(0),
			out: Cell::new(0),
			ops: Cell::new(0),
			registered: Cell::new(false),
			closing: Cell::new(false),
			starved: Cell::new(false),
			waiters: RefCell::new(WaiterList::new()),
		};
		for bid in 0..entries {
			this.write_entry(bid);
		}
		this.publish();
		Ok(this)
	}

	pub(super) fn register(&self, submitter: &Submitter<'_>) -> io::Result<()> {
		// SAFETY: io_uring_register_buf_ring(3): the ring memory (page-aligned, `entries`
		// descriptors) and every buffer it names stay mapped until the group is unregistered or
		// the io_uring closed: the driver keeps an `Rc` to this mapping until then.
		unsafe { submitter.register_buf_ring_with_flags(self.map.as_ptr() as u64, self.entries, self.bgid, 0) }?;
		self.registered.set(true);
		count(|c| &c.buf_rings, 1);
		Ok(())
	}

	/// The kernel let go of the ring (unregistered, or the io_uring closed).
	pub(super) fn unregistered(&self) {
		if self.registered.replace(false) {
			count(|c| &c.buf_rings, -1);
		}
	}

	pub(crate) fn serial(&self) -> u64 {
		self.serial
	}

	pub(crate) fn bgid(&self) -> u16 {
		self.bgid
	}

	/// Buffers in the ring, available to the kernel.
	pub(crate) fn available(&self) -> u32 {
		u32::from(self.entries) - self.out.get()
	}

	pub(super) fn set_closing(&self) {
		self.closing.set(true);
	}

	pub(super) fn is_closing(&self) -> bool {
		self.closing.get()
	}

	pub(super) fn ops(&self) -> u32 {
		self.ops.get()
	}

	pub(super) fn op_started(&self) {
		self.ops.set(self.ops.get() + 1);
	}

	pub(super) fn op_finished(&self) {
		self.ops.set(self.ops.get() - 1);
	}

	/// A completion named a buffer of this ring: it is out now.
	pub(super) fn taken(&self) {
		self.out.set(self.out.get() + 1);
		count(|c| &c.bufs_out, 1);
	}

	fn write_entry(&self, bid: u16) {
		let idx = usize::from(self.tail.get() & (self.entries - 1));
		let addr = self.map.as_ptr() as u64 + (self.bufs + usize::from(bid) * self.buf_size) as u64;
		// SAFETY: `idx < entries`, so the descriptor lies in the ring part of the live mapping;
		// the slot is past the published tail, so the kernel does not read it until `publish`.
		// `set_*` leave the `resv` field (the tail, in descriptor 0) alone.
		let entry = unsafe { &mut *self.map.as_ptr().cast::<BufRingEntry>().add(idx) };
		entry.set_addr(addr);
		entry.set_len(self.buf_size as u32);
		entry.set_bid(bid);
		self.tail.set(self.tail.get().wrapping_add(1));
	}

	fn publish(&self) {
		// SAFETY: the tail is descriptor 0's `resv` field, in the live mapping, and the kernel
		// reads it with an acquire load: this release store publishes the descriptors above.
		let tail = unsafe { &*BufRingEntry::tail(self.map.as_ptr().cast()).cast::<AtomicU16>() };
		tail.store(self.tail.get(), Ordering::Release);
	}

	/// Puts an out buffer back in the ring. Returns the wakes owed to tasks that waited for a
	/// buffer (run them with no borrow of the ring held).
	pub(super) fn put(&self, bid: u16) -> Wakes {
		debug_assert!(bid < self.entries && self.out.get() > 0);
		self.write_entry(bid);
		self.publish();
		self.out.set(self.out.get() - 1);
		count(|c| &c.bufs_out, -1);
		if self.starved.replace(false) {
			self.waiters.borrow_mut().take()
		} else {
			Wakes::none()
		}
	}

	/// Ready when a buffer is in the ring; otherwise registers `waiter` to be woken when one
	/// comes back.
	pub(crate) fn poll_available(&self, waiter: &Waiter) -> Poll<()> {
		if self.available() > 0 {
			return Poll::Ready(());
		}
		self.starved.set(true);
		self.waiters.borrow_mut().register(waiter);
		Poll::Pending
	}

	/// Leases out buffer `bid`, of which the kernel filled `len` bytes.
	pub(crate) fn lease(self: &Rc<Self>, bid: u16, len: usize) -> RxBuf {
		debug_assert!(bid < self.entries);
		RxBuf {
			ring: self.clone(),
			bid,
			len: len.min(self.buf_size),
		}
	}
}

impl Drop for BufRing {
	fn drop(&mut self) {
		debug_assert!(!self.registered.get(), "a registered buffer ring is never freed");
		// SAFETY: munmap(2) of the mapping this struct created; the kernel no longer uses it
		// (unregistered, or its io_uring closed with nothing in flight), and no lease is left
		// (each holds an `Rc`).
		unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
	}
}

/// A received buffer, leased from its ring until dropped.
pub(crate) struct RxBuf {
	ring: Rc<BufRing>,
	bid: u16,
	len: usize,
}

impl RxBuf {
	/// The bytes the kernel wrote.
	pub(crate) fn bytes(&self) -> &[u8] {
		let start = self.ring.bufs + usize::from(self.bid) * self.ring.buf_size;
		// The buffer is out of the ring (this lease holds its id), so the kernel does not write
		// it; it wrote these `len <= buf_size` bytes before posting the completion that handed
		// the id over, and that completion was reaped on this thread (the CQ tail load is an
		// acquire).
		// SAFETY: slice validity: initialised, unaliased by writers, and mapped while `ring` lives.
		unsafe { std::slice::from_raw_parts(self.ring.map.as_ptr().add(start), self.len) }
	}
}

impl Drop for RxBuf {
	fn drop(&mut self) {
		self.ring.put(self.bid).wake();
	}
}

impl std::fmt::Debug for RxBuf {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("RxBuf")
			.field("bgid", &self.ring.bgid)
			.field("bid", &self.bid)
			.field("len", &self.len)
			.finish()
	}
}
