//! (http: being written)
