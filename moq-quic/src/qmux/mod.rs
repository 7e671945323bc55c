//! QMux: QUIC's streams, flow control and datagrams over an ordered byte stream, for clients
//! that cannot reach the relay over UDP (draft-ietf-quic-qmux; its WebSocket binding,
//! draft-lcurley-qmux-websocket). One sans-io state machine per connection ([`Core`]), and a
//! driver that carries its record bodies over a byte stream ([`crate::byte_stream`]: TCP, or TLS
//! on TCP) in one of three ways:
//!
//! - a WebSocket ([`ws`], `ws://` and `wss://`): one binary message a record body, the
//!   sub-protocol naming the QMux version and the application protocol (`qmux-01.moq-lite-05`);
//! - TLS: records end to end ([`record`]), the ALPN naming both as the sub-protocol would;
//! - plaintext TCP (the public implementations' `tcp://`): records, qmux-01, the application
//!   protocol agreed in the transport parameters (their own `application_protocols`).
//!
//! - `frame.rs`: the frames (QUIC v1's layouts, and QX_TRANSPORT_PARAMETERS and QX_PING).
//! - `params.rs`: transport parameters.
//! - `core.rs`: streams, flow control, the send scheduler's order over one byte stream, idle
//!   timeout and keep-alive, close.
//! - `ws.rs`: RFC 6455: the server's handshake and the framing (masking, fragmentation, ping,
//!   close), bounded.
//! - `record.rs`: records on a byte stream.
//! - `conn.rs`: [`QmuxConnection`], the handle the application holds, and the driver task over
//!   a kio TCP stream.
//!
//! The versions, bounds and scheduling are written in docs/moq-quic.md §9.

mod conn;
mod core;
pub mod frame;
pub mod params;
pub mod record;
pub mod ws;

pub use conn::{
	CONNECTION_COST, Carrier, ConnectError, QmuxConnection, QmuxRecv, QmuxSend, SOCKET_SEND_BUFFER, connect_tcp,
	connect_tls, connect_websocket, serve,
};
pub use core::{
	Config, Core, DATAGRAM_QUEUE, Dir, End, PARAMS_TIMEOUT, STREAM_QUEUE, Side, StreamError, Violation, code,
};

/// The wire versions we speak. qmux-01 and -02 are the same bytes (records; QX_PING; datagrams)
/// and differ only in what is checked; qmux-00 has no records and no datagrams, and over a
/// WebSocket carries exactly one frame per message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
	/// draft-ietf-quic-qmux-00 (and the drafts before it).
	Qmux00,
	/// draft-ietf-quic-qmux-01.
	Qmux01,
	/// draft-ietf-quic-qmux-02.
	Qmux02,
}

impl Version {
	/// Its token in a sub-protocol or ALPN (`qmux-01`).
	pub fn token(self) -> &'static str {
		match self {
			Self::Qmux00 => "qmux-00",
			Self::Qmux01 => "qmux-01",
			Self::Qmux02 => "qmux-02",
		}
	}

	fn from_token(token: &str) -> Option<Self> {
		match token {
			"qmux-00" => Some(Self::Qmux00),
			"qmux-01" => Some(Self::Qmux01),
			"qmux-02" => Some(Self::Qmux02),
			_ => None,
		}
	}
}

/// A sub-protocol (or ALPN) `qmux-VV.APP` read apart: the version, and the application protocol
/// it carries (`None` for a bare `qmux-VV`, where the application negotiates in its own setup).
pub fn parse_protocol(token: &str) -> Option<(Version, Option<&str>)> {
	match token.split_once('.') {
		Some((version, app)) if !app.is_empty() => Some((Version::from_token(version)?, Some(app))),
		Some(_) => None,
		None => Some((Version::from_token(token)?, None)),
	}
}

/// The protocol to answer an offer with: the first of `ours` (pairs of a version and an
/// application protocol, in our order of preference) that the client offered, compared as
/// whole tokens. The public relay prefers qmux-01 (what both public clients land on), so do we.
pub fn choose_protocol<'a>(offered: &[&str], ours: &[(Version, &'a str)]) -> Option<(Version, &'a str)> {
	ours.iter().copied().find(|(version, app)| {
		offered
			.iter()
			.any(|token| parse_protocol(token) == Some((*version, Some(app))))
	})
}

/// Bytes from hex digits grouped by spaces (`"0e 04 00"`), as the tests write wire images.
#[cfg(test)]
fn hex(text: &str) -> Vec<u8> {
	let digits: String = text.split_whitespace().collect();
	data_encoding::HEXLOWER_PERMISSIVE
		.decode(digits.as_bytes())
		.expect("hex digits")
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn sub_protocols_are_read_apart_and_chosen_in_our_order() {
		assert_eq!(
			parse_protocol("qmux-01.moq-lite-05"),
			Some((Version::Qmux01, Some("moq-lite-05")))
		);
		assert_eq!(parse_protocol("qmux-02"), Some((Version::Qmux02, None)));
		assert_eq!(parse_protocol("webtransport"), None);
		assert_eq!(parse_protocol("qmux-03.moq-lite-05"), None);
		assert_eq!(parse_protocol("qmux-01."), None);
		// What @moq/net offers (its list's head and tail), against our preference.
		let offered = [
			"qmux-02.moq-lite-05",
			"qmux-01.moq-lite-05",
			"qmux-00.moq-lite-05",
			"qmux-02.moq-lite-04",
			"qmux-02",
			"webtransport",
		];
		let ours = [
			(Version::Qmux01, "moq-lite-05"),
			(Version::Qmux02, "moq-lite-05"),
			(Version::Qmux00, "moq-lite-05"),
		];
		assert_eq!(choose_protocol(&offered, &ours), Some((Version::Qmux01, "moq-lite-05")));
		assert_eq!(
			choose_protocol(&["qmux-00.moq-lite-05"], &ours),
			Some((Version::Qmux00, "moq-lite-05"))
		);
		assert_eq!(choose_protocol(&["qmux-01.moq-lite-04", "webtransport"], &ours), None);
	}
}
