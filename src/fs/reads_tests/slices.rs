//! `slices/` and `by/`: the rows of a range, and the rows of a label.

use super::*;

#[test]
fn slices_at_the_edges_of_the_domain_hold_their_rows() {
    let m = mounted_with_cells(dataframe_cells(7));
    assert_eq!(text(&m, "obs/slices/0-0.csv"), obs_csv(0..1));
    assert_eq!(text(&m, "obs/slices/99-99.csv"), obs_csv(99..100));
    assert_eq!(text(&m, "obs/slices/0-99.csv"), obs_csv(0..100));
    // `A` alone is one row.
    assert_eq!(text(&m, "obs/slices/17.csv"), obs_csv(17..18));
}

#[test]
fn a_range_outside_the_domain_is_clipped_and_one_with_no_cells_is_a_header_alone() {
    let m = mounted_with_cells(dataframe_cells(7));
    assert_eq!(text(&m, "obs/slices/90-500.csv"), obs_csv(90..100));
    assert_eq!(text(&m, "obs/slices/200-300.csv"), obs_csv(0..0));
    assert_eq!(
        text(&m, "ms/RNA/X/data/slices/150-160.csv"),
        x_csv(0..0),
        "a slice with no cells is a file with only the header"
    );
}

#[test]
fn a_reversed_range_or_too_many_ranges_is_enoent_and_reads_nothing() {
    let m = mounted_with_cells(dataframe_cells(7));
    for path in [
        "obs/slices/30-10.csv",
        "ms/RNA/X/data/slices/5-2.csv",
        "ms/RNA/X/data/slices/0-9,7-3.csv",
        "ms/RNA/X/data/slices/0-9,*,1.csv",
    ] {
        assert_eq!(m.stat(path), Err(FsError::NotFound), "{path}");
    }
    assert_eq!(reads_of(&m.store, OBS), 0);
    assert_eq!(reads_of(&m.store, X), 0);
    // Under a format's directory too (whose listing estimates its chunks).
    assert_eq!(m.stat("obs/slices/csv/30-10.csv"), Err(FsError::NotFound));
}

#[test]
fn a_slice_of_x_selects_a_range_per_dimension_and_missing_ranges_mean_all() {
    let m = mounted_with_cells(dataframe_cells(7));
    assert_eq!(text(&m, "ms/RNA/X/data/slices/10-12.csv"), x_csv(10..13));
    assert_eq!(text(&m, "ms/RNA/X/data/slices/10-12,*.csv"), x_csv(10..13));
    let mut block = String::from("soma_dim_0,soma_dim_1,soma_data\n");
    for i in 5..=6 {
        for j in sparse_row_columns(i)
            .into_iter()
            .filter(|j| (3..=7).contains(j))
        {
            block += &format!("{i},{j},{}\n", sparse_value(i, j));
        }
    }
    assert_eq!(text(&m, "ms/RNA/X/data/slices/5-6,3-7.csv"), block);
    // Column 0 of every row: the rows whose cells include it.
    let mut column = String::from("soma_dim_0,soma_dim_1,soma_data\n");
    for i in (0..100).filter(|i| sparse_row_columns(*i).contains(&0)) {
        column += &format!("{i},0,{}\n", sparse_value(i, 0));
    }
    assert_eq!(text(&m, "ms/RNA/X/data/slices/*,0.csv"), column);
}

#[test]
fn a_slice_under_its_format_directory_is_the_slice_under_slices() {
    let m = mounted_with_cells(dataframe_cells(7));
    for format in ["csv", "tsv", "jsonl"] {
        let under_format = m.read_all(&format!("obs/slices/{format}/10-19.{format}"));
        let under_slices = m.read_all(&format!("obs/slices/10-19.{format}"));
        assert_eq!(under_format.unwrap(), under_slices.unwrap(), "{format}");
    }
    assert_eq!(text(&m, "obs/slices/csv/10-19.csv"), obs_csv(10..20));
}

