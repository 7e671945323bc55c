//! QMux transport parameters (draft-ietf-quic-qmux-02 §7): RFC 9000 §18's encoding, a sequence
//! of `(id, length, value)`, carried by QX_TRANSPORT_PARAMETERS as the first frame each side
//! sends. QMux keeps QUIC's flow-control and idle parameters, adds `max_record_size`, and
//! prohibits those about packets, paths and connection ids.

use moq_net::coding::{decode_varint, encode_varint, varint_len};

use super::Version;

/// Parameter ids.
pub mod id {
	/// max_idle_timeout, in milliseconds (0: none from this side).
	pub const MAX_IDLE_TIMEOUT: u64 = 0x01;
	/// initial_max_data.
	pub const MAX_DATA: u64 = 0x04;
	/// initial_max_stream_data_bidi_local: our window on bidirectional streams we open.
	pub const MAX_STREAM_DATA_BIDI_LOCAL: u64 = 0x05;
	/// initial_max_stream_data_bidi_remote: our window on bidirectional streams the peer opens.
	pub const MAX_STREAM_DATA_BIDI_REMOTE: u64 = 0x06;
	/// initial_max_stream_data_uni: our window on unidirectional streams the peer opens.
	pub const MAX_STREAM_DATA_UNI: u64 = 0x07;
	/// initial_max_streams_bidi.
	pub const MAX_STREAMS_BIDI: u64 = 0x08;
	/// initial_max_streams_uni.
	pub const MAX_STREAMS_UNI: u64 = 0x09;
	/// max_datagram_frame_size (RFC 9221): absent or 0, no datagrams.
	pub const MAX_DATAGRAM_FRAME_SIZE: u64 = 0x20;
	/// reset_stream_at (empty value): we never send it.
	pub const RESET_STREAM_AT: u64 = 0x1d;
	/// max_record_size (qmux-01 on): the largest record body the sender accepts.
	pub const MAX_RECORD_SIZE: u64 = 0x0571_c594_29cd_0845;
	/// The public implementations' own parameter naming the application protocols (each a
	/// varint length and its bytes), used only on plaintext TCP, where no TLS ALPN or WebSocket
	/// sub-protocol names them; refused anywhere else.
	pub const APPLICATION_PROTOCOLS: u64 = 0x3d4f_9c2a_8b1e_6075;
}

/// The smallest (and default) `max_record_size`: a record of 16,382 bytes and its two-byte size
/// fill one TLS record.
pub const MIN_RECORD_SIZE: u64 = 16_382;

/// QUIC v1 parameters QMux prohibits (about packets, paths and connection ids).
const PROHIBITED: [u64; 10] = [0x00, 0x02, 0x03, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10];

/// One side's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
	/// max_idle_timeout, ms.
	pub idle_timeout_ms: u64,
	/// initial_max_data.
	pub max_data: u64,
	/// initial_max_stream_data_bidi_local.
	pub max_stream_data_bidi_local: u64,
	/// initial_max_stream_data_bidi_remote.
	pub max_stream_data_bidi_remote: u64,
	/// initial_max_stream_data_uni.
	pub max_stream_data_uni: u64,
	/// initial_max_streams_bidi.
	pub max_streams_bidi: u64,
	/// initial_max_streams_uni.
	pub max_streams_uni: u64,
	/// max_datagram_frame_size (0: none).
	pub max_datagram_frame_size: u64,
	/// max_record_size.
	pub max_record_size: u64,
	/// The application protocols offered in order (plaintext TCP only; empty: none).
	pub application_protocols: Vec<String>,
}

impl Default for Params {
	/// What a peer that sends nothing has: zero credit, no datagrams, the minimum record size.
	fn default() -> Self {
		Self {
			idle_timeout_ms: 0,
			max_data: 0,
			max_stream_data_bidi_local: 0,
			max_stream_data_bidi_remote: 0,
			max_stream_data_uni: 0,
			max_streams_bidi: 0,
			max_streams_uni: 0,
			max_datagram_frame_size: 0,
			max_record_size: MIN_RECORD_SIZE,
			application_protocols: Vec::new(),
		}
	}
}

