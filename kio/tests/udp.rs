//! UDP on a real kernel, over loopback: echo (IPv4 and IPv6), GSO/GRO round trips, the GSO
//! fallback forced by a test hook, ECN and `PKTINFO` both ways, and a receiver that holds every
//! buffer of its ring.
//!
//! Hangs fail through nextest's timeout; waits are on datagrams or on the runtime's clock (a
//! bounded `yield_now` loop), never on a sleep.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use kio::net::{Ecn, Transmit, UdpConfig, UdpSocket};
use kio::{Builder, Runtime};

fn rt() -> Runtime {
	Builder::single().build().expect("runtime starts")
}

fn v4() -> SocketAddr {
	"127.0.0.1:0".parse().unwrap()
}

fn v6() -> SocketAddr {
	"[::1]:0".parse().unwrap()
}

/// A datagram that names its index and is hard to mistake for another: `len` bytes of a pattern
/// seeded by `i`.
fn datagram(i: usize, len: usize) -> Vec<u8> {
	(0..len)
		.map(|at| (i.wrapping_mul(31).wrapping_add(at.wrapping_mul(7)) % 251) as u8)
		.collect()
}

/// Yields until `cond` holds, failing after 10 s of runtime clock.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
	let deadline = kio::time::now() + Duration::from_secs(10);
	while !cond() {
		assert!(kio::time::now() < deadline, "timed out waiting for {what}");
		kio::yield_now().await;
	}
}

async fn echo(local: SocketAddr) {
	let server = UdpSocket::bind(local).unwrap();
	let client = UdpSocket::bind(local).unwrap();
	let server_addr = server.local_addr();
	let client_addr = client.local_addr();
	let echo = kio::spawn(async move {
		let mut buf = [0u8; 2048];
		for _ in 0..100 {
			let (n, from) = server.recv_from(&mut buf).await.unwrap();
			server.send_to(&buf[..n], from).await.unwrap();
		}
		server.stats()
	});
	for i in 0..100 {
		let sent = datagram(i, 1 + i * 13);
		assert_eq!(client.send_to(&sent, server_addr).await.unwrap(), sent.len());
		let train = client.recv().await.unwrap();
		assert_eq!(train.peer(), server_addr);
		assert_eq!(train.datagrams(), 1);
		assert_eq!(train.payload(), &sent[..], "echo {i}");
	}
	let stats = echo.await.unwrap();
	assert_eq!(stats.datagrams, 100);
	assert_eq!(stats.sends, 100);
	assert_eq!(client_addr.is_ipv6(), local.is_ipv6());
}

#[test]
fn udp_echo_ipv4() {
	rt().block_on(echo(v4()));
}

#[test]
fn udp_echo_ipv6() {
	rt().block_on(echo(v6()));
}

/// Sends `count` datagrams of `segment` bytes (the last `last` bytes) as one GSO train and
/// checks they arrive as one GRO train, intact and in order.
async fn gso_gro_round_trip(local: SocketAddr, segment: usize, count: usize, last: usize) {
	let rx = UdpSocket::bind(local).unwrap();
	let tx = UdpSocket::bind(local).unwrap();
	let mut train = Vec::new();
	let mut expected = Vec::new();
	for i in 0..count {
		let len = if i + 1 == count { last } else { segment };
		let d = datagram(i, len);
		train.extend_from_slice(&d);
		expected.push(d);
	}
	let before = kio::stats().ring;
	let sent = tx
		.send(&Transmit::new(rx.local_addr(), &train).segments(segment))
		.await
		.unwrap();
	assert_eq!(sent, train.len());
	let after = kio::stats().ring;
	assert_eq!(tx.stats().sends, 1, "one sendmsg for the whole train");
	assert!(
		after.submissions - before.submissions <= 2,
		"one SQE for the train (plus the worker's eventfd read): {before:?} -> {after:?}"
	);
	let mut got = Vec::new();
	let mut trains = 0;
	while got.len() < count {
		let t = rx.recv().await.unwrap();
		trains += 1;
		if count > 1 {
			assert_eq!(t.segment_size(), segment, "GRO segment size");
		}
		got.extend(t.segments().map(<[u8]>::to_vec));
	}
	assert_eq!(got.len(), expected.len());
	for (i, (got, expected)) in got.iter().zip(&expected).enumerate() {
		assert_eq!(
			got, expected,
			"datagram {i} of a {count} x {segment} train (last {last})"
		);
	}
	// Loopback hands the GSO skb to a GRO socket whole: one completion for the train.
	assert_eq!(trains, 1, "one GRO train for one GSO send");
	assert!(tx.gso_enabled());
}

