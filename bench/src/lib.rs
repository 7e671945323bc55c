//! Benchmarks that count instructions, not seconds.
//!
//! [`counter`] picks the best source the host has: user-space instructions from
//! `perf_event_open` (a PMU); otherwise an exact count under callgrind (the harness re-runs
//! itself under `valgrind --tool=callgrind` with N cycles and with zero, and subtracts, so set-up
//! cancels out); otherwise task-clock time. Every number printed carries its unit and its source.
//!
//! [`fanout`] holds the fan-out harnesses; [`load`] the relay load generator (publishers and
//! subscribers over QUIC, latency and loss per delivered frame); [`timed`] the pieces of the harnesses that measure CPU
//! time on a live runtime; [`report`] writes results (`bench/results/*.json`,
//! one object per line, plus a markdown table) and compares revisions side by side.

#![forbid(unsafe_code)]

pub mod counter;
pub mod fanout;
pub mod load;
pub mod report;
pub mod timed;
