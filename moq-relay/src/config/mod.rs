//! The relay's configuration: `moq-relay [config.toml] [flags]`.
//!
//! One shape: [`Options`] is both the command line and the TOML file. Every field is optional, so
//! an absent flag lets the file's value through and an absent key the default. The file is read
//! into `Options`, the flags are laid over it key by key (tables merge, a flag's value replaces
//! the file's), and the result is resolved once into [`Config`], where defaults are filled and
//! combinations checked. Adding an option touches its field (whose doc line is its `--help` and
//! names its file key and default), and its use in [`Config`]; the table of options in the
//! relay's README is checked against `--help` by a test.
//!
//! With no flags and no file, the relay serves QUIC on UDP `[::]:4443` and HTTP on TCP
//! `[::]:4443`, with a certificate generated for `localhost`, anonymous access everywhere, one
//! worker per CPU, and `info` logs.
//!
//! Anonymous access is granted by default only when nothing about it is configured and there is
//! no key file, so adding a key file closes the relay unless anonymous prefixes are listed. A
//! configuration that lets nobody in (no key file, no anonymous prefix) is refused.
//!
//! The log filter is taken from `--log-level`, else from `RUST_LOG`, else from the file: the
//! environment overrides the file so an operator can turn on debug logs without editing it.
//! Paths in the file are relative to the file's directory; paths in flags to the working
//! directory. Unknown keys in the file are errors, so a typo is never silently ignored.

use std::ffi::OsString;
use std::net::{Ipv6Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{CommandFactory as _, Parser};
use serde::{Deserialize, Serialize};

use crate::auth::{Anonymous, AuthConfig};
use crate::limits::{LimitOptions, Limits};

mod cluster;
mod units;
pub use cluster::{Cluster, ClusterOptions, DEFAULT_LINGER, PeerTls};
pub use units::{Size, Span, parse_duration, parse_size};

/// The QUIC (UDP) and HTTP (TCP) port when none is given.
pub const DEFAULT_PORT: u16 = 4443;
/// Worker threads at most: each worker's QUIC connection ids carry its index in one byte, so a
/// datagram that reaches another worker is handed to the right one (`moq_quic::Router`).
pub const MAX_WORKERS: usize = 256;
/// The cache budget when none is given.
pub const DEFAULT_CACHE_SIZE: u64 = 256 << 20;
/// How long shutdown waits for sessions to close when not told.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often certificate files are read again when not told. A renewal is done days before the
/// old certificate expires (ACME clients renew with a month left), so a minute is prompt; it also
/// bounds how long a renewal written in two steps (the chain, then the key), refused in between
/// because the two do not match, takes to be put in service. Reading two small files a minute
/// costs nothing.
pub const DEFAULT_TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(60);

/// Every option, as flags and as the file's keys.
#[derive(Clone, Debug, Default, PartialEq, Parser, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[command(
	name = "moq-relay",
	version,
	about = "A Media-over-QUIC relay for moq-lite clients (05, and 04/03 for older ones).",
	long_about = "A Media-over-QUIC relay for moq-lite clients: raw QUIC (ALPN moq-lite-05, -04 or -03, \
		moqt://host:port/path) and WebTransport for browsers (ALPN h3, https://host:port/path).\n\nWith no arguments it serves QUIC on UDP [::]:4443 and HTTP on TCP \
		[::]:4443, with a certificate generated for localhost and anonymous access everywhere.",
	after_long_help = "The optional CONFIG file is TOML with the same options; flags override it. Example:\n\n  \
		listen = \"[::]:4443\"\n  workers = 4\n  log_level = \"info\"\n  shutdown_timeout = \"5s\"\n  \
		cache_size = \"256MiB\"\n\n  [http]\n  listen = \"[::]:8080\"\n\n  [tls]\n  cert = \"cert.pem\"\n  \
		key = \"key.pem\"\n\n  [auth]\n  key = \"keys.json\"\n  anonymous = [\"anon\"]\n  \
		anonymous_subscribe = [\"public\"]\n\n  [limits]\n  handshakes_per_ip = 16\n\n\
		Paths in the file are relative to the file's directory."
)]
pub struct Options {
	/// A TOML config file with the same options as the flags; flags override its values.
	#[arg(value_name = "CONFIG")]
	#[serde(skip)]
	pub config: Option<PathBuf>,

	/// The UDP address QUIC is served on [file: listen] [default: `[::]:4443`].
	#[arg(long, value_name = "ADDR")]
	pub listen: Option<SocketAddr>,

	/// Worker threads, each with its own io_uring and UDP socket on the shared port
	/// (at most 256) [file: workers] [default: the available CPUs].
	#[arg(long, value_name = "N")]
	pub workers: Option<NonZeroUsize>,

