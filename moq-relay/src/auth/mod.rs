//! Who may publish and subscribe where: JWTs in the connection's query, and anonymous grants.
//!
//! A client puts a token in the query of its connection path (`moqt://relay/room?jwt=<token>`).
//! The token is a JWS in compact form (RFC 7515), verified here by hand on `ring`: no JWT crate,
//! because the part that matters (which algorithms are accepted with which keys) is a few
//! dozen lines that a generic library makes configurable, and configurability is where JWT
//! libraries have historically let `alg: none` and HMAC-with-a-public-key tokens through.
//!
//! # Algorithms and keys
//!
//! Accepted: `HS256`, `HS384`, `HS512` (HMAC), `ES256` (ECDSA P-256, fixed-size `r || s`) and
//! `EdDSA` (Ed25519; `Ed25519` is accepted as its fully-specified name). An algorithm is only
//! ever checked against a key of its own type, so an asymmetric public key can never be used as
//! an HMAC secret. `alg: none`, an empty signature, a `crit` header and any other algorithm are
//! refused.
//!
//! The key file is a JSON Web Key Set (RFC 7517), or a single JWK object:
//!
//! ```json
//! {"keys": [
//!   {"kty": "oct", "k": "<base64url secret, at least 32 bytes>", "alg": "HS256", "kid": "a"},
//!   {"kty": "EC", "crv": "P-256", "x": "<base64url>", "y": "<base64url>", "kid": "b"},
//!   {"kty": "OKP", "crv": "Ed25519", "x": "<base64url>"}
//! ]}
//! ```
//!
//! `alg` is optional (an `oct` key without it takes any of `HS256`/`HS384`/`HS512`, subject to
//! its length); `use`, when present, must be `sig`, and `key_ops`, when present, must include
//! `verify`. Private parts (`d`) are ignored. When a token's header names a `kid`, only the key
//! with that `kid` is tried; otherwise every key of the right type is.
//!
//! # Claims
//!
//! - `root` (string, default `""`): the path the token is for. The connection path must be this
//!   path or below it (segment-aware: `room` covers `room/a`, not `roomy`).
//! - `put` (string or list of strings): prefixes, relative to `root`, the holder may publish
//!   under. `""` is everything under the root.
//! - `get` (string or list of strings): prefixes, relative to `root`, the holder may subscribe
//!   under.
//! - `exp` (NumericDate, optional): the token is refused at or after it, and a session holding
//!   it is closed then ([`Grant::expires`]).
//! - `nbf` (NumericDate, optional): the token is refused before it.
//! - `cluster` (bool, default false): the holder is a relay of this relay's cluster. It is
//!   granted the whole origin whatever its connection path, `root`, `put` and `get` say; the
//!   routes it announces are marked as a cluster peer's, and it hears only what this relay's
//!   own clients publish, and which relays the cluster has ([`Grant::cluster`]).
//!
//! The names follow the `moq-token` crate used by the other moq-lite relays, so tokens minted
//! for them work here. Other claims (`sub`, `iat`, …) are ignored. There is no clock leeway.
//!
//! # Anonymous access
//!
//! A connection without a `jwt` parameter gets the anonymous grant: the configured
//! [`Anonymous`] prefixes (absolute paths), as seen from the connection path. With no prefixes
//! reaching that path it is refused. A connection *with* a token never falls back to anonymous
//! access: a bad token is refused even where anonymous access would have let it in, so a
//! mistake in a token shows up as an error rather than as quietly reduced rights.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::bail;
use moq_net::Path;

mod jwt;
pub use jwt::{Keys, base64url_decode, base64url_encode, encode, encode_bytes, hs256, sign_hs256};

/// The longest token accepted, so a hostile query costs a bounded amount of decoding.
pub const MAX_TOKEN: usize = 8 * 1024;

/// What [`Auth`] is built from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthConfig {
	/// A JWK set (or single JWK) file with the keys tokens are verified with; `None` accepts no
	/// token.
	pub key_file: Option<PathBuf>,
	/// What a connection without a token may do.
	pub anonymous: Anonymous,
}

/// Prefixes (absolute paths) under which a connection without a token may publish or
/// subscribe. `""` is everything; no prefixes is no anonymous access.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Anonymous {
	/// Where anyone may publish.
	pub publish: Vec<String>,
	/// Where anyone may subscribe.
	pub subscribe: Vec<String>,
}

