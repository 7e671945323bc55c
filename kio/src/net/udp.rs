//! UDP with segmentation offload in both directions.
//!
//! # Receive
//!
//! One multishot `recvmsg` per socket, armed on the first receive, picks buffers from the
//! socket's own provided buffer ring: [`UdpConfig::rx_buffers`] fixed-size buffers, each big enough
//! for a full GRO train (64 × [`UdpConfig::max_payload`], and never less than the largest UDP
//! payload), so nothing is truncated (envoyproxy/envoy#33474, quinn-rs/quinn#1354). One completion
//! brings one train; [`RecvTrain`] leases its buffer and splits it by the GRO segment size (the
//! last datagram may be shorter). Zero SQEs per received datagram.
//!
//! When the receiver holds every buffer, the kernel ends the multishot with `ENOBUFS`; the next
//! receive waits until a train is dropped (its buffer goes back to the ring) and re-arms. Datagrams
//! that arrive meanwhile wait in the socket's receive buffer.
//!
//! # Send
//!
//! A [`Transmit`] of equal-size datagrams (the last may be shorter) to one destination is one
//! `sendmsg` with a `UDP_SEGMENT` control message (GSO). The option is never set on the socket
//! itself: then leaving the message out would not turn GSO off (quinn-rs/quinn#2575). If the
//! kernel refuses GSO with `EIO` or `EINVAL` (it advertises it, but the path cannot do it:
//! quinn-rs/quinn#1128, #2202), GSO is turned off for the socket and the train is **resent** one
//! datagram per `sendmsg`, all staged together; later trains go out that way too.
//!
//! A burst to many peers has a cheaper path: [`UdpSocket::try_send_many`] hands up to 32
//! transmits to one `sendmmsg` with `MSG_DONTWAIT`, straight from the caller's buffers, and
//! stops at the first the kernel cannot take now (a full send buffer: `EAGAIN`) or that needs the
//! GSO fallback; the caller sends that one with [`UdpSocket::send`], which waits, and goes on.
//! A ring `sendmsg` pays per datagram for an operation slot, a completion, a task wake and a copy
//! of the payload into memory the operation owns: on the relay's fan-out (one datagram per viewer
//! per frame) the sender took 1,380 user-space instructions per datagram that way and about 580
//! with `sendmmsg` (callgrind, `bench --bin relay --callgrind`), for one system call per 32.
//!
//! ECN goes out as `IP_TOS`/`IPV6_TCLASS`, a source address as `IP_PKTINFO`/`IPV6_PKTINFO`; both
//! are reported on receive ([`RecvTrain::ecn`], [`RecvTrain::local_ip`]).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::sys::socket::{self, bind, get_int, set_int};
use crate::uring::udp::{self, ManyBuf, RECV_HEADER, SendBuf};
use crate::uring::{BufRing, Fd, MultiOp, Op, RxBuf, SendMeta};
use crate::{Park, Waiter};

/// The most datagrams one GSO send carries (the kernel's `UDP_MAX_SEGMENTS` is 64 before 6.x).
pub const MAX_GSO_SEGMENTS: usize = 64;
/// Send buffers a socket keeps for reuse.
const SEND_POOL: usize = 64;
/// The largest UDP payload (IPv4: 65535 − 20 − 8); receive buffers are never smaller.
const MAX_UDP_PAYLOAD: usize = 65_507;
/// `SO_NO_CHECK` (IPv4) and `UDP_NO_CHECK6_TX` (IPv6): with either set the kernel refuses GSO with
/// `EINVAL`, which is how [`UdpSocket::fail_next_gso`] forces the fallback on a real kernel.
const SO_NO_CHECK: libc::c_int = 11;
const UDP_NO_CHECK6_TX: libc::c_int = 101;
const SO_RCVBUFFORCE: libc::c_int = 33;
const SO_SNDBUFFORCE: libc::c_int = 32;

/// How a [`UdpSocket`] is set up.
#[derive(Clone, Debug)]
pub struct UdpConfig {
	reuse_port: bool,
	gro: bool,
	rx_buffers: u16,
	max_payload: usize,
	recv_buffer: Option<usize>,
	send_buffer: Option<usize>,
}

