//! How values are written: CSV quoting, floats, booleans and nulls in CSV, TSV and JSON
//! Lines, over a frame of awkward values.

use std::sync::Arc;

use arrow_array::{BooleanArray, Float32Array, Float64Array, Int64Array, LargeStringArray};
use arrow_schema::DataType;
use serde_json::{json, Value};

use crate::soma::fixtures::{column, frame_of};
use crate::tiledb::{Datatype, VAR_NUM};

use super::super::tests::{mount_at, store};
use super::*;

const FRAME: &str = "mem://values";

/// The text column's cells.
const TEXTS: [Option<&str>; 7] = [
    Some("plain"),
    Some("a,b"),
    Some("say \"hi\""),
    Some("line\nbreak"),
    Some(""),
    None,
    Some("tab\there"),
];

/// A frame of seven rows: text, float32, float64 and boolean cells, nulls among them.
fn mounted_values() -> Mounted {
    let mut text = column("s", Datatype::StringUtf8, DataType::LargeUtf8, false);
    text.cell_val_num = VAR_NUM;
    let columns = vec![
        column("soma_joinid", Datatype::Int64, DataType::Int64, true),
        text,
        column("f32", Datatype::Float32, DataType::Float32, false),
        column("f64", Datatype::Float64, DataType::Float64, false),
        column("b", Datatype::Bool, DataType::Boolean, false),
    ];
    let SomaObject::Array(frame) = frame_of(FRAME, "f", columns, 7) else {
        unreachable!("frame_of makes an array")
    };
    let f32s = [
        Some(0.1f32),
        Some(f32::NAN),
        Some(f32::INFINITY),
        Some(f32::NEG_INFINITY),
        None,
        Some(1.5),
        Some(3.0),
    ];
    let f64s = [
        Some(1e16),
        Some(-2.5),
        Some(3.0),
        None,
        Some(0.5),
        Some(1234.5),
        Some(0.1),
    ];
    let bools = [
        Some(true),
        Some(false),
        None,
        Some(true),
        Some(false),
        Some(true),
        None,
    ];
    let cells = arrow_array::RecordBatch::try_new(
        frame.schema.arrow(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..7)),
            Arc::new(LargeStringArray::from(TEXTS.to_vec())),
            Arc::new(Float32Array::from(f32s.to_vec())),
            Arc::new(Float64Array::from(f64s.to_vec())),
            Arc::new(BooleanArray::from(bools.to_vec())),
        ],
    )
    .unwrap();
    let store = store();
    store.put(with_cells(
        SomaObject::Array(frame),
        MemoryCells::new(cells, 3),
    ));
    mount_at(store, FRAME, Duration::from_secs(60))
}

#[test]
fn csv_quotes_only_fields_that_need_it_and_an_empty_string_differs_from_a_null() {
    let m = mounted_values();
    // RFC 4180; floats as Python prints them, NaN and infinities as NaN, inf, -inf.
    let expected = "soma_joinid,s,f32,f64,b\n\
                    0,plain,0.1,1e+16,true\n\
                    1,\"a,b\",NaN,-2.5,false\n\
                    2,\"say \"\"hi\"\"\",inf,3.0,\n\
                    3,\"line\nbreak\",-inf,,true\n\
                    4,\"\",,0.5,false\n\
                    5,,1.5,1234.5,true\n\
                    6,tab\there,3.0,0.1,\n";
    assert_eq!(text(&m, "data.csv"), expected);
}

#[test]
fn tsv_quotes_fields_holding_a_tab_and_not_a_comma() {
    let m = mounted_values();
    let tsv = text(&m, "data.tsv");
    let lines: Vec<&str> = tsv.split('\n').collect();
    assert_eq!(lines[0], "soma_joinid\ts\tf32\tf64\tb");
    assert_eq!(lines[2], "1\ta,b\tNaN\t-2.5\tfalse");
    // Row 3's line break is quoted: it takes two lines.
    assert_eq!(lines[4..6], ["3\t\"line", "break\"\t-inf\t\ttrue"]);
    assert_eq!(lines[6], "4\t\"\"\t\t0.5\tfalse");
    assert_eq!(lines[7], "5\t\t1.5\t1234.5\ttrue");
    assert_eq!(lines[8], "6\t\"tab\there\"\t3.0\t0.1\t");
}

#[test]
fn jsonl_writes_the_same_values_as_json_with_nan_and_infinities_null() {
    let m = mounted_values();
    let rows: Vec<Value> = (text(&m, "data.jsonl").lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected = [
        json!({"soma_joinid": 0, "s": "plain", "f32": 0.1, "f64": 1e16, "b": true}),
        json!({"soma_joinid": 1, "s": "a,b", "f32": null, "f64": -2.5, "b": false}),
        json!({"soma_joinid": 2, "s": "say \"hi\"", "f32": null, "f64": 3.0, "b": null}),
        json!({"soma_joinid": 3, "s": "line\nbreak", "f32": null, "f64": null, "b": true}),
        json!({"soma_joinid": 4, "s": "", "f32": null, "f64": 0.5, "b": false}),
        json!({"soma_joinid": 5, "s": null, "f32": 1.5, "f64": 1234.5, "b": true}),
        json!({"soma_joinid": 6, "s": "tab\there", "f32": 3.0, "f64": 0.1, "b": null}),
    ];
    assert_eq!(rows, expected);
}

#[test]
fn parquet_keeps_nulls_nan_and_the_empty_string() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Float32Type;
    use arrow_array::Array as _;
    let m = mounted_values();
    let rows = parquet_rows(&m.read_all("data.parquet").unwrap());
    let texts = arrow_cast::cast(rows.column(1), &DataType::LargeUtf8).unwrap();
    let texts: Vec<Option<&str>> = texts.as_string::<i64>().iter().collect();
    assert_eq!(texts, TEXTS);
    let f32s = rows.column(2).as_primitive::<Float32Type>();
    assert!(f32s.value(1).is_nan());
    assert_eq!(f32s.value(2), f32::INFINITY);
    assert!(f32s.is_null(4) && !f32s.is_null(1));
    let bools: Vec<Option<bool>> = rows.column(4).as_boolean().iter().collect();
    assert_eq!(bools[2], None);
    assert_eq!(bools[3], Some(true));
}

#[test]
fn a_filter_on_text_or_booleans_leaves_nulls_out() {
    let m = mounted_values();
    let ids = |filter: &str| -> Vec<i64> {
        let csv = text(&m, &format!("where/{filter}/data.csv"));
        (csv.lines().skip(1))
            .filter_map(|l| l.split(',').next()?.parse().ok())
            .collect()
    };
    assert_eq!(
        ids("s in ['plain', '']"),
        [0, 4],
        "the empty string, not the null"
    );
    assert_eq!(
        ids("s == 'a%2Cb'"),
        [1],
        "any %XX escape in the path is decoded"
    );
    assert_eq!(ids("b == True"), [0, 3, 5]);
    assert_eq!(ids("b != True"), [1, 4], "`!=` leaves nulls out");
    assert_eq!(ids("b == 0"), [1, 4], "a Boolean column takes 0 and 1");
    assert_eq!(ids("f64 >= 3"), [0, 2, 5], "a comparison leaves nulls out");
}
