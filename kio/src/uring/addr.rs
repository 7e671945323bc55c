//! Socket addresses in the kernel's layout, encoded and decoded byte by byte (no casts).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Bytes of a `sockaddr_in6`, the largest address kio passes.
pub(crate) const ADDR_BYTES: usize = size_of::<libc::sockaddr_in6>();

/// A socket address as the kernel reads and writes it (`sockaddr_in` or `sockaddr_in6`).
///
/// Aligned like `sockaddr_in6`, so a pointer to `bytes` is a valid `*const sockaddr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct RawAddr {
	bytes: [u8; ADDR_BYTES],
	len: u32,
}

impl RawAddr {
	/// An empty buffer for the kernel to fill (`getsockname`, `accept`).
	pub(crate) const fn zeroed() -> Self {
		Self {
			bytes: [0; ADDR_BYTES],
			len: ADDR_BYTES as u32,
		}
	}

	pub(crate) fn new(addr: SocketAddr) -> Self {
		let mut bytes = [0u8; ADDR_BYTES];
		let len = match addr {
			SocketAddr::V4(v4) => {
				bytes[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
				bytes[2..4].copy_from_slice(&v4.port().to_be_bytes());
				bytes[4..8].copy_from_slice(&v4.ip().octets());
				size_of::<libc::sockaddr_in>()
			}
			SocketAddr::V6(v6) => {
				bytes[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
				bytes[2..4].copy_from_slice(&v6.port().to_be_bytes());
				// Like std: flowinfo and scope id are stored as given.
				bytes[4..8].copy_from_slice(&v6.flowinfo().to_ne_bytes());
				bytes[8..24].copy_from_slice(&v6.ip().octets());
				bytes[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
				size_of::<libc::sockaddr_in6>()
			}
		};
		Self { bytes, len: len as u32 }
	}

	pub(crate) fn as_ptr(&self) -> *const libc::sockaddr {
		self.bytes.as_ptr().cast()
	}

	pub(crate) fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
		self.bytes.as_mut_ptr().cast()
	}

	pub(crate) fn len(&self) -> u32 {
		self.len
	}

	pub(crate) fn len_mut(&mut self) -> &mut u32 {
		&mut self.len
	}

	pub(crate) fn socket_addr(&self) -> Option<SocketAddr> {
		decode(&self.bytes[..(self.len as usize).min(ADDR_BYTES)])
	}
}

/// Decodes a `sockaddr_in`/`sockaddr_in6` the kernel wrote.
pub(crate) fn decode(bytes: &[u8]) -> Option<SocketAddr> {
	let family = u16::from_ne_bytes(bytes.get(0..2)?.try_into().ok()?);
	let port = u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?);
	match i32::from(family) {
		libc::AF_INET => {
			let ip: [u8; 4] = bytes.get(4..8)?.try_into().ok()?;
			Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
		}
		libc::AF_INET6 => {
			let flowinfo = u32::from_ne_bytes(bytes.get(4..8)?.try_into().ok()?);
			let ip: [u8; 16] = bytes.get(8..24)?.try_into().ok()?;
			let scope = u32::from_ne_bytes(bytes.get(24..28)?.try_into().ok()?);
			Some(SocketAddr::V6(SocketAddrV6::new(
				Ipv6Addr::from(ip),
				port,
				flowinfo,
				scope,
			)))
		}
		_ => None,
	}
}

/// `addr` as an IPv6 address if `v6` (IPv4 becomes v4-mapped), unchanged otherwise.
pub(crate) fn for_family(addr: SocketAddr, v6: bool) -> SocketAddr {
	match (addr, v6) {
		(SocketAddr::V4(v4), true) => SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port()),
		_ => addr,
	}
}

/// Undoes v4-mapping, so a dual-stack socket reports IPv4 peers as IPv4.
pub(crate) fn unmap(addr: SocketAddr) -> SocketAddr {
	match addr {
		SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
			Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
			None => addr,
		},
		SocketAddr::V4(_) => addr,
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn addresses_round_trip_through_the_kernel_layout() {
		for addr in [
			"127.0.0.1:4443".parse::<SocketAddr>().unwrap(),
			"[::1]:9".parse().unwrap(),
			SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 65535, 7, 3)),
		] {
			assert_eq!(RawAddr::new(addr).socket_addr(), Some(addr));
		}
		assert_eq!(decode(&[0; 4]), None);
	}

	#[test]
	fn mapping_round_trips() {
		let v4: SocketAddr = "10.1.2.3:80".parse().unwrap();
		let mapped = for_family(v4, true);
		assert!(mapped.is_ipv6());
		assert_eq!(unmap(mapped), v4);
		assert_eq!(for_family(v4, false), v4);
	}
}
