//! Reads of a measurement's AnnData elements a few rows at a time, for a container that
//! serves an element in pieces (the Zarr store's chunks): the rows of obs and var
//! ([`AxisRows`]) that place a matrix's cells, the cells of rows a..b of a matrix
//! ([`MatrixSource`]), and a part of a data frame column for rows a..b ([`FrameSource`]:
//! its values, its null mask, its categorical codes or its row numbers). A CSR matrix's
//! entries and `indptr` are read in [`super::csr`], uns arrays in [`super::uns`].

use std::io;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array as _, ArrayRef, BooleanArray, Int64Array, RecordBatch};
use arrow_schema::DataType;

use super::super::joinids::Positions;
use super::super::object::ArrayObject;
use super::{
    column_of, read_cells, read_frame_column, read_placed, Along, AnnDataElements, Axis, FrameRows,
    Placed,
};
use super::{CellPlaces, MatrixColumns, MatrixElement};

/// The rows of obs or var: their join ids in order, each at its place.
#[derive(Debug)]
pub struct AxisRows {
    pub positions: Positions,
    /// What identifies them: the data frame's snapshot.
    pub id: String,
}

impl AxisRows {
    /// The rows a first pass over a data frame found (their join ids are taken).
    pub fn new(frame: &ArrayObject, rows: &mut FrameRows) -> Arc<AxisRows> {
        Arc::new(AxisRows {
            positions: std::mem::take(&mut rows.joinids),
            id: frame.content_id.clone(),
        })
    }
}

/// The rows of obs and var, that the AnnData's matrices are placed on.
#[derive(Debug, Clone)]
pub struct ObsVarRows {
    pub obs: Arc<AxisRows>,
    pub var: Arc<AxisRows>,
}

impl ObsVarRows {
    pub fn along(&self, along: Along) -> &Arc<AxisRows> {
        match along {
            Along::Obs => &self.obs,
            Along::Var => &self.var,
        }
    }

    /// The matrix `matrix` of `elements` placed on these rows, its values given as
    /// `value_type`.
    pub fn matrix(
        &self,
        elements: &AnnDataElements,
        matrix: &MatrixElement,
        value_type: DataType,
    ) -> io::Result<MatrixSource> {
        let rows = self.along(matrix.rows).clone();
        let cols = match matrix.columns {
            MatrixColumns::Along(along) => Columns::Rows(self.along(along).clone()),
            MatrixColumns::Width => {
                Columns::Indices(elements.width(matrix, rows.positions.len())? as usize)
            }
        };
        Ok(MatrixSource {
            array: matrix.array.clone(),
            rows,
            cols,
            value_type,
        })
    }
}

/// The columns of a matrix: obs's or var's rows, or plain indices (obsm and varm).
#[derive(Debug, Clone)]
pub enum Columns {
    Rows(Arc<AxisRows>),
    Indices(usize),
}

/// A matrix read from a two-dimensional array: its rows are obs's or var's, its values are
/// given as `value_type`.
#[derive(Debug)]
pub struct MatrixSource {
    pub array: Arc<ArrayObject>,
    pub rows: Arc<AxisRows>,
    pub cols: Columns,
    pub value_type: DataType,
}

impl MatrixSource {
    /// Where the array's coordinates are among the matrix's rows and columns.
    pub fn axes(&self) -> (Axis<'_>, Axis<'_>) {
        let cols = match &self.cols {
            Columns::Rows(rows) => Axis::Joinids(&rows.positions),
            Columns::Indices(n) => Axis::Indices(*n),
        };
        (Axis::Joinids(&self.rows.positions), cols)
    }

    /// What identifies the rows and columns the matrix is placed on.
    pub fn axes_id(&self) -> String {
        match &self.cols {
            Columns::Rows(cols) => format!("{}\n{}", self.rows.id, cols.id),
            Columns::Indices(n) => format!("{}\n{n}", self.rows.id),
        }
    }

    /// Visits the cells of the rows `rows` (positions), in order, a batch at a time: the
    /// places of the batch's cells on the axes (see [`CellPlaces`]) and its values.
    pub fn cells(
        &self,
        rows: Range<usize>,
        mut visit: impl FnMut(&CellPlaces, &ArrayRef) -> io::Result<()>,
    ) -> io::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let (row_axis, col_axis) = self.axes();
        let runs = self.rows.positions.runs_at(rows);
        read_cells(&self.array, Some(&runs), |row_ids, col_ids, values| {
            visit(
                &CellPlaces::of((&row_axis, &col_axis), row_ids, col_ids),
                values,
            )
        })?;
        Ok(())
    }

    /// [`Self::cells`], with a dense read's cells in runs of a row's cells where the
    /// matrix's columns are plain indices (see [`read_placed`]).
    pub fn placed(
        &self,
        rows: Range<usize>,
        visit: impl FnMut(Placed, &ArrayRef) -> io::Result<()>,
    ) -> io::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let runs = self.rows.positions.runs_at(rows);
        read_placed(&self.array, Some(&runs), self.axes(), visit)?;
        Ok(())
    }

    /// The values of the cells `places` keeps, cast to the matrix's value type.
    pub fn values(&self, values: &ArrayRef, places: &CellPlaces) -> io::Result<ArrayRef> {
        places.values(values, &self.value_type)
    }
}

