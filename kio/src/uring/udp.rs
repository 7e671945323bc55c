//! The UDP operations: a multishot `recvmsg` into a provided buffer ring, and a `sendmsg` whose
//! `msghdr`, iovec, address, control messages and payload live in one box the operation keeps;
//! and, outside the ring, a `sendmmsg` that does not wait, for bursts.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::rc::Rc;

use io_uring::{cqueue, opcode, types};

use super::addr::{self, ADDR_BYTES, RawAddr};
use super::buf::{BufRing, RxBuf};
use super::cmsg::{self, RecvMeta, SendControl, SendMeta};
use super::fd::Fd;
use super::op::{MultiOp, Op, Produces};
use super::{no_ring, with_ring};

/// Name space reserved in each received buffer: a `sockaddr_in6`.
pub(crate) const RECV_NAME: usize = ADDR_BYTES;
/// Control space reserved in each received buffer. What kio asks for takes at most 136 bytes
/// (`UDP_GRO` 24, TOS and traffic class 24 each, `IP_PKTINFO` 32, `IPV6_PKTINFO` 40, for a
/// dual-stack socket); a truncated control area is counted and its datagram still delivered.
pub(crate) const RECV_CONTROL: usize = 192;
/// `struct io_uring_recvmsg_out`: the header the kernel writes at the start of each buffer.
const OUT_HEADER: usize = 16;
/// Bytes of each received buffer before the payload.
pub(crate) const RECV_HEADER: usize = OUT_HEADER + RECV_NAME + RECV_CONTROL;

/// What a multishot `recvmsg` keeps: the fd and the `msghdr` giving the name and control sizes.
struct RecvHdr {
	_fd: Rc<Fd>,
	_hdr: libc::msghdr,
}

/// Registers a ring of `entries` receive buffers of `buf_size` bytes with this worker's ring.
pub(crate) fn buf_ring(entries: u16, buf_size: usize) -> io::Result<Rc<BufRing>> {
	with_ring(None, |ring, serial| ring.register_buf_ring(entries, buf_size, serial)).unwrap_or_else(|| Err(no_ring()))
}

/// Unregisters `ring` from its worker's ring as soon as no receive selects from it.
pub(crate) fn close_buf_ring(ring: &BufRing) {
	with_ring(Some(ring.serial()), |driver, _| driver.close_buf_ring(ring.bgid()));
}

/// Arms a multishot `recvmsg` on `fd` that picks buffers from `ring` (on the ring's worker).
pub(crate) fn recv_multi(fd: &Rc<Fd>, ring: &Rc<BufRing>) -> io::Result<MultiOp> {
	let keep = Box::new(RecvHdr {
		_fd: fd.clone(),
		_hdr: libc::msghdr {
			msg_name: std::ptr::null_mut(),
			msg_namelen: RECV_NAME as libc::socklen_t,
			msg_iov: std::ptr::null_mut(),
			msg_iovlen: 0,
			msg_control: std::ptr::null_mut(),
			msg_controllen: RECV_CONTROL,
			msg_flags: 0,
		},
	});
	let sqe = opcode::RecvMsgMulti::new(types::Fd(fd.raw()), &raw const keep._hdr, ring.bgid()).build();
	// The entry points at the boxed `msghdr` (kept by the slot until the terminal completion)
	// and selects buffers from `ring`, which `Produces::Buf` keeps registered and mapped while
	// the operation lives; the fd is kept open by the box's `Rc<Fd>`. A group id means something
	// only on the ring it was registered with: start there or fail.
	// SAFETY: io_uring buffer ownership: everything the entry references outlives its completion.
	unsafe { MultiOp::start(Some(ring.serial()), sqe, keep, Produces::Buf(ring.clone())) }
}

/// Turns a receive completion into its result and the buffer it used, if any (a failed
/// completion may still name one: it goes back to the ring when the lease drops).
pub(crate) fn received(ring: &Rc<BufRing>, res: i32, flags: u32) -> (i32, Option<RxBuf>) {
	let lease = cqueue::buffer_select(flags).map(|bid| ring.lease(bid, res.max(0) as usize));
	(res, lease)
}

/// A received buffer's layout.
#[derive(Debug)]
pub(crate) struct Parsed {
	pub(crate) peer: Option<SocketAddr>,
	pub(crate) meta: RecvMeta,
	pub(crate) payload: Range<usize>,
	/// The payload did not fit (never happens with buffers sized for a full GRO train).
	pub(crate) truncated: bool,
	/// The control messages did not fit.
	pub(crate) control_truncated: bool,
}

