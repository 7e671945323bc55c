//! The relay's HTTP endpoints, on TCP: its page, health, the certificate fingerprint and metrics.
//!
//! | Request                        | Response                                                      |
//! |--------------------------------|---------------------------------------------------------------|
//! | `GET /`                        | `200`, the relay's page (`moq-relay/web/`, embedded in the binary) |
//! | `GET /app.js`                  | `200`, the page's script                                      |
//! | `GET /health`                  | `200`, `ok\n`                                                 |
//! | `GET /certificate.sha256`      | `200`, the lowercase hex SHA-256 of the leaf certificate's DER: exactly 64 characters, no newline (a browser passes it to `serverCertificateHashes` as is), with `Access-Control-Allow-Origin: *` |
//! | `GET /metrics`                 | `200`, Prometheus text ([`metrics`])          |
//! | `HEAD` of those                | the same headers, no body                                     |
//! | any other path                 | `404`                                                         |
//! | any other method               | `405`, `Allow: GET, HEAD`                                     |
//!
//! HTTP/1.1 with keep-alive (scrapers reuse their connection), pipelined requests answered in
//! order; `Connection: close`, an HTTP/1.0 request without `keep-alive`, or a request with a
//! body (which this server never reads) ends the connection after the response.
//!
//! Peer input is bounded: a request head over [`MAX_HEAD`] bytes or [`MAX_HEADERS`] headers gets
//! `431`, an unparsable one `400`, and both end the connection. A new connection's first request
//! head, and any head once its first byte came, must be complete within [`Routes::head_timeout`]
//! (a slow sender holds a slot for that long at most); a keep-alive connection may wait
//! [`Routes::timeout`] for its next request, and a response must be taken within it. At most
//! [`Routes::max_connections`] connections are served at once and [`Routes::max_per_ip`] from
//! one address (more from it are closed as they are accepted); when the table is full, the
//! oldest connection waiting idle for a request is closed to make room, so clients that connect
//! and say nothing cannot keep `/health` and `/certificate.sha256` from others. The server closes "lingering": it shuts its side down and reads what the peer
//! still sends for a moment, so an unread request does not turn the close into a reset that
//! would destroy the error response before the client reads it.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use kio::net::{TcpListener, TcpStream};
use kio::sync::{Budget, Charge, KeyAccount, Keyed};
use kio::time::Deadline;
use kio::{JoinHandle, Waiter};

use crate::metrics;

/// The largest request head (request line and headers) read.
pub const MAX_HEAD: usize = 8 * 1024;
/// The most headers a request may have.
pub const MAX_HEADERS: usize = 32;
/// The most bytes read from a peer while closing.
const MAX_LINGER: usize = 64 * 1024;

/// What the endpoints serve, and the server's limits.
pub struct Routes {
	fingerprint: Rc<dyn Fn() -> String>,
	metrics: Rc<dyn Fn() -> String>,
	/// Where each connection's memory is charged, by its peer's address (the relay's memory
	/// ceiling); `None` charges nothing.
	memory: Option<Rc<dyn Fn(IpAddr) -> Budget>>,
	/// How long an idle connection, or one sending a request or taking a response, may take.
	pub timeout: Duration,
	/// Connections served at once.
	pub max_connections: usize,
	/// Connections served at once from one IP address.
	pub max_per_ip: usize,
	/// How long a request head may take, from the first byte (or from the connection's start).
	pub head_timeout: Duration,
	/// Who takes a WebSocket upgrade ([`with_websocket`](Self::with_websocket)).
	websocket: Option<Rc<dyn Fn(WebSocket)>>,
}

/// A WebSocket upgrade, handed over whole: its connection leaves the HTTP server's table, and the
/// handler answers it (101, or a refusal) and serves it.
pub struct WebSocket {
	/// The connection, its request head read.
	pub stream: TcpStream,
	/// What came after the head.
	pub leftover: Vec<u8>,
	/// The request's target: path and query.
	pub target: String,
	/// What the client asked for.
	pub upgrade: moq_quic::qmux::ws::Upgrade,
	/// The client's address.
	pub peer: std::net::SocketAddr,
}

