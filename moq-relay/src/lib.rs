//! The moq-lite-05 relay.
#![forbid(unsafe_code)]

pub mod auth;
pub mod client;
pub mod cluster;
pub mod config;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod server;