impl Anonymous {
	/// No anonymous access.
	pub fn none() -> Self {
		Self::default()
	}

	/// Anyone may publish and subscribe anywhere.
	pub fn everything() -> Self {
		Self {
			publish: vec![String::new()],
			subscribe: vec![String::new()],
		}
	}

	/// Whether it grants nothing.
	pub fn is_none(&self) -> bool {
		self.publish.is_empty() && self.subscribe.is_empty()
	}
}

/// What a connection may do, from its token or the anonymous grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
	/// The connection path (normalised, without the query): the session's root.
	pub root: Path,
	/// Prefixes relative to `root` the connection may publish under (`""`: all of it).
	pub publish: Vec<Path>,
	/// Prefixes relative to `root` the connection may subscribe under (`""`: all of it).
	pub subscribe: Vec<Path>,
	/// When the token expires; the session must be closed then. `None`: never (anonymous, or a
	/// token without `exp`).
	pub expires: Option<SystemTime>,
	/// The holder is a cluster peer (a token with `cluster: true`): the whole origin, as a peer.
	pub cluster: bool,
	/// Who the token says its holder is (`sub`): what a path it publishes belongs to. `None`
	/// for anonymous access and tokens without one (their address stands for them).
	pub subject: Option<String>,
}

impl Grant {
	/// Whether the connection may publish at `path` (relative to the root).
	pub fn can_publish(&self, path: &Path) -> bool {
		self.publish.iter().any(|prefix| path.has_prefix(prefix))
	}

	/// Whether the connection may subscribe at `path` (relative to the root).
	pub fn can_subscribe(&self, path: &Path) -> bool {
		self.subscribe.iter().any(|prefix| path.has_prefix(prefix))
	}

	/// How long the grant lasts from `now`: `None` for ever, zero if already expired.
	pub fn remaining(&self, now: SystemTime) -> Option<Duration> {
		self.expires
			.map(|expires| expires.duration_since(now).unwrap_or(Duration::ZERO))
	}
}

/// Why a connection was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
	/// The connection may not do anything at that path; the session is closed with moq-lite's
	/// `Unauthorized` code.
	Unauthorized(Reason),
}

/// The detail of an [`AuthError`], for logs and tests. Never sent to the peer beyond the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
	/// No token, and anonymous access does not reach the path.
	NoToken,
	/// Not a compact JWS with base64url JSON parts, more than one `jwt` parameter, a `crit`
	/// header, or claims of the wrong types.
	Malformed,
	/// `alg: none` or an empty signature.
	Unsigned,
	/// An algorithm this relay does not accept, or one no configured key takes.
	Algorithm,
	/// The token's `kid` names no key, or no keys are configured.
	UnknownKey,
	/// The signature does not verify with any candidate key.
	BadSignature,
	/// `exp` has passed.
	Expired,
	/// `nbf` has not come yet.
	NotYetValid,
	/// The connection path is not the token's root or below it.
	OutsideRoot,
	/// The token grants neither publishing nor subscribing at the connection path.
	NothingGranted,
}

impl fmt::Display for Reason {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str(match self {
			Self::NoToken => "no token, and anonymous access does not reach this path",
			Self::Malformed => "malformed token",
			Self::Unsigned => "unsigned token",
			Self::Algorithm => "unaccepted signature algorithm",
			Self::UnknownKey => "no key for this token",
			Self::BadSignature => "bad signature",
			Self::Expired => "token expired",
			Self::NotYetValid => "token not yet valid",
			Self::OutsideRoot => "connection path outside the token's root",
			Self::NothingGranted => "token grants nothing at this path",
		})
	}
}

impl fmt::Display for AuthError {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		match self {
			Self::Unauthorized(reason) => write!(f, "unauthorized: {reason}"),
		}
	}
}

impl std::error::Error for AuthError {}

fn refuse<T>(reason: Reason) -> Result<T, AuthError> {
	Err(AuthError::Unauthorized(reason))
}

/// Verifies connections' tokens and hands out grants.
#[derive(Debug)]
pub struct Auth {
	keys: Keys,
	anonymous_publish: Vec<Path>,
	anonymous_subscribe: Vec<Path>,
}

