//! The tree's reads, tested over cells in memory (no libtiledb): files streamed batch by
//! batch, content committed to the cache whole and only whole, a read that fails midway an
//! error and never a short file, a `where/` query joining obs to X, and AnnData assembled as
//! `.h5ad` and as Zarr. What each file must hold follows from the cells the test puts in the
//! store; the integration tests in `tests/python/` compare real stores with tiledbsoma.

use std::time::Duration;

use crate::soma::fixtures::{
    dataframe, dataframe_cells, dataframe_nulls, sparse_array, sparse_cells, sparse_row_columns,
    sparse_value, with_cells,
};
use crate::soma::{ArrayData, MemoryCells, SomaObject};

use super::error::FsError;
use super::tests::{mount_streaming, mount_with, store_with_measurement, FakeStore, Mounted};

mod dense;
mod formats;
mod opens;
mod queries;
mod slices;
mod tenx;
mod values;

const OBS: &str = "mem://exp/obs";
const X: &str = "mem://exp/ms/RNA/X/data";

/// The experiment of [`store_with_measurement`], obs and X with cells behind them, read in
/// batches of 7 and 40 rows: every file below spans several batches.
fn mounted_with_cells(obs: MemoryCells) -> Mounted {
    mount_with(store_with_cells(obs), Duration::from_secs(60))
}

fn store_with_cells(obs: MemoryCells) -> std::sync::Arc<FakeStore> {
    let store = store_with_measurement();
    store.put(with_cells(dataframe(OBS, "frag-1"), obs));
    store.put(with_cells(sparse_array(X), sparse_cells(40)));
    store.put(with_cells(
        dataframe("mem://exp/ms/RNA/var", "frag-var"),
        dataframe_cells(7),
    ));
    store
}

/// How many reads the cells behind the array at `uri` have served.
fn reads_of(store: &FakeStore, uri: &str) -> usize {
    let object = store.object(uri);
    match object.as_ref() {
        SomaObject::Array(array) => match array.data() {
            ArrayData::Memory(cells) => cells.reads(),
            other => panic!("{uri} holds no cells in memory: {other:?}"),
        },
        SomaObject::Group(_) => panic!("{uri} is a group"),
    }
}

/// obs as CSV, as the contract writes it: a header, rows sorted by `soma_joinid`, floats as
/// Python prints them, a null as an empty field, a category as its label.
fn obs_csv(rows: impl Iterator<Item = i64>) -> String {
    let mut csv = String::from("soma_joinid,x,cell_type\n");
    for j in rows {
        let (null_x, null_type) = dataframe_nulls(j);
        let x = match null_x {
            true => String::new(),
            false => format!("{}", j as f64 / 2.0 + 0.25),
        };
        let label = match (null_type, j % 2) {
            (true, _) => "",
            (false, 0) => "a",
            (false, _) => "b/c",
        };
        csv += &format!("{j},{x},{label}\n");
    }
    csv
}

/// X's cells of the rows `rows`, as CSV.
fn x_csv(rows: impl Iterator<Item = i64>) -> String {
    let mut csv = String::from("soma_dim_0,soma_dim_1,soma_data\n");
    for i in rows {
        for j in sparse_row_columns(i) {
            csv += &format!("{i},{j},{}\n", sparse_value(i, j));
        }
    }
    csv
}

/// The file at `path`, read whole, as text.
fn text(m: &Mounted, path: &str) -> String {
    let bytes = m.read_all(path).unwrap_or_else(|e| panic!("{path}: {e:?}"));
    String::from_utf8(bytes).unwrap()
}

/// The label of `cell_type` in row `j` of [`dataframe_cells`], `None` where null.
fn label(j: i64) -> Option<&'static str> {
    match (dataframe_nulls(j).1, j % 2) {
        (true, _) => None,
        (false, 0) => Some("a"),
        (false, _) => Some("b/c"),
    }
}

