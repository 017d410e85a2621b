//! A dense array with cells: `data.npy`, its text files and slices.

use crate::soma::fixtures::{dense_array, dense_cells, dense_value};

use super::super::tests::{mount_at, store};
use super::*;

const DENSE: &str = "mem://dense";

/// A mount of a dense array of 100 x 10 cells, read in batches of 13 rows.
fn mounted_dense(cells: MemoryCells) -> Mounted {
    let store = store();
    store.put(with_cells(dense_array(DENSE), cells));
    mount_at(store, DENSE, Duration::from_secs(60))
}

/// The cells of rows `rows` and columns `cols`, as CSV.
fn dense_csv(rows: std::ops::RangeInclusive<i64>, cols: std::ops::RangeInclusive<i64>) -> String {
    let mut csv = String::from("soma_dim_0,soma_dim_1,soma_data\n");
    for i in rows {
        for j in cols.clone() {
            csv += &format!("{i},{j},{}\n", dense_value(i, j));
        }
    }
    csv
}

/// The header of a `.npy` file: its length and its dictionary's text.
fn npy_header(npy: &[u8]) -> (usize, String) {
    assert_eq!(&npy[..6], b"\x93NUMPY", "NumPy's magic");
    let (major, minor) = (npy[6], npy[7]);
    assert_eq!(
        (major, minor),
        (1, 0),
        "version 1.0: a 2-byte header length"
    );
    let len = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    let dict = String::from_utf8(npy[10..10 + len].to_vec()).unwrap();
    (10 + len, dict)
}

#[test]
fn npy_holds_numpys_header_then_every_value_in_c_order() {
    let m = mounted_dense(dense_cells(13));
    let npy = m.read_all("data.npy").unwrap();
    let (start, dict) = npy_header(&npy);
    // NumPy's format: the header ends with a newline, its length a multiple of 64.
    assert_eq!(start % 64, 0, "{dict:?}");
    assert!(dict.ends_with('\n'), "{dict:?}");
    let dict = dict.trim_end();
    assert!(dict.contains("'descr': '<f4'"), "{dict}");
    assert!(dict.contains("'fortran_order': False"), "C order: {dict}");
    assert!(
        dict.contains("'shape': (100, 10)"),
        "the current domain: {dict}"
    );
    let values: Vec<f32> = (npy[start..].chunks_exact(4))
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let c_order: Vec<f32> = (0..100)
        .flat_map(|i| (0..10).map(move |j| dense_value(i, j)))
        .collect();
    assert_eq!(values, c_order);
    assert_eq!(npy.len(), start + 4000);
}

#[test]
fn npy_has_its_size_before_a_read_and_any_range_reads_on_its_own() {
    let m = mounted_dense(dense_cells(13));
    let attr = m.stat("data.npy").unwrap();
    assert!(attr.size_known);
    assert_eq!(
        reads_of(&m.store, DENSE),
        0,
        "its size follows from metadata"
    );
    let whole = m.read_all("data.npy").unwrap();
    assert_eq!(attr.size, whole.len() as u64);
    for (offset, size) in [(0, 10), (128, 40), (128 + 4 * 555, 4 * 21), (3000, 10_000)] {
        let piece = m.read_at("data.npy", offset, size).unwrap();
        let end = (offset as usize + size as usize).min(whole.len());
        assert_eq!(piece, whole[offset as usize..end], "{offset}+{size}");
    }
}

#[test]
fn a_dense_arrays_text_files_have_a_row_per_cell_of_its_domain() {
    let m = mounted_dense(dense_cells(13));
    assert_eq!(text(&m, "data.csv"), dense_csv(0..=99, 0..=9));
    let tsv = dense_csv(0..=99, 0..=9).replace(',', "\t");
    assert_eq!(text(&m, "data.tsv"), tsv);
}

#[test]
fn a_slice_of_a_dense_array_holds_every_cell_of_its_ranges() {
    let m = mounted_dense(dense_cells(13));
    assert_eq!(text(&m, "slices/5-6,2-4.csv"), dense_csv(5..=6, 2..=4));
    assert_eq!(text(&m, "slices/98-120.csv"), dense_csv(98..=99, 0..=9));
    assert_eq!(text(&m, "slices/*,9.csv"), dense_csv(0..=99, 9..=9));
}

#[test]
fn a_dense_arrays_parquet_is_sized_and_holds_every_cell() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, Int64Type};
    let m = mounted_dense(dense_cells(13));
    let attr = m.stat("data.parquet").unwrap();
    let bytes = m.read_all("data.parquet").unwrap();
    assert_eq!((attr.size, attr.size_known), (bytes.len() as u64, true));
    let rows = parquet_rows(&bytes);
    assert_eq!(rows.num_rows(), 1000);
    let (dim_0, dim_1) = (
        rows.column(0).as_primitive::<Int64Type>(),
        rows.column(1).as_primitive::<Int64Type>(),
    );
    let values = rows.column(2).as_primitive::<Float32Type>();
    for n in 0..1000 {
        let (i, j) = (n as i64 / 10, n as i64 % 10);
        assert_eq!((dim_0.value(n), dim_1.value(n)), (i, j));
        assert_eq!(values.value(n), dense_value(i, j));
    }
}

#[test]
fn a_dense_read_that_fails_midway_is_eio_for_npy_and_csv() {
    let m = mounted_dense(dense_cells(13).failing_after(3));
    for path in ["data.npy", "data.csv"] {
        assert_store_went_away(path, m.read_all(path))
    }
    assert_nothing_committed(&m);
}
