//! The arrays of a measurement's uns collection as AnnData holds them ([`UnsElement`]): a
//! dense array as an array of its shape; a sparse one as the data frame of its cells; a data
//! frame hinted as strings as an array of strings; any other data frame as a data frame. The
//! shape of what becomes an array is told by its schema and cell count without a read
//! ([`uns_array_layout`]); its values are read whole when first needed ([`UnsValues`]), all
//! of a collection's at once ([`UnsTogether`]).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use arrow_array::{Array as _, ArrayRef, RecordBatch};
use arrow_schema::DataType;

use crate::sync::{map_at_once, Recover};

use super::super::error::Error;
use super::super::object::ArrayObject;
use super::super::soma_type::SomaType;
use super::{column_of, index_column, read_all, UnsFrame, AT_ONCE};

/// What an uns array is in the AnnData.
pub enum UnsElement {
    /// An array of this shape, its values in C order.
    Array { shape: Vec<usize>, values: ArrayRef },
    /// A data frame, its rows read whole, indexed by the column `index` names (and whether
    /// the index keeps its name); `None`: by row numbers.
    Frame {
        batches: Vec<RecordBatch>,
        index: Option<(String, bool)>,
    },
}

/// The shape and value type of an uns array that [`uns_element`] makes an array of, as its
/// schema and cell count tell without reading it: a dense array, or a data frame hinted as
/// strings (one row per stored cell). `None` for what becomes a data frame.
pub fn uns_array_layout(array: &ArrayObject) -> io::Result<Option<(Vec<usize>, DataType)>> {
    match array.soma_type {
        SomaType::DenseNDArray => {
            let Some(value) = array.schema.columns.iter().rfind(|c| !c.is_index) else {
                return Ok(None);
            };
            let data_type = match &value.arrow_type {
                DataType::Boolean => DataType::UInt8,
                other => other.clone(),
            };
            Ok(Some((dense_shape(array), data_type)))
        }
        SomaType::SparseNDArray => Ok(None),
        _ => {
            let (first_column, columns) = match UnsFrame::of(array) {
                UnsFrame::Strings1d => ("values", None),
                UnsFrame::Strings2d => ("values_0", Some(strings_2d_columns(array).len())),
                UnsFrame::Frame => return Ok(None),
            };
            let Some(first) = array.schema.columns.iter().find(|c| c.name == first_column) else {
                return Ok(None);
            };
            let rows = array.stored_cells().map_err(Error::from)? as usize;
            let shape = [rows].into_iter().chain(columns).collect();
            Ok(Some((shape, first.arrow_type.clone())))
        }
    }
}

/// The shape of a dense uns array: its current domain.
fn dense_shape(array: &ArrayObject) -> Vec<usize> {
    (array.schema.shape.iter().flatten())
        .map(|&n| n as usize)
        .collect()
}

/// The columns of an uns data frame of strings in two dimensions: `values_0`, `values_1`, …
fn strings_2d_columns(array: &ArrayObject) -> Vec<String> {
    (0..)
        .map(|i| format!("values_{i}"))
        .take_while(|name| array.schema.columns.iter().any(|c| &c.name == name))
        .collect()
}

/// Reads an uns array whole, as what it is in the AnnData.
pub fn uns_element(array: &ArrayObject) -> io::Result<UnsElement> {
    let batches = read_all(array)?;
    let column = |name: &str| column_of(array, &batches, name);
    match array.soma_type {
        SomaType::DenseNDArray => {
            let value = array.schema.columns.iter().rfind(|c| !c.is_index);
            let mut values = column(value.map_or("soma_data", |c| c.name.as_str()))?;
            if values.data_type() == &DataType::Boolean {
                values = arrow_cast::cast(&values, &DataType::UInt8).map_err(io::Error::other)?;
            }
            Ok(UnsElement::Array {
                shape: dense_shape(array),
                values,
            })
        }
        SomaType::SparseNDArray => Ok(UnsElement::Frame {
            batches,
            index: None,
        }),
        _ => match UnsFrame::of(array) {
            UnsFrame::Strings1d => {
                let values = column("values")?;
                Ok(UnsElement::Array {
                    shape: vec![values.len()],
                    values,
                })
            }
            UnsFrame::Strings2d => {
                let columns = strings_2d_columns(array)
                    .iter()
                    .map(|name| column(name))
                    .collect::<io::Result<Vec<_>>>()?;
                let rows = columns.first().map_or(0, |c| c.len());
                // Row by row: row i holds values_0[i], values_1[i], …
                let order: Vec<(usize, usize)> = (0..rows)
                    .flat_map(|i| (0..columns.len()).map(move |j| (j, i)))
                    .collect();
                let parts: Vec<&dyn arrow_array::Array> =
                    columns.iter().map(|c| c.as_ref()).collect();
                let values = arrow_select::interleave::interleave(&parts, &order)
                    .map_err(io::Error::other)?;
                Ok(UnsElement::Array {
                    shape: vec![rows, columns.len()],
                    values,
                })
            }
            UnsFrame::Frame => Ok(UnsElement::Frame {
                batches,
                index: index_column(array, "index"),
            }),
        },
    }
}

/// An uns array laid out from its schema and cell count ([`uns_array_layout`]), its values
/// read whole when first needed and then held.
#[derive(Debug)]
pub struct UnsValues {
    array: Arc<ArrayObject>,
    /// The shape it was laid out with: the values read must fill it.
    shape: Vec<usize>,
    /// Held while they are read: a second reader waits for them.
    read: Mutex<Option<ArrayRef>>,
}