fn gso_gro_cases(local: SocketAddr, mtu_payload: usize) {
	rt().block_on(async move {
		// 1-byte datagrams, a full 64-segment train of them.
		gso_gro_round_trip(local, 1, 64, 1).await;
		// MTU-size datagrams: as many as fit the 64 KiB a UDP send may carry.
		gso_gro_round_trip(local, mtu_payload, 65_000 / mtu_payload, mtu_payload).await;
		// 64 segments.
		gso_gro_round_trip(local, 1000, 64, 1000).await;
		// A short last segment.
		gso_gro_round_trip(local, 1200, 11, 500).await;
		// A lone MTU-size datagram with a segment size (no GSO needed).
		gso_gro_round_trip(local, mtu_payload, 1, mtu_payload).await;
	});
}

#[test]
fn gso_gro_round_trips_ipv4() {
	gso_gro_cases(v4(), 1472);
}

#[test]
fn gso_gro_round_trips_ipv6() {
	gso_gro_cases(v6(), 1452);
}

async fn gso_fallback(local: SocketAddr) {
	let rx = UdpSocket::bind(local).unwrap();
	let tx = UdpSocket::bind(local).unwrap();
	let segment = 1200;
	let count = 20;
	let train: Vec<u8> = (0..count).flat_map(|i| datagram(i, segment)).collect();
	tx.fail_next_gso();
	let sent = tx
		.send(&Transmit::new(rx.local_addr(), &train).segments(segment))
		.await
		.unwrap();
	assert_eq!(sent, train.len());
	let stats = tx.stats();
	assert_eq!(stats.gso_fallbacks, 1, "the kernel refused GSO once: {stats:?}");
	assert!(!tx.gso_enabled(), "GSO is off for the socket after a refusal");
	assert_eq!(stats.sends, count as u64, "resent one sendmsg per datagram");
	// Later trains go out one datagram per sendmsg too.
	let more: Vec<u8> = (count..count + 5).flat_map(|i| datagram(i, segment)).collect();
	tx.send(&Transmit::new(rx.local_addr(), &more).segments(segment))
		.await
		.unwrap();
	assert_eq!(tx.stats().sends, count as u64 + 5);
	let mut got = Vec::new();
	while got.len() < count + 5 {
		let t = rx.recv().await.unwrap();
		got.extend(t.segments().map(<[u8]>::to_vec));
	}
	for (i, d) in got.iter().enumerate() {
		assert_eq!(d, &datagram(i, segment), "datagram {i}");
	}
}

#[test]
fn gso_fallback_delivers_every_datagram_ipv4() {
	rt().block_on(gso_fallback(v4()));
}

#[test]
fn gso_fallback_delivers_every_datagram_ipv6() {
	rt().block_on(gso_fallback(v6()));
}

#[test]
fn ecn_and_pktinfo_in_both_directions_ipv4() {
	rt().block_on(async {
		// Both bound to the wildcard: the source address comes from PKTINFO on send, and the
		// destination the receiver reports from PKTINFO on receive. All of 127/8 is loopback.
		let rx = UdpSocket::bind("0.0.0.0:0".parse().unwrap()).unwrap();
		let tx = UdpSocket::bind("0.0.0.0:0".parse().unwrap()).unwrap();
		let to: SocketAddr = SocketAddr::new("127.0.0.3".parse().unwrap(), rx.local_addr().port());
		let src: IpAddr = "127.0.0.2".parse().unwrap();
		for (i, ecn) in [Ecn::Ect0, Ecn::Ect1, Ecn::Ce, Ecn::NotEct].into_iter().enumerate() {
			let d = datagram(i, 100);
			tx.send(&Transmit::new(to, &d).ecn(ecn).src_ip(src)).await.unwrap();
			let t = rx.recv().await.unwrap();
			assert_eq!(t.payload(), &d[..]);
			assert_eq!(t.ecn(), Some(ecn), "ECN codepoint received");
			assert_eq!(t.peer(), SocketAddr::new(src, tx.local_addr().port()), "PKTINFO source");
			assert_eq!(t.local_ip(), Some(to.ip()), "PKTINFO destination");
		}
		// With GSO: every datagram of the train carries the codepoint.
		let train: Vec<u8> = (0..8).flat_map(|i| datagram(i, 500)).collect();
		tx.send(&Transmit::new(to, &train).segments(500).ecn(Ecn::Ect1).src_ip(src))
			.await
			.unwrap();
		let t = rx.recv().await.unwrap();
		assert_eq!(t.datagrams(), 8);
		assert_eq!(t.ecn(), Some(Ecn::Ect1));
		assert_eq!(t.peer().ip(), src);
	});
}

