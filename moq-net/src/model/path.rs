//! Segment-aware broadcast paths.

use std::fmt;

/// The longest broadcast path, in bytes, as sent on the wire.
pub const MAX_PATH_LEN: usize = 1024;

/// The most segments a broadcast path may have (docs/moq-lite-05.md §2.2).
pub const MAX_PATH_SEGMENTS: usize = 32;

/// A broadcast path: `/`-separated segments, stored without leading, trailing or doubled
/// slashes. Prefixes match whole segments: `a/b` is a prefix of `a/b/c`, not of `a/bc`.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Path(String);

impl Path {
	/// Normalises `path`.
	pub fn new(path: &str) -> Self {
		let mut out = String::with_capacity(path.len());
		for segment in path.split('/').filter(|segment| !segment.is_empty()) {
			if !out.is_empty() {
				out.push('/');
			}
			out.push_str(segment);
		}
		Self(out)
	}

	/// The normalised text.
	pub fn as_str(&self) -> &str {
		&self.0
	}

	/// The number of segments (0 for the root).
	pub fn segments(&self) -> usize {
		match self.0.is_empty() {
			true => 0,
			false => self.0.bytes().filter(|&b| b == b'/').count() + 1,
		}
	}

	/// Whether the path fits the wire everywhere it can be seen from: at most [`MAX_PATH_LEN`]
	/// bytes and [`MAX_PATH_SEGMENTS`] segments. An origin checks every path it builds by joining
	/// a root and a peer's suffix, so no announcement it makes can fail to encode for a watcher
	/// rooted above it.
	pub fn fits(&self) -> bool {
		self.0.len() <= MAX_PATH_LEN && self.segments() <= MAX_PATH_SEGMENTS
	}

	/// Whether this is the root (no segments).
	pub fn is_empty(&self) -> bool {
		self.0.is_empty()
	}

	/// Whether `prefix` is this path or one of its ancestors.
	pub fn has_prefix(&self, prefix: &Self) -> bool {
		self.strip_prefix(prefix).is_some()
	}

	/// This path relative to `prefix`, if `prefix` is a segment prefix of it.
	pub fn strip_prefix(&self, prefix: &Self) -> Option<Self> {
		if prefix.is_empty() {
			return Some(self.clone());
		}
		let rest = self.0.strip_prefix(prefix.as_str())?;
		match rest.strip_prefix('/') {
			Some(rest) => Some(Self(rest.to_owned())),
			None if rest.is_empty() => Some(Self::default()),
			None => None,
		}
	}

	/// `self/other`.
	pub fn join(&self, other: &Self) -> Self {
		match (self.is_empty(), other.is_empty()) {
			(true, _) => other.clone(),
			(_, true) => self.clone(),
			_ => Self(format!("{}/{}", self.0, other.0)),
		}
	}
}

impl From<&str> for Path {
	fn from(path: &str) -> Self {
		Self::new(path)
	}
}

impl fmt::Display for Path {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		f.write_str(&self.0)
	}
}

impl fmt::Debug for Path {
	fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
		write!(f, "{:?}", self.0)
	}
}

#[cfg(test)]
mod tests {
	use super::*;

	#[test]
	fn prefixes_match_whole_segments() {
		let path = Path::new("/live//room/cam/");
		assert_eq!(path.as_str(), "live/room/cam");
		assert!(path.has_prefix(&Path::new("live/room")));
		assert!(path.has_prefix(&Path::new("")));
		assert!(path.has_prefix(&path));
		assert!(!path.has_prefix(&Path::new("live/ro")));
		assert_eq!(path.strip_prefix(&Path::new("live")), Some(Path::new("room/cam")));
		assert_eq!(path.strip_prefix(&path), Some(Path::new("")));
		assert_eq!(Path::new("a").join(&Path::new("b/c")), Path::new("a/b/c"));
	}
}