	/// The log filter: a level (error, warn, info, debug, trace) or tracing directives such as
	/// "info,moq_relay=debug" [file: log_level] [default: RUST_LOG, else info].
	#[arg(long, value_name = "FILTER")]
	pub log_level: Option<String>,

	/// How long shutdown (SIGINT, SIGTERM) waits for sessions to close before exiting, e.g.
	/// "5s", "500ms", "1m"; a bare number is seconds [file: shutdown_timeout] [default: 5s].
	#[arg(long, value_name = "DURATION")]
	pub shutdown_timeout: Option<Span>,

	/// The byte budget of the media cache shared by all tracks, e.g. "256MiB", "1GiB", "500MB";
	/// a bare number is bytes [file: cache_size] [default: 256MiB].
	#[arg(long, value_name = "SIZE")]
	pub cache_size: Option<Size>,

	/// The most QUIC connections served at once, across workers; more are refused
	/// [file: max_connections] [default: no limit].
	#[arg(long, value_name = "N")]
	pub max_connections: Option<NonZeroUsize>,

	/// The HTTP endpoints.
	#[command(flatten)]
	#[serde(default)]
	pub http: HttpOptions,

	/// The certificate.
	#[command(flatten)]
	#[serde(default)]
	pub tls: TlsOptions,

	/// Tokens and anonymous access.
	#[command(flatten)]
	#[serde(default)]
	pub auth: AuthOptions,

	/// What peers may make the relay hold.
	#[command(flatten)]
	#[serde(default)]
	pub limits: LimitOptions,

	/// The relays this one links with.
	#[command(flatten)]
	#[serde(default)]
	pub cluster: ClusterOptions,
}

/// The file's `[http]` table and its flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpOptions {
	/// The TCP address of the HTTP endpoints: /health, /certificate.sha256 and /metrics
	/// [file: `[http] listen`] [default: the --listen address, on TCP].
	#[arg(
		id = "http_listen",
		long = "http-listen",
		value_name = "ADDR",
		conflicts_with = "http_enabled"
	)]
	pub listen: Option<SocketAddr>,

	/// Serve no HTTP endpoints [file: `[http] enabled = false`].
	#[arg(id = "http_enabled", long = "no-http", num_args = 0, default_missing_value = "false")]
	pub enabled: Option<bool>,
}

/// The file's `[tls]` table and its flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsOptions {
	/// The certificate chain, PEM, leaf first [file: `[tls] cert`]. Without it a self-signed
	/// certificate is generated at start for the --tls-name names; its SHA-256 is printed and
	/// served at /certificate.sha256.
	#[arg(id = "tls_cert", long = "tls-cert", value_name = "FILE")]
	pub cert: Option<PathBuf>,

	/// The private key of --tls-cert, PEM [file: `[tls] key`].
	#[arg(id = "tls_key", long = "tls-key", value_name = "FILE")]
	pub key: Option<PathBuf>,

	/// How often --tls-cert and --tls-key are read again to put a renewed certificate in service
	/// without a restart, e.g. "1m"; 0 reads them only on SIGHUP (which always does)
	/// [file: `[tls] reload_interval`] [default: 1m]. Only with --tls-cert.
	#[arg(id = "tls_reload_interval", long = "tls-reload-interval", value_name = "DURATION")]
	pub reload_interval: Option<Span>,

	/// A DNS name or IP address of the generated certificate; repeat for more
	/// [file: `[tls] names`] [default: localhost]. Only without --tls-cert.
	#[arg(id = "tls_names", long = "tls-name", value_name = "NAME")]
	pub names: Option<Vec<String>>,
}

/// The file's `[auth]` table and its flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthOptions {
	/// A JSON Web Key Set file with the keys that verify clients' tokens (the `jwt` query
	/// parameter of the connection URL) [file: `[auth] key`]. Supports HS256/384/512, ES256 and
	/// EdDSA; see the README for the claims. Without it no token is accepted.
	#[arg(id = "auth_key", long = "auth-key", value_name = "FILE")]
	pub key: Option<PathBuf>,

	/// A path prefix under which anyone may publish and subscribe without a token; "" is
	/// everything; repeat for more [file: `[auth] anonymous`] [default: "" when there is no
	/// --auth-key, else none].
	#[arg(long, value_name = "PREFIX", conflicts_with = "no_anonymous")]
	pub anonymous: Option<Vec<String>>,

	/// A path prefix under which anyone may subscribe (watch), but not publish, without a token;
	/// repeat for more [file: `[auth] anonymous_subscribe`] [default: none beyond --anonymous].
	#[arg(long, value_name = "PREFIX", conflicts_with = "no_anonymous")]
	pub anonymous_subscribe: Option<Vec<String>>,

	/// No anonymous access: every connection needs a token (and so --auth-key)
	/// [file: `[auth] anonymous = []` and `anonymous_subscribe = []`].
	#[arg(long)]
	#[serde(skip)]
	pub no_anonymous: bool,
}

