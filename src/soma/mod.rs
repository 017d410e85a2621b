//! The SOMA object model: open a URI, recognise what it holds (every SOMA type of the spec,
//! in encodings 1.0.0 and 1.1.0, or a plain TileDB group or array) and describe it.
//!
//! Opening reads an object's metadata and structure (members, or schema) once; nothing here
//! reads array data. The filesystem above asks for objects by URI through a [`Store`], which
//! owns the libtiledb context and the mount's time-travel timestamp.

pub mod anndata;
mod error;
pub mod filter;
#[cfg(test)]
pub mod fixtures;
pub mod joinids;
mod object;
mod read;
mod schema;
mod selected;
mod slice;
mod soma_type;
pub mod spatial;
pub mod tenx;
mod tiles;

pub use error::{Error, Result};
pub use object::{shows_the_past, ArrayData, ArrayObject, GroupObject, Objects, SomaObject, Store};
pub use read::{
    dense_values, BatchReader, MemoryCells, ReadAhead, RowPiece, Selection, BATCH_BYTES,
};
pub use schema::{arrow_type, Column, SomaSchema};
pub use selected::{estimated_cells_along, SelectedRows};
pub use slice::{chunks, counted_cells, estimated_cells};
pub use soma_type::SomaType;
