//! The endpoint: one UDP socket (or simulated port) and one `quinn_proto::Endpoint` per worker.
//!
//! Two tasks serve the socket. The **receiver** takes GRO trains, feeds
//! `quinn_proto::Endpoint::handle` one datagram at a time, resolves every `Incoming` (accepted,
//! or refused with its response sent: an unresolved one leaks its buffers), and routes connection
//! events to their connection, marking it dirty. The **sender** drains the endpoint's queue of
//! produced transmits: each a datagram or a GSO train, 32 to a `sendmmsg` that does not wait
//! (`UdpSocket::try_send_many`: no ring operation and no copy per datagram), and one the kernel
//! cannot take at once through the ring's `sendmsg`, which waits for room or falls back from GSO,
//! before the rest, and a transmit quinn-proto produced is never dropped: when the queue is
//! full, connections stop polling for more until the sender has made room.
//!
//! Ownership: the endpoint's table holds each connection's shared state; a connection refers back
//! to the endpoint weakly, so the two never keep each other alive. Dropping the last [`Endpoint`]
//! handle aborts its tasks and every connection's driver.
//!
//! Borrow order (docs/moq-quic.md §4): connection, then endpoint. Code here never calls into a
//! connection while it holds the endpoint's state: it collects what it needs (a connection's
//! `Rc`, the list of connections), releases the borrow, then calls; connections assert it in
//! debug builds.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

use bytes::BytesMut;
use kio::net::{Ecn, UdpConfig, UdpSocket};
use kio::{JoinHandle, Waiter, WaiterList};
use quinn_proto::{ConnectionHandle, DatagramEvent, EcnCodepoint};

use crate::connection::Memory;
use crate::connection::{self, ConnShared, Connection};
use crate::idhash::IdMap;
use crate::limits::{Admit, Handshake};
use crate::route::{Forwarded, Router, WorkerIds};
use crate::sim;
use crate::{Config, ConnectError};

/// Transmits the sender hands to the kernel per loop turn.
const TX_BATCH: usize = 32;
/// The capacity of a buffer for a transmit of one datagram (quinn-proto's MTU discovery stops at
/// 1,452 bytes by default): one that fits is copied out of the `poll_transmit` buffer into one
/// of these (see `connection::turn`).
pub(crate) const SMALL_BUF: usize = 1500;
/// `poll_transmit` buffers kept for reuse (one serves each connection turn, and a GSO train
/// queues one).
const POOL_LIMIT: usize = 96;

/// What a transmit carries out of a connection.
pub(crate) struct Outgoing {
	pub(crate) destination: SocketAddr,
	pub(crate) ecn: Option<EcnCodepoint>,
	pub(crate) src_ip: Option<IpAddr>,
	pub(crate) segment_size: Option<usize>,
	pub(crate) buf: Vec<u8>,
}

/// Counters of one endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
	/// Datagrams received.
	pub datagrams_in: u64,
	/// Bytes received (UDP payload).
	pub bytes_in: u64,
	/// Datagrams sent.
	pub datagrams_out: u64,
	/// Bytes sent (UDP payload).
	pub bytes_out: u64,
	/// Transmits handed to the sender, each a datagram or a GSO train: one message to the kernel.
	pub transmits: u64,
	/// Connections accepted (handshake complete).
	pub accepted: u64,
	/// Incoming connections refused.
	pub refused: u64,
	/// Connections currently open.
	pub open: u64,
	/// Sends that failed (the datagrams are lost; QUIC's recovery resends their data).
	pub send_errors: u64,
	/// Connection turns that found the sender's queue full ([`Config::send_queue`]) and waited
	/// for room before producing.
	pub send_queue_waits: u64,
	/// What the connections' send buffers hold now: bytes their streams queue, not yet handed to
	/// quinn-proto, and those chunks' cost (at most [`Config::send_buffer`] each).
	pub stream_queued: u64,
}

pub(crate) enum Io {
	// Boxed: a socket is ten times the size of a simulated port.
	Udp(Box<UdpSocket>),
	Sim(sim::Port),
}

