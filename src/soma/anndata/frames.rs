//! The data frames of an AnnData (obs, var, an uns data frame) as they are read: which
//! column is the index, a column's categories, the first pass over the rows that lays a
//! frame out ([`scan_rows`]), and the reads of its rows (all, those selected, or one column
//! at some rows).

use std::collections::HashSet;
use std::ops::Range;

use arrow_array::{Array as _, ArrayRef, RecordBatch};
use log::debug;

use crate::tiledb::{self, Value};

use super::super::error::{Error, Result};
use super::super::joinids::{joinids, Positions};
use super::super::object::ArrayObject;
use super::super::read::{labels_array, BatchReader, ReadAhead, Selection, BATCH_BYTES};
use super::super::schema::Column;

/// The metadata key where tiledbsoma's `from_anndata` records the name of the column that
/// was the data frame's index (JSON: a string, or null).
const ORIGINAL_INDEX_KEY: &str = "soma_dataframe_original_index_name_json";

/// Which column of a data frame becomes the AnnData's index, as tiledbsoma's `to_anndata`
/// chooses: the column `from_anndata` recorded as the original index (keeping its name),
/// else `fallback` (unnamed). `None`: neither is there.
pub fn index_column(frame: &ArrayObject, fallback: &str) -> Option<(String, bool)> {
    let has = |name: &str| frame.schema.columns.iter().any(|c| c.name == name);
    let original = frame
        .metadata
        .get(ORIGINAL_INDEX_KEY)
        .and_then(|v| v.as_str())
        .and_then(|json| serde_json::from_str::<Option<String>>(json).ok())
        .flatten();
    match original {
        Some(name) if has(&name) => Some((name, true)),
        _ => has(fallback).then(|| (fallback.to_owned(), false)),
    }
}

/// An enumerated column's labels (the categories of its categorical), and whether their
/// order means something; `None` for a column that is not enumerated.
pub fn categories(column: &Column) -> Result<Option<(ArrayRef, bool)>> {
    column
        .enumeration
        .as_ref()
        .map(|e| Ok((labels_array(e)?, e.ordered)))
        .transpose()
}

/// What a first pass over a data frame's rows (all, or one category's) finds: how many
/// there are, their join ids in order (when the frame has them), and which columns hold a
/// null.
#[derive(Debug, Default)]
pub struct FrameRows {
    pub count: usize,
    pub joinids: Positions,
    pub columns_with_nulls: HashSet<String>,
}

impl FrameRows {
    /// What a pass over rows read whole finds (their join ids are not taken).
    pub fn of(batches: &[RecordBatch]) -> FrameRows {
        let mut rows = FrameRows::default();
        for batch in batches {
            rows.add(batch);
        }
        rows
    }

    /// Counts a batch of rows in: its size and its columns' nulls.
    pub fn add(&mut self, batch: &RecordBatch) {
        self.count += batch.num_rows();
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            if column.logical_null_count() > 0 {
                self.columns_with_nulls.insert(field.name().clone());
            }
        }
    }
}

/// Reads a data frame's rows (those `rows` selects), in order, a batch at a time.
pub fn read_rows(
    frame: &ArrayObject,
    rows: &Selection,
    visit: impl FnMut(&RecordBatch) -> std::io::Result<()>,
) -> Result<()> {
    read_selected(frame, rows, visit)
}

fn read_selected(
    frame: &ArrayObject,
    selection: &Selection,
    mut visit: impl FnMut(&RecordBatch) -> std::io::Result<()>,
) -> Result<()> {
    let mut reader = ReadAhead::start(BatchReader::open(frame, selection, BATCH_BYTES)?)?;
    while let Some(batch) = reader.next_batch()? {
        visit(&batch)?;
    }
    Ok(())
}

/// The first pass over a data frame's rows (see [`FrameRows`]): it reads their join ids
/// (unless the open tells them: [`ArrayObject::joinids_from_open`]), and looks for nulls in
/// the columns `null_checked` only (no other column is found to hold one): libtiledb counts
/// them without reading the values where it can ([`tiledb::nulls_countable`]), and the
/// other columns are read. The rows must come in join id order (they do when the frame is
/// indexed by `soma_joinid` alone, as tiledbsoma writes obs and var): matrices are laid out
/// by join id.
pub fn scan_rows(
    frame: &ArrayObject,
    rows: &Selection,
    null_checked: &[String],
) -> Result<FrameRows> {
    let selection = rows.clone();
    let every_row = *rows == Selection::default();
    // A column that cannot hold a null has none to look for.
    let (counted, read): (Vec<&Column>, Vec<&Column>) = frame
        .schema
        .columns
        .iter()
        .filter(|c| c.nullable && null_checked.contains(&c.name))
        .partition(|c| tiledb::nulls_countable(c.datatype, c.cell_val_num));
    let counted: Vec<&str> = counted.iter().map(|c| c.name.as_str()).collect();
    let with_nulls = |counts: &[(String, u64)]| -> HashSet<String> {
        (counts.iter())
            .filter(|(_, nulls)| *nulls > 0)
            .map(|(column, _)| column.clone())
            .collect()
    };
    // Every row, with join ids the open tells: only the nulls are counted (libtiledb's
    // reader walks the join-id tiles for that), and a frame with none to count is not read.
    if let (true, true, Some(ids)) = (every_row, read.is_empty(), frame.joinids_from_open()) {
        debug!("{}: join ids {ids:?}, told by the open", frame.uri);
        let joinids = Positions::range(ids);
        let columns_with_nulls = match counted.is_empty() {
            true => HashSet::new(),
            false => with_nulls(&super::super::read::null_counts(frame, &counted)?),
        };
        return Ok(FrameRows {
            count: joinids.len(),
            joinids,
            columns_with_nulls,
        });
    }
    let only: Vec<&str> = read
        .iter()
        .map(|c| c.name.as_str())
        .chain(["soma_joinid"])
        .collect();
    let mut reader = BatchReader::open_unsorted(frame, &selection, &only, &counted, BATCH_BYTES)?;
    let mut rows = FrameRows::default();
    while let Some(batch) = reader.next_batch()? {
        let ids = joinids(&batch)?;
        let sorted = ids.windows(2).all(|w| w[0] < w[1])
            && rows
                .joinids
                .last()
                .is_none_or(|last| ids.first().is_none_or(|&f| f > last));
        if !sorted {
            return Err(Error::invalid(format!(
                "{}: rows are not in soma_joinid order",
                frame.uri
            )));
        }
        rows.joinids.extend_sorted(ids);
        rows.add(&batch);
    }
    let counts = reader
        .null_counts()
        .ok_or_else(|| Error::invalid("a read of join ids ended early"))?;
    rows.columns_with_nulls.extend(with_nulls(counts));
    Ok(rows)
}

