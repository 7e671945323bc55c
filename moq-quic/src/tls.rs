//! TLS for QUIC: certificates, fingerprints, and rustls configurations.
//!
//! Every configuration is built with an explicit `ring` [`CryptoProvider`], never the process
//! default: with both `ring` and `aws-lc-rs` in a build (feature unification), rustls's implicit
//! default panics (moq-dev/moq#803). QUIC is TLS 1.3 only.
//!
//! Self-signed certificates are ECDSA P-256 and valid for at most 14 days, what browsers demand of
//! a certificate pinned by hash (WebTransport `serverCertificateHashes`), so the same certificate
//! serves both kinds of client. A client verifies the server by a root store, by a pinned SHA-256
//! fingerprint of the leaf certificate, or not at all, which must be asked for by name
//! ([`Verification::Disabled`]). Whatever the choice, the handshake signature is still checked
//! against the presented certificate.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
pub use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The longest validity a generated certificate gets (browsers refuse pinned certificates valid for
/// longer than 14 days).
pub const MAX_SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(14 * 24 * 3600);

/// The crypto provider every configuration here is built with.
pub fn provider() -> Arc<CryptoProvider> {
	Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain and its private key.
pub struct Certificate {
	chain: Vec<CertificateDer<'static>>,
	key: PrivateKeyDer<'static>,
	fingerprint: [u8; 32],
}

impl Certificate {
	/// A self-signed ECDSA P-256 certificate for `names`, valid from a day ago for `validity`
	/// (clamped to [`MAX_SELF_SIGNED_VALIDITY`] from its start).
	pub fn self_signed(names: &[&str], validity: Duration) -> Result<Self, rcgen::Error> {
		let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
		let mut params = rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
		(params.not_before, params.not_after) = validity_window(SystemTime::now(), validity);
		params
			.distinguished_name
			.push(rcgen::DnType::CommonName, names.first().copied().unwrap_or("moq"));
		let cert = params.self_signed(&key)?;
		Ok(Self::new(
			vec![cert.der().clone()],
			PrivateKeyDer::Pkcs8(key.serialize_der().into()),
		))
	}

	/// A chain (leaf first) and its key.
	pub fn new(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Self {
		let fingerprint = chain.first().map_or([0; 32], |leaf| fingerprint(leaf));
		Self {
			chain,
			key,
			fingerprint,
		}
	}

	/// Reads a PEM chain (leaf first) and a PEM private key.
	pub fn from_pem_files(chain: &Path, key: &Path) -> io::Result<Self> {
		let invalid = |what: &Path, e: rustls::pki_types::pem::Error| {
			io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", what.display()))
		};
		let certs = CertificateDer::pem_file_iter(chain)
			.map_err(|e| invalid(chain, e))?
			.collect::<Result<Vec<_>, _>>()
			.map_err(|e| invalid(chain, e))?;
		if certs.is_empty() {
			return Err(io::Error::new(
				io::ErrorKind::InvalidData,
				format!("{}: no certificate in the file", chain.display()),
			));
		}
		let key = PrivateKeyDer::from_pem_file(key).map_err(|e| invalid(key, e))?;
		Ok(Self::new(certs, key))
	}

	/// Reads the PEM certificates of `path`: roots for [`Verification::Roots`].
	pub fn roots_from_pem_file(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
		let invalid = |e: rustls::pki_types::pem::Error| {
			io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
		};
		let roots = CertificateDer::pem_file_iter(path)
			.map_err(invalid)?
			.collect::<Result<Vec<_>, _>>()
			.map_err(invalid)?;
		if roots.is_empty() {
			return Err(io::Error::new(
				io::ErrorKind::InvalidData,
				format!("{}: no certificate in the file", path.display()),
			));
		}
		Ok(roots)
	}

	/// The chain, leaf first.
	pub fn chain(&self) -> &[CertificateDer<'static>] {
		&self.chain
	}

	/// SHA-256 of the leaf certificate's DER.
	pub fn fingerprint(&self) -> [u8; 32] {
		self.fingerprint
	}

	/// [`Self::fingerprint`] as lowercase hex.
	pub fn fingerprint_hex(&self) -> String {
		hex(&self.fingerprint)
	}
}

impl Clone for Certificate {
	fn clone(&self) -> Self {
		Self {
			chain: self.chain.clone(),
			key: self.key.clone_key(),
			fingerprint: self.fingerprint,
		}
	}
}

impl fmt::Debug for Certificate {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_struct("Certificate")
			.field("chain", &self.chain.len())
			.field("fingerprint", &self.fingerprint_hex())
			.finish_non_exhaustive()
	}
}

/// A self-signed certificate's validity: from a day before `now` (slack for clocks behind ours)
/// for `validity`, at most [`MAX_SELF_SIGNED_VALIDITY`].
fn validity_window(now: SystemTime, validity: Duration) -> (time::OffsetDateTime, time::OffsetDateTime) {
	let start = now - Duration::from_secs(24 * 3600);
	let end = start + validity.min(MAX_SELF_SIGNED_VALIDITY);
	(time::OffsetDateTime::from(start), time::OffsetDateTime::from(end))
}

/// SHA-256 of a DER certificate, with the provider's hash (no extra crate).
pub fn fingerprint(der: &CertificateDer<'_>) -> [u8; 32] {
	let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
	let hash = suite
		.tls13()
		.expect("a TLS 1.3 suite")
		.common
		.hash_provider
		.hash(der.as_ref());
	let mut out = [0; 32];
	out.copy_from_slice(hash.as_ref());
	out
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
	const DIGITS: &[u8; 16] = b"0123456789abcdef";
	let mut out = String::with_capacity(bytes.len() * 2);
	for byte in bytes {
		out.push(char::from(DIGITS[usize::from(byte >> 4)]));
		out.push(char::from(DIGITS[usize::from(byte & 15)]));
	}
	out
}

/// Parses a SHA-256 fingerprint written as 64 hex digits (colons allowed between bytes).
pub fn parse_fingerprint(text: &str) -> Option<[u8; 32]> {
	let digits: Vec<u8> = text.bytes().filter(|b| *b != b':').collect();
	if digits.len() != 64 {
		return None;
	}
	let mut out = [0; 32];
	for (i, pair) in digits.chunks(2).enumerate() {
		let nibble = |c: u8| (c as char).to_digit(16);
		out[i] = (nibble(pair[0])? * 16 + nibble(pair[1])?) as u8;
	}
	Some(out)
}

/// How a client checks the server's certificate.
#[derive(Clone, Debug)]
pub enum Verification {
	/// Chains to one of these roots, for the server name (WebPKI, as browsers do).
	Roots(Vec<CertificateDer<'static>>),
	/// The leaf certificate's SHA-256 is one of these; names and chains are not looked at.
	Fingerprints(Vec<[u8; 32]>),
	/// No check of the certificate at all (the handshake signature is still verified). For
	/// development only.
	Disabled,
}

/// Why a TLS configuration could not be built; the cause is kept ([`source`](std::error::Error::source)).
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
	/// rustls refused the configuration (a certificate and key that do not match, a root it
	/// cannot parse, a protocol version its provider lacks).
	Rustls(rustls::Error),
	/// The provider lacks the cipher suite QUIC's Initial packets need (TLS13_AES_128_GCM_SHA256).
	CipherSuite(quinn_proto::crypto::rustls::NoInitialCipherSuite),
}

impl fmt::Display for TlsError {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Rustls(_) => f.write_str("rustls refused the TLS configuration"),
			Self::CipherSuite(_) => f.write_str("the TLS provider lacks QUIC's Initial cipher suite"),
		}
	}
}

