//! The files of a Cell Ranger matrix directory (`10x/<layer>/`): `matrix.mtx`,
//! `features.tsv` (and `genes.tsv`, the same), `barcodes.tsv`. Each is generated whole when
//! opened (the matrix's header counts its entries, so it is written after them), and by a
//! `stat` when it is estimated below `--materialize-limit` (`Read10X` sizes the names
//! files with `fread`, which trusts `stat`, and `tar` archives what `stat` says) or with
//! `--exact-sizes`. A category's or a query's file is estimated from its own cells, counted
//! by the `stat`, so that its size is exact at the first `stat` below the limit however
//! large the whole layer is.

use std::io;
use std::sync::Arc;

use crate::format::mtx;
use crate::format::text::TextBuf;
use crate::soma::joinids::Positions;
use crate::soma::tenx::TenxLayer;
use crate::soma::{estimated_cells_along, SelectedRows};

use super::super::cache::CacheKey;
use super::super::data::{
    content_key, estimated_bytes, generate_whole, open_generated, small, WRITE_BUFFER_BYTES,
};
use super::super::error::FsResult;
use super::super::open_file::OpenFile;
use super::{FileContext, FileKind};

/// About how long a line of each file is, to estimate its size: a barcode (`AAACCTGAGAAACCAT-1`),
/// a feature (an Ensembl id, a symbol and `Gene Expression`), an entry (two positions and a
/// value).
const BARCODE_LINE_BYTES: u64 = 24;
const FEATURE_LINE_BYTES: u64 = 48;
const ENTRY_LINE_BYTES: u64 = 24;

/// Which file of a matrix directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenxPart {
    Matrix,
    Features,
    Barcodes,
}

impl TenxPart {
    fn name(self) -> &'static str {
        match self {
            TenxPart::Matrix => "matrix.mtx",
            TenxPart::Features => "features.tsv",
            TenxPart::Barcodes => "barcodes.tsv",
        }
    }
}

/// A file of a matrix directory.
#[derive(Debug)]
pub struct TenxFile {
    layer: Arc<TenxLayer>,
    part: TenxPart,
    key: CacheKey,
}

impl TenxFile {
    pub fn new(layer: Arc<TenxLayer>, part: TenxPart) -> TenxFile {
        // obs, var and the layer's snapshots, the category, and which file.
        let key = content_key([&**layer.obs(), &**layer.var(), &*layer.x], |digest| {
            digest.text(part.name());
            layer.cells.rows.digest_into(digest);
            layer.genes.rows.digest_into(digest);
        });
        TenxFile { layer, part, key }
    }

    fn what(&self) -> String {
        format!("{} as 10x {}", self.layer.x.uri, self.part.name())
    }

    /// About how many bytes the file comes to: a line per cell, gene or entry it holds. A
    /// category's or a query's are counted from its own cells: their join ids (read once for
    /// the directory, [`SelectedRows`]) and libtiledb's estimate of the layer's cells in them.
    fn estimated_bytes(&self) -> crate::soma::Result<u64> {
        let layer = &self.layer;
        let rows = |selected: &SelectedRows, line_bytes: u64| match selected.is_all() {
            true => estimated_bytes(&selected.frame, line_bytes),
            false => Ok(selected.count()?.saturating_mul(line_bytes)),
        };
        match self.part {
            TenxPart::Barcodes => rows(&layer.cells, BARCODE_LINE_BYTES),
            TenxPart::Features => rows(&layer.genes, FEATURE_LINE_BYTES),
            TenxPart::Matrix => {
                let along = [Some(&*layer.cells), Some(&*layer.genes)];
                let entries = estimated_cells_along(&layer.x, &along)?;
                Ok(entries.saturating_mul(ENTRY_LINE_BYTES))
            }
        }
    }

    /// Whether the file is generated whole before its size is told (see the module's notes).
    fn small(&self, cx: &FileContext) -> bool {
        cx.options.exact_sizes || small(&cx.options, self.estimated_bytes())
    }

    /// Generates the file whole into the cache.
    fn generate(&self, cx: &FileContext) -> FsResult<()> {
        generate_whole(&cx.options.cache, &self.key, &self.what(), |out| {
            self.write(cx, out)
        })
    }

    fn write(&self, cx: &FileContext, out: &mut (dyn io::Write + Send)) -> io::Result<()> {
        let layer = &self.layer;
        match self.part {
            TenxPart::Barcodes => {
                let barcodes = layer.barcodes()?;
                mtx::write_barcodes(barcodes.iter().map(|(_, b)| b.as_str()), out)
            }
            TenxPart::Features => {
                let features = layer.features()?;
                mtx::write_features(
                    features
                        .iter()
                        .map(|(_, id, name)| (id.as_str(), name.as_str())),
                    out,
                )
            }
            TenxPart::Matrix => {
                let barcodes = layer.barcodes()?;
                let features = layer.features()?;
                let cell_ids: Vec<i64> = barcodes.iter().map(|(id, _)| *id).collect();
                let cell_positions = Positions::new(cell_ids.clone());
                let feature_positions = Positions::new(features.iter().map(|f| f.0).collect());
                // The entries go to a scratch file first: the header counts them.
                let scratch_key = CacheKey::new(["matrix entries", &self.what()]);
                let (_scratch, body) = cx.options.cache.begin(&scratch_key)?;
                let mut body_out = io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, &body);
                let mut entries = 0u64;
                let mut buf = TextBuf::default();
                layer.entries(&cell_ids, |cells, genes, values| {
                    buf.clear();
                    entries += mtx::write_entries(
                        genes.iter().map(|&g| feature_positions.get(g)),
                        cells.iter().map(|&c| cell_positions.get(c)),
                        values,
                        &mut buf,
                    )?;
                    io::Write::write_all(&mut body_out, buf.as_bytes())
                })?;
                io::Write::flush(&mut body_out)?;
                drop(body_out);
                mtx::write_matrix_header(
                    layer.is_integer(),
                    feature_positions.len(),
                    cell_positions.len(),
                    entries,
                    out,
                )?;
                let mut body = &body;
                io::Seek::rewind(&mut body)?;
                io::copy(&mut body, &mut *out).map(|_| ())
            }
        }
    }
}

impl FileKind for TenxFile {
    fn size(&self, cx: &FileContext) -> FsResult<Option<u64>> {
        Ok(cx.options.cache.size(&self.key))
    }

    fn open(&self, cx: &FileContext) -> FsResult<OpenFile> {
        self.generate(cx)?;
        open_generated(&cx.options.cache, &self.key, &self.what())
    }

    /// A file of the whole layer when it is small; a category's or a query's always: its
    /// cells are counted on the request pool ([`FileKind::settle_size`]), not here.
    fn sized_on_stat(&self, cx: &FileContext) -> bool {
        !self.layer.is_whole() || self.small(cx)
    }

    fn settle_size(&self, cx: &FileContext) -> FsResult<()> {
        match self.small(cx) {
            true => self.generate(cx),
            false => Ok(()),
        }
    }
}
