//! The data files' formats read back and compared with the cells: JSON Lines, TSV and
//! Parquet.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::Array as _;
use arrow_schema::DataType;
use serde_json::{json, Value};

use super::*;

/// Each line of a JSON Lines file, parsed.
fn json_lines(text: &str) -> Vec<serde_json::Map<String, Value>> {
    assert!(text.ends_with('\n'), "every line ends with a newline");
    (text.lines())
        .map(|line| match serde_json::from_str(line).unwrap() {
            Value::Object(row) => row,
            other => panic!("a line that is not an object: {other}"),
        })
        .collect()
}

#[test]
fn obs_jsonl_is_an_object_per_row_with_keys_in_column_order_and_null_as_null() {
    let m = mounted_with_cells(dataframe_cells(7));
    let rows = json_lines(&text(&m, "obs/data.jsonl"));
    assert_eq!(rows.len(), 100);
    for (j, row) in (0..100).zip(&rows) {
        // JSON Lines: keys in column order, an enumerated column as its label.
        let keys: Vec<&str> = row.keys().map(String::as_str).collect();
        assert_eq!(keys, ["soma_joinid", "x", "cell_type"], "row {j}");
        assert_eq!(row["soma_joinid"], json!(j));
        assert_eq!(row["x"], json!(x_value(j)), "row {j}");
        assert_eq!(row["cell_type"], json!(label(j)), "row {j}");
    }
}

#[test]
fn x_jsonl_holds_each_stored_cell_sorted_by_its_dimensions() {
    let m = mounted_with_cells(dataframe_cells(7));
    let rows = json_lines(&text(&m, "ms/RNA/X/data/data.jsonl"));
    let cells: Vec<(i64, i64)> = (0..100)
        .flat_map(|i| sparse_row_columns(i).map(|j| (i, j)))
        .collect();
    assert_eq!(rows.len(), cells.len());
    for (&(i, j), row) in cells.iter().zip(&rows) {
        let keys: Vec<&str> = row.keys().map(String::as_str).collect();
        assert_eq!(keys, ["soma_dim_0", "soma_dim_1", "soma_data"]);
        assert_eq!(
            (row["soma_dim_0"].as_i64(), row["soma_dim_1"].as_i64()),
            (Some(i), Some(j))
        );
        let value = row["soma_data"].as_f64().unwrap() as f32;
        assert_eq!(value, sparse_value(i, j), "({i}, {j})");
    }
}

#[test]
fn a_jsonl_slice_holds_the_rows_of_its_range_alone() {
    let m = mounted_with_cells(dataframe_cells(7));
    let rows = json_lines(&text(&m, "obs/slices/45-54.jsonl"));
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| r["soma_joinid"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (45..=54).collect::<Vec<_>>());
    assert_eq!(rows[2]["x"], Value::Null, "row 47 holds a null x");
    assert_eq!(rows[2]["cell_type"], json!("b/c"));
    assert_eq!(rows[4]["x"], json!(24.75));
    assert_eq!(
        rows[4]["cell_type"],
        Value::Null,
        "row 49 holds a null cell_type"
    );
}

#[test]
fn tsv_is_the_csv_with_tabs_for_commas_whole_and_sliced() {
    // No value of these cells holds a comma, a tab or a quote: nothing is quoted.
    let m = mounted_with_cells(dataframe_cells(7));
    let tsv = |rows: std::ops::Range<i64>| obs_csv(rows).replace(',', "\t");
    assert_eq!(text(&m, "obs/data.tsv"), tsv(0..100));
    assert_eq!(text(&m, "obs/slices/20-39.tsv"), tsv(20..40));
    let x = x_csv(0..100).replace(',', "\t");
    assert_eq!(text(&m, "ms/RNA/X/data/data.tsv"), x);
}

