//! Opens and reads: reads at offsets, opens at once, and generations that fail.

use super::*;

#[test]
fn reads_at_offsets_are_the_slices_of_the_whole_file() {
    let m = mounted_with_cells(dataframe_cells(7));
    for path in [
        "obs/data.csv",
        "ms/RNA/X/data/data.jsonl",
        "obs/data.parquet",
    ] {
        let whole = m.read_all(path).unwrap();
        let len = whole.len() as u64;
        for (offset, size) in [(0, 1), (1, 17), (len / 2, 100), (len - 3, 10), (len, 10)] {
            let piece = m.read_at(path, offset, size).unwrap();
            let end = (offset + size as u64).min(len) as usize;
            assert_eq!(
                piece,
                whole[offset as usize..end],
                "{path}: {offset}+{size}"
            );
        }
    }
}

#[test]
fn a_streamed_file_reads_at_offsets_as_the_whole_file() {
    let m = mount_streaming(store_with_cells(dataframe_cells(7)));
    let whole = obs_csv(0..100).into_bytes();
    // Streamed, a read waits for the generator to have written that far, and is served
    // with direct I/O: it may be short, never past what the file holds there.
    let attr = m.stat("obs/data.csv").unwrap();
    let opened = m.open(attr.ino).unwrap();
    assert!(
        opened.direct_io,
        "a file not generated yet is read with direct I/O"
    );
    m.tree.release(opened.fh);
    let piece = m.read_at("obs/data.csv", 1000, 50).unwrap();
    assert!(!piece.is_empty() && piece.len() <= 50, "{}", piece.len());
    assert_eq!(piece, whole[1000..1000 + piece.len()]);
    assert_eq!(m.read_all("obs/data.csv").unwrap(), whole);
}

#[test]
fn two_opens_at_once_generate_a_file_once() {
    // How many reads of the cells one generation of the file takes.
    let alone = mounted_with_cells(dataframe_cells(7));
    alone.read("obs/data.jsonl").unwrap();
    let one_generation = reads_of(&alone.store, OBS);
    assert!(one_generation >= 1);

    let m = mounted_with_cells(dataframe_cells(7));
    let attr = m.stat("obs/data.jsonl").unwrap();
    let (first, second) = std::thread::scope(|s| {
        let open = || s.spawn(|| m.open(attr.ino).unwrap());
        let (a, b) = (open(), open());
        (a.join().unwrap(), b.join().unwrap())
    });
    let read = |fh: u64| {
        let (tx, rx) = std::sync::mpsc::channel();
        m.tree
            .read(fh, 0, 1 << 20, Box::new(move |r| tx.send(r).unwrap()));
        rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap()
    };
    let (a, b) = (read(first.fh), read(second.fh));
    m.tree.release(first.fh);
    m.tree.release(second.fh);
    assert_eq!(a, b);
    assert_eq!(a, alone.read("obs/data.jsonl").unwrap());
    assert_eq!(reads_of(&m.store, OBS), one_generation, "generated once");
}

#[test]
fn a_parquet_whose_read_fails_midway_is_eio_and_nothing_is_committed() {
    let m = mounted_with_cells(dataframe_cells(10).failing_after(2));
    for _ in 0..2 {
        assert_store_went_away("obs/data.parquet", m.read_all("obs/data.parquet"))
    }
    assert_nothing_committed(&m);
}

#[test]
fn an_h5ad_whose_read_fails_midway_is_eio_and_nothing_is_committed() {
    let m = mounted_with_cells(dataframe_cells(10).failing_after(2));
    for path in ["anndata/RNA.h5ad", "anndata/by/cell_type/a/RNA.h5ad"] {
        assert_store_went_away(path, m.read_all(path))
    }
    assert_nothing_committed(&m);
}

#[test]
fn a_failed_generation_is_generated_afresh_at_the_next_open() {
    let m = mounted_with_cells(dataframe_cells(10).failing_after(2));
    assert!(matches!(m.read_all("obs/data.csv"), Err(FsError::Io(_))));
    let after_one = reads_of(&m.store, OBS);
    assert!(matches!(m.read_all("obs/data.csv"), Err(FsError::Io(_))));
    assert!(
        reads_of(&m.store, OBS) > after_one,
        "the failure is not kept: the second open reads the cells again"
    );
}

#[test]
fn a_file_read_whole_is_served_from_the_cache_by_later_opens_of_any_offset() {
    let m = mounted_with_cells(dataframe_cells(7));
    let whole = m.read_all("ms/RNA/X/data/data.csv").unwrap();
    let reads = reads_of(&m.store, X);
    let piece = m.read_at("ms/RNA/X/data/data.csv", 500, 500).unwrap();
    assert_eq!(piece, whole[500..1000]);
    assert_eq!(reads_of(&m.store, X), reads, "no read of the cells");
}