/// Parameters that cannot be taken: the connection is closed with TRANSPORT_PARAMETER_ERROR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamError {
	/// The encoding ends inside a parameter, or a value's length is not its varint's.
	Malformed,
	/// A parameter QMux prohibits.
	Prohibited(u64),
	/// A parameter given twice.
	Duplicate(u64),
	/// A value out of range (`max_record_size` below the minimum, a non-empty `reset_stream_at`,
	/// an empty or malformed list of application protocols).
	Invalid(u64),
}

impl std::fmt::Display for ParamError {
	fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
		match self {
			Self::Malformed => f.write_str("malformed transport parameters"),
			Self::Prohibited(id) => write!(f, "transport parameter {id:#x} is prohibited in QMux"),
			Self::Duplicate(id) => write!(f, "transport parameter {id:#x} given twice"),
			Self::Invalid(id) => write!(f, "transport parameter {id:#x} out of range"),
		}
	}
}

impl Params {
	/// Reads a peer's parameters. Unknown ids are ignored (greasing included).
	pub fn decode(blob: &[u8]) -> Result<Self, ParamError> {
		Self::decode_on(blob, false)
	}

	/// Reads a peer's parameters on plaintext TCP, where they may name application protocols.
	pub fn decode_with_protocols(blob: &[u8]) -> Result<Self, ParamError> {
		Self::decode_on(blob, true)
	}

	fn decode_on(mut blob: &[u8], protocols_allowed: bool) -> Result<Self, ParamError> {
		let mut params = Self::default();
		// The known ids seen, by bit: a repeat is an error.
		let mut seen = 0u16;
		while !blob.is_empty() {
			let param = decode_varint(&mut blob).map_err(|_| ParamError::Malformed)?;
			let len = decode_varint(&mut blob).map_err(|_| ParamError::Malformed)?;
			let len = usize::try_from(len).map_err(|_| ParamError::Malformed)?;
			let Some((mut value, rest)) = blob.split_at_checked(len) else {
				return Err(ParamError::Malformed);
			};
			blob = rest;
			if PROHIBITED.contains(&param) || (param == id::APPLICATION_PROTOCOLS && !protocols_allowed) {
				return Err(ParamError::Prohibited(param));
			}
			if param == id::APPLICATION_PROTOCOLS {
				if seen & (1 << 10) != 0 {
					return Err(ParamError::Duplicate(param));
				}
				seen |= 1 << 10;
				params.application_protocols = decode_protocols(value).ok_or(ParamError::Invalid(param))?;
				continue;
			}
			let slot = match param {
				id::MAX_IDLE_TIMEOUT => Some((0, &mut params.idle_timeout_ms)),
				id::MAX_DATA => Some((1, &mut params.max_data)),
				id::MAX_STREAM_DATA_BIDI_LOCAL => Some((2, &mut params.max_stream_data_bidi_local)),
				id::MAX_STREAM_DATA_BIDI_REMOTE => Some((3, &mut params.max_stream_data_bidi_remote)),
				id::MAX_STREAM_DATA_UNI => Some((4, &mut params.max_stream_data_uni)),
				id::MAX_STREAMS_BIDI => Some((5, &mut params.max_streams_bidi)),
				id::MAX_STREAMS_UNI => Some((6, &mut params.max_streams_uni)),
				id::MAX_DATAGRAM_FRAME_SIZE => Some((7, &mut params.max_datagram_frame_size)),
				id::MAX_RECORD_SIZE => Some((8, &mut params.max_record_size)),
				id::RESET_STREAM_AT => {
					if !value.is_empty() {
						return Err(ParamError::Invalid(param));
					}
					if seen & (1 << 9) != 0 {
						return Err(ParamError::Duplicate(param));
					}
					seen |= 1 << 9;
					None
				}
				_ => None,
			};
			let Some((bit, field)) = slot else {
				continue;
			};
			if seen & (1 << bit) != 0 {
				return Err(ParamError::Duplicate(param));
			}
			seen |= 1 << bit;
			*field = decode_varint(&mut value).map_err(|_| ParamError::Malformed)?;
			if !value.is_empty() {
				return Err(ParamError::Malformed);
			}
		}
		if params.max_record_size < MIN_RECORD_SIZE {
			return Err(ParamError::Invalid(id::MAX_RECORD_SIZE));
		}
		// Stream counts above 2^60 cannot be opened (RFC 9000 §4.6).
		if params.max_streams_bidi > 1 << 60 || params.max_streams_uni > 1 << 60 {
			return Err(ParamError::Invalid(id::MAX_STREAMS_BIDI));
		}
		Ok(params)
	}

