//! A data frame of an h5ad ([`FrameWriter`]): its index and columns, written batch by
//! batch into datasets whose length is known beforehand.

use std::io;
use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use hdf5::types::VarLenUnicode;
use hdf5::Group;
use hdf5_metno as hdf5;

use super::super::anndata::Encoding;
use super::columns::{column_sink, numbers, Sink, Texts};
use super::{h5_error, h5_text, new_group, text_attr, Appender, ColumnSpec, Extent};

/// What a data frame's index is.
#[derive(Debug, Clone)]
pub enum FrameIndex {
    /// A column's values as text; the index keeps the column's name when `named`.
    Column { name: String, named: bool },
    /// Row numbers from 0, as integers (a pandas RangeIndex).
    RowNumbers,
}

/// A data frame being written, batch by batch: its index and its columns, in order.
pub struct FrameWriter {
    index: FrameIndex,
    index_sink: Box<dyn Sink>,
    /// The name of each column in the batches, and its sink.
    columns: Vec<(String, Box<dyn Sink>)>,
    rows_written: usize,
}

impl FrameWriter {
    /// A data frame of `rows` rows at `parent/name`. `columns` pairs each column, named as
    /// in the batches, with its name in the file.
    pub fn create(
        parent: &Group,
        name: &str,
        rows: usize,
        index: FrameIndex,
        columns: &[(ColumnSpec, String)],
    ) -> io::Result<FrameWriter> {
        let group = new_group(parent, name, Encoding::DataFrame)?;
        let extent = Extent::Fixed(rows);
        let index_name = match &index {
            FrameIndex::Column { name, named: true } => name.clone(),
            _ => "_index".to_owned(),
        };
        text_attr(&group, "_index", &index_name)?;
        let order = columns
            .iter()
            .map(|(_, file_name)| h5_text(file_name))
            .collect::<io::Result<Vec<_>>>()?;
        group
            .new_attr::<VarLenUnicode>()
            .shape(order.len())
            .create("column-order")
            .and_then(|attr| attr.write_raw(&order))
            .map_err(h5_error)?;
        let index_sink: Box<dyn Sink> = match &index {
            FrameIndex::Column { .. } => Box::new(Texts {
                values: Appender::create(&group, &index_name, extent)?,
                mask: None,
            }),
            FrameIndex::RowNumbers => numbers::<Int64Type>(&group, &index_name, extent, 0)?,
        };
        let columns = columns
            .iter()
            .map(|(spec, file_name)| {
                let mut in_file = spec.clone();
                in_file.name = file_name.clone();
                Ok((spec.name.clone(), column_sink(&group, &in_file, extent)?))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(FrameWriter {
            index,
            index_sink,
            columns,
            rows_written: 0,
        })
    }

    /// Writes the rows of a batch holding (at least) the index column and every column.
    pub fn append(&mut self, batch: &RecordBatch) -> io::Result<()> {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| io::Error::other(format!("no column {name} in the rows read")))
        };
        let index = match &self.index {
            FrameIndex::Column { name, .. } => column(name)?,
            FrameIndex::RowNumbers => {
                let start = self.rows_written as i64;
                Arc::new(Int64Array::from_iter_values(
                    start..start + batch.num_rows() as i64,
                )) as ArrayRef
            }
        };
        self.index_sink.append(&index)?;
        for (name, sink) in &mut self.columns {
            sink.append(&column(name)?)?;
        }
        self.rows_written += batch.num_rows();
        Ok(())
    }

    pub fn finish(self) -> io::Result<()> {
        self.index_sink.finish()?;
        for (_, sink) in self.columns {
            sink.finish()?;
        }
        Ok(())
    }
}