pub(crate) struct EndpointState {
	pub(crate) proto: quinn_proto::Endpoint,
	pub(crate) config: Config,
	conns: IdMap<ConnectionHandle, Rc<ConnShared>>,
	/// Server connections still handshaking, each with its charge to the handshake budget.
	handshaking: IdMap<ConnectionHandle, Handshake>,
	accepted: VecDeque<Connection>,
	accept_waiters: WaiterList,
	drain_waiters: WaiterList,
	tx: VecDeque<Outgoing>,
	/// The capacity of the buffers in `tx`, bounded by [`Config::send_queue`].
	tx_bytes: usize,
	tx_waiters: WaiterList,
	tx_space: WaiterList,
	/// Buffers for `poll_transmit`, and for single datagrams ([`SMALL_BUF`]).
	pool: Vec<Vec<u8>>,
	small_pool: Vec<Vec<u8>>,
	pub(crate) stats: EndpointStats,
	closed: bool,
	response: Vec<u8>,
}

pub(crate) struct EndpointShared {
	pub(crate) state: RefCell<EndpointState>,
	io: Io,
	local: SocketAddr,
	/// Connection drivers, aborted with the endpoint.
	drivers: RefCell<IdMap<ConnectionHandle, JoinHandle<()>>>,
}

struct Handle {
	shared: Rc<EndpointShared>,
	tasks: Vec<JoinHandle<()>>,
}

impl Drop for Handle {
	/// Closes every connection (code 0) and, on a worker, lingers in a task for at most
	/// [`LINGER`] until they have drained, so their CONNECTION_CLOSE reaches the peers; then the
	/// socket's tasks and the drivers stop. (Stopping them at once left peers to find out by their
	/// idle timeout.)
	fn drop(&mut self) {
		let shared = self.shared.clone();
		let tasks = Rc::new(std::cell::Cell::new(std::mem::take(&mut self.tasks)));
		let conns: Vec<_> = shared.state.borrow().conns.values().cloned().collect();
		for conn in conns {
			conn.close(0, b"");
		}
		let linger = {
			let (shared, tasks) = (shared.clone(), tasks.clone());
			async move {
				let mut deadline = kio::time::Deadline::new(Some(kio::time::now() + LINGER));
				kio::wait(|w| {
					let mut state = shared.state.borrow_mut();
					if state.conns.is_empty() {
						return Poll::Ready(());
					}
					state.drain_waiters.register(w);
					drop(state);
					deadline.poll_elapsed(w)
				})
				.await;
				shut(&shared, tasks.take());
			}
		};
		if let Some(task) = kio::try_spawn(linger) {
			drop(task); // Detached: it ends by itself.
		} else {
			// Outside a worker (a runtime being torn down): nothing can run any more.
			shut(&shared, tasks.take());
		}
	}
}

/// The longest a dropped endpoint lingers for its connections to drain.
const LINGER: std::time::Duration = std::time::Duration::from_secs(3);

/// Stops an endpoint's tasks and drivers; whoever still holds a connection hears it is closed.
fn shut(shared: &Rc<EndpointShared>, tasks: Vec<JoinHandle<()>>) {
	for task in tasks {
		task.abort();
	}
	let drivers: Vec<_> = shared.drivers.borrow_mut().drain().map(|(_, d)| d).collect();
	for driver in drivers {
		driver.abort();
	}
	let mut state = shared.state.borrow_mut();
	state.closed = true;
	let conns: Vec<_> = state.conns.drain().map(|(_, c)| c).collect();
	state.accepted.clear();
	let wakes = state.accept_waiters.take();
	drop(state);
	wakes.wake();
	for conn in conns {
		conn.abandon();
	}
}

/// A QUIC endpoint on the current kio worker: a server, a client, or both. Cheap to clone.
#[derive(Clone)]
pub struct Endpoint(Rc<Handle>);

