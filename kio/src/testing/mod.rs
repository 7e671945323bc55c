//! Test-only tools: the exhaustive waiter model checker.

// Loom swaps the crate's locks for its own, which only work inside a loom model.
#[cfg(not(loom))]
mod model;
