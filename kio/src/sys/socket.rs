//! Socket system calls that do not wait: creating, configuring, binding and naming sockets.
//! (Everything that may wait goes through the ring.)
//!
//! Sockets are created **blocking**: io_uring arms its own poll for a socket operation that
//! cannot complete at once, whereas an `O_NONBLOCK` socket makes it fail with `EAGAIN`.

use std::io;
use std::net::SocketAddr;

use crate::uring::Fd;
use crate::uring::addr::RawAddr;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
	if rc < 0 {
		Err(io::Error::last_os_error())
	} else {
		Ok(rc)
	}
}

/// A new close-on-exec socket of type `ty` (`SOCK_DGRAM`, `SOCK_STREAM`) for `addr`'s family.
pub(crate) fn socket(addr: &SocketAddr, ty: libc::c_int) -> io::Result<Fd> {
	let domain = if addr.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
	// SAFETY: socket(2) takes no pointers; a non-negative result is a new fd we own.
	let raw = check(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) })?;
	Ok(Fd::new(raw))
}

pub(crate) fn set_int(fd: &Fd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
	// SAFETY: setsockopt(2) reads `size_of::<c_int>()` bytes from a live local.
	check(unsafe {
		libc::setsockopt(
			fd.raw(),
			level,
			name,
			(&raw const value).cast(),
			size_of::<libc::c_int>() as libc::socklen_t,
		)
	})
	.map(drop)
}

pub(crate) fn get_int(fd: &Fd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
	let mut value: libc::c_int = 0;
	let mut len = size_of::<libc::c_int>() as libc::socklen_t;
	// SAFETY: getsockopt(2) writes at most `len` bytes into a live local and updates `len`.
	check(unsafe { libc::getsockopt(fd.raw(), level, name, (&raw mut value).cast(), &raw mut len) })?;
	Ok(value)
}

pub(crate) fn bind(fd: &Fd, addr: SocketAddr) -> io::Result<()> {
	let raw = RawAddr::new(addr);
	// SAFETY: bind(2) reads `len` bytes of a live, correctly laid out socket address.
	check(unsafe { libc::bind(fd.raw(), raw.as_ptr(), raw.len()) }).map(drop)
}

/// Connects a datagram socket (sets its default peer; never waits).
pub(crate) fn connect_datagram(fd: &Fd, addr: SocketAddr) -> io::Result<()> {
	let raw = RawAddr::new(addr);
	// SAFETY: connect(2) reads `len` bytes of a live, correctly laid out socket address.
	check(unsafe { libc::connect(fd.raw(), raw.as_ptr(), raw.len()) }).map(drop)
}

pub(crate) fn listen(fd: &Fd, backlog: libc::c_int) -> io::Result<()> {
	// SAFETY: listen(2) takes no pointers.
	check(unsafe { libc::listen(fd.raw(), backlog) }).map(drop)
}

pub(crate) fn local_addr(fd: &Fd) -> io::Result<SocketAddr> {
	let mut raw = RawAddr::zeroed();
	let ptr = raw.as_mut_ptr();
	// SAFETY: getsockname(2) writes at most `len` bytes into the live buffer and updates `len`.
	check(unsafe { libc::getsockname(fd.raw(), ptr, raw.len_mut()) })?;
	raw.socket_addr()
		.ok_or_else(|| io::Error::other("unknown address family"))
}

pub(crate) fn peer_addr(fd: &Fd) -> io::Result<SocketAddr> {
	let mut raw = RawAddr::zeroed();
	let ptr = raw.as_mut_ptr();
	// SAFETY: getpeername(2) writes at most `len` bytes into the live buffer and updates `len`.
	check(unsafe { libc::getpeername(fd.raw(), ptr, raw.len_mut()) })?;
	raw.socket_addr()
		.ok_or_else(|| io::Error::other("unknown address family"))
}