impl Endpoint {
	/// Binds a UDP socket at `addr` on this worker (with `SO_REUSEPORT` when the configuration
	/// shares the port between workers, [`Config::with_shared_port`]) and starts serving it.
	pub fn bind(addr: SocketAddr, config: Config) -> io::Result<Self> {
		let udp = UdpConfig::new()
			.reuse_port(config.shared_port)
			.gro(config.gro)
			.recv_buffer(config.socket_buffer)
			.send_buffer(config.socket_buffer);
		let socket = UdpSocket::bind_with(addr, &udp)?;
		socket.set_gso_enabled(config.gso_segments > 1);
		let local = socket.local_addr();
		Ok(Self::start(Io::Udp(Box::new(socket)), local, config))
	}

	/// An endpoint on a simulated network (see [`sim`](crate::sim)).
	pub fn simulated(network: &sim::Network, addr: SocketAddr, config: Config) -> Self {
		let port = network.bind(addr);
		Self::start(Io::Sim(port), addr, config)
	}

	fn start(io: Io, local: SocketAddr, config: Config) -> Self {
		let allow_mtud = matches!(io, Io::Udp(_));
		let router = config.router.clone();
		let mut endpoint = config.endpoint.clone();
		if let Some((_, worker)) = router {
			endpoint.cid_generator(move || Box::new(WorkerIds::new(worker)));
		}
		let proto = quinn_proto::Endpoint::new(
			Arc::new(endpoint),
			config.server.clone().map(Arc::new),
			allow_mtud,
			None,
		);
		let shared = Rc::new(EndpointShared {
			state: RefCell::new(EndpointState {
				proto,
				config,
				conns: IdMap::default(),
				accepted: VecDeque::new(),
				handshaking: IdMap::default(),
				accept_waiters: WaiterList::new(),
				drain_waiters: WaiterList::new(),
				tx: VecDeque::new(),
				tx_bytes: 0,
				tx_waiters: WaiterList::new(),
				tx_space: WaiterList::new(),
				pool: Vec::new(),
				small_pool: Vec::new(),
				stats: EndpointStats::default(),
				closed: false,
				response: Vec::new(),
			}),
			io,
			local,
			drivers: RefCell::new(IdMap::default()),
		});
		let mut tasks = vec![
			kio::spawn(receive(shared.clone(), router.clone())),
			kio::spawn(send(shared.clone())),
		];
		if let Some((router, worker)) = router {
			tasks.push(kio::spawn(receive_forwarded(shared.clone(), router, worker)));
		}
		Self(Rc::new(Handle { shared, tasks }))
	}

	/// The idle timeout of the configuration it was made with ([`Config::idle_timeout`]), for
	/// connections made with a configuration of their own ([`connect_with`](Self::connect_with)).
	pub fn idle_timeout(&self) -> std::time::Duration {
		self.0.shared.state.borrow().config.idle_timeout
	}

	/// The bound address.
	pub fn local_addr(&self) -> SocketAddr {
		self.0.shared.local
	}

	/// Counters.
	pub fn stats(&self) -> EndpointStats {
		let state = self.0.shared.state.borrow();
		EndpointStats {
			open: state.conns.len() as u64,
			stream_queued: state.conns.values().map(|conn| conn.send_buffer_used() as u64).sum(),
			..state.stats
		}
	}

	/// The socket's counters, for a UDP endpoint.
	pub fn udp_stats(&self) -> Option<kio::net::UdpStats> {
		match &self.0.shared.io {
			Io::Udp(socket) => Some(socket.stats()),
			Io::Sim(_) => None,
		}
	}

	/// Starts a connection to `addr`, verifying the server as `server_name` with the client
	/// configuration given in [`Config::client`]. Await [`Connection::established`] for the
	/// handshake.
	pub fn connect(&self, addr: SocketAddr, server_name: &str) -> Result<Connection, ConnectError> {
		let client = self
			.0
			.shared
			.state
			.borrow()
			.config
			.client
			.clone()
			.ok_or(ConnectError::NoClientConfig)?;
		self.connect_with(client, addr, server_name)
	}