/// 32 buffers of 64 × 1472 bytes: 3 MiB of address space per socket, touched only as far as
/// datagrams fill it. Each completion takes one buffer, train or lone datagram, so the count
/// bounds *completions* not yet taken. Measured (`benches/results/udp.md`, 64 buffers, 2048
/// datagrams in flight): GSO/GRO trains never met `ENOBUFS`; lone datagrams ran the ring dry 166
/// (two CPUs) to 7,809 (one CPU) times per 500,000 and were re-armed without a loss.
impl Default for UdpConfig {
	fn default() -> Self {
		Self {
			reuse_port: false,
			gro: true,
			rx_buffers: 32,
			max_payload: 1472,
			recv_buffer: None,
			send_buffer: None,
		}
	}
}

impl UdpConfig {
	/// The defaults: GRO on, 32 receive buffers for trains of up to 64 × 1472-byte datagrams,
	/// the kernel's socket buffer sizes, no `SO_REUSEPORT`.
	pub fn new() -> Self {
		Self::default()
	}

	/// Sets `SO_REUSEPORT`, so each worker can bind its own socket on one port.
	pub fn reuse_port(mut self, on: bool) -> Self {
		self.reuse_port = on;
		self
	}

	/// Enables `UDP_GRO` (on by default).
	pub fn gro(mut self, on: bool) -> Self {
		self.gro = on;
		self
	}

	/// The number of receive buffers (rounded up to a power of two, at most 32768).
	pub fn rx_buffers(mut self, buffers: u16) -> Self {
		self.rx_buffers = buffers.clamp(1, 1 << 15).next_power_of_two();
		self
	}

	/// The largest datagram payload expected; a receive buffer holds 64 of them.
	pub fn max_payload(mut self, bytes: usize) -> Self {
		self.max_payload = bytes.max(1);
		self
	}

	/// `SO_RCVBUF` (tries `SO_RCVBUFFORCE` first, which needs `CAP_NET_ADMIN`).
	pub fn recv_buffer(mut self, bytes: usize) -> Self {
		self.recv_buffer = Some(bytes);
		self
	}

	/// `SO_SNDBUF` (tries `SO_SNDBUFFORCE` first).
	pub fn send_buffer(mut self, bytes: usize) -> Self {
		self.send_buffer = Some(bytes);
		self
	}

	/// Bytes per receive buffer: header, name and control space, then 64 maximum payloads.
	pub fn rx_buffer_size(&self) -> usize {
		RECV_HEADER + (MAX_GSO_SEGMENTS * self.max_payload).max(MAX_UDP_PAYLOAD)
	}
}

/// The ECN codepoint of a datagram (the low two bits of the TOS byte / traffic class).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Ecn {
	/// Not ECN-capable.
	NotEct = 0,
	/// ECN-capable, ECT(1).
	Ect1 = 1,
	/// ECN-capable, ECT(0).
	Ect0 = 2,
	/// Congestion experienced.
	Ce = 3,
}

impl Ecn {
	fn from_tos(tos: u8) -> Self {
		match tos & 0b11 {
			0 => Self::NotEct,
			1 => Self::Ect1,
			2 => Self::Ect0,
			_ => Self::Ce,
		}
	}
}

/// One send: a datagram, or a train of `segment_size`-byte datagrams (the last may be shorter)
/// to one destination.
#[derive(Clone, Copy, Debug)]
pub struct Transmit<'a> {
	/// Where to; `None` for the connected peer.
	pub destination: Option<SocketAddr>,
	/// The payload: one datagram, or the train's datagrams back to back.
	pub contents: &'a [u8],
	/// Splits `contents` into datagrams of this size (GSO); `None` sends one datagram.
	pub segment_size: Option<usize>,
	/// The ECN codepoint to send with.
	pub ecn: Option<Ecn>,
	/// The source address to send from (the socket must be bound to it or to the wildcard).
	pub src_ip: Option<IpAddr>,
}

impl<'a> Transmit<'a> {
	/// One datagram of `contents` to `destination`.
	pub fn new(destination: SocketAddr, contents: &'a [u8]) -> Self {
		Self {
			destination: Some(destination),
			contents,
			segment_size: None,
			ecn: None,
			src_ip: None,
		}
	}

	/// A train of `segment_size`-byte datagrams.
	pub fn segments(mut self, segment_size: usize) -> Self {
		self.segment_size = Some(segment_size);
		self
	}

	/// With an ECN codepoint.
	pub fn ecn(mut self, ecn: Ecn) -> Self {
		self.ecn = Some(ecn);
		self
	}

