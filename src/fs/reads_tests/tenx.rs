//! `10x/`: Cell Ranger's matrix directories of a layer, whole, a category's and a query's.

use super::*;

/// An entry of a matrix: its feature's 1-based position, its barcode's, its value.
type Entry = (usize, usize, f32);

/// A MatrixMarket file, parsed: its header line, its size line (features, barcodes,
/// entries) and its entries, sorted.
fn mtx(text: &str) -> (String, (usize, usize, usize), Vec<Entry>) {
    let mut lines = text.lines();
    let header = lines.next().unwrap().to_owned();
    let mut data = lines.filter(|l| !l.starts_with('%'));
    let size: Vec<usize> = (data.next().unwrap().split(' '))
        .map(|n| n.parse().unwrap())
        .collect();
    let mut entries: Vec<Entry> = data
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields.len(), 3, "{line}");
            let value = fields[2].parse().unwrap();
            (
                fields[0].parse().unwrap(),
                fields[1].parse().unwrap(),
                value,
            )
        })
        .collect();
    entries.sort_by_key(|e| (e.0, e.1));
    (header, (size[0], size[1], size[2]), entries)
}

/// X's entries of the cells `cells` (in join id order), as the matrix holds them: the
/// feature's 1-based position, the barcode's, the value.
fn entries_of(cells: &[i64]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = (cells.iter().enumerate())
        .flat_map(|(n, &i)| {
            sparse_row_columns(i).map(|j| (j as usize + 1, n + 1, sparse_value(i, j)))
        })
        .collect();
    entries.sort_by_key(|e| (e.0, e.1));
    entries
}

#[test]
fn matrix_mtx_is_a_real_coordinate_matrix_of_features_by_barcodes() {
    let m = mounted_with_cells(dataframe_cells(7));
    let (header, size, entries) = mtx(&text(&m, "ms/RNA/10x/data/matrix.mtx"));
    // `real` for a layer of floats; its header counts the entries.
    assert_eq!(header, "%%MatrixMarket matrix coordinate real general");
    assert_eq!(size, (100, 100, 300), "100 genes of var, 100 cells of obs");
    let cells: Vec<i64> = (0..100).collect();
    assert_eq!(entries, entries_of(&cells));
}

#[test]
fn barcodes_and_features_have_a_line_per_cell_and_per_gene() {
    let m = mounted_with_cells(dataframe_cells(7));
    let barcodes = text(&m, "ms/RNA/10x/data/barcodes.tsv");
    assert_eq!(barcodes.lines().count(), 100);
    let features = text(&m, "ms/RNA/10x/data/features.tsv");
    assert_eq!(features.lines().count(), 100);
    for line in features.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        // No column of var names a feature: its name is its id.
        assert_eq!(fields.len(), 3, "{line}");
        assert_eq!(fields[1], fields[0], "{line}");
        assert_eq!(fields[2], "Gene Expression", "{line}");
    }
    let ids: std::collections::HashSet<&str> = features
        .lines()
        .map(|l| &l[..l.find('\t').unwrap()])
        .collect();
    assert_eq!(ids.len(), 100, "one id a gene");
}

#[test]
fn a_categorys_matrix_holds_the_cells_of_its_label_at_their_positions() {
    let m = mounted_with_cells(dataframe_cells(7));
    let cells: Vec<i64> = (0..100).filter(|j| label(*j) == Some("a")).collect();
    let dir = "ms/RNA/10x/data/by/cell_type/a";
    let (header, size, entries) = mtx(&text(&m, &format!("{dir}/matrix.mtx")));
    assert_eq!(header, "%%MatrixMarket matrix coordinate real general");
    // Join ids are mapped to 1-based positions among the category's cells.
    assert_eq!(size, (100, cells.len(), 3 * cells.len()));
    assert_eq!(entries, entries_of(&cells));
    let barcodes = text(&m, &format!("{dir}/barcodes.tsv"));
    assert_eq!(barcodes.lines().count(), cells.len());
    let whole = text(&m, "ms/RNA/10x/data/barcodes.tsv");
    let whole: Vec<&str> = whole.lines().collect();
    let expected: Vec<&str> = cells.iter().map(|&j| whole[j as usize]).collect();
    assert_eq!(
        barcodes.lines().collect::<Vec<_>>(),
        expected,
        "the same barcodes as the whole"
    );
}

#[test]
fn a_querys_matrix_holds_the_cells_it_selects() {
    let m = mounted_with_cells(dataframe_cells(7));
    let cells: Vec<i64> = (0..100)
        .filter(|j| x_value(*j).is_some_and(|x| x < 10.0))
        .collect();
    let (_, size, entries) = mtx(&text(&m, "where/x < 10/ms/RNA/10x/data/matrix.mtx"));
    assert_eq!(size, (100, cells.len(), 3 * cells.len()));
    assert_eq!(entries, entries_of(&cells));
}

#[test]
fn tenx_files_are_generated_whole_at_their_first_stat_with_their_exact_size() {
    let m = mounted_with_cells(dataframe_cells(7));
    for name in ["matrix.mtx", "barcodes.tsv", "features.tsv"] {
        let path = format!("ms/RNA/10x/data/{name}");
        let attr = m.stat(&path).unwrap();
        assert!(attr.size_known, "{name}");
        assert_eq!(attr.size, m.read_all(&path).unwrap().len() as u64, "{name}");
    }
}