	/// [`Self::connect`] with an explicit client configuration.
	pub fn connect_with(
		&self,
		client: quinn_proto::ClientConfig,
		addr: SocketAddr,
		server_name: &str,
	) -> Result<Connection, ConnectError> {
		let now = kio::time::now();
		let (handle, conn) = self
			.0
			.shared
			.state
			.borrow_mut()
			.proto
			.connect(now, client, addr, server_name)?;
		Ok(Connection::new(
			adopt(&self.0.shared, handle, conn, None),
			Some(self.clone()),
		))
	}

	/// The next connection a client opened to this endpoint, once its handshake is complete;
	/// `None` once the endpoint is closed.
	pub fn poll_accept(&self, waiter: &Waiter) -> Poll<Option<Connection>> {
		let mut state = self.0.shared.state.borrow_mut();
		if let Some(conn) = state.accepted.pop_front() {
			return Poll::Ready(Some(conn));
		}
		if state.closed {
			return Poll::Ready(None);
		}
		state.accept_waiters.register(waiter);
		Poll::Pending
	}

	/// See [`Self::poll_accept`].
	pub async fn accept(&self) -> Option<Connection> {
		kio::wait(|w| self.poll_accept(w)).await
	}

	/// Stops accepting: new connection attempts are refused; open connections go on.
	pub fn stop_accepting(&self) {
		let mut state = self.0.shared.state.borrow_mut();
		state.proto.set_server_config(None);
		state.config.server = None;
	}

	/// Closes every connection with `code` and stops accepting.
	pub fn close(&self, code: u64, reason: &str) {
		self.stop_accepting();
		let conns: Vec<_> = self.0.shared.state.borrow().conns.values().cloned().collect();
		for conn in conns {
			conn.close(code, reason.as_bytes());
		}
		let mut state = self.0.shared.state.borrow_mut();
		state.closed = true;
		let wakes = state.accept_waiters.take();
		drop(state);
		wakes.wake();
	}

	/// Connections still open (handshaking, established or closing).
	pub fn open_connections(&self) -> usize {
		self.0.shared.state.borrow().conns.len()
	}

	/// Ready once no connection is left (each has drained after its close).
	pub fn poll_drained(&self, waiter: &Waiter) -> Poll<()> {
		let mut state = self.0.shared.state.borrow_mut();
		if state.conns.is_empty() {
			return Poll::Ready(());
		}
		state.drain_waiters.register(waiter);
		Poll::Pending
	}

	/// See [`Self::poll_drained`].
	pub async fn drained(&self) {
		kio::wait(|w| self.poll_drained(w)).await
	}
}

impl std::fmt::Debug for Endpoint {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		f.debug_struct("Endpoint")
			.field("local", &self.local_addr())
			.finish_non_exhaustive()
	}
}

/// Puts a new connection in the table and starts its driver.
/// The memory a new connection from `ip` is charged, if the configuration charges any: its own
/// budget under the address's, holding [`CONNECTION_COST`](crate::CONNECTION_COST) and its
/// starting receive window; `Err` if the address's budget cannot take that.
fn memory_for(config: &Config, ip: IpAddr) -> Result<Option<Memory>, ()> {
	let Some(accounts) = &config.memory else {
		return Ok(None);
	};
	let budget = accounts.account(ip).child(u64::MAX);
	let charge = |amount: u64| match budget.charge(amount) {
		Some(charge) => Ok(charge),
		// Room is being made: charged over the budget until it is.
		None if accounts.make_room(ip, amount) => {
			let mut charge = budget.empty();
			charge.force(amount);
			Ok(charge)
		}
		None => Err(()),
	};
	let base = charge(crate::CONNECTION_COST)?;
	let window = charge(config.server_window)?;
	Ok(Some(Memory {
		queued: budget.empty(),
		budget,
		_cost: base,
		window,
	}))
}

