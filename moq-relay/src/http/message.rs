//! Requests and responses: a request head read and bounded, the relay's page, and a response
//! written as fast as the peer takes it.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;
use std::net::IpAddr;

use kio::time::Deadline;
use moq_quic::byte_stream::ByteStream;

use super::{MAX_HEAD, MAX_HEADERS, write_all};

/// What is kept of a parsed request head.
pub(super) struct Head {
	pub(super) method: String,
	pub(super) target: String,
	pub(super) keep_alive: bool,
	pub(super) has_body: bool,
	/// A WebSocket upgrade it asks for, or the status of a malformed one.
	pub(super) upgrade: Option<Result<moq_quic::qmux::ws::Upgrade, u16>>,
}

pub(super) enum Parsed {
	Complete(Head, usize),
	Partial,
	/// Answer with this status and close.
	Refuse(u16),
}

pub(super) fn parse(buf: &[u8]) -> Parsed {
	let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
	let mut request = httparse::Request::new(&mut headers);
	let len = match request.parse(buf) {
		Ok(httparse::Status::Complete(len)) => len,
		Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Parsed::Refuse(431),
		Ok(httparse::Status::Partial) => return Parsed::Partial,
		Err(httparse::Error::TooManyHeaders) => return Parsed::Refuse(431),
		Err(_) => return Parsed::Refuse(400),
	};
	if len > MAX_HEAD {
		return Parsed::Refuse(431);
	}
	let (Some(method), Some(target), Some(version)) = (request.method, request.path, request.version) else {
		return Parsed::Refuse(400);
	};
	let tokens = |name: &str, token: &str| {
		request.headers.iter().any(|h| {
			h.name.eq_ignore_ascii_case(name)
				&& h.value
					.split(|&b| b == b',')
					.any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
		})
	};
	let keep_alive = if version >= 1 {
		!tokens("connection", "close")
	} else {
		tokens("connection", "keep-alive")
	};
	let has_body = request.headers.iter().any(|h| {
		h.name.eq_ignore_ascii_case("transfer-encoding")
			|| (h.name.eq_ignore_ascii_case("content-length") && h.value.trim_ascii() != b"0")
	});
	let upgrade =
		moq_quic::qmux::ws::Upgrade::from_headers(request.headers.iter().map(|h| (h.name, h.value))).transpose();
	let head = Head {
		method: method.to_owned(),
		target: target.to_owned(),
		keep_alive,
		has_body,
		upgrade,
	};
	Parsed::Complete(head, len)
}

/// The relay's page.
const PAGE_HTML: &str = include_str!("../../web/src/index.html");

/// Where the page's script learns the address its request reached the relay at.
const PAGE_ADDRESS: &str = r#"<meta name="moq-relay-address" content="">"#;

/// The page, told the address `local` its request reached (see `web/src/main.js`, `relayUrl`).
pub(super) fn page(local: IpAddr) -> String {
	let tag = format!(r#"<meta name="moq-relay-address" content="{}">"#, local.to_canonical());
	PAGE_HTML.replacen(PAGE_ADDRESS, &tag, 1)
}
/// The page's script: `moq-relay/web/src/main.js` and the public `@moq/watch`, `@moq/publish` and
/// `@moq/net` packages (versions locked in `web/package-lock.json`), bundled by `web/build.mjs`.
pub(super) const PAGE_SCRIPT: &str = include_str!("../../web/dist/app.js");

pub(super) struct Response {
	status: u16,
	content_type: &'static str,
	extra: Vec<(&'static str, &'static str)>,
	body: Cow<'static, str>,
}

impl Response {
	pub(super) fn new(status: u16, content_type: &'static str, body: impl Into<Cow<'static, str>>) -> Self {
		Self {
			status,
			content_type,
			extra: Vec::new(),
			body: body.into(),
		}
	}

	pub(super) fn text(status: u16, body: impl Into<Cow<'static, str>>) -> Self {
		Self::new(status, "text/plain; charset=utf-8", body)
	}

	pub(super) fn header(mut self, name: &'static str, value: &'static str) -> Self {
		self.extra.push((name, value));
		self
	}

	/// The status line and headers.
	fn head(&self, close: bool) -> Vec<u8> {
		let reason = match self.status {
			200 => "OK",
			400 => "Bad Request",
			404 => "Not Found",
			405 => "Method Not Allowed",
			408 => "Request Timeout",
			431 => "Request Header Fields Too Large",
			_ => "",
		};
		let mut head = format!(
			"HTTP/1.1 {} {reason}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-store\r\n",
			self.status,
			self.content_type,
			self.body.len()
		);
		for (name, value) in &self.extra {
			let _ = write!(head, "{name}: {value}\r\n");
		}
		if close {
			head.push_str("connection: close\r\n");
		}
		head.push_str("\r\n");
		head.into_bytes()
	}

	/// Writes the response (the body only if `with_body`), as fast as the peer reads it and
	/// within `deadline`: the body from where it is, never copied whole.
	pub(super) async fn write(
		&self,
		stream: &mut ByteStream,
		deadline: &mut Deadline,
		with_body: bool,
		close: bool,
	) -> io::Result<()> {
		let mut head = self.head(close);
		let body = if with_body { self.body.as_bytes() } else { &[] };
		// A small body goes with its head, in one write; a large one from where it is.
		if body.len() <= 16 << 10 {
			head.extend_from_slice(body);
			return write_all(stream, deadline, &head).await;
		}
		write_all(stream, deadline, &head).await?;
		write_all(stream, deadline, body).await
	}
}