#[test]
fn ecn_and_pktinfo_in_both_directions_ipv6() {
	rt().block_on(async {
		let rx = UdpSocket::bind("[::]:0".parse().unwrap()).unwrap();
		let tx = UdpSocket::bind("[::]:0".parse().unwrap()).unwrap();
		let to = SocketAddr::new("::1".parse().unwrap(), rx.local_addr().port());
		let src: IpAddr = "::1".parse().unwrap();
		for (i, ecn) in [Ecn::Ect0, Ecn::Ect1, Ecn::Ce].into_iter().enumerate() {
			let d = datagram(i, 100);
			tx.send(&Transmit::new(to, &d).ecn(ecn).src_ip(src)).await.unwrap();
			let t = rx.recv().await.unwrap();
			assert_eq!(t.payload(), &d[..]);
			assert_eq!(t.ecn(), Some(ecn));
			assert_eq!(t.peer(), SocketAddr::new(src, tx.local_addr().port()));
			assert_eq!(t.local_ip(), Some(src));
		}
		// A dual-stack socket reaching an IPv4 peer: IPv4 control messages, IPv4 addresses.
		let rx4 = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
		let d = datagram(9, 64);
		tx.send(&Transmit::new(rx4.local_addr(), &d).ecn(Ecn::Ect0))
			.await
			.unwrap();
		let t = rx4.recv().await.unwrap();
		assert_eq!(t.payload(), &d[..]);
		assert_eq!(t.ecn(), Some(Ecn::Ect0));
		assert_eq!(
			t.peer(),
			SocketAddr::new("127.0.0.1".parse().unwrap(), tx.local_addr().port())
		);
	});
}

#[test]
fn a_receiver_holding_every_buffer_sees_the_multishot_end_and_the_rearm() {
	rt().block_on(async {
		let buffers = 8usize;
		let rx = UdpSocket::bind_with(v4(), &UdpConfig::new().rx_buffers(buffers as u16)).unwrap();
		let tx = std::net::UdpSocket::bind(v4()).unwrap();
		let total = buffers * 4;
		// Blocking std sends: every datagram is in the receiver's socket buffer before the first
		// receive, so the ninth finds the ring empty.
		for i in 0..total {
			tx.send_to(&datagram(i, 700 + i), rx.local_addr()).unwrap();
		}
		let mut held = Vec::new();
		for _ in 0..buffers {
			held.push(rx.recv().await.unwrap());
		}
		assert_eq!(kio::io_counters().bufs_out, buffers as u64, "every buffer is out");
		// Wait for the multishot to end for lack of buffers (ENOBUFS, no F_MORE), while every
		// buffer is still held: the receive must stay pending meanwhile.
		let ended = kio::wait(|w| match rx.poll_recv(w) {
			std::task::Poll::Ready(r) => std::task::Poll::Ready(Err(r)),
			std::task::Poll::Pending if rx.stats().ends >= 1 => std::task::Poll::Ready(Ok(())),
			std::task::Poll::Pending => std::task::Poll::Pending,
		})
		.await;
		assert!(ended.is_ok(), "a receive completed while every buffer was held");
		let stats = rx.stats();
		assert!(stats.enobufs >= 1, "the end was ENOBUFS: {stats:?}");
		assert_eq!(stats.rearms, 0);
		// Held trains are intact: the kernel never wrote a leased buffer.
		for (i, t) in held.iter().enumerate() {
			assert_eq!(t.payload(), &datagram(i, 700 + i)[..], "held datagram {i}");
		}
		drop(held);
		let mut next = buffers;
		while next < total {
			let t = rx.recv().await.unwrap();
			for d in t.segments() {
				assert_eq!(d, &datagram(next, 700 + next)[..], "datagram {next} after the re-arm");
				next += 1;
			}
		}
		let stats = rx.stats();
		assert!(stats.rearms >= 1, "re-armed after buffers came back: {stats:?}");
		assert_eq!(stats.datagrams, total as u64);
		assert_eq!(stats.truncated, 0);
		drop(rx);
		until("buffers and ops to drain", || {
			let c = kio::io_counters();
			c.ops == 0 && c.bufs_out == 0 && c.buf_rings == 0
		})
		.await;
	});
}