/// Parses a buffer a multishot `recvmsg` filled (`io_uring_recvmsg_out`, name, control, payload).
pub(crate) fn parse(buf: &[u8]) -> Option<Parsed> {
	let word = |at: usize| buf.get(at..at + 4).map(|b| u32::from_ne_bytes(b.try_into().unwrap()));
	let (namelen, controllen, payloadlen, flags) = (word(0)?, word(4)?, word(8)?, word(12)?);
	if buf.len() < RECV_HEADER {
		return None;
	}
	let name = &buf[OUT_HEADER..OUT_HEADER + (namelen as usize).min(RECV_NAME)];
	let control_at = OUT_HEADER + RECV_NAME;
	let control = &buf[control_at..control_at + (controllen as usize).min(RECV_CONTROL)];
	let payload_end = RECV_HEADER + (payloadlen as usize).min(buf.len() - RECV_HEADER);
	Some(Parsed {
		peer: addr::decode(name).map(addr::unmap),
		meta: cmsg::decode(control),
		payload: RECV_HEADER..payload_end,
		truncated: flags & libc::MSG_TRUNC as u32 != 0,
		control_truncated: flags & libc::MSG_CTRUNC as u32 != 0,
	})
}

/// One `sendmsg`'s memory: the header, its iovec, the destination, the control messages and the
/// payload. Boxed and reused (a socket keeps a pool), so a send allocates nothing in steady state.
pub(crate) struct SendBuf {
	fd: Option<Rc<Fd>>,
	hdr: libc::msghdr,
	iov: libc::iovec,
	addr: Option<RawAddr>,
	control: SendControl,
	control_len: usize,
	data: Vec<u8>,
}

impl SendBuf {
	pub(crate) fn new() -> Box<Self> {
		Box::new(Self {
			fd: None,
			hdr: libc::msghdr {
				msg_name: std::ptr::null_mut(),
				msg_namelen: 0,
				msg_iov: std::ptr::null_mut(),
				msg_iovlen: 0,
				msg_control: std::ptr::null_mut(),
				msg_controllen: 0,
				msg_flags: 0,
			},
			iov: libc::iovec {
				iov_base: std::ptr::null_mut(),
				iov_len: 0,
			},
			addr: None,
			control: SendControl([0; cmsg::SEND_CONTROL]),
			control_len: 0,
			data: Vec::new(),
		})
	}

	/// Fills the buffer: `contents` to `dest` (the connected peer if `None`) with `meta`.
	pub(crate) fn prepare(&mut self, dest: Option<SocketAddr>, contents: &[u8], meta: &SendMeta) {
		self.addr = dest.map(RawAddr::new);
		self.data.clear();
		self.data.extend_from_slice(contents);
		self.control_len = cmsg::encode(&mut self.control, meta);
	}

	/// Re-encodes the control messages (the payload and destination stay).
	pub(crate) fn set_meta(&mut self, meta: &SendMeta) {
		self.control_len = cmsg::encode(&mut self.control, meta);
	}

	pub(crate) fn data(&self) -> &[u8] {
		&self.data
	}
}

/// A one-buffer `msghdr` of `iov`, to `addr` (the connected peer if `None`), with the first
/// `control_len` bytes of `control` as control messages (none if 0).
fn header(
	iov: *mut libc::iovec,
	addr: Option<&mut RawAddr>,
	control: &mut SendControl,
	control_len: usize,
) -> libc::msghdr {
	let (msg_name, msg_namelen) = match addr {
		Some(addr) => (addr.as_mut_ptr().cast(), addr.len()),
		None => (std::ptr::null_mut(), 0),
	};
	let msg_control = match control_len {
		0 => std::ptr::null_mut(),
		_ => control.0.as_mut_ptr().cast(),
	};
	libc::msghdr {
		msg_name,
		msg_namelen,
		msg_iov: iov,
		msg_iovlen: 1,
		msg_control,
		msg_controllen: control_len,
		msg_flags: 0,
	}
}

/// Stages one `sendmsg` of `buf` on `fd`.
pub(crate) fn send_msg(fd: &Rc<Fd>, mut buf: Box<SendBuf>) -> io::Result<Op<SendBuf>> {
	buf.fd = Some(fd.clone());
	let b = &mut *buf;
	b.iov.iov_base = b.data.as_mut_ptr().cast();
	b.iov.iov_len = b.data.len();
	b.hdr = header(&raw mut b.iov, b.addr.as_mut(), &mut b.control, b.control_len);
	let sqe = opcode::SendMsg::new(types::Fd(fd.raw()), &raw const b.hdr)
		.flags(libc::MSG_NOSIGNAL as u32)
		.build();
	// SAFETY: the header, iovec, address, control area and payload all live in the box (the
	// payload in its Vec's heap buffer, which is not resized while the box is kept), which the
	// slot keeps until the terminal completion; the fd is kept open by the box's `Rc<Fd>`.
	unsafe { Op::start(sqe, buf) }
}

