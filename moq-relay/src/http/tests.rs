use std::time::Instant;

use std::net::SocketAddr;

use kio::Builder;
use moq_client::http::get;

use super::*;

const FINGERPRINT_OF_ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

fn run<F: Future>(test: impl FnOnce() -> F) -> F::Output {
	Builder::single()
		.build()
		.expect("runtime starts")
		.block_on(async move { test().await })
}

/// A server on loopback with a metrics callback that counts its calls.
fn server(configure: impl FnOnce(Routes) -> Routes) -> (SocketAddr, JoinHandle<()>, Rc<Cell<u32>>) {
	let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
	let addr = listener.local_addr();
	let scrapes = Rc::new(Cell::new(0));
	let counter = scrapes.clone();
	let routes = Routes::new(
		|| FINGERPRINT_OF_ABC.to_owned(),
		move || {
			counter.set(counter.get() + 1);
			let mut prom = metrics::prom::Prom::new();
			prom.counter("scrapes_total", "Scrapes.", counter.get());
			prom.finish()
		},
	);
	let task = kio::spawn(serve(listener, Rc::new(configure(routes))));
	(addr, task, scrapes)
}

/// Sends `request` on a new connection and reads until the server closes it.
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
	let mut stream = TcpStream::connect(addr).await.unwrap();
	stream.write_all(request).await.unwrap();
	read_to_end(&mut stream).await
}

async fn read_to_end(stream: &mut TcpStream) -> String {
	let mut out = Vec::new();
	let mut chunk = [0u8; 4096];
	loop {
		match stream.read(&mut chunk).await {
			Ok(0) => break,
			Ok(n) => out.extend_from_slice(&chunk[..n]),
			Err(e) => panic!("read failed after {:?}: {e}", String::from_utf8_lossy(&out)),
		}
	}
	String::from_utf8(out).unwrap()
}

#[test]
fn fingerprint_is_lowercase_hex_sha256() {
	let der = moq_quic::tls::CertificateDer::from(b"abc".to_vec());
	assert_eq!(
		moq_quic::tls::hex(&moq_quic::tls::fingerprint(&der)),
		FINGERPRINT_OF_ABC
	);
}

