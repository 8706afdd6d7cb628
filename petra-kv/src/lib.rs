//! A key-value store (pmemkv-style) and an embedded metric store for monitoring daemons, on the
//! PETRA engine.
//!
//! Nothing is built here yet: the store needs the transaction engine and the hash map and skiplist
//! structures, which do not exist yet. This crate holds the place in the workspace.
