//! The workloads on compio: one runtime thread, its io_uring driver, owned buffers.

use std::time::Duration;

use anyhow::Context as _;
use compio::BufResult;
use compio::io::{AsyncReadExt, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream, UdpSocket};

use crate::work::{
	ACK_EVERY, DATAGRAM, GRO_BUFFER, Measured, Meter, QUIC_ALPN, QUIC_WRITE, Row, SHORT_STREAM, TIMERS, TRAIN, WINDOW,
	bulk_sockets, datagrams_in, loopback, next_send,
};

pub(crate) fn run(row: Row, ops: u64) -> anyhow::Result<Measured> {
	let runtime = compio::runtime::Runtime::new().context("a compio runtime")?;
	// The work runs in a task, as an application's would.
	runtime.block_on(async move {
		let work = compio::runtime::spawn(async move {
			match row {
				Row::UdpPingPong => udp_ping_pong(ops).await,
				Row::UdpBulk => udp_bulk(ops, 1).await,
				Row::UdpBulkGso => udp_bulk(ops, TRAIN).await,
				Row::TcpEcho64 | Row::TcpEcho16k | Row::TcpEcho64x100 | Row::TcpEcho16kx100 => {
					tcp_echo(row.connections(), ops / row.connections(), row.message()).await
				}
				Row::SpawnJoin => spawn_join(ops).await,
				Row::Timers => timers(ops / TIMERS).await,
				Row::CrossThreadWake => crate::work::cross_thread_wake(ops).await,
				Row::Quic256MiB => quic_bulk(ops).await,
				Row::Quic1000Streams => quic_streams(ops).await,
			}
		});
		joined(work.await)?
	})
}

fn joined<T>(result: Result<T, compio::runtime::JoinError>) -> anyhow::Result<T> {
	result.map_err(|err| anyhow::anyhow!("a compio task: {err}"))
}

async fn udp_ping_pong(ops: u64) -> anyhow::Result<Measured> {
	let server = UdpSocket::bind(loopback()).await?;
	let client = UdpSocket::bind(loopback()).await?;
	let to = server.local_addr()?;
	let echo = compio::runtime::spawn(async move {
		let mut buf = Vec::with_capacity(DATAGRAM);
		loop {
			buf.clear();
			let BufResult(received, back) = server.recv_from(buf).await;
			let (len, from) = received?;
			if len == 1 {
				return anyhow::Ok(());
			}
			let BufResult(sent, back) = server.send_to(back, from).await;
			sent?;
			buf = back;
		}
	});
	let mut payload = vec![7u8; DATAGRAM];
	let mut buf = Vec::with_capacity(DATAGRAM);
	let meter = Meter::start();
	for _ in 0..ops {
		let BufResult(sent, back) = client.send_to(payload, to).await;
		sent?;
		payload = back;
		buf.clear();
		let BufResult(received, back) = client.recv_from(buf).await;
		received?;
		buf = back;
	}
	let measured = meter.stop();
	client.send_to(vec![0u8], to).await.0?;
	joined(echo.await)??;
	Ok(measured)
}

/// Bulk datagrams, `train` per send (above 1: GSO and GRO set on the sockets).
async fn udp_bulk(ops: u64, train: u64) -> anyhow::Result<Measured> {
	let (sender, receiver) = bulk_sockets(train > 1)?;
	let (sender, receiver) = (UdpSocket::from_std(sender)?, UdpSocket::from_std(receiver)?);
	let to = receiver.local_addr()?;
	let meter = Meter::start();
	let receive = compio::runtime::spawn(async move {
		let mut count = 0u64;
		let mut buf = Vec::with_capacity(if train > 1 { GRO_BUFFER } else { DATAGRAM });
		while count < ops {
			buf.clear();
			let BufResult(received, back) = receiver.recv_from(buf).await;
			let (bytes, from) = received?;
			buf = back;
			count += datagrams_in(bytes);
			if count.is_multiple_of(ACK_EVERY) || count >= ops {
				receiver.send_to(count.to_le_bytes().to_vec(), from).await.0?;
			}
		}
		anyhow::Ok(())
	});
	let mut payload = vec![7u8; DATAGRAM * train as usize];
	let mut ack = Vec::with_capacity(64);
	let (mut sent, mut acked) = (0u64, 0u64);
	while acked < ops {
		while sent < ops && sent - acked < WINDOW {
			let n = next_send(ops, sent, acked, train);
			payload.truncate(DATAGRAM * n as usize);
			let BufResult(result, back) = sender.send_to(payload, to).await;
			result?;
			payload = back;
			sent += n;
		}
		ack.clear();
		let BufResult(received, back) = sender.recv_from(ack).await;
		received?;
		ack = back;
		acked = u64::from_le_bytes(ack[..8].try_into()?);
	}
	joined(receive.await)??;
	Ok(meter.stop())
}