fn adopt(
	shared: &Rc<EndpointShared>,
	handle: ConnectionHandle,
	conn: quinn_proto::Connection,
	memory: Option<Memory>,
) -> Rc<ConnShared> {
	let (gso, max_streams, send_buffer) = {
		let state = shared.state.borrow();
		let gso = match &shared.io {
			Io::Udp(socket) if socket.gso_enabled() => state.config.gso_segments,
			Io::Udp(_) => 1,
			Io::Sim(_) => state.config.gso_segments,
		};
		(gso, state.config.max_streams, state.config.send_buffer)
	};
	let conn = ConnShared::new(
		handle,
		Rc::downgrade(shared),
		conn,
		gso.max(1),
		max_streams,
		send_buffer,
		memory,
	);
	shared.state.borrow_mut().conns.insert(handle, conn.clone());
	let driver = kio::spawn(connection::drive(conn.clone()));
	shared.drivers.borrow_mut().insert(handle, driver);
	conn
}

impl EndpointState {
	/// Whether the sender's queue has room for another transmit ([`Config::send_queue`]).
	fn tx_room(&self) -> bool {
		self.tx_bytes < self.config.send_queue
	}

	/// A server connection's handshake ended (completed, failed or timed out): its budget share
	/// goes back.
	fn handshake_over(&mut self, handle: ConnectionHandle) {
		self.handshaking.remove(&handle);
	}
}

impl EndpointShared {
	/// Queues a transmit for the sender.
	pub(crate) fn queue(&self, out: Outgoing) {
		let mut state = self.state.borrow_mut();
		let datagrams = out.segment_size.map_or(1, |s| out.buf.len().div_ceil(s.max(1))) as u64;
		state.stats.datagrams_out += datagrams;
		state.stats.bytes_out += out.buf.len() as u64;
		state.stats.transmits += 1;
		state.tx_bytes += out.buf.capacity();
		state.tx.push_back(out);
		let wakes = state.tx_waiters.take();
		drop(state);
		wakes.wake();
	}

	/// Whether connections may produce another transmit; if not, `waiter` hears when they may.
	pub(crate) fn poll_tx_space(&self, waiter: &Waiter) -> bool {
		let mut state = self.state.borrow_mut();
		if state.tx_room() {
			return true;
		}
		state.tx_space.register(waiter);
		false
	}

	/// Whether connections may produce another transmit; a connection told no waits for room
	/// ([`poll_tx_space`](Self::poll_tx_space)), and is counted.
	pub(crate) fn has_tx_space(&self) -> bool {
		let mut state = self.state.borrow_mut();
		let room = state.tx_room();
		state.stats.send_queue_waits += u64::from(!room);
		room
	}

	/// A buffer for `poll_transmit`, from the pool.
	pub(crate) fn take_buf(&self) -> Vec<u8> {
		self.state.borrow_mut().pool.pop().unwrap_or_default()
	}

	/// A buffer of [`SMALL_BUF`] bytes' capacity, from its pool.
	pub(crate) fn take_small_buf(&self) -> Vec<u8> {
		let mut state = self.state.borrow_mut();
		state.small_pool.pop().unwrap_or_else(|| Vec::with_capacity(SMALL_BUF))
	}

	/// A sent buffer back to the pool of its size.
	pub(crate) fn recycle(&self, mut buf: Vec<u8>) {
		buf.clear();
		let mut state = self.state.borrow_mut();
		let small_limit = state.config.send_queue / SMALL_BUF + TX_BATCH;
		let (pool, limit) = if buf.capacity() > SMALL_BUF {
			(&mut state.pool, POOL_LIMIT)
		} else if buf.capacity() == SMALL_BUF {
			// As many as a full queue holds, so a fan-out burst reuses the last one's buffers.
			(&mut state.small_pool, small_limit)
		} else {
			return;
		};
		if pool.len() < limit {
			pool.push(buf);
		}
	}

	/// The connection has drained: forget it.
	pub(crate) fn forget(&self, handle: ConnectionHandle) {
		let mut state = self.state.borrow_mut();
		state.handshake_over(handle);
		state.conns.remove(&handle);
		if state.conns.is_empty() {
			state.drain_waiters.wake();
		}
		drop(state);
		// The driver is the caller: dropping its handle detaches it, and it returns next.
		self.drivers.borrow_mut().remove(&handle);
	}

