//! `where/`: the rows a value filter selects, of a data frame and of an experiment.

use super::*;

/// obs's `where/<filter>/data.csv`.
fn query(m: &Mounted, filter: &str) -> String {
    text(m, &format!("obs/where/{filter}/data.csv"))
}

fn rows(keep: impl Fn(i64) -> bool) -> String {
    obs_csv((0..100).filter(move |j| keep(*j)))
}

#[test]
fn membership_keeps_the_rows_whose_label_is_listed() {
    let m = mounted_with_cells(dataframe_cells(7));
    let a = rows(|j| label(j) == Some("a"));
    assert_eq!(query(&m, "cell_type in ['a']"), a);
    assert_eq!(
        query(&m, "cell_type in ['a', 'b%2Fc']"),
        rows(|j| label(j).is_some())
    );
}

#[test]
fn not_in_and_ne_leave_nulls_out() {
    // Comparisons, `!=` and `not` leave nulls out, as libtiledb does.
    let m = mounted_with_cells(dataframe_cells(7));
    let bc = rows(|j| label(j) == Some("b/c"));
    assert_eq!(query(&m, "cell_type not in ['a']"), bc);
    assert_eq!(query(&m, "cell_type != 'a'"), bc);
    let not_x = rows(|j| x_value(j).is_some_and(|x| x != 1.25));
    assert_eq!(query(&m, "x != 1.25"), not_x);
}

#[test]
fn not_leaves_nulls_out() {
    let m = mounted_with_cells(dataframe_cells(7));
    let at_least_10 = rows(|j| x_value(j).is_some_and(|x| x >= 10.0));
    assert_eq!(query(&m, "not x < 10"), at_least_10);
    assert_eq!(
        query(&m, "not cell_type == 'a'"),
        rows(|j| label(j) == Some("b/c"))
    );
}

#[test]
fn not_binds_tighter_than_and_and_and_than_or() {
    let m = mounted_with_cells(dataframe_cells(7));
    let x = |j: i64, f: &dyn Fn(f64) -> bool| x_value(j).is_some_and(f);
    // `a or b and c` is `a or (b and c)`.
    let or_and = rows(|j| x(j, &|x| x < 2.0) || (x(j, &|x| x > 48.0) && label(j) == Some("a")));
    assert_eq!(query(&m, "x < 2 or x > 48 and cell_type == 'a'"), or_and);
    let grouped = rows(|j| (x(j, &|x| x < 2.0) || x(j, &|x| x > 48.0)) && label(j) == Some("a"));
    assert_ne!(or_and, grouped);
    assert_eq!(query(&m, "(x < 2 or x > 48) and cell_type == 'a'"), grouped);
    // `not a and b` is `(not a) and b`.
    let not_and = rows(|j| x(j, &|x| (2.0..3.0).contains(&x)));
    assert_eq!(query(&m, "not x < 2 and x < 3"), not_and);
}

#[test]
fn a_chained_comparison_is_each_pair() {
    let m = mounted_with_cells(dataframe_cells(7));
    let between = rows(|j| x_value(j).is_some_and(|x| (1.0..3.0).contains(&x)));
    assert_eq!(between, obs_csv(2..6));
    assert_eq!(query(&m, "1 <= x < 3"), between);
}

#[test]
fn two_spellings_of_one_filter_give_the_same_bytes() {
    let m = mounted_with_cells(dataframe_cells(7));
    let expected = rows(|j| x_value(j).is_some_and(|x| x < 10.0) && label(j) == Some("a"));
    for filter in [
        "x < 10 and cell_type == 'a'",
        "x<10 and cell_type==\"a\"",
        "10 > x and cell_type == 'a'",
        "attr(\"x\") < 10 and cell_type == 'a'",
    ] {
        assert_eq!(query(&m, filter), expected, "{filter}");
    }
}

#[test]
fn where_all_holds_every_row_of_obs_and_every_cell_of_x() {
    let m = mounted_with_cells(dataframe_cells(7));
    assert_eq!(query(&m, "all"), obs_csv(0..100));
    assert_eq!(text(&m, "where/all/obs/data.csv"), obs_csv(0..100));
    assert_eq!(text(&m, "where/all/ms/RNA/X/data/data.csv"), x_csv(0..100));
}

#[test]
fn a_query_that_selects_no_row_is_a_header_alone() {
    let m = mounted_with_cells(dataframe_cells(7));
    assert_eq!(query(&m, "x > 1000"), obs_csv(0..0));
    assert_eq!(text(&m, "where/x > 1000/obs/data.csv"), obs_csv(0..0));
    assert_eq!(
        text(&m, "where/x > 1000/ms/RNA/X/data/data.csv"),
        x_csv(0..0)
    );
}