impl Routes {
	/// Serves what `fingerprint` says at each request (the lowercase hex SHA-256 of the
	/// certificate in service, [`Certificate::fingerprint_hex`](moq_quic::Certificate::fingerprint_hex):
	/// it changes when the certificate is renewed) and the exposition `metrics` renders, with a
	/// 10 s timeout and 256 connections at most.
	pub fn new(fingerprint: impl Fn() -> String + 'static, metrics: impl Fn() -> String + 'static) -> Self {
		Self {
			fingerprint: Rc::new(fingerprint),
			metrics: Rc::new(metrics),
			memory: None,
			timeout: Duration::from_secs(10),
			max_connections: 256,
			max_per_ip: 16,
			head_timeout: Duration::from_secs(3),
			websocket: None,
		}
	}

	/// Hands every `GET` that asks for a WebSocket (`Upgrade: websocket`, RFC 6455 §4.1) to
	/// `handler`, on any path; a malformed upgrade is answered 400. Without one, such a request is
	/// served as a plain GET.
	pub fn with_websocket(mut self, handler: impl Fn(WebSocket) + 'static) -> Self {
		self.websocket = Some(Rc::new(handler));
		self
	}

	/// With other per-address and request-head limits.
	pub fn with_client_limits(mut self, max_per_ip: usize, head_timeout: Duration) -> Self {
		self.max_per_ip = max_per_ip;
		self.head_timeout = head_timeout;
		self
	}

	/// Counts each connection's [`CONNECTION_COST`] in the budget `memory` gives for its address
	/// (without refusing it: the table's own limits bound what HTTP holds).
	pub fn with_memory(mut self, memory: impl Fn(IpAddr) -> Budget + 'static) -> Self {
		self.memory = Some(Rc::new(memory));
		self
	}

	/// With another timeout.
	pub fn with_timeout(mut self, timeout: Duration) -> Self {
		self.timeout = timeout;
		self
	}

	/// With another connection limit.
	pub fn with_max_connections(mut self, max: usize) -> Self {
		self.max_connections = max;
		self
	}

	/// The response to `head`, on a connection that reached us at `local`.
	fn respond(&self, head: &Head, local: IpAddr) -> Response {
		if head.method != "GET" && head.method != "HEAD" {
			return Response::text(405, "method not allowed\n").header("allow", "GET, HEAD");
		}
		// The query plays no part in routing.
		let path = head
			.target
			.split_once('?')
			.map_or(head.target.as_str(), |(path, _)| path);
		match path {
			"/" | "/index.html" => Response::new(200, "text/html; charset=utf-8", page(local)),
			"/app.js" => Response::new(200, "text/javascript; charset=utf-8", PAGE_SCRIPT),
			"/health" => Response::text(200, "ok\n"),
			// Browsers fetch it from a page on another origin to pin the certificate
			// (`serverCertificateHashes`): CORS allows them to read it.
			"/certificate.sha256" => {
				Response::text(200, (self.fingerprint)()).header("access-control-allow-origin", "*")
			}
			"/metrics" => Response::new(200, metrics::CONTENT_TYPE, (self.metrics)()),
			_ => Response::text(404, "not found\n"),
		}
	}
}

impl std::fmt::Debug for Routes {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("Routes")
			.field("fingerprint", &(self.fingerprint)())
			.field("timeout", &self.timeout)
			.field("max_connections", &self.max_connections)
			.finish_non_exhaustive()
	}
}

/// What one connection may make us hold: its request buffer (a head, [`MAX_HEAD`], and a read's
/// chunk), the socket's staging buffer and the write in flight (64 KiB each, kio's), and a
/// response's head and body when the body is not a constant (the metrics, some tens of KiB).
/// Constant bodies (the page, its script) are written from where they are, never copied.
pub const CONNECTION_COST: u64 = 192 << 10;

