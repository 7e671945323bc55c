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
//!
//! A server's certificate is a [`ServerCertificate`]: it can be replaced while the server runs (a
//! renewed certificate put in service without a restart). Handshakes that start afterwards present
//! the new one; connections already up are not touched, TLS has nothing more to say to them.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

pub use rustls;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
pub use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
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
	/// The leaf's `notAfter`, read once.
	not_after: Option<SystemTime>,
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
		let not_after = chain.first().and_then(|leaf| not_after(leaf));
		Self {
			chain,
			key,
			fingerprint,
			not_after,
		}
	}

	/// Parses a PEM chain (leaf first) and a PEM private key; an error says which of the two (0
	/// the chain, 1 the key) is wrong.
	pub fn from_pem(chain: &[u8], key: &[u8]) -> Result<Self, (usize, io::Error)> {
		let invalid = |which: usize, e: rustls::pki_types::pem::Error| {
			(which, io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
		};
		let certs = CertificateDer::pem_slice_iter(chain)
			.collect::<Result<Vec<_>, _>>()
			.map_err(|e| invalid(0, e))?;
		if certs.is_empty() {
			return Err((
				0,
				io::Error::new(io::ErrorKind::InvalidData, "no certificate in the file"),
			));
		}
		let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| invalid(1, e))?;
		Ok(Self::new(certs, key))
	}

	/// The chain (leaf first) and the key as PEM, what [`from_pem`](Self::from_pem) reads: to keep
	/// a generated certificate in files.
	pub fn to_pem(&self) -> (String, String) {
		let chain = self.chain.iter().map(|cert| pem("CERTIFICATE", cert)).collect();
		let label = match &self.key {
			PrivateKeyDer::Pkcs1(_) => "RSA PRIVATE KEY",
			PrivateKeyDer::Sec1(_) => "EC PRIVATE KEY",
			_ => "PRIVATE KEY",
		};
		(chain, pem(label, self.key.secret_der()))
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

	/// When the leaf certificate stops being valid (its `notAfter`); `None` when the leaf cannot
	/// be read that far.
	pub fn not_after(&self) -> Option<SystemTime> {
		self.not_after
	}
}

/// The certificate a server presents, replaceable while it serves; clones share it.
///
/// rustls asks it for the certificate at each handshake (it is the configuration's certificate
/// resolver), so a [`replace`](Self::replace) reaches every endpoint built with it, on every
/// thread, from the next handshake on.
#[derive(Clone)]
pub struct ServerCertificate(Arc<RwLock<Served>>);

struct Served {
	certificate: Certificate,
	/// What rustls signs with: the chain and the key, loaded by the provider once.
	key: Arc<CertifiedKey>,
}

impl ServerCertificate {
	/// Presents `certificate`; refused when its key does not load or does not match its leaf.
	pub fn new(certificate: Certificate) -> Result<Self, TlsError> {
		let key = certified(&certificate)?;
		Ok(Self(Arc::new(RwLock::new(Served { certificate, key }))))
	}

	/// Presents `certificate` from the next handshake on. Refused as [`new`](Self::new) refuses,
	/// and then the certificate in service stays.
	pub fn replace(&self, certificate: Certificate) -> Result<(), TlsError> {
		let key = certified(&certificate)?;
		// A poisoned lock only means a panic elsewhere while it was held; the value is whole.
		*self.0.write().unwrap_or_else(PoisonError::into_inner) = Served { certificate, key };
		Ok(())
	}

	/// The fingerprint of the certificate in service.
	pub fn fingerprint(&self) -> [u8; 32] {
		self.served().certificate.fingerprint
	}

	/// [`Self::fingerprint`] as lowercase hex.
	pub fn fingerprint_hex(&self) -> String {
		hex(&self.fingerprint())
	}

	/// When the certificate in service expires ([`Certificate::not_after`]).
	pub fn not_after(&self) -> Option<SystemTime> {
		self.served().certificate.not_after
	}

	fn served(&self) -> std::sync::RwLockReadGuard<'_, Served> {
		// A poisoned lock only means a panic elsewhere while it was held; the value is whole.
		self.0.read().unwrap_or_else(PoisonError::into_inner)
	}
}

impl fmt::Debug for ServerCertificate {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.debug_tuple("ServerCertificate")
			.field(&self.served().certificate)
			.finish()
	}
}