	/// Our parameters' encoding for `version`: zero integers are left out, as the public
	/// implementations do; no datagrams on qmux-00 (its frames have no room for them).
	pub fn encode(&self, version: Version) -> Vec<u8> {
		let mut out = Vec::new();
		let mut put = |param: u64, value: u64| {
			if value == 0 {
				return;
			}
			encode_varint(param, &mut out).expect("a parameter id");
			encode_varint(varint_len(value) as u64, &mut out).expect("a length");
			encode_varint(value, &mut out).expect("a value below 2^62");
		};
		put(id::MAX_IDLE_TIMEOUT, self.idle_timeout_ms);
		put(id::MAX_DATA, self.max_data);
		put(id::MAX_STREAM_DATA_BIDI_LOCAL, self.max_stream_data_bidi_local);
		put(id::MAX_STREAM_DATA_BIDI_REMOTE, self.max_stream_data_bidi_remote);
		put(id::MAX_STREAM_DATA_UNI, self.max_stream_data_uni);
		put(id::MAX_STREAMS_BIDI, self.max_streams_bidi);
		put(id::MAX_STREAMS_UNI, self.max_streams_uni);
		if version != Version::Qmux00 {
			put(id::MAX_DATAGRAM_FRAME_SIZE, self.max_datagram_frame_size);
		}
		put(id::MAX_RECORD_SIZE, self.max_record_size);
		if !self.application_protocols.is_empty() {
			let mut list = Vec::new();
			for name in &self.application_protocols {
				encode_varint(name.len() as u64, &mut list).expect("a name's length");
				list.extend_from_slice(name.as_bytes());
			}
			encode_varint(id::APPLICATION_PROTOCOLS, &mut out).expect("a parameter id");
			encode_varint(list.len() as u64, &mut out).expect("a length");
			out.extend_from_slice(&list);
		}
		out
	}
}

/// A list of application protocols: one or more names, each a varint length and UTF-8 bytes.
fn decode_protocols(mut value: &[u8]) -> Option<Vec<String>> {
	let mut names = Vec::new();
	while !value.is_empty() {
		let len = usize::try_from(decode_varint(&mut value).ok()?).ok()?;
		let (name, rest) = value.split_at_checked(len)?;
		names.push(std::str::from_utf8(name).ok()?.to_owned());
		value = rest;
	}
	(!names.is_empty()).then_some(names)
}

#[cfg(test)]
mod tests {
	use super::super::hex;
	use super::*;

	/// What the public implementations send first over a WebSocket on qmux-01 (their defaults),
	/// after the frame's type and length.
	const PUBLIC_DEFAULTS: &str = "01 04 80 00 75 30 04 04 80 10 00 00 05 04 80 04 00 00 06 04 80 04 00 00 \
	                               07 04 80 04 00 00 08 02 40 64 09 02 40 64 20 02 7f fe \
	                               c5 71 c5 94 29 cd 08 45 02 7f fe";