/// The value of `x` in row `j` of [`dataframe_cells`], `None` where null.
fn x_value(j: i64) -> Option<f64> {
    (!dataframe_nulls(j).0).then_some(j as f64 / 2.0 + 0.25)
}

/// The record batches of a Parquet file, read back with the `parquet` crate, as one.
fn parquet_rows(bytes: &[u8]) -> arrow_array::RecordBatch {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let path = std::env::temp_dir().join(format!(
        "soma-mount-reads-{}-{n}.parquet",
        std::process::id()
    ));
    std::fs::write(&path, bytes).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let schema = builder.schema().clone();
    let batches: Vec<_> = builder.build().unwrap().map(Result::unwrap).collect();
    arrow_select::concat::concat_batches(&schema, &batches).unwrap()
}

/// The files the cache has committed (not those being written).
fn committed(m: &Mounted) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![m.cache_dir.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if !path.to_string_lossy().ends_with(".tmp") {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn a_data_file_streams_every_batch_of_its_array_in_order() {
    let m = mounted_with_cells(dataframe_cells(7));
    let csv = String::from_utf8(m.read("obs/data.csv").unwrap()).unwrap();
    assert_eq!(csv, obs_csv(0..100));
    let x = String::from_utf8(m.read("ms/RNA/X/data/data.csv").unwrap()).unwrap();
    assert_eq!(x, x_csv(0..100));
    // A slice reads its rows alone.
    let slice = String::from_utf8(m.read("obs/slices/10-29.csv").unwrap()).unwrap();
    assert_eq!(slice, obs_csv(10..30));
}

#[test]
fn content_is_committed_to_the_cache_whole_and_read_from_it_after() {
    let m = mounted_with_cells(dataframe_cells(7));
    let first = m.read("obs/data.tsv").unwrap();
    assert_eq!(first, obs_csv(0..100).replace(',', "\t").into_bytes());
    let reads = reads_of(&m.store, OBS);
    assert!(reads >= 1);
    // The file is in the cache, whole, and a second open reads it from there.
    let cached: Vec<Vec<u8>> = committed(&m)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(cached.contains(&first), "the cache holds the file whole");
    assert_eq!(m.read("obs/data.tsv").unwrap(), first);
    assert_eq!(
        reads_of(&m.store, OBS),
        reads,
        "no second read of the cells"
    );
    assert_eq!(m.stat("obs/data.tsv").unwrap().size, first.len() as u64);
}

/// A read's answer is `EIO`, with the failing store's message.
fn assert_store_went_away(what: &str, read: Result<Vec<u8>, FsError>) {
    match read {
        Err(FsError::Io(message)) => assert!(message.contains("went away"), "{message}"),
        other => panic!("{what}: expected EIO, got {other:?}"),
    }
}

fn assert_nothing_committed(m: &Mounted) {
    let found = committed(m);
    assert!(found.is_empty(), "nothing committed: {found:?}");
}

#[test]
fn a_read_that_fails_midway_is_an_error_and_leaves_no_short_file() {
    // The third batch of obs fails: a store that goes away during the read.
    let m = mounted_with_cells(dataframe_cells(10).failing_after(2));
    for _ in 0..2 {
        assert_store_went_away("obs/data.csv", m.read("obs/data.csv"));
    }
    assert_nothing_committed(&m);
    // Nor does a stat show the rows read before the failure as the file.
    match m.stat("obs/data.csv") {
        Ok(attr) => assert!(!attr.size_known || attr.size == 0, "{attr:?}"),
        Err(e) => assert!(matches!(e, FsError::Io(_)), "{e:?}"),
    }
}

#[test]
fn a_stream_that_fails_midway_is_an_error_and_is_not_committed() {
    // Streamed as it is read (nothing generated whole first), every batch in turn.
    let m = mount_streaming(store_with_cells(dataframe_cells(7)));
    let csv = String::from_utf8(m.read_all("obs/data.csv").unwrap()).unwrap();
    assert_eq!(csv, obs_csv(0..100));
    let m = mount_streaming(store_with_cells(dataframe_cells(10).failing_after(2)));
    assert_store_went_away("obs/data.csv", m.read_all("obs/data.csv"));
    assert_nothing_committed(&m);
}

#[test]
fn a_query_joins_the_cells_obs_selects_to_their_rows_of_x() {
    let m = mounted_with_cells(dataframe_cells(7));
    // x = j / 2 + 0.25 < 10 for j <= 19; rows 7 and 17 hold a null x, which no comparison
    // keeps.
    let selected = || (0..20).filter(|j| !dataframe_nulls(*j).0);
    let obs = m.read("where/x < 10/obs/data.csv").unwrap();
    assert_eq!(String::from_utf8(obs).unwrap(), obs_csv(selected()));
    let x = m.read("where/x < 10/ms/RNA/X/data/data.csv").unwrap();
    assert_eq!(String::from_utf8(x).unwrap(), x_csv(selected()));
    // A category's label (a `/` in a name is written %2F).
    let b = m
        .read("where/cell_type == 'b%2Fc' and x < 10/obs/data.csv")
        .unwrap();
    let odd = selected().filter(|j| j % 2 == 1 && !dataframe_nulls(*j).1);
    assert_eq!(String::from_utf8(b).unwrap(), obs_csv(odd));
}

/// X of [`sparse_cells`] as CSR: its values row by row, and where each row starts.
fn x_csr() -> (Vec<f32>, Vec<i64>) {
    let mut data = Vec::new();
    let mut indptr = vec![0];
    for i in 0..100 {
        data.extend(sparse_row_columns(i).map(|j| sparse_value(i, j)));
        indptr.push(data.len() as i64);
    }
    (data, indptr)
}

fn position(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn an_h5ad_is_assembled_whole_with_x_as_csr() {
    let m = mounted_with_cells(dataframe_cells(7));
    let h5ad = m.read("anndata/RNA.h5ad").unwrap();
    assert_eq!(&h5ad[..8], b"\x89HDF\r\n\x1a\n", "an HDF5 file");
    assert_eq!(m.stat("anndata/RNA.h5ad").unwrap().size, h5ad.len() as u64);
    // X's values in CSR order, and its row pointers, each stored whole.
    let (data, indptr) = x_csr();
    let data: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let indptr: Vec<u8> = indptr.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert!(position(&h5ad, &data).is_some(), "X/data");
    assert!(position(&h5ad, &indptr).is_some(), "X/indptr");
    for text in ["csr_matrix", "categorical", "b/c", "cell_type"] {
        assert!(position(&h5ad, text.as_bytes()).is_some(), "{text}");
    }
}

#[test]
fn a_zarr_store_is_assembled_chunk_by_chunk_with_x_as_csr() {
    let m = mounted_with_cells(dataframe_cells(7));
    let attrs = m.read("anndata/RNA.zarr/X/.zattrs").unwrap();
    let attrs: serde_json::Value = serde_json::from_slice(&attrs).unwrap();
    assert_eq!(attrs["encoding-type"], "csr_matrix");
    assert_eq!(attrs["shape"], serde_json::json!([100, 100]));
    let (data, indptr) = x_csr();
    let zarray = m.read("anndata/RNA.zarr/X/data/.zarray").unwrap();
    let zarray: serde_json::Value = serde_json::from_slice(&zarray).unwrap();
    assert_eq!(zarray["shape"], serde_json::json!([300]));
    assert_eq!(zarray["dtype"], "<f4");
    let chunk = m.read("anndata/RNA.zarr/X/data/0").unwrap();
    let values: Vec<f32> = (chunk.chunks_exact(4).take(300))
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(values, data);
    let chunk = m.read("anndata/RNA.zarr/X/indptr/0").unwrap();
    let starts: Vec<i64> = (chunk.chunks_exact(8).take(101))
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(starts, indptr);
}