	/// From a source address.
	pub fn src_ip(mut self, ip: IpAddr) -> Self {
		self.src_ip = Some(ip);
		self
	}
}

/// A socket's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
	/// Receive completions delivered (GRO trains; a lone datagram is a train of one).
	pub trains: u64,
	/// Datagrams in those trains.
	pub datagrams: u64,
	/// Times the multishot receive ended (its completion without `F_MORE`).
	pub ends: u64,
	/// Times it was armed again after an end.
	pub rearms: u64,
	/// Ends caused by an empty buffer ring (`ENOBUFS`).
	pub enobufs: u64,
	/// Trains dropped because they did not fit their buffer (`MSG_TRUNC`).
	pub truncated: u64,
	/// Trains whose control messages did not fit (`MSG_CTRUNC`).
	pub control_truncated: u64,
	/// Sends that succeeded: ring `sendmsg` operations and messages of `sendmmsg` calls (a GSO
	/// train is one).
	pub sends: u64,
	/// `sendmmsg` calls that sent something ([`UdpSocket::try_send_many`]): system calls outside
	/// the ring, which its counters do not see.
	pub batches: u64,
	/// Times GSO failed and the train was resent one datagram at a time.
	pub gso_fallbacks: u64,
}

struct Rx {
	ring: Option<Rc<BufRing>>,
	op: Option<MultiOp>,
	arms: u64,
	/// A train [`UdpSocket::recv_from`] has only partly handed out.
	pending: Option<RecvTrain>,
}

/// A UDP socket on a kio worker. See the [module docs](self).
pub struct UdpSocket {
	fd: Rc<Fd>,
	local: SocketAddr,
	v6: bool,
	config: UdpConfig,
	gso: Cell<bool>,
	fail_next_gso: Cell<bool>,
	peer: Cell<Option<SocketAddr>>,
	rx: RefCell<Rx>,
	/// Boxed: a send's `msghdr` points into its own box, which must not move.
	#[allow(clippy::vec_box)]
	pool: RefCell<Vec<Box<SendBuf>>>,
	/// What a [`UdpSocket::try_send_many`] call points the kernel at.
	many: RefCell<ManyBuf>,
	stats: Cell<UdpStats>,
}

impl UdpSocket {
	/// Binds a socket with the default [`UdpConfig`].
	pub fn bind(addr: SocketAddr) -> io::Result<Self> {
		Self::bind_with(addr, &UdpConfig::default())
	}

