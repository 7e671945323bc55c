//! JSON Web Tokens verified by hand on `ring`, and the key file (see the module docs of
//! [`crate::auth`] for what is accepted and why).

use std::collections::HashSet;
use std::path::Path as FsPath;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use ring::{hmac, signature};
use serde::Deserialize;

use super::{AuthError, MAX_TOKEN, Reason, refuse};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Alg {
	Hs256,
	Hs384,
	Hs512,
	Es256,
	EdDsa,
}

impl Alg {
	fn parse(name: &str) -> Option<Self> {
		Some(match name {
			"HS256" => Self::Hs256,
			"HS384" => Self::Hs384,
			"HS512" => Self::Hs512,
			"ES256" => Self::Es256,
			"EdDSA" | "Ed25519" => Self::EdDsa,
			_ => return None,
		})
	}

	fn hmac(self) -> Option<hmac::Algorithm> {
		match self {
			Self::Hs256 => Some(hmac::HMAC_SHA256),
			Self::Hs384 => Some(hmac::HMAC_SHA384),
			Self::Hs512 => Some(hmac::HMAC_SHA512),
			Self::Es256 | Self::EdDsa => None,
		}
	}
}

#[derive(Debug)]
enum Material {
	Hmac(Vec<u8>),
	/// The uncompressed point, `04 || x || y`.
	P256(Vec<u8>),
	Ed25519(Vec<u8>),
}

#[derive(Debug)]
struct Key {
	kid: Option<String>,
	alg: Option<Alg>,
	material: Material,
}

impl Key {
	fn takes(&self, alg: Alg) -> bool {
		if self.alg.is_some_and(|own| own != alg) {
			return false;
		}
		match (&self.material, alg.hmac()) {
			// RFC 7518 3.2: an HMAC key at least as long as the hash output.
			(Material::Hmac(secret), Some(hmac)) => secret.len() >= hmac.digest_algorithm().output_len(),
			(Material::P256(_), None) => alg == Alg::Es256,
			(Material::Ed25519(_), None) => alg == Alg::EdDsa,
			_ => false,
		}
	}

	fn verifies(&self, alg: Alg, message: &[u8], sig: &[u8]) -> bool {
		match (&self.material, alg.hmac()) {
			(Material::Hmac(secret), Some(hmac)) => hmac::verify(&hmac::Key::new(hmac, secret), message, sig).is_ok(),
			(Material::P256(point), None) => {
				signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
					.verify(message, sig)
					.is_ok()
			}
			(Material::Ed25519(x), None) => signature::UnparsedPublicKey::new(&signature::ED25519, x)
				.verify(message, sig)
				.is_ok(),
			_ => false,
		}
	}
}

/// Verification keys, from a JWK set.
#[derive(Debug, Default)]
pub struct Keys {
	keys: Vec<Key>,
}

#[derive(Deserialize)]
struct RawJwk {
	kty: String,
	alg: Option<String>,
	kid: Option<String>,
	#[serde(rename = "use")]
	use_: Option<String>,
	key_ops: Option<Vec<String>>,
	crv: Option<String>,
	k: Option<String>,
	x: Option<String>,
	y: Option<String>,
}

impl Keys {
	/// Reads a key file (see the [module docs](crate::auth)).
	pub fn load(path: &FsPath) -> anyhow::Result<Self> {
		let text =
			std::fs::read_to_string(path).with_context(|| format!("auth: reading key file {}", path.display()))?;
		Self::parse(&text).with_context(|| format!("auth: key file {}", path.display()))
	}

	/// Parses a JWK set, or a single JWK.
	pub fn parse(json: &str) -> anyhow::Result<Self> {
		let value: serde_json::Value = serde_json::from_str(json).context("not JSON")?;
		let raw: Vec<RawJwk> = match value.get("keys") {
			Some(keys) => serde_json::from_value(keys.clone()).context("`keys` is not a list of JWKs")?,
			None => vec![serde_json::from_value(value).context("neither a JWK set nor a JWK")?],
		};
		if raw.is_empty() {
			bail!("no keys");
		}
		let mut kids = HashSet::new();
		let mut keys = Vec::with_capacity(raw.len());
		for (i, jwk) in raw.into_iter().enumerate() {
			let key = Self::key(jwk).with_context(|| format!("key {i}"))?;
			if let Some(kid) = &key.kid
				&& !kids.insert(kid.clone())
			{
				bail!("key {i}: kid {kid:?} used twice");
			}
			keys.push(key);
		}
		Ok(Self { keys })
	}

