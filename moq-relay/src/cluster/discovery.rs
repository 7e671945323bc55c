//! Discovery: every relay with a node URL is announced at [`MEMBERS`]`/<the URL in hex>`, and a
//! relay dials the members it hears of and has no link with (see the module docs of
//! [`crate::cluster`]).

use std::collections::HashMap;

use kio::{Either, race};
use moq_client::Url;
use moq_net::model::Path;
use tracing::{info, warn};

use super::{Dialer, link};

/// Where the relays of a cluster announce themselves: `MEMBERS/<node URL in hex>`.
pub const MEMBERS: &str = ".cluster/members";

/// The longest node URL: its hex under [`MEMBERS`] must fit a path.
pub const MAX_NODE_URL: usize = 400;

/// Members a relay dials because it heard of them, at most: the peers that tell it of members
/// hold the cluster token, but a misconfigured one should not make every relay dial without
/// bound. Past it, further members are not dialled (and the relay says so), nor retried when
/// others go, until their announcement changes.
pub const MAX_DISCOVERED: usize = 256;

/// The path at which the relay reachable at `node` announces itself.
pub fn member_path(node: &str) -> Path {
	Path::new(MEMBERS).join(&Path::new(&data_encoding::HEXLOWER.encode(node.as_bytes())))
}

/// The node URL a path under [`MEMBERS`] (relative to it) names, in its one spelling
/// ([`Url::canonical`]), if it names one: lower-case hex of a URL, as [`member_path`] writes it.
fn member_url(relative: &Path) -> Option<String> {
	let hex = relative.as_str();
	if hex.is_empty() || hex.len() > 2 * MAX_NODE_URL {
		return None;
	}
	let bytes = data_encoding::HEXLOWER.decode(hex.as_bytes()).ok()?;
	let url = String::from_utf8(bytes).ok()?;
	Url::parse(&url).ok().map(|url| url.canonical())
}

/// Whether this relay dials the member at `url` it heard of through `hops` relays: not itself,
/// not a peer it dials already, not one it heard from directly (one of the two already dialled
/// the other), and only if it has no URL of its own or its own sorts first (the other dials
/// otherwise).
fn dials(own: Option<&str>, configured: &[String], url: &str, hops: usize) -> bool {
	own != Some(url) && !configured.iter().any(|peer| peer == url) && hops > 1 && own.is_none_or(|own| url > own)
}

/// Dials the members of the cluster this relay hears of and has no link with, for as long as
/// each is announced; until shutdown.
pub(super) async fn discover(dialer: Dialer) {
	let relay = &dialer.relay;
	let members = &relay.cluster.members;
	let config = &relay.cluster.config;
	let mut cursor = relay.origin.consumer().announced(members);
	let mut dialling: HashMap<String, kio::JoinHandle<()>> = HashMap::new();
	loop {
		let update = match race(cursor.next(), dialer.shutdown.closed()).await {
			Either::Left(update) => update,
			Either::Right(()) => {
				// Each link closes itself at shutdown.
				for (_, task) in dialling {
					let _ = task.await;
				}
				return;
			}
		};
		let Some(url) = update.path.strip_prefix(members).as_ref().and_then(member_url) else {
			continue;
		};
		// A member whose route changed is heard going and coming back: it is gone only if nothing
		// is announced at its path any more.
		if update.broadcast.is_none() {
			if relay.origin.consumer().get_broadcast(&update.path).is_some() {
				continue;
			}
			if let Some(task) = dialling.remove(&url) {
				info!(peer = url, "cluster member gone");
				task.abort();
			}
			continue;
		}
		let hops = update.route.hops.len();
		if dialling.contains_key(&url) || !dials(config.node.as_deref(), &config.connect, &url, hops) {
			continue;
		}
		if dialling.len() >= MAX_DISCOVERED {
			warn!(
				peer = url,
				max = MAX_DISCOVERED,
				"cluster member not dialled: too many discovered"
			);
			continue;
		}
		info!(peer = url, "cluster member discovered");
		let task = kio::spawn(link::link(dialer.clone(), url.clone()));
		dialling.insert(url, task);
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn members_are_named_by_their_urls_and_dialled_by_the_lower() {
		let url = "moqt://relay-b.example:4443/";
		let path = member_path(url);
		assert!(path.fits());
		let relative = path.strip_prefix(&Path::new(MEMBERS)).unwrap();
		assert_eq!(member_url(&relative).as_deref(), Some(url));
		for junk in ["", "6", "zz", "6d6f71", "ff00", "+6d", "6D6F"] {
			assert_eq!(member_url(&Path::new(junk)), None, "{junk:?}");
		}
		let configured = vec!["moqt://c:4443/".to_owned()];
		assert!(dials(Some("moqt://a:4443/"), &configured, "moqt://b:4443/", 2));
		assert!(!dials(Some("moqt://c:4443/"), &[], "moqt://b:4443/", 2), "b dials c");
		assert!(!dials(Some("moqt://b:4443/"), &[], "moqt://b:4443/", 2), "not itself");
		assert!(
			!dials(Some("moqt://a:4443/"), &configured, "moqt://c:4443/", 2),
			"already dialled"
		);
		assert!(
			!dials(Some("moqt://a:4443/"), &[], "moqt://b:4443/", 1),
			"heard directly: linked"
		);
		assert!(
			dials(None, &[], "moqt://b:4443/", 2),
			"a relay nobody can dial dials everyone"
		);
	}
}
