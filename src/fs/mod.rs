//! The filesystem: the tree of directories and generated files over a SOMA store
//! ([`tree`]), the names it shows ([`crate::names`]), open files ([`open_file`]), the on-disk
//! content cache ([`cache`]), and the thin FUSE layer ([`fuse`]) that translates kernel
//! requests into calls on the tree.

pub mod activity;
pub mod cache;
mod data;
mod dirs;
pub mod error;
mod files;
pub mod fuse;
mod open_file;
pub mod slice_name;
pub mod tree;

#[cfg(test)]
mod reads_tests;
#[cfg(test)]
mod tests;

pub use cache::ContentCache;
pub use data::DataOptions;
pub use files::{describe_status, STATUS_NAME};
pub use fuse::SomaFs;
pub use tree::Tree;
