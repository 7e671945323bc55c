//! `moq-relay`: see the crate README.
#![forbid(unsafe_code)]
fn main() {}
