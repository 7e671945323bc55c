//! TCP on a real kernel, over loopback: echo (IPv4 and IPv6) with large, partially-sent
//! writes, multishot accept of many connections, a small HTTP exchange, cancel-safe reads,
//! owned-buffer reads and writes (mixed with copying ones, and dropped midway), refused connects
//! and shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::Poll;

use kio::net::{TcpListener, TcpStream};
use kio::{Builder, Runtime};

fn rt() -> Runtime {
	Builder::single().build().expect("runtime starts")
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
	(0..len).map(|i| ((i * 7 + seed * 13) % 253) as u8).collect()
}

async fn echo(local: SocketAddr) {
	let listener = TcpListener::bind(local).unwrap();
	let addr = listener.local_addr();
	let server = kio::spawn(async move {
		let (mut stream, peer) = listener.accept().await.unwrap();
		assert_eq!(peer, stream.peer_addr().unwrap());
		let mut buf = vec![0u8; 7000];
		let mut total = 0;
		loop {
			let n = stream.read(&mut buf).await.unwrap();
			if n == 0 {
				break;
			}
			stream.write_all(&buf[..n]).await.unwrap();
			total += n;
		}
		stream.shutdown().await.unwrap();
		total
	});
	let mut client = TcpStream::connect(addr).await.unwrap();
	client.set_nodelay(true).unwrap();
	let data = pattern(1 << 20, 1);
	let mut back = vec![0u8; data.len()];
	// 100 KiB at a time: bigger than the stream's 64 KiB staging, so writes wait and resume.
	for (chunk, out) in data.chunks(100 * 1024).zip(back.chunks_mut(100 * 1024)) {
		client.write_all(chunk).await.unwrap();
		client.read_exact(out).await.unwrap();
	}
	assert!(back == data, "echoed bytes differ");
	client.shutdown().await.unwrap();
	let mut rest = [0u8; 16];
	assert_eq!(
		client.read(&mut rest).await.unwrap(),
		0,
		"the server's shutdown ends the stream"
	);
	assert_eq!(server.await.unwrap(), data.len());
}

#[test]
fn tcp_echo_ipv4() {
	rt().block_on(echo("127.0.0.1:0".parse().unwrap()));
	assert_eq!(kio::io_counters().fds, 0);
	assert_eq!(kio::io_counters().ops, 0);
}

#[test]
fn tcp_echo_ipv6() {
	rt().block_on(echo("[::1]:0".parse().unwrap()));
}

#[test]
fn multishot_accept_takes_many_connections() {
	rt().block_on(async {
		let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
		let addr = listener.local_addr();
		let clients = kio::spawn(async move {
			let mut streams = Vec::new();
			for i in 0..64u8 {
				let mut s = TcpStream::connect(addr).await.unwrap();
				s.write_all(&[i]).await.unwrap();
				streams.push(s);
			}
			streams
		});
		let mut seen = [false; 64];
		for _ in 0..64 {
			let (mut stream, peer) = listener.accept().await.unwrap();
			assert!(peer.ip().is_loopback());
			let mut b = [0u8; 1];
			stream.read_exact(&mut b).await.unwrap();
			assert!(!seen[b[0] as usize], "connection {} accepted twice", b[0]);
			seen[b[0] as usize] = true;
		}
		drop(clients.await.unwrap());
		assert!(seen.iter().all(|&s| s));
	});
}

#[test]
fn a_small_http_exchange() {
	rt().block_on(async {
		let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
		let addr = listener.local_addr();
		let server = kio::spawn(async move {
			let (mut stream, _) = listener.accept().await.unwrap();
			let mut req = Vec::new();
			let mut buf = [0u8; 256];
			while !req.ends_with(b"\r\n\r\n") {
				let n = stream.read(&mut buf).await.unwrap();
				assert!(n > 0, "request cut short");
				req.extend_from_slice(&buf[..n]);
			}
			assert!(req.starts_with(b"GET /health HTTP/1.1\r\n"));
			stream
				.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
				.await
				.unwrap();
			stream.shutdown().await.unwrap();
		});
		let mut client = TcpStream::connect(addr).await.unwrap();
		client
			.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
			.await
			.unwrap();
		let mut response = Vec::new();
		let mut buf = [0u8; 64];
		loop {
			let n = client.read(&mut buf).await.unwrap();
			if n == 0 {
				break;
			}
			response.extend_from_slice(&buf[..n]);
		}
		assert!(response.starts_with(b"HTTP/1.1 200 OK\r\n"));
		assert!(response.ends_with(b"\r\n\r\nok"));
		server.await.unwrap();
	});
}

