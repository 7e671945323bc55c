//! The moq-lite-05 relay.
#![forbid(unsafe_code)]
