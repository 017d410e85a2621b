//! Join ids: the `soma_joinid`s of a data frame's rows, where AnnData and Cell Ranger
//! layouts take each cell's and gene's place from; held as their places ([`Positions`]) and
//! read in runs of consecutive ids.

use std::ops::{Range, RangeInclusive};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;

use super::error::{Error, Result};

/// The join ids of a batch of a data frame's rows.
pub fn joinids(batch: &RecordBatch) -> Result<&[i64]> {
    batch
        .column_by_name("soma_joinid")
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .map(|a| a.values().as_ref())
        .ok_or_else(|| Error::invalid("a data frame without an int64 soma_joinid"))
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
