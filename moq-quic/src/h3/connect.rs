//! The extended CONNECT that opens a WebTransport session (RFC 9220, draft-ietf-webtrans-http3)
//! and its response, with the sub-protocol headers.

use super::sf::parse_string;
use super::{Error, encode_fields, format_string, format_string_list, frame_type, parse_string_list, put_frame};

/// The request header listing the sub-protocols a client offers.
pub const AVAILABLE_PROTOCOLS: &str = "wt-available-protocols";
/// The response header naming the one the server chose.
pub const PROTOCOL: &str = "wt-protocol";

/// An extended CONNECT for a WebTransport session (RFC 9220, draft-ietf-webtrans-http3 §3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
	/// `:authority`: host and port.
	pub authority: String,
	/// `:path`: path and query (the session's path, `?jwt=` included).
	pub path: String,
	/// The sub-protocols offered, in the client's order of preference.
	pub protocols: Vec<String>,
	/// `origin`, when a browser sent one.
	pub origin: Option<String>,
}

impl ConnectRequest {
	/// Checks a decoded field section: `:method CONNECT`, `:protocol webtransport`,
	/// `:scheme https`, `:authority` and `:path` present; pseudo-headers once each and before
	/// the rest.
	pub fn from_fields(fields: &[(String, String)]) -> Result<Self, Error> {
		let (mut method, mut protocol, mut scheme, mut authority, mut path) = (None, None, None, None, None);
		let mut protocols = Vec::new();
		let mut origin = None;
		let mut regular = false;
		for (name, value) in fields {
			let slot = match name.as_str() {
				":method" => &mut method,
				":protocol" => &mut protocol,
				":scheme" => &mut scheme,
				":authority" => &mut authority,
				":path" => &mut path,
				pseudo if pseudo.starts_with(':') => return Err(Error::Message("unknown pseudo-header")),
				AVAILABLE_PROTOCOLS => {
					regular = true;
					protocols.extend(parse_string_list(value)?);
					continue;
				}
				"origin" => {
					regular = true;
					origin = Some(value.clone());
					continue;
				}
				_ => {
					regular = true;
					continue;
				}
			};
			if regular {
				return Err(Error::Message("a pseudo-header after a header"));
			}
			if slot.replace(value.clone()).is_some() {
				return Err(Error::Message("a repeated pseudo-header"));
			}
		}
		if method.as_deref() != Some("CONNECT") {
			return Err(Error::Message("not a CONNECT"));
		}
		if protocol.as_deref() != Some("webtransport") {
			return Err(Error::Message(":protocol is not webtransport"));
		}
		if scheme.as_deref() != Some("https") {
			return Err(Error::Message(":scheme is not https"));
		}
		let authority = authority
			.filter(|a| !a.is_empty())
			.ok_or(Error::Message("no :authority"))?;
		let path = path.filter(|p| p.starts_with('/')).ok_or(Error::Message("no :path"))?;
		Ok(Self {
			authority,
			path,
			protocols,
			origin,
		})
	}

	/// The HEADERS frame.
	pub fn encode(&self, out: &mut Vec<u8>) {
		let list = format_string_list(&self.protocols);
		let mut fields = vec![
			(":method", "CONNECT"),
			(":protocol", "webtransport"),
			(":scheme", "https"),
			(":authority", self.authority.as_str()),
			(":path", self.path.as_str()),
		];
		if !self.protocols.is_empty() {
			fields.push((AVAILABLE_PROTOCOLS, list.as_str()));
		}
		if let Some(origin) = &self.origin {
			fields.push(("origin", origin.as_str()));
		}
		put_frame(out, frame_type::HEADERS, &encode_fields(&fields));
	}
}

/// The answer to a CONNECT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectResponse {
	/// `:status`: 200 opens the session.
	pub status: u16,
	/// The sub-protocol chosen (one of those offered).
	pub protocol: Option<String>,
}

impl ConnectResponse {
	/// The HEADERS frame: `:status`, `sec-webtransport-http3-draft: draft02` (what draft-02 era
	/// peers look for) and `wt-protocol` when one was chosen.
	pub fn encode(&self, out: &mut Vec<u8>) {
		let status = self.status.to_string();
		let chosen = self.protocol.as_deref().map(format_string);
		let mut fields = vec![
			(":status", status.as_str()),
			("sec-webtransport-http3-draft", "draft02"),
		];
		if let Some(chosen) = &chosen {
			fields.push((PROTOCOL, chosen.as_str()));
		}
		put_frame(out, frame_type::HEADERS, &encode_fields(&fields));
	}