#[test]
fn recv_from_hands_out_a_train_one_datagram_at_a_time() {
	rt().block_on(async {
		let rx = UdpSocket::bind(v4()).unwrap();
		let tx = UdpSocket::bind(v4()).unwrap();
		let train: Vec<u8> = (0..5).flat_map(|i| datagram(i, 300)).collect();
		tx.send(&Transmit::new(rx.local_addr(), &train[..1400]).segments(300))
			.await
			.unwrap();
		let mut buf = [0u8; 1000];
		for i in 0..5 {
			let (n, from) = rx.recv_from(&mut buf).await.unwrap();
			let len = if i == 4 { 200 } else { 300 };
			assert_eq!(n, len);
			assert_eq!(&buf[..n], &datagram(i, 300)[..len]);
			assert_eq!(from, tx.local_addr());
		}
		assert_eq!(rx.stats().trains, 1);
	});
}

#[test]
fn connected_sockets_send_without_a_destination() {
	rt().block_on(async {
		let a = UdpSocket::bind(v4()).unwrap();
		let b = UdpSocket::bind(v4()).unwrap();
		a.connect(b.local_addr()).unwrap();
		b.connect(a.local_addr()).unwrap();
		let t = Transmit {
			destination: None,
			contents: b"ping",
			segment_size: None,
			ecn: None,
			src_ip: None,
		};
		a.send(&t).await.unwrap();
		assert_eq!(b.recv().await.unwrap().payload(), b"ping");
	});
}

#[test]
fn invalid_trains_are_refused_before_the_kernel_sees_them() {
	rt().block_on(async {
		let tx = UdpSocket::bind(v4()).unwrap();
		let to = tx.local_addr();
		let big = vec![0u8; 65 * 10];
		let err = tx.send(&Transmit::new(to, &big).segments(10)).await.unwrap_err();
		assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
		let err = tx.send(&Transmit::new(to, &big).segments(0)).await.unwrap_err();
		assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
		assert!(tx.gso_enabled(), "a refused train does not turn GSO off");
		assert_eq!(tx.stats().sends, 0);
	});
}

#[test]
fn sockets_on_one_port_with_reuse_port() {
	rt().block_on(async {
		let config = UdpConfig::new().reuse_port(true);
		let a = UdpSocket::bind_with(v4(), &config).unwrap();
		let b = UdpSocket::bind_with(a.local_addr(), &config).unwrap();
		assert_eq!(a.local_addr(), b.local_addr());
		assert!(
			UdpSocket::bind(a.local_addr()).is_err(),
			"without SO_REUSEPORT the port is taken"
		);
	});
}

#[test]
fn a_full_submission_queue_spills_instead_of_failing() {
	// An 8-entry submission queue and 200 sends staged in one turn.
	let rt = Builder::single().ring_entries(8).build().unwrap();
	rt.block_on(async {
		let rx = std::rc::Rc::new(UdpSocket::bind_with(v4(), &UdpConfig::new().recv_buffer(1 << 20)).unwrap());
		let tx = std::rc::Rc::new(UdpSocket::bind(v4()).unwrap());
		let spilled = kio::io_counters().spilled;
		let sends: Vec<_> = (0..200)
			.map(|i| {
				let (tx, to) = (tx.clone(), rx.local_addr());
				kio::spawn(async move { tx.send_to(&datagram(i, 64), to).await })
			})
			.collect();
		for send in sends {
			assert_eq!(send.await.unwrap().unwrap(), 64);
		}
		assert!(kio::io_counters().spilled > spilled, "the queue spilled");
		let mut seen = [false; 200];
		let mut got = 0;
		while got < 200 {
			let t = rx.recv().await.unwrap();
			for d in t.segments() {
				let i = (0..200)
					.find(|&i| d == &datagram(i, 64)[..])
					.expect("an intact datagram");
				assert!(!seen[i], "datagram {i} twice");
				seen[i] = true;
				got += 1;
			}
		}
	});
}

