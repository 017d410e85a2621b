//! The filesystem: the tree of directories and generated files over a SOMA store
//! ([`tree`]), the names it shows ([`names`]), and the thin FUSE layer ([`fuse`]) that
//! translates kernel requests into calls on the tree.

pub mod fuse;
pub mod names;
pub mod tree;

pub use fuse::SomaFs;
pub use tree::Tree;