	/// A server connection completed its handshake.
	pub(crate) fn established(&self, conn: Connection) {
		let mut state = self.state.borrow_mut();
		state.handshake_over(conn.0.shared.handle);
		if state.closed {
			return;
		}
		state.stats.accepted += 1;
		state.accepted.push_back(conn);
		let wakes = state.accept_waiters.take();
		drop(state);
		wakes.wake();
	}

	fn handle_datagram(
		self: &Rc<Self>,
		now: std::time::Instant,
		from: SocketAddr,
		local_ip: Option<IpAddr>,
		ecn: Option<EcnCodepoint>,
		data: BytesMut,
	) {
		let mut state = self.state.borrow_mut();
		state.stats.datagrams_in += 1;
		state.stats.bytes_in += data.len() as u64;
		let mut response = std::mem::take(&mut state.response);
		let event = state.proto.handle(now, from, local_ip, ecn, data, &mut response);
		match event {
			None => {}
			Some(DatagramEvent::ConnectionEvent(handle, event)) => {
				if let Some(conn) = state.conns.get(&handle).cloned() {
					drop(state);
					conn.deliver(event);
					state = self.state.borrow_mut();
				}
			}
			Some(DatagramEvent::NewConnection(incoming)) => {
				let ip = incoming.remote_address().ip();
				let budget = state.config.handshakes.clone();
				let admit = match state.config.server.is_none() || state.closed {
					true => Admit::Refuse,
					false => budget.admit(ip, incoming.remote_address_validated(), incoming.may_retry()),
				};
				// A refusal or a Retry is a stateless answer; an accepted connection gets a driver.
				let answer = match admit {
					Admit::Accept(handshake) => match (memory_for(&state.config, ip), incoming) {
						(Err(()), incoming) => {
							state.stats.refused += 1;
							Some(state.proto.refuse(incoming, &mut response))
						}
						(Ok(memory), incoming) => match state.proto.accept(incoming, now, &mut response, None) {
							Ok((handle, conn)) => {
								state.handshaking.insert(handle, handshake);
								drop(state);
								// Its driver hands it to `accept` once the handshake is complete.
								adopt(self, handle, conn, memory);
								state = self.state.borrow_mut();
								None
							}
							Err(error) => {
								state.stats.refused += 1;
								error.response
							}
						},
					},
					Admit::Retry => match state.proto.retry(incoming, &mut response) {
						Ok(transmit) => Some(transmit),
						Err(err) => Some(state.proto.refuse(err.into_incoming(), &mut response)),
					},
					Admit::Refuse => {
						state.stats.refused += 1;
						Some(state.proto.refuse(incoming, &mut response))
					}
				};
				if let Some(transmit) = answer {
					drop(state);
					self.respond(transmit, &response);
					state = self.state.borrow_mut();
				}
			}
			Some(DatagramEvent::Response(transmit)) => {
				drop(state);
				self.respond(transmit, &response);
				state = self.state.borrow_mut();
			}
		}
		response.clear();
		state.response = response;
	}

	fn respond(&self, transmit: quinn_proto::Transmit, contents: &[u8]) {
		let mut buf = self.take_buf();
		buf.extend_from_slice(&contents[..transmit.size]);
		self.queue(Outgoing {
			destination: transmit.destination,
			ecn: transmit.ecn,
			src_ip: transmit.src_ip,
			segment_size: transmit.segment_size,
			buf,
		});
	}
}

fn ecn_in(ecn: Option<Ecn>) -> Option<EcnCodepoint> {
	ecn.and_then(|e| EcnCodepoint::from_bits(e as u8))
}

/// A queued transmit as the socket takes it.
fn transmit(out: &Outgoing) -> kio::net::Transmit<'_> {
	let mut transmit = kio::net::Transmit::new(out.destination, &out.buf);
	if let Some(size) = out.segment_size.filter(|s| *s < out.buf.len()) {
		transmit = transmit.segments(size);
	}
	if let Some(ecn) = ecn_out(out.ecn) {
		transmit = transmit.ecn(ecn);
	}
	if let Some(ip) = out.src_ip {
		transmit = transmit.src_ip(ip);
	}
	transmit
}

