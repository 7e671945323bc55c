//! The relay's HTTP endpoints, on TCP: its page, health, the certificate fingerprint and metrics;
//! WebSocket upgrades handed over ([`Routes::with_websocket`]), and on the same port TLS
//! (`https://`, `wss://`) and QMux without HTTP (`http/port.rs`: the first bytes tell them apart).
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

mod message;
mod port;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
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
use moq_quic::byte_stream::ByteStream;

use crate::metrics;
use message::{Head, PAGE_SCRIPT, Parsed, Response, page, parse};
pub use port::Qmux;

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
	/// TLS on the port ([`with_tls`](Self::with_tls)).
	tls: Option<Arc<moq_quic::tls::rustls::ServerConfig>>,
	/// Who takes QMux without HTTP ([`with_qmux`](Self::with_qmux)).
	qmux: Option<Rc<dyn Fn(Qmux)>>,
}

/// A WebSocket upgrade, handed over whole: its connection leaves the HTTP server's table, and the
/// handler answers it (101, or a refusal) and serves it.
pub struct WebSocket {
	/// The connection, its request head read.
	pub stream: ByteStream,
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
			tls: None,
			qmux: None,
		}
	}

	/// Serves TLS too, on the same port (a connection whose first byte starts a TLS handshake):
	/// HTTP and WebSocket over it, and QMux records when the ALPN names a QMux version.
	pub fn with_tls(mut self, config: Arc<moq_quic::tls::rustls::ServerConfig>) -> Self {
		self.tls = Some(config);
		self
	}

	/// Hands every QMux connection without HTTP (over TLS by its ALPN, or plaintext by its first
	/// record) to `handler`. Without one, such a connection is served as HTTP (and refused).
	pub fn with_qmux(mut self, handler: impl Fn(Qmux) + 'static) -> Self {
		self.qmux = Some(Rc::new(handler));
		self
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
/// Constant bodies (the page, its script) are written from where they are, never copied. Under
/// TLS, rustls's buffers too ([`TLS_COST`](moq_quic::byte_stream::TLS_COST)): every connection
/// is charged as if it were, as the first bytes are not read yet when it is counted.
pub const CONNECTION_COST: u64 = (192 << 10) + moq_quic::byte_stream::TLS_COST;

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

async fn write_all(stream: &mut ByteStream, deadline: &mut Deadline, mut bytes: &[u8]) -> io::Result<()> {
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
async fn close(mut stream: ByteStream, deadline: &mut Deadline) -> io::Result<()> {
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
	stream: TcpStream,
	peer: std::net::SocketAddr,
	routes: &Routes,
	idle: &Cell<bool>,
) -> io::Result<()> {
	// Responses are written whole; Nagle would only hold a keep-alive response back.
	stream.set_nodelay(true)?;
	let local = stream.local_addr()?.ip();
	let by = kio::time::now() + routes.head_timeout;
	let (mut stream, mut buf) = match port::open(stream, peer, routes.tls.as_ref(), by).await? {
		None => return Ok(()),
		Some(port::Opened::Http(stream, first)) => (stream, first),
		Some(port::Opened::Qmux(qmux)) => {
			match &routes.qmux {
				Some(handler) => handler(qmux),
				None => tracing::debug!(%peer, "http: QMux without HTTP is not served here"),
			}
			return Ok(());
		}
	};
	buf.reserve(1024);
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
mod tests;
