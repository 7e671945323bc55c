//! Control messages: the ones kio sends (`UDP_SEGMENT`, ECN through `IP_TOS`/`IPV6_TCLASS`,
//! source address through `IP_PKTINFO`/`IPV6_PKTINFO`) and the ones it reads (`UDP_GRO`, the
//! received TOS/traffic class, the destination address from `PKTINFO`).
//!
//! Encoded and decoded byte by byte in the kernel's layout (`cmsghdr` is `size_t len, int level,
//! int type`, each message padded to `size_t` alignment), so no pointer casts are needed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `SOL_UDP`/`IPPROTO_UDP`.
const SOL_UDP: i32 = libc::IPPROTO_UDP;
/// `UDP_SEGMENT`: the GSO segment size of one `sendmsg` (a `u16`).
pub(crate) const UDP_SEGMENT: i32 = 103;
/// `UDP_GRO`: on a socket, enables receive offload; as a cmsg, the segment size (an `int`).
pub(crate) const UDP_GRO: i32 = 104;

const HDR: usize = size_of::<libc::cmsghdr>();
const ALIGN: usize = size_of::<usize>();

const fn align(len: usize) -> usize {
	(len + ALIGN - 1) & !(ALIGN - 1)
}

/// Bytes one message with `data` bytes of payload takes (`CMSG_SPACE`).
pub(crate) const fn space(data: usize) -> usize {
	HDR + align(data)
}

/// Control space for everything kio sends: a segment size, a TOS and an IPv6 packet info.
pub(crate) const SEND_CONTROL: usize =
	space(size_of::<u16>()) + space(size_of::<libc::c_int>()) + space(size_of::<libc::in6_pktinfo>());

/// The control buffer of one send, aligned like `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct SendControl(pub(crate) [u8; SEND_CONTROL]);

/// What a send asks for beyond the payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendMeta {
	/// GSO segment size (every datagram this long, the last one maybe shorter).
	pub(crate) segment: Option<u16>,
	/// The TOS byte / traffic class (ECN in its low two bits).
	pub(crate) tos: Option<u8>,
	/// The source address.
	pub(crate) src: Option<IpAddr>,
	/// Whether the destination is IPv4 (or v4-mapped), which picks the IPv4 messages.
	pub(crate) v4: bool,
}

/// Writes `meta`'s messages into `buf`; returns the control length (0: none).
pub(crate) fn encode(buf: &mut SendControl, meta: &SendMeta) -> usize {
	let mut at = 0;
	let mut put = |level: i32, ty: i32, data: &[u8]| {
		let out = &mut buf.0[at..at + space(data.len())];
		out.fill(0);
		out[..ALIGN].copy_from_slice(&(HDR + data.len()).to_ne_bytes());
		out[ALIGN..ALIGN + 4].copy_from_slice(&level.to_ne_bytes());
		out[ALIGN + 4..ALIGN + 8].copy_from_slice(&ty.to_ne_bytes());
		out[HDR..HDR + data.len()].copy_from_slice(data);
		at += space(data.len());
	};
	if let Some(segment) = meta.segment {
		put(SOL_UDP, UDP_SEGMENT, &segment.to_ne_bytes());
	}
	if let Some(tos) = meta.tos {
		let tos = libc::c_int::from(tos).to_ne_bytes();
		if meta.v4 {
			put(libc::IPPROTO_IP, libc::IP_TOS, &tos);
		} else {
			put(libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &tos);
		}
	}
	match (meta.src, meta.v4) {
		(Some(IpAddr::V4(src)), true) => {
			// in_pktinfo { ipi_ifindex: 0, ipi_spec_dst: src, ipi_addr: 0 }
			let mut info = [0u8; size_of::<libc::in_pktinfo>()];
			info[4..8].copy_from_slice(&src.octets());
			put(libc::IPPROTO_IP, libc::IP_PKTINFO, &info);
		}
		(Some(src), _) => {
			// in6_pktinfo { ipi6_addr: src, ipi6_ifindex: 0 }
			let ip = match src {
				IpAddr::V4(v4) => v4.to_ipv6_mapped(),
				IpAddr::V6(v6) => v6,
			};
			let mut info = [0u8; size_of::<libc::in6_pktinfo>()];
			info[..16].copy_from_slice(&ip.octets());
			put(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &info);
		}
		(None, _) => {}
	}
	at
}