fn ecn_out(ecn: Option<EcnCodepoint>) -> Option<Ecn> {
	ecn.map(|e| match e {
		EcnCodepoint::Ect0 => Ecn::Ect0,
		EcnCodepoint::Ect1 => Ecn::Ect1,
		EcnCodepoint::Ce => Ecn::Ce,
	})
}

/// The receiver task; with a `router`, datagrams for another worker's connections go to it.
async fn receive(shared: Rc<EndpointShared>, router: Option<(Arc<Router>, u8)>) {
	match &shared.io {
		Io::Udp(socket) => loop {
			let train = match socket.recv().await {
				Ok(train) => train,
				// A failed multishot re-arms on the next call; only a closed socket ends this.
				Err(e) if e.raw_os_error() == Some(libc::EBADF) => return,
				Err(_) => continue,
			};
			let now = kio::time::now();
			let (peer, local_ip, ecn) = (train.peer(), train.local_ip(), ecn_in(train.ecn()));
			for datagram in train.segments() {
				if let Some((router, me)) = &router
					&& let Some(owner) = router.owner(*me, datagram)
				{
					let payload = BytesMut::from(datagram);
					router.forward(
						owner,
						Forwarded {
							from: peer,
							local_ip,
							ecn,
							payload,
						},
					);
					continue;
				}
				// Copied out of the ring's buffer, which goes back to the kernel.
				shared.handle_datagram(now, peer, local_ip, ecn, BytesMut::from(datagram));
			}
		},
		Io::Sim(port) => loop {
			let Some(datagram) = port.recv().await else {
				return;
			};
			let now = kio::time::now();
			shared.handle_datagram(
				now,
				datagram.from,
				None,
				datagram.ecn,
				BytesMut::from(&datagram.payload[..]),
			);
		},
	}
}

/// Handles the datagrams other workers received for this endpoint's connections (see
/// [`Router`]).
async fn receive_forwarded(shared: Rc<EndpointShared>, router: Arc<Router>, me: u8) {
	loop {
		let datagram = kio::wait(|waiter| router.poll_take(me, waiter)).await;
		shared.handle_datagram(
			kio::time::now(),
			datagram.from,
			datagram.local_ip,
			datagram.ecn,
			datagram.payload,
		);
	}
}

/// The sender task.
async fn send(shared: Rc<EndpointShared>) {
	let mut batch: Vec<Outgoing> = Vec::with_capacity(TX_BATCH);
	loop {
		kio::wait(|w| {
			let mut state = shared.state.borrow_mut();
			if state.tx.is_empty() {
				state.tx_waiters.register(w);
				return Poll::Pending;
			}
			let take = state.tx.len().min(TX_BATCH);
			let EndpointState { tx, tx_bytes, .. } = &mut *state;
			batch.extend(tx.drain(..take).inspect(|out| *tx_bytes -= out.buf.capacity()));
			let wakes = state.tx_space.take();
			drop(state);
			wakes.wake();
			Poll::Ready(())
		})
		.await;
		match &shared.io {
			Io::Udp(socket) => {
				let transmits: Vec<kio::net::Transmit<'_>> = batch.iter().map(transmit).collect();
				let mut failed = 0;
				let mut at = 0;
				while at < transmits.len() {
					let (sent, next) = socket.try_send_many(&transmits[at..]);
					at += sent;
					if at == transmits.len() {
						break;
					}
					// The next one could not go at once: through the ring, which waits for room
					// in the socket's buffer and falls back from GSO; or it failed.
					let failure = match next {
						Ok(()) => socket.send(&transmits[at]).await.is_err(),
						Err(_) => true,
					};
					failed += u64::from(failure);
					at += 1;
				}
				drop(transmits);
				for out in batch.drain(..) {
					shared.recycle(out.buf);
				}
				if failed > 0 {
					shared.state.borrow_mut().stats.send_errors += failed;
				}
			}
			Io::Sim(port) => {
				for out in batch.drain(..) {
					port.send(&out);
					shared.recycle(out.buf);
				}
			}
		}
	}
}
