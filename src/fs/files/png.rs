//! `level_<n>.png`: one level (a dense array) of a multiscale image as a picture. The pixels
//! are stored uncompressed, so the size follows from the shape; the file is generated whole
//! when opened (a PNG is written in one go) and cached.

use std::io;
use std::sync::Arc;

use arrow_schema::DataType;

use crate::format::png::{self, ImageAxis, PngLayout};
use crate::soma::{dense_values, ArrayObject};

use super::super::cache::CacheKey;
use super::super::data::{content_key, open_whole};
use super::super::error::{FsError, FsResult};
use super::super::open_file::OpenFile;
use super::{FileContext, FileKind};

/// The PNG of an image level: its value type and layout (whose size needs no data).
fn png_layout(level: &ArrayObject, axes: &[ImageAxis]) -> Option<(DataType, PngLayout)> {
    let shape = level.schema.shape.clone()?;
    let values = level.schema.columns.iter().rfind(|c| !c.is_index)?;
    let layout = PngLayout::new(&shape, &values.arrow_type, axes).ok()?;
    Some((values.arrow_type.clone(), layout))
}

/// A level drawn with its axes.
#[derive(Debug)]
pub struct PngFile {
    level: Arc<ArrayObject>,
    axes: Vec<ImageAxis>,
    key: CacheKey,
}

impl PngFile {
    /// The PNG of `level`, if it can be drawn.
    pub fn of(level: &Arc<ArrayObject>, axes: Vec<ImageAxis>) -> Option<PngFile> {
        png_layout(level, &axes)?;
        let key = content_key([&**level], |digest| {
            digest.text("png");
        });
        Some(PngFile {
            level: level.clone(),
            axes,
            key,
        })
    }
}

impl FileKind for PngFile {
    fn size(&self, _cx: &FileContext) -> FsResult<Option<u64>> {
        let (_, layout) = png_layout(&self.level, &self.axes).ok_or(FsError::NotFound)?;
        Ok(Some(layout.file_size()))
    }

    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        let level = &self.level;
        let what = format!("{} as PNG", level.uri);
        let generate = |out: &mut (dyn io::Write + Send)| {
            let values = dense_values(level, None)?;
            let shape = level.schema.shape.clone().unwrap_or_default();
            let value_type = level
                .schema
                .columns
                .iter()
                .rfind(|c| !c.is_index)
                .map(|c| c.arrow_type.clone())
                .ok_or_else(|| io::Error::other("the level has no value column"))?;
            out.write_all(&png::encode(&values, &shape, &value_type, &self.axes)?)
        };
        open_whole(cx, &self.key, &what, generate)
    }
}