	fn key(jwk: RawJwk) -> anyhow::Result<Key> {
		if let Some(use_) = &jwk.use_
			&& use_ != "sig"
		{
			bail!("`use` is {use_:?}, not \"sig\"");
		}
		if let Some(ops) = &jwk.key_ops
			&& !ops.iter().any(|op| op == "verify")
		{
			bail!("`key_ops` does not include \"verify\"");
		}
		let alg = match &jwk.alg {
			Some(name) => Some(Alg::parse(name).with_context(|| format!("unsupported alg {name:?}"))?),
			None => None,
		};
		let field = |name: &str, value: &Option<String>| -> anyhow::Result<Vec<u8>> {
			let text = value.as_deref().with_context(|| format!("missing `{name}`"))?;
			base64url_decode(text).with_context(|| format!("`{name}` is not base64url"))
		};
		let material = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
			("oct", _) => {
				let secret = field("k", &jwk.k)?;
				let shortest = alg.and_then(Alg::hmac).unwrap_or(hmac::HMAC_SHA256);
				let needed = shortest.digest_algorithm().output_len();
				if secret.len() < needed {
					bail!("an HMAC key of {} bytes; at least {needed} are needed", secret.len());
				}
				if alg.is_some_and(|alg| alg.hmac().is_none()) {
					bail!("alg {:?} with an `oct` key", jwk.alg.unwrap_or_default());
				}
				Material::Hmac(secret)
			}
			("EC", Some("P-256")) => {
				let (x, y) = (field("x", &jwk.x)?, field("y", &jwk.y)?);
				if x.len() != 32 || y.len() != 32 {
					bail!("P-256 coordinates must be 32 bytes");
				}
				if alg.is_some_and(|alg| alg != Alg::Es256) {
					bail!("a P-256 key takes only ES256");
				}
				Material::P256([&[4][..], &x, &y].concat())
			}
			("OKP", Some("Ed25519")) => {
				let x = field("x", &jwk.x)?;
				if x.len() != 32 {
					bail!("an Ed25519 key must be 32 bytes");
				}
				if alg.is_some_and(|alg| alg != Alg::EdDsa) {
					bail!("an Ed25519 key takes only EdDSA");
				}
				Material::Ed25519(x)
			}
			(kty, crv) => bail!("unsupported key type {kty:?} (curve {crv:?}); supported: oct, EC P-256, OKP Ed25519"),
		};
		Ok(Key {
			kid: jwk.kid,
			alg,
			material,
		})
	}

	/// The number of keys.
	pub fn len(&self) -> usize {
		self.keys.len()
	}

	/// Whether there are none.
	pub fn is_empty(&self) -> bool {
		self.keys.is_empty()
	}

	/// Checks `token`'s signature, then its times; returns its claims.
	pub(super) fn verify(&self, token: &str, now: SystemTime) -> Result<Claims, AuthError> {
		if token.len() > MAX_TOKEN {
			return refuse(Reason::Malformed);
		}
		let mut parts = token.split('.');
		let (Some(header_b64), Some(claims_b64), Some(sig_b64), None) =
			(parts.next(), parts.next(), parts.next(), parts.next())
		else {
			return refuse(Reason::Malformed);
		};
		let header: Header = decode_json(header_b64)?;
		if header.crit.is_some() {
			// RFC 7515 4.1.11: extensions we do not understand must not be ignored.
			return refuse(Reason::Malformed);
		}
		if header.alg.eq_ignore_ascii_case("none") || sig_b64.is_empty() {
			return refuse(Reason::Unsigned);
		}
		let Some(alg) = Alg::parse(&header.alg) else {
			return refuse(Reason::Algorithm);
		};
		let sig = base64url_decode(sig_b64).ok_or(AuthError::Unauthorized(Reason::Malformed))?;
		let candidates: Vec<&Key> = match &header.kid {
			Some(kid) => self.keys.iter().filter(|key| key.kid.as_ref() == Some(kid)).collect(),
			None => self.keys.iter().collect(),
		};
		if candidates.is_empty() {
			return refuse(Reason::UnknownKey);
		}
		let message = &token.as_bytes()[..header_b64.len() + 1 + claims_b64.len()];
		let mut any = false;
		let mut verified = false;
		for key in candidates.into_iter().filter(|key| key.takes(alg)) {
			any = true;
			if key.verifies(alg, message, &sig) {
				verified = true;
				break;
			}
		}
		if !any {
			return refuse(Reason::Algorithm);
		}
		if !verified {
			return refuse(Reason::BadSignature);
		}
		let claims: RawClaims = decode_json(claims_b64)?;
		let exp = claims.exp.map(numeric_date).transpose()?;
		let nbf = claims.nbf.map(numeric_date).transpose()?;
		if exp.is_some_and(|exp| now >= exp) {
			return refuse(Reason::Expired);
		}
		if nbf.is_some_and(|nbf| now < nbf) {
			return refuse(Reason::NotYetValid);
		}
		Ok(Claims {
			root: claims.root,
			put: claims.put.into(),
			get: claims.get.into(),
			exp,
			cluster: claims.cluster,
			subject: claims.sub,
		})
	}
}

