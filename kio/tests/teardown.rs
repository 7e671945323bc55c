//! Dropping a runtime with operations in flight neither hangs nor leaks: teardown submits what
//! is staged, cancels everything, reaps to empty within its deadline, closes the ring, and only
//! then frees. The driver's counters (`kio::io_counters`, per thread) must all be back to zero.

use std::task::Poll;
use std::time::{Duration, Instant};

use kio::net::{TcpListener, TcpStream, Transmit, UdpConfig, UdpSocket};
use kio::{Builder, IoCounters};

mod common;
use common::{local, poll_once};

fn assert_no_leaks(what: &str) {
	let c = kio::io_counters();
	let leaked = IoCounters {
		cancels: 0,
		spilled: 0,
		..c
	};
	assert_eq!(
		leaked,
		IoCounters::default(),
		"{what}: the driver still holds something: {c:?}"
	);
}

#[test]
fn dropping_a_runtime_with_operations_in_flight_neither_hangs_nor_leaks() {
	let rt = Builder::single().ring_entries(64).build().unwrap();
	let (outside, train, in_flight) = rt.block_on(async {
		// Receives armed in tasks that never finish.
		for _ in 0..50 {
			drop(kio::spawn(async {
				let socket = UdpSocket::bind_with(local(), &UdpConfig::new().rx_buffers(4)).unwrap();
				let _ = socket.recv().await;
				unreachable!("nobody sends to this socket");
			}));
		}
		// An accept nobody connects to, a read nobody writes to, and a write nobody reads: each
		// waits in the kernel.
		let listener = TcpListener::bind(local()).unwrap();
		drop(kio::spawn(async move {
			let _ = listener.accept().await;
			unreachable!("nobody connects");
		}));
		let pairs = TcpListener::bind(local()).unwrap();
		let mut reader = TcpStream::connect(pairs.local_addr()).await.unwrap();
		let (silent, _) = pairs.accept().await.unwrap();
		let mut writer = TcpStream::connect(pairs.local_addr()).await.unwrap();
		let (deaf, _) = pairs.accept().await.unwrap();
		drop(kio::spawn(async move {
			let _keep = silent;
			let mut buf = [0u8; 16];
			let _ = reader.read(&mut buf).await;
			unreachable!("nobody writes to this stream");
		}));
		drop(kio::spawn(async move {
			let _keep = deaf;
			// The peer never reads: once the socket buffers fill, the send waits in the kernel.
			let chunk = vec![7u8; 1 << 20];
			loop {
				writer.write_all(&chunk).await.unwrap();
			}
		}));
		// A socket outside any task, with its receive armed and a train leased, outliving the
		// runtime; and a send staged but never awaited.
		let outside = UdpSocket::bind_with(local(), &UdpConfig::new().rx_buffers(4)).unwrap();
		let tx = UdpSocket::bind(local()).unwrap();
		tx.send(&Transmit::new(outside.local_addr(), b"kept past the runtime"))
			.await
			.unwrap();
		let train = outside.recv().await.unwrap();
		let _staged = poll_once(Box::pin(tx.send(&Transmit::new(outside.local_addr(), b"x")))).await;
		let _armed = kio::wait(|w| match outside.poll_recv(w) {
			Poll::Pending => Poll::Ready(()),
			Poll::Ready(r) => panic!("unexpected {r:?}"),
		})
		.await;
		// Let the tasks reach their waits.
		for _ in 0..20 {
			kio::yield_now().await;
		}
		let c = kio::io_counters();
		assert!(c.ops >= 54, "operations are in flight: {c:?}");
		assert!(c.buf_rings >= 51, "buffer rings are registered: {c:?}");
		(outside, train, c.ops)
	});
	let start = Instant::now();
	drop(rt);
	let took = start.elapsed();
	eprintln!("teardown with {in_flight} operations in flight took {took:?}");
	assert!(
		took < Duration::from_secs(1),
		"teardown cancelled and reaped everything well before its 2 s deadline: {took:?}"
	);
	// The lease is still readable: its buffer's memory lives as long as the lease.
	assert_eq!(train.payload(), b"kept past the runtime");
	drop(train);
	drop(outside);
	assert_no_leaks("after the runtime and the last socket");
}

#[test]
fn teardown_with_a_spilling_submission_queue() {
	// An 8-entry ring and 300 sends staged at once: most wait in the spill queue, never seen by
	// the kernel, when the runtime drops.
	let rt = Builder::single().ring_entries(8).build().unwrap();
	let spilled_before = kio::io_counters().spilled;
	// Binding needs no runtime; the sends borrow the socket, which outlives the runtime.
	let tx = UdpSocket::bind(local()).unwrap();
	let sends = rt.block_on(async {
		let to = tx.local_addr();
		let mut sends = Vec::new();
		for _ in 0..300 {
			sends.push(poll_once(Box::pin(tx.send(&Transmit::new(to, b"spill")))).await);
		}
		sends
	});
	assert!(kio::io_counters().spilled > spilled_before, "the queue spilled");
	let start = Instant::now();
	drop(rt);
	assert!(start.elapsed() < Duration::from_secs(1));
	drop(sends);
	drop(tx);
	assert_no_leaks("after a spilling teardown");
}

#[test]
fn a_multi_worker_runtime_with_operations_in_flight_drops_promptly() {
	let rt = Builder::new().workers(2).pin(false).build().unwrap();
	let armed = kio::sync::Queue::unbounded();
	for worker in 0..2 {
		let armed = armed.clone();
		drop(rt.spawn_on(worker, move || async move {
			let socket = UdpSocket::bind(local()).unwrap();
			let listener = TcpListener::bind(local()).unwrap();
			let accept = kio::spawn(async move { listener.accept().await.map(drop) });
			let _ = armed.try_push(());
			let _ = socket.recv().await;
			let _ = accept.await;
		}));
	}
	rt.block_on(async {
		for _ in 0..2 {
			armed.pop().await.unwrap();
		}
	});
	let start = Instant::now();
	drop(rt);
	assert!(start.elapsed() < Duration::from_secs(1), "took {:?}", start.elapsed());
}