/// Where the TLS certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tls {
	/// PEM files, read again every `reload_interval` (never when zero) and on SIGHUP.
	Files {
		/// The chain, leaf first.
		cert: PathBuf,
		/// The private key.
		key: PathBuf,
		/// How often the files are read again.
		reload_interval: Duration,
	},
	/// Generated at start, self-signed, for these names.
	Generate {
		/// DNS names or IP addresses.
		names: Vec<String>,
	},
}

/// The resolved configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
	/// The file it was read from, if any.
	pub file: Option<PathBuf>,
	/// The UDP address of QUIC.
	pub listen: SocketAddr,
	/// The TCP address of the HTTP endpoints; `None` serves none.
	pub http: Option<SocketAddr>,
	/// Worker threads.
	pub workers: usize,
	/// The certificate.
	pub tls: Tls,
	/// Keys and anonymous grants.
	pub auth: AuthConfig,
	/// The `tracing` filter.
	pub log_level: String,
	/// How long shutdown waits for sessions.
	pub shutdown_timeout: Duration,
	/// The cache's byte budget.
	pub cache_size: u64,
	/// The most connections at once; `None` for no limit.
	pub max_connections: Option<usize>,
	/// What peers may make the relay hold.
	pub limits: Limits,
	/// The relays this one links with.
	pub cluster: Cluster,
}

impl Config {
	/// A relay on `127.0.0.1`, QUIC and HTTP each on a port the kernel picks, one worker, a
	/// certificate generated for `localhost`, anonymous access everywhere, the default limits and
	/// a 64 MiB cache: what a test or an embedding program starts from, changing what it needs.
	pub fn loopback() -> Self {
		let any = SocketAddr::from(([127, 0, 0, 1], 0));
		Self {
			file: None,
			listen: any,
			http: Some(any),
			workers: 1,
			tls: Tls::Generate {
				names: vec!["localhost".into()],
			},
			auth: AuthConfig {
				key_file: None,
				anonymous: Anonymous::everything(),
			},
			log_level: "warn".into(),
			shutdown_timeout: Duration::from_secs(2),
			cache_size: 64 << 20,
			max_connections: None,
			limits: Limits::default(),
			cluster: Cluster::default(),
		}
	}
}

/// The largest origin id: ids travel as JavaScript numbers in the browser library.
pub const MAX_ORIGIN_ID: u64 = (1 << 53) - 1;

impl Config {
	/// From the process's arguments and `RUST_LOG`. Like any command line tool it prints help or
	/// version and exits for `--help`/`--version`, and prints usage and exits with code 2 for a
	/// flag it cannot parse.
	pub fn load() -> anyhow::Result<Self> {
		let rust_log = std::env::var("RUST_LOG").ok();
		Self::from_options(Options::parse(), rust_log.as_deref())
	}

	/// From `args` (the first is the program's name) and the value of `RUST_LOG`. For `--help`
	/// the error is the [`clap::Error`] (its text is the help; `exit()` prints it).
	pub fn load_from<I, T>(args: I, rust_log: Option<&str>) -> anyhow::Result<Self>
	where
		I: IntoIterator<Item = T>,
		T: Into<OsString> + Clone,
	{
		Self::from_options(Options::try_parse_from(args)?, rust_log)
	}

	/// The command line's definition, for help and completions.
	pub fn command() -> clap::Command {
		Options::command()
	}

	/// Reads `flags.config`, if any, lays the flags over it, and resolves the result.
	pub fn from_options(flags: Options, rust_log: Option<&str>) -> anyhow::Result<Self> {
		let prefix = match &flags.config {
			Some(path) => format!("config file {}: ", path.display()),
			None => String::new(),
		};
		let file = match &flags.config {
			Some(path) => read_file(path)?,
			None => Options::default(),
		};
		if file.http.enabled == Some(false) && file.http.listen.is_some() {
			bail!("{prefix}[http] has both enabled = false and a listen address");
		}
		let log_flag = flags.log_level.is_some();
		let mut options = flags.over(file).map_err(|e| anyhow::anyhow!("{prefix}{e}"))?;
		// The environment beats the file, not the flag.
		if let Some(env) = rust_log.filter(|env| !env.trim().is_empty())
			&& !log_flag
		{
			options.log_level = Some(env.to_owned());
		}
		options.resolve().map_err(|e| anyhow::anyhow!("{prefix}{e:#}"))
	}