impl std::error::Error for TlsError {
	fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
		match self {
			Self::Rustls(err) => Some(err),
			Self::CipherSuite(err) => Some(err),
		}
	}
}

impl From<rustls::Error> for TlsError {
	fn from(err: rustls::Error) -> Self {
		Self::Rustls(err)
	}
}

impl From<quinn_proto::crypto::rustls::NoInitialCipherSuite> for TlsError {
	fn from(err: quinn_proto::crypto::rustls::NoInitialCipherSuite) -> Self {
		Self::CipherSuite(err)
	}
}

/// The cipher suites a server picks from, in its order: AES-128-GCM first, whatever the client
/// prefers. rustls's own order (and so a rustls client's) puts AES-256-GCM first; browsers offer
/// AES-128-GCM first. Every packet a relay sends and receives is sealed or opened, and AES-256
/// takes 14 rounds a block against 10 and a SHA-384 key schedule against SHA-256: on the relay's
/// fan-out with rustls clients, about 200 fewer user-space instructions per delivered frame
/// (docs/bench.md).
fn server_provider() -> Arc<CryptoProvider> {
	let mut provider = rustls::crypto::ring::default_provider();
	let aes_128_first =
		|suite: &rustls::SupportedCipherSuite| suite.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256;
	provider.cipher_suites.sort_by_key(aes_128_first);
	Arc::new(provider)
}