#[test]
fn a_dropped_read_loses_no_bytes() {
	rt().block_on(async {
		let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
		let mut client = TcpStream::connect(listener.local_addr()).await.unwrap();
		let (mut server, _) = listener.accept().await.unwrap();
		let mut buf = [0u8; 64];
		{
			// Start a read, poll it once (its receive is now in the kernel), and drop it.
			let mut read = pin!(server.read(&mut buf));
			let polled = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
			assert!(polled.is_pending());
		}
		client.write_all(b"hello").await.unwrap();
		let n = server.read(&mut buf).await.unwrap();
		assert_eq!(&buf[..n], b"hello", "the dropped read's bytes go to the next read");
	});
}

#[test]
fn owned_buffers_echo_in_place_and_mix_with_copying_reads() {
	rt().block_on(async {
		let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
		let mut client = TcpStream::connect(listener.local_addr()).await.unwrap();
		let (mut server, _) = listener.accept().await.unwrap();
		let echo = kio::spawn(async move {
			let mut buf = vec![0u8; 16 << 10];
			loop {
				let (read, back) = server.read_exact_owned(buf).await;
				if read.is_err() {
					return;
				}
				let (written, back) = server.write_all_owned(back).await;
				written.unwrap();
				buf = back;
			}
		});
		// 1 MiB in 16 KiB messages: bigger than a socket takes at once, so sends are partial.
		let mut message = vec![0u8; 16 << 10];
		let mut back = vec![0u8; 16 << 10];
		for round in 0..64 {
			message.copy_from_slice(&pattern(16 << 10, round));
			let (written, returned) = client.write_all_owned(message).await;
			written.unwrap();
			message = returned;
			let (read, returned) = client.read_exact_owned(back).await;
			read.unwrap();
			back = returned;
			assert!(back == message, "round {round}: echoed bytes differ");
		}
		// A copying read takes the head of a message (and the stream's buffer the rest of what
		// came); the owned read after it gets those bytes first, then the kernel's.
		client.write_all(&pattern(100, 9)).await.unwrap();
		client.write_all(&pattern(16 << 10, 3)[100..]).await.unwrap();
		let mut head = [0u8; 10];
		client.read_exact(&mut head).await.unwrap();
		let (read, rest) = client.read_exact_owned(vec![0u8; (16 << 10) - 10]).await;
		read.unwrap();
		assert_eq!(&head[..], &pattern(100, 9)[..10]);
		assert_eq!(&rest[..90], &pattern(100, 9)[10..]);
		assert_eq!(&rest[90..], &pattern(16 << 10, 3)[100..]);
		drop(client);
		echo.await.unwrap();
	});
}

#[test]
fn a_dropped_owned_read_keeps_what_it_received_for_the_next_read() {
	rt().block_on(async {
		let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
		let mut client = TcpStream::connect(listener.local_addr()).await.unwrap();
		let (mut server, _) = listener.accept().await.unwrap();
		{
			// An exact read of 10 bytes gets 4, waits for the rest, and is dropped.
			client.write_all(b"abcd").await.unwrap();
			let mut read = pin!(server.read_exact_owned(vec![0u8; 10]));
			let mut polls = 0;
			loop {
				let polled = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
				assert!(polled.is_pending());
				polls += 1;
				if polls == 50 {
					break;
				}
				kio::yield_now().await;
			}
		}
		client.write_all(b"efgh").await.unwrap();
		let mut got = Vec::new();
		while got.len() < 8 {
			let (read, buf) = server.read_owned(vec![0u8; 64]).await;
			let n = read.unwrap();
			got.extend_from_slice(&buf[..n]);
		}
		assert_eq!(got, b"abcdefgh", "no byte of the dropped read is lost or repeated");
		// And a dropped owned write still sends every byte.
		{
			let mut write = pin!(client.write_all_owned(pattern(1 << 20, 5)));
			let polled = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
			assert!(polled.is_pending(), "a MiB does not fit loopback's socket at once");
		}
		client.flush().await.unwrap();
		let mut all = vec![0u8; 1 << 20];
		server.read_exact(&mut all).await.unwrap();
		assert!(
			all == pattern(1 << 20, 5),
			"the dropped write's bytes all arrive, in order"
		);
	});
}

#[test]
fn a_refused_connect_is_an_error() {
	rt().block_on(async {
		// Bind then drop a listener: its port is (for now) closed.
		let addr = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap().local_addr();
		let err = TcpStream::connect(addr).await.unwrap_err();
		assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
	});
	assert_eq!(kio::io_counters().fds, 0, "the refused socket is closed");
}
