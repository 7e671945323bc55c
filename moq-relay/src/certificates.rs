//! The relay's certificate: loaded from files or generated, and kept in service.
//!
//! Certificate files are read again every `[tls] reload_interval` and at [`Reload::trigger`]
//! (the binary calls it on SIGHUP), on worker 0: a changed pair that loads is put in service for
//! the handshakes that follow ([`moq_quic::ServerCertificate`]) and at `/certificate.sha256`;
//! one that does not is logged, counted, and the certificate in service stays. Sessions up are
//! not touched. A generated certificate is never replaced: clients and cluster peers pin it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use kio::sync::{Consumer, Producer};
use kio::{Either, race};
use moq_quic::{Certificate, ServerCertificate};
use tracing::{info, warn};

use crate::config::Tls;
use crate::relay::Relay;

/// Asks a running relay, from any thread, to read its certificate files again now.
#[derive(Clone)]
pub struct Reload(Arc<Producer<u64>>);

impl Reload {
	/// A trigger, and what the relay watches (how many times it was pulled).
	pub fn new() -> (Self, Consumer<u64>) {
		let producer = Producer::new(0);
		let consumer = producer.consume();
		(Self(Arc::new(producer)), consumer)
	}

	/// Asks for a reload; several before the relay gets to it make one.
	pub fn trigger(&self) {
		if let Ok(mut pulls) = self.0.write() {
			*pulls += 1;
		}
	}
}

/// Loads or generates the certificate the configuration asks for; with the files it was read from,
/// to be read again.
pub(crate) fn load(tls: &Tls) -> anyhow::Result<(Certificate, Option<(CertificateFiles, Duration)>)> {
	match tls {
		Tls::Files {
			cert,
			key,
			reload_interval,
		} => {
			let mut files = CertificateFiles::new(cert.clone(), key.clone());
			let certificate = files
				.changed()
				.context("loading the TLS certificate")?
				.context("the TLS certificate files read as unchanged before their first read")?;
			Ok((certificate, Some((files, *reload_interval))))
		}
		Tls::Generate { names } => {
			let names: Vec<&str> = names.iter().map(String::as_str).collect();
			let certificate = Certificate::self_signed(&names, moq_quic::tls::MAX_SELF_SIGNED_VALIDITY)
				.context("generating a self-signed certificate")?;
			Ok((certificate, None))
		}
	}
}

/// The certificate files, and what they held when last read.
pub(crate) struct CertificateFiles {
	cert: std::path::PathBuf,
	key: std::path::PathBuf,
	/// Their bytes at the last read, loaded or refused: a renewal is what differs from them, so a
	/// refused pair is reported once, not at every check, and a file rewritten with the same
	/// bytes (or touched) changes nothing. Contents, not modification times: a copy that keeps
	/// the old time, or two writes within the file system's clock tick, still count.
	last: Option<(Vec<u8>, Vec<u8>)>,
	/// The last read failed (a file missing while it is replaced, say): reported once, until a
	/// read succeeds again.
	unreadable: bool,
}

impl CertificateFiles {
	/// The files, not read yet: the first [`changed`](Self::changed) loads them.
	fn new(cert: std::path::PathBuf, key: std::path::PathBuf) -> Self {
		Self {
			cert,
			key,
			last: None,
			unreadable: false,
		}
	}

	/// The certificate the files hold now if they changed since the last read, `None` if they did
	/// not (or could not be read, again); an error if they changed and do not load, or cannot be
	/// read for the first time since they last could.
	fn changed(&mut self) -> anyhow::Result<Option<Certificate>> {
		// Blocking reads, on a worker: two files of a few KiB, a minute apart at most.
		let read = |path: &std::path::Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
		let (cert, key) = match read(&self.cert).and_then(|cert| Ok((cert, read(&self.key)?))) {
			Ok(both) => both,
			Err(_) if self.unreadable => return Ok(None),
			Err(e) => {
				self.unreadable = true;
				return Err(e);
			}
		};
		self.unreadable = false;
		if self.last.as_ref().is_some_and(|(c, k)| *c == cert && *k == key) {
			return Ok(None);
		}
		let loaded = Certificate::from_pem(&cert, &key);
		self.last = Some((cert, key));
		let certificate = loaded.map_err(|(which, e)| {
			let path = [&self.cert, &self.key][which];
			anyhow::Error::new(e).context(path.display().to_string())
		})?;
		Ok(Some(certificate))
	}
}

