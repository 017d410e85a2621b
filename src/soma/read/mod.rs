//! Reads: streams of Arrow record batches out of TileDB read queries Arrow record batches out of TileDB read queries: a slice of an array
//! (ranges on its index columns, optionally a filter on a value column), its columns in
//! schema order, rows sorted by the index columns.
//!
//! Sorting is where the time goes: libtiledb's row-major sparse reader is many times slower
//! than its global-order reader. So when an array's tiles and cells are both in row-major
//! order and its index columns are integers (every SOMA ND array, and data frames indexed by
//! `soma_joinid`), the reader reads in global order and sorts one band of tiles (one tile
//! extent of the first dimension) at a time: within a band, cells with the same leading
//! coordinates arrive in increasing order of the last, so a stable sort on the leading
//! coordinates of an almost-sorted band is all it takes. Anything else is read row-major.
//!
//! Bands are counted as libtiledb lays out tiles: from the lower bound of the schema's
//! domain, which tiledbsoma sets far below the current domain (for an int64 column, near
//! the bottom of the int64 range), so a band seldom starts at the current domain's start.
//! The arithmetic is done in `i128`, where no coordinate, bound or extent overflows.
//!
//! Every reader takes its memory from its array's budget ([`ArrayObject::memory_budget`](super::ArrayObject::memory_budget)) when
//! it opens, and gives it back when dropped: a reader that would push the daemon past the
//! budget waits for memory first (see [`reader_memory`](memory::reader_memory)).
//!
//! A read ends only when libtiledb says it has returned everything: a reader thread that
//! dies ([`ReadAhead`]) is an error for its consumer, never an early end, and a dense read
//! that returns fewer or more cells than it selected is an error too.

//!
//! The parts: [`plan`] decides what a read does, before it starts; [`memory`] what it holds;
//! [`reader`] runs the plan's queries, [`batches`] reads from wherever the cells are
//! (libtiledb, or [`cells`] in memory), [`ahead`] reads ahead on threads of their own,
//! [`order`] sorts, [`spans`] reads runs as their span, [`condition`] makes libtiledb's
//! conditions, [`arrow`] converts batches, and [`dense`] reads dense values in C order.

mod ahead;
mod arrow;
mod batches;
mod cells;
mod condition;
mod dense;
mod memory;
mod order;
mod plan;
mod reader;
mod spans;
#[cfg(test)]
mod test_arrays;

use std::sync::Arc;

use crate::tiledb::Value;

use super::filter::Condition;

pub use ahead::ReadAhead;
pub(super) use arrow::labels_array;
pub use batches::BatchReader;
pub use cells::MemoryCells;
pub use dense::{dense_values, DenseCellOrder, RowPiece};
pub use memory::BATCH_BYTES;
pub use plan::dense_rows;

/// What part of an array to read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Per index column, in order: inclusive ranges to read (empty or missing: all of it).
    pub ranges: Vec<Vec<(Value, Value)>>,
    /// Only rows whose column holds this label (`None`: a null), for enumerated columns.
    pub equals: Option<(String, Option<Value>)>,
    /// Only these value columns (index columns are always read); `None`: every column.
    pub columns: Option<Vec<String>>,
    /// Only rows that satisfy this value filter, which libtiledb applies as it reads.
    pub filter: Option<Arc<Condition>>,
}

/// The nulls of each nullable column of `names` among every cell of the sparse `array`,
/// counted without reading their values where libtiledb can (see
/// [`tiledb::null_counts`](crate::tiledb::null_counts)).
pub fn null_counts(
    array: &super::ArrayObject,
    names: &[&str],
) -> super::Result<Vec<(String, u64)>> {
    match array.data() {
        super::ArrayData::Memory(cells) => cells.null_counts(names),
        _ => Ok(crate::tiledb::null_counts(array.handle()?, names)?),
    }
}