/// What the kernel told about a received datagram (train).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecvMeta {
	/// The GRO segment size, when the kernel coalesced a train.
	pub(crate) segment: Option<u16>,
	/// The TOS byte / traffic class (ECN in its low two bits).
	pub(crate) tos: Option<u8>,
	/// The address the datagram was sent to.
	pub(crate) dst: Option<IpAddr>,
}

/// Reads the messages kio asked for out of a received control area.
pub(crate) fn decode(mut control: &[u8]) -> RecvMeta {
	let mut meta = RecvMeta::default();
	while control.len() >= HDR {
		let len = usize::from_ne_bytes(control[..ALIGN].try_into().unwrap());
		let level = i32::from_ne_bytes(control[ALIGN..ALIGN + 4].try_into().unwrap());
		let ty = i32::from_ne_bytes(control[ALIGN + 4..ALIGN + 8].try_into().unwrap());
		if len < HDR || len > control.len() {
			break;
		}
		let data = &control[HDR..len];
		let int = || data.get(..4).map(|b| i32::from_ne_bytes(b.try_into().unwrap()));
		match (level, ty) {
			(SOL_UDP, UDP_GRO) => meta.segment = int().and_then(|v| u16::try_from(v).ok()),
			// IPv4 reports the TOS as one byte, IPv6 the traffic class as an int.
			(libc::IPPROTO_IP, libc::IP_TOS) => meta.tos = data.first().copied(),
			(libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => meta.tos = int().map(|v| v as u8),
			(libc::IPPROTO_IP, libc::IP_PKTINFO) => {
				// in_pktinfo { ipi_ifindex, ipi_spec_dst, ipi_addr }: ipi_addr is the header's
				// destination.
				if let Some(ip) = data.get(8..12) {
					meta.dst = Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(ip).unwrap())));
				}
			}
			(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
				if let Some(ip) = data.get(..16) {
					let ip = Ipv6Addr::from(<[u8; 16]>::try_from(ip).unwrap());
					meta.dst = Some(ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4));
				}
			}
			_ => {}
		}
		control = &control[align(len).min(control.len())..];
	}
	meta
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn encoded_messages_decode_back() {
		let mut buf = SendControl([0; SEND_CONTROL]);
		let meta = SendMeta {
			segment: Some(1200),
			tos: Some(2),
			src: Some("127.0.0.5".parse().unwrap()),
			v4: true,
		};
		let len = encode(&mut buf, &meta);
		assert_eq!(len, space(2) + space(4) + space(12));
		// Decode sees the v4 pktinfo's `ipi_addr` (zero here), and the TOS as an int's first
		// byte; what matters is that walking the messages stays in step.
		let back = decode(&buf.0[..len]);
		assert_eq!(back.tos, Some(2));
		assert_eq!(back.dst, Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)));
		let v6 = SendMeta {
			segment: None,
			tos: Some(1),
			src: Some("::1".parse().unwrap()),
			v4: false,
		};
		let len = encode(&mut buf, &v6);
		let back = decode(&buf.0[..len]);
		assert_eq!(back.tos, Some(1));
		assert_eq!(back.dst, Some("::1".parse().unwrap()));
		assert_eq!(encode(&mut buf, &SendMeta::default()), 0);
	}

	#[test]
	fn truncated_or_garbage_control_stops_cleanly() {
		assert_eq!(decode(&[0xff; 7]), RecvMeta::default());
		let mut bogus = [0u8; 32];
		bogus[..8].copy_from_slice(&1000usize.to_ne_bytes());
		assert_eq!(decode(&bogus), RecvMeta::default());
	}
}
