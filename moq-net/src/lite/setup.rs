//! SETUP: the one message on each side's Setup uni stream (docs/moq-lite-05.md §2.3), `len, count, {id, vlen,
//! value}*count`.
//!
//! Parameters are kept as raw bytes by id in a [`BTreeMap`], so unknown ids survive a decode and
//! re-encode, duplicates are caught on insert, and the encoding is deterministic (ascending id;
//! the spec leaves the order arbitrary). The known parameters are validated on decode (a malformed
//! Origin rejects the SETUP) and read and written through typed accessors.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use super::MAX_PARAMETERS;
use super::message::{decode_message, emit_message};
use crate::coding::{
	Decode, DecodeError, Encode, EncodeError, MAX_STRING_LEN, decode_bytes, decode_len, decode_varint, encode_bytes,
	encode_varint,
};

/// SETUP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Setup {
	/// Parameter values by id. Known ids hold the encodings their accessors write; at most
	/// [`MAX_PARAMETERS`] entries, each at most [`MAX_STRING_LEN`] bytes.
	pub params: BTreeMap<u64, Vec<u8>>,
}

/// The Probe parameter's level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeLevel {
	/// 0: no probing.
	None,
	/// 1: the sender reports its bitrate and RTT.
	Report,
	/// 2 (and any unknown level): the sender may raise its rate to probe.
	Increase,
}

/// The Role parameter: what the client means to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
	/// 0, any unknown value, or the parameter omitted: both publish and subscribe.
	Both,
	/// 1: publish only.
	Publisher,
	/// 2: subscribe only.
	Subscriber,
}

impl Setup {
	/// Probe (0x1): the probe level, varint.
	pub const PROBE: u64 = 0x1;
	/// Path (0x2): the connection path and query, UTF-8 bytes; raw QUIC clients only.
	pub const PATH: u64 = 0x2;
	/// Role (0x3): [`Role`], varint; clients only.
	pub const ROLE: u64 = 0x3;
	/// Cost (0x4): the link price, varint.
	pub const COST: u64 = 0x4;
	/// Origin (0x5): the sender's origin (hop) id, varint; 0 = none.
	pub const ORIGIN: u64 = 0x5;

	/// An empty SETUP: what a relay with nothing to say sends.
	pub fn new() -> Self {
		Self::default()
	}

	/// The raw value of parameter `id`.
	pub fn param(&self, id: u64) -> Option<&[u8]> {
		self.params.get(&id).map(Vec::as_slice)
	}

	fn varint(&self, id: u64) -> Option<u64> {
		// A value that is not exactly one varint can only have been set locally through `params`
		// (decode rejects it): it reads as absent.
		u64::decode_exact(self.param(id)?).ok()
	}

	fn set_varint(&mut self, id: u64, value: u64) {
		let mut bytes = Vec::with_capacity(8);
		// Values above the varint range clamp: ids and costs never get there.
		let _ = encode_varint(value.min(crate::coding::VARINT_MAX), &mut bytes);
		self.params.insert(id, bytes);
	}

	/// The Probe parameter, if present.
	pub fn probe(&self) -> Option<ProbeLevel> {
		self.varint(Self::PROBE).map(|level| match level {
			0 => ProbeLevel::None,
			1 => ProbeLevel::Report,
			_ => ProbeLevel::Increase,
		})
	}

	/// Sets the Probe parameter.
	pub fn set_probe(&mut self, level: ProbeLevel) {
		let value = match level {
			ProbeLevel::None => 0,
			ProbeLevel::Report => 1,
			ProbeLevel::Increase => 2,
		};
		self.set_varint(Self::PROBE, value);
	}

	/// The Path parameter (`path[?query]`), if present.
	pub fn path(&self) -> Option<&str> {
		std::str::from_utf8(self.param(Self::PATH)?).ok()
	}

	/// Sets the Path parameter, or removes it when `path` is empty (the spec omits it then).
	pub fn set_path(&mut self, path: &str) {
		if path.is_empty() {
			self.params.remove(&Self::PATH);
		} else {
			self.params.insert(Self::PATH, path.as_bytes().to_vec());
		}
	}

	/// The Role parameter; [`Role::Both`] when absent.
	pub fn role(&self) -> Role {
		match self.varint(Self::ROLE) {
			Some(1) => Role::Publisher,
			Some(2) => Role::Subscriber,
			_ => Role::Both,
		}
	}

	/// Sets the Role parameter; [`Role::Both`] removes it (the spec omits it then).
	pub fn set_role(&mut self, role: Role) {
		match role {
			Role::Both => {
				self.params.remove(&Self::ROLE);
			}
			Role::Publisher => self.set_varint(Self::ROLE, 1),
			Role::Subscriber => self.set_varint(Self::ROLE, 2),
		}
	}

