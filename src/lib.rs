//! soma-mount: a TileDB-SOMA store as a read-only directory tree.
//!
//! Data flows one way: a path names a node of the tree ([`fs`]), the node stands for a SOMA
//! object ([`soma`]) opened through libtiledb ([`tiledb`]), and its files are rendered by
//! [`mod@format`]; a whole container (an AnnData `.h5ad` or Zarr store) is assembled by
//! [`export`] first. Names from the store become file names by one rule ([`names`]). A store on S3 is read through the daemon's own front ([`s3`]), which keeps
//! what every open reads. `src/main.rs` is the command line that mounts it.

pub mod budget;
pub mod digest;
pub mod export;
pub mod fault;
pub mod format;
pub mod fs;
pub mod libtiledb_settings;
pub mod names;
pub mod s3;
pub mod soma;
pub mod sync;
pub mod tiledb;
