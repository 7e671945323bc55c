//! The TCP operations: multishot accept, connect, receive and send into boxed buffers the
//! operation keeps (the stream's own, or a caller's `Vec` lent for one operation), and shutdown.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use io_uring::{opcode, types};

use super::addr::RawAddr;
use super::fd::Fd;
use super::op::{MultiOp, Op, Produces};

/// A stream buffer: the kernel reads `data[start..end]` (send) or fills `data[end..]` (receive).
pub(crate) struct IoBuf {
	fd: Rc<Fd>,
	pub(crate) data: Vec<u8>,
	pub(crate) start: usize,
	pub(crate) end: usize,
}

impl IoBuf {
	pub(crate) fn new(fd: Rc<Fd>, capacity: usize) -> Box<Self> {
		Box::new(Self {
			fd,
			data: vec![0; capacity],
			start: 0,
			end: 0,
		})
	}
}

/// Stages a receive into `buf.data[buf.end..]` (what is before it stays as it is).
pub(crate) fn recv(buf: Box<IoBuf>) -> io::Result<Op<IoBuf>> {
	let room = &buf.data[buf.end..];
	let len = u32::try_from(room.len()).unwrap_or(u32::MAX);
	let ptr = room.as_ptr().cast_mut();
	let sqe = opcode::Recv::new(types::Fd(buf.fd.raw()), ptr, len).build();
	// SAFETY: the kernel writes at most `len` bytes at `ptr`, inside the Vec's heap buffer, which
	// the box keeps (unresized) until the terminal completion; the box keeps the fd open.
	unsafe { Op::start(sqe, buf) }
}

/// Stages a send of `buf.data[buf.start..buf.end]`.
pub(crate) fn send(buf: Box<IoBuf>) -> io::Result<Op<IoBuf>> {
	let bytes = &buf.data[buf.start..buf.end];
	let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
	let sqe = opcode::Send::new(types::Fd(buf.fd.raw()), bytes.as_ptr(), len)
		.flags(libc::MSG_NOSIGNAL)
		.build();
	// SAFETY: the kernel reads at most `len` bytes inside the Vec's heap buffer, which the box
	// keeps (unresized) until the terminal completion; the box keeps the fd open.
	unsafe { Op::start(sqe, buf) }
}

/// Arms a multishot accept on a listening `fd`; each completion's result is a new fd (or an
/// error), closed by the driver if nobody takes it.
pub(crate) fn accept_multi(fd: &Rc<Fd>) -> io::Result<MultiOp> {
	let sqe = opcode::AcceptMulti::new(types::Fd(fd.raw()))
		.flags(libc::SOCK_CLOEXEC)
		.build();
	// SAFETY: the entry carries no pointer (no peer address is asked for); the box keeps the
	// listening fd open until the terminal completion.
	unsafe { MultiOp::start(None, sqe, Box::new(fd.clone()), Produces::Fd) }
}

/// A connect's memory: the socket and the peer address.
pub(crate) struct ConnectBuf {
	fd: Rc<Fd>,
	addr: RawAddr,
}

/// Stages a connect of `fd` to `addr`.
pub(crate) fn connect(fd: Rc<Fd>, addr: SocketAddr) -> io::Result<Op<ConnectBuf>> {
	let buf = Box::new(ConnectBuf {
		fd,
		addr: RawAddr::new(addr),
	});
	let sqe = opcode::Connect::new(types::Fd(buf.fd.raw()), buf.addr.as_ptr(), buf.addr.len()).build();
	// SAFETY: the address lives in the box, kept by the slot until the terminal completion; the
	// box keeps the fd open.
	unsafe { Op::start(sqe, buf) }
}

/// Stages `shutdown(fd, how)`.
pub(crate) fn shutdown(fd: &Rc<Fd>, how: libc::c_int) -> io::Result<Op<Rc<Fd>>> {
	let sqe = opcode::Shutdown::new(types::Fd(fd.raw()), how).build();
	// SAFETY: the entry carries no pointer; the box keeps the fd open.
	unsafe { Op::start(sqe, Box::new(fd.clone())) }
}