/// A data frame's rows.
#[derive(Debug)]
pub struct FrameSource {
    pub frame: Arc<ArrayObject>,
    pub rows: FrameRowsAt,
}

/// Where a data frame's rows are.
#[derive(Debug)]
pub enum FrameRowsAt {
    /// In the array, read a column at a time when asked: obs's or var's rows.
    Array(Arc<AxisRows>),
    /// Read whole already (uns): the batches, and how many rows they hold.
    Read(Vec<RecordBatch>, usize),
}

/// What of a data frame column is read.
#[derive(Debug, Clone)]
pub enum ColumnPart {
    /// The values: cast to this type (numbers, booleans), or as they are (`None`: text).
    Values(Option<DataType>),
    /// Whether each is null.
    Mask,
    /// The dictionary keys as codes of this type, -1 for null.
    Codes(DataType),
    /// Row numbers from 0 (the index of a data frame without one).
    RowNumbers,
}

impl FrameSource {
    /// A frame whose rows are obs's or var's, `rows`: read a column at a time when asked.
    pub fn of_rows(frame: &Arc<ArrayObject>, rows: &Arc<AxisRows>) -> FrameSource {
        FrameSource {
            frame: frame.clone(),
            rows: FrameRowsAt::Array(rows.clone()),
        }
    }

    /// A frame of the rows `batches` read whole, and what a pass over them finds.
    pub fn read(frame: &Arc<ArrayObject>, batches: Vec<RecordBatch>) -> (FrameSource, FrameRows) {
        let rows = FrameRows::of(&batches);
        let source = FrameSource {
            frame: frame.clone(),
            rows: FrameRowsAt::Read(batches, rows.count),
        };
        (source, rows)
    }

