//! A NAT on loopback, for tests of clients whose address changes mid-connection.
//!
//! [`Nat`] stands between a client and a server, both on real UDP sockets: the client sends to
//! [`Nat::addr`], and the NAT sends on to the server from an outside socket of its own, and back.
//! [`Nat::rebind`] moves it to a new outside socket and forgets the old one, as a NAT does when its
//! mapping expires: the server sees the same connection come from a new address (and, on a server
//! whose workers share a port, usually on another worker's socket). Plain threads and blocking
//! sockets, so it runs beside any runtime.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
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
		let stop = Arc::new(AtomicBool::new(false));
		let outbound = {
			let (inside, outside, client, stop) = (inside.clone(), outside.clone(), client.clone(), stop.clone());
			std::thread::spawn(move || {
				let mut buf = vec![0; 65536];
				while !stop.load(Ordering::Relaxed) {
					if let Ok((len, from)) = inside.recv_from(&mut buf) {
						*client.lock().unwrap() = Some(from);
						let socket = outside.lock().unwrap().clone();
						let _ = socket.send_to(&buf[..len], server);
					}
				}
			})
		};
		let mut nat = Self {
			inside,
			outside,
			client,
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
		let (inside, outside, client, stop) = (
			self.inside.clone(),
			self.outside.clone(),
			self.client.clone(),
			self.stop.clone(),
		);
		self.threads.push(std::thread::spawn(move || {
			let mut buf = vec![0; 65536];
			while !stop.load(Ordering::Relaxed) && Arc::ptr_eq(&outside.lock().unwrap(), &socket) {
				if let Ok(len) = socket.recv(&mut buf)
					&& let Some(client) = *client.lock().unwrap()
					&& Arc::ptr_eq(&outside.lock().unwrap(), &socket)
				{
					let _ = inside.send_to(&buf[..len], client);
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
