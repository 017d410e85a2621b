//! The grammar of slice file names, pure: `<R0>[,<R1>…].<ext>`, one range per index column in
//! order, each `A-B` (inclusive), `A` or `*`; missing trailing ranges mean all of a column.
//!
//! Integer and float columns take `A-B` and `A` (numbers may be negative: `-5--1`); string
//! columns take an exact value, percent-encoded where it holds `%`, `,`, `/` or is `*`
//! (`%25`, `%2C`, `%2F`, `%2A`). A name that does not parse, has more ranges than columns or
//! a reversed range is no slice. Every name [`format`] writes parses back to the same slice.

use crate::format::TableFormat;

/// What kind of values an index column holds, for parsing its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    Int,
    UInt,
    Float,
    Text,
}

/// One column's part of a slice.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceRange {
    All,
    Int(i64, i64),
    UInt(u64, u64),
    Float(f64, f64),
    Text(String),
}

/// A parsed slice name.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceName {
    pub ranges: Vec<SliceRange>,
    pub format: TableFormat,
}

/// Splits `A-B` at the `-` that separates two numbers (a leading `-` is a sign).
fn split_range(text: &str) -> Option<(&str, &str)> {
    text.char_indices()
        .filter(|&(i, c)| c == '-' && i > 0)
        .map(|(i, _)| (&text[..i], &text[i + 1..]))
        .find(|(a, b)| !a.is_empty() && !b.is_empty() && !a.ends_with(['-', 'e', 'E']))
}

/// Parses one number of a range; rejects spellings that do not round-trip (`+1`, `01`).
fn number<T: std::str::FromStr + ToString>(text: &str) -> Option<T> {
    let value: T = text.parse().ok()?;
    (value.to_string() == text).then_some(value)
}

/// A float bound: any finite spelling Rust parses (`-1`, `-1.0`, `1e-7`); names are written
/// as the shortest text that parses back, as the CSV files write values.
fn float(text: &str) -> Option<f64> {
    let value: f64 = text.parse().ok()?;
    (value.is_finite() && !text.starts_with('+')).then_some(value)
}

fn format_float(value: f64) -> String {
    crate::format::text::float_text(value)
}

fn parse_range(text: &str, kind: ColumnKind) -> Option<SliceRange> {
    if text == "*" {
        return Some(SliceRange::All);
    }
    fn pair<T: PartialOrd + Copy>(text: &str, one: impl Fn(&str) -> Option<T>) -> Option<(T, T)> {
        let (a, b) = match split_range(text) {
            Some((a, b)) => (one(a)?, one(b)?),
            None => {
                let v = one(text)?;
                (v, v)
            }
        };
        (a <= b).then_some((a, b))
    }
    match kind {
        ColumnKind::Int => pair(text, number::<i64>).map(|(a, b)| SliceRange::Int(a, b)),
        ColumnKind::UInt => pair(text, number::<u64>).map(|(a, b)| SliceRange::UInt(a, b)),
        ColumnKind::Float => pair(text, float).map(|(a, b)| SliceRange::Float(a, b)),
        ColumnKind::Text => decode(text).map(SliceRange::Text),
    }
}

/// Parses a slice file name against the kinds of the index columns, in order.
pub fn parse(name: &str, columns: &[ColumnKind]) -> Option<SliceName> {
    let (stem, ext) = name.rsplit_once('.')?;
    let format = TableFormat::from_extension(ext)?;
    if stem.is_empty() {
        return None;
    }
    let parts: Vec<&str> = stem.split(',').collect();
    if parts.len() > columns.len() {
        return None;
    }
    let mut ranges = parts
        .iter()
        .zip(columns)
        .map(|(part, kind)| parse_range(part, *kind))
        .collect::<Option<Vec<_>>>()?;
    // Missing trailing ranges mean all; written out, so that equal slices compare equal.
    ranges.resize(columns.len(), SliceRange::All);
    Some(SliceName { ranges, format })
}

/// The canonical name of a slice: trailing `*` ranges left out (all `*` is `*`).
pub fn format(slice: &SliceName) -> String {
    let mut parts: Vec<String> = slice
        .ranges
        .iter()
        .map(|r| match r {
            SliceRange::All => "*".to_owned(),
            SliceRange::Int(a, b) => format!("{a}-{b}"),
            SliceRange::UInt(a, b) => format!("{a}-{b}"),
            SliceRange::Float(a, b) => format!("{}-{}", format_float(*a), format_float(*b)),
            SliceRange::Text(s) => encode(s),
        })
        .collect();
    while parts.len() > 1 && parts.last().is_some_and(|p| p == "*") {
        parts.pop();
    }
    if parts.is_empty() {
        parts.push("*".to_owned());
    }
    format!("{}.{}", parts.join(","), slice.format.extension())
}

/// Percent-encodes a string value for a slice name.
fn encode(value: &str) -> String {
    if value == "*" {
        return "%2A".to_owned();
    }
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '%' => out.push_str("%25"),
            ',' => out.push_str("%2C"),
            '/' => out.push_str("%2F"),
            '\0' => out.push_str("%00"),
            c => out.push(c),
        }
    }
    if out.is_empty() {
        // The empty string: `%00` alone (a NUL cannot be a value).
        out.push_str("%00");
    }
    out
}