#[test]
fn a_kernel_without_an_opcode_kio_issues_is_refused_by_name() {
	let err = Builder::single()
		.deny_feature("IORING_OP_RECVMSG")
		.build()
		.err()
		.expect("refused");
	match err {
		kio::Error::Unsupported { feature, .. } => assert_eq!(feature, "IORING_OP_RECVMSG"),
		other => panic!("unexpected {other}"),
	}
}

#[test]
fn into_std_hands_over_only_an_unused_socket() {
	rt().block_on(async {
		let fds = kio::io_counters().fds;
		let socket = UdpSocket::bind_with(v4(), &UdpConfig::new().recv_buffer(1 << 20)).unwrap();
		let addr = socket.local_addr();
		let std = socket.into_std().expect("an unused socket converts");
		assert_eq!(std.local_addr().unwrap(), addr);
		assert_eq!(kio::io_counters().fds, fds, "kio no longer owns (or closes) the fd");
		let used = UdpSocket::bind(v4()).unwrap();
		let _armed = kio::wait(|w| std::task::Poll::Ready(used.poll_recv(w).is_pending())).await;
		let used = used
			.into_std()
			.expect_err("a socket with a receive armed stays with kio");
		drop(used);
		drop(std);
	});
}

#[test]
fn try_send_many_sends_a_burst_to_many_peers_in_order_with_its_metadata() {
	rt().block_on(async {
		let tx = UdpSocket::bind("0.0.0.0:0".parse().unwrap()).unwrap();
		let peers: Vec<UdpSocket> = (0..5)
			.map(|_| UdpSocket::bind("0.0.0.0:0".parse().unwrap()).unwrap())
			.collect();
		let to = |p: &UdpSocket| SocketAddr::new("127.0.0.1".parse().unwrap(), p.local_addr().port());
		let src: IpAddr = "127.0.0.2".parse().unwrap();
		// 70 transmits (more than one `sendmmsg` takes): single datagrams round robin over the
		// peers, and every seventh a GSO train of three.
		let payloads: Vec<Vec<u8>> = (0..70)
			.map(|i| {
				if i % 7 == 0 {
					(0..3).flat_map(|k| datagram(i * 10 + k, 200)).collect()
				} else {
					datagram(i * 10, 100 + i)
				}
			})
			.collect();
		let transmits: Vec<Transmit<'_>> = payloads
			.iter()
			.enumerate()
			.map(|(i, p)| {
				let t = Transmit::new(to(&peers[i % 5]), p).ecn(Ecn::Ect0).src_ip(src);
				if i % 7 == 0 { t.segments(200) } else { t }
			})
			.collect();
		let before = kio::stats().ring;
		let (sent, stop) = tx.try_send_many(&transmits);
		assert_eq!(sent, transmits.len());
		assert!(stop.is_ok());
		let after = kio::stats().ring;
		assert_eq!(after.submissions, before.submissions, "no ring operation");
		let stats = tx.stats();
		assert_eq!(stats.sends, 70);
		assert_eq!(stats.batches, 3, "32 + 32 + 6");
		for (p, peer) in peers.iter().enumerate() {
			let mut expected: Vec<Vec<u8>> = Vec::new();
			for i in (p..70).step_by(5) {
				if i % 7 == 0 {
					expected.extend((0..3).map(|k| datagram(i * 10 + k, 200)));
				} else {
					expected.push(datagram(i * 10, 100 + i));
				}
			}
			let mut got = Vec::new();
			while got.len() < expected.len() {
				let t = peer.recv().await.unwrap();
				assert_eq!(t.ecn(), Some(Ecn::Ect0));
				assert_eq!(t.peer(), SocketAddr::new(src, tx.local_addr().port()));
				got.extend(t.segments().map(<[u8]>::to_vec));
			}
			assert_eq!(got, expected, "peer {p} got its datagrams in order");
		}
	});
}

