//! Cell Ranger's HDF5 feature-barcode matrix (`filtered_feature_bc_matrix.h5`, its v3
//! layout), as scanpy's `read_10x_h5` and Seurat's `Read10X_h5` read it: the root holds
//! one group, `matrix`, with the matrix compressed by barcode (CSC of features × barcodes:
//! `data`, `indices`, `indptr`, `shape`), `barcodes`, and `features/` (`id`, `name`,
//! `feature_type`, `genome`, and `_all_tag_keys`, the names of the tags beside them).
//!
//! Strings are fixed-length, as long as the longest of their dataset (numpy's `S<n>`);
//! `data` holds int32 counts for integer values, and the values' own float width
//! otherwise; `indices` and `indptr` are int64 (0-based feature positions, and each
//! barcode's first entry), `shape` int32 (features, barcodes). Entries are appended as
//! they come, barcode after barcode, to chunked datasets: a writer holds a chunk of each
//! and a count per barcode, whatever the size of the matrix.
//!
//! This module knows nothing of SOMA: barcodes, features and values come as text and
//! Arrow arrays.

use std::io;
use std::path::Path;
use std::str::FromStr;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use hdf5::types::{FixedAscii, FixedUnicode, TypeDescriptor};
use hdf5::{File, Group, H5Type};
use hdf5_metno as hdf5;

use super::h5ad::{h5_error, indptr, Appender, Extent};
use super::mtx::FEATURE_TYPE;

/// What `data` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counts {
    Int32,
    Float32,
    Float64,
}

impl Counts {
    /// Int32 counts for integers (and booleans), float32 or float64 for floats of that width.
    pub fn of(values: &DataType) -> Counts {
        match values {
            DataType::Float64 => Counts::Float64,
            DataType::Float16 | DataType::Float32 => Counts::Float32,
            _ => Counts::Int32,
        }
    }

    /// The bytes of a value.
    pub fn width(self) -> u64 {
        match self {
            Counts::Int32 | Counts::Float32 => 4,
            Counts::Float64 => 8,
        }
    }
}

/// `data` being written.
enum Data {
    Int32(Appender<i32>),
    Float32(Appender<f32>),
    Float64(Appender<f64>),
}

impl Data {
    fn push(&mut self, values: &ArrayRef) -> io::Result<()> {
        match self {
            Data::Int32(data) => {
                let wide = cast(values, &DataType::Int64)?;
                let counts = (wide.as_primitive::<Int64Type>().values().iter())
                    .map(|&v| {
                        i32::try_from(v).map_err(|_| {
                            io::Error::other(format!("the count {v} does not fit an int32"))
                        })
                    })
                    .collect::<io::Result<Vec<i32>>>()?;
                data.push(&counts)
            }
            Data::Float32(data) => {
                let floats = cast(values, &DataType::Float32)?;
                data.push(floats.as_primitive::<Float32Type>().values())
            }
            Data::Float64(data) => {
                let floats = cast(values, &DataType::Float64)?;
                data.push(floats.as_primitive::<Float64Type>().values())
            }
        }
    }

    fn finish(self) -> io::Result<()> {
        match self {
            Data::Int32(data) => data.finish().map(drop),
            Data::Float32(data) => data.finish().map(drop),
            Data::Float64(data) => data.finish().map(drop),
        }
    }
}

/// `values` as `to`, every value kept: a null, or a value `to` cannot hold, is an error.
fn cast(values: &ArrayRef, to: &DataType) -> io::Result<ArrayRef> {
    if values.null_count() > 0 {
        return Err(io::Error::other("a matrix entry holds no value (null)"));
    }
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    arrow_cast::cast_with_options(values, to, &options).map_err(io::Error::other)
}

/// Entries a chunk of `data` and `indices` holds (at most): a chunk takes its whole space
/// in the file, so the last one is at most this much larger than its entries.
const CHUNK_ENTRIES: usize = 1 << 16;

/// Strings converted for libhdf5 this many at a time.
const TEXT_BLOCK: usize = 1 << 14;

/// A matrix being written into a new file, barcode after barcode.
pub struct FeatureBarcodeMatrix {
    file: File,
    matrix: Group,
    data: Data,
    indices: Appender<i64>,
    /// Entries per barcode.
    per_barcode: Vec<u64>,
    /// The barcode of the last entry written.
    last_barcode: usize,
    features: usize,
}