	/// Binds a socket: GRO, `PKTINFO` and TOS reporting on, and the options of `config`.
	pub fn bind_with(addr: SocketAddr, config: &UdpConfig) -> io::Result<Self> {
		let fd = socket::socket(&addr, libc::SOCK_DGRAM)?;
		let v6 = addr.is_ipv6();
		if config.reuse_port {
			set_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
		}
		if let Some(bytes) = config.recv_buffer {
			let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
			if set_int(&fd, libc::SOL_SOCKET, SO_RCVBUFFORCE, bytes).is_err() {
				set_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes)?;
			}
		}
		if let Some(bytes) = config.send_buffer {
			let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
			if set_int(&fd, libc::SOL_SOCKET, SO_SNDBUFFORCE, bytes).is_err() {
				set_int(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes)?;
			}
		}
		if config.gro {
			set_int(&fd, libc::IPPROTO_UDP, crate::uring::UDP_GRO, 1)?;
		}
		if v6 {
			set_int(&fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
			set_int(&fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
			// For v4-mapped peers of a dual-stack socket; a v6-only socket refuses, harmlessly.
			let _ = set_int(&fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1);
			let _ = set_int(&fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
		} else {
			set_int(&fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
			set_int(&fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
		}
		bind(&fd, addr)?;
		let local = socket::local_addr(&fd)?;
		Ok(Self {
			fd: Rc::new(fd),
			local,
			v6,
			config: config.clone(),
			gso: Cell::new(true),
			fail_next_gso: Cell::new(false),
			peer: Cell::new(None),
			rx: RefCell::new(Rx {
				ring: None,
				op: None,
				arms: 0,
				pending: None,
			}),
			pool: RefCell::new(Vec::new()),
			many: RefCell::new(ManyBuf::default()),
			stats: Cell::new(UdpStats::default()),
		})
	}

	/// The address the socket is bound to.
	pub fn local_addr(&self) -> SocketAddr {
		self.local
	}

	/// Sets the default peer: sends without a destination go there, and only its datagrams are
	/// received. (A datagram socket's connect never waits.)
	pub fn connect(&self, addr: SocketAddr) -> io::Result<()> {
		socket::connect_datagram(&self.fd, crate::uring::for_family(addr, self.v6))?;
		self.peer.set(Some(addr));
		Ok(())
	}

	/// Turns the socket into a blocking `std::net::UdpSocket` with the same options (buffer
	/// sizes, `SO_REUSEPORT`, GRO and the control messages it asked for). Only for a socket that
	/// no operation has used yet: otherwise `Err` gives the socket back.
	pub fn into_std(self) -> Result<std::net::UdpSocket, Box<Self>> {
		let unused = {
			let rx = self.rx.borrow();
			rx.op.is_none() && rx.ring.is_none()
		};
		// Any other reference to the fd is an operation (or a pooled send buffer) of this socket.
		if !unused || Rc::strong_count(&self.fd) != 1 {
			return Err(Box::new(self));
		}
		let fd = Rc::clone(&self.fd);
		drop(self);
		let fd = Rc::into_inner(fd).expect("the socket held the only other reference");
		Ok(std::net::UdpSocket::from(fd.into_owned()))
	}

	/// The socket's counters.
	pub fn stats(&self) -> UdpStats {
		self.stats.get()
	}

	/// Whether sends still use GSO (the fallback turns it off).
	pub fn gso_enabled(&self) -> bool {
		self.gso.get()
	}

	/// Turns GSO on or off for this socket (off: a train goes out one `sendmsg` per datagram).
	pub fn set_gso_enabled(&self, on: bool) {
		self.gso.set(on);
	}

	/// The socket's receive buffer size in bytes (`SO_RCVBUF`, as the kernel reports it).
	pub fn recv_buffer_size(&self) -> io::Result<usize> {
		get_int(&self.fd, libc::SOL_SOCKET, libc::SO_RCVBUF).map(|v| v as usize)
	}

	/// The number of buffers in the receive ring.
	pub fn rx_buffers(&self) -> u16 {
		self.config.rx_buffers
	}

	/// Test hook: the next GSO send is refused by the kernel itself (`EINVAL`: the socket's
	/// checksum is turned off for that one send, which UDP GSO does not allow), so the fallback
	/// runs on a real kernel.
	#[doc(hidden)]
	pub fn fail_next_gso(&self) {
		self.fail_next_gso.set(true);
	}

	fn set_no_check(&self, on: bool) -> io::Result<()> {
		if self.v6 {
			set_int(&self.fd, libc::IPPROTO_UDP, UDP_NO_CHECK6_TX, on.into())
		} else {
			set_int(&self.fd, libc::SOL_SOCKET, SO_NO_CHECK, on.into())
		}
	}

	fn bump(&self, f: impl FnOnce(&mut UdpStats)) {
		let mut stats = self.stats.get();
		f(&mut stats);
		self.stats.set(stats);
	}

	fn take_buf(&self) -> Box<SendBuf> {
		self.pool.borrow_mut().pop().unwrap_or_else(SendBuf::new)
	}

	fn recycle(&self, buf: Box<SendBuf>) {
		let mut pool = self.pool.borrow_mut();
		if pool.len() < SEND_POOL {
			pool.push(buf);
		}
	}

	// ---- receive ----

	/// The next received train (a lone datagram is a train of one). Pending registers `waiter`
	/// on the receive (or, when the receiver holds every buffer, on the buffer ring).
	pub fn poll_recv(&self, waiter: &Waiter) -> Poll<io::Result<RecvTrain>> {
		loop {
			// A buffer to give back is dropped here, outside the borrow: giving it back may wake.
			match self.poll_recv_step(waiter) {
				Step::Ready(result) => return Poll::Ready(result),
				Step::Pending => return Poll::Pending,
				Step::Again(lease) => drop(lease),
			}
		}
	}

	/// Receives the next train.
	pub async fn recv(&self) -> io::Result<RecvTrain> {
		crate::wait(|w| self.poll_recv(w)).await
	}

	fn poll_recv_step(&self, waiter: &Waiter) -> Step {
		let mut rx = self.rx.borrow_mut();
		if let Some(train) = rx.pending.take() {
			return Step::Ready(Ok(train));
		}
		if rx.op.is_none() {
			let ring = match &rx.ring {
				Some(ring) => ring.clone(),
				None => match udp::buf_ring(self.config.rx_buffers, self.config.rx_buffer_size()) {
					Ok(ring) => rx.ring.insert(ring).clone(),
					Err(e) => return Step::Ready(Err(e)),
				},
			};
			// Arming on an empty ring would end at once with ENOBUFS (axboe/liburing#1275).
			if ring.poll_available(waiter).is_pending() {
				return Step::Pending;
			}
			match udp::recv_multi(&self.fd, &ring) {
				Ok(op) => rx.op = Some(op),
				Err(e) => return Step::Ready(Err(e)),
			}
			if rx.arms > 0 {
				self.bump(|s| s.rearms += 1);
			}
			rx.arms += 1;
		}
		let ring = rx.ring.clone().expect("armed with a ring");
		let op = rx.op.as_mut().expect("armed above");
		match op.poll_next(waiter) {
			Poll::Pending => Step::Pending,
			Poll::Ready(None) => {
				rx.op = None;
				self.bump(|s| s.ends += 1);
				Step::Again(None)
			}
			Poll::Ready(Some((res, flags))) => {
				let (res, lease) = udp::received(&ring, res, flags);
				if res == -libc::ENOBUFS {
					self.bump(|s| s.enobufs += 1);
					return Step::Again(lease);
				}
				if res < 0 {
					// The multishot ends with this error; the next receive re-arms.
					drop(rx);
					drop(lease);
					return Step::Ready(Err(io::Error::from_raw_os_error(-res)));
				}
				let Some(lease) = lease else {
					return Step::Ready(Err(io::Error::other("kio: a receive completion without a buffer")));
				};
				let Some(parsed) = udp::parse(lease.bytes()) else {
					return Step::Again(Some(lease));
				};
				if parsed.control_truncated {
					self.bump(|s| s.control_truncated += 1);
				}
				if parsed.truncated {
					self.bump(|s| s.truncated += 1);
					return Step::Again(Some(lease));
				}
				let payload = parsed.payload;
				let segment = parsed.meta.segment.map_or_else(|| payload.len(), usize::from).max(1);
				let train = RecvTrain {
					buf: lease,
					payload,
					segment,
					peer: parsed.peer.unwrap_or(self.local),
					dst: parsed.meta.dst,
					tos: parsed.meta.tos,
				};
				let datagrams = train.datagrams() as u64;
				self.bump(|s| {
					s.trains += 1;
					s.datagrams += datagrams;
				});
				Step::Ready(Ok(train))
			}
		}
	}

	/// Copies the next datagram into `buf` (truncating it, like `recv_from(2)`); the rest of a
	/// train waits for the next call.
	pub fn poll_recv_from(&self, waiter: &Waiter, buf: &mut [u8]) -> Poll<io::Result<(usize, SocketAddr)>> {
		let mut train = match self.poll_recv(waiter) {
			Poll::Ready(Ok(train)) => train,
			Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
			Poll::Pending => return Poll::Pending,
		};
		let first = train.segments().next().unwrap_or(&[]);
		let len = first.len();
		let copied = len.min(buf.len());
		buf[..copied].copy_from_slice(&first[..copied]);
		let peer = train.peer;
		if train.payload.len() > len {
			train.payload.start += len;
			self.rx.borrow_mut().pending = Some(train);
		}
		Poll::Ready(Ok((copied, peer)))
	}

	/// Receives one datagram into `buf`.
	pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
		crate::wait(|w| self.poll_recv_from(w, buf)).await
	}

	// ---- send ----

	/// Sends `transmit`: one `sendmsg` for a datagram or a GSO train (see the module docs). The
	/// payload is copied into a buffer the operation owns, so `transmit` need not outlive the
	/// call. Resolves to the bytes sent. Dropping the future cancels what is still in flight.
	pub fn send(&self, transmit: &Transmit<'_>) -> UdpSend<'_> {
		let state = match self.prepare(transmit) {
			Ok(state) => state,
			Err(e) => SendState::Failed(e),
		};
		UdpSend {
			socket: self,
			state,
			park: Park::new(),
		}
	}

	/// Sends one datagram to `addr`.
	pub async fn send_to(&self, buf: &[u8], addr: SocketAddr) -> io::Result<usize> {
		self.send(&Transmit::new(addr, buf)).await
	}

	/// Sends the front of `transmits` now, in order, straight from their buffers: `sendmmsg` calls
	/// of up to 32 that never wait, no ring operation and no copy. Returns how many went, and, if
	/// that is fewer than all, why the next one did not:
	/// - `Ok(())`: it cannot go now (the socket's send buffer is full, or its train needs the GSO
	///   fallback): send it with [`send`](Self::send), which waits and falls back, then carry on
	///   after it;
	/// - `Err(e)`: it failed (its datagrams are lost); carry on after it.
	///
	/// For a burst to many peers, where each transmit is a datagram or two, this is the cheap
	/// path: a ring `sendmsg` per datagram pays for its operation, its completion and a copy of
	/// the payload (docs/kio.md §5 has the figures).
	pub fn try_send_many(&self, transmits: &[Transmit<'_>]) -> (usize, io::Result<()>) {
		let mut sent = 0;
		let mut scratch = self.many.borrow_mut();
		while sent < transmits.len() {
			let rest = &transmits[sent..];
			// The run that may go directly: up to the first that cannot.
			let mut stop = Ok(());
			let mut plans = [None; udp::SEND_MANY];
			let mut len = 0;
			for t in rest.iter().take(udp::SEND_MANY) {
				match self.plan(t) {
					Ok((_, segment, _)) if segment > 0 && (!self.gso.get() || self.fail_next_gso.get()) => break,
					Ok(plan) => {
						plans[len] = Some(plan);
						len += 1;
					}
					Err(e) => {
						stop = Err(e);
						break;
					}
				}
			}
			if len == 0 {
				return (sent, stop);
			}
			let msgs = rest.iter().zip(&plans[..len]).map(|(t, plan)| {
				let (dest, segment, meta) = plan.expect("planned above");
				udp::OutMsg {
					dest,
					data: t.contents,
					meta: SendMeta {
						segment: (segment > 0).then_some(segment as u16),
						..meta
					},
				}
			});
			match udp::send_many(&self.fd, &mut scratch, msgs) {
				// The kernel reports a first message it could not send as an error, so this is not
				// expected; were it to happen, the ring's send (which waits) takes over.
				Ok(0) => return (sent, Ok(())),
				Ok(n) => {
					sent += n;
					self.bump(|s| {
						s.sends += n as u64;
						s.batches += 1;
					});
				}
				Err(e) => match e.raw_os_error() {
					Some(libc::EINTR) => {}
					Some(libc::EAGAIN) => return (sent, Ok(())),
					// GSO is advertised but this path cannot do it: `send` turns it off and
					// resends the train datagram by datagram.
					Some(libc::EIO | libc::EINVAL) if plans[0].is_some_and(|(_, segment, _)| segment > 0) => {
						return (sent, Ok(()));
					}
					_ => return (sent, Err(e)),
				},
			}
		}
		(sent, Ok(()))
	}

	/// A transmit checked, in the kernel's terms: its destination for this socket's family, its
	/// GSO segment size (0: one datagram) and its control messages but the segment size.
	fn plan(&self, t: &Transmit<'_>) -> io::Result<(Option<SocketAddr>, usize, SendMeta)> {
		let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
		let len = t.contents.len();
		let segment = match t.segment_size {
			Some(0) => return Err(invalid("a segment size of zero")),
			Some(size) if size < len => {
				if size > usize::from(u16::MAX) {
					return Err(invalid("a GSO segment size above 65535"));
				}
				if len.div_ceil(size) > MAX_GSO_SEGMENTS {
					return Err(invalid("more than 64 datagrams in one train"));
				}
				size
			}
			_ => 0,
		};
		let dest = t.destination.map(|d| crate::uring::for_family(d, self.v6));
		let target = t.destination.or_else(|| self.peer.get());
		let v4 = target.map_or(!self.v6, |d| match d {
			SocketAddr::V4(_) => true,
			SocketAddr::V6(v6) => v6.ip().to_ipv4_mapped().is_some(),
		});
		let meta = SendMeta {
			segment: None,
			tos: t.ecn.map(|e| e as u8),
			src: t.src_ip,
			v4,
		};
		Ok((dest, segment, meta))
	}

	fn prepare(&self, t: &Transmit<'_>) -> io::Result<SendState> {
		let (dest, segment, meta) = self.plan(t)?;
		let mut buf = self.take_buf();
		buf.prepare(dest, t.contents, &meta);
		Ok(SendState::Start {
			buf,
			dest,
			segment,
			meta,
		})
	}

	fn poll_send(&self, state: &mut SendState, waiter: &Waiter) -> Poll<io::Result<usize>> {
		loop {
			match std::mem::replace(state, SendState::Done) {
				SendState::Failed(e) => return Poll::Ready(Err(e)),
				SendState::Done => {
					return Poll::Ready(Err(io::Error::other("kio: send polled after it completed")));
				}
				SendState::Start {
					mut buf,
					dest,
					segment,
					meta,
				} => {
					if segment > 0 && !self.gso.get() {
						*state = self.split(buf, dest, segment, &meta)?;
						continue;
					}
					let mut hooked = false;
					if segment > 0 {
						hooked = self.fail_next_gso.replace(false) && self.set_no_check(true).is_ok();
						buf.set_meta(&SendMeta {
							segment: Some(segment as u16),
							..meta
						});
					}
					match udp::send_msg(&self.fd, buf) {
						Ok(op) => {
							*state = SendState::One {
								op,
								dest,
								segment,
								meta,
								hooked,
							}
						}
						Err(e) => {
							if hooked {
								let _ = self.set_no_check(false);
							}
							return Poll::Ready(Err(e));
						}
					}
				}
				SendState::One {
					mut op,
					dest,
					segment,
					meta,
					hooked,
				} => {
					let done = match op.poll(waiter) {
						Poll::Pending => {
							*state = SendState::One {
								op,
								dest,
								segment,
								meta,
								hooked,
							};
							return Poll::Pending;
						}
						Poll::Ready(done) => done,
					};
					if hooked {
						let _ = self.set_no_check(false);
					}
					let done = done?;
					match done.result() {
						Ok(sent) => {
							self.recycle(done.keep);
							self.bump(|s| s.sends += 1);
							return Poll::Ready(Ok(sent));
						}
						Err(e) if segment > 0 && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) => {
							// GSO is advertised but this path cannot do it: off for good on this
							// socket, and this train goes out again datagram by datagram.
							self.gso.set(false);
							self.bump(|s| s.gso_fallbacks += 1);
							*state = SendState::Start {
								buf: done.keep,
								dest,
								segment,
								meta,
							};
						}
						Err(e) => {
							self.recycle(done.keep);
							return Poll::Ready(Err(e));
						}
					}
				}
				SendState::Split { mut ops, sent, error } => {
					let (mut sent, mut error) = (sent, error);
					let mut i = 0;
					while i < ops.len() {
						match ops[i].poll(waiter) {
							Poll::Pending => i += 1,
							Poll::Ready(done) => {
								drop(ops.swap_remove(i));
								match done {
									Ok(done) => {
										match done.result() {
											Ok(n) => {
												sent += n;
												self.bump(|s| s.sends += 1);
											}
											Err(e) => {
												error.get_or_insert(e);
											}
										}
										self.recycle(done.keep);
									}
									Err(e) => {
										error.get_or_insert(e);
									}
								}
							}
						}
					}
					if ops.is_empty() {
						return Poll::Ready(match error {
							Some(e) => Err(e),
							None => Ok(sent),
						});
					}
					*state = SendState::Split { ops, sent, error };
					return Poll::Pending;
				}
			}
		}
	}

	/// Stages one `sendmsg` per datagram of `buf`'s train, all at once.
	fn split(
		&self,
		buf: Box<SendBuf>,
		dest: Option<SocketAddr>,
		segment: usize,
		meta: &SendMeta,
	) -> io::Result<SendState> {
		let mut ops = Vec::with_capacity(buf.data().len().div_ceil(segment));
		for datagram in buf.data().chunks(segment) {
			let mut one = self.take_buf();
			one.prepare(dest, datagram, meta);
			ops.push(udp::send_msg(&self.fd, one)?);
		}
		self.recycle(buf);
		Ok(SendState::Split {
			ops,
			sent: 0,
			error: None,
		})
	}
}

impl Drop for UdpSocket {
	fn drop(&mut self) {
		let rx = self.rx.get_mut();
		rx.pending = None;
		// Orphan the receive first (its cancel is staged), then let its ring go once it ends.
		rx.op = None;
		if let Some(ring) = rx.ring.take() {
			udp::close_buf_ring(&ring);
		}
		if self.fail_next_gso.get() {
			self.fail_next_gso.set(false);
		}
	}
}

impl std::fmt::Debug for UdpSocket {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("UdpSocket")
			.field("local", &self.local)
			.field("gso", &self.gso.get())
			.field("stats", &self.stats.get())
			.finish()
	}
}

enum Step {
	Ready(io::Result<RecvTrain>),
	Pending,
	/// Try again; drop this buffer first (outside the socket's borrow).
	Again(Option<RxBuf>),
}

enum SendState {
	Failed(io::Error),
	Start {
		buf: Box<SendBuf>,
		dest: Option<SocketAddr>,
		/// 0: one datagram.
		segment: usize,
		meta: SendMeta,
	},
	One {
		op: Op<SendBuf>,
		dest: Option<SocketAddr>,
		segment: usize,
		meta: SendMeta,
		/// The GSO test hook is on for this send.
		hooked: bool,
	},
	Split {
		ops: Vec<Op<SendBuf>>,
		sent: usize,
		error: Option<io::Error>,
	},
	Done,
}

/// The future of [`UdpSocket::send`]: it owns the payload's copy and the operations in flight.
#[must_use = "futures do nothing unless awaited"]
pub struct UdpSend<'a> {
	socket: &'a UdpSocket,
	state: SendState,
	park: Park,
}

impl Future for UdpSend<'_> {
	type Output = io::Result<usize>;

	fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
		let this = self.get_mut();
		let (socket, state) = (this.socket, &mut this.state);
		this.park.poll(cx, |waiter| socket.poll_send(state, waiter))
	}
}

