//! The legacy single-cell layout (a Cell Ranger matrix directory) of one layer of a
//! measurement: which obs and var columns name the barcodes and features, which cells a
//! category selects, and the matrix entries with join ids mapped to 1-based positions.

use std::ops::{Range, RangeInclusive};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array as _, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use crate::tiledb::Value;

use super::error::{Error, Result};
use super::object::ArrayObject;
use super::reader::{BatchReader, Selection, BATCH_BYTES};

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
    pub obs: Arc<ArrayObject>,
    pub var: Arc<ArrayObject>,
    pub x: Arc<ArrayObject>,
    /// Only the cells whose obs column holds this label (`None`: a null).
    pub cells: Option<(String, Option<Value>)>,
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

/// The join ids of a batch of a data frame's rows.
pub(super) fn joinids(batch: &RecordBatch) -> Result<&[i64]> {
    batch
        .column_by_name("soma_joinid")
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .map(|a| a.values().as_ref())
        .ok_or_else(|| Error::invalid("a data frame without an int64 soma_joinid"))
}

/// Reads the join ids and the named columns of a data frame, in join id order.
fn read_names(
    frame: &ArrayObject,
    columns: &[&str],
    equals: Option<(String, Option<Value>)>,
) -> Result<Vec<(i64, Vec<String>)>> {
    let selection = Selection {
        equals,
        columns: Some(columns.iter().map(|c| c.to_string()).collect()),
        ..Selection::default()
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
    /// `barcodes.tsv`: each selected cell's barcode, in join id order.
    pub fn barcodes(&self) -> Result<Named> {
        let column = string_column(&self.obs, BARCODE_COLUMNS).unwrap_or("soma_joinid");
        Ok(read_names(&self.obs, &[column], self.cells.clone())?
            .into_iter()
            .map(|(id, mut names)| (id, names.swap_remove(0)))
            .collect())
    }

    /// `features.tsv`: each feature's id and name, in join id order.
    pub fn features(&self) -> Result<Vec<(i64, String, String)>> {
        let id = string_column(&self.var, FEATURE_ID_COLUMNS).unwrap_or("soma_joinid");
        let name = string_column(&self.var, FEATURE_NAME_COLUMNS).unwrap_or(id);
        Ok(read_names(&self.var, &[id, name], None)?
            .into_iter()
            .map(|(joinid, mut names)| {
                let name = names.pop().unwrap_or_default();
                let id = names.pop().unwrap_or_default();
                (joinid, id, name)
            })
            .collect())
    }

    /// Whether the layer holds integers (a Matrix Market `integer` matrix).
    pub fn is_integer(&self) -> bool {
        self.x
            .schema
            .columns
            .iter()
            .rfind(|c| !c.is_index)
            .is_some_and(|c| c.arrow_type.is_integer())
    }

    /// Reads the layer's cells of the selected barcodes, sorted by cell then feature, and
    /// hands each batch to `visit` as (obs join ids, var join ids, values).
    pub fn entries(
        &self,
        barcodes: &[i64],
        visit: impl FnMut(&[i64], &[i64], &ArrayRef) -> std::io::Result<()>,
    ) -> Result<()> {
        // A category reads only its cells' rows; the whole layer reads every row.
        let rows = self.cells.is_some().then(|| runs(barcodes));
        super::anndata::read_cells(&self.x, rows.as_deref(), visit)
    }
}

/// Sorted, distinct join ids, each at its place among them: obs's or var's rows, or a
/// category's. Contiguous ids, as tiledbsoma writes a data frame's, are held as their first
/// and their count, whatever their number; others one by one.
#[derive(Debug, Clone)]
pub enum Positions {
    /// `len` join ids, from `first` on.
    Contiguous { first: i64, len: usize },
    /// Any others, in increasing order.
    Sorted(Vec<i64>),
}

impl Default for Positions {
    fn default() -> Positions {
        Positions::Contiguous { first: 0, len: 0 }
    }
}

impl Positions {
    /// The join ids `ids`, in any order (each kept once).
    pub fn new(mut ids: Vec<i64>) -> Positions {
        ids.sort_unstable();
        ids.dedup();
        let mut positions = Positions::default();
        positions.extend_sorted(&ids);
        positions
    }

    /// Every join id of `range`.
    pub fn range(range: RangeInclusive<i64>) -> Positions {
        let (first, last) = range.into_inner();
        let len = usize::try_from(i128::from(last) - i128::from(first) + 1).unwrap_or(0);
        Positions::Contiguous { first, len }
    }

    /// Adds join ids greater than every one held, in increasing order.
    pub fn extend_sorted(&mut self, ids: &[i64]) {
        if let Positions::Contiguous { first, len } = self {
            if *len == 0 {
                if let Some(&id) = ids.first() {
                    *first = id;
                }
            }
            let next = i128::from(*first) + *len as i128;
            let continued =
                (ids.iter().enumerate()).all(|(i, &id)| i128::from(id) == next + i as i128);
            if continued {
                *len += ids.len();
                return;
            }
            *self = Positions::Sorted((0..*len as i64).map(|i| *first + i).collect());
        }
        if let Positions::Sorted(held) = self {
            held.extend_from_slice(ids);
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Positions::Contiguous { len, .. } => *len,
            Positions::Sorted(ids) => ids.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The greatest join id held.
    pub fn last(&self) -> Option<i64> {
        match self {
            Positions::Contiguous { len: 0, .. } => None,
            Positions::Contiguous { first, len } => Some(*first + (*len - 1) as i64),
            Positions::Sorted(ids) => ids.last().copied(),
        }
    }

    /// The 1-based position of `id`, if it is held.
    pub fn get(&self, id: i64) -> Option<u64> {
        match self {
            Positions::Contiguous { first, len } => {
                let offset = u64::try_from(i128::from(id) - i128::from(*first)).ok()?;
                (offset < *len as u64).then_some(offset + 1)
            }
            Positions::Sorted(ids) => ids.binary_search(&id).ok().map(|i| i as u64 + 1),
        }
    }

    /// The join ids at the places `places` (0-based), as runs of consecutive ids.
    pub fn runs_at(&self, places: Range<usize>) -> Vec<(i64, i64)> {
        let places = places.start..places.end.min(self.len());
        if places.is_empty() {
            return Vec::new();
        }
        match self {
            Positions::Contiguous { first, .. } => {
                vec![(*first + places.start as i64, *first + places.end as i64 - 1)]
            }
            Positions::Sorted(ids) => runs(&ids[places]),
        }
    }

    /// Every join id held, as runs of consecutive ids.
    pub fn runs(&self) -> Vec<(i64, i64)> {
        self.runs_at(0..self.len())
    }
}

/// Consecutive join ids (sorted) as one inclusive range each.
pub fn runs(ids: &[i64]) -> Vec<(i64, i64)> {
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(id) => *end = id,
            _ => runs.push((id, id)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::{runs, Positions};
    use proptest::prelude::*;

    #[test]
    fn consecutive_join_ids_make_one_run() {
        assert_eq!(runs(&[]), []);
        assert_eq!(runs(&[3, 4, 5, 9, 11, 12]), [(3, 5), (9, 9), (11, 12)]);
        assert_eq!(runs(&[i64::MAX - 1, i64::MAX]), [(i64::MAX - 1, i64::MAX)]);
    }

    proptest! {
        /// Join ids added in batches, contiguous or not, are held as the sorted list of them
        /// would be: the same count, places and runs.
        #[test]
        fn positions_answer_as_the_sorted_list_of_their_ids(
            start in -5i64..5,
            steps in prop::collection::vec(prop_oneof![4 => Just(1i64), 1 => 2i64..4], 0..60),
            cuts in prop::collection::vec(0usize..60, 0..4),
            places in (0usize..70, 0usize..70),
        ) {
            let mut ids = Vec::new();
            let mut id = start;
            for step in steps {
                ids.push(id);
                id += step;
            }
            let mut positions = Positions::default();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(ids.len())).collect();
            cuts.sort_unstable();
            let mut from = 0;
            for cut in cuts.into_iter().chain([ids.len()]) {
                positions.extend_sorted(&ids[from..cut]);
                from = cut;
            }
            let contiguous = ids.windows(2).all(|w| w[1] == w[0] + 1);
            prop_assert_eq!(matches!(positions, Positions::Contiguous { .. }), contiguous);
            prop_assert_eq!(positions.len(), ids.len());
            for probe in start - 2..id + 2 {
                let place = ids.binary_search(&probe).ok().map(|i| i as u64 + 1);
                prop_assert_eq!(positions.get(probe), place);
            }
            let (a, b) = places;
            let (a, b) = (a.min(b), a.max(b));
            let clipped = a.min(ids.len())..b.min(ids.len());
            prop_assert_eq!(positions.runs_at(a..b), runs(&ids[clipped]));
        }
    }

    #[test]
    fn positions_are_one_based_ranks() {
        let contiguous = Positions::new(vec![5, 6, 7]);
        assert_eq!(contiguous.get(5), Some(1));
        assert_eq!(contiguous.get(7), Some(3));
        assert_eq!(contiguous.get(8), None);
        let gappy = Positions::new(vec![10, 2, 40]);
        assert_eq!(gappy.get(2), Some(1));
        assert_eq!(gappy.get(40), Some(3));
        assert_eq!(gappy.get(11), None);
    }
}
