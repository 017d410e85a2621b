//! The safe Rust wrapper over libtiledb's C API, read side.
//!
//! One type per C handle (`Context`, `Config`, `Group`, `Array`, `ArraySchema`, …), each freed
//! in `Drop` and holding the context that made it. Every call's return code is checked and
//! turned into one [`Error`] carrying libtiledb's own message. Nothing above this module
//! touches a raw pointer: callers get plain Rust values (`SchemaInfo`, `Metadata`, `Member`).
//!
//! Every `unsafe` is written where a pointer is used, with a `// SAFETY:` comment giving the
//! invariant it relies on (`tiledb_call!` has none of its own), and a function that trusts a
//! pointer it is given is an `unsafe fn` with a `# Safety` section. Clippy and the lints below
//! hold CI to that. `scripts/check-ffi` checks `ffi.rs` against TileDB's C headers.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod array;
mod condition;
mod context;
mod datatype;
pub(crate) mod ffi;
mod group;
mod handle;
mod metadata;
mod query;
mod vfs;

pub use array::{
    Array, ArrayType, AttributeInfo, Bounds, DimensionInfo, EnumerationInfo, Fragment,
    FragmentInfo, FragmentShape, Order, SchemaInfo, VAR_NUM,
};
pub use condition::{Comparison, QueryCondition};
pub use context::{Config, Context};
pub use datatype::{Datatype, TimeUnit, Value};
pub use error::{Error, Result};
pub use group::{Group, Member};
pub use metadata::{Metadata, MetadataValue};
pub use query::{
    count_cells, estimated_cells, null_counts, nulls_countable, Batch, BatchCells, CellEstimate,
    ColumnData, ColumnSpec, Layout, ReadQuery, COUNT_MEMORY_BYTES,
};
pub use vfs::Vfs;

mod error;

/// What a URI holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectType {
    Group,
    Array,
    /// Nothing TileDB recognises (`TILEDB_INVALID`): missing, or not a TileDB object.
    Invalid,
}

impl ObjectType {
    pub(crate) fn from_raw(raw: ffi::tiledb_object_t) -> Self {
        match raw {
            ffi::TILEDB_GROUP => ObjectType::Group,
            ffi::TILEDB_ARRAY => ObjectType::Array,
            _ => ObjectType::Invalid,
        }
    }
}