	/// Installs the global `tracing` subscriber: structured lines on stderr, filtered by
	/// `log_level`, in colour only on a terminal.
	pub fn init_logging(&self) -> anyhow::Result<()> {
		use std::io::IsTerminal as _;
		let filter = tracing_subscriber::EnvFilter::try_new(&self.log_level)
			.with_context(|| format!("invalid log filter {:?}", self.log_level))?;
		tracing_subscriber::fmt()
			.with_env_filter(filter)
			.with_writer(std::io::stderr)
			.with_ansi(std::io::stderr().is_terminal())
			.try_init()
			.map_err(|e| anyhow::anyhow!("installing the logger: {e}"))
	}
}

/// The options of the file at `path`, its relative paths made relative to its directory.
fn read_file(path: &Path) -> anyhow::Result<Options> {
	let text = std::fs::read_to_string(path).with_context(|| format!("reading config file {}", path.display()))?;
	let mut file: Options = toml::from_str(&text).with_context(|| format!("config file {}", path.display()))?;
	let dir = path.parent().unwrap_or_else(|| Path::new(""));
	for path in [
		&mut file.tls.cert,
		&mut file.tls.key,
		&mut file.auth.key,
		&mut file.cluster.token,
		&mut file.cluster.roots,
	]
	.into_iter()
	.flatten()
	{
		if path.is_relative() {
			*path = dir.join(&*path);
		}
	}
	Ok(file)
}

/// `over` laid on `base`: tables merge key by key, any other value replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
	for (key, value) in over {
		match (base.get_mut(&key), value) {
			(Some(toml::Value::Table(base)), toml::Value::Table(over)) => merge(base, over),
			(_, value) => {
				base.insert(key, value);
			}
		}
	}
}

impl Options {
	/// These options (flags) over `file`'s: a value given here wins, key by key.
	fn over(self, mut file: Self) -> anyhow::Result<Self> {
		// A flag that gives an HTTP address turns HTTP on, whatever the file said.
		if self.http.listen.is_some() {
			file.http.enabled = None;
		}
		let (config, no_anonymous) = (self.config.clone(), self.auth.no_anonymous);
		let mut base = toml::Table::try_from(&file).context("laying the flags over the file")?;
		merge(
			&mut base,
			toml::Table::try_from(&self).context("laying the flags over the file")?,
		);
		let mut merged: Self = base.try_into().context("laying the flags over the file")?;
		merged.config = config;
		merged.auth.no_anonymous = no_anonymous;
		Ok(merged)
	}

	/// Defaults filled in, combinations checked.
	fn resolve(self) -> anyhow::Result<Config> {
		let listen = self
			.listen
			.unwrap_or_else(|| SocketAddr::from((Ipv6Addr::UNSPECIFIED, DEFAULT_PORT)));
		let http = match self.http.enabled {
			Some(false) => None,
			_ => Some(self.http.listen.unwrap_or(listen)),
		};
		// A connection id names its worker in one byte (moq_quic::Router).
		let workers = match self.workers {
			Some(n) if n.get() > MAX_WORKERS => bail!("workers: {n} is more than {MAX_WORKERS}"),
			Some(n) => n.get(),
			None => std::thread::available_parallelism()
				.map_or(1, NonZeroUsize::get)
				.min(MAX_WORKERS),
		};

		let tls = match (self.tls.cert, self.tls.key) {
			(Some(cert), Some(key)) => {
				if self.tls.names.is_some() {
					bail!("TLS names are only for a generated certificate, and a certificate file is given");
				}
				let reload_interval = self.tls.reload_interval.map_or(DEFAULT_TLS_RELOAD_INTERVAL, |s| s.0);
				Tls::Files {
					cert,
					key,
					reload_interval,
				}
			}
			(None, None) if self.tls.reload_interval.is_some() => {
				bail!("a TLS reload interval is only for certificate files, and none is given (--tls-cert)")
			}
			(None, None) => {
				let names = self.tls.names.unwrap_or_else(|| vec!["localhost".to_owned()]);
				if names.is_empty() || names.iter().any(|name| name.trim().is_empty()) {
					bail!("a generated certificate needs at least one name, and no empty ones");
				}
				Tls::Generate { names }
			}
			(Some(_), None) => bail!("a TLS certificate is given without its key (--tls-key, [tls] key)"),
			(None, Some(_)) => bail!("a TLS key is given without its certificate (--tls-cert, [tls] cert)"),
		};

		let key_file = self.auth.key;
		let (publish, subscribe) = match self.auth.no_anonymous {
			true => (Some(Vec::new()), Some(Vec::new())),
			false => (self.auth.anonymous, self.auth.anonymous_subscribe),
		};
		let anonymous = match (publish, subscribe) {
			(None, None) if key_file.is_none() => Anonymous::everything(),
			(both, subscribe) => {
				let both = both.unwrap_or_default();
				Anonymous {
					subscribe: both.iter().cloned().chain(subscribe.unwrap_or_default()).collect(),
					publish: both,
				}
			}
		};
		if key_file.is_none() && anonymous.is_none() {
			bail!(
				"nobody could connect: anonymous access is off and there is no key file for tokens \
				 (give --auth-key, or --anonymous PREFIX)"
			);
		}

		let log_level = self.log_level.unwrap_or_else(|| "info".to_owned());
		tracing_subscriber::EnvFilter::try_new(&log_level)
			.with_context(|| format!("invalid log filter {log_level:?}"))?;

		let cluster = self.cluster.resolve()?;

		Ok(Config {
			file: self.config,
			listen,
			http,
			workers,
			tls,
			auth: AuthConfig { key_file, anonymous },
			log_level,
			shutdown_timeout: self.shutdown_timeout.map_or(DEFAULT_SHUTDOWN_TIMEOUT, |s| s.0),
			cache_size: self.cache_size.map_or(DEFAULT_CACHE_SIZE, |s| s.0),
			max_connections: self.max_connections.map(NonZeroUsize::get),
			limits: self.limits.resolve().map_err(|e| anyhow::anyhow!("limits: {e}"))?,
			cluster,
		})
	}
}