#[test]
fn health_certificate_and_metrics() {
	run(|| async {
		let (addr, server, scrapes) = server(|r| r);
		let health = get(addr, "/health").await.unwrap();
		assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
		let cert = get(addr, "/certificate.sha256").await.unwrap();
		assert_eq!((cert.status, cert.body.as_str()), (200, FINGERPRINT_OF_ABC));
		assert_eq!(cert.content_type.as_deref(), Some("text/plain; charset=utf-8"));
		assert_eq!(cert.body.len(), 64, "exactly the hex digits: browsers do not trim");
		// A page on another origin may read it.
		let raw = exchange(addr, b"GET /certificate.sha256 HTTP/1.1\r\nconnection: close\r\n\r\n").await;
		assert!(
			raw.to_ascii_lowercase()
				.contains("\r\naccess-control-allow-origin: *\r\n"),
			"{raw}"
		);
		let metrics = get(addr, "/metrics?x=1").await.unwrap();
		assert_eq!(metrics.status, 200);
		assert_eq!(metrics.content_type.as_deref(), Some(metrics::CONTENT_TYPE));
		assert!(metrics.body.contains("\nscrapes_total 1\n"), "{}", metrics.body);
		assert_eq!(scrapes.get(), 1);
		// The page and its script, whole.
		let page = get(addr, "/?jwt=x").await.unwrap();
		assert_eq!(page.status, 200);
		assert_eq!(page.content_type.as_deref(), Some("text/html; charset=utf-8"));
		assert!(
			page.body.contains(r#"<script type="module" src="/app.js">"#),
			"{}",
			page.body
		);
		// It says which address the request reached, for its script to dial the same.
		let told = format!(r#"<meta name="moq-relay-address" content="{}">"#, addr.ip());
		assert!(page.body.contains(&told), "{}", page.body);
		let script = get(addr, "/app.js").await.unwrap();
		assert_eq!(script.status, 200);
		assert_eq!(script.content_type.as_deref(), Some("text/javascript; charset=utf-8"));
		assert_eq!(script.body.len(), PAGE_SCRIPT.len());
		assert_eq!(get(addr, "/health/x").await.unwrap().status, 404);
		assert_eq!(get(addr, "/app.js/x").await.unwrap().status, 404);
		server.abort();
	});
}

#[test]
fn other_methods_are_refused_and_head_has_no_body() {
	run(|| async {
		let (addr, server, _) = server(|r| r);
		let post = exchange(addr, b"POST /health HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc").await;
		assert!(post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{post}");
		assert!(post.contains("\r\nallow: GET, HEAD\r\n"), "{post}");
		assert!(
			post.contains("\r\nconnection: close\r\n"),
			"a request with a body ends the connection"
		);
		let head = exchange(addr, b"HEAD /health HTTP/1.1\r\nconnection: close\r\n\r\n").await;
		assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
		assert!(head.contains("\r\ncontent-length: 3\r\n"), "{head}");
		assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
		server.abort();
	});
}

#[test]
fn keep_alive_answers_pipelined_requests_in_order() {
	run(|| async {
		let (addr, server, scrapes) = server(|r| r);
		let mut stream = TcpStream::connect(addr).await.unwrap();
		stream
			.write_all(b"GET /metrics HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\nGET /health HTTP/1.1\r\n")
			.await
			.unwrap();
		// The third request's head is cut in two.
		stream.write_all(b"connection: close\r\n\r\n").await.unwrap();
		let all = read_to_end(&mut stream).await;
		let statuses: Vec<&str> = all
			.match_indices("HTTP/1.1 ")
			.map(|(i, _)| &all[i + 9..i + 12])
			.collect();
		assert_eq!(statuses, ["200", "404", "200"], "{all}");
		assert!(all.ends_with("connection: close\r\n\r\nok\n"), "{all}");
		assert_eq!(scrapes.get(), 1);
		// HTTP/1.0 closes unless asked to keep alive.
		let old = exchange(addr, b"GET /health HTTP/1.0\r\n\r\n").await;
		assert!(old.ends_with("ok\n") && old.contains("connection: close"), "{old}");
		let mut stream = TcpStream::connect(addr).await.unwrap();
		let request = b"GET /health HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
		for _ in 0..2 {
			stream.write_all(request).await.unwrap();
			let mut response = Vec::new();
			while !response.ends_with(b"ok\n") {
				let mut chunk = [0u8; 256];
				let n = stream.read(&mut chunk).await.unwrap();
				assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&response));
				response.extend_from_slice(&chunk[..n]);
			}
			let response = String::from_utf8_lossy(&response);
			assert!(
				response.ends_with("\r\n\r\nok\n") && !response.contains("close"),
				"{response}"
			);
		}
		server.abort();
	});
}

#[test]
fn oversized_and_garbled_requests_are_refused() {
	run(|| async {
		let (addr, server, _) = server(|r| r);
		let mut big = b"GET /health HTTP/1.1\r\nx: ".to_vec();
		big.resize(MAX_HEAD + 1000, b'a');
		let response = exchange(addr, &big).await;
		assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
		let mut many = b"GET /health HTTP/1.1\r\n".to_vec();
		for i in 0..=MAX_HEADERS {
			many.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
		}
		many.extend_from_slice(b"\r\n");
		let response = exchange(addr, &many).await;
		assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
		for garbage in [
			&b"\x00\x01\x02 garbage\r\n\r\n"[..],
			b"GET /health HTTP/9.9\r\n\r\n",
			b"GET /he alth HTTP/1.1\r\n\r\n",
		] {
			let response = exchange(addr, garbage).await;
			assert!(response.starts_with("HTTP/1.1 400 "), "{response}");
		}
		// The server is still serving.
		assert_eq!(get(addr, "/health").await.unwrap().status, 200);
		server.abort();
	});
}

#[test]
fn idle_and_slow_connections_time_out() {
	run(|| async {
		let timeout = Duration::from_millis(100);
		let (addr, server, _) = server(|r| r.with_timeout(timeout));
		let start = Instant::now();
		let mut idle = TcpStream::connect(addr).await.unwrap();
		assert_eq!(
			read_to_end(&mut idle).await,
			"",
			"an idle connection is closed silently"
		);
		assert!(start.elapsed() >= timeout);
		let start = Instant::now();
		let slow = exchange(addr, b"GET /health HTTP/1.1\r\n").await;
		assert!(slow.starts_with("HTTP/1.1 408 "), "{slow}");
		assert!(start.elapsed() >= timeout);
		// A keep-alive connection is idle again after its response.
		let mut stream = TcpStream::connect(addr).await.unwrap();
		stream.write_all(b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
		assert!(read_to_end(&mut stream).await.ends_with("ok\n"));
		server.abort();
	});
}

#[test]
fn a_full_table_closes_its_oldest_idle_connection() {
	run(|| async {
		let (addr, server, _) = server(|r| r.with_max_connections(2));
		let mut first = TcpStream::connect(addr).await.unwrap();
		let mut second = TcpStream::connect(addr).await.unwrap();
		let mut third = TcpStream::connect(addr).await.unwrap();
		// Accepted in order: the table is full at the third, and the first, idle the longest,
		// makes room (closing the third instead would let idle clients hold every slot).
		let mut byte = [0u8; 1];
		assert!(matches!(first.read(&mut byte).await, Ok(0) | Err(_)));
		for stream in [&mut second, &mut third] {
			stream
				.write_all(b"GET /health HTTP/1.1\r\nconnection: close\r\n\r\n")
				.await
				.unwrap();
			assert!(read_to_end(stream).await.ends_with("ok\n"));
		}
		server.abort();
	});
}

#[test]
fn one_address_gets_its_share_and_a_slow_head_is_cut() {
	run(|| async {
		let (addr, server, _) = server(|r| r.with_client_limits(2, Duration::from_millis(300)));
		let mut held = Vec::new();
		for _ in 0..2 {
			held.push(TcpStream::connect(addr).await.unwrap());
		}
		// A third from the same address is closed at once.
		let mut over = TcpStream::connect(addr).await.unwrap();
		let mut byte = [0u8; 1];
		assert!(matches!(over.read(&mut byte).await, Ok(0) | Err(_)));
		// A head that starts but does not finish is cut after the head deadline, not the
		// 10 s keep-alive timeout.
		let slow = &mut held[0];
		slow.write_all(b"GET /hea").await.unwrap();
		let start = Instant::now();
		let response = read_to_end(slow).await;
		assert!(response.starts_with("HTTP/1.1 408"), "{response}");
		assert!(start.elapsed() < Duration::from_secs(5));
		server.abort();
	});
}

#[test]
fn stopping_the_server_closes_its_connections() {
	run(|| async {
		let (addr, server, _) = server(|r| r);
		let mut stream = TcpStream::connect(addr).await.unwrap();
		stream.write_all(b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
		let mut response = [0u8; 256];
		assert!(stream.read(&mut response).await.unwrap() > 0);
		server.abort();
		assert!(server.await.unwrap_err().is_cancelled());
		// Kept alive until now; the abort ends it (not the 10 s timeout).
		let start = Instant::now();
		assert!(matches!(stream.read(&mut response).await, Ok(0) | Err(_)));
		assert!(start.elapsed() < Duration::from_secs(5));
		// The listener is closed, or closing: a connection is refused or reset.
		if let Ok(mut late) = TcpStream::connect(addr).await {
			assert!(matches!(late.read(&mut response).await, Ok(0) | Err(_)));
		}
	});
}