impl ResolvesServerCert for ServerCertificate {
	fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
		Some(self.served().key.clone())
	}
}

/// `certificate` as rustls signs with it, its key checked against its leaf.
fn certified(certificate: &Certificate) -> Result<Arc<CertifiedKey>, TlsError> {
	let key = CertifiedKey::from_der(
		certificate.chain.clone(),
		certificate.key.clone_key(),
		&server_provider(),
	)?;
	Ok(Arc::new(key))
}

/// A DER certificate's `notAfter` (RFC 5280 §4.1): `Certificate` is a SEQUENCE whose first
/// element, `TBSCertificate`, holds an optional `[0]` version, the serial number, the signature
/// algorithm, the issuer, then `Validity`, a SEQUENCE of `notBefore` and `notAfter`, each a
/// UTCTime (`YYMMDDHHMMSSZ`, years 1950 to 2049) or a GeneralizedTime (`YYYYMMDDHHMMSSZ`).
/// `None` for anything else: the bytes come from an operator's file, and a certificate rustls
/// accepts but this cannot read only costs the expiry metric.
fn not_after(der: &[u8]) -> Option<SystemTime> {
	let (certificate, _) = der_element(der, 0x30)?;
	let (mut tbs, _) = der_element(certificate, 0x30)?;
	if tbs.first() == Some(&0xa0) {
		tbs = der_element(tbs, 0xa0)?.1;
	}
	let tbs = der_element(tbs, 0x02)?.1; // serialNumber
	let tbs = der_element(tbs, 0x30)?.1; // signature
	let tbs = der_element(tbs, 0x30)?.1; // issuer
	let (validity, _) = der_element(tbs, 0x30)?;
	let not_before_tag = *validity.first()?;
	let (_, rest) = der_element(validity, not_before_tag)?;
	let tag = *rest.first()?;
	let (time, _) = der_element(rest, tag)?;
	let digits = |text: &[u8]| -> Option<i32> {
		text.iter()
			.try_fold(0i32, |n, &c| c.is_ascii_digit().then(|| n * 10 + i32::from(c - b'0')))
	};
	let (year, rest) = match (tag, time.len()) {
		(0x17, 13) => {
			let yy = digits(&time[..2])?;
			(if yy < 50 { 2000 + yy } else { 1900 + yy }, &time[2..])
		}
		(0x18, 15) => (digits(&time[..4])?, &time[4..]),
		_ => return None,
	};
	if rest.last() != Some(&b'Z') {
		return None;
	}
	let field = |i: usize| digits(&rest[i..i + 2]).and_then(|n| u8::try_from(n).ok());
	let month = time::Month::try_from(field(0)?).ok()?;
	let date = time::Date::from_calendar_date(year, month, field(2)?).ok()?;
	let at = time::Time::from_hms(field(4)?, field(6)?, field(8)?).ok()?;
	let seconds = time::PrimitiveDateTime::new(date, at).assume_utc().unix_timestamp();
	let since_epoch = Duration::from_secs(seconds.unsigned_abs());
	match seconds >= 0 {
		true => SystemTime::UNIX_EPOCH.checked_add(since_epoch),
		false => SystemTime::UNIX_EPOCH.checked_sub(since_epoch),
	}
}

/// The DER element at the start of `der` with tag `tag`: its content and what follows it.
fn der_element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
	let (&first, rest) = der.split_first()?;
	if first != tag {
		return None;
	}
	let (&length, mut rest) = rest.split_first()?;
	let length = match length {
		0..=0x7f => usize::from(length),
		// Long form: 1 to 4 bytes of length, big-endian.
		0x81..=0x84 => {
			let count = usize::from(length & 0x7f);
			let (bytes, after) = rest.split_at_checked(count)?;
			rest = after;
			bytes.iter().fold(0usize, |n, &b| n << 8 | usize::from(b))
		}
		_ => return None,
	};
	rest.split_at_checked(length)
}

