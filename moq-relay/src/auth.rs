//! (auth: being written)
