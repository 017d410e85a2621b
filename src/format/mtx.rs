//! The files of a Cell Ranger matrix directory, as Seurat's `Read10X` and scanpy's
//! `read_10x_mtx` read them: `matrix.mtx` (Matrix Market coordinate, features × barcodes,
//! 1-based), `barcodes.tsv` (one barcode a line) and `genes.tsv` / `features.tsv` (feature id,
//! feature name, `Gene Expression`).

use std::io::{self, Write};

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use super::text::{int, Floats, TextBuf};

/// The type of every feature: a matrix directory holds one modality, gene expression.
pub const FEATURE_TYPE: &str = "Gene Expression";

/// Text that must stay on one line of one TSV field.
fn field(text: &str) -> String {
    text.replace(['\t', '\n', '\r'], " ")
}

pub fn write_barcodes<'a>(
    barcodes: impl IntoIterator<Item = &'a str>,
    out: &mut dyn Write,
) -> io::Result<()> {
    for barcode in barcodes {
        writeln!(out, "{}", field(barcode))?;
    }
    Ok(())
}

pub fn write_features<'a>(
    features: impl IntoIterator<Item = (&'a str, &'a str)>,
    out: &mut dyn Write,
) -> io::Result<()> {
    for (id, name) in features {
        writeln!(out, "{}\t{}\t{FEATURE_TYPE}", field(id), field(name))?;
    }
    Ok(())
}

/// The header of a matrix: the banner, then rows (features), columns (barcodes), entries.
pub fn write_matrix_header(
    integer: bool,
    features: usize,
    barcodes: usize,
    entries: u64,
    out: &mut dyn Write,
) -> io::Result<()> {
    let field = if integer { "integer" } else { "real" };
    writeln!(out, "%%MatrixMarket matrix coordinate {field} general")?;
    writeln!(out, "{features} {barcodes} {entries}")
}

/// Writes entries `feature barcode value`, one a line, numbers spelled as in CSV; `None`
/// positions are skipped. Returns how many were written.
pub fn write_entries(
    feature_positions: impl Iterator<Item = Option<u64>>,
    barcode_positions: impl Iterator<Item = Option<u64>>,
    values: &ArrayRef,
    out: &mut TextBuf,
) -> io::Result<u64> {
    let mut floats = Floats::default();
    let mut written = 0;
    macro_rules! each {
        ($t:ty, |$v:ident, $out:ident| $write:expr) => {{
            let values = values.as_primitive::<$t>();
            for (row, (f, b)) in feature_positions.zip(barcode_positions).enumerate() {
                let (Some(f), Some(b)) = (f, b) else { continue };
                if values.is_null(row) {
                    continue;
                }
                out.put_int(false, f);
                out.push(b' ');
                out.put_int(false, b);
                out.push(b' ');
                let $v = values.value(row);
                let $out = &mut *out;
                $write;
                out.push(b'\n');
                written += 1;
            }
        }};
    }
    match values.data_type() {
        DataType::Int8 => each!(Int8Type, |v, out| int(v, out)),
        DataType::Int16 => each!(Int16Type, |v, out| int(v, out)),
        DataType::Int32 => each!(Int32Type, |v, out| int(v, out)),
        DataType::Int64 => each!(Int64Type, |v, out| int(v, out)),
        DataType::UInt8 => each!(UInt8Type, |v, out| int(v, out)),
        DataType::UInt16 => each!(UInt16Type, |v, out| int(v, out)),
        DataType::UInt32 => each!(UInt32Type, |v, out| int(v, out)),
        DataType::UInt64 => each!(UInt64Type, |v, out| int(v, out)),
        DataType::Float32 => each!(Float32Type, |v, out| floats.write(v, false, out)),
        DataType::Float64 => each!(Float64Type, |v, out| floats.write(v, false, out)),
        other => {
            return Err(io::Error::other(format!(
                "a matrix of {other} cannot be written as Matrix Market"
            )))
        }
    }
    Ok(written)
}
