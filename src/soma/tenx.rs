//! The legacy single-cell layout (a Cell Ranger matrix directory) of one layer of a
//! measurement: which obs and var columns name the barcodes and features, which cells a
//! category selects, and the matrix entries with join ids mapped to 1-based positions.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array as _, ArrayRef};
use arrow_schema::DataType;

use super::error::Result;
use super::joinids::{joinids, runs};
use super::object::ArrayObject;
use super::read::{BatchReader, Selection, BATCH_BYTES};
use super::selected::SelectedRows;

/// Columns that hold a cell's barcode, in order of preference.
const BARCODE_COLUMNS: &[&str] = &["obs_id", "barcode", "barcodes", "cell_id"];
/// Columns that hold a feature's id (Census: `feature_id`; tiledbsoma: `var_id`).
const FEATURE_ID_COLUMNS: &[&str] = &["feature_id", "gene_ids", "gene_id", "var_id", "ensembl_id"];
/// Columns that hold a feature's name.
const FEATURE_NAME_COLUMNS: &[&str] = &[
    "feature_name",
    "gene_symbols",
    "gene_name",
    "gene_names",
    "symbol",
    "var_name",
];

/// One layer as a matrix directory: the cells (all, or one category's) and the features.
#[derive(Debug, Clone)]
pub struct TenxLayer {
    pub x: Arc<ArrayObject>,
    /// The cells of obs it holds: all, or those selected (a category's, or a filter's).
    pub cells: Arc<SelectedRows>,
    /// The genes of var it holds: all, or those a filter selects.
    pub genes: Arc<SelectedRows>,
}

/// Join ids (sorted) and the text that names each.
pub type Named = Vec<(i64, String)>;

fn string_column<'a>(array: &ArrayObject, wanted: &[&'a str]) -> Option<&'a str> {
    wanted.iter().copied().find(|name| {
        array.schema.columns.iter().any(|c| {
            c.name == *name
                && matches!(c.arrow_type, DataType::LargeUtf8 | DataType::Dictionary(..))
        })
    })
}

/// A column's values as text, per row (nulls empty).
fn texts(column: &ArrayRef) -> Result<Vec<String>> {
    let strings = arrow_cast::cast(column, &DataType::LargeUtf8)?;
    let strings = strings.as_string::<i64>();
    Ok((0..strings.len())
        .map(|i| {
            if strings.is_null(i) {
                String::new()
            } else {
                strings.value(i).to_owned()
            }
        })
        .collect())
}

/// Reads the join ids and the named columns of a data frame, in join id order.
fn read_names(
    frame: &ArrayObject,
    columns: &[&str],
    rows: &Selection,
) -> Result<Vec<(i64, Vec<String>)>> {
    let selection = Selection {
        columns: Some(columns.iter().map(|c| c.to_string()).collect()),
        ..rows.clone()
    };
    let mut reader = BatchReader::open(frame, &selection, BATCH_BYTES)?;
    let mut out = Vec::new();
    while let Some(batch) = reader.next_batch()? {
        let ids = joinids(&batch)?;
        let values = columns
            .iter()
            .map(|name| match batch.column_by_name(name) {
                Some(col) => texts(col),
                None => Ok(ids.iter().map(i64::to_string).collect()),
            })
            .collect::<Result<Vec<_>>>()?;
        for (row, &id) in ids.iter().enumerate() {
            out.push((id, values.iter().map(|v| v[row].clone()).collect()));
        }
    }
    Ok(out)
}

impl TenxLayer {
    /// Every cell and gene of layer `x`, whose cells obs describes and whose genes var does.
    pub fn whole(obs: &Arc<ArrayObject>, var: &Arc<ArrayObject>, x: Arc<ArrayObject>) -> TenxLayer {
        TenxLayer {
            x,
            cells: Arc::new(SelectedRows::all(obs)),
            genes: Arc::new(SelectedRows::all(var)),
        }
    }

    pub fn obs(&self) -> &Arc<ArrayObject> {
        &self.cells.frame
    }

    pub fn var(&self) -> &Arc<ArrayObject> {
        &self.genes.frame
    }

    /// Whether it holds every cell and gene of the layer.
    pub fn is_whole(&self) -> bool {
        self.cells.is_all() && self.genes.is_all()
    }

    /// `barcodes.tsv`: each selected cell's barcode, in join id order.
    pub fn barcodes(&self) -> Result<Named> {
        let column = string_column(self.obs(), BARCODE_COLUMNS).unwrap_or("soma_joinid");
        Ok(read_names(self.obs(), &[column], &self.cells.rows)?
            .into_iter()
            .map(|(id, mut names)| (id, names.swap_remove(0)))
            .collect())
    }

    /// `features.tsv`: each feature's id and name, in join id order.
    pub fn features(&self) -> Result<Vec<(i64, String, String)>> {
        let id = string_column(self.var(), FEATURE_ID_COLUMNS).unwrap_or("soma_joinid");
        let name = string_column(self.var(), FEATURE_NAME_COLUMNS).unwrap_or(id);
        Ok(read_names(self.var(), &[id, name], &self.genes.rows)?
            .into_iter()
            .map(|(joinid, mut names)| {
                let name = names.pop().unwrap_or_default();
                let id = names.pop().unwrap_or_default();
                (joinid, id, name)
            })
            .collect())
    }

    /// The type of the layer's values (its last value column).
    pub fn value_type(&self) -> Option<&DataType> {
        let mut columns = self.x.schema.columns.iter();
        columns.rfind(|c| !c.is_index).map(|c| &c.arrow_type)
    }

    /// Whether the layer holds integers (a Matrix Market `integer` matrix).
    pub fn is_integer(&self) -> bool {
        self.value_type().is_some_and(DataType::is_integer)
    }

    /// Reads the layer's cells of the selected barcodes, sorted by cell then feature, and
    /// hands each batch to `visit` as (obs join ids, var join ids, values).
    pub fn entries(
        &self,
        barcodes: &[i64],
        visit: impl FnMut(&[i64], &[i64], &ArrayRef) -> std::io::Result<()>,
    ) -> Result<()> {
        // Selected cells read only their rows; the whole layer reads every row.
        let rows = (!self.cells.is_all()).then(|| runs(barcodes));
        super::anndata::read_cells(&self.x, rows.as_deref(), visit)
    }
}