#[derive(Deserialize)]
struct Header {
	alg: String,
	kid: Option<String>,
	crit: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawClaims {
	#[serde(default)]
	root: String,
	#[serde(default)]
	put: OneOrMany,
	#[serde(default)]
	get: OneOrMany,
	exp: Option<f64>,
	nbf: Option<f64>,
	#[serde(default)]
	cluster: bool,
	sub: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
	One(String),
	Many(Vec<String>),
}

impl Default for OneOrMany {
	fn default() -> Self {
		Self::Many(Vec::new())
	}
}

impl From<OneOrMany> for Vec<String> {
	fn from(value: OneOrMany) -> Self {
		match value {
			OneOrMany::One(one) => vec![one],
			OneOrMany::Many(many) => many,
		}
	}
}

/// What a verified token says.
pub(super) struct Claims {
	pub(super) root: String,
	pub(super) put: Vec<String>,
	pub(super) get: Vec<String>,
	pub(super) exp: Option<SystemTime>,
	pub(super) cluster: bool,
	pub(super) subject: Option<String>,
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Result<T, AuthError> {
	let bytes = base64url_decode(part).ok_or(AuthError::Unauthorized(Reason::Malformed))?;
	serde_json::from_slice(&bytes).map_err(|_| AuthError::Unauthorized(Reason::Malformed))
}

/// A NumericDate (seconds since the epoch, possibly fractional) as a time.
fn numeric_date(seconds: f64) -> Result<SystemTime, AuthError> {
	Duration::try_from_secs_f64(seconds)
		.ok()
		.and_then(|since| SystemTime::UNIX_EPOCH.checked_add(since))
		.ok_or(AuthError::Unauthorized(Reason::Malformed))
}

/// base64url without padding (RFC 7515 §2).
pub fn base64url_encode(data: &[u8]) -> String {
	data_encoding::BASE64URL_NOPAD.encode(data)
}

/// Decodes base64url without padding. Strict: padding, other characters, and unused low bits
/// that are not zero are refused, so one token has one spelling.
pub fn base64url_decode(text: &str) -> Option<Vec<u8>> {
	data_encoding::BASE64URL_NOPAD.decode(text.as_bytes()).ok()
}

/// `header.claims.signature` with `sign` computing the signature over `header.claims`.
pub fn encode(header: &serde_json::Value, claims: &serde_json::Value, sign: impl FnOnce(&[u8]) -> Vec<u8>) -> String {
	encode_bytes(header.to_string().as_bytes(), claims.to_string().as_bytes(), sign)
}

/// [`encode`] of a header and claims given as bytes, JSON or not (the fuzz target forges both).
pub fn encode_bytes(header: &[u8], claims: &[u8], sign: impl FnOnce(&[u8]) -> Vec<u8>) -> String {
	let mut token = base64url_encode(header);
	token.push('.');
	token.push_str(&base64url_encode(claims));
	let sig = sign(token.as_bytes());
	token.push('.');
	token.push_str(&base64url_encode(&sig));
	token
}

/// An HS256 token with `claims`, for tests and the example client.
pub fn sign_hs256(claims: &serde_json::Value, key: &[u8]) -> String {
	let header = serde_json::json!({"alg": "HS256", "typ": "JWT"});
	encode(&header, claims, |message| hs256(key, message))
}

/// The HS256 signature of `message` with `key`.
pub fn hs256(key: &[u8], message: &[u8]) -> Vec<u8> {
	hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), message)
		.as_ref()
		.to_vec()
}
