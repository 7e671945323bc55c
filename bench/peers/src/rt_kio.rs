//! The workloads on kio: one worker.

use std::time::Duration;

use anyhow::Context as _;
use kio::net::{TcpListener, TcpStream, Transmit, UdpSocket};

use crate::work::{
	ACK_EVERY, DATAGRAM, Measured, Meter, QUIC_ALPN, QUIC_WRITE, Row, SHORT_STREAM, TIMERS, TRAIN, WINDOW, loopback,
	next_send,
};

pub(crate) fn run(row: Row, ops: u64) -> anyhow::Result<Measured> {
	let runtime = kio::Builder::single().build().context("a kio runtime")?;
	// The work runs in a task, as an application's would (the root future of `block_on` is not a
	// task: a JoinHandle awaited there parks a foreign waiter, one allocation per handle).
	runtime.block_on(async move {
		let work = kio::spawn(async move {
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
		work.await?
	})
}

async fn udp_ping_pong(ops: u64) -> anyhow::Result<Measured> {
	let server = UdpSocket::bind(loopback())?;
	let client = UdpSocket::bind(loopback())?;
	let to = server.local_addr();
	let echo = kio::spawn(async move {
		loop {
			let train = server.recv().await?;
			if train.payload().len() == 1 {
				return anyhow::Ok(());
			}
			server.send_to(train.payload(), train.peer()).await?;
		}
	});
	let payload = vec![7u8; DATAGRAM];
	let meter = Meter::start();
	for _ in 0..ops {
		client.send_to(&payload, to).await?;
		client.recv().await?;
	}
	let measured = meter.stop();
	client.send_to(&[0], to).await?;
	echo.await??;
	Ok(measured)
}

/// Bulk datagrams, `train` per send (above 1: one GSO send each; kio's receiver takes GRO trains
/// in both rows, as it always does).
async fn udp_bulk(ops: u64, train: u64) -> anyhow::Result<Measured> {
	let receiver = UdpSocket::bind(loopback())?;
	let sender = UdpSocket::bind(loopback())?;
	let to = receiver.local_addr();
	let meter = Meter::start();
	let receive = kio::spawn(async move {
		let mut count = 0u64;
		while count < ops {
			let train = receiver.recv().await?;
			count += train.datagrams() as u64;
			if count.is_multiple_of(ACK_EVERY) || count >= ops {
				receiver.send_to(&count.to_le_bytes(), train.peer()).await?;
			}
		}
		anyhow::Ok(())
	});
	let payload = vec![7u8; DATAGRAM * train as usize];
	let (mut sent, mut acked) = (0u64, 0u64);
	while acked < ops {
		while sent < ops && sent - acked < WINDOW {
			let n = next_send(ops, sent, acked, train);
			let contents = &payload[..DATAGRAM * n as usize];
			sender.send(&Transmit::new(to, contents).segments(DATAGRAM)).await?;
			sent += n;
		}
		let ack = sender.recv().await?;
		acked = u64::from_le_bytes(ack.payload()[..8].try_into()?);
	}
	receive.await??;
	Ok(meter.stop())
}

async fn tcp_echo(connections: u64, rounds: u64, size: usize) -> anyhow::Result<Measured> {
	let listener = TcpListener::bind(loopback())?;
	let addr = listener.local_addr();
	let accept = kio::spawn(async move {
		let mut echoes = Vec::new();
		for _ in 0..connections {
			let (mut stream, _) = listener.accept().await?;
			// Owned buffers, lent to the kernel (as monoio's and compio's rows do).
			echoes.push(kio::spawn(async move {
				let mut buf = vec![0u8; size];
				loop {
					let (read, back) = stream.read_exact_owned(buf).await;
					if read.is_err() {
						return anyhow::Ok(());
					}
					let (written, back) = stream.write_all_owned(back).await;
					written?;
					buf = back;
				}
			}));
		}
		for echo in echoes {
			echo.await??;
		}
		anyhow::Ok(())
	});
	let meter = Meter::start();
	let mut clients = Vec::new();
	for _ in 0..connections {
		clients.push(kio::spawn(async move {
			let mut stream = TcpStream::connect(addr).await?;
			let mut message = vec![7u8; size];
			let mut buf = vec![0u8; size];
			for _ in 0..rounds {
				let (written, back) = stream.write_all_owned(message).await;
				written?;
				message = back;
				let (read, back) = stream.read_exact_owned(buf).await;
				read?;
				buf = back;
			}
			anyhow::Ok(())
		}));
	}
	for client in clients {
		client.await??;
	}
	let measured = meter.stop();
	accept.await??;
	Ok(measured)
}

async fn spawn_join(ops: u64) -> anyhow::Result<Measured> {
	let meter = Meter::start();
	let mut sum = 0u64;
	for i in 0..ops {
		sum += kio::spawn(async move { i }).await?;
	}
	anyhow::ensure!(sum == ops * ops.saturating_sub(1) / 2);
	Ok(meter.stop())
}

async fn timers(rearms: u64) -> anyhow::Result<Measured> {
	let meter = Meter::start();
	let tasks: Vec<_> = (0..TIMERS)
		.map(|_| {
			kio::spawn(async move {
				for _ in 0..rearms {
					kio::time::sleep(Duration::from_millis(1)).await;
				}
			})
		})
		.collect();
	for task in tasks {
		task.await?;
	}
	Ok(meter.stop())
}

/// Both QUIC endpoints on this worker, connected: (client connection, server connection, the
/// endpoints to keep).
async fn quic_pair() -> anyhow::Result<(moq_quic::Connection, moq_quic::Connection, [moq_quic::Endpoint; 2])> {
	use moq_quic::{Certificate, Config, Endpoint, Verification};
	let cert = Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY)?;
	let alpn = QUIC_ALPN.as_bytes();
	let server = Endpoint::bind(loopback(), Config::new().with_server(&cert, &[alpn])?)?;
	let verification = Verification::Fingerprints(vec![cert.fingerprint()]);
	let client = Endpoint::bind(loopback(), Config::new().with_client(&verification, &[alpn])?)?;
	let conn = client.connect(server.local_addr(), "localhost")?;
	let accepted = server.accept().await.context("a connection")?;
	conn.established().await?;
	accepted.established().await?;
	Ok((conn, accepted, [server, client]))
}

async fn quic_bulk(mib: u64) -> anyhow::Result<Measured> {
	let (conn, accepted, _endpoints) = quic_pair().await?;
	let bytes = mib << 20;
	let meter = Meter::start();
	let reader = kio::spawn(async move {
		let mut recv = accepted.accept_uni().await?;
		let mut read = 0u64;
		while let Some(chunk) = recv.read().await? {
			read += chunk.len() as u64;
		}
		anyhow::Ok(read)
	});
	let piece = bytes::Bytes::from(vec![7u8; QUIC_WRITE]);
	let mut send = conn.open_uni().await?;
	let mut written = 0u64;
	while written < bytes {
		send.write(piece.clone()).await?;
		written += piece.len() as u64;
	}
	send.finish()?;
	anyhow::ensure!(reader.await?? == bytes);
	Ok(meter.stop())
}

async fn quic_streams(streams: u64) -> anyhow::Result<Measured> {
	let (conn, accepted, _endpoints) = quic_pair().await?;
	let meter = Meter::start();
	let reader = kio::spawn(async move {
		let mut readers = Vec::new();
		for _ in 0..streams {
			let mut recv = accepted.accept_uni().await?;
			readers.push(kio::spawn(async move {
				let mut read = 0u64;
				while let Some(chunk) = recv.read().await? {
					read += chunk.len() as u64;
				}
				anyhow::Ok(read)
			}));
		}
		let mut read = 0;
		for reader in readers {
			read += reader.await??;
		}
		anyhow::Ok(read)
	});
	let piece = bytes::Bytes::from(vec![7u8; SHORT_STREAM]);
	for _ in 0..streams {
		let mut send = conn.open_uni().await?;
		send.write(piece.clone()).await?;
		send.finish()?;
	}
	anyhow::ensure!(reader.await?? == streams * SHORT_STREAM as u64);
	Ok(meter.stop())
}
