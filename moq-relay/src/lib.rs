//! The relay: one [`Relay`](relay::Relay) shared by every worker, served over raw QUIC,
//! WebTransport and QMux on TCP, with auth, limits, HTTP, metrics, shutdown and clusters.
//!
//! # Rooms
//!
//! | module | what it owns |
//! |---|---|
//! | [`server`] | start: the runtime, one worker per thread, their endpoints; shutdown |
//! | `listen` | where connections come in: each worker's QUIC accept loop, the HTTP listener |
//! | `connection` | a connection's life: admission, opening its transport (SETUP, a CONNECT), auth, the session scoped by the grant |
//! | [`relay`] | what every worker shares: the origin, auth, limits, the cache pool, counters, paces |
//! | [`auth`] | tokens and anonymous grants |
//! | [`limits`], [`config`] | the configuration: flags, the file, resolved limits |
//! | `certificates` | loading, generating and renewing the certificate |
//! | [`metrics`] | `/metrics`: every counter the relay keeps, and the exposition |
//! | [`http`] | the TCP port: HTTP endpoints, TLS, and what it hands over (WebSocket upgrades, QMux) |
//! | `qmux` | QMux on the TCP port (over a WebSocket, TLS, or plaintext): admission, auth, the session |
//! | [`cluster`] | links with other relays, discovery, and a simulated cluster |
//!
//! The client (`moq-clock`, the load generator, the tests and the cluster's links) is the
//! `moq-client` crate.
#![forbid(unsafe_code)]

pub mod auth;
mod certificates;
pub mod cluster;
pub mod config;
mod connection;
pub mod http;
pub mod limits;
mod listen;
pub mod metrics;
mod qmux;
pub mod relay;
pub mod server;