#[test]
fn the_listed_chunks_concatenated_in_order_are_the_whole_array() {
    let m = mounted_with_cells(dataframe_cells(7));
    for (dir, whole) in [
        ("obs/slices/csv", obs_csv(0..100)),
        ("ms/RNA/X/data/slices/csv", x_csv(0..100)),
    ] {
        let mut chunks = m.names(m.stat(dir).unwrap().ino);
        assert!(!chunks.is_empty(), "{dir}");
        let first_row = |name: &String| -> i64 { name.split('-').next().unwrap().parse().unwrap() };
        chunks.sort_by_key(first_row);
        let mut joined = String::new();
        for (n, chunk) in chunks.iter().enumerate() {
            let csv = text(&m, &format!("{dir}/{chunk}"));
            // Each chunk has its header; the rows follow it.
            let (header, rows) = csv.split_once('\n').unwrap();
            if n == 0 {
                joined += header;
                joined += "\n";
            }
            joined += rows;
        }
        assert_eq!(joined, whole, "{dir}: {chunks:?}");
    }
}

#[test]
fn a_label_directory_holds_the_rows_of_that_label_in_order() {
    let m = mounted_with_cells(dataframe_cells(7));
    let a = (0..100).filter(|j| label(*j) == Some("a"));
    assert_eq!(text(&m, "obs/by/cell_type/a/data.csv"), obs_csv(a));
    // A label holding `/` is named as a member would be: `%2F`.
    let bc = (0..100).filter(|j| label(*j) == Some("b/c"));
    assert_eq!(text(&m, "obs/by/cell_type/b%2Fc/data.csv"), obs_csv(bc));
}

#[test]
fn null_labels_are_under_null() {
    let m = mounted_with_cells(dataframe_cells(7));
    let nulls: Vec<i64> = (0..100).filter(|j| label(*j).is_none()).collect();
    assert_eq!(nulls, [24, 49, 74, 99]);
    let csv = text(&m, "obs/by/cell_type/__null__/data.csv");
    assert_eq!(csv, obs_csv(nulls.into_iter()));
}

#[test]
fn the_labels_of_a_column_share_out_its_rows() {
    let m = mounted_with_cells(dataframe_cells(7));
    let mut rows = Vec::new();
    for name in ["a", "b%2Fc", "__null__"] {
        let csv = text(&m, &format!("obs/by/cell_type/{name}/data.csv"));
        assert!(csv.starts_with("soma_joinid,x,cell_type\n"), "{name}");
        rows.extend(csv.lines().skip(1).map(str::to_owned));
    }
    let mut whole: Vec<String> = obs_csv(0..100).lines().skip(1).map(str::to_owned).collect();
    rows.sort();
    whole.sort();
    assert_eq!(rows, whole, "every row under one label, once");
}

#[test]
fn a_label_directory_has_its_formats_and_slices_of_its_own_rows() {
    let m = mounted_with_cells(dataframe_cells(7));
    let rows = json_rows(&text(&m, "obs/by/cell_type/b%2Fc/data.jsonl"));
    let odd: Vec<i64> = (0..100).filter(|j| label(*j) == Some("b/c")).collect();
    assert_eq!(rows, odd);
    // Its slices cut its own rows by join id.
    let slice = text(&m, "obs/by/cell_type/a/slices/0-9.csv");
    assert_eq!(slice, obs_csv([0, 2, 4, 6, 8].into_iter()));
}

/// The join ids of the rows of a JSON Lines file.
fn json_rows(text: &str) -> Vec<i64> {
    (text.lines())
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            row["soma_joinid"].as_i64().unwrap()
        })
        .collect()
}

#[test]
fn small_listed_files_whole_and_of_a_label_have_their_exact_size_at_their_first_stat() {
    // Below the materialize limit a listed file is generated whole by its first stat; a
    // category's is estimated from its own cells.
    let m = mounted_with_cells(dataframe_cells(7));
    for path in [
        "obs/data.csv",
        "obs/data.jsonl",
        "obs/by/cell_type/a/data.csv",
        "obs/by/cell_type/__null__/data.tsv",
    ] {
        let attr = m.stat(path).unwrap();
        assert!(attr.size_known, "{path}: {attr:?}");
        assert_eq!(attr.size, m.read_all(path).unwrap().len() as u64, "{path}");
    }
}