/// The connection tasks of one [`serve`], aborted when it is dropped (on shutdown the relay
/// aborts the server's task, and idle keep-alive connections must not outlive it).
struct Connections {
	/// By age: the lowest id is the oldest.
	tasks: RefCell<BTreeMap<u64, Slot>>,
	/// Connections served, each charged to its address's share.
	per_ip: Arc<Keyed<IpAddr>>,
	next: Cell<u64>,
}

struct Slot {
	task: JoinHandle<()>,
	/// Waiting for a request with nothing of it read yet.
	idle: Rc<Cell<bool>>,
	ip: IpAddr,
	_charge: Charge<KeyAccount<IpAddr>>,
	_memory: Option<Charge>,
}

impl Connections {
	fn new(routes: &Routes) -> Self {
		Self {
			tasks: RefCell::default(),
			per_ip: Keyed::new(routes.max_per_ip as u64, Budget::unlimited()),
			next: Cell::new(0),
		}
	}

	fn forget(&self, id: u64) {
		self.tasks.borrow_mut().remove(&id);
	}

	/// A slot for a connection from `ip` if one may be served. A full table makes room fairly:
	/// an address within its share (the table over the addresses served, itself counted) takes
	/// the place of the address holding the most, whose idle connection goes first, else its
	/// oldest (a client reading its responses slowly); an address past its share takes only its
	/// own oldest idle connection's place, or is refused. So neither idle clients nor slow
	/// readers, from however many addresses, keep `/health` and `/certificate.sha256` from a new
	/// one.
	fn admit(&self, ip: IpAddr, routes: &Routes) -> Option<Charge<KeyAccount<IpAddr>>> {
		let charge = self.per_ip.charge(ip, 1)?;
		if self.tasks.borrow().len() < routes.max_connections {
			return Some(charge);
		}
		let addresses = self.per_ip.keys().max(1) as u64;
		let share = (routes.max_connections as u64 / addresses).max(1);
		// Below its share, it takes from the greediest; at its share, only from itself (an idle
		// connection of its own: a client with stale keep-alives).
		let (from, busy_too) = match self.per_ip.held(&ip) <= share {
			true => (self.per_ip.greediest()?.0, true),
			false => (ip, false),
		};
		let victim = {
			let tasks = self.tasks.borrow();
			let theirs = || tasks.iter().filter(|(_, slot)| slot.ip == from);
			let idle = theirs().find(|(_, slot)| slot.idle.get()).map(|(&id, _)| id);
			idle.or_else(|| theirs().next().filter(|_| busy_too).map(|(&id, _)| id))
		}?;
		if let Some(slot) = self.tasks.borrow().get(&victim) {
			slot.task.abort();
		}
		self.forget(victim);
		Some(charge)
	}
}

struct AbortOnDrop(Rc<Connections>);

impl Drop for AbortOnDrop {
	fn drop(&mut self) {
		let tasks = std::mem::take(&mut *self.0.tasks.borrow_mut());
		for (_, slot) in tasks {
			slot.task.abort();
		}
	}
}