#[cfg(test)]
mod tests {
	use std::sync::atomic::{AtomicUsize, Ordering};

	use super::*;

	fn load(args: &[&str]) -> anyhow::Result<Config> {
		Config::load_from(std::iter::once("moq-relay").chain(args.iter().copied()), None)
	}

	static FILES: AtomicUsize = AtomicUsize::new(0);

	/// A config file in a fresh directory.
	fn config_file(text: &str) -> PathBuf {
		let n = FILES.fetch_add(1, Ordering::Relaxed);
		let dir = std::env::temp_dir().join(format!("moq-relay-config-{}-{n}", std::process::id()));
		std::fs::create_dir_all(&dir).unwrap();
		let path = dir.join("relay.toml");
		std::fs::write(&path, text).unwrap();
		path
	}

	fn remove(path: &Path) {
		std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
	}

	#[test]
	fn defaults() {
		let config = load(&[]).unwrap();
		let any: SocketAddr = "[::]:4443".parse().unwrap();
		assert_eq!(config.file, None);
		assert_eq!(config.listen, any);
		assert_eq!(config.http, Some(any));
		assert!(config.workers >= 1);
		assert_eq!(
			config.tls,
			Tls::Generate {
				names: vec!["localhost".into()]
			}
		);
		assert_eq!(
			config.auth,
			AuthConfig {
				key_file: None,
				anonymous: Anonymous::everything()
			}
		);
		assert_eq!(config.log_level, "info");
		assert_eq!(config.shutdown_timeout, Duration::from_secs(5));
		assert_eq!(config.cache_size, 256 << 20);
		assert_eq!(config.max_connections, None);
		// The HTTP address follows the QUIC one unless given.
		let config = load(&["--listen", "127.0.0.1:9000"]).unwrap();
		assert_eq!(config.http, Some("127.0.0.1:9000".parse().unwrap()));
		// Listing anonymous prefixes replaces "everything".
		let config = load(&["--anonymous", "anon", "--anonymous-subscribe", "public"]).unwrap();
		assert_eq!(
			config.auth.anonymous,
			Anonymous {
				publish: vec!["anon".into()],
				subscribe: vec!["anon".into(), "public".into()]
			}
		);
	}

