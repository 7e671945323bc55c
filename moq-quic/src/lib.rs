//! QUIC on quinn-proto, driven by kio.
#![forbid(unsafe_code)]

pub mod scheduler;