/// The most messages one [`send_many`] hands the kernel.
pub(crate) const SEND_MANY: usize = 32;

/// One message of a [`send_many`]: the payload stays the caller's, nothing is copied.
pub(crate) struct OutMsg<'a> {
	/// `None`: the connected peer.
	pub(crate) dest: Option<SocketAddr>,
	pub(crate) data: &'a [u8],
	pub(crate) meta: SendMeta,
}

/// What one `sendmmsg` points at: headers, iovecs, addresses and control areas, kept by the
/// socket and refilled per call (so a call allocates nothing).
#[derive(Default)]
pub(crate) struct ManyBuf {
	hdrs: Vec<libc::mmsghdr>,
	iovs: Vec<libc::iovec>,
	addrs: Vec<Option<RawAddr>>,
	controls: Vec<(SendControl, usize)>,
}

/// Sends up to [`SEND_MANY`] of `msgs` with one `sendmmsg` that does not wait (`MSG_DONTWAIT`:
/// kio's sockets are blocking, for the ring's sake). Returns how many the kernel took, from the
/// front; an error is the first message's (`EAGAIN` when the send buffer is full). The kernel
/// copies each payload before the call returns, so nothing outlives it.
pub(crate) fn send_many<'a>(
	fd: &Fd,
	scratch: &mut ManyBuf,
	msgs: impl Iterator<Item = OutMsg<'a>>,
) -> io::Result<usize> {
	let ManyBuf {
		hdrs,
		iovs,
		addrs,
		controls,
	} = scratch;
	hdrs.clear();
	iovs.clear();
	addrs.clear();
	controls.clear();
	for msg in msgs.take(SEND_MANY) {
		iovs.push(libc::iovec {
			iov_base: msg.data.as_ptr().cast_mut().cast(),
			iov_len: msg.data.len(),
		});
		addrs.push(msg.dest.map(RawAddr::new));
		let mut control = SendControl([0; cmsg::SEND_CONTROL]);
		let len = cmsg::encode(&mut control, &msg.meta);
		controls.push((control, len));
	}
	// The vectors are full now: the pointers taken below stay valid until they are next cleared.
	for ((iov, addr), (control, control_len)) in iovs.iter_mut().zip(addrs.iter_mut()).zip(controls.iter_mut()) {
		hdrs.push(libc::mmsghdr {
			msg_hdr: header(iov, addr.as_mut(), control, *control_len),
			msg_len: 0,
		});
	}
	if hdrs.is_empty() {
		return Ok(0);
	}
	let (count, flags) = (hdrs.len() as libc::c_uint, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
	// The headers point into the scratch vectors (not resized since) and at payloads the caller
	// borrows; the kernel copies everything before sendmmsg(2) returns and writes only `msg_len`.
	// SAFETY: every pointer sendmmsg(2) reads stays valid for the call (see above).
	let rc = unsafe { libc::sendmmsg(fd.raw(), hdrs.as_mut_ptr(), count, flags) };
	if rc < 0 {
		Err(io::Error::last_os_error())
	} else {
		Ok(rc as usize)
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn parse_reads_the_kernel_layout() {
		let mut buf = vec![0u8; RECV_HEADER + 10];
		let peer: SocketAddr = "127.0.0.9:77".parse().unwrap();
		let raw = RawAddr::new(peer);
		buf[0..4].copy_from_slice(&raw.len().to_ne_bytes());
		buf[4..8].copy_from_slice(&0u32.to_ne_bytes());
		buf[8..12].copy_from_slice(&10u32.to_ne_bytes());
		buf[OUT_HEADER..OUT_HEADER + 16].copy_from_slice(&{
			let mut b = [0u8; 16];
			b[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
			b[2..4].copy_from_slice(&77u16.to_be_bytes());
			b[4..8].copy_from_slice(&[127, 0, 0, 9]);
			b
		});
		let parsed = parse(&buf).unwrap();
		assert_eq!(parsed.peer, Some(peer));
		assert_eq!(parsed.payload, RECV_HEADER..RECV_HEADER + 10);
		assert!(!parsed.truncated);
		assert!(parse(&buf[..RECV_HEADER - 1]).is_none());
	}
}