async fn tcp_echo(connections: u64, rounds: u64, size: usize) -> anyhow::Result<Measured> {
	let listener = TcpListener::bind(loopback()).await?;
	let addr = listener.local_addr()?;
	let accept = compio::runtime::spawn(async move {
		let mut echoes = Vec::new();
		for _ in 0..connections {
			let (mut stream, _) = listener.accept().await?;
			echoes.push(compio::runtime::spawn(async move {
				let mut buf = Vec::with_capacity(size);
				loop {
					buf.clear();
					let BufResult(read, back) = stream.read_exact(buf).await;
					if read.is_err() {
						return anyhow::Ok(());
					}
					let BufResult(written, back) = stream.write_all(back).await;
					written?;
					buf = back;
				}
			}));
		}
		for echo in echoes {
			joined(echo.await)??;
		}
		anyhow::Ok(())
	});
	let meter = Meter::start();
	let mut clients = Vec::new();
	for _ in 0..connections {
		clients.push(compio::runtime::spawn(async move {
			let mut stream = TcpStream::connect(addr).await?;
			let mut message = vec![7u8; size];
			let mut buf = Vec::with_capacity(size);
			for _ in 0..rounds {
				let BufResult(written, back) = stream.write_all(message).await;
				written?;
				message = back;
				buf.clear();
				let BufResult(read, back) = stream.read_exact(buf).await;
				read?;
				buf = back;
			}
			anyhow::Ok(())
		}));
	}
	for client in clients {
		joined(client.await)??;
	}
	let measured = meter.stop();
	joined(accept.await)??;
	Ok(measured)
}

async fn spawn_join(ops: u64) -> anyhow::Result<Measured> {
	let meter = Meter::start();
	let mut sum = 0u64;
	for i in 0..ops {
		sum += joined(compio::runtime::spawn(async move { i }).await)?;
	}
	anyhow::ensure!(sum == ops * ops.saturating_sub(1) / 2);
	Ok(meter.stop())
}

async fn timers(rearms: u64) -> anyhow::Result<Measured> {
	let meter = Meter::start();
	let tasks: Vec<_> = (0..TIMERS)
		.map(|_| {
			compio::runtime::spawn(async move {
				for _ in 0..rearms {
					compio::runtime::time::sleep(Duration::from_millis(1)).await;
				}
			})
		})
		.collect();
	for task in tasks {
		joined(task.await)?;
	}
	Ok(meter.stop())
}

/// Both compio-quic endpoints on this runtime, connected: (client connection, server connection,
/// the endpoints to keep).
async fn quic_pair() -> anyhow::Result<(
	compio::quic::Connection,
	compio::quic::Connection,
	[compio::quic::Endpoint; 2],
)> {
	use compio::quic::{ClientBuilder, Endpoint, ServerBuilder};
	let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
	let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
	let server_config = ServerBuilder::new_with_single_cert(vec![certified.cert.der().clone()], key)?
		.with_alpn_protocols(&[QUIC_ALPN])
		.build();
	// The certificate is not checked: the TLS handshake is outside the measurement.
	let client_config = ClientBuilder::new_with_no_server_verification()
		.with_alpn_protocols(&[QUIC_ALPN])
		.build();
	let server = Endpoint::server(loopback(), server_config).await?;
	let client = Endpoint::client(loopback()).await?;
	let connecting = client.connect(server.local_addr()?, "localhost", Some(client_config))?;
	let incoming = server.wait_incoming().await.context("a connection")?;
	let (conn, accepted) = futures_lite::future::zip(connecting, incoming.accept()?).await;
	Ok((conn?, accepted?, [server, client]))
}

async fn quic_bulk(mib: u64) -> anyhow::Result<Measured> {
	let (conn, accepted, _endpoints) = quic_pair().await?;
	let bytes = mib << 20;
	let meter = Meter::start();
	let reader = compio::runtime::spawn(async move {
		let mut recv = accepted.accept_uni().await?;
		let mut read = 0u64;
		while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
			read += chunk.bytes.len() as u64;
		}
		anyhow::Ok(read)
	});
	let piece = bytes::Bytes::from(vec![7u8; QUIC_WRITE]);
	let mut send = conn.open_uni_wait().await?;
	let mut written = 0u64;
	while written < bytes {
		send.write_all_chunks(&mut [piece.clone()]).await?;
		written += piece.len() as u64;
	}
	send.finish()?;
	anyhow::ensure!(joined(reader.await)?? == bytes);
	Ok(meter.stop())
}

async fn quic_streams(streams: u64) -> anyhow::Result<Measured> {
	let (conn, accepted, _endpoints) = quic_pair().await?;
	let meter = Meter::start();
	let reader = compio::runtime::spawn(async move {
		let mut readers = Vec::new();
		for _ in 0..streams {
			let mut recv = accepted.accept_uni().await?;
			readers.push(compio::runtime::spawn(async move {
				let mut read = 0u64;
				while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
					read += chunk.bytes.len() as u64;
				}
				anyhow::Ok(read)
			}));
		}
		let mut read = 0;
		for reader in readers {
			read += joined(reader.await)??;
		}
		anyhow::Ok(read)
	});
	let piece = bytes::Bytes::from(vec![7u8; SHORT_STREAM]);
	for _ in 0..streams {
		let mut send = conn.open_uni_wait().await?;
		send.write_all_chunks(&mut [piece.clone()]).await?;
		send.finish()?;
	}
	anyhow::ensure!(joined(reader.await)?? == streams * SHORT_STREAM as u64);
	Ok(meter.stop())
}
