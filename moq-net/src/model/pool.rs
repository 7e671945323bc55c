//! The cache pool: one byte budget shared by many tracks.
//!
//! Groups charge their payload bytes plus [`ENTRY_OVERHEAD`] per frame when frames are written,
//! and give them back when their track evicts them, when the group's cap sheds them, or when the
//! last handle drops. While the pool is over its capacity, a track that creates a group first
//! evicts its own stalest non-latest groups, so the cost of pressure falls on the tracks that
//! write. A charge that would take the pool past its capacity is refused: latest groups are never
//! evicted, so without that refusal many tracks' latest groups together could exceed any budget.
//!
//! A pool may have a **parent** (`Pool::child`): a charge counts against both, and is refused if
//! either is full. A relay gives each session a child of its cache pool, so one publisher can
//! fill its own share and no more.

/// Bytes charged per cached frame beyond its payload (bookkeeping, allocation slack).
pub const ENTRY_OVERHEAD: u64 = 256;

/// The cache's byte budget: kio's [`Budget`](kio::sync::Budget), its charges the groups' frames.
pub type Pool = kio::sync::Budget;
