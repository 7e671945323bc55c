//! A small HTTP/1.1 client: `GET` with `Connection: close`, for the certificate fingerprint a relay
//! serves and for tests and tools reading `/metrics`.

use std::io;
use std::net::SocketAddr;

use kio::net::TcpStream;

/// The most headers a response may have.
const MAX_HEADERS: usize = 32;

/// A response as [`get`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientResponse {
	/// The status code.
	pub status: u16,
	/// The `Content-Type` header, if any.
	pub content_type: Option<String>,
	/// The body (lossily decoded as UTF-8).
	pub body: String,
}

/// `GET path` from `addr` with `Connection: close`: a small client for tests and tools. The
/// body's length must be given by `Content-Length`.
pub async fn get(addr: SocketAddr, path: &str) -> io::Result<ClientResponse> {
	let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_owned());
	let mut stream = TcpStream::connect(addr).await?;
	let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
	stream.write_all(request.as_bytes()).await?;
	let mut buf = Vec::new();
	let mut chunk = [0u8; 4096];
	loop {
		let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
		let mut response = httparse::Response::new(&mut headers);
		if let httparse::Status::Complete(len) = response.parse(&buf).map_err(|e| invalid(&e.to_string()))? {
			let header = |name: &str| {
				response
					.headers
					.iter()
					.find(|h| h.name.eq_ignore_ascii_case(name))
					.map(|h| String::from_utf8_lossy(h.value).into_owned())
			};
			let length: usize = header("content-length")
				.and_then(|v| v.trim().parse().ok())
				.ok_or_else(|| invalid("no content-length"))?;
			let status = response.code.unwrap_or_default();
			let content_type = header("content-type");
			while buf.len() < len + length {
				match stream.read(&mut chunk).await? {
					0 => return Err(io::ErrorKind::UnexpectedEof.into()),
					n => buf.extend_from_slice(&chunk[..n]),
				}
			}
			let body = String::from_utf8_lossy(&buf[len..len + length]).into_owned();
			return Ok(ClientResponse {
				status,
				content_type,
				body,
			});
		}
		if buf.len() > 64 * 1024 {
			return Err(invalid("response head too large"));
		}
		match stream.read(&mut chunk).await? {
			0 => return Err(io::ErrorKind::UnexpectedEof.into()),
			n => buf.extend_from_slice(&chunk[..n]),
		}
	}
}