	#[test]
	fn a_file_is_read() {
		let path = config_file(
			r#"
			listen = "127.0.0.1:5000"
			workers = 3
			log_level = "debug"
			shutdown_timeout = 2.5
			cache_size = "1GiB"
			max_connections = 100

			[http]
			listen = "127.0.0.1:8080"

			[tls]
			cert = "cert.pem"
			key = "/etc/relay/key.pem"
			reload_interval = "90s"

			[auth]
			key = "keys.json"
			anonymous_subscribe = ["public"]
			"#,
		);
		let config = load(&[path.to_str().unwrap()]).unwrap();
		let dir = path.parent().unwrap();
		assert_eq!(config.file.as_deref(), Some(path.as_path()));
		assert_eq!(config.listen, "127.0.0.1:5000".parse().unwrap());
		assert_eq!(config.http, Some("127.0.0.1:8080".parse().unwrap()));
		assert_eq!(config.workers, 3);
		assert_eq!(config.log_level, "debug");
		assert_eq!(config.shutdown_timeout, Duration::from_millis(2500));
		assert_eq!(config.cache_size, 1 << 30);
		assert_eq!(config.max_connections, Some(100));
		assert_eq!(
			config.tls,
			Tls::Files {
				cert: dir.join("cert.pem"),
				key: "/etc/relay/key.pem".into(),
				reload_interval: Duration::from_secs(90),
			}
		);
		assert_eq!(config.auth.key_file, Some(dir.join("keys.json")));
		assert_eq!(
			config.auth.anonymous,
			Anonymous {
				publish: vec![],
				subscribe: vec!["public".into()]
			},
			"with a key file, only the listed anonymous access"
		);
		remove(&path);
	}

	#[test]
	fn flags_override_the_file() {
		let path = config_file(
			r#"
			listen = "127.0.0.1:5000"
			workers = 3
			log_level = "debug"
			[http]
			enabled = false
			[tls]
			names = ["a.example"]
			[auth]
			key = "keys.json"
			anonymous = ["anon"]
			"#,
		);
		let file = path.to_str().unwrap();
		let config = load(&[
			file,
			"--listen",
			"[::1]:6000",
			"--http-listen",
			"[::1]:6001",
			"--workers",
			"1",
			"--log-level",
			"warn,moq_relay=trace",
			"--tls-name",
			"b.example",
			"--tls-name",
			"127.0.0.1",
			"--auth-key",
			"/other/keys.json",
			"--anonymous-subscribe",
			"",
			"--shutdown-timeout",
			"250ms",
			"--cache-size",
			"500MB",
		])
		.unwrap();
		assert_eq!(config.listen, "[::1]:6000".parse().unwrap());
		assert_eq!(config.http, Some("[::1]:6001".parse().unwrap()));
		assert_eq!(config.workers, 1);
		assert_eq!(config.log_level, "warn,moq_relay=trace");
		assert_eq!(
			config.tls,
			Tls::Generate {
				names: vec!["b.example".into(), "127.0.0.1".into()]
			}
		);
		assert_eq!(config.auth.key_file, Some("/other/keys.json".into()));
		assert_eq!(
			config.auth.anonymous,
			Anonymous {
				publish: vec!["anon".into()],
				subscribe: vec!["anon".into(), "".into()]
			},
			"--anonymous prefixes are also watched"
		);
		assert_eq!(config.shutdown_timeout, Duration::from_millis(250));
		assert_eq!(config.cache_size, 500_000_000);

		// The file's disabled HTTP and anonymous prefixes stay unless a flag says otherwise.
		let config = load(&[file]).unwrap();
		assert_eq!(config.http, None);
		assert_eq!(config.auth.anonymous.publish, vec!["anon".to_owned()]);
		let config = load(&[file, "--no-anonymous"]).unwrap();
		assert!(config.auth.anonymous.is_none());
		remove(&path);
	}

	#[test]
	fn limit_flags_win_over_the_files_limits_key_by_key() {
		let path = config_file("[limits]\nhandshakes = 10\nstream_window = \"64KiB\"");
		let config = load(&[path.to_str().unwrap(), "--max-handshakes", "20"]).unwrap();
		assert_eq!(config.limits.quic.handshakes, 20, "the flag");
		assert_eq!(config.limits.stream_window, 64 << 10, "the file");
		assert_eq!(config.limits.streams, Limits::default().streams, "the default");
		remove(&path);
	}

	#[test]
	fn the_log_filter_comes_from_the_flag_then_rust_log_then_the_file() {
		let path = config_file("log_level = \"debug\"");
		let file = path.to_str().unwrap();
		let with = |args: &[&str], rust_log| {
			let args = std::iter::once("moq-relay").chain(args.iter().copied());
			Config::load_from(args, rust_log).unwrap().log_level
		};
		assert_eq!(with(&[file, "--log-level", "error"], Some("trace")), "error");
		assert_eq!(with(&[file], Some("trace")), "trace");
		assert_eq!(with(&[file], Some(" ")), "debug");
		assert_eq!(with(&[], None), "info");
		let err = load(&["--log-level", "info,=!!"]).unwrap_err();
		assert!(err.to_string().contains("invalid log filter"), "{err:#}");
		remove(&path);
	}