	fn public_defaults() -> Params {
		Params {
			idle_timeout_ms: 30_000,
			max_data: 1 << 20,
			max_stream_data_bidi_local: 256 << 10,
			max_stream_data_bidi_remote: 256 << 10,
			max_stream_data_uni: 256 << 10,
			max_streams_bidi: 100,
			max_streams_uni: 100,
			max_datagram_frame_size: 16_382,
			max_record_size: 16_382,
			application_protocols: Vec::new(),
		}
	}

	#[test]
	fn application_protocols_are_read_on_plaintext_tcp_only() {
		// What the public native client sends first on `tcp://` (its defaults, then the
		// protocols it offers), after the frame's type and length.
		let blob = hex(&format!(
			"{PUBLIC_DEFAULTS} fd 4f 9c 2a 8b 1e 60 75 11 0b 6d 6f 71 2d 6c 69 74 65 2d 30 35 04 6d 6f 71 6c"
		));
		let offered = Params {
			application_protocols: vec!["moq-lite-05".into(), "moql".into()],
			..public_defaults()
		};
		assert_eq!(Params::decode_with_protocols(&blob), Ok(offered.clone()));
		assert_eq!(offered.encode(Version::Qmux01), blob);
		assert_eq!(
			Params::decode(&blob),
			Err(ParamError::Prohibited(id::APPLICATION_PROTOCOLS))
		);
		// An empty list, a name cut short, and a name that is not UTF-8.
		for bad in [
			"fd 4f 9c 2a 8b 1e 60 75 00",
			"fd 4f 9c 2a 8b 1e 60 75 02 05 6d",
			"fd 4f 9c 2a 8b 1e 60 75 02 01 ff",
		] {
			assert_eq!(
				Params::decode_with_protocols(&hex(bad)),
				Err(ParamError::Invalid(id::APPLICATION_PROTOCOLS)),
				"{bad}"
			);
		}
	}

	#[test]
	fn the_public_defaults_read_and_write_byte_for_byte() {
		assert_eq!(Params::decode(&hex(PUBLIC_DEFAULTS)), Ok(public_defaults()));
		assert_eq!(public_defaults().encode(Version::Qmux01), hex(PUBLIC_DEFAULTS));
		// qmux-00 has no datagrams: the parameter is left out.
		let v00 = public_defaults().encode(Version::Qmux00);
		assert_eq!(v00.len(), hex(PUBLIC_DEFAULTS).len() - 4);
		// A peer that says nothing gives no credit, and the minimum record size.
		assert_eq!(Params::decode(&[]), Ok(Params::default()));
		assert_eq!(Params::default().max_record_size, MIN_RECORD_SIZE);
	}

	#[test]
	fn parameters_qmux_prohibits_repeats_and_bad_values_are_refused() {
		// original_destination_connection_id (0x00), max_udp_payload_size (0x03).
		assert_eq!(Params::decode(&hex("00 00")), Err(ParamError::Prohibited(0)));
		assert_eq!(Params::decode(&hex("03 02 44 b0")), Err(ParamError::Prohibited(3)));
		assert_eq!(Params::decode(&hex("04 01 05 04 01 06")), Err(ParamError::Duplicate(4)));
		// max_record_size below 16,382.
		assert_eq!(
			Params::decode(&hex("c5 71 c5 94 29 cd 08 45 02 40 64")),
			Err(ParamError::Invalid(id::MAX_RECORD_SIZE))
		);
		assert_eq!(
			Params::decode(&hex("1d 01 00")),
			Err(ParamError::Invalid(id::RESET_STREAM_AT))
		);
		assert_eq!(
			Params::decode(&hex("1d 00")),
			Ok(Params::default()),
			"an empty reset_stream_at"
		);
		// A value longer than its varint, and a truncated one.
		assert_eq!(Params::decode(&hex("04 02 05 00")), Err(ParamError::Malformed));
		assert_eq!(Params::decode(&hex("04 04 80 00")), Err(ParamError::Malformed));
		// An unknown (greasing) id is skipped.
		assert_eq!(Params::decode(&hex("1b 02 aa bb 04 01 05")).map(|p| p.max_data), Ok(5));
	}
}
