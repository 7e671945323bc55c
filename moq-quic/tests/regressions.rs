//! Regressions found by review, each a scenario that once failed: a stop before accept, streams
//! stuck on flow control starving others, and a dropped endpoint that never said goodbye. They run
//! on the simulated network, on a paused clock.
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::runtime;
use moq_quic::sim::{Network, SimConfig};
use moq_quic::{Connection, ConnectionError, Endpoint, RecvStream, SendStream, StreamError, VarInt};

/// A connected pair whose server never reads two priority-10 streams the client filled past
/// their 16 KiB stream windows: 8 KiB of each is left queued, less than quinn-proto took, so each
/// stream still takes writes (a queue at what was taken makes writers wait instead).
struct Stuck {
	client: Connection,
	server: Connection,
	a: SendStream,
	b: SendStream,
	_unread: (RecvStream, RecvStream),
	_endpoints: (Endpoint, Endpoint),
}

async fn stuck(network: &Network) -> Stuck {
	let mut transport = moq_quic::transport();
	transport.stream_receive_window(VarInt::from_u32(16 * 1024));
	let (server_endpoint, client_endpoint, client, server) = common::connected(network, 1, Some(transport)).await;
	let mut a = client.open_uni().await.unwrap();
	let mut b = client.open_uni().await.unwrap();
	a.set_priority(10);
	b.set_priority(10);
	a.write(Bytes::from(vec![1u8; 24 * 1024])).await.unwrap();
	b.write(Bytes::from(vec![2u8; 24 * 1024])).await.unwrap();
	let unread = (server.accept_uni().await.unwrap(), server.accept_uni().await.unwrap());
	kio::time::sleep(Duration::from_secs(1)).await;
	Stuck {
		client,
		server,
		a,
		b,
		_unread: unread,
		_endpoints: (server_endpoint, client_endpoint),
	}
}

/// The server's next stream (C, 1,000 bytes) arrives whole within 500 ms.
async fn assert_arrives_promptly(server: &Connection) {
	let start = kio::time::now();
	let mut rc = server.accept_uni().await.unwrap();
	let got = rc.read_to_end(1 << 20).await.unwrap();
	let took = kio::time::now() - start;
	assert_eq!(got.len(), 1000);
	assert!(took < Duration::from_millis(500), "C stalled for {took:?}");
}

/// Two high-priority streams the peer does not read (stream flow control exhausted) are
/// re-readied by one more write each; a low-priority stream queued in the same tick must still go.
#[test]
fn stream_blocked_streams_do_not_starve_others_one_shot() {
	runtime().block_on(async {
		let network = Network::new(SimConfig::default());
		let mut stuck = stuck(&network).await;
		// Same tick: A and B become ready again, C gets data.
		stuck.a.write(Bytes::from_static(b"x")).await.unwrap();
		stuck.b.write(Bytes::from_static(b"y")).await.unwrap();
		let mut c = stuck.client.open_uni().await.unwrap();
		c.set_priority(0);
		c.write(Bytes::from(vec![3u8; 1000])).await.unwrap();
		c.finish().unwrap();
		assert_arrives_promptly(&stuck.server).await;
	});
}

/// The same with writers that keep adding to A and B (a live track the peer stopped reading).
#[test]
fn stream_blocked_streams_do_not_starve_others_continuous() {
	runtime().block_on(async {
		let network = Network::new(SimConfig::default());
		let Stuck {
			client,
			server,
			mut a,
			mut b,
			_unread,
			_endpoints,
		} = stuck(&network).await;
		let mut c = client.open_uni().await.unwrap();
		c.set_priority(0);
		let writer = kio::spawn(async move {
			loop {
				// One frame per 33 ms to both blocked tracks, in one tick.
				a.write(Bytes::from_static(b"x")).await.unwrap();
				b.write(Bytes::from_static(b"y")).await.unwrap();
				kio::time::sleep(Duration::from_millis(33)).await;
			}
		});
		kio::time::sleep(Duration::from_millis(5)).await;
		// C queued between two frames (its write runs in the same tick as nothing else).
		c.write(Bytes::from(vec![3u8; 1000])).await.unwrap();
		c.finish().unwrap();
		assert_arrives_promptly(&server).await;
		writer.abort();
	});
}

/// Dropping a client's last Connection and Endpoint: does the server hear the close?
#[test]
fn dropping_a_client_connection_with_its_endpoint_tells_the_server() {
	runtime().block_on(async {
		let network = Network::new(SimConfig::default());
		let (_se, ce, client, server) = common::connected(&network, 1, None).await;
		drop(ce);
		let start = kio::time::now();
		drop(client);
		let reason = server.closed().await;
		let took = kio::time::now() - start;
		assert!(
			matches!(reason, ConnectionError::ApplicationClosed(_)),
			"no CONNECTION_CLOSE reached the server: {reason:?} after {took:?}"
		);
	});
}

/// Control: the endpoint outlives the connection.
#[test]
fn dropping_a_client_connection_alone_tells_the_server() {
	runtime().block_on(async {
		let network = Network::new(SimConfig::default());
		let (_se, ce, client, server) = common::connected(&network, 1, None).await;
		let start = kio::time::now();
		drop(client);
		let reason = server.closed().await;
		let took = kio::time::now() - start;
		assert!(matches!(reason, ConnectionError::ApplicationClosed(_)));
		assert!(took < Duration::from_secs(1), "the close took {took:?}");
		drop(ce);
	});
}

/// The peer opens a bidirectional stream and stops our half before we accept it.
#[test]
fn a_stop_before_accept_reaches_the_send_half() {
	runtime().block_on(async {
		let network = Network::new(SimConfig::default());
		let (_se, _ce, client, server) = common::connected(&network, 1, None).await;
		let (mut cs, mut cr) = client.open_bi().await.unwrap();
		cs.write(Bytes::from_static(b"hello")).await.unwrap();
		cr.stop(7);
		kio::time::sleep(Duration::from_millis(200)).await;
		let (mut ss, _sr) = server.accept_bi().await.unwrap();
		let write = ss.write(Bytes::from_static(b"reply")).await;
		assert_eq!(
			write,
			Err(StreamError::Stopped(7)),
			"a write after the peer's STOP_SENDING"
		);
		let stopped = {
			let mut f = std::pin::pin!(ss.stopped());
			let mut t = std::pin::pin!(kio::time::sleep(Duration::from_secs(5)));
			std::future::poll_fn(|cx| {
				use std::future::Future;
				if let std::task::Poll::Ready(r) = f.as_mut().poll(cx) {
					return std::task::Poll::Ready(Some(r));
				}
				t.as_mut().poll(cx).map(|_| None)
			})
			.await
		};
		assert!(matches!(stopped, Some(Ok(7))), "stopped() = {stopped:?}");
		drop(cs);
	});
}