impl Drop for UdpSend<'_> {
	fn drop(&mut self) {
		if let SendState::One { hooked: true, .. } = self.state {
			let _ = self.socket.set_no_check(false);
		}
	}
}

impl std::fmt::Debug for UdpSend<'_> {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("UdpSend").field("socket", &self.socket.local).finish()
	}
}

/// A received train of datagrams: its buffer is leased from the socket's ring until this drops.
pub struct RecvTrain {
	buf: RxBuf,
	payload: Range<usize>,
	segment: usize,
	peer: SocketAddr,
	dst: Option<IpAddr>,
	tos: Option<u8>,
}

impl RecvTrain {
	/// The sender.
	pub fn peer(&self) -> SocketAddr {
		self.peer
	}

	/// The address the datagrams were sent to (from `PKTINFO`).
	pub fn local_ip(&self) -> Option<IpAddr> {
		self.dst
	}

	/// The ECN codepoint they carried.
	pub fn ecn(&self) -> Option<Ecn> {
		self.tos.map(Ecn::from_tos)
	}

	/// The GRO segment size: every datagram but the last is this long.
	pub fn segment_size(&self) -> usize {
		self.segment
	}

	/// The datagrams back to back.
	pub fn payload(&self) -> &[u8] {
		&self.buf.bytes()[self.payload.clone()]
	}