#[test]
fn a_query_of_a_frame_holds_its_rows_in_every_format() {
    let m = mounted_with_cells(dataframe_cells(7));
    let filter = "obs/where/cell_type == 'b%2Fc' and x < 20";
    let selected: Vec<i64> = (0..100)
        .filter(|&j| label(j) == Some("b/c") && x_value(j).is_some_and(|x| x < 20.0))
        .collect();
    assert_eq!(
        text(&m, &format!("{filter}/data.tsv")),
        obs_csv(selected.iter().copied()).replace(',', "\t")
    );
    let jsonl = text(&m, &format!("{filter}/data.jsonl"));
    let ids: Vec<i64> = (jsonl.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["soma_joinid"].as_i64())
        .map(Option::unwrap)
        .collect();
    assert_eq!(ids, selected);
}

#[test]
fn a_var_filter_selects_the_genes_of_x_and_var() {
    let m = mounted_with_cells(dataframe_cells(7));
    // var holds the cells of obs: x < 3 selects genes 0 to 5.
    let genes = |j: i64| x_value(j).is_some_and(|x| x < 3.0);
    let var = text(&m, "where/all/ms/RNA/where/x < 3/var/data.csv");
    assert_eq!(var, rows(genes));
    let mut x = String::from("soma_dim_0,soma_dim_1,soma_data\n");
    for i in 0..100 {
        for j in sparse_row_columns(i).into_iter().filter(|j| genes(*j)) {
            x += &format!("{i},{j},{}\n", sparse_value(i, j));
        }
    }
    assert_eq!(text(&m, "where/all/ms/RNA/where/x < 3/X/data/data.csv"), x);
}

#[test]
fn an_obs_and_a_var_filter_select_cells_and_genes_both() {
    let m = mounted_with_cells(dataframe_cells(7));
    let cells = |i: i64| label(i) == Some("a");
    let genes = |j: i64| x_value(j).is_some_and(|x| x < 3.0);
    let mut x = String::from("soma_dim_0,soma_dim_1,soma_data\n");
    for i in (0..100).filter(|i| cells(*i)) {
        for j in sparse_row_columns(i).into_iter().filter(|j| genes(*j)) {
            x += &format!("{i},{j},{}\n", sparse_value(i, j));
        }
    }
    let path = "where/cell_type == 'a'/ms/RNA/where/x < 3/X/data/data.csv";
    assert_eq!(text(&m, path), x);
}

#[test]
fn a_var_filter_on_a_missing_column_is_a_directory_holding_error_txt() {
    let m = mounted_with_cells(dataframe_cells(7));
    let dir = "where/all/ms/RNA/where/nope > 1";
    assert_eq!(m.names(m.stat(dir).unwrap().ino), ["error.txt"]);
    let error = text(&m, &format!("{dir}/error.txt"));
    assert!(error.contains("no column is named `nope`"), "{error}");
    assert!(
        error.contains("nope > 1"),
        "the text names the filter: {error}"
    );
    assert_eq!(
        reads_of(&m.store, "mem://exp/ms/RNA/var"),
        0,
        "nothing read"
    );
}

#[test]
fn two_spellings_of_one_filter_share_their_cache_entry() {
    let m = mounted_with_cells(dataframe_cells(7));
    let first = query(&m, "x < 10 and cell_type == 'a'");
    let reads = reads_of(&m.store, OBS);
    // Other spaces, quotes, the order of a comparison's sides, `attr()`: one entry.
    let second = query(&m, "10>x and attr(\"cell_type\")==\"a\"");
    assert_eq!(second, first);
    assert_eq!(reads_of(&m.store, OBS), reads, "served from the cache");
}

#[test]
fn a_querys_parquet_keeps_the_frames_schema_and_holds_its_rows() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    let m = mounted_with_cells(dataframe_cells(7));
    let bytes = m.read_all("obs/where/cell_type in ['b%2Fc']/data.parquet");
    let rows = parquet_rows(&bytes.unwrap());
    assert!(matches!(
        rows.schema().field(2).data_type(),
        arrow_schema::DataType::Dictionary(_, _)
    ));
    let ids = rows.column(0).as_primitive::<Int64Type>().values().to_vec();
    let odd: Vec<i64> = (0..100).filter(|j| label(*j) == Some("b/c")).collect();
    assert_eq!(ids, odd);
}