impl UnsValues {
    /// The values of `array`, laid out in `shape`, not read yet.
    pub fn new(array: Arc<ArrayObject>, shape: Vec<usize>) -> UnsValues {
        UnsValues {
            array,
            shape,
            read: Mutex::new(None),
        }
    }

    /// The values in C order, read the first time.
    pub fn values(&self) -> io::Result<ArrayRef> {
        let mut read = self.read.lock().recover();
        if let Some(values) = &*read {
            return Ok(values.clone());
        }
        let values = match uns_element(&self.array)? {
            UnsElement::Array { shape, values } if shape == self.shape => values,
            _ => {
                return Err(io::Error::other(format!(
                    "{}: read, it is not the array of shape {:?} its schema and cell count \
                     told",
                    self.array.uri, self.shape
                )))
            }
        };
        *read = Some(values.clone());
        Ok(values)
    }
}

/// A measurement's uns arrays whose values are read when first needed ([`UnsValues`]), all
/// read at once, [`AT_ONCE`] at a time, when the first of them is needed: anndata reads uns
/// whole when it opens a store, an array after another, and one read after another would
/// cost a round trip or two each over a network.
#[derive(Debug, Default)]
pub struct UnsTogether {
    arrays: Mutex<Vec<Weak<UnsValues>>>,
    started: AtomicBool,
}

impl UnsTogether {
    /// Adds an array to those read together.
    pub fn add(&self, values: &Arc<UnsValues>) {
        self.arrays.lock().recover().push(Arc::downgrade(values));
    }

    /// Reads every array once, the first time it is called (a failed read is read again,
    /// and reported, by the reader that needs it).
    pub fn read_all(&self) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let arrays: Vec<Arc<UnsValues>> = (self.arrays.lock().recover().iter())
            .filter_map(Weak::upgrade)
            .collect();
        map_at_once(&arrays, AT_ONCE, |uns| {
            let _ = uns.values();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::fixtures::{column, dataframe, dense_array, sparse_array, text_metadata};
    use crate::soma::{SomaObject, SomaSchema};
    use crate::tiledb::{Datatype, Fragment, Value};

    fn array(object: SomaObject) -> Arc<ArrayObject> {
        let SomaObject::Array(array) = object else {
            unreachable!("an array")
        };
        array
    }

    /// A data frame of strings as `from_anndata` writes an uns array of them (`hint`
    /// `array_1d` or `array_2d`), with the text columns `columns`, 4 rows in one fragment.
    fn strings(hint: &str, columns: &[&str]) -> Arc<ArrayObject> {
        let text = |name| column(name, Datatype::StringUtf8, DataType::LargeUtf8, false);
        let id = column("soma_joinid", Datatype::Int64, DataType::Int64, true);
        let schema = SomaSchema::sparse_frame(
            std::iter::once(id)
                .chain(columns.iter().map(|&c| text(c)))
                .collect(),
        );
        let metadata = text_metadata(&[
            ("soma_object_type", "SOMADataFrame"),
            ("soma_uns_outgest_hint", hint),
        ]);
        let fragments = vec![Fragment {
            uri: "uns/strings/frag".into(),
            cell_num: 4,
            first_dimension: Some((Value::Int(0), Value::Int(3))),
        }];
        Arc::new(ArrayObject::described(
            "uns/strings",
            SomaType::DataFrame,
            metadata,
            schema,
            vec![Some((Value::Int(0), Value::Int(3)))],
            fragments,
        ))
    }

    #[test]
    fn an_uns_array_is_laid_out_from_its_schema_and_cell_count_and_a_frame_is_not() {
        let layout = |array: &ArrayObject| uns_array_layout(array).unwrap();
        let dense = array(dense_array("uns/dense"));
        assert_eq!(layout(&dense), Some((vec![100, 10], DataType::Float32)));
        let one = strings("array_1d", &["values"]);
        assert_eq!(layout(&one), Some((vec![4], DataType::LargeUtf8)));
        let two = strings("array_2d", &["values_0", "values_1", "values_2"]);
        assert_eq!(layout(&two), Some((vec![4, 3], DataType::LargeUtf8)));
        // A sparse array and a plain data frame are data frames, read whole.
        assert_eq!(layout(&array(sparse_array("uns/sparse"))), None);
        assert_eq!(layout(&array(dataframe("uns/frame", "frag"))), None);
        // Strings without their column are a data frame too.
        assert_eq!(layout(&strings("array_1d", &["other"])), None);
    }

    #[test]
    fn a_failed_read_of_uns_values_is_held_by_no_one_and_read_again() {
        let values = Arc::new(UnsValues::new(
            array(dense_array("uns/dense")),
            vec![100, 10],
        ));
        let together = UnsTogether::default();
        together.add(&values);
        together.add(&Arc::new(UnsValues::new(
            array(dense_array("gone")),
            vec![1],
        )));
        together.read_all();
        // The read failed (no data behind the array): each reader reads again, and fails.
        for _ in 0..2 {
            let error = values.values().unwrap_err().to_string();
            assert!(error.contains("no data to read"), "{error}");
        }
        assert!(values.read.lock().unwrap().is_none());
    }
}
