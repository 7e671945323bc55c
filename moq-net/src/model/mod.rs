//! The pub/sub model: origin → broadcast → track → group → frame.
//!
//! Each level is a producer/consumer pair over kio state ([`kio::sync::Lock`] plus
//! [`kio::WaiterList`]s), with the `poll_x(&Waiter)` + `async fn x` calling convention, so a
//! consumer on any kio worker is woken by a producer on any other. Nothing here spawns tasks or
//! reads the system clock: time comes from [`kio::time::now`], which a test can pause.
//!
//! - [`origin`]: paths to broadcasts, announcement cursors, prefix scoping, hop chains.
//! - [`broadcast`]: named tracks and on-demand track requests.
//! - [`track`]: the group cache (arrival order plus sequence index, latest kept, age expiry,
//!   pool eviction), cursors, and demand aggregation.
//! - [`group`]: append-only frames with streaming reads and a byte cap.
//! - [`frame`]: timestamped payloads.
//! - [`pool`]: the byte budget shared by tracks.

pub mod broadcast;
mod error;
pub mod frame;
pub mod group;
pub mod origin;
pub mod path;
pub mod pool;
pub mod track;

pub use broadcast::{BroadcastConsumer, BroadcastProducer};
pub use error::Error;
pub use frame::{Frame, Timestamp};
pub use group::{GroupConsumer, GroupProducer};
pub use origin::{AnnounceCursor, Origin, OriginConsumer, OriginId, OriginProducer, Publication, Route, Update};
pub use path::Path;
pub use pool::Pool;
pub use track::{Subscription, TrackConsumer, TrackInfo, TrackProducer};
