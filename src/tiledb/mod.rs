//! The safe Rust wrapper over libtiledb's C API, read side.
//!
//! One type per C handle (`Context`, `Config`, `Group`, `Array`, `ArraySchema`, …), each freed
//! in `Drop` and holding the context that made it. Every call's return code is checked and
//! turned into one [`Error`] carrying libtiledb's own message. Nothing above this module
//! touches a raw pointer: callers get plain Rust values (`SchemaInfo`, `Metadata`, `Member`).

mod array;
mod context;
mod datatype;
pub(crate) mod ffi;
mod group;
mod handle;
mod metadata;
mod query;

pub use array::{
    Array, ArrayType, AttributeInfo, Bounds, DimensionInfo, EnumerationInfo, Fragment,
    FragmentInfo, Order, SchemaInfo, VAR_NUM,
};
pub use context::{Config, Context};
pub use datatype::{Datatype, TimeUnit, Value};
pub use error::{Error, Result};
pub use group::{Group, Member};
pub use metadata::{Metadata, MetadataValue};
pub use query::{
    Batch, BatchSizing, ColumnData, ColumnSpec, Layout, QueryCondition, ReadQuery, TileUnit,
};

mod error;

use context::{c_string, tiledb_call};

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
            ffi::TILEDB_OBJECT_GROUP => ObjectType::Group,
            ffi::TILEDB_OBJECT_ARRAY => ObjectType::Array,
            _ => ObjectType::Invalid,
        }
    }
}

/// Asks libtiledb what is stored at `uri`.
pub fn object_type(ctx: &Context, uri: &str) -> Result<ObjectType> {
    let c_uri = c_string(uri)?;
    let mut raw = 0;
    tiledb_call!(ctx, tiledb_object_type(c_uri.as_ptr(), &mut raw))?;
    Ok(ObjectType::from_raw(raw))
}
