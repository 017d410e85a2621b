//! The filesystem: the tree of directories and generated files over a SOMA store
//! ([`tree`]), the names it shows ([`names`]), open files ([`open_file`]), the on-disk
//! content cache ([`cache`]), and the thin FUSE layer ([`fuse`]) that translates kernel
//! requests into calls on the tree.

pub mod cache;
pub mod fuse;
pub mod names;
mod open_file;
pub mod tree;

pub use cache::ContentCache;
pub use fuse::SomaFs;
pub use tree::{DataOptions, Tree};