/// Every row of an array (a small one: an uns element).
pub fn read_all(array: &ArrayObject) -> Result<Vec<RecordBatch>> {
    let mut reader = BatchReader::open(array, &Selection::default(), BATCH_BYTES)?;
    let mut batches = Vec::new();
    while let Some(batch) = reader.next_batch()? {
        batches.push(batch);
    }
    Ok(batches)
}

/// The column `name` of rows of `array` read whole ([`read_all`]), in one array; empty, of
/// the schema's type, when no rows were read.
pub fn column_of(
    array: &ArrayObject,
    batches: &[RecordBatch],
    name: &str,
) -> std::io::Result<ArrayRef> {
    let pieces = batches
        .iter()
        .map(|b| {
            b.column_by_name(name)
                .map(|c| c.as_ref())
                .ok_or_else(|| std::io::Error::other(format!("{}: no column {name}", array.uri)))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    if pieces.is_empty() {
        let field = array.schema.arrow().field_with_name(name).cloned();
        let data_type = field.map_or(arrow_schema::DataType::LargeUtf8, |f| f.data_type().clone());
        return Ok(arrow_array::new_empty_array(&data_type));
    }
    arrow_select::concat::concat(&pieces).map_err(std::io::Error::other)
}

/// Reads the column `column` of a data frame's rows at the places `places` of `rows` (its
/// rows' join ids), in that order: only those rows when the frame is indexed by
/// `soma_joinid` first.
pub fn read_frame_column(
    frame: &ArrayObject,
    column: &str,
    rows: &Positions,
    places: Range<usize>,
) -> Result<ArrayRef> {
    let places = places.start..places.end.min(rows.len());
    let runs = rows.runs_at(places.clone());
    let by_joinid = frame
        .schema
        .index_columns()
        .next()
        .is_some_and(|c| c.name == "soma_joinid");
    let mut selection = Selection {
        columns: Some(vec![column.to_owned()]),
        ..Selection::default()
    };
    if by_joinid {
        if runs.is_empty() {
            let field = frame.schema.arrow().field_with_name(column).cloned();
            let data_type = field.map_err(|e| Error::invalid(e.to_string()))?;
            return Ok(arrow_array::new_empty_array(data_type.data_type()));
        }
        selection.ranges = vec![runs
            .iter()
            .map(|&(a, b)| (Value::Int(a), Value::Int(b)))
            .collect()];
    }
    let mut pieces = Vec::new();
    let mut reader = BatchReader::open(frame, &selection, BATCH_BYTES)?;
    let wanted = |id: i64| {
        rows.get(id)
            .is_some_and(|place| places.contains(&(place as usize - 1)))
    };
    while let Some(batch) = reader.next_batch()? {
        let ids = joinids(&batch)?;
        let keep: arrow_array::BooleanArray = ids.iter().map(|&id| Some(wanted(id))).collect();
        let values = batch
            .column_by_name(column)
            .ok_or_else(|| Error::invalid(format!("{}: no column {column}", frame.uri)))?;
        pieces.push(
            arrow_select::filter::filter(values, &keep)
                .map_err(|e| Error::invalid(e.to_string()))?,
        );
    }
    let pieces: Vec<&dyn arrow_array::Array> = pieces.iter().map(|p| p.as_ref()).collect();
    let values = match pieces.as_slice() {
        [] => {
            let field = frame.schema.arrow().field_with_name(column).cloned();
            let field = field.map_err(|e| Error::invalid(e.to_string()))?;
            arrow_array::new_empty_array(field.data_type())
        }
        _ => arrow_select::concat::concat(&pieces).map_err(|e| Error::invalid(e.to_string()))?,
    };
    if values.len() != places.len() {
        return Err(Error::invalid(format!(
            "{}: {} of the {} rows asked for",
            frame.uri,
            values.len(),
            places.len()
        )));
    }
    Ok(values)
}
