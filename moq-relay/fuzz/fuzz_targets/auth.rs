//! The token check on a connection's path and query (`Auth::verify_url`), which anyone sends
//! before being authorised. The first byte picks the input's shape (its value modulo 3):
//!
//! - 0: the rest is the path and query as sent (a forged, truncated or absurd `jwt` parameter,
//!   percent escapes, several of them);
//! - 1: the rest is a JWS header, claims and a path, split at NUL bytes, and the token is signed
//!   with the relay's HMAC key, so arbitrary claims (types, dates) get past the signature;
//! - 2: the rest is a root, `put` and `get` prefix lists (comma-separated) and a path, split at
//!   NUL bytes, made into well-formed signed claims (with a date from the input's last 8 bytes,
//!   and the cluster claim, when the shape byte's top bits say so), so the fuzzer spends its
//!   time on paths and prefixes rather than on JSON syntax.
//!
//! Beyond not panicking, a grant it gives is minimal (no prefix covers another), rooted at the
//! connection path (unless it is a cluster peer's), and not already expired.
#![no_main]
#![forbid(unsafe_code)]

use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;
use moq_net::Path;
use moq_relay::auth::{self, Anonymous, Auth, Grant, Keys, base64url_encode};
use ring::signature::{Ed25519KeyPair, KeyPair};

const SECRET: &[u8; 32] = b"fuzzing-secret-of-thirty-two-b!!";
/// Tokens' default header when the input gives none: past the header, into the claims.
const HEADER: &[u8] = br#"{"alg":"HS256","kid":"hmac"}"#;

fn auth() -> Auth {
	let ed25519 = Ed25519KeyPair::from_seed_unchecked(&[7; 32]).expect("a seed of 32 bytes");
	let keys = format!(
		r#"{{"keys": [
			{{"kty": "oct", "k": "{}", "alg": "HS256", "kid": "hmac"}},
			{{"kty": "OKP", "crv": "Ed25519", "x": "{}", "kid": "ed"}}
		]}}"#,
		base64url_encode(SECRET),
		base64url_encode(ed25519.public_key().as_ref()),
	);
	let anonymous = Anonymous {
		publish: Vec::new(),
		subscribe: vec!["public".to_owned()],
	};
	Auth::from_keys(Keys::parse(&keys).expect("the key set parses"), &anonymous).expect("a usable configuration")
}

thread_local! {
	static AUTH: Auth = auth();
}

fn check(grant: &Grant, path: &str, now: SystemTime) {
	for prefixes in [&grant.publish, &grant.subscribe] {
		for (i, a) in prefixes.iter().enumerate() {
			for (j, b) in prefixes.iter().enumerate() {
				assert!(i == j || !a.has_prefix(b), "{a} is covered by {b}: {prefixes:?}");
			}
		}
	}
	if !grant.cluster {
		assert_eq!(grant.root, Path::new(path), "the grant's root");
	}
	assert_ne!(grant.remaining(now), Some(Duration::ZERO), "an expired grant");
}

fn token(header: &[u8], claims: &[u8]) -> String {
	let header = if header.is_empty() { HEADER } else { header };
	auth::encode_bytes(header, claims, |message| auth::hs256(SECRET, message))
}

fuzz_target!(|data: &[u8]| {
	let Some((&shape, rest)) = data.split_first() else {
		return;
	};
	let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
	let url = match shape % 3 {
		0 => String::from_utf8_lossy(rest).into_owned(),
		1 => {
			let mut parts = rest.splitn(3, |&b| b == 0);
			let header = parts.next().unwrap_or_default();
			let claims = parts.next().unwrap_or_default();
			let path = String::from_utf8_lossy(parts.next().unwrap_or_default());
			format!(
				"{}?jwt={}",
				path.split('?').next().unwrap_or_default(),
				token(header, claims)
			)
		}
		_ => {
			let (rest, exp) = match rest.split_last_chunk::<8>() {
				Some((rest, exp)) if shape & 0x80 != 0 => (rest, Some(f64::from_le_bytes(*exp))),
				_ => (rest, None),
			};
			let mut parts = rest.splitn(4, |&b| b == 0).map(String::from_utf8_lossy);
			let mut next = || parts.next().unwrap_or_default().into_owned();
			let (root, put, get, path) = (next(), next(), next(), next());
			// Lists of prefixes, comma-separated in the input.
			let list = |text: &str| text.split(',').map(str::to_owned).collect::<Vec<_>>();
			let mut claims = serde_json::json!({ "root": root, "put": list(&put), "get": list(&get) });
			if shape & 0x40 != 0 {
				claims["cluster"] = serde_json::json!(true);
			}
			if let Some(exp) = exp {
				claims["exp"] = serde_json::json!(exp);
			}
			let claims = claims.to_string();
			format!(
				"{}?jwt={}",
				path.split('?').next().unwrap_or_default(),
				token(&[], claims.as_bytes())
			)
		}
	};
	let path = url.split_once('?').map_or(url.as_str(), |(path, _)| path);
	AUTH.with(|auth| {
		if let Ok(grant) = auth.verify_url(&url, now) {
			check(&grant, path, now);
		}
	});
});