impl Auth {
	/// Loads the key file, if any. Refuses a configuration that lets nobody in: no key file and no
	/// anonymous grant.
	pub fn new(config: &AuthConfig) -> anyhow::Result<Self> {
		let keys = match &config.key_file {
			Some(path) => Keys::load(path)?,
			None => Keys::default(),
		};
		Self::from_keys(keys, &config.anonymous)
	}

	/// With `keys` already loaded. Refuses a configuration that lets nobody in.
	pub fn from_keys(keys: Keys, anonymous: &Anonymous) -> anyhow::Result<Self> {
		if keys.is_empty() && anonymous.is_none() {
			bail!("auth: no key file and no anonymous access, so nobody could connect");
		}
		let paths = |prefixes: &[String]| prefixes.iter().map(|p| Path::new(p)).collect::<Vec<_>>();
		Ok(Self {
			keys,
			anonymous_publish: minimal(paths(&anonymous.publish)),
			anonymous_subscribe: minimal(paths(&anonymous.subscribe)),
		})
	}

	/// Decides what a connection to `path_and_query` (SETUP's `Path`, `path[?query]`) may do.
	pub fn verify_url(&self, path_and_query: &str, now: SystemTime) -> Result<Grant, AuthError> {
		self.verify_url_or_token(path_and_query, None, now)
	}

	/// [`verify_url`](Self::verify_url), with `token` checked when the query has no `jwt` (an
	/// IETF client's AUTHORIZATION_TOKEN: the token travels beside the path, not in it).
	pub fn verify_url_or_token(
		&self,
		path_and_query: &str,
		token: Option<&str>,
		now: SystemTime,
	) -> Result<Grant, AuthError> {
		let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
		let token = jwt_param(query)?.or_else(|| token.map(str::to_owned));
		self.verify_token_for(path, token, now)
	}

	/// Decides what a connection to `path` with `query` (without the `?`) may do.
	pub fn verify(&self, path: &str, query: Option<&str>, now: SystemTime) -> Result<Grant, AuthError> {
		self.verify_token_for(path, jwt_param(query.unwrap_or(""))?, now)
	}

	/// What a connection to `path` may do with `token`, or without one.
	fn verify_token_for(&self, path: &str, token: Option<String>, now: SystemTime) -> Result<Grant, AuthError> {
		let root = Path::new(path);
		let Some(token) = token else {
			let publish = rebase(&self.anonymous_publish, &root);
			let subscribe = rebase(&self.anonymous_subscribe, &root);
			if publish.is_empty() && subscribe.is_empty() {
				return refuse(Reason::NoToken);
			}
			return Ok(Grant {
				root,
				publish,
				subscribe,
				expires: None,
				cluster: false,
				subject: None,
			});
		};
		let claims = self.keys.verify(&token, now)?;
		if claims.cluster {
			return Ok(Grant {
				root: Path::default(),
				publish: vec![Path::default()],
				subscribe: vec![Path::default()],
				expires: claims.exp,
				cluster: true,
				subject: None,
			});
		}
		let token_root = Path::new(&claims.root);
		if !root.has_prefix(&token_root) {
			return refuse(Reason::OutsideRoot);
		}
		let absolute = |prefixes: &[String]| {
			prefixes
				.iter()
				.map(|prefix| token_root.join(&Path::new(prefix)))
				.collect::<Vec<_>>()
		};
		let publish = rebase(&minimal(absolute(&claims.put)), &root);
		let subscribe = rebase(&minimal(absolute(&claims.get)), &root);
		if publish.is_empty() && subscribe.is_empty() {
			return refuse(Reason::NothingGranted);
		}
		Ok(Grant {
			root,
			publish,
			subscribe,
			expires: claims.exp,
			cluster: false,
			subject: claims.subject,
		})
	}

	/// Checks a token's signature and times, without looking at paths.
	pub fn verify_token(&self, token: &str, now: SystemTime) -> Result<(), AuthError> {
		self.keys.verify(token, now).map(drop)
	}
}

/// Absolute prefixes as seen from `root`: those below it become relative, one above it (or
/// equal) becomes `""`, the rest do not reach it.
fn rebase(prefixes: &[Path], root: &Path) -> Vec<Path> {
	let mut out = Vec::new();
	for prefix in prefixes {
		if let Some(rest) = prefix.strip_prefix(root) {
			out.push(rest);
		} else if root.has_prefix(prefix) {
			out.push(Path::default());
		}
	}
	minimal(out)
}

