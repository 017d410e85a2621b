//! soma-mount: a TileDB-SOMA store as a read-only directory tree.
//!
//! Data flows one way: a path names a node of the tree ([`fs`]), the node stands for a SOMA
//! object ([`soma`]) opened through libtiledb ([`tiledb`]), and its files are rendered by
//! [`format`]. `src/main.rs` is the command line that mounts it.

pub mod budget;
pub mod digest;
pub mod fault;
pub mod format;
pub mod fs;
pub mod soma;
pub mod sync;
pub mod tiledb;
