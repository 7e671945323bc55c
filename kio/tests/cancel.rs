//! A cancel storm: thousands of receives, sends, accepts and reads dropped at every stage of
//! their life (spilled, staged, in the kernel, completed but not taken), with datagrams and
//! connections landing on operations whose owners are gone. Afterwards the driver's op, buffer
//! and fd counters must be back to zero.

use std::task::Poll;
use std::time::Duration;

use kio::net::{TcpListener, TcpStream, Transmit, UdpConfig, UdpSocket};
use kio::{Builder, IoCounters};

mod common;
use common::{local, poll_once};

/// Yields until `cond` holds, failing after 10 s of runtime clock.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
	let deadline = kio::time::now() + Duration::from_secs(10);
	while !cond() {
		assert!(
			kio::time::now() < deadline,
			"timed out waiting for {what}: {:?}",
			kio::io_counters()
		);
		kio::yield_now().await;
	}
}

fn quiet(c: IoCounters) -> bool {
	c.ops == 0 && c.orphans == 0 && c.bufs_out == 0 && c.buf_rings == 0 && c.fds == 0
}

#[test]
fn a_cancel_storm_leaves_no_ops_buffers_or_fds_behind() {
	// A 32-entry ring: the storm overflows it, so entries spill and some are dropped unsubmitted.
	let rt = Builder::single().ring_entries(32).build().unwrap();
	rt.block_on(async {
		let before = kio::io_counters();
		let mut most_orphans = 0;
		let blaster = std::net::UdpSocket::bind(local()).unwrap();
		let config = UdpConfig::new().rx_buffers(2).max_payload(64);
		// A live pair through the whole storm: a cancel that hit the wrong operation (a reused
		// slot) would end its receive with ECANCELED, or lose a send.
		let (ping, pong) = (UdpSocket::bind(local()).unwrap(), UdpSocket::bind(local()).unwrap());
		let mut pings = 0u32;
		let mut check_live = async || {
			pings += 1;
			ping.send_to(&pings.to_le_bytes(), pong.local_addr()).await.unwrap();
			let train = pong.recv().await.expect("the live receive was never cancelled");
			assert_eq!(train.payload(), &pings.to_le_bytes());
		};

		// 2000 multishot receives armed, fed (half of them) and dropped.
		for wave in 0..40u8 {
			let sockets: Vec<UdpSocket> = (0..50)
				.map(|_| UdpSocket::bind_with(local(), &config).unwrap())
				.collect();
			let mut held = Vec::new();
			for (i, socket) in sockets.iter().enumerate() {
				drop(poll_once(Box::pin(socket.recv())).await);
				if i % 2 == 0 {
					// Three datagrams for a two-buffer ring: the third meets ENOBUFS.
					for _ in 0..3 {
						blaster.send_to(&[wave; 32], socket.local_addr()).unwrap();
					}
				}
			}
			if wave % 2 == 0 {
				// Reap, so some completions are queued (not taken) when their socket drops.
				kio::yield_now().await;
				for socket in sockets.iter().step_by(4) {
					if let Poll::Ready(Ok(train)) = kio::wait(|w| Poll::Ready(socket.poll_recv(w))).await {
						assert_eq!(train.payload(), &[wave; 32]);
						held.push(train);
					}
				}
			}
			drop(sockets);
			check_live().await;
			most_orphans = most_orphans.max(kio::io_counters().orphans);
			// Leases outlive their sockets, then go.
			drop(held);
		}

		// 2000 sends polled once and dropped; every fourth is a GSO train.
		let tx = UdpSocket::bind(local()).unwrap();
		let sink = UdpSocket::bind(local()).unwrap();
		let train = vec![1u8; 10 * 100];
		for i in 0..2000 {
			let t = if i % 4 == 0 {
				Transmit::new(sink.local_addr(), &train).segments(100)
			} else {
				Transmit::new(sink.local_addr(), &train[..100])
			};
			let send = poll_once(Box::pin(tx.send(&t))).await;
			if i % 7 == 0 {
				kio::yield_now().await;
			}
			drop(send);
			if i % 100 == 0 {
				check_live().await;
			}
			most_orphans = most_orphans.max(kio::io_counters().orphans);
		}

		// Accepts: connections land on a multishot accept whose listener is dropped, before and
		// after its completions are reaped; reads in the kernel dropped with their streams.
		for round in 0..20 {
			let listener = TcpListener::bind(local()).unwrap();
			let addr = listener.local_addr();
			drop(poll_once(Box::pin(listener.accept())).await);
			let mut clients = Vec::new();
			for _ in 0..10 {
				clients.push(TcpStream::connect(addr).await.unwrap());
			}
			if round % 2 == 0 {
				kio::yield_now().await;
			}
			let (mut server, _) = listener.accept().await.unwrap();
			drop(listener);
			let mut buf = [0u8; 8];
			drop(poll_once(Box::pin(server.read(&mut buf))).await);
			for client in &mut clients {
				drop(poll_once(Box::pin(client.read(&mut buf))).await);
			}
			drop(server);
			drop(clients);
			check_live().await;
			most_orphans = most_orphans.max(kio::io_counters().orphans);
		}

		drop((tx, sink, ping, pong));
		until("every orphan to reach its terminal completion", || {
			quiet(kio::io_counters())
		})
		.await;
		let after = kio::io_counters();
		assert!(most_orphans > 0, "the storm left operations in flight without owners");
		// Orphans in the kernel get a cancel each; orphans still spilled are dropped unsubmitted.
		assert!(after.cancels - before.cancels >= 2000, "cancels issued: {after:?}");
		assert!(
			after.spilled > before.spilled,
			"the submission queue spilled: {after:?}"
		);
		assert_eq!(after.stray, 0);
	});
	let c = kio::io_counters();
	assert!(quiet(c), "after the runtime: {c:?}");
}
