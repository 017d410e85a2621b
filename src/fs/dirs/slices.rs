//! `slices/` of a table: a directory per format, each the table's chunks in that format (a
//! dataset that polars, Spark and Dask read whole), and any slice opened by its name.

use crate::format::TableFormat;
use crate::soma::{self, ArrayObject};
use crate::tiledb::Value;

use super::super::files::{Shown, Table, TableFile};
use super::super::slice_name::{self, ColumnKind, SliceName, SliceRange};
use super::{dir, error_entries, file, DirContext, DirKind, Entries, Listed, NodeKind};

/// `slices/`: a directory per format, and any slice by name.
#[derive(Debug)]
pub struct SlicesDir(pub Table);

/// `slices/<format>/`: the table's chunks in that format, and any slice of that format by
/// name.
#[derive(Debug)]
struct SlicesFormatDir {
    table: Table,
    format: TableFormat,
}

impl DirKind for SlicesDir {
    fn list(&self, _: &DirContext) -> Listed {
        let format_dir = |format: TableFormat| {
            let table = self.0.clone();
            (
                format.extension().to_owned(),
                dir(SlicesFormatDir { table, format }),
            )
        };
        Listed::of(TableFormat::ALL.into_iter().map(format_dir).collect())
    }

    fn find(&self, name: &str) -> Option<NodeKind> {
        slice_by_name(&self.0, None, name)
    }
}

impl DirKind for SlicesFormatDir {
    fn list(&self, cx: &DirContext) -> Listed {
        let options = &cx.files.options;
        Listed::of(chunk_entries(
            &self.table,
            self.format,
            options.chunk_cells,
            options.materialize_limit,
        ))
    }

    fn find(&self, name: &str) -> Option<NodeKind> {
        slice_by_name(&self.table, Some(self.format), name)
    }
}

/// The fewest cells a chunk of `slices/` is cut to so that it stays below
/// `--materialize-limit`: a lower limit leaves chunks of `--chunk-cells`, above the limit.
const MIN_CHUNK_CELLS: u64 = 4096;

/// The table cut along its first index column into chunks of about `chunk_cells` stored
/// cells, and fewer where a chunk in the format with the widest rows would be estimated at
/// `materialize_limit` or more. Every format's directory lists the same chunks, and each
/// chunk is small enough that a `stat` generates it, unless the limit would cut chunks below
/// [`MIN_CHUNK_CELLS`] or the first index column is not an integer (the whole table is then
/// one chunk, which only an estimate below the limit generates).
fn chunk_entries(
    table: &Table,
    format: TableFormat,
    chunk_cells: u64,
    materialize_limit: u64,
) -> Entries {
    let array = table.array();
    let kinds = column_kinds(array);
    let schema = array.schema.arrow();
    let widest_row = (TableFormat::ALL.into_iter())
        .map(|f| f.estimated_row_bytes(&schema, &[]))
        .max()
        .unwrap_or(1);
    let below_limit = materialize_limit / widest_row;
    let (chunk_cells, shown) = match below_limit >= MIN_CHUNK_CELLS {
        true => (chunk_cells.min(below_limit), Shown::Chunk),
        false => (chunk_cells, Shown::Listed),
    };
    let chunks: Vec<SliceRange> = match soma::chunks(array, chunk_cells) {
        Err(e) => return error_entries(&e.to_string()),
        Ok(Some(chunks)) => chunks
            .iter()
            .map(|&(lo, hi)| match kinds[0] {
                ColumnKind::UInt => SliceRange::UInt(lo as u64, hi as u64),
                _ => SliceRange::Int(lo as i64, hi as i64),
            })
            .collect(),
        // Not an integer column: the whole table is one chunk, unless it has no cells.
        Ok(None) if array.non_empty_domain.iter().any(Option::is_none) => Vec::new(),
        Ok(None) => vec![SliceRange::All],
    };
    chunks
        .into_iter()
        .map(|chunk| {
            let shown = if chunk == SliceRange::All {
                Shown::Listed
            } else {
                shown
            };
            let mut ranges = vec![SliceRange::All; kinds.len()];
            ranges[0] = chunk;
            let slice = SliceName { ranges, format };
            (slice_name::format(&slice), slice_file(table, &slice, shown))
        })
        .collect()
}

/// The kind of each index column, for slice names.
fn column_kinds(array: &ArrayObject) -> Vec<ColumnKind> {
    array
        .schema
        .index_columns()
        .map(|c| match &c.arrow_type {
            t if t.is_signed_integer() => ColumnKind::Int,
            t if t.is_unsigned_integer() => ColumnKind::UInt,
            t if t.is_floating() => ColumnKind::Float,
            arrow_schema::DataType::Timestamp(..) => ColumnKind::Int,
            _ => ColumnKind::Text,
        })
        .collect()
}

/// The file a slice name stands for in `slices/` (any format) or `slices/<format>/` (that
/// format only), if it is one.
fn slice_by_name(table: &Table, format: Option<TableFormat>, name: &str) -> Option<NodeKind> {
    let slice = slice_name::parse(name, &column_kinds(table.array()))?;
    if format.is_some_and(|f| f != slice.format) {
        return None;
    }
    Some(slice_file(table, &slice, Shown::ByName))
}

/// A slice of a table as a file: its ranges on top of the table's own selection, clipped.
fn slice_file(table: &Table, slice: &SliceName, shown: Shown) -> NodeKind {
    let array = table.array();
    let mut selection = table.selection.clone();
    selection
        .ranges
        .resize(array.schema.index_columns().count(), Vec::new());
    for (ranges, range) in selection.ranges.iter_mut().zip(&slice.ranges) {
        let bounds = match range {
            SliceRange::All => continue,
            SliceRange::Int(a, b) => (Value::Int(*a), Value::Int(*b)),
            SliceRange::UInt(a, b) => (Value::UInt(*a), Value::UInt(*b)),
            SliceRange::Float(a, b) => (Value::Float(*a), Value::Float(*b)),
            SliceRange::Text(s) => (Value::Text(s.clone()), Value::Text(s.clone())),
        };
        *ranges = vec![bounds];
    }
    let table = Table {
        array: table.array.clone(),
        selection: selection.clipped_to(array),
    };
    file(TableFile::new(table, slice.format, shown))
}
