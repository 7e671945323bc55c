//! Sockets on the worker's io_uring: [`UdpSocket`] for the QUIC path, [`TcpListener`] and
//! [`TcpStream`] for HTTP endpoints.
//!
//! This module is safe code; the operations it issues, and the rules that keep the kernel's
//! memory valid, are in the private `uring` module. A socket is `!Send`: it belongs to the worker
//! whose ring runs its operations (bind one socket per worker with
//! [`UdpConfig::reuse_port`] to spread a port over workers).
//!
//! Every operation that may wait follows kio's calling convention: `poll_x(&self or &mut self,
//! waiter)` plus `async fn x`. The exception is [`UdpSocket::send`], which returns a future type
//! ([`UdpSend`]) because the send owns its copy of the payload and may turn into several operations
//! (the GSO fallback); dropping it cancels what is still in flight.

pub mod tcp;
pub mod udp;

pub use tcp::{TcpListener, TcpStream};
pub use udp::{Ecn, MAX_GSO_SEGMENTS, RecvTrain, Segments, Transmit, UdpConfig, UdpSend, UdpSocket, UdpStats};
