//! (config: being written)
