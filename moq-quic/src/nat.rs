//! A NAT on loopback, for tests of clients whose address changes mid-connection.
//!
//! [`Nat`] stands between a client and a server, both on real UDP sockets: the client sends to
//! [`Nat::addr`], and the NAT sends on to the server from an outside socket of its own, and back.
//! [`Nat::rebind`] moves it to a new outside socket and forgets the old one, as a NAT does when its
//! mapping expires: the server sees the same connection come from a new address (and, on a server
//! whose workers share a port, usually on another worker's socket). Plain threads and blocking
//! sockets, so it runs beside any runtime.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

fn local() -> SocketAddr {
	SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A NAT in front of one server (see the module docs).
pub struct Nat {
	inside: Arc<UdpSocket>,
	outside: Arc<Mutex<Arc<UdpSocket>>>,
	client: Arc<Mutex<Option<SocketAddr>>>,
	/// Datagrams sent on to the client, and how many of them had been when the client last sent
	/// one on to the server (see [`answered`](Nat::answered)).
	to_client: Arc<AtomicU64>,
	answered_at: Arc<AtomicU64>,
	stop: Arc<AtomicBool>,
	threads: Vec<JoinHandle<()>>,
}

/// How often a NAT thread looks at the stop flag while no datagram comes.
const POLL: Duration = Duration::from_millis(20);

impl Nat {
	/// A NAT in front of `server`, on 127.0.0.1.
	///
	/// # Panics
	///
	/// If it cannot bind its sockets.
	pub fn new(server: SocketAddr) -> Self {
		let inside = Arc::new(UdpSocket::bind(local()).unwrap());
		inside.set_read_timeout(Some(POLL)).unwrap();
		let outside = Arc::new(Mutex::new(Arc::new(UdpSocket::bind(local()).unwrap())));
		let client = Arc::new(Mutex::new(None));
		let (to_client, answered_at) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
		let stop = Arc::new(AtomicBool::new(false));
		let outbound = {
			let (inside, outside, client, stop) = (inside.clone(), outside.clone(), client.clone(), stop.clone());
			let (to_client, answered_at) = (to_client.clone(), answered_at.clone());
			std::thread::spawn(move || {
				let mut buf = vec![0; 65536];
				while !stop.load(Ordering::Relaxed) {
					if let Ok((len, from)) = inside.recv_from(&mut buf) {
						*client.lock().unwrap() = Some(from);
						let socket = outside.lock().unwrap().clone();
						let _ = socket.send_to(&buf[..len], server);
						answered_at.store(to_client.load(Ordering::SeqCst), Ordering::SeqCst);
					}
				}
			})
		};
		let mut nat = Self {
			inside,
			outside,
			client,
			to_client,
			answered_at,
			stop,
			threads: vec![outbound],
		};
		let first = nat.outside.lock().unwrap().clone();
		nat.relay_back(first);
		nat
	}

	/// Where the client sends.
	pub fn addr(&self) -> SocketAddr {
		self.inside.local_addr().unwrap()
	}

	/// The port the server sees now.
	pub fn port(&self) -> u16 {
		self.outside.lock().unwrap().local_addr().unwrap().port()
	}

	/// Whether the client has sent something on through the NAT since the server last sent to
	/// it: it has answered what the server sent (a PATH_CHALLENGE on a new path is answered at
	/// once). A NAT that moves again before that leaves the server validating a path nobody
	/// answers on, which quinn-proto 0.11.19 does not always recover from (quinn#2658: a path
	/// validation that fails restores the old path without re-arming loss detection).
	pub fn answered(&self) -> bool {
		let sent = self.to_client.load(Ordering::SeqCst);
		sent > 0 && self.answered_at.load(Ordering::SeqCst) >= sent
	}

	/// Waits, polling every millisecond on the kio clock, until [`answered`](Self::answered).
	pub async fn settle(&self) {
		while !self.answered() {
			kio::time::sleep(Duration::from_millis(1)).await;
		}
	}

	/// Moves to a new outside socket.
	///
	/// # Panics
	///
	/// If it cannot bind one.
	pub fn rebind(&mut self) {
		let socket = Arc::new(UdpSocket::bind(local()).unwrap());
		*self.outside.lock().unwrap() = socket.clone();
		self.relay_back(socket);
	}

	/// Sends what the server sends to `socket` on to the client, while `socket` is the outside one.
	fn relay_back(&mut self, socket: Arc<UdpSocket>) {
		socket.set_read_timeout(Some(POLL)).unwrap();
		let (inside, outside, client, stop, to_client) = (
			self.inside.clone(),
			self.outside.clone(),
			self.client.clone(),
			self.stop.clone(),
			self.to_client.clone(),
		);
		self.threads.push(std::thread::spawn(move || {
			let mut buf = vec![0; 65536];
			while !stop.load(Ordering::Relaxed) && Arc::ptr_eq(&outside.lock().unwrap(), &socket) {
				if let Ok(len) = socket.recv(&mut buf)
					&& let Some(client) = *client.lock().unwrap()
					&& Arc::ptr_eq(&outside.lock().unwrap(), &socket)
				{
					let _ = inside.send_to(&buf[..len], client);
					to_client.fetch_add(1, Ordering::SeqCst);
				}
			}
		}));
	}
}

impl Drop for Nat {
	fn drop(&mut self) {
		self.stop.store(true, Ordering::Relaxed);
		for thread in self.threads.drain(..) {
			thread.join().unwrap();
		}
	}
}
