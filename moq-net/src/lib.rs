//! moq-net: the Media-over-QUIC model, on kio.
//!
//! [`model`] is the pub/sub model a relay caches and fans out with: an [`Origin`] maps paths to
//! [`Broadcast`](model::BroadcastProducer)s, a broadcast holds named tracks, a track caches
//! groups, a group is an ordered list of frames. Every level is a producer/consumer pair over kio
//! state with the `poll_x(&Waiter)` + `async fn x` convention, so consumers can live on any kio
//! worker. The model knows no wire format.
//!
//! [`transport`] abstracts a QUIC connection (streams, datagrams, close codes) and ships an
//! in-memory implementation for tests and benchmarks.
//!
//! [`coding`] holds the wire primitives (varints, strings, paths; incremental, bounded
//! [`Decode`](coding::Decode) / [`Encode`](coding::Encode)); [`lite`] is the moq-lite protocol:
//! every moq-lite-05 message, stream type and error code built from them, and
//! [`lite::session`], the sessions that speak it over a transport. [`ietf`] is the IETF
//! moq-transport drafts 14 and 15 beside it: their messages and [`ietf::session`], serving and
//! filling the same model (docs/moq-transport.md). The model never imports any of them.

#![forbid(unsafe_code)]

pub mod coding;
pub mod ietf;
pub mod lite;
pub mod model;
#[cfg(feature = "test-support")]
pub mod test_support;
pub mod transport;

pub use model::{
	BroadcastConsumer, BroadcastProducer, Error, Frame, GroupConsumer, GroupProducer, Origin, OriginConsumer,
	OriginProducer, Path, Pool, Route, Subscription, Timestamp, TrackConsumer, TrackInfo, TrackProducer,
};
