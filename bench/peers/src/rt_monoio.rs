//! The workloads on monoio: one runtime thread, its io_uring driver, owned buffers.

use std::time::Duration;

use anyhow::Context as _;
use monoio::io::{AsyncReadRentExt, AsyncWriteRentExt};
use monoio::net::udp::UdpSocket;
use monoio::net::{TcpListener, TcpStream};

use crate::work::{
	ACK_EVERY, DATAGRAM, GRO_BUFFER, Measured, Meter, Row, TIMERS, TRAIN, WINDOW, bulk_sockets, datagrams_in, loopback,
	next_send,
};

pub(crate) fn run(row: Row, ops: u64) -> anyhow::Result<Measured> {
	let mut runtime = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
		.enable_timer()
		.build()
		.context("a monoio runtime")?;
	// The work runs in a task, as an application's would.
	runtime.block_on(async move {
		monoio::spawn(async move {
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
				Row::Quic256MiB | Row::Quic1000Streams => anyhow::bail!("no QUIC implementation on monoio"),
			}
		})
		.await
	})
}

async fn udp_ping_pong(ops: u64) -> anyhow::Result<Measured> {
	let server = UdpSocket::bind(loopback())?;
	let client = UdpSocket::bind(loopback())?;
	let to = server.local_addr()?;
	let echo = monoio::spawn(async move {
		let mut buf = Vec::with_capacity(DATAGRAM);
		loop {
			let (received, back) = server.recv_from(buf).await;
			let (len, from) = received?;
			if len == 1 {
				return anyhow::Ok(());
			}
			let (sent, back) = server.send_to(back, from).await;
			sent?;
			buf = back;
		}
	});
	let mut payload = vec![7u8; DATAGRAM];
	let mut buf = Vec::with_capacity(DATAGRAM);
	let meter = Meter::start();
	for _ in 0..ops {
		let (sent, back) = client.send_to(payload, to).await;
		sent?;
		payload = back;
		let (received, back) = client.recv_from(buf).await;
		received?;
		buf = back;
	}
	let measured = meter.stop();
	client.send_to(vec![0u8], to).await.0?;
	echo.await?;
	Ok(measured)
}

/// Bulk datagrams, `train` per send (above 1: GSO and GRO set on the sockets).
async fn udp_bulk(ops: u64, train: u64) -> anyhow::Result<Measured> {
	let (sender, receiver) = bulk_sockets(train > 1)?;
	let (sender, receiver) = (UdpSocket::from_std(sender)?, UdpSocket::from_std(receiver)?);
	let to = receiver.local_addr()?;
	let meter = Meter::start();
	let receive = monoio::spawn(async move {
		let mut count = 0u64;
		let mut buf = Vec::with_capacity(if train > 1 { GRO_BUFFER } else { DATAGRAM });
		while count < ops {
			let (received, back) = receiver.recv_from(buf).await;
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
			let (result, back) = sender.send_to(payload, to).await;
			result?;
			payload = back;
			sent += n;
		}
		let (received, back) = sender.recv_from(ack).await;
		received?;
		ack = back;
		acked = u64::from_le_bytes(ack[..8].try_into()?);
	}
	receive.await?;
	Ok(meter.stop())
}

async fn tcp_echo(connections: u64, rounds: u64, size: usize) -> anyhow::Result<Measured> {
	let listener = TcpListener::bind(loopback())?;
	let addr = listener.local_addr()?;
	let accept = monoio::spawn(async move {
		let mut echoes = Vec::new();
		for _ in 0..connections {
			let (mut stream, _) = listener.accept().await?;
			echoes.push(monoio::spawn(async move {
				let mut buf = vec![0u8; size];
				loop {
					let (read, back) = stream.read_exact(buf).await;
					if read.is_err() {
						return anyhow::Ok(());
					}
					let (written, back) = stream.write_all(back).await;
					written?;
					buf = back;
				}
			}));
		}
		for echo in echoes {
			echo.await?;
		}
		anyhow::Ok(())
	});
	let meter = Meter::start();
	let mut clients = Vec::new();
	for _ in 0..connections {
		clients.push(monoio::spawn(async move {
			let mut stream = TcpStream::connect(addr).await?;
			let mut message = vec![7u8; size];
			let mut buf = vec![0u8; size];
			for _ in 0..rounds {
				let (written, back) = stream.write_all(message).await;
				written?;
				message = back;
				let (read, back) = stream.read_exact(buf).await;
				read?;
				buf = back;
			}
			anyhow::Ok(())
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
		sum += monoio::spawn(async move { i }).await;
	}
	anyhow::ensure!(sum == ops * ops.saturating_sub(1) / 2);
	Ok(meter.stop())
}

async fn timers(rearms: u64) -> anyhow::Result<Measured> {
	let meter = Meter::start();
	let tasks: Vec<_> = (0..TIMERS)
		.map(|_| {
			monoio::spawn(async move {
				for _ in 0..rearms {
					monoio::time::sleep(Duration::from_millis(1)).await;
				}
			})
		})
		.collect();
	for task in tasks {
		task.await;
	}
	Ok(meter.stop())
}
