//! The files of a Cell Ranger matrix directory (`10x/<layer>/`): `matrix.mtx`,
//! `features.tsv` (and `genes.tsv`, the same), `barcodes.tsv`, and Cell Ranger's HDF5
//! matrix `matrix.h5`, which holds all three ([`crate::format::tenx_h5`]), laid out by the
//! same barcodes and features. Each is generated whole when
//! opened (the matrix's header counts its entries, so it is written after them), and by a
//! `stat` when it is estimated below `--materialize-limit` (`Read10X` sizes the names
//! files with `fread`, which trusts `stat`, and `tar` archives what `stat` says) or with
//! `--exact-sizes`. A category's or a query's file is estimated from its own cells, counted
//! by the `stat`, so that its size is exact at the first `stat` below the limit however
//! large the whole layer is.

use std::io;
use std::path::Path;
use std::sync::Arc;

use arrow_schema::DataType;

use crate::format::mtx;
use crate::format::tenx_h5::{Counts, FeatureBarcodeMatrix};
use crate::format::text::TextBuf;
use crate::soma::joinids::Positions;
use crate::soma::tenx::{Named, TenxLayer};
use crate::soma::{estimated_cells_along, SelectedRows};

use super::super::cache::CacheKey;
use super::super::data::{
    content_key, estimated_bytes, generate, generate_at, open_generated, small, WRITE_BUFFER_BYTES,
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
/// How many bytes an index of `matrix.h5` takes (int64): an entry's feature, a barcode's
/// first entry; an entry's value takes its `data`'s width.
const H5_INDEX_BYTES: u64 = 8;

/// Which file of a matrix directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenxPart {
    Matrix,
    /// Cell Ranger's HDF5 matrix, barcodes and features in one file.
    MatrixH5,
    Features,
    Barcodes,
}

impl TenxPart {
    pub fn name(self) -> &'static str {
        match self {
            TenxPart::Matrix => "matrix.mtx",
            TenxPart::MatrixH5 => "matrix.h5",
            TenxPart::Features => "features.tsv",
            TenxPart::Barcodes => "barcodes.tsv",
        }
    }
}

/// The barcodes and features of a matrix, each with its place in it: what every file of
/// the directory is laid out by.
struct Axes {
    barcodes: Named,
    /// Join id, id and name of each feature.
    features: Vec<(i64, String, String)>,
    barcode_positions: Positions,
    feature_positions: Positions,
}

impl Axes {
    fn read(layer: &TenxLayer) -> io::Result<Axes> {
        let barcodes = layer.barcodes()?;
        let features = layer.features()?;
        let barcode_positions = Positions::new(barcodes.iter().map(|b| b.0).collect());
        let feature_positions = Positions::new(features.iter().map(|f| f.0).collect());
        Ok(Axes {
            barcodes,
            features,
            barcode_positions,
            feature_positions,
        })
    }

    fn cell_ids(&self) -> Vec<i64> {
        self.barcodes.iter().map(|(id, _)| *id).collect()
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
            TenxPart::Matrix => Ok(self.estimated_entries()?.saturating_mul(ENTRY_LINE_BYTES)),
            TenxPart::MatrixH5 => {
                // A barcode's name and its `indptr`; a feature's id, name, type and genome.
                let barcodes = rows(&layer.cells, BARCODE_LINE_BYTES + H5_INDEX_BYTES)?;
                let features = rows(&layer.genes, FEATURE_LINE_BYTES)?;
                let entry_bytes = self.counts().width() + H5_INDEX_BYTES;
                let entries = self.estimated_entries()?.saturating_mul(entry_bytes);
                Ok(entries.saturating_add(barcodes).saturating_add(features))
            }
        }
    }

    /// About how many entries the matrix holds: libtiledb's estimate of the layer's cells
    /// in the selected cells and genes.
    fn estimated_entries(&self) -> crate::soma::Result<u64> {
        let layer = &self.layer;
        let along = [Some(&*layer.cells), Some(&*layer.genes)];
        estimated_cells_along(&layer.x, &along)
    }

    /// Whether the file is generated whole before its size is told (see the module's notes).
    fn small(&self, cx: &FileContext) -> bool {
        cx.options.exact_sizes || small(&cx.options, self.estimated_bytes())
    }

    /// Generates the file whole into the cache.
    fn generate(&self, cx: &FileContext) -> FsResult<()> {
        let what = self.what();
        match self.part {
            TenxPart::MatrixH5 => generate_at(cx, &self.key, &what, |path, _| {
                self.write_h5(path)?;
                Ok(self.key.clone())
            }),
            _ => generate(cx, &self.key, &what, |out, cx| self.write(cx, out)),
        }
    }

    /// What `matrix.h5`'s `data` holds, for the layer's values.
    fn counts(&self) -> Counts {
        Counts::of(self.layer.value_type().unwrap_or(&DataType::Float32))
    }

    /// Writes `matrix.h5` at `path`: the entries go from the read into the file batch by
    /// batch ([`FeatureBarcodeMatrix`]).
    fn write_h5(&self, path: &Path) -> io::Result<()> {
        let layer = &self.layer;
        let axes = Axes::read(layer)?;
        let barcodes: Vec<&str> = axes.barcodes.iter().map(|(_, b)| b.as_str()).collect();
        let features: Vec<(&str, &str)> = (axes.features.iter())
            .map(|(_, id, name)| (id.as_str(), name.as_str()))
            .collect();
        let expected = self.estimated_entries().map_err(io::Error::other)?;
        let counts = self.counts();
        let mut matrix =
            FeatureBarcodeMatrix::create(path, &barcodes, &features, counts, expected)?;
        let place = |positions: &Positions, id: i64| positions.get(id).map(|p| p as usize - 1);
        layer.entries(&axes.cell_ids(), |cells, genes, values| {
            let mut kept = (Vec::new(), Vec::new(), Vec::new());
            for (at, (&cell, &gene)) in cells.iter().zip(genes).enumerate() {
                let barcode = place(&axes.barcode_positions, cell);
                let feature = place(&axes.feature_positions, gene);
                if let (Some(barcode), Some(feature)) = (barcode, feature) {
                    kept.0.push(barcode);
                    kept.1.push(feature);
                    kept.2.push(at as u32);
                }
            }
            let (barcodes, features, at) = kept;
            match at.len() == values.len() {
                true => matrix.append(&barcodes, &features, values),
                false => {
                    let at = arrow_array::UInt32Array::from(at);
                    let values =
                        arrow_select::take::take(values, &at, None).map_err(io::Error::other)?;
                    matrix.append(&barcodes, &features, &values)
                }
            }
        })?;
        matrix.finish()
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
            // An HDF5 file is written by libhdf5 at a path ([`TenxFile::write_h5`]).
            TenxPart::MatrixH5 => Err(io::Error::other("matrix.h5 is no text file")),
            TenxPart::Matrix => {
                let axes = Axes::read(layer)?;
                let cell_ids = axes.cell_ids();
                let (cell_positions, feature_positions) =
                    (&axes.barcode_positions, &axes.feature_positions);
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