	/// The Cost parameter, if present.
	pub fn cost(&self) -> Option<u64> {
		self.varint(Self::COST)
	}

	/// Sets the Cost parameter.
	pub fn set_cost(&mut self, cost: u64) {
		self.set_varint(Self::COST, cost);
	}

	/// The Origin parameter (0 = none), if present.
	pub fn origin(&self) -> Option<u64> {
		self.varint(Self::ORIGIN)
	}

	/// Sets the Origin parameter.
	pub fn set_origin(&mut self, origin: u64) {
		self.set_varint(Self::ORIGIN, origin);
	}

	/// With the Probe parameter.
	pub fn with_probe(mut self, level: ProbeLevel) -> Self {
		self.set_probe(level);
		self
	}

	/// With the Path parameter (none if empty).
	pub fn with_path(mut self, path: &str) -> Self {
		self.set_path(path);
		self
	}

	/// With the Role parameter (none for [`Role::Both`]).
	pub fn with_role(mut self, role: Role) -> Self {
		self.set_role(role);
		self
	}

	/// With the Cost parameter.
	pub fn with_cost(mut self, cost: u64) -> Self {
		self.set_cost(cost);
		self
	}

	/// With the Origin parameter.
	pub fn with_origin(mut self, origin: u64) -> Self {
		self.set_origin(origin);
		self
	}
}

/// Rejects a known parameter whose value is malformed; unknown ids pass as they are.
fn check_param(id: u64, value: &[u8]) -> Result<(), DecodeError> {
	match id {
		Setup::PATH => std::str::from_utf8(value)
			.map(drop)
			.map_err(|_| DecodeError::InvalidUtf8),
		Setup::PROBE | Setup::ROLE | Setup::COST | Setup::ORIGIN => {
			let mut value = value;
			decode_varint(&mut value).map_err(|_| DecodeError::InvalidValue("setup parameter"))?;
			match value.is_empty() {
				true => Ok(()),
				false => Err(DecodeError::InvalidValue("setup parameter")),
			}
		}
		_ => Ok(()),
	}
}

impl Decode for Setup {
	fn decode(buf: &mut &[u8]) -> Result<Self, DecodeError> {
		decode_message(buf, |body| {
			let count = decode_len(body, MAX_PARAMETERS).map_err(|err| match err {
				DecodeError::BoundsExceeded => DecodeError::TooManyParameters,
				err => err,
			})?;
			let mut params = BTreeMap::new();
			for _ in 0..count {
				let id = decode_varint(body)?;
				let value = decode_bytes(body, MAX_STRING_LEN)?;
				check_param(id, value)?;
				match params.entry(id) {
					Entry::Occupied(_) => return Err(DecodeError::DuplicateParameter(id)),
					Entry::Vacant(slot) => slot.insert(value.to_vec()),
				};
			}
			Ok(Self { params })
		})
	}
}

impl Encode for Setup {
	fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
		if self.params.len() > MAX_PARAMETERS {
			return Err(EncodeError::TooManyParameters);
		}
		emit_message(out, |out| {
			(self.params.len() as u64).emit(out)?;
			for (id, value) in &self.params {
				id.emit(out)?;
				encode_bytes(value, MAX_STRING_LEN, out)?;
			}
			Ok(())
		})
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn accessors_round_trip() {
		let setup = Setup::new()
			.with_probe(ProbeLevel::Report)
			.with_path("/anon?jwt=x")
			.with_role(Role::Subscriber)
			.with_cost(7)
			.with_origin(0x4321);
		let mut out = Vec::new();
		setup.encode(&mut out);
		let back = Setup::decode_exact(&out).unwrap();
		assert_eq!(back, setup);
		assert_eq!(back.probe(), Some(ProbeLevel::Report));
		assert_eq!(back.path(), Some("/anon?jwt=x"));
		assert_eq!(back.role(), Role::Subscriber);
		assert_eq!(back.cost(), Some(7));
		assert_eq!(back.origin(), Some(0x4321));
		assert_eq!(Setup::new().with_role(Role::Both).with_path("").params.len(), 0);
		assert_eq!(Setup::new().role(), Role::Both);
	}

	#[test]
	fn unknown_levels_and_roles_read_as_the_spec_says() {
		let mut setup = Setup::new();
		setup.params.insert(Setup::PROBE, vec![9]);
		setup.params.insert(Setup::ROLE, vec![9]);
		assert_eq!(setup.probe(), Some(ProbeLevel::Increase));
		assert_eq!(setup.role(), Role::Both);
	}
}