/// A rustls server configuration for QUIC: TLS 1.3, `alpn` in order of preference, and the
/// cipher suite in the server's order, AES-128-GCM first, whatever the client prefers.
pub fn server_crypto(
	certificate: &Certificate,
	alpn: &[&[u8]],
) -> Result<quinn_proto::crypto::rustls::QuicServerConfig, TlsError> {
	quinn_proto::crypto::rustls::QuicServerConfig::try_from(server_tls(certificate, alpn)?).map_err(TlsError::from)
}

fn server_tls(certificate: &Certificate, alpn: &[&[u8]]) -> Result<rustls::ServerConfig, TlsError> {
	let mut tls = rustls::ServerConfig::builder_with_provider(server_provider())
		.with_protocol_versions(&[&rustls::version::TLS13])?
		.with_no_client_auth()
		.with_single_cert(certificate.chain.clone(), certificate.key.clone_key())?;
	tls.ignore_client_order = true;
	tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
	Ok(tls)
}

/// A rustls client configuration for QUIC: TLS 1.3, `alpn` offered in order.
pub fn client_crypto(
	verification: &Verification,
	alpn: &[&[u8]],
) -> Result<quinn_proto::crypto::rustls::QuicClientConfig, TlsError> {
	let provider = provider();
	let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
		.with_protocol_versions(&[&rustls::version::TLS13])?;
	let mut tls = match verification {
		Verification::Roots(roots) => {
			let mut store = rustls::RootCertStore::empty();
			for root in roots {
				store.add(root.clone())?;
			}
			builder.with_root_certificates(store).with_no_client_auth()
		}
		Verification::Fingerprints(pins) => builder
			.dangerous()
			.with_custom_certificate_verifier(Arc::new(PinnedVerifier {
				pins: Some(pins.clone()),
				provider,
			}))
			.with_no_client_auth(),
		Verification::Disabled => builder
			.dangerous()
			.with_custom_certificate_verifier(Arc::new(PinnedVerifier { pins: None, provider }))
			.with_no_client_auth(),
	};
	tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
	quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).map_err(TlsError::from)
}

/// Accepts a server whose leaf certificate hashes to a pinned fingerprint (or any, with no pins),
/// and still verifies the handshake signature against that certificate.
#[derive(Debug)]
struct PinnedVerifier {
	pins: Option<Vec<[u8; 32]>>,
	provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedVerifier {
	fn verify_server_cert(
		&self,
		end_entity: &CertificateDer<'_>,
		_intermediates: &[CertificateDer<'_>],
		_server_name: &ServerName<'_>,
		_ocsp_response: &[u8],
		_now: UnixTime,
	) -> Result<ServerCertVerified, rustls::Error> {
		match &self.pins {
			None => Ok(ServerCertVerified::assertion()),
			Some(pins) if pins.contains(&fingerprint(end_entity)) => Ok(ServerCertVerified::assertion()),
			Some(_) => Err(rustls::Error::InvalidCertificate(
				rustls::CertificateError::ApplicationVerificationFailure,
			)),
		}
	}

	fn verify_tls12_signature(
		&self,
		message: &[u8],
		cert: &CertificateDer<'_>,
		dss: &DigitallySignedStruct,
	) -> Result<HandshakeSignatureValid, rustls::Error> {
		rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
	}

	fn verify_tls13_signature(
		&self,
		message: &[u8],
		cert: &CertificateDer<'_>,
		dss: &DigitallySignedStruct,
	) -> Result<HandshakeSignatureValid, rustls::Error> {
		rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
	}

	fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
		self.provider.signature_verification_algorithms.supported_schemes()
	}
}

#[cfg(test)]
mod tests {
	use std::time::UNIX_EPOCH;