impl FeatureBarcodeMatrix {
    /// Creates the file at `path` with its barcodes and its features (id and name of each),
    /// for about `expected_entries` entries of `counts` (this sizes the chunks).
    pub fn create<'a>(
        path: &Path,
        barcodes: &[&str],
        features: &[(&'a str, &'a str)],
        counts: Counts,
        expected_entries: u64,
    ) -> io::Result<FeatureBarcodeMatrix> {
        use hdf5::file::FileCloseDegree;
        // Closing the file closes whatever is still open in it: the file is whole on close.
        let file = File::with_options()
            .with_fapl(|fapl| fapl.fclose_degree(FileCloseDegree::Strong))
            .create(path)
            .map_err(h5_error)?;
        let matrix = file.create_group("matrix").map_err(h5_error)?;
        write_texts(&matrix, "barcodes", barcodes)?;
        let group = matrix.create_group("features").map_err(h5_error)?;
        let ids: Vec<&str> = features.iter().map(|(id, _)| *id).collect();
        write_texts(&group, "id", &ids)?;
        let names: Vec<&str> = features.iter().map(|(_, name)| *name).collect();
        write_texts(&group, "name", &names)?;
        write_texts(&group, "feature_type", &vec![FEATURE_TYPE; features.len()])?;
        // The store names no genome: each feature's is empty, as Cell Ranger's are for
        // features of no reference.
        write_texts(&group, "genome", &vec![""; features.len()])?;
        write_texts(&group, "_all_tag_keys", &["genome"])?;
        let chunk = usize::try_from(expected_entries)
            .unwrap_or(CHUNK_ENTRIES)
            .clamp(1, CHUNK_ENTRIES);
        let extent = Extent::Growing { chunk };
        let data = match counts {
            Counts::Int32 => Data::Int32(Appender::create(&matrix, "data", extent)?),
            Counts::Float32 => Data::Float32(Appender::create(&matrix, "data", extent)?),
            Counts::Float64 => Data::Float64(Appender::create(&matrix, "data", extent)?),
        };
        let indices = Appender::create(&matrix, "indices", extent)?;
        Ok(FeatureBarcodeMatrix {
            file,
            matrix,
            data,
            indices,
            per_barcode: vec![0; barcodes.len()],
            last_barcode: 0,
            features: features.len(),
        })
    }

    /// Appends entries: each of barcode `barcodes[i]` and feature `features[i]` (0-based
    /// positions) holding `values[i]`. Barcodes never go back: an entry of an earlier
    /// barcode than one written before is an error.
    pub fn append(
        &mut self,
        barcodes: &[usize],
        features: &[usize],
        values: &ArrayRef,
    ) -> io::Result<()> {
        for &barcode in barcodes {
            if barcode >= self.per_barcode.len() {
                return Err(io::Error::other(format!(
                    "barcode {barcode} is outside the matrix's {}",
                    self.per_barcode.len()
                )));
            }
            if barcode < self.last_barcode {
                return Err(io::Error::other(format!(
                    "barcode {barcode} comes after barcode {}",
                    self.last_barcode
                )));
            }
            self.last_barcode = barcode;
            self.per_barcode[barcode] += 1;
        }
        if let Some(&feature) = features.iter().find(|&&f| f >= self.features) {
            return Err(io::Error::other(format!(
                "feature {feature} is outside the matrix's {}",
                self.features
            )));
        }
        let indices: Vec<i64> = features.iter().map(|&f| f as i64).collect();
        self.indices.push(&indices)?;
        self.data.push(values)
    }

    /// Writes `indptr` and `shape`, and closes the file.
    pub fn finish(self) -> io::Result<()> {
        self.data.finish()?;
        self.indices.finish()?;
        write_numbers(&self.matrix, "indptr", &indptr(&self.per_barcode))?;
        let shape = [self.features, self.per_barcode.len()].map(|n| {
            i32::try_from(n).map_err(|_| io::Error::other(format!("{n} does not fit an int32")))
        });
        let [features, barcodes] = shape;
        write_numbers(&self.matrix, "shape", &[features?, barcodes?])?;
        drop(self.matrix);
        self.file.close().map_err(h5_error)
    }
}

fn write_numbers<T: H5Type + Clone>(parent: &Group, name: &str, values: &[T]) -> io::Result<()> {
    let mut dataset = Appender::create(parent, name, Extent::Fixed(values.len()))?;
    dataset.push(values)?;
    dataset.finish().map(drop)
}

/// `texts` as a dataset of fixed-length strings as long as the longest (at least 1 byte):
/// ASCII when they all are, UTF-8 otherwise.
fn write_texts(parent: &Group, name: &str, texts: &[&str]) -> io::Result<()> {
    let longest = texts.iter().map(|t| t.len()).max().unwrap_or(0).max(1);
    match longest {
        0..=16 => fixed_texts::<16>(parent, name, texts, longest),
        17..=64 => fixed_texts::<64>(parent, name, texts, longest),
        65..=256 => fixed_texts::<256>(parent, name, texts, longest),
        257..=4096 => fixed_texts::<4096>(parent, name, texts, longest),
        _ => Err(io::Error::other(format!(
            "matrix/{name}: a string of {longest} bytes, more than the 4096 written"
        ))),
    }
}

