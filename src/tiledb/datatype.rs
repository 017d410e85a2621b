//! TileDB datatypes and the typed values (metadata, domains) decoded from their raw bytes.

use super::error::{Error, Result};
use super::ffi::tiledb_datatype_t;

/// A TileDB datatype (`tiledb_datatype_t`), by its C API value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Datatype {
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
    Char,
    StringAscii,
    StringUtf8,
    StringUtf16,
    StringUtf32,
    StringUcs2,
    StringUcs4,
    Any,
    /// `DATETIME_*` with the unit's name (`"Y"`, `"ms"`, …): int64 counts since the epoch.
    DateTime(TimeUnit),
    /// `TIME_*`: int64 counts since midnight.
    Time(TimeUnit),
    Blob,
    Bool,
    GeomWkb,
    GeomWkt,
}

/// The unit of a `DATETIME_*` or `TIME_*` datatype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeUnit {
    Year,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
    Microsecond,
    Nanosecond,
    Picosecond,
    Femtosecond,
    Attosecond,
}

impl Datatype {
    pub fn from_raw(raw: tiledb_datatype_t) -> Result<Self> {
        use Datatype::*;
        use TimeUnit::*;
        const UNITS: [TimeUnit; 13] = [
            Year,
            Month,
            Week,
            Day,
            Hour,
            Minute,
            Second,
            Millisecond,
            Microsecond,
            Nanosecond,
            Picosecond,
            Femtosecond,
            Attosecond,
        ];
        Ok(match raw {
            0 => Int32,
            1 => Int64,
            2 => Float32,
            3 => Float64,
            4 => Char,
            5 => Int8,
            6 => UInt8,
            7 => Int16,
            8 => UInt16,
            9 => UInt32,
            10 => UInt64,
            11 => StringAscii,
            12 => StringUtf8,
            13 => StringUtf16,
            14 => StringUtf32,
            15 => StringUcs2,
            16 => StringUcs4,
            17 => Any,
            18..=30 => DateTime(UNITS[(raw - 18) as usize]),
            // TIME_* has no year, month, week or day.
            31..=39 => Time(UNITS[(raw - 31 + 4) as usize]),
            40 => Blob,
            41 => Bool,
            42 => GeomWkb,
            43 => GeomWkt,
            other => return Err(Error::new(format!("unknown TileDB datatype {other}"))),
        })
    }

    /// Bytes per value; 1 for the byte-string types.
    pub fn size(self) -> usize {
        use Datatype::*;
        match self {
            Int8 | UInt8 | Char | StringAscii | StringUtf8 | Any | Blob | Bool | GeomWkb
            | GeomWkt => 1,
            Int16 | UInt16 | StringUtf16 | StringUcs2 => 2,
            Int32 | UInt32 | Float32 | StringUtf32 | StringUcs4 => 4,
            Int64 | UInt64 | Float64 | DateTime(_) | Time(_) => 8,
        }
    }

    /// True for the types whose values are text.
    pub fn is_string(self) -> bool {
        use Datatype::*;
        matches!(
            self,
            Char | StringAscii
                | StringUtf8
                | StringUtf16
                | StringUtf32
                | StringUcs2
                | StringUcs4
                | GeomWkt
        )
    }

    /// True for the types whose values are raw bytes.
    pub fn is_bytes(self) -> bool {
        matches!(self, Datatype::Blob | Datatype::Any | Datatype::GeomWkb)
    }

