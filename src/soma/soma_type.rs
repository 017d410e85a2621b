//! The kinds of SOMA object, recognised from an object's `soma_object_type` metadata, and
//! the names soma-mount shows for them.

use crate::tiledb::{Metadata, ObjectType};

/// The kind of object at a URI, from its `soma_object_type` metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SomaType {
    Collection,
    Experiment,
    Measurement,
    Scene,
    MultiscaleImage,
    DataFrame,
    SparseNDArray,
    DenseNDArray,
    PointCloudDataFrame,
    GeometryDataFrame,
    /// A TileDB group without SOMA metadata.
    PlainGroup,
    /// A TileDB array without SOMA metadata.
    PlainArray,
}

impl SomaType {
    /// Recognises the `soma_object_type` value of an object of the given TileDB kind.
    pub fn recognise(kind: ObjectType, metadata: &Metadata) -> SomaType {
        let declared = metadata.get("soma_object_type").and_then(|v| v.as_str());
        match (kind, declared) {
            (ObjectType::Group, Some("SOMACollection")) => SomaType::Collection,
            (ObjectType::Group, Some("SOMAExperiment")) => SomaType::Experiment,
            (ObjectType::Group, Some("SOMAMeasurement")) => SomaType::Measurement,
            (ObjectType::Group, Some("SOMAScene")) => SomaType::Scene,
            // The spec (1.1.0) spells a Scene's type "SOMAMultiscaleImage" too; a real image
            // carries its image schema, a Scene does not.
            (ObjectType::Group, Some("SOMAMultiscaleImage")) => {
                if metadata.contains_key("soma_multiscale_image_schema") {
                    SomaType::MultiscaleImage
                } else {
                    SomaType::Scene
                }
            }
            (ObjectType::Array, Some("SOMADataFrame")) => SomaType::DataFrame,
            (ObjectType::Array, Some("SOMASparseNDArray")) => SomaType::SparseNDArray,
            (ObjectType::Array, Some("SOMADenseNDArray")) => SomaType::DenseNDArray,
            (ObjectType::Array, Some("SOMAPointCloudDataFrame")) => SomaType::PointCloudDataFrame,
            (ObjectType::Array, Some("SOMAGeometryDataFrame")) => SomaType::GeometryDataFrame,
            (ObjectType::Array, _) => SomaType::PlainArray,
            _ => SomaType::PlainGroup,
        }
    }

    /// The name soma-mount shows for this type (`schema.json`'s `soma_object_type`).
    pub fn name(self) -> &'static str {
        match self {
            SomaType::Collection => "SOMACollection",
            SomaType::Experiment => "SOMAExperiment",
            SomaType::Measurement => "SOMAMeasurement",
            SomaType::Scene => "SOMAScene",
            SomaType::MultiscaleImage => "SOMAMultiscaleImage",
            SomaType::DataFrame => "SOMADataFrame",
            SomaType::SparseNDArray => "SOMASparseNDArray",
            SomaType::DenseNDArray => "SOMADenseNDArray",
            SomaType::PointCloudDataFrame => "SOMAPointCloudDataFrame",
            SomaType::GeometryDataFrame => "SOMAGeometryDataFrame",
            SomaType::PlainGroup => "TileDBGroup",
            SomaType::PlainArray => "TileDBArray",
        }
    }

    /// True for the data-frame types, whose index columns are named by the user.
    pub fn is_dataframe(self) -> bool {
        matches!(
            self,
            SomaType::DataFrame | SomaType::PointCloudDataFrame | SomaType::GeometryDataFrame
        )
    }

    /// True for SparseNDArray and DenseNDArray.
    pub fn is_nd_array(self) -> bool {
        matches!(self, SomaType::SparseNDArray | SomaType::DenseNDArray)
    }
}