	#[test]
	fn bad_files_are_reported_with_their_path_and_line() {
		for (text, expect) in [
			("listen = 5", "listen"),
			("lisen = \"[::]:1\"", "unknown field `lisen`"),
			("[tls]\nnames = \"a\"", "line 2"),
			("workers = 0", "workers"),
			("workers = 257", "workers"),
			("[http\n", "line 1"),
			("shutdown_timeout = \"soon\"", "is not a duration"),
			("cache_size = \"lots\"", "is not a size"),
			(
				"[http]\nenabled = false\nlisten = \"[::]:1\"",
				"both enabled = false and a listen",
			),
		] {
			let path = config_file(text);
			let err = format!("{:#}", load(&[path.to_str().unwrap()]).unwrap_err());
			assert!(err.contains(&path.display().to_string()), "{text:?}: {err}");
			assert!(err.contains(expect), "{text:?}: {err}");
			remove(&path);
		}
		let err = format!("{:#}", load(&["/nonexistent/relay.toml"]).unwrap_err());
		assert!(err.contains("reading config file /nonexistent/relay.toml"), "{err}");
	}

	#[test]
	fn invalid_combinations_are_refused() {
		for (args, expect) in [
			(&["--no-anonymous"][..], "nobody could connect"),
			(&["--tls-cert", "c.pem"], "without its key"),
			(&["--tls-key", "k.pem"], "without its certificate"),
			(
				&["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-name", "x"],
				"only for a generated",
			),
			(&["--tls-name", ""], "at least one name"),
			(&["--tls-reload-interval", "1m"], "only for certificate files"),
			(&["--no-http", "--http-listen", "[::]:1"], "cannot be used with"),
			(&["--no-anonymous", "--anonymous", "x"], "cannot be used with"),
			(&["--workers", "0"], "--workers"),
			(&["--listen", "nowhere"], "--listen"),
			(&["--cache-size=-1"], "is not a size"),
			(&["--shutdown-timeout", "5 fortnights"], "is not a duration"),
		] {
			let err = format!("{:#}", load(args).unwrap_err());
			assert!(err.contains(expect), "{args:?}: {err}");
		}
		// A key file alone turns anonymous access off, and that is a valid configuration.
		let config = load(&["--auth-key", "keys.json"]).unwrap();
		assert!(config.auth.anonymous.is_none());
		let config = load(&["--tls-cert", "c.pem", "--tls-key", "k.pem", "--no-http"]).unwrap();
		assert_eq!(config.http, None);
		assert_eq!(
			config.tls,
			Tls::Files {
				cert: "c.pem".into(),
				key: "k.pem".into(),
				reload_interval: DEFAULT_TLS_RELOAD_INTERVAL,
			}
		);
		let config = load(&[
			"--tls-cert",
			"c.pem",
			"--tls-key",
			"k.pem",
			"--tls-reload-interval",
			"0",
		])
		.unwrap();
		assert!(matches!(config.tls, Tls::Files { reload_interval, .. } if reload_interval.is_zero()));
	}

	#[test]
	fn cluster_options_resolve() {
		let fp = "ab".repeat(32);
		let config = load(&[
			"--cluster-connect",
			"moqt://c:4443/",
			"--cluster-connect",
			"moqt://a:4443/",
			"--cluster-connect",
			"moqt://b:4443/",
			"--cluster-node",
			"moqt://b:4443/",
			"--cluster-fingerprint",
			&fp,
			"--cluster-id",
			"42",
			"--cluster-linger",
			"2s",
		])
		.unwrap();
		// One list for every relay: b skips itself, and of a and b only a (sorting first) dials.
		assert_eq!(config.cluster.connect, vec!["moqt://c:4443/".to_owned()]);
		// A list that does not name this relay (a seed) is dialled whole, whatever sorts first.
		let seeded = load(&[
			"--cluster-connect",
			"moqt://a:4443/",
			"--cluster-node",
			"moqt://b:4443/",
			"--cluster-insecure",
		])
		.unwrap();
		assert_eq!(seeded.cluster.connect, vec!["moqt://a:4443/".to_owned()]);
		assert_eq!(config.cluster.tls, PeerTls::Fingerprints(vec![[0xab; 32]]));
		assert_eq!(config.cluster.id, Some(42));
		assert_eq!(config.cluster.linger, Duration::from_secs(2));
		// Without peers, nothing to check; the linger has its default.
		assert_eq!(load(&[]).unwrap().cluster, Cluster::default());
		for (args, expect) in [
			(
				&["--cluster-connect", "moqt://a/"][..],
				"no way to check their certificates",
			),
			(
				&["--cluster-connect", "http://a/", "--cluster-insecure"],
				"not a moqt://",
			),
			(&["--cluster-insecure", "--cluster-fingerprint", &fp], "give one of"),
			(&["--cluster-id", "0"], "between 1 and 2^53-1"),
			(&["--cluster-id", "9007199254740992"], "between 1 and 2^53-1"),
			(&["--cluster-fingerprint", "abc"], "not 64 hex digits"),
			(
				&["--cluster-token", "/nonexistent/cluster.jwt"],
				"reading the cluster token",
			),
		] {
			let err = format!("{:#}", load(args).unwrap_err());
			assert!(err.contains(expect), "{args:?}: {err}");
		}
	}

