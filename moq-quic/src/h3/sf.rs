//! Structured-field strings and lists of them (RFC 8941 §3.3.3), for `wt-available-protocols`
//! and `wt-protocol`.

use super::Error;

/// An RFC 8941 sf-string from the front of `text`, and what follows it.
pub(super) fn parse_string(text: &str) -> Result<(String, &str), Error> {
	let invalid = Error::Message("not a structured-field string");
	let Some(rest) = text.strip_prefix('"') else {
		return Err(invalid);
	};
	let mut out = String::new();
	let mut chars = rest.char_indices();
	while let Some((at, c)) = chars.next() {
		match c {
			'"' => return Ok((out, &rest[at + 1..])),
			'\\' => match chars.next() {
				Some((_, escaped @ ('"' | '\\'))) => out.push(escaped),
				_ => return Err(invalid),
			},
			' '..='~' => out.push(c),
			_ => return Err(invalid),
		}
	}
	Err(invalid)
}

/// An RFC 8941 list of sf-strings (`"a", "b"`); parameters after a member are skipped. Members
/// of other types are refused, as the draft requires strings.
pub fn parse_string_list(text: &str) -> Result<Vec<String>, Error> {
	let mut out = Vec::new();
	let mut rest = text.trim_matches([' ', '\t']);
	while !rest.is_empty() {
		let (member, after) = parse_string(rest)?;
		out.push(member);
		// Skip parameters (`;key=value`) up to the next comma.
		let after = after.split_once(',').map_or("", |(params, next)| {
			let _ = params;
			next
		});
		rest = after.trim_start_matches([' ', '\t']);
	}
	Ok(out)
}

/// An sf-string.
pub fn format_string(text: &str) -> String {
	let mut out = String::with_capacity(text.len() + 2);
	out.push('"');
	for c in text.chars().filter(|c| (' '..='~').contains(c)) {
		if c == '"' || c == '\\' {
			out.push('\\');
		}
		out.push(c);
	}
	out.push('"');
	out
}

/// An sf-list of strings.
pub fn format_string_list(items: &[String]) -> String {
	items
		.iter()
		.map(|item| format_string(item))
		.collect::<Vec<_>>()
		.join(", ")
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn structured_field_strings() {
		assert_eq!(
			parse_string_list(r#""moq-lite-05", "a\"b";q=1,"c""#).unwrap(),
			["moq-lite-05", "a\"b", "c"]
		);
		assert!(parse_string_list("token").is_err());
		assert_eq!(format_string("a\"b"), r#""a\"b""#);
		assert_eq!(
			parse_string_list(&format_string_list(&["x".into(), "y".into()])).unwrap(),
			["x", "y"]
		);
	}
}
