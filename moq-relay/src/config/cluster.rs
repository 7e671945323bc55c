//! The `[cluster]` table and its flags, resolved: the peers this relay dials, its node URL, its
//! token and id, the linger, and how peers' certificates are checked.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use super::{MAX_ORIGIN_ID, Span};

/// The file's `[cluster]` table and its flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterOptions {
	/// A peer relay to link with, `moqt://host:port/` (raw QUIC) or `https://host:port/`
	/// (WebTransport); repeat for more. Dialled forever, with jittered backoff from 1 s to 10 s
	/// [file: `[cluster] connect`].
	#[arg(id = "cluster_connect", long = "cluster-connect", value_name = "URL")]
	pub connect: Option<Vec<String>>,

	/// This relay's own URL as its peers dial it, announced to them: a relay that hears of a
	/// member of the cluster it has no link with dials it (if it has no URL of its own or its own
	/// sorts first), so a relay given one peer (a seed) joins the whole mesh. A --cluster-connect
	/// list that names this relay too (the same list for every relay) is dialled only toward the
	/// URLs that sort after this one's, so each pair has one link [file: `[cluster] node`].
	#[arg(id = "cluster_node", long = "cluster-node", value_name = "URL")]
	pub node: Option<String>,

	/// A file holding the JWT this relay presents to its peers (a token with `"cluster": true`,
	/// signed with a key the peers accept); peers grant it the whole origin, as a peer
	/// [file: `[cluster] token`]. Without it, a peer takes this relay for a client.
	#[arg(id = "cluster_token", long = "cluster-token", value_name = "FILE")]
	pub token: Option<PathBuf>,

	/// This relay's origin id in hop chains, 1 to 2^53-1 [file: `[cluster] id`] [default: random
	/// at each start].
	#[arg(id = "cluster_id", long = "cluster-id", value_name = "N")]
	pub id: Option<u64>,

	/// How long a broadcast stays announced after its publisher (a client or a peer relay) is
	/// lost abruptly, so a publisher that reconnects within it takes the path over without every
	/// viewer hearing it go; a broadcast its publisher ends is withdrawn at once
	/// [file: `[cluster] linger`] [default: 5s].
	#[arg(id = "cluster_linger", long = "cluster-linger", value_name = "DURATION")]
	pub linger: Option<Span>,

	/// The SHA-256 (hex) of a peer's certificate to accept, as served at /certificate.sha256;
	/// repeat for more [file: `[cluster] fingerprints`].
	#[arg(id = "cluster_fingerprint", long = "cluster-fingerprint", value_name = "HEX")]
	pub fingerprints: Option<Vec<String>>,

	/// A PEM file of root certificates that peers' certificates must chain to, for their host
	/// names [file: `[cluster] roots`].
	#[arg(id = "cluster_roots", long = "cluster-roots", value_name = "FILE")]
	pub roots: Option<PathBuf>,

	/// Accept any certificate from peers: for development on one host only
	/// [file: `[cluster] insecure = true`].
	#[arg(
		id = "cluster_insecure",
		long = "cluster-insecure",
		num_args = 0,
		default_missing_value = "true"
	)]
	pub insecure: Option<bool>,
}

/// How a cluster peer's certificate is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerTls {
	/// Its SHA-256 is one of these.
	Fingerprints(Vec<[u8; 32]>),
	/// It chains to a root in this PEM file.
	Roots(PathBuf),
	/// Not at all (development).
	Insecure,
}

/// The resolved `[cluster]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
	/// The peers this relay dials (its own URL, and the peers that dial it, left out).
	pub connect: Vec<String>,
	/// This relay's URL as peers dial it.
	pub node: Option<String>,
	/// The token presented to peers.
	pub token: Option<String>,
	/// The origin id; `None` for a random one.
	pub id: Option<u64>,
	/// How long an abruptly lost publisher's broadcasts stay announced.
	pub linger: Duration,
	/// How peers' certificates are checked.
	pub tls: PeerTls,
}

impl Default for Cluster {
	/// No peers; the default linger.
	fn default() -> Self {
		Self {
			connect: Vec::new(),
			node: None,
			token: None,
			id: None,
			linger: DEFAULT_LINGER,
			tls: PeerTls::Fingerprints(Vec::new()),
		}
	}
}

/// How long an abruptly lost publisher's broadcasts stay announced when not told.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(5);

impl ClusterOptions {
	pub(super) fn resolve(self) -> anyhow::Result<Cluster> {
		// Every URL in one spelling, so that two spellings of one relay compare equal.
		// Peers are checked by the cluster's own pins or roots: `http://` (a fingerprint fetched
		// over plain HTTP) is for a local relay, not a peer.
		let canonical = |url: &str, what: &str| {
			let parsed = moq_client::Url::parse(url).with_context(|| format!("{what} {url}"))?;
			if parsed.scheme == moq_client::Scheme::Http {
				anyhow::bail!("{what} {url}: not a moqt:// or https:// URL");
			}
			Ok(parsed.canonical())
		};
		let mut connect = (self.connect.unwrap_or_default().iter())
			.map(|url| canonical(url, "cluster peer"))
			.collect::<anyhow::Result<Vec<_>>>()?;
		let node = self
			.node
			.as_deref()
			.map(|node| canonical(node, "cluster node"))
			.transpose()?;
		if let Some(node) = &node {
			if node.len() > crate::cluster::MAX_NODE_URL {
				bail!(
					"the cluster node URL is longer than {} bytes",
					crate::cluster::MAX_NODE_URL
				);
			}
			// The same list for every relay (it names this one too): one link per pair, dialled by
			// the relay whose URL sorts first. A list without this relay (a seed, say) is dialled
			// whole.
			if connect.iter().any(|peer| peer == node) {
				connect.retain(|peer| peer.as_str() > node.as_str());
			}
		}
		connect.sort();
		connect.dedup();
		let token = match &self.token {
			Some(path) => Some(
				std::fs::read_to_string(path)
					.with_context(|| format!("reading the cluster token {}", path.display()))?
					.trim()
					.to_owned(),
			),
			None => None,
		};
		if let Some(id) = self.id
			&& !(1..=MAX_ORIGIN_ID).contains(&id)
		{
			bail!("the cluster id must be between 1 and 2^53-1, not {id}");
		}
		let fingerprints = self
			.fingerprints
			.unwrap_or_default()
			.iter()
			.map(|hex| {
				moq_quic::tls::parse_fingerprint(hex.trim())
					.with_context(|| format!("cluster fingerprint {hex:?} is not 64 hex digits"))
			})
			.collect::<anyhow::Result<Vec<_>>>()?;
		let insecure = self.insecure.unwrap_or(false);
		let tls = match (insecure, self.roots, fingerprints.is_empty()) {
			(true, None, true) => PeerTls::Insecure,
			(false, Some(roots), true) => PeerTls::Roots(roots),
			(false, None, false) => PeerTls::Fingerprints(fingerprints),
			(false, None, true) => {
				if !connect.is_empty() {
					bail!(
						"cluster peers to dial, and no way to check their certificates: give \
						 --cluster-fingerprint, --cluster-roots or (for development) --cluster-insecure"
					);
				}
				PeerTls::Fingerprints(Vec::new())
			}
			_ => bail!("give one of --cluster-fingerprint, --cluster-roots and --cluster-insecure"),
		};
		Ok(Cluster {
			connect,
			node,
			token,
			id: self.id,
			linger: self.linger.map_or(DEFAULT_LINGER, |s| s.0),
			tls,
		})
	}
}