#[test]
fn try_send_many_stops_before_a_transmit_it_cannot_send_directly() {
	rt().block_on(async {
		let rx = UdpSocket::bind(v4()).unwrap();
		let tx = UdpSocket::bind(v4()).unwrap();
		let to = rx.local_addr();
		let one = datagram(0, 100);
		let train: Vec<u8> = (1..4).flat_map(|i| datagram(i, 300)).collect();
		let bad = vec![0u8; 65 * 10];
		// A train while the GSO hook is armed: the caller sends it with `send`, which falls back.
		tx.fail_next_gso();
		let transmits = [
			Transmit::new(to, &one),
			Transmit::new(to, &train).segments(300),
			Transmit::new(to, &bad).segments(10),
			Transmit::new(to, &one),
		];
		let (sent, stop) = tx.try_send_many(&transmits);
		assert_eq!(sent, 1);
		assert!(stop.is_ok(), "not an error: the train goes through `send`");
		tx.send(&transmits[1]).await.unwrap();
		assert_eq!(tx.stats().gso_fallbacks, 1);
		// An invalid train is that transmit's error; the rest go on after it. With GSO off, a
		// train is again for `send`, which splits it.
		let (sent, stop) = tx.try_send_many(&transmits[2..]);
		assert_eq!(sent, 0);
		assert_eq!(stop.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
		let (sent, stop) = tx.try_send_many(&transmits[3..]);
		assert_eq!((sent, stop.is_ok()), (1, true));
		let (sent, stop) = tx.try_send_many(&transmits[1..2]);
		assert_eq!((sent, stop.is_ok()), (0, true), "GSO is off: the train is for `send`");
		let mut got = Vec::new();
		while got.len() < 5 {
			got.extend(rx.recv().await.unwrap().segments().map(<[u8]>::to_vec));
		}
		assert_eq!(
			got,
			vec![one.clone(), datagram(1, 300), datagram(2, 300), datagram(3, 300), one]
		);
	});
}

/// Run in a network namespace of its own (`unshare -n`, re-running this test binary) whose
/// loopback holds packets in a slow token-bucket queue: they stay charged to the sending socket,
/// so a small send buffer fills, which plain loopback never does.
#[test]
fn try_send_many_stops_at_a_full_send_buffer_and_send_waits_for_room() {
	const CHILD: &str = "KIO_TEST_NETNS_CHILD";
	let name = "try_send_many_stops_at_a_full_send_buffer_and_send_waits_for_room";
	if std::env::var_os(CHILD).is_none() {
		let exe = std::env::current_exe().unwrap();
		let out = std::process::Command::new("unshare")
			.arg("-n")
			.arg(exe)
			.args(["--exact", name, "--nocapture", "--test-threads=1"])
			.env(CHILD, "1")
			.output()
			.expect("unshare(1) runs (util-linux)");
		let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
		assert!(out.status.success(), "the test in its own namespace failed:\n{text}");
		assert!(text.contains("1 passed"), "the child ran the test:\n{text}");
		return;
	}
	let run = |args: &[&str]| {
		let status = std::process::Command::new(args[0]).args(&args[1..]).status().unwrap();
		assert!(status.success(), "{args:?}");
	};
	run(&["ip", "link", "set", "lo", "up"]);
	// 2 Mbit/s after a 1,600-byte burst: 1,000-byte datagrams leave every 4 ms.
	run(&[
		"tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "2mbit", "burst", "1600", "limit", "1000000",
	]);
	rt().block_on(async {
		let rx = UdpSocket::bind_with(v4(), &UdpConfig::new().recv_buffer(1 << 20)).unwrap();
		let tx = UdpSocket::bind_with(v4(), &UdpConfig::new().send_buffer(4096)).unwrap();
		let count = 40;
		let payloads: Vec<Vec<u8>> = (0..count).map(|i| datagram(i, 1000)).collect();
		let transmits: Vec<Transmit<'_>> = payloads.iter().map(|p| Transmit::new(rx.local_addr(), p)).collect();
		let (mut at, mut stops) = (0, 0);
		while at < count {
			let (sent, stop) = tx.try_send_many(&transmits[at..]);
			at += sent;
			if at == count {
				break;
			}
			assert!(stop.is_ok(), "a full buffer is not an error: {stop:?}");
			stops += 1;
			tx.send(&transmits[at]).await.unwrap();
			at += 1;
		}
		assert!(stops >= 2, "the 4 KiB send buffer filled more than once: {stops}");
		assert_eq!(tx.stats().sends, count as u64);
		for i in 0..count {
			let t = rx.recv().await.unwrap();
			assert_eq!(t.payload(), &datagram(i, 1000)[..], "datagram {i} in order");
		}
	});
}