	/// How many datagrams the train holds.
	pub fn datagrams(&self) -> usize {
		self.payload.len().div_ceil(self.segment).max(1)
	}

	/// The datagrams, split by the segment size.
	pub fn segments(&self) -> Segments<'_> {
		Segments {
			rest: self.payload(),
			size: self.segment,
			empty: self.payload.is_empty(),
		}
	}
}

impl std::fmt::Debug for RecvTrain {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("RecvTrain")
			.field("peer", &self.peer)
			.field("bytes", &self.payload.len())
			.field("segment", &self.segment)
			.field("local_ip", &self.dst)
			.field("tos", &self.tos)
			.finish()
	}
}

/// The datagrams of a [`RecvTrain`].
#[derive(Debug)]
pub struct Segments<'a> {
	rest: &'a [u8],
	size: usize,
	/// A zero-length datagram is one (empty) segment.
	empty: bool,
}

impl<'a> Iterator for Segments<'a> {
	type Item = &'a [u8];

	fn next(&mut self) -> Option<&'a [u8]> {
		if self.empty {
			self.empty = false;
			return Some(&[]);
		}
		if self.rest.is_empty() {
			return None;
		}
		let (first, rest) = self.rest.split_at(self.size.min(self.rest.len()));
		self.rest = rest;
		Some(first)
	}
}