/// Accepts connections on `listener` and serves each in a task of this worker, until the
/// returned future is dropped (which closes every connection it opened).
pub async fn serve(listener: TcpListener, routes: Rc<Routes>) {
	let connections = Rc::new(Connections::new(&routes));
	let _guard = AbortOnDrop(connections.clone());
	loop {
		let (stream, peer) = match listener.accept().await {
			Ok(accepted) => accepted,
			Err(e) => {
				// Out of descriptors, most likely: pause so a persistent error does not spin.
				tracing::warn!(error = %e, "http: accept failed");
				kio::time::sleep(Duration::from_millis(100)).await;
				continue;
			}
		};
		let Some(charge) = connections.admit(peer.ip(), &routes) else {
			tracing::debug!(%peer, "http: connection limit reached, closing");
			continue;
		};
		// Counted, never refused: HTTP's own table bounds it (`max_connections` of them), and
		// `/health` must answer when QUIC peers have filled the ceiling.
		let memory = routes.memory.as_ref().map(|memory| {
			let mut charge = memory(peer.ip()).empty();
			charge.force(CONNECTION_COST);
			charge
		});
		let id = connections.next.get();
		connections.next.set(id + 1);
		let idle = Rc::new(Cell::new(true));
		let task = kio::spawn({
			let routes = routes.clone();
			let connections = connections.clone();
			let idle = idle.clone();
			async move {
				if let Err(e) = connection(stream, peer, &routes, &idle).await {
					tracing::debug!(%peer, error = %e, "http: connection ended");
				}
				connections.forget(id);
			}
		});
		connections.tasks.borrow_mut().insert(
			id,
			Slot {
				task,
				idle,
				ip: peer.ip(),
				_charge: charge,
				_memory: memory,
			},
		);
	}
}

/// What is kept of a parsed request head.
struct Head {
	method: String,
	target: String,
	keep_alive: bool,
	has_body: bool,
	/// A WebSocket upgrade it asks for, or the status of a malformed one.
	upgrade: Option<Result<moq_quic::qmux::ws::Upgrade, u16>>,
}

enum Parsed {
	Complete(Head, usize),
	Partial,
	/// Answer with this status and close.
	Refuse(u16),
}