/// Decodes a percent-encoded value: only the escapes [`encode`] writes are accepted.
fn decode(text: &str) -> Option<String> {
    if text == "%00" {
        return Some(String::new());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let escaped = rest.get(i..i + 3)?;
        out.push(match escaped {
            "%25" => '%',
            "%2C" => ',',
            "%2F" => '/',
            "%2A" => '*',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    (encode(&out) == text).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ColumnKind::*;

    fn slice(ranges: Vec<SliceRange>) -> SliceName {
        SliceName {
            ranges,
            format: TableFormat::Csv,
        }
    }

    #[test]
    fn examples_from_the_contract() {
        assert_eq!(
            parse("0-999,*.csv", &[Int, Int]),
            Some(slice(vec![SliceRange::Int(0, 999), SliceRange::All]))
        );
        assert_eq!(
            parse("17.jsonl", &[Int, Int]),
            Some(SliceName {
                ranges: vec![SliceRange::Int(17, 17), SliceRange::All],
                format: TableFormat::Jsonl
            })
        );
    }

    #[test]
    fn negative_numbers_and_floats() {
        assert_eq!(
            parse("-5--1.csv", &[Int]),
            Some(slice(vec![SliceRange::Int(-5, -1)]))
        );
        assert_eq!(
            parse("-5.csv", &[Int]),
            Some(slice(vec![SliceRange::Int(-5, -5)]))
        );
        assert_eq!(
            parse("0.5-2.csv", &[Float]),
            Some(slice(vec![SliceRange::Float(0.5, 2.0)]))
        );
        assert_eq!(
            parse("-1.0-0.0.csv", &[Float]),
            Some(slice(vec![SliceRange::Float(-1.0, 0.0)]))
        );
        assert_eq!(
            parse("1e-7-1.csv", &[Float]),
            Some(slice(vec![SliceRange::Float(1e-7, 1.0)]))
        );
    }

    #[test]
    fn malformed_names_are_rejected() {
        for name in [
            "",
            ".csv",
            "5.txt",
            "5",
            "9-3.csv",
            "1,2,3.csv",
            "a.csv",
            "1-.csv",
            "-.csv",
            "1--.csv",
            "01.csv",
            "+1.csv",
            "1-2-3.csv",
            ",.csv",
            "1,.csv",
            "*-3.csv",
        ] {
            assert_eq!(parse(name, &[Int, Int]), None, "{name:?}");
        }
        assert_eq!(parse("-1.csv", &[UInt]), None);
        assert_eq!(parse("a%zz.csv", &[Text]), None);
    }

    #[test]
    fn string_values_are_exact_and_decoded() {
        assert_eq!(
            parse("a%2Cb-c.tsv", &[Text]),
            Some(SliceName {
                ranges: vec![SliceRange::Text("a,b-c".into())],
                format: TableFormat::Tsv
            })
        );
        assert_eq!(
            parse("%2A.csv", &[Text]),
            Some(slice(vec![SliceRange::Text("*".into())]))
        );
    }

    #[test]
    fn canonical_names() {
        assert_eq!(
            format(&slice(vec![SliceRange::Int(3, 9), SliceRange::All])),
            "3-9.csv"
        );
        assert_eq!(
            format(&slice(vec![SliceRange::All, SliceRange::All])),
            "*.csv"
        );
        assert_eq!(
            format(&slice(vec![SliceRange::All, SliceRange::Int(1, 1)])),
            "*,1-1.csv"
        );
    }

    fn kind_and_range() -> impl proptest::strategy::Strategy<Value = (ColumnKind, SliceRange)> {
        use proptest::prelude::*;
        prop_oneof![
            Just((Int, SliceRange::All)),
            (any::<i64>(), any::<i64>())
                .prop_map(|(a, b)| (Int, SliceRange::Int(a.min(b), a.max(b)))),
            (any::<u64>(), any::<u64>())
                .prop_map(|(a, b)| (UInt, SliceRange::UInt(a.min(b), a.max(b)))),
            (-1e300f64..1e300, -1e300f64..1e300)
                .prop_map(|(a, b)| (Float, SliceRange::Float(a.min(b), a.max(b)))),
            "\\PC*"
                .prop_filter("no NUL", |s: &String| !s.contains('\0'))
                .prop_map(|s| (Text, SliceRange::Text(s))),
        ]
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(name in "\\PC{0,40}", kinds in proptest::collection::vec(0..4u8, 0..4)) {
            let kinds: Vec<ColumnKind> = kinds.iter().map(|k| [Int, UInt, Float, Text][*k as usize]).collect();
            if let Some(parsed) = parse(&name, &kinds) {
                // Whatever parses, formats to a name that parses to the same slice.
                proptest::prop_assert_eq!(parse(&format(&parsed), &kinds), Some(parsed));
            }
        }

        #[test]
        fn every_formatted_name_parses_back(columns in proptest::collection::vec(kind_and_range(), 1..4)) {
            let (kinds, ranges): (Vec<_>, Vec<_>) = columns.into_iter().unzip();
            let slice = SliceName { ranges, format: TableFormat::Parquet };
            let name = format(&slice);
            proptest::prop_assert!(!name.contains('/') && !name.contains('\0'));
            proptest::prop_assert_eq!(parse(&name, &kinds), Some(slice));
        }
    }
}
