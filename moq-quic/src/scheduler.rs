//! The send scheduler (being written).