    /// Decodes `bytes`, holding values of this type, into typed values: one `Text` or `Bytes`
    /// for the string and byte types, else one value per element.
    pub fn decode(self, bytes: &[u8]) -> Vec<Value> {
        use Datatype::*;
        fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> Value) -> Vec<Value> {
            bytes
                .chunks_exact(N)
                .map(|c| f(c.try_into().expect("chunks_exact yields N bytes")))
                .collect()
        }
        if self.is_string() {
            return vec![Value::Text(String::from_utf8_lossy(bytes).into_owned())];
        }
        if self.is_bytes() {
            return vec![Value::Bytes(bytes.to_vec())];
        }
        match self {
            Int8 => each(bytes, |b: [u8; 1]| Value::Int(i8::from_ne_bytes(b).into())),
            Int16 => each(bytes, |b| Value::Int(i16::from_ne_bytes(b).into())),
            Int32 => each(bytes, |b| Value::Int(i32::from_ne_bytes(b).into())),
            Int64 | DateTime(_) | Time(_) => each(bytes, |b| Value::Int(i64::from_ne_bytes(b))),
            UInt8 => each(bytes, |b: [u8; 1]| Value::UInt(b[0].into())),
            UInt16 => each(bytes, |b| Value::UInt(u16::from_ne_bytes(b).into())),
            UInt32 => each(bytes, |b| Value::UInt(u32::from_ne_bytes(b).into())),
            UInt64 => each(bytes, |b| Value::UInt(u64::from_ne_bytes(b))),
            Float32 => each(bytes, |b| Value::Float(f32::from_ne_bytes(b).into())),
            Float64 => each(bytes, |b| Value::Float(f64::from_ne_bytes(b))),
            Bool => each(bytes, |b: [u8; 1]| Value::Bool(b[0] != 0)),
            _ => unreachable!("string and byte types are handled above"),
        }
    }
}

/// One typed value read from TileDB: a metadata element, a domain bound.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Text(String),
    Bytes(Vec<u8>),
}

impl Value {
    /// An integer value (signed or unsigned) widened to i128; `None` for anything else.
    pub fn as_i128(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(i128::from(*i)),
            Value::UInt(u) => Some(i128::from(*u)),
            _ => None,
        }
    }

    /// A numeric value as f64; `None` for anything else.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::UInt(u) => Some(*u as f64),
            _ => None,
        }
    }
}

impl Value {
    /// This value as native bytes of `datatype` (for range bounds and conditions).
    pub fn to_native(&self, datatype: Datatype) -> Result<Vec<u8>> {
        use Datatype::*;
        let int = |v: &Value| -> Result<i128> {
            match v {
                Value::Int(i) => Ok(*i as i128),
                Value::UInt(u) => Ok(*u as i128),
                Value::Float(f) if f.fract() == 0.0 => Ok(*f as i128),
                Value::Bool(b) => Ok(i128::from(*b)),
                other => Err(Error::new(format!("{other:?} is not an integer"))),
            }
        };
        let float = |v: &Value| -> Result<f64> {
            match v {
                Value::Int(i) => Ok(*i as f64),
                Value::UInt(u) => Ok(*u as f64),
                Value::Float(f) => Ok(*f),
                other => Err(Error::new(format!("{other:?} is not a number"))),
            }
        };
        macro_rules! narrow {
            ($t:ty) => {{
                let i = int(self)?;
                <$t>::try_from(i)
                    .map(|x| x.to_ne_bytes().to_vec())
                    .map_err(|_| Error::new(format!("{i} is out of range for {datatype:?}")))
            }};
        }
        match datatype {
            Int8 => narrow!(i8),
            Int16 => narrow!(i16),
            Int32 => narrow!(i32),
            Int64 | DateTime(_) | Time(_) => narrow!(i64),
            UInt8 | Bool => narrow!(u8),
            UInt16 => narrow!(u16),
            UInt32 => narrow!(u32),
            UInt64 => narrow!(u64),
            Float32 => Ok((float(self)? as f32).to_ne_bytes().to_vec()),
            Float64 => Ok(float(self)?.to_ne_bytes().to_vec()),
            _ => match self {
                Value::Text(s) => Ok(s.as_bytes().to_vec()),
                Value::Bytes(b) => Ok(b.clone()),
                other => Err(Error::new(format!("{other:?} does not fit {datatype:?}"))),
            },
        }
    }
}