#[test]
fn obs_parquet_reads_back_as_the_cells_with_cell_type_a_dictionary_and_nulls_kept() {
    let m = mounted_with_cells(dataframe_cells(7));
    let rows = parquet_rows(&m.read_all("obs/data.parquet").unwrap());
    let schema = rows.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["soma_joinid", "x", "cell_type"]);
    // Parquet keeps the Arrow schema: enumerations are dictionary columns, nullability kept.
    assert!(
        matches!(schema.field(2).data_type(), DataType::Dictionary(_, values)
            if matches!(values.as_ref(), DataType::Utf8 | DataType::LargeUtf8)),
        "{:?}",
        schema.field(2).data_type()
    );
    assert!(!schema.field(0).is_nullable());
    assert!(schema.field(1).is_nullable() && schema.field(2).is_nullable());
    let ids = rows.column(0).as_primitive::<Int64Type>();
    assert_eq!(ids.values().to_vec(), (0..100).collect::<Vec<i64>>());
    let x: Vec<Option<f64>> = rows
        .column(1)
        .as_primitive::<Float64Type>()
        .iter()
        .collect();
    assert_eq!(x, (0..100).map(x_value).collect::<Vec<_>>());
    let labels = arrow_cast::cast(rows.column(2), &DataType::LargeUtf8).unwrap();
    let labels: Vec<Option<&str>> = labels.as_string::<i64>().iter().collect();
    assert_eq!(labels, (0..100).map(label).collect::<Vec<_>>());
    assert_eq!(rows.column(2).null_count(), 4, "rows 24, 49, 74 and 99");
}

#[test]
fn a_parquet_slice_of_obs_holds_its_rows_alone() {
    let m = mounted_with_cells(dataframe_cells(7));
    let rows = parquet_rows(&m.read_all("obs/slices/90-120.parquet").unwrap());
    let ids = rows.column(0).as_primitive::<Int64Type>();
    // A range outside the domain is clipped to it.
    assert_eq!(ids.values().to_vec(), (90..100).collect::<Vec<i64>>());
    let x: Vec<Option<f64>> = rows
        .column(1)
        .as_primitive::<Float64Type>()
        .iter()
        .collect();
    assert_eq!(x, (90..100).map(x_value).collect::<Vec<_>>());
}

#[test]
fn x_parquet_is_sized_before_a_read_and_reads_back_as_the_cells() {
    let m = mounted_with_cells(dataframe_cells(7));
    // An ND array's Parquet is sized from its cell count at its first stat.
    let attr = m.stat("ms/RNA/X/data/data.parquet").unwrap();
    assert!(attr.size_known && attr.size > 0, "{attr:?}");
    let bytes = m.read_all("ms/RNA/X/data/data.parquet").unwrap();
    assert_eq!(
        attr.size,
        bytes.len() as u64,
        "the size stat gave is the content's"
    );
    let rows = parquet_rows(&bytes);
    assert_eq!(rows.num_rows(), 300);
    let dims = (
        rows.column(0).as_primitive::<Int64Type>(),
        rows.column(1).as_primitive::<Int64Type>(),
    );
    let values = rows.column(2).as_primitive::<Float32Type>();
    let mut n = 0;
    for i in 0..100 {
        for j in sparse_row_columns(i) {
            assert_eq!((dims.0.value(n), dims.1.value(n)), (i, j));
            assert_eq!(values.value(n), sparse_value(i, j));
            n += 1;
        }
    }
}

#[test]
fn a_parquet_slice_of_x_is_sized_from_its_own_cells() {
    let m = mounted_with_cells(dataframe_cells(7));
    let path = "ms/RNA/X/data/slices/parquet/10-19.parquet";
    let attr = m.stat(path).unwrap();
    let bytes = m.read_all(path).unwrap();
    assert!(attr.size_known, "{attr:?}");
    assert_eq!(attr.size, bytes.len() as u64);
    let rows = parquet_rows(&bytes);
    let first = rows.column(0).as_primitive::<Int64Type>();
    let expected: Vec<i64> = (10..20).flat_map(|i| [i; 3]).collect();
    assert_eq!(first.values().to_vec(), expected);
}
