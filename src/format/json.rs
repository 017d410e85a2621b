//! The JSON documents: `metadata.json` (an object's metadata) and `schema.json` (an array's
//! columns, domains and shape).

use arrow_schema::{DataType, TimeUnit};
use base64::Engine;
use serde_json::{json, Map, Number, Value as Json};

use crate::soma::ArrayObject;
use crate::tiledb::{Bounds, Metadata, Value};

/// A float as JSON: a number, or "NaN", "Infinity", "-Infinity" (JSON has none of them).
fn float_json(f: f64) -> Json {
    match Number::from_f64(f) {
        Some(n) => Json::Number(n),
        None if f.is_nan() => Json::from("NaN"),
        None if f > 0.0 => Json::from("Infinity"),
        None => Json::from("-Infinity"),
    }
}

/// One typed value as JSON: 64-bit integers exact, blobs as base64.
fn value_json(v: &Value) -> Json {
    match v {
        Value::Int(i) => Json::from(*i),
        Value::UInt(u) => Json::from(*u),
        Value::Float(f) => float_json(*f),
        Value::Bool(b) => Json::from(*b),
        Value::Text(s) => Json::from(s.as_str()),
        Value::Bytes(b) => Json::from(base64::engine::general_purpose::STANDARD.encode(b)),
    }
}

fn bounds_json(b: &Bounds) -> Json {
    Json::Array(vec![value_json(&b.0), value_json(&b.1)])
}

/// A JSON document as a file: pretty, with a final newline.
pub fn document(doc: &Json) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(doc).expect("JSON values always serialise");
    out.push(b'\n');
    out
}

/// `metadata.json`: every key, sorted; one value as itself, several as an array.
pub fn metadata_json(metadata: &Metadata) -> Vec<u8> {
    let doc: Map<String, Json> = metadata
        .iter()
        .map(|(key, entry)| {
            let value = match entry.values.as_slice() {
                [one] => value_json(one),
                many => Json::Array(many.iter().map(value_json).collect()),
            };
            (key.clone(), value)
        })
        .collect();
    document(&Json::Object(doc))
}

/// The name pyarrow gives an Arrow type (`str(pa.large_string())` is "large_string"), so
/// that `schema.json` reads the same as tiledbsoma's schema.
pub fn arrow_type_name(t: &DataType) -> String {
    fn unit(u: &TimeUnit) -> &'static str {
        match u {
            TimeUnit::Second => "s",
            TimeUnit::Millisecond => "ms",
            TimeUnit::Microsecond => "us",
            TimeUnit::Nanosecond => "ns",
        }
    }
    match t {
        DataType::Boolean => "bool".into(),
        DataType::Int8 => "int8".into(),
        DataType::Int16 => "int16".into(),
        DataType::Int32 => "int32".into(),
        DataType::Int64 => "int64".into(),
        DataType::UInt8 => "uint8".into(),
        DataType::UInt16 => "uint16".into(),
        DataType::UInt32 => "uint32".into(),
        DataType::UInt64 => "uint64".into(),
        DataType::Float16 => "halffloat".into(),
        DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Utf8 => "string".into(),
        DataType::LargeUtf8 => "large_string".into(),
        DataType::Binary => "binary".into(),
        DataType::LargeBinary => "large_binary".into(),
        DataType::Date32 => "date32[day]".into(),
        DataType::Timestamp(u, None) => format!("timestamp[{}]", unit(u)),
        DataType::Timestamp(u, Some(tz)) => format!("timestamp[{}, tz={tz}]", unit(u)),
        DataType::Dictionary(index, values) => format!(
            "dictionary<values={}, indices={}, ordered=0>",
            arrow_type_name(values),
            arrow_type_name(index)
        ),
        other => other.to_string(),
    }
}

/// `schema.json` of an array.
pub fn schema_json(array: &ArrayObject, stored_cells: u64) -> Vec<u8> {
    let schema = &array.schema;
    let columns: Vec<Json> = schema
        .columns
        .iter()
        .map(|c| {
            let mut type_name = arrow_type_name(&c.arrow_type);
            if c.enumeration.as_ref().is_some_and(|e| e.ordered) {
                type_name = type_name.replace("ordered=0", "ordered=1");
            }
            let mut col = json!({
                "name": c.name,
                "type": type_name,
                "nullable": c.nullable,
                "index": c.is_index,
            });
            if let Some(domain) = &c.domain {
                col["domain"] = bounds_json(domain);
            }
            if let Some(e) = &c.enumeration {
                col["enumeration"] = Json::Array(e.values.iter().map(value_json).collect());
            }
            col
        })
        .collect();
    let mut doc = json!({
        "soma_object_type": array.soma_type.name(),
        "index_column_names": schema.index_columns().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        "columns": columns,
    });
    if let Some(shape) = &schema.shape {
        doc["shape"] = json!(shape);
        doc["non_empty_domain"] = Json::Array(
            array
                .non_empty_domain
                .iter()
                .map(|b| b.as_ref().map_or(Json::Null, bounds_json))
                .collect(),
        );
    }
    doc["cell_count"] = json!(stored_cells);
    document(&doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiledb::{Datatype, MetadataValue};

    #[test]
    fn metadata_values_follow_the_contract() {
        let mut md = Metadata::new();
        let mut put = |k: &str, datatype, values| {
            md.insert(k.into(), MetadataValue { datatype, values });
        };
        put("big", Datatype::UInt64, vec![Value::UInt(u64::MAX)]);
        put("exact", Datatype::Int64, vec![Value::Int((1 << 62) + 1)]);
        put("nan", Datatype::Float64, vec![Value::Float(f64::NAN)]);
        put(
            "ninf",
            Datatype::Float64,
            vec![Value::Float(f64::NEG_INFINITY)],
        );
        put("pair", Datatype::Int32, vec![Value::Int(1), Value::Int(2)]);
        put("blob", Datatype::Blob, vec![Value::Bytes(vec![0, 255])]);
        put("s", Datatype::StringUtf8, vec![Value::Text("é".into())]);
        let text = String::from_utf8(metadata_json(&md)).unwrap();
        let doc: Json = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["big"].as_u64(), Some(u64::MAX));
        assert_eq!(doc["exact"].as_i64(), Some((1 << 62) + 1));
        assert_eq!(doc["nan"], "NaN");
        assert_eq!(doc["ninf"], "-Infinity");
        assert_eq!(doc["pair"], json!([1, 2]));
        assert_eq!(doc["blob"], "AP8=");
        assert_eq!(doc["s"], "é");
        let keys: Vec<&String> = doc.as_object().unwrap().keys().collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }

    #[test]
    fn type_names_match_pyarrow() {
        let dict = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8));
        assert_eq!(
            arrow_type_name(&dict),
            "dictionary<values=string, indices=int8, ordered=0>"
        );
        assert_eq!(arrow_type_name(&DataType::Float32), "float");
        assert_eq!(arrow_type_name(&DataType::LargeUtf8), "large_string");
    }
}