	use super::*;

	#[test]
	fn validity_starts_a_day_early_and_lasts_at_most_fourteen_days() {
		let day = |n: u64| UNIX_EPOCH + Duration::from_secs(n * 86_400);
		let date = |at: time::OffsetDateTime| (at.year(), u8::from(at.month()), at.day());
		let (start, end) = validity_window(day(20_788), Duration::from_secs(30 * 86_400));
		assert_eq!(date(start), (2026, 11, 30));
		assert_eq!(date(end), (2026, 12, 14), "clamped to 14 days");
		let (start, _) = validity_window(day(19_783), Duration::from_secs(86_400));
		assert_eq!(date(start), (2024, 2, 29));
		let (start, _) = validity_window(day(1), Duration::from_secs(86_400));
		assert_eq!(date(start), (1970, 1, 1));
	}

	#[test]
	fn the_server_picks_aes_128_gcm_over_a_client_preferring_aes_256() {
		let cert = Certificate::self_signed(&["localhost"], MAX_SELF_SIGNED_VALIDITY).unwrap();
		let server = Arc::new(server_tls(&cert, &[b"moq"]).unwrap());
		// A client in rustls's own order, AES-256-GCM first.
		let mut client = rustls::ClientConfig::builder_with_provider(provider())
			.with_protocol_versions(&[&rustls::version::TLS13])
			.unwrap()
			.dangerous()
			.with_custom_certificate_verifier(Arc::new(PinnedVerifier {
				pins: None,
				provider: provider(),
			}))
			.with_no_client_auth();
		client.alpn_protocols = vec![b"moq".to_vec()];
		assert_eq!(
			client.crypto_provider().cipher_suites[0].suite(),
			rustls::CipherSuite::TLS13_AES_256_GCM_SHA384
		);
		let name = ServerName::try_from("localhost").unwrap();
		let mut client = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
		let mut server = rustls::ServerConnection::new(server).unwrap();
		// The handshake in memory: each side's records to the other until both are done.
		for _ in 0..10 {
			let mut records = Vec::new();
			while client.wants_write() {
				client.write_tls(&mut records).unwrap();
			}
			server.read_tls(&mut &records[..]).unwrap();
			server.process_new_packets().unwrap();
			records.clear();
			while server.wants_write() {
				server.write_tls(&mut records).unwrap();
			}
			client.read_tls(&mut &records[..]).unwrap();
			client.process_new_packets().unwrap();
			if !client.is_handshaking() && !server.is_handshaking() {
				break;
			}
		}
		assert!(!client.is_handshaking() && !server.is_handshaking());
		for side in [client.negotiated_cipher_suite(), server.negotiated_cipher_suite()] {
			assert_eq!(side.unwrap().suite(), rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
		}
	}

	#[test]
	fn fingerprints_round_trip_through_hex() {
		let cert = Certificate::self_signed(&["localhost"], MAX_SELF_SIGNED_VALIDITY).unwrap();
		let hex = cert.fingerprint_hex();
		assert_eq!(hex.len(), 64);
		assert_eq!(parse_fingerprint(&hex), Some(cert.fingerprint()));
		assert_eq!(fingerprint(&cert.chain()[0]), cert.fingerprint());
		assert_eq!(parse_fingerprint("zz"), None);
	}
}
