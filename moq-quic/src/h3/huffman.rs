//! The HPACK Huffman code (RFC 7541 Appendix B), decoding only: browsers Huffman-code the
//! strings of their requests.

use std::sync::OnceLock;

use super::Error;

/// HPACK's Huffman code (RFC 7541 Appendix B) as the code length of each byte value; the code is
/// canonical (codes of one length are consecutive, in symbol order, after the shorter ones), so
/// the lengths are the whole table. EOS (256) is 30 bits of ones.
pub const HUFFMAN_LENGTHS: [u8; 256] = [
	13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28,
	28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12,
	10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6,
	5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22,
	22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20,
	22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
	26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28,
	27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28,
	27, 27, 27, 27, 27, 26,
];

/// The canonical Huffman decoding tables: per length, the first code and the index of its
/// first symbol in `symbols`.
struct Huffman {
	first_code: [u32; 31],
	first_index: [u16; 31],
	count: [u16; 31],
	symbols: Vec<u8>,
}

fn huffman() -> &'static Huffman {
	static TABLE: OnceLock<Huffman> = OnceLock::new();
	TABLE.get_or_init(|| {
		let mut count = [0u16; 31];
		for &len in &HUFFMAN_LENGTHS {
			count[len as usize] += 1;
		}
		let mut symbols: Vec<u8> = (0..=255).collect();
		symbols.sort_by_key(|&s| HUFFMAN_LENGTHS[s as usize]);
		let (mut first_code, mut first_index) = ([0u32; 31], [0u16; 31]);
		let (mut code, mut index) = (0u32, 0u16);
		for len in 1..31 {
			first_code[len] = code;
			first_index[len] = index;
			code = (code + u32::from(count[len])) << 1;
			index += count[len];
		}
		Huffman {
			first_code,
			first_index,
			count,
			symbols,
		}
	})
}

/// Decodes a Huffman-coded string: the padding must be fewer than 8 bits, all ones (a prefix of
/// EOS), and EOS itself must not appear.
pub fn huffman_decode(input: &[u8]) -> Result<Vec<u8>, Error> {
	let table = huffman();
	let mut out = Vec::with_capacity(input.len() * 8 / 5);
	let (mut code, mut len) = (0u32, 0usize);
	for byte in input {
		for bit in (0..8).rev() {
			code = (code << 1) | u32::from((byte >> bit) & 1);
			len += 1;
			if len > 30 {
				return Err(Error::Qpack);
			}
			let offset = code.wrapping_sub(table.first_code[len]);
			if code >= table.first_code[len] && offset < u32::from(table.count[len]) {
				out.push(table.symbols[(table.first_index[len] as u32 + offset) as usize]);
				code = 0;
				len = 0;
			}
		}
	}
	// Leftover bits: padding, fewer than 8, all ones.
	if len >= 8 || code != (1 << len) - 1 {
		return Err(Error::Qpack);
	}
	Ok(out)
}

#[cfg(test)]
mod tests {
	use super::*;
	use crate::h3::tests::hex;

	#[test]
	fn huffman_decodes_the_rfc_7541_examples() {
		// RFC 7541 C.4.1-C.4.3 and C.6.1.
		let cases = [
			("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
			("a8eb 1064 9cbf", "no-cache"),
			("25a8 49e9 5ba9 7d7f", "custom-key"),
			("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
			("6402", "302"),
			("aec3 771a 4b", "private"),
			(
				"d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
				"Mon, 21 Oct 2013 20:13:21 GMT",
			),
			("9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3", "https://www.example.com"),
		];
		for (coded, text) in cases {
			assert_eq!(huffman_decode(&hex(coded)).unwrap(), text.as_bytes(), "{text}");
		}
	}

	#[test]
	fn huffman_refuses_bad_padding_and_eos() {
		// "0" is 00000; padded with zeros instead of ones.
		assert_eq!(huffman_decode(&[0b0000_0000]), Err(Error::Qpack));
		// Eight bits of padding.
		assert_eq!(huffman_decode(&[0b0000_0111, 0xff]), Err(Error::Qpack));
		// EOS: 30 ones.
		assert_eq!(huffman_decode(&[0xff, 0xff, 0xff, 0xff]), Err(Error::Qpack));
		assert_eq!(huffman_decode(&[0b0000_0111]).unwrap(), b"0");
	}
}