	#[test]
	fn sizes_and_durations_parse() {
		assert_eq!(parse_size("1048576"), Ok(1 << 20));
		assert_eq!(parse_size("1.5KiB"), Ok(1536));
		assert_eq!(parse_size("2 GB"), Ok(2_000_000_000));
		assert!(parse_size("0.5B").is_err());
		assert!(parse_size("1TiB").is_err());
		assert!(parse_size("99999999999999999999GiB").is_err());
		assert!(parse_size("").is_err());
		assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
		assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
		assert_eq!(parse_duration("20ms"), Ok(Duration::from_millis(20)));
		assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
		assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
		assert!(parse_duration("1d").is_err());
		assert!(parse_duration("s").is_err());
		assert!(parse_duration("1e400").is_err());
	}

	/// The text of the `[tag: ...]` annotation in `help`, brackets inside backticks included.
	fn annotation(help: &str, tag: &str) -> Option<String> {
		let start = help.find(&format!("[{tag}: "))? + tag.len() + 3;
		let mut quoted = false;
		for (i, c) in help[start..].char_indices() {
			match c {
				'`' => quoted = !quoted,
				']' if !quoted => return Some(help[start..start + i].to_owned()),
				_ => {}
			}
		}
		None
	}

	/// The configuration table the relay's README shows, made from `--help`.
	fn options_table() -> String {
		let mut table = String::from("| Flag | File | Default |\n|---|---|---|\n");
		for arg in Config::command().get_arguments() {
			let Some(long) = arg.get_long() else {
				continue;
			};
			if long == "help" || long == "version" {
				continue;
			}
			let help = arg.get_long_help().or_else(|| arg.get_help()).unwrap().to_string();
			let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
			let takes_value = arg.get_action().takes_values() && arg.get_num_args().is_none_or(|n| n.min_values() > 0);
			let value = arg
				.get_value_names()
				.and_then(|names| names.first())
				.filter(|_| takes_value)
				.map_or(String::new(), |name| format!(" {name}"));
			let repeated = match arg.get_action() {
				clap::ArgAction::Append => " (repeated)",
				_ => "",
			};
			let file = annotation(&help, "file").map_or(String::new(), |file| match file.starts_with('`') {
				true => file,
				false => format!("`{file}`"),
			});
			let default = annotation(&help, "default").unwrap_or_default();
			table.push_str(&format!("| `--{long}{value}`{repeated} | {file} | {default} |\n"));
		}
		table
	}

	#[test]
	fn the_readmes_table_of_options_is_the_one_help_makes() {
		// One table, made from --help: copies kept by hand drift.
		let readme = include_str!("../../README.md");
		let expected = options_table();
		assert!(
			readme.contains(&expected),
			"moq-relay/README.md's configuration table differs from --help; it should read:\n\n{expected}"
		);
	}

	#[test]
	fn help_explains_every_option() {
		let mut command = Config::command();
		let help = command.render_long_help().to_string();
		for arg in command.get_arguments() {
			let id = arg.get_id().as_str();
			if id == "help" || id == "version" {
				continue;
			}
			let doc = arg.get_long_help().or_else(|| arg.get_help()).map(ToString::to_string);
			assert!(doc.is_some_and(|doc| doc.len() > 20), "{id} has no help");
			let name = match arg.get_long() {
				Some(long) => format!("--{long}"),
				None => format!("[{}]", id.to_uppercase()),
			};
			assert!(help.contains(&name), "{name} missing from --help:\n{help}");
		}
		for key in [
			"[file: listen]",
			"[http] listen",
			"[tls] cert",
			"[auth] key",
			"RUST_LOG",
			"4443",
		] {
			assert!(help.contains(key), "{key} missing from --help");
		}
		// --help through load_from is an error carrying clap's help text.
		let err = load(&["--help"]).unwrap_err();
		let clap = err.downcast_ref::<clap::Error>().expect("a clap error");
		assert_eq!(clap.kind(), clap::error::ErrorKind::DisplayHelp);
	}
}