    pub fn len(&self) -> usize {
        match &self.rows {
            FrameRowsAt::Array(rows) => rows.positions.len(),
            FrameRowsAt::Read(_, count) => *count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The column `name` at the places `rows`.
    fn column(&self, name: &str, rows: Range<usize>) -> io::Result<ArrayRef> {
        let batches = match &self.rows {
            FrameRowsAt::Array(axis) => {
                let column = read_frame_column(&self.frame, name, &axis.positions, rows);
                return Ok(column?);
            }
            FrameRowsAt::Read(batches, _) => batches,
        };
        let all = column_of(&self.frame, batches, name)?;
        Ok(all.slice(rows.start, rows.len()))
    }

    /// The part `part` of the column `column` at the places `rows`.
    pub fn column_part(
        &self,
        column: &str,
        part: &ColumnPart,
        rows: Range<usize>,
    ) -> io::Result<ArrayRef> {
        if let ColumnPart::RowNumbers = part {
            return Ok(Arc::new(Int64Array::from_iter_values(
                rows.start as i64..rows.end as i64,
            )));
        }
        let values = self.column(column, rows)?;
        Ok(match part {
            ColumnPart::Values(Some(t)) if values.data_type() != t => {
                arrow_cast::cast(&values, t).map_err(io::Error::other)?
            }
            ColumnPart::Values(_) | ColumnPart::RowNumbers => values,
            ColumnPart::Mask => {
                let nulls = values.logical_nulls();
                let mask =
                    (0..values.len()).map(|i| Some(nulls.as_ref().is_some_and(|n| n.is_null(i))));
                Arc::new(mask.collect::<BooleanArray>())
            }
            ColumnPart::Codes(t) => {
                let keys = values
                    .as_any_dictionary_opt()
                    .ok_or_else(|| io::Error::other(format!("{column}: not a dictionary")))?
                    .keys();
                let keys = arrow_cast::cast(keys, &DataType::Int64).map_err(io::Error::other)?;
                let keys = keys.as_primitive::<Int64Type>();
                let codes: Int64Array = keys.iter().map(|k| Some(k.unwrap_or(-1))).collect();
                arrow_cast::cast(&codes, t).map_err(io::Error::other)?
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::fixtures::dataframe;
    use crate::soma::SomaObject;
    use arrow_array::types::Int8Type;
    use arrow_array::{DictionaryArray, Float64Array, Int16Array, Int32Array, LargeStringArray};

    /// Rows read whole: join ids 0-4, an int32 column `n` (row 2 null), a text `t` and a
    /// categorical `c` of the labels x and y (row 2 null), in two batches (rows 0-1, then
    /// 2-4).
    fn read_whole() -> (FrameSource, FrameRows) {
        let labels: ArrayRef = Arc::new(LargeStringArray::from(vec!["x", "y"]));
        let batch = |ids: Vec<i64>, n: Vec<Option<i32>>, t: Vec<&str>, c: Vec<Option<i8>>| {
            let c = DictionaryArray::<Int8Type>::try_new(c.into(), labels.clone()).unwrap();
            RecordBatch::try_from_iter([
                ("soma_joinid", Arc::new(Int64Array::from(ids)) as ArrayRef),
                ("n", Arc::new(Int32Array::from(n))),
                ("t", Arc::new(LargeStringArray::from(t))),
                ("c", Arc::new(c)),
            ])
            .unwrap()
        };
        let batches = vec![
            batch(
                vec![0, 1],
                vec![Some(1), Some(2)],
                vec!["a", "b"],
                vec![Some(0), Some(1)],
            ),
            batch(
                vec![2, 3, 4],
                vec![None, Some(4), Some(5)],
                vec!["c", "d", "e"],
                vec![None, Some(0), Some(1)],
            ),
        ];
        let SomaObject::Array(frame) = dataframe("uns/frame", "frag") else {
            unreachable!("a data frame")
        };
        FrameSource::read(&frame, batches)
    }

    #[test]
    fn a_frame_read_whole_gives_each_part_of_a_column_for_some_rows() {
        let (frame, rows) = read_whole();
        assert_eq!((frame.len(), rows.count), (5, 5));
        let mut with_nulls: Vec<&str> =
            rows.columns_with_nulls.iter().map(|c| c.as_str()).collect();
        with_nulls.sort();
        assert_eq!(with_nulls, ["c", "n"]);
        // Rows 1-3, across the two batches.
        let part = |column, part| frame.column_part(column, &part, 1..4).unwrap();
        let numbers = part("n", ColumnPart::Values(Some(DataType::Int64)));
        assert_eq!(
            numbers.as_primitive::<Int64Type>(),
            &Int64Array::from(vec![Some(2), None, Some(4)])
        );
        let texts = part("t", ColumnPart::Values(None));
        assert_eq!(
            texts.as_string::<i64>(),
            &LargeStringArray::from(vec!["b", "c", "d"])
        );
        let mask = part("n", ColumnPart::Mask);
        assert_eq!(
            mask.as_boolean(),
            &BooleanArray::from(vec![false, true, false])
        );
        let codes = part("c", ColumnPart::Codes(DataType::Int16));
        let codes = codes.as_primitive::<arrow_array::types::Int16Type>();
        assert_eq!(codes, &Int16Array::from(vec![1, -1, 0]));
        let numbers = part("", ColumnPart::RowNumbers);
        assert_eq!(
            numbers.as_primitive::<Int64Type>(),
            &Int64Array::from(vec![1, 2, 3])
        );
        let error = frame
            .column_part("missing", &ColumnPart::Mask, 0..1)
            .unwrap_err();
        assert!(error.to_string().contains("no column missing"), "{error}");
    }

    #[test]
    fn a_matrix_keeps_the_cells_placed_and_gives_its_values_as_its_type() {
        let SomaObject::Array(array) = dataframe("m", "frag") else {
            unreachable!("an array")
        };
        let rows = Arc::new(AxisRows {
            positions: Positions::range(10..=19),
            id: "obs".into(),
        });
        let matrix = MatrixSource {
            array,
            rows,
            cols: Columns::Indices(7),
            value_type: DataType::Float32,
        };
        let (rows, cols) = matrix.axes();
        assert_eq!((rows.len(), rows.at(10), rows.at(20)), (10, Some(0), None));
        assert_eq!((cols.len(), cols.at(6), cols.at(7)), (7, Some(6), None));
        assert_eq!(matrix.axes_id(), "obs\n7");
        // Rows 10, 20 (not held) and 11; a row's cells share its place.
        let places = CellPlaces::of((&rows, &cols), &[10, 20, 11, 11], &[0, 1, 6, 7]);
        assert_eq!(places.keep, [true, false, true, false]);
        assert_eq!(
            (places.rows.as_slice(), places.cols.as_slice()),
            (&[0, 1][..], &[0, 6][..])
        );
        let values: ArrayRef = Arc::new(Float64Array::from(vec![1.5, 2.5, 3.5, 4.5]));
        let kept = matrix.values(&values, &places).unwrap();
        let kept = kept.as_primitive::<arrow_array::types::Float32Type>();
        assert_eq!(kept.values().as_ref(), [1.5f32, 3.5]);
    }
}
