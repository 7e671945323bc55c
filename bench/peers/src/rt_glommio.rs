//! The workloads on glommio: one local executor, its io_uring rings, borrowed buffers.

use std::io;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream, UdpSocket};

use crate::work::{
	ACK_EVERY, DATAGRAM, GRO_BUFFER, Measured, Meter, Row, TIMERS, TRAIN, WINDOW, bulk_sockets, datagrams_in, loopback,
	next_send,
};

pub(crate) fn run(row: Row, ops: u64) -> anyhow::Result<Measured> {
	// The executor runs the work as a task of its own.
	glommio::LocalExecutorBuilder::default()
		.spawn(move || async move {
			match row {
				Row::UdpPingPong => Ok(udp_ping_pong(ops).await?),
				Row::UdpBulk => Ok(udp_bulk(ops, 1).await?),
				Row::UdpBulkGso => Ok(udp_bulk(ops, TRAIN).await?),
				Row::TcpEcho64 | Row::TcpEcho16k | Row::TcpEcho64x100 | Row::TcpEcho16kx100 => {
					Ok(tcp_echo(row.connections(), ops / row.connections(), row.message()).await?)
				}
				Row::SpawnJoin => spawn_join(ops).await,
				Row::Timers => timers(ops / TIMERS).await,
				Row::CrossThreadWake => crate::work::cross_thread_wake(ops).await,
				Row::Quic256MiB | Row::Quic1000Streams => anyhow::bail!("no QUIC implementation on glommio"),
			}
		})
		.map_err(|err| anyhow::anyhow!("a glommio executor: {err}"))?
		.join()
		.map_err(|_| anyhow::anyhow!("the glommio executor panicked"))?
}

async fn udp_ping_pong(ops: u64) -> io::Result<Measured> {
	let server = UdpSocket::bind(loopback())?;
	let client = UdpSocket::bind(loopback())?;
	let to = server.local_addr()?;
	let echo = glommio::spawn_local(async move {
		let mut buf = vec![0u8; DATAGRAM];
		loop {
			let (len, from) = server.recv_from(&mut buf).await?;
			if len == 1 {
				return Ok::<(), io::Error>(());
			}
			server.send_to(&buf[..len], from).await?;
		}
	});
	let payload = vec![7u8; DATAGRAM];
	let mut buf = vec![0u8; DATAGRAM];
	let meter = Meter::start();
	for _ in 0..ops {
		client.send_to(&payload, to).await?;
		client.recv_from(&mut buf).await?;
	}
	let measured = meter.stop();
	client.send_to(&[0], to).await?;
	echo.await?;
	Ok(measured)
}

/// Bulk datagrams, `train` per send (above 1: GSO and GRO set on the sockets).
async fn udp_bulk(ops: u64, train: u64) -> io::Result<Measured> {
	let (sender, receiver) = bulk_sockets(train > 1).map_err(io::Error::other)?;
	let sender = UdpSocket::from(socket2::Socket::from(sender));
	let receiver = UdpSocket::from(socket2::Socket::from(receiver));
	let to = receiver.local_addr()?;
	let meter = Meter::start();
	let receive = glommio::spawn_local(async move {
		let mut count = 0u64;
		let mut buf = vec![0u8; if train > 1 { GRO_BUFFER } else { DATAGRAM }];
		while count < ops {
			let (bytes, from) = receiver.recv_from(&mut buf).await?;
			count += datagrams_in(bytes);
			if count.is_multiple_of(ACK_EVERY) || count >= ops {
				receiver.send_to(&count.to_le_bytes(), from).await?;
			}
		}
		Ok::<(), io::Error>(())
	});
	let payload = vec![7u8; DATAGRAM * train as usize];
	let mut ack = vec![0u8; 64];
	let (mut sent, mut acked) = (0u64, 0u64);
	while acked < ops {
		while sent < ops && sent - acked < WINDOW {
			let n = next_send(ops, sent, acked, train);
			sender.send_to(&payload[..DATAGRAM * n as usize], to).await?;
			sent += n;
		}
		sender.recv_from(&mut ack).await?;
		acked = u64::from_le_bytes(ack[..8].try_into().map_err(io::Error::other)?);
	}
	receive.await?;
	Ok(meter.stop())
}

async fn tcp_echo(connections: u64, rounds: u64, size: usize) -> io::Result<Measured> {
	let listener = TcpListener::bind(loopback())?;
	let addr = listener.local_addr()?;
	let accept = glommio::spawn_local(async move {
		let mut echoes = Vec::new();
		for _ in 0..connections {
			let mut stream = listener.accept().await?;
			echoes.push(glommio::spawn_local(async move {
				let mut buf = vec![0u8; size];
				while stream.read_exact(&mut buf).await.is_ok() {
					stream.write_all(&buf).await?;
				}
				Ok::<(), io::Error>(())
			}));
		}
		for echo in echoes {
			echo.await?;
		}
		Ok::<(), io::Error>(())
	});
	let meter = Meter::start();
	let mut clients = Vec::new();
	for _ in 0..connections {
		clients.push(glommio::spawn_local(async move {
			let mut stream = TcpStream::connect(addr).await?;
			let message = vec![7u8; size];
			let mut buf = vec![0u8; size];
			for _ in 0..rounds {
				stream.write_all(&message).await?;
				stream.read_exact(&mut buf).await?;
			}
			Ok::<(), io::Error>(())
		}));
	}
	for client in clients {
		client.await?;
	}
	let measured = meter.stop();
	accept.await?;
	Ok(measured)
}

async fn spawn_join(ops: u64) -> anyhow::Result<Measured> {
	let meter = Meter::start();
	let mut sum = 0u64;
	for i in 0..ops {
		sum += glommio::spawn_local(async move { i }).await;
	}
	anyhow::ensure!(sum == ops * ops.saturating_sub(1) / 2);
	Ok(meter.stop())
}

async fn timers(rearms: u64) -> anyhow::Result<Measured> {
	let meter = Meter::start();
	let tasks: Vec<_> = (0..TIMERS)
		.map(|_| {
			glommio::spawn_local(async move {
				for _ in 0..rearms {
					glommio::timer::sleep(Duration::from_millis(1)).await;
				}
			})
		})
		.collect();
	for task in tasks {
		task.await;
	}
	Ok(meter.stop())
}