	/// Reads a decoded field section.
	pub fn from_fields(fields: &[(String, String)]) -> Result<Self, Error> {
		let status = fields
			.iter()
			.find(|(name, _)| name == ":status")
			.and_then(|(_, value)| value.parse().ok())
			.ok_or(Error::Message("no :status"))?;
		let protocol = match fields.iter().find(|(name, _)| name == PROTOCOL) {
			Some((_, value)) => Some(parse_string(value.trim())?.0),
			None => None,
		};
		Ok(Self { status, protocol })
	}
}

#[cfg(test)]
mod tests {
	use super::*;
	use crate::h3::tests::hex;
	use crate::h3::*;

	#[test]
	fn a_chromium_style_connect_decodes() {
		// The walk-through's example (docs/moq-quic.md): indexed :method CONNECT and :scheme
		// https, :authority and :path by name reference, :protocol and wt-available-protocols
		// with literal names.
		let mut block = hex("0000 cf d7");
		block.extend_from_slice(&[0x50, 18]);
		block.extend_from_slice(b"relay.example:4443");
		block.extend_from_slice(&[0x51, 5]);
		block.extend_from_slice(b"/anon");
		block.extend_from_slice(&[0x27, 0x02]);
		block.extend_from_slice(b":protocol");
		block.push(12);
		block.extend_from_slice(b"webtransport");
		block.extend_from_slice(&[0x27, 0x0f]);
		block.extend_from_slice(b"wt-available-protocols");
		let list = b"\"moq-lite-05\", \"moq-lite-04\"";
		block.push(list.len() as u8);
		block.extend_from_slice(list);
		let fields = decode_fields(&block).unwrap();
		let request = ConnectRequest::from_fields(&fields).unwrap();
		assert_eq!(request.authority, "relay.example:4443");
		assert_eq!(request.path, "/anon");
		assert_eq!(request.protocols, ["moq-lite-05", "moq-lite-04"]);
	}

	#[test]
	fn requests_and_responses_round_trip() {
		let request = ConnectRequest {
			authority: "localhost:4443".into(),
			path: "/live?jwt=abc".into(),
			protocols: vec!["moq-lite-05".into(), "moq-lite-04".into()],
			origin: Some("https://example.com".into()),
		};
		let mut frame = Vec::new();
		request.encode(&mut frame);
		let mut buf = frame.as_slice();
		let (kind, payload) = get_frame(&mut buf, MAX_FIELD_SECTION).unwrap();
		assert_eq!(kind, frame_type::HEADERS);
		assert_eq!(
			ConnectRequest::from_fields(&decode_fields(payload).unwrap()).unwrap(),
			request
		);

		let response = ConnectResponse {
			status: 200,
			protocol: Some("moq-lite-05".into()),
		};
		let mut frame = Vec::new();
		response.encode(&mut frame);
		let mut buf = frame.as_slice();
		let (_, payload) = get_frame(&mut buf, MAX_FIELD_SECTION).unwrap();
		// The prefix, then `:status 200` as static entry 25: one byte.
		assert_eq!(&payload[..3], &[0, 0, 0xc0 | 25]);
		assert_eq!(
			ConnectResponse::from_fields(&decode_fields(payload).unwrap()).unwrap(),
			response
		);
	}

	#[test]
	fn malformed_connects_are_refused() {
		let fields = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
			pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
		};
		let good = [
			(":method", "CONNECT"),
			(":protocol", "webtransport"),
			(":scheme", "https"),
			(":authority", "x"),
			(":path", "/"),
		];
		assert!(ConnectRequest::from_fields(&fields(&good)).is_ok());
		for (index, bad) in [(0, "GET"), (1, "websocket"), (2, "http"), (3, ""), (4, "x")] {
			let mut pairs = good;
			pairs[index].1 = bad;
			assert!(ConnectRequest::from_fields(&fields(&pairs)).is_err(), "{pairs:?}");
		}
		let mut repeated = good.to_vec();
		repeated.push((":path", "/again"));
		assert!(ConnectRequest::from_fields(&fields(&repeated)).is_err());
		// A dynamic-table reference.
		assert_eq!(decode_fields(&[0, 0, 0x80]), Err(Error::Qpack));
		assert_eq!(decode_fields(&[1, 0]), Err(Error::Qpack));
		// A string running past the end.
		assert_eq!(decode_fields(&[0, 0, 0x51, 9, b'/']), Err(Error::Qpack));
	}
}