/// Drops prefixes covered by another one (and duplicates): a smaller list scoping the same paths.
fn minimal(mut prefixes: Vec<Path>) -> Vec<Path> {
	// Sorted, an ancestor comes before its descendants ("a" < "a/b"), though not necessarily
	// right before them ("a" < "a!" < "a/b"), hence the comparison with every kept prefix.
	prefixes.sort();
	prefixes.dedup();
	let mut kept: Vec<Path> = Vec::with_capacity(prefixes.len());
	for prefix in prefixes {
		if !kept.iter().any(|k| prefix.has_prefix(k)) {
			kept.push(prefix);
		}
	}
	kept
}

/// The `jwt` parameter of `query`, percent-decoded. Two of them are refused rather than one
/// picked, so a proxy and the relay can never disagree on which one counts.
fn jwt_param(query: &str) -> Result<Option<String>, AuthError> {
	let mut found = None;
	for pair in query.split('&') {
		let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
		if name != "jwt" {
			continue;
		}
		if found.is_some() || value.len() > 3 * MAX_TOKEN {
			return refuse(Reason::Malformed);
		}
		found = Some(percent_decode(value).ok_or(AuthError::Unauthorized(Reason::Malformed))?);
	}
	Ok(found)
}

fn percent_decode(text: &str) -> Option<String> {
	let bytes = text.as_bytes();
	let mut out = Vec::with_capacity(bytes.len());
	let mut i = 0;
	while i < bytes.len() {
		if bytes[i] == b'%' {
			let hex = bytes.get(i + 1..i + 3)?;
			let hi = (hex[0] as char).to_digit(16)?;
			let lo = (hex[1] as char).to_digit(16)?;
			out.push((hi * 16 + lo) as u8);
			i += 3;
		} else {
			out.push(bytes[i]);
			i += 1;
		}
	}
	String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
	use std::sync::atomic::{AtomicUsize, Ordering};

	use ring::rand::SystemRandom;
	use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
	use serde_json::json;

	use ring::{hmac, signature};

	use super::*;

	const SECRET: &[u8] = b"a secret of at least thirty-two bytes";

	fn now() -> SystemTime {
		SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
	}

	fn secs(t: SystemTime) -> u64 {
		t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
	}

	fn hs256_keys(secret: &[u8]) -> Keys {
		Keys::parse(&json!({"keys": [{"kty": "oct", "k": base64url_encode(secret), "alg": "HS256"}]}).to_string())
			.unwrap()
	}

	fn auth(keys: Keys) -> Auth {
		Auth::from_keys(keys, &Anonymous::none()).unwrap()
	}

	fn paths(list: &[&str]) -> Vec<Path> {
		list.iter().map(|p| Path::new(p)).collect()
	}

	fn refused(result: Result<Grant, AuthError>) -> Reason {
		match result {
			Err(AuthError::Unauthorized(reason)) => reason,
			Ok(grant) => panic!("granted {grant:?}"),
		}
	}

	#[test]
	fn base64url_round_trips_and_is_strict() {
		for len in 0..40 {
			let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
			let text = base64url_encode(&data);
			assert!(!text.contains('='));
			assert_eq!(base64url_decode(&text), Some(data));
		}
		assert_eq!(base64url_encode(b"\xfb\xff"), "-_8");
		assert_eq!(base64url_decode("-_8"), Some(b"\xfb\xff".to_vec()));
		assert_eq!(base64url_decode("-_9"), None, "non-zero unused bits");
		assert_eq!(base64url_decode("QQ=="), None, "padding");
		assert_eq!(base64url_decode("QUJDR"), None, "4n + 1 characters");
		assert_eq!(base64url_decode("QU+C"), None, "the standard alphabet");
	}

	#[test]
	fn a_token_beside_the_path_counts_where_the_query_has_none() {
		let auth = auth(hs256_keys(SECRET));
		let exp = now() + Duration::from_secs(60);
		let token = sign_hs256(&json!({"root": "live", "get": [""], "exp": secs(exp)}), SECRET);
		let other = sign_hs256(&json!({"root": "live", "put": [""], "exp": secs(exp)}), SECRET);
		// The token beside the path, with or without a query.
		let grant = auth.verify_url_or_token("/live", Some(&token), now()).unwrap();
		assert_eq!((grant.root, grant.subscribe), (Path::new("live"), paths(&[""])));
		let grant = auth.verify_url_or_token("/live?x=1", Some(&token), now()).unwrap();
		assert_eq!(grant.subscribe, paths(&[""]));
		// The path's own token wins.
		let grant = auth
			.verify_url_or_token(&format!("/live?jwt={other}"), Some(&token), now())
			.unwrap();
		assert_eq!((grant.publish, grant.subscribe), (paths(&[""]), Vec::new()));
		// None at all; and a token that would add to a query is just a bad token.
		assert_eq!(refused(auth.verify_url_or_token("/live", None, now())), Reason::NoToken);
		assert!(auth.verify_url_or_token("/live", Some("a&root=x"), now()).is_err());
	}

	#[test]
	fn a_valid_token_publishes_and_subscribes_within_its_prefixes() {
		let auth = auth(hs256_keys(SECRET));
		let exp = now() + Duration::from_secs(60);
		let token = sign_hs256(
			&json!({"root": "live", "put": "alice", "get": ["", "x/y"], "exp": secs(exp)}),
			SECRET,
		);
		let grant = auth.verify("/live", Some(&format!("jwt={token}")), now()).unwrap();
		assert_eq!(grant.root, Path::new("live"));
		assert_eq!(grant.publish, paths(&["alice"]));
		assert_eq!(grant.subscribe, paths(&[""]), "x/y is covered by everything");
		assert_eq!(grant.expires, Some(exp));
		assert_eq!(grant.remaining(now()), Some(Duration::from_secs(60)));
		assert!(grant.can_publish(&Path::new("alice/cam")));
		assert!(!grant.can_publish(&Path::new("alicia")), "segment-aware");
		assert!(!grant.can_publish(&Path::new("bob")));
		assert!(grant.can_subscribe(&Path::new("bob")));

		// Below the root, the prefixes are seen from the connection path.
		let grant = auth.verify_url(&format!("live/alice?x=1&jwt={token}"), now()).unwrap();
		assert_eq!(grant.root, Path::new("live/alice"));
		assert_eq!(grant.publish, paths(&[""]));
		assert_eq!(grant.subscribe, paths(&[""]));
	}

	#[test]
	fn publishing_outside_the_prefixes_is_refused() {
		let auth = auth(hs256_keys(SECRET));
		let token = sign_hs256(&json!({"root": "live", "put": ["alice"]}), SECRET);
		let grant = auth.verify("live", Some(&format!("jwt={token}")), now()).unwrap();
		assert!(grant.subscribe.is_empty());
		assert!(!grant.can_subscribe(&Path::new("alice")));
		assert!(!grant.can_publish(&Path::new("bob")));
		// A connection rooted at a path the token grants nothing under is refused outright.
		let query = format!("jwt={token}");
		assert_eq!(
			refused(auth.verify("live/bob", Some(&query), now())),
			Reason::NothingGranted
		);
		assert_eq!(refused(auth.verify("other", Some(&query), now())), Reason::OutsideRoot);
		assert_eq!(refused(auth.verify("liver", Some(&query), now())), Reason::OutsideRoot);
	}

	#[test]
	fn subscribing_outside_the_prefixes_is_refused() {
		let auth = auth(hs256_keys(SECRET));
		let token = sign_hs256(&json!({"root": "", "get": ["a/b", "c"]}), SECRET);
		let query = format!("jwt={token}");
		let grant = auth.verify("", Some(&query), now()).unwrap();
		assert!(grant.publish.is_empty());
		assert_eq!(grant.subscribe, paths(&["a/b", "c"]));
		assert!(grant.can_subscribe(&Path::new("a/b/c")));
		assert!(!grant.can_subscribe(&Path::new("a/bc")));
		assert!(!grant.can_subscribe(&Path::new("a")));
		assert_eq!(refused(auth.verify("d", Some(&query), now())), Reason::NothingGranted);
		// Rooted above a prefix, the prefix stays relative to the connection path.
		assert_eq!(auth.verify("a", Some(&query), now()).unwrap().subscribe, paths(&["b"]));
	}

	#[test]
	fn expired_and_not_yet_valid_tokens_are_refused() {
		let auth = auth(hs256_keys(SECRET));
		let query = |claims| format!("jwt={}", sign_hs256(&claims, SECRET));
		let t = secs(now());
		let expired = query(json!({"put": "", "exp": t}));
		assert_eq!(refused(auth.verify("", Some(&expired), now())), Reason::Expired);
		let early = query(json!({"put": "", "nbf": t + 1}));
		assert_eq!(refused(auth.verify("", Some(&early), now())), Reason::NotYetValid);
		let window = query(json!({"put": "", "nbf": t, "exp": t as f64 + 0.5}));
		assert!(auth.verify("", Some(&window), now()).is_ok());
		let garbage = query(json!({"put": "", "exp": -1}));
		assert_eq!(refused(auth.verify("", Some(&garbage), now())), Reason::Malformed);
	}

	#[test]
	fn unsigned_tokens_are_refused() {
		let auth = auth(hs256_keys(SECRET));
		let claims = json!({"put": ""});
		for alg in ["none", "None", "NONE"] {
			let token = encode(&json!({"alg": alg}), &claims, |_| Vec::new());
			assert_eq!(
				refused(auth.verify("", Some(&format!("jwt={token}")), now())),
				Reason::Unsigned
			);
		}
		// A real algorithm with the signature cut off.
		let token = sign_hs256(&claims, SECRET);
		let cut = &token[..token.rfind('.').unwrap() + 1];
		assert_eq!(
			refused(auth.verify("", Some(&format!("jwt={cut}")), now())),
			Reason::Unsigned
		);
	}

	#[test]
	fn bad_signatures_and_wrong_keys_are_refused() {
		let auth = auth(hs256_keys(SECRET));
		let token = sign_hs256(&json!({"put": ""}), SECRET);
		// One claim changed after signing.
		let (head, rest) = token.split_once('.').unwrap();
		let sig = rest.split_once('.').unwrap().1;
		let forged = format!("{head}.{}.{sig}", base64url_encode(br#"{"put":"","get":""}"#));
		assert_eq!(
			refused(auth.verify("", Some(&format!("jwt={forged}")), now())),
			Reason::BadSignature
		);
		let other = sign_hs256(&json!({"put": ""}), b"another secret of thirty-two bytes or so");
		assert_eq!(
			refused(auth.verify("", Some(&format!("jwt={other}")), now())),
			Reason::BadSignature
		);
		// An algorithm the key does not take.
		let hs384 = encode(&json!({"alg": "HS384"}), &json!({"put": ""}), |m| {
			hmac::sign(&hmac::Key::new(hmac::HMAC_SHA384, SECRET), m)
				.as_ref()
				.to_vec()
		});
		assert_eq!(
			refused(auth.verify("", Some(&format!("jwt={hs384}")), now())),
			Reason::Algorithm
		);
		let rs256 = encode(&json!({"alg": "RS256"}), &json!({"put": ""}), |_| vec![1; 256]);
		assert_eq!(
			refused(auth.verify("", Some(&format!("jwt={rs256}")), now())),
			Reason::Algorithm
		);
	}

	#[test]
	fn kid_selects_the_key() {
		let keys = Keys::parse(
			&json!({"keys": [
				{"kty": "oct", "k": base64url_encode(SECRET), "kid": "one"},
				{"kty": "oct", "k": base64url_encode(&[7; 64]), "kid": "two"},
			]})
			.to_string(),
		)
		.unwrap();
		let auth = auth(keys);
		let sign = |kid: &str, secret: &[u8]| {
			let token = encode(&json!({"alg": "HS512", "kid": kid}), &json!({"put": ""}), |m| {
				hmac::sign(&hmac::Key::new(hmac::HMAC_SHA512, secret), m)
					.as_ref()
					.to_vec()
			});
			format!("jwt={token}")
		};
		assert!(auth.verify("", Some(&sign("two", &[7; 64])), now()).is_ok());
		assert_eq!(
			refused(auth.verify("", Some(&sign("one", &[7; 64])), now())),
			Reason::Algorithm,
			"too short for HS512"
		);
		assert_eq!(
			refused(auth.verify("", Some(&sign("three", &[7; 64])), now())),
			Reason::UnknownKey
		);
		// Without a kid every key is tried.
		assert!(
			auth.verify(
				"",
				Some(&format!("jwt={}", sign_hs256(&json!({"get": ""}), SECRET))),
				now()
			)
			.is_ok()
		);
	}

	#[test]
	fn es256_and_eddsa_tokens_verify() {
		let rng = SystemRandom::new();
		let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
		let ec = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
		let point = ec.public_key().as_ref();
		let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
		let ed = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
		let keys = json!({"keys": [
			{"kty": "EC", "crv": "P-256", "x": base64url_encode(&point[1..33]), "y": base64url_encode(&point[33..]), "kid": "ec"},
			{"kty": "OKP", "crv": "Ed25519", "x": base64url_encode(ed.public_key().as_ref()), "use": "sig"},
		]});
		let auth = auth(Keys::parse(&keys.to_string()).unwrap());
		let claims = json!({"root": "r", "put": "p"});
		let es256 = encode(&json!({"alg": "ES256", "kid": "ec"}), &claims, |m| {
			ec.sign(&rng, m).unwrap().as_ref().to_vec()
		});
		let grant = auth.verify("r", Some(&format!("jwt={es256}")), now()).unwrap();
		assert_eq!(grant.publish, paths(&["p"]));
		for alg in ["EdDSA", "Ed25519"] {
			let eddsa = encode(&json!({"alg": alg}), &claims, |m| ed.sign(m).as_ref().to_vec());
			assert!(auth.verify("r/p", Some(&format!("jwt={eddsa}")), now()).is_ok());
			// The same signature under another key type's algorithm is not tried on this key.
			let (_, rest) = eddsa.split_once('.').unwrap();
			let confused = format!("{}.{rest}", base64url_encode(br#"{"alg":"ES256"}"#));
			assert_eq!(
				refused(auth.verify("r", Some(&format!("jwt={confused}")), now())),
				Reason::BadSignature
			);
		}
		// An HMAC token signed with the public key's bytes finds no HMAC key to check against.
		let hs = sign_hs256(&claims, point);
		assert_eq!(
			refused(auth.verify("r", Some(&format!("jwt={hs}")), now())),
			Reason::Algorithm
		);
	}

	#[test]
	fn malformed_tokens_are_refused() {
		let auth = auth(hs256_keys(SECRET));
		let good = sign_hs256(&json!({"put": ""}), SECRET);
		let crit = encode(&json!({"alg": "HS256", "crit": ["exp"]}), &json!({"put": ""}), |m| {
			hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, SECRET), m)
				.as_ref()
				.to_vec()
		});
		let wrong_types = sign_hs256(&json!({"put": 3}), SECRET);
		let long = "a".repeat(MAX_TOKEN + 1);
		for query in [
			"jwt=".to_owned(),
			"jwt=a.b".to_owned(),
			"jwt=a.b.c.d".to_owned(),
			"jwt=%zz".to_owned(),
			format!("jwt={long}"),
			format!("jwt={crit}"),
			format!("jwt={wrong_types}"),
			format!("jwt={good}&jwt={good}"),
			format!("jwt={}=", &good),
		] {
			assert_eq!(
				refused(auth.verify("", Some(&query), now())),
				Reason::Malformed,
				"{query}"
			);
		}
		// Percent-encoding is undone.
		let encoded = good.replace('.', "%2E");
		assert!(auth.verify("", Some(&format!("a&jwt={encoded}")), now()).is_ok());
	}

	#[test]
	fn anonymous_access_only_where_granted() {
		let anonymous = Anonymous {
			publish: vec!["anon".into()],
			subscribe: vec!["anon".into(), "/public/".into()],
		};
		let auth = Auth::from_keys(hs256_keys(SECRET), &anonymous).unwrap();
		let grant = auth.verify("", None, now()).unwrap();
		assert_eq!(grant.publish, paths(&["anon"]));
		assert_eq!(grant.subscribe, paths(&["anon", "public"]));
		assert_eq!(grant.expires, None);
		let grant = auth.verify("public/room", Some("x=1"), now()).unwrap();
		assert!(grant.publish.is_empty());
		assert_eq!(grant.subscribe, paths(&[""]));
		assert_eq!(refused(auth.verify("private", None, now())), Reason::NoToken);
		assert_eq!(refused(auth.verify_url("anonymous", now())), Reason::NoToken);
		// A bad token is refused even where anonymous access would have let the connection in.
		assert_eq!(
			refused(auth.verify("anon", Some("jwt=x.y.z"), now())),
			Reason::Malformed
		);

		let open = Auth::from_keys(Keys::default(), &Anonymous::everything()).unwrap();
		let grant = open.verify_url("/any/where?foo", now()).unwrap();
		assert_eq!((grant.publish, grant.subscribe), (paths(&[""]), paths(&[""])));
		// No keys: every token is unknown.
		let token = sign_hs256(&json!({"put": ""}), SECRET);
		assert_eq!(
			refused(open.verify("", Some(&format!("jwt={token}")), now())),
			Reason::UnknownKey
		);
	}

	#[test]
	fn a_config_that_lets_nobody_in_is_refused() {
		let err = Auth::new(&AuthConfig::default()).unwrap_err();
		assert!(err.to_string().contains("nobody could connect"), "{err}");
		assert!(
			Auth::new(&AuthConfig {
				key_file: None,
				anonymous: Anonymous::everything(),
			})
			.is_ok()
		);
	}

	static FILES: AtomicUsize = AtomicUsize::new(0);

	fn temp_file(contents: &str) -> PathBuf {
		let n = FILES.fetch_add(1, Ordering::Relaxed);
		let path = std::env::temp_dir().join(format!("moq-relay-auth-{}-{n}.json", std::process::id()));
		std::fs::write(&path, contents).unwrap();
		path
	}

	#[test]
	fn keys_load_from_a_file() {
		let single = json!({"kty": "oct", "k": base64url_encode(SECRET), "key_ops": ["sign", "verify"]});
		let path = temp_file(&single.to_string());
		let auth = Auth::new(&AuthConfig {
			key_file: Some(path.clone()),
			anonymous: Anonymous::none(),
		})
		.unwrap();
		std::fs::remove_file(&path).unwrap();
		let token = sign_hs256(&json!({"get": "x"}), SECRET);
		assert!(auth.verify("x", Some(&format!("jwt={token}")), now()).is_ok());

		let missing = Auth::new(&AuthConfig {
			key_file: Some(path.clone()),
			anonymous: Anonymous::none(),
		})
		.unwrap_err();
		assert!(
			format!("{missing:#}").contains(&path.display().to_string()),
			"{missing:#}"
		);
	}

	#[test]
	fn bad_key_files_are_refused() {
		let k = base64url_encode(SECRET);
		for (json, why) in [
			("nope".to_owned(), "not JSON"),
			(json!({"keys": []}).to_string(), "no keys"),
			(json!({"kty": "oct", "k": "AAAA"}).to_string(), "at least 32"),
			(
				json!({"kty": "oct", "k": k, "alg": "ES256"}).to_string(),
				"with an `oct` key",
			),
			(json!({"kty": "oct", "k": k, "use": "enc"}).to_string(), "`use`"),
			(
				json!({"kty": "oct", "k": k, "key_ops": ["sign"]}).to_string(),
				"key_ops",
			),
			(json!({"kty": "oct", "k": "a+b"}).to_string(), "base64url"),
			(
				json!({"kty": "RSA", "n": "AQAB", "e": "AQAB"}).to_string(),
				"unsupported key type",
			),
			(
				json!({"kty": "EC", "crv": "P-384", "x": "", "y": ""}).to_string(),
				"unsupported key type",
			),
			(
				json!({"kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA"}).to_string(),
				"32 bytes",
			),
			(json!({"kty": "OKP", "crv": "Ed25519"}).to_string(), "missing `x`"),
			(
				json!({"keys": [{"kty": "oct", "k": k, "kid": "a"}, {"kty": "oct", "k": k, "kid": "a"}]}).to_string(),
				"used twice",
			),
		] {
			let err = Keys::parse(&json).unwrap_err();
			assert!(format!("{err:#}").contains(why), "{json}: {err:#}");
		}
	}

	#[test]
	fn prefixes_are_minimised() {
		assert_eq!(minimal(paths(&["a/b", "a", "a!", "a/c", "a"])), paths(&["a", "a!"]));
		assert_eq!(minimal(paths(&["x", ""])), paths(&[""]));
		assert_eq!(rebase(&paths(&["a/b", "c"]), &Path::new("a")), paths(&["b"]));
		assert_eq!(rebase(&paths(&["a", "a/b"]), &Path::new("a/b/c")), paths(&[""]));
	}
}