/// [`write_texts`] through strings of `N` bytes in memory (`N` at least `longest`).
fn fixed_texts<const N: usize>(
    parent: &Group,
    name: &str,
    texts: &[&str],
    longest: usize,
) -> io::Result<()> {
    let ascii = texts.iter().all(|t| t.is_ascii());
    let dtype = match ascii {
        true => TypeDescriptor::FixedAscii(longest),
        false => TypeDescriptor::FixedUnicode(longest),
    };
    let dataset = (parent.new_dataset_builder())
        .empty_as(&dtype)
        .shape(texts.len())
        .create(name)
        .map_err(h5_error)?;
    let refused = |text: &str| io::Error::other(format!("{name}: {text:?} cannot be written"));
    for (block, at) in texts.chunks(TEXT_BLOCK).zip((0..).step_by(TEXT_BLOCK)) {
        let place = at..at + block.len();
        let written = match ascii {
            true => {
                let values = (block.iter())
                    .map(|t| FixedAscii::<N>::from_ascii(t).map_err(|_| refused(t)))
                    .collect::<io::Result<Vec<_>>>()?;
                dataset.write_slice(&values, place)
            }
            false => {
                let values = (block.iter())
                    .map(|t| FixedUnicode::<N>::from_str(t).map_err(|_| refused(t)))
                    .collect::<io::Result<Vec<_>>>()?;
                dataset.write_slice(&values, place)
            }
        };
        written.map_err(h5_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array};
    use std::sync::Arc;

    fn temp_file(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("soma-mount-test-{name}-{}.h5", std::process::id()))
    }

    #[test]
    fn entries_by_barcode_become_csc_with_fixed_length_names() {
        let path = temp_file("tenx-h5");
        let features = [("ENSG1", "A"), ("ENSG22", "BB")];
        let mut matrix = FeatureBarcodeMatrix::create(
            &path,
            &["AAAC-1", "AAAG-1", "AAAT-11"],
            &features,
            Counts::Int32,
            3,
        )
        .unwrap();
        let values: ArrayRef = Arc::new(Int64Array::from(vec![5, 7, 9]));
        matrix.append(&[0, 0, 2], &[0, 1, 1], &values).unwrap();
        let back: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        assert!(
            matrix.append(&[1], &[0], &back).is_err(),
            "barcode 1 after 2"
        );
        matrix.finish().unwrap();

        let file = File::open(&path).unwrap();
        let m = file.group("matrix").unwrap();
        let read_i64 = |name: &str| m.dataset(name).unwrap().read_raw::<i64>().unwrap();
        assert_eq!(read_i64("indptr"), [0, 2, 2, 3]);
        assert_eq!(read_i64("indices"), [0, 1, 1]);
        assert_eq!(
            m.dataset("data").unwrap().read_raw::<i32>().unwrap(),
            [5, 7, 9]
        );
        assert_eq!(
            m.dataset("shape").unwrap().read_raw::<i32>().unwrap(),
            [2, 3]
        );
        let barcodes = m.dataset("barcodes").unwrap();
        assert_eq!(
            barcodes.dtype().unwrap().to_descriptor().unwrap(),
            TypeDescriptor::FixedAscii(7)
        );
        let names = m.dataset("features/name").unwrap();
        let names: Vec<FixedAscii<2>> = names.read_raw().unwrap();
        assert_eq!(
            names.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
            ["A", "BB"]
        );
        let keys: Vec<FixedAscii<6>> = m
            .dataset("features/_all_tag_keys")
            .unwrap()
            .read_raw()
            .unwrap();
        assert_eq!(keys[0].as_str(), "genome");
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_count_beyond_int32_is_an_error_and_floats_keep_their_width() {
        let path = temp_file("tenx-h5-counts");
        let mut matrix =
            FeatureBarcodeMatrix::create(&path, &["a"], &[("g", "g")], Counts::Int32, 1).unwrap();
        let big: ArrayRef = Arc::new(Int64Array::from(vec![1 << 40]));
        assert!(matrix.append(&[0], &[0], &big).is_err());
        drop(matrix);
        assert_eq!(Counts::of(&DataType::Float64), Counts::Float64);
        assert_eq!(Counts::of(&DataType::Float32), Counts::Float32);
        assert_eq!(Counts::of(&DataType::UInt16), Counts::Int32);
        let mut floats =
            FeatureBarcodeMatrix::create(&path, &["a"], &[("g", "g")], Counts::Float64, 1).unwrap();
        let values: ArrayRef = Arc::new(Float64Array::from(vec![0.1]));
        floats.append(&[0], &[0], &values).unwrap();
        floats.finish().unwrap();
        let file = File::open(&path).unwrap();
        let data = file
            .dataset("matrix/data")
            .unwrap()
            .read_raw::<f64>()
            .unwrap();
        assert_eq!(data, [0.1]);
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }
}
