//! Documents: small files made whole in memory from an object's metadata or schema
//! (`metadata.json`, `schema.json`, the spatial JSON files, `error.txt`). Their bytes are
//! made on first look and kept with the node, so their size is always exact.

use std::sync::{Arc, OnceLock};

use crate::format::json;
use crate::soma::{spatial, SomaObject};

use super::super::error::{FsError, FsResult};
use super::super::open_file::OpenFile;
use super::{FileContext, FileKind};

/// Which spatial document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpatialDoc {
    CoordinateSpace,
    Transforms,
    Image,
}

/// What a document shows.
#[derive(Debug)]
enum Source {
    Metadata(Arc<SomaObject>),
    Schema(Arc<SomaObject>),
    ErrorText(Arc<str>),
    Spatial(Arc<SomaObject>, SpatialDoc),
}

/// A document, and its bytes once made.
#[derive(Debug)]
pub struct Document {
    source: Source,
    bytes: OnceLock<FsResult<Arc<[u8]>>>,
}

impl Document {
    fn new(source: Source) -> Document {
        Document {
            source,
            bytes: OnceLock::new(),
        }
    }

    /// `metadata.json` of an object.
    pub fn metadata(object: Arc<SomaObject>) -> Document {
        Document::new(Source::Metadata(object))
    }

    /// `schema.json` of an array.
    pub fn schema(object: Arc<SomaObject>) -> Document {
        Document::new(Source::Schema(object))
    }

    /// `error.txt` of a member that cannot be opened.
    pub fn error_text(message: Arc<str>) -> Document {
        Document::new(Source::ErrorText(message))
    }

    /// A spatial object's decoded JSON.
    pub fn spatial(object: Arc<SomaObject>, doc: SpatialDoc) -> Document {
        Document::new(Source::Spatial(object, doc))
    }

    fn bytes(&self) -> FsResult<Arc<[u8]>> {
        self.bytes
            .get_or_init(|| {
                self.make()
                    .map(Arc::from)
                    .map_err(|e| FsError::io("cannot make a document", e))
            })
            .clone()
    }

    fn make(&self) -> Result<Vec<u8>, String> {
        Ok(match &self.source {
            Source::Metadata(object) => json::metadata_json(object.metadata()),
            Source::Schema(object) => match object.as_ref() {
                SomaObject::Array(array) => {
                    let stored_cells = array.stored_cells().map_err(|e| e.to_string())?;
                    json::schema_json(array, stored_cells)
                }
                SomaObject::Group(_) => return Err(format!("{}: not an array", object.uri())),
            },
            Source::ErrorText(message) => format!("{message}\n").into_bytes(),
            Source::Spatial(object, doc) => {
                let metadata = object.metadata();
                let decoded = match doc {
                    SpatialDoc::CoordinateSpace => spatial::coordinate_space(metadata),
                    SpatialDoc::Transforms => spatial::transforms(metadata),
                    SpatialDoc::Image => {
                        spatial::image_schema(metadata).map(|r| r.map(|i| i.to_json()))
                    }
                };
                match decoded {
                    Some(Ok(doc)) => json::document(&doc),
                    Some(Err(e)) => return Err(format!("{}: {e}", object.uri())),
                    None => return Err(format!("{}: no such document", object.uri())),
                }
            }
        })
    }
}

impl FileKind for Document {
    fn size(&self, _cx: &FileContext) -> FsResult<Option<u64>> {
        Ok(Some(self.bytes()?.len() as u64))
    }

    fn open(&self, _cx: &FileContext) -> FsResult<OpenFile> {
        Ok(OpenFile::Bytes(self.bytes()?))
    }
}