/// Reads the certificate files again every `interval` (zero: never) and at each reload request,
/// putting a changed certificate in service (see the module docs).
pub(crate) async fn keep(
	certificate: ServerCertificate,
	relay: Arc<Relay>,
	mut files: CertificateFiles,
	interval: Duration,
	reload: Consumer<u64>,
) {
	let mut pulls = *reload.read();
	let mut asking = true;
	loop {
		let requested = async {
			match asking {
				true => {
					reload
						.wait(|n| if *n != pulls { Poll::Ready(*n) } else { Poll::Pending })
						.await
				}
				false => std::future::pending().await,
			}
		};
		let every = async {
			match interval.is_zero() {
				true => std::future::pending().await,
				false => kio::time::sleep(interval).await,
			}
		};
		match race(requested, every).await {
			Either::Left(Ok(n)) => pulls = n,
			// Nobody can ask any more: the timer alone, if there is one.
			Either::Left(Err(_)) if interval.is_zero() => return,
			Either::Left(Err(_)) => {
				asking = false;
				continue;
			}
			Either::Right(()) => {}
		}
		let refused = |e: anyhow::Error| {
			relay.stats.certificate_reload_failures.fetch_add(1, Ordering::Relaxed);
			warn!(
				error = format!("{e:#}"),
				"renewed TLS certificate refused; the one in service stays"
			);
		};
		match files.changed() {
			Ok(None) => {}
			Ok(Some(renewed)) => {
				let fingerprint = renewed.fingerprint_hex();
				warn_of_expiry(&renewed);
				match certificate.replace(renewed) {
					Ok(()) => {
						relay.stats.certificate_reloads.fetch_add(1, Ordering::Relaxed);
						info!(%fingerprint, "TLS certificate renewed");
					}
					Err(e) => refused(e.into()),
				}
			}
			Err(e) => refused(e),
		}
	}
}

/// Logs a warning when `certificate` has less than a week left, or none.
pub(crate) fn warn_of_expiry(certificate: &Certificate) {
	const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);
	let Some(not_after) = certificate.not_after() else {
		return;
	};
	match not_after.duration_since(SystemTime::now()) {
		Ok(left) if left >= WEEK => {}
		Ok(left) => warn!(hours = left.as_secs() / 3600, "the TLS certificate expires soon"),
		Err(_) => warn!("the TLS certificate has expired; browsers and verifying clients refuse it"),
	}
}

#[cfg(test)]
mod tests {
	#[test]
	fn certificate_files_report_a_renewal_once_and_a_broken_or_missing_pair_once() {
		use moq_quic::Certificate;
		let dir = std::env::temp_dir().join(format!("moq-relay-certificate-files-{}", std::process::id()));
		std::fs::create_dir_all(&dir).unwrap();
		let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
		let write = |certificate: &Certificate| {
			let (chain, private) = certificate.to_pem();
			std::fs::write(&cert, chain).unwrap();
			std::fs::write(&key, private).unwrap();
		};
		let generate = || Certificate::self_signed(&["localhost"], moq_quic::tls::MAX_SELF_SIGNED_VALIDITY).unwrap();
		let (first, second) = (generate(), generate());
		write(&first);
		let mut files = super::CertificateFiles::new(cert.clone(), key.clone());
		let fingerprint = |changed: anyhow::Result<Option<Certificate>>| changed.unwrap().map(|c| c.fingerprint());

		// Loaded at the first read; then read again, and rewritten with the same bytes: no change.
		assert_eq!(fingerprint(files.changed()), Some(first.fingerprint()));
		assert_eq!(fingerprint(files.changed()), None);
		write(&first);
		assert_eq!(fingerprint(files.changed()), None);

		// A key that is not PEM: refused, and reported once.
		std::fs::write(&key, "not a key").unwrap();
		assert!(files.changed().is_err());
		assert_eq!(
			fingerprint(files.changed()),
			None,
			"the same broken pair is reported once"
		);

		// A missing file, once, until the files read again.
		std::fs::remove_file(&key).unwrap();
		assert!(files.changed().is_err());
		assert_eq!(fingerprint(files.changed()), None);

		write(&second);
		assert_eq!(fingerprint(files.changed()), Some(second.fingerprint()));
		assert_eq!(fingerprint(files.changed()), None, "one renewal, reported once");
		// Back to bytes seen before is a change too.
		write(&first);
		assert_eq!(fingerprint(files.changed()), Some(first.fingerprint()));
		std::fs::remove_dir_all(&dir).unwrap();
	}
}