impl Clone for Certificate {
	fn clone(&self) -> Self {
		Self {
			chain: self.chain.clone(),
			key: self.key.clone_key(),
			fingerprint: self.fingerprint,
			not_after: self.not_after,
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

/// One PEM block (RFC 7468): `der` in base64, 64 characters a line, between `label`'s lines.
fn pem(label: &str, der: &[u8]) -> String {
	let base64 = data_encoding::BASE64.encode(der);
	let mut out = format!("-----BEGIN {label}-----\n");
	for line in base64.as_bytes().chunks(64) {
		out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
		out.push('\n');
	}
	out.push_str(&format!("-----END {label}-----\n"));
	out
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
	data_encoding::HEXLOWER.encode(bytes)
}

/// Parses a SHA-256 fingerprint written as 64 hex digits, either case (colons allowed between
/// bytes).
pub fn parse_fingerprint(text: &str) -> Option<[u8; 32]> {
	let digits: Vec<u8> = text.bytes().filter(|b| *b != b':').collect();
	data_encoding::HEXLOWER_PERMISSIVE.decode(&digits).ok()?.try_into().ok()
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
	certificate: &ServerCertificate,
	alpn: &[&[u8]],
) -> Result<quinn_proto::crypto::rustls::QuicServerConfig, TlsError> {
	quinn_proto::crypto::rustls::QuicServerConfig::try_from(server_tls(certificate, alpn)?).map_err(TlsError::from)
}

fn server_tls(certificate: &ServerCertificate, alpn: &[&[u8]]) -> Result<rustls::ServerConfig, TlsError> {
	let mut tls = rustls::ServerConfig::builder_with_provider(server_provider())
		.with_protocol_versions(&[&rustls::version::TLS13])?
		.with_no_client_auth()
		.with_cert_resolver(Arc::new(certificate.clone()));
	tls.ignore_client_order = true;
	tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
	Ok(tls)
}

/// A rustls client configuration for QUIC: TLS 1.3, `alpn` offered in order.
pub fn client_crypto(
	verification: &Verification,
	alpn: &[&[u8]],
) -> Result<quinn_proto::crypto::rustls::QuicClientConfig, TlsError> {
	quinn_proto::crypto::rustls::QuicClientConfig::try_from(client_tls(verification, alpn)?).map_err(TlsError::from)
}

/// A rustls server configuration for TLS over TCP (`wss://`, QMux over TLS), as for QUIC: TLS
/// 1.3, `alpn` in the server's order of preference.
pub fn tcp_server_config(
	certificate: &ServerCertificate,
	alpn: &[&[u8]],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
	Ok(Arc::new(server_tls(certificate, alpn)?))
}

/// A rustls client configuration for TLS over TCP, verified as for QUIC.
pub fn tcp_client_config(verification: &Verification, alpn: &[&[u8]]) -> Result<Arc<rustls::ClientConfig>, TlsError> {
	Ok(Arc::new(client_tls(verification, alpn)?))
}

fn client_tls(verification: &Verification, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, TlsError> {
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
	Ok(tls)
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

	/// A client that accepts any certificate, in rustls's own suite order, offering `moq`.
	fn any_certificate_client() -> Arc<rustls::ClientConfig> {
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
		Arc::new(client)
	}

	/// A TLS handshake in memory: each side's records to the other until both are done.
	fn handshake(
		client: Arc<rustls::ClientConfig>,
		server: Arc<rustls::ServerConfig>,
	) -> (rustls::ClientConnection, rustls::ServerConnection) {
		let name = ServerName::try_from("localhost").unwrap();
		let mut client = rustls::ClientConnection::new(client, name).unwrap();
		let mut server = rustls::ServerConnection::new(server).unwrap();
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
		(client, server)
	}

	#[test]
	fn the_server_picks_aes_128_gcm_over_a_client_preferring_aes_256() {
		let cert = Certificate::self_signed(&["localhost"], MAX_SELF_SIGNED_VALIDITY).unwrap();
		let server = Arc::new(server_tls(&ServerCertificate::new(cert).unwrap(), &[b"moq"]).unwrap());
		let client = any_certificate_client();
		assert_eq!(
			client.crypto_provider().cipher_suites[0].suite(),
			rustls::CipherSuite::TLS13_AES_256_GCM_SHA384
		);
		let (client, server) = handshake(client, server);
		for side in [client.negotiated_cipher_suite(), server.negotiated_cipher_suite()] {
			assert_eq!(side.unwrap().suite(), rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
		}
	}

	#[test]
	fn a_replaced_certificate_is_presented_from_the_next_handshake_and_a_bad_one_is_refused() {
		let first = Certificate::self_signed(&["localhost"], MAX_SELF_SIGNED_VALIDITY).unwrap();
		let second = Certificate::self_signed(&["localhost"], MAX_SELF_SIGNED_VALIDITY).unwrap();
		let served = ServerCertificate::new(first.clone()).unwrap();
		let server = Arc::new(server_tls(&served, &[b"moq"]).unwrap());
		let presented = |client: &rustls::ClientConnection| fingerprint(&client.peer_certificates().unwrap()[0]);

		let (before, _) = handshake(any_certificate_client(), server.clone());
		assert_eq!(presented(&before), first.fingerprint());
		served.replace(second.clone()).unwrap();
		assert_eq!(served.fingerprint(), second.fingerprint());
		// The same rustls configuration, so every endpoint built with it.
		let (after, _) = handshake(any_certificate_client(), server.clone());
		assert_eq!(presented(&after), second.fingerprint());

		// The first chain with the second's key: refused, and the second stays in service.
		let mismatched = Certificate::new(first.chain().to_vec(), second.key.clone_key());
		assert!(served.replace(mismatched).is_err());
		assert!(ServerCertificate::new(Certificate::new(Vec::new(), second.key.clone_key())).is_err());
		let (again, _) = handshake(any_certificate_client(), server);
		assert_eq!(presented(&again), second.fingerprint());
		assert_eq!(served.fingerprint(), second.fingerprint());
	}

	#[test]
	fn not_after_reads_utc_and_generalized_times_and_nothing_from_broken_bytes() {
		let now = SystemTime::now();
		let cert = Certificate::self_signed(&["localhost"], Duration::from_secs(3 * 86_400)).unwrap();
		let (_, end) = validity_window(now, Duration::from_secs(3 * 86_400));
		let read = cert.not_after().unwrap();
		let seconds = |at: SystemTime| at.duration_since(UNIX_EPOCH).unwrap().as_secs();
		// Generated a moment after `now`: the same second, or the next.
		assert!(
			(seconds(read) as i64 - end.unix_timestamp()).abs() <= 1,
			"{read:?} against {end}"
		);

		// rcgen writes years from 2050 on as GeneralizedTime (RFC 5280 §4.1.2.5).
		let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
		let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
		params.not_after = time::PrimitiveDateTime::new(
			time::Date::from_calendar_date(2055, time::Month::June, 30).unwrap(),
			time::Time::from_hms(12, 34, 56).unwrap(),
		)
		.assume_utc();
		let der = params.self_signed(&key).unwrap().der().to_vec();
		assert_eq!(seconds(not_after(&der).unwrap()), 2_697_971_696);

		for len in 0..der.len() {
			assert_eq!(not_after(&der[..len]), None, "{len} bytes of {}", der.len());
		}
		assert_eq!(not_after(b"\x30\x85\x00\x00\x00\x00\x01"), None);
		assert_eq!(not_after(&[0xff; 64]), None);
	}

	#[test]
	fn certificates_round_trip_through_pem() {
		let cert = Certificate::self_signed(&["localhost"], MAX_SELF_SIGNED_VALIDITY).unwrap();
		let (chain, key) = cert.to_pem();
		assert!(chain.starts_with("-----BEGIN CERTIFICATE-----\n"), "{chain}");
		assert!(key.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{key}");
		assert!(chain.lines().all(|line| line.len() <= 64));
		let read = Certificate::from_pem(chain.as_bytes(), key.as_bytes()).unwrap();
		assert_eq!(read.fingerprint(), cert.fingerprint());
		assert_eq!(read.key.secret_der(), cert.key.secret_der());
		// Every length of the last base64 quantum: one, two and three bytes.
		for (der, text) in [(&b"M"[..], "TQ=="), (b"Ma", "TWE="), (b"Man", "TWFu")] {
			assert_eq!(pem("X", der), format!("-----BEGIN X-----\n{text}\n-----END X-----\n"));
		}
		assert_eq!(
			Certificate::from_pem(b"", key.as_bytes()).err().map(|(which, _)| which),
			Some(0)
		);
		assert_eq!(
			Certificate::from_pem(chain.as_bytes(), b"junk")
				.err()
				.map(|(which, _)| which),
			Some(1)
		);
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