fn parse(buf: &[u8]) -> Parsed {
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
const PAGE_HTML: &str = include_str!("../web/src/index.html");

/// Where the page's script learns the address its request reached the relay at.
const PAGE_ADDRESS: &str = r#"<meta name="moq-relay-address" content="">"#;

/// The page, told the address `local` its request reached (see `web/src/main.js`, `relayUrl`).
fn page(local: IpAddr) -> String {
	let tag = format!(r#"<meta name="moq-relay-address" content="{}">"#, local.to_canonical());
	PAGE_HTML.replacen(PAGE_ADDRESS, &tag, 1)
}
/// The page's script: `moq-relay/web/src/main.js` and the public `@moq/watch`, `@moq/publish` and
/// `@moq/net` packages (versions locked in `web/package-lock.json`), bundled by `web/build.mjs`.
const PAGE_SCRIPT: &str = include_str!("../web/dist/app.js");

struct Response {
	status: u16,
	content_type: &'static str,
	extra: Vec<(&'static str, &'static str)>,
	body: Cow<'static, str>,
}

impl Response {
	fn new(status: u16, content_type: &'static str, body: impl Into<Cow<'static, str>>) -> Self {
		Self {
			status,
			content_type,
			extra: Vec::new(),
			body: body.into(),
		}
	}

	fn text(status: u16, body: impl Into<Cow<'static, str>>) -> Self {
		Self::new(status, "text/plain; charset=utf-8", body)
	}

	fn header(mut self, name: &'static str, value: &'static str) -> Self {
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
	async fn write(
		&self,
		stream: &mut TcpStream,
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

/// Polls `poll` until it is ready, or `deadline` passes (`None` then).
async fn timed<T>(deadline: &mut Deadline, mut poll: impl FnMut(&Waiter) -> Poll<T>) -> Option<T> {
	kio::wait(|waiter| {
		if let Poll::Ready(value) = poll(waiter) {
			return Poll::Ready(Some(value));
		}
		deadline.poll_elapsed(waiter).map(|()| None)
	})
	.await
}

fn timed_out() -> io::Error {
	io::Error::new(io::ErrorKind::TimedOut, "timed out")
}

async fn write_all(stream: &mut TcpStream, deadline: &mut Deadline, mut bytes: &[u8]) -> io::Result<()> {
	while !bytes.is_empty() {
		let n = timed(deadline, |w| stream.poll_write(w, bytes))
			.await
			.ok_or_else(timed_out)??;
		bytes = &bytes[n..];
	}
	timed(deadline, |w| stream.poll_flush(w)).await.ok_or_else(timed_out)?
}

/// Shuts the write side down, then reads and drops what the peer still sends, until it closes,
/// the deadline passes or [`MAX_LINGER`] bytes came.
async fn close(mut stream: TcpStream, deadline: &mut Deadline) -> io::Result<()> {
	timed(deadline, |w| stream.poll_shutdown(w))
		.await
		.ok_or_else(timed_out)??;
	let mut sink = [0u8; 4096];
	let mut total = 0;
	while total < MAX_LINGER {
		match timed(deadline, |w| stream.poll_read(w, &mut sink)).await {
			Some(Ok(0)) | None => break,
			Some(Ok(n)) => total += n,
			Some(Err(e)) => return Err(e),
		}
	}
	Ok(())
}

async fn connection(
	mut stream: TcpStream,
	peer: std::net::SocketAddr,
	routes: &Routes,
	idle: &Cell<bool>,
) -> io::Result<()> {
	// Responses are written whole; Nagle would only hold a keep-alive response back.
	stream.set_nodelay(true)?;
	let local = stream.local_addr()?.ip();
	let mut buf = Vec::with_capacity(1024);
	let mut chunk = [0u8; 4096];
	let mut deadline = Deadline::new(None);
	// The first request must come soon; a keep-alive connection may wait longer for the next.
	let mut wait = routes.head_timeout;
	loop {
		deadline.set(Some(kio::time::now() + wait));
		wait = routes.timeout;
		idle.set(buf.is_empty());
		let (mut head, len) = loop {
			match parse(&buf) {
				Parsed::Complete(head, len) => break (head, len),
				Parsed::Refuse(status) => {
					let body = if status == 431 {
						"request head too large\n"
					} else {
						"bad request\n"
					};
					let response = Response::text(status, body);
					response.write(&mut stream, &mut deadline, true, true).await?;
					return close(stream, &mut deadline).await;
				}
				Parsed::Partial => {}
			}
			// Never more than MAX_HEAD buffered: a head that does not fit is refused above.
			let room = (MAX_HEAD - buf.len()).min(chunk.len());
			match timed(&mut deadline, |w| stream.poll_read(w, &mut chunk[..room])).await {
				Some(Ok(0)) => return Ok(()),
				Some(Ok(n)) => {
					if idle.replace(false) {
						// A head has begun: the rest of it comes soon or not at all.
						deadline.set(Some(kio::time::now() + routes.head_timeout));
					}
					buf.extend_from_slice(&chunk[..n]);
				}
				Some(Err(e)) => return Err(e),
				None if buf.is_empty() => return Ok(()),
				None => {
					let response = Response::text(408, "request timeout\n");
					deadline.set(Some(kio::time::now() + routes.timeout));
					response.write(&mut stream, &mut deadline, true, true).await?;
					return close(stream, &mut deadline).await;
				}
			}
		};
		buf.drain(..len);
		idle.set(false);
		deadline.set(Some(kio::time::now() + routes.timeout));
		if head.method == "GET"
			&& let Some(handler) = &routes.websocket
			&& let Some(upgrade) = head.upgrade.take()
		{
			let upgrade = match upgrade {
				Ok(upgrade) => upgrade,
				Err(status) => {
					let response = Response::text(status, "bad websocket upgrade\n");
					response.write(&mut stream, &mut deadline, true, true).await?;
					return close(stream, &mut deadline).await;
				}
			};
			handler(WebSocket {
				stream,
				leftover: buf,
				target: head.target,
				upgrade,
				peer,
			});
			return Ok(());
		}
		let keep_alive = head.keep_alive && !head.has_body;
		let response = routes.respond(&head, local);
		response
			.write(&mut stream, &mut deadline, head.method != "HEAD", !keep_alive)
			.await?;
		if !keep_alive {
			return close(stream, &mut deadline).await;
		}
	}
}

#[cfg(test)]
mod tests {
	use std::time::Instant;

	use std::net::SocketAddr;

	use kio::Builder;
	use moq_client::http::get;

	use super::*;

	const FINGERPRINT_OF_ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

	fn run<F: Future>(test: impl FnOnce() -> F) -> F::Output {
		Builder::single()
			.build()
			.expect("runtime starts")
			.block_on(async move { test().await })
	}

	/// A server on loopback with a metrics callback that counts its calls.
	fn server(configure: impl FnOnce(Routes) -> Routes) -> (SocketAddr, JoinHandle<()>, Rc<Cell<u32>>) {
		let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
		let addr = listener.local_addr();
		let scrapes = Rc::new(Cell::new(0));
		let counter = scrapes.clone();
		let routes = Routes::new(
			|| FINGERPRINT_OF_ABC.to_owned(),
			move || {
				counter.set(counter.get() + 1);
				let mut prom = metrics::prom::Prom::new();
				prom.counter("scrapes_total", "Scrapes.", counter.get());
				prom.finish()
			},
		);
		let task = kio::spawn(serve(listener, Rc::new(configure(routes))));
		(addr, task, scrapes)
	}

	/// Sends `request` on a new connection and reads until the server closes it.
	async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
		let mut stream = TcpStream::connect(addr).await.unwrap();
		stream.write_all(request).await.unwrap();
		read_to_end(&mut stream).await
	}

	async fn read_to_end(stream: &mut TcpStream) -> String {
		let mut out = Vec::new();
		let mut chunk = [0u8; 4096];
		loop {
			match stream.read(&mut chunk).await {
				Ok(0) => break,
				Ok(n) => out.extend_from_slice(&chunk[..n]),
				Err(e) => panic!("read failed after {:?}: {e}", String::from_utf8_lossy(&out)),
			}
		}
		String::from_utf8(out).unwrap()
	}

	#[test]
	fn fingerprint_is_lowercase_hex_sha256() {
		let der = moq_quic::tls::CertificateDer::from(b"abc".to_vec());
		assert_eq!(
			moq_quic::tls::hex(&moq_quic::tls::fingerprint(&der)),
			FINGERPRINT_OF_ABC
		);
	}

	#[test]
	fn health_certificate_and_metrics() {
		run(|| async {
			let (addr, server, scrapes) = server(|r| r);
			let health = get(addr, "/health").await.unwrap();
			assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
			let cert = get(addr, "/certificate.sha256").await.unwrap();
			assert_eq!((cert.status, cert.body.as_str()), (200, FINGERPRINT_OF_ABC));
			assert_eq!(cert.content_type.as_deref(), Some("text/plain; charset=utf-8"));
			assert_eq!(cert.body.len(), 64, "exactly the hex digits: browsers do not trim");
			// A page on another origin may read it.
			let raw = exchange(addr, b"GET /certificate.sha256 HTTP/1.1\r\nconnection: close\r\n\r\n").await;
			assert!(
				raw.to_ascii_lowercase()
					.contains("\r\naccess-control-allow-origin: *\r\n"),
				"{raw}"
			);
			let metrics = get(addr, "/metrics?x=1").await.unwrap();
			assert_eq!(metrics.status, 200);
			assert_eq!(metrics.content_type.as_deref(), Some(metrics::CONTENT_TYPE));
			assert!(metrics.body.contains("\nscrapes_total 1\n"), "{}", metrics.body);
			assert_eq!(scrapes.get(), 1);
			// The page and its script, whole.
			let page = get(addr, "/?jwt=x").await.unwrap();
			assert_eq!(page.status, 200);
			assert_eq!(page.content_type.as_deref(), Some("text/html; charset=utf-8"));
			assert!(
				page.body.contains(r#"<script type="module" src="/app.js">"#),
				"{}",
				page.body
			);
			// It says which address the request reached, for its script to dial the same.
			let told = format!(r#"<meta name="moq-relay-address" content="{}">"#, addr.ip());
			assert!(page.body.contains(&told), "{}", page.body);
			let script = get(addr, "/app.js").await.unwrap();
			assert_eq!(script.status, 200);
			assert_eq!(script.content_type.as_deref(), Some("text/javascript; charset=utf-8"));
			assert_eq!(script.body.len(), PAGE_SCRIPT.len());
			assert_eq!(get(addr, "/health/x").await.unwrap().status, 404);
			assert_eq!(get(addr, "/app.js/x").await.unwrap().status, 404);
			server.abort();
		});
	}

	#[test]
	fn other_methods_are_refused_and_head_has_no_body() {
		run(|| async {
			let (addr, server, _) = server(|r| r);
			let post = exchange(addr, b"POST /health HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc").await;
			assert!(post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{post}");
			assert!(post.contains("\r\nallow: GET, HEAD\r\n"), "{post}");
			assert!(
				post.contains("\r\nconnection: close\r\n"),
				"a request with a body ends the connection"
			);
			let head = exchange(addr, b"HEAD /health HTTP/1.1\r\nconnection: close\r\n\r\n").await;
			assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
			assert!(head.contains("\r\ncontent-length: 3\r\n"), "{head}");
			assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
			server.abort();
		});
	}

	#[test]
	fn keep_alive_answers_pipelined_requests_in_order() {
		run(|| async {
			let (addr, server, scrapes) = server(|r| r);
			let mut stream = TcpStream::connect(addr).await.unwrap();
			stream
				.write_all(b"GET /metrics HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\nGET /health HTTP/1.1\r\n")
				.await
				.unwrap();
			// The third request's head is cut in two.
			stream.write_all(b"connection: close\r\n\r\n").await.unwrap();
			let all = read_to_end(&mut stream).await;
			let statuses: Vec<&str> = all
				.match_indices("HTTP/1.1 ")
				.map(|(i, _)| &all[i + 9..i + 12])
				.collect();
			assert_eq!(statuses, ["200", "404", "200"], "{all}");
			assert!(all.ends_with("connection: close\r\n\r\nok\n"), "{all}");
			assert_eq!(scrapes.get(), 1);
			// HTTP/1.0 closes unless asked to keep alive.
			let old = exchange(addr, b"GET /health HTTP/1.0\r\n\r\n").await;
			assert!(old.ends_with("ok\n") && old.contains("connection: close"), "{old}");
			let mut stream = TcpStream::connect(addr).await.unwrap();
			let request = b"GET /health HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
			for _ in 0..2 {
				stream.write_all(request).await.unwrap();
				let mut response = Vec::new();
				while !response.ends_with(b"ok\n") {
					let mut chunk = [0u8; 256];
					let n = stream.read(&mut chunk).await.unwrap();
					assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&response));
					response.extend_from_slice(&chunk[..n]);
				}
				let response = String::from_utf8_lossy(&response);
				assert!(
					response.ends_with("\r\n\r\nok\n") && !response.contains("close"),
					"{response}"
				);
			}
			server.abort();
		});
	}

	#[test]
	fn oversized_and_garbled_requests_are_refused() {
		run(|| async {
			let (addr, server, _) = server(|r| r);
			let mut big = b"GET /health HTTP/1.1\r\nx: ".to_vec();
			big.resize(MAX_HEAD + 1000, b'a');
			let response = exchange(addr, &big).await;
			assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
			let mut many = b"GET /health HTTP/1.1\r\n".to_vec();
			for i in 0..=MAX_HEADERS {
				many.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
			}
			many.extend_from_slice(b"\r\n");
			let response = exchange(addr, &many).await;
			assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
			for garbage in [
				&b"\x00\x01\x02 garbage\r\n\r\n"[..],
				b"GET /health HTTP/9.9\r\n\r\n",
				b"GET /he alth HTTP/1.1\r\n\r\n",
			] {
				let response = exchange(addr, garbage).await;
				assert!(response.starts_with("HTTP/1.1 400 "), "{response}");
			}
			// The server is still serving.
			assert_eq!(get(addr, "/health").await.unwrap().status, 200);
			server.abort();
		});
	}

	#[test]
	fn idle_and_slow_connections_time_out() {
		run(|| async {
			let timeout = Duration::from_millis(100);
			let (addr, server, _) = server(|r| r.with_timeout(timeout));
			let start = Instant::now();
			let mut idle = TcpStream::connect(addr).await.unwrap();
			assert_eq!(
				read_to_end(&mut idle).await,
				"",
				"an idle connection is closed silently"
			);
			assert!(start.elapsed() >= timeout);
			let start = Instant::now();
			let slow = exchange(addr, b"GET /health HTTP/1.1\r\n").await;
			assert!(slow.starts_with("HTTP/1.1 408 "), "{slow}");
			assert!(start.elapsed() >= timeout);
			// A keep-alive connection is idle again after its response.
			let mut stream = TcpStream::connect(addr).await.unwrap();
			stream.write_all(b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
			assert!(read_to_end(&mut stream).await.ends_with("ok\n"));
			server.abort();
		});
	}

	#[test]
	fn a_full_table_closes_its_oldest_idle_connection() {
		run(|| async {
			let (addr, server, _) = server(|r| r.with_max_connections(2));
			let mut first = TcpStream::connect(addr).await.unwrap();
			let mut second = TcpStream::connect(addr).await.unwrap();
			let mut third = TcpStream::connect(addr).await.unwrap();
			// Accepted in order: the table is full at the third, and the first, idle the longest,
			// makes room (closing the third instead would let idle clients hold every slot).
			let mut byte = [0u8; 1];
			assert!(matches!(first.read(&mut byte).await, Ok(0) | Err(_)));
			for stream in [&mut second, &mut third] {
				stream
					.write_all(b"GET /health HTTP/1.1\r\nconnection: close\r\n\r\n")
					.await
					.unwrap();
				assert!(read_to_end(stream).await.ends_with("ok\n"));
			}
			server.abort();
		});
	}

	#[test]
	fn one_address_gets_its_share_and_a_slow_head_is_cut() {
		run(|| async {
			let (addr, server, _) = server(|r| r.with_client_limits(2, Duration::from_millis(300)));
			let mut held = Vec::new();
			for _ in 0..2 {
				held.push(TcpStream::connect(addr).await.unwrap());
			}
			// A third from the same address is closed at once.
			let mut over = TcpStream::connect(addr).await.unwrap();
			let mut byte = [0u8; 1];
			assert!(matches!(over.read(&mut byte).await, Ok(0) | Err(_)));
			// A head that starts but does not finish is cut after the head deadline, not the
			// 10 s keep-alive timeout.
			let slow = &mut held[0];
			slow.write_all(b"GET /hea").await.unwrap();
			let start = Instant::now();
			let response = read_to_end(slow).await;
			assert!(response.starts_with("HTTP/1.1 408"), "{response}");
			assert!(start.elapsed() < Duration::from_secs(5));
			server.abort();
		});
	}

	#[test]
	fn stopping_the_server_closes_its_connections() {
		run(|| async {
			let (addr, server, _) = server(|r| r);
			let mut stream = TcpStream::connect(addr).await.unwrap();
			stream.write_all(b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
			let mut response = [0u8; 256];
			assert!(stream.read(&mut response).await.unwrap() > 0);
			server.abort();
			assert!(server.await.unwrap_err().is_cancelled());
			// Kept alive until now; the abort ends it (not the 10 s timeout).
			let start = Instant::now();
			assert!(matches!(stream.read(&mut response).await, Ok(0) | Err(_)));
			assert!(start.elapsed() < Duration::from_secs(5));
			// The listener is closed, or closing: a connection is refused or reset.
			if let Ok(mut late) = TcpStream::connect(addr).await {
				assert!(matches!(late.read(&mut response).await, Ok(0) | Err(_)));
			}
		});
	}
}
