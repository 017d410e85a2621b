//! Finds libtiledb and links it by full path with an rpath.
//!
//! The only modern libtiledb a registry serves lives inside the PyPI wheels of tiledbsoma
//! (`tiledbsoma.libs/libtiledb-<hash>.so.2.30`) and tiledb-py (`tiledb.libs/…`). `TILEDB_LIB`
//! names the library file (or its directory) explicitly; otherwise the project's `.venv`,
//! made by `scripts/setup`, is searched.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn is_libtiledb(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libtiledb-") && n.contains(".so.2."))
}

fn find_in_dir(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_libtiledb(p))
        .collect();
    found.sort();
    found.pop()
}

fn find_in_venv(root: &Path) -> Option<PathBuf> {
    let lib = root.join(".venv").join("lib");
    for python in fs::read_dir(&lib).ok()?.filter_map(|e| e.ok()) {
        let site = python.path().join("site-packages");
        for wheel_libs in ["tiledbsoma.libs", "tiledb.libs"] {
            if let Some(found) = find_in_dir(&site.join(wheel_libs)) {
                return Some(found);
            }
        }
    }
    None
}

fn main() {
    println!("cargo:rerun-if-env-changed=TILEDB_LIB");
    println!("cargo:rerun-if-changed=build.rs");
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets this"));

    let found = match env::var_os("TILEDB_LIB") {
        Some(path) => {
            let path = PathBuf::from(path);
            if path.is_dir() {
                find_in_dir(&path)
            } else {
                path.is_file().then_some(path)
            }
        }
        None => find_in_venv(&root),
    };
    let Some(lib) = found else {
        eprintln!(
            "error: libtiledb not found: run scripts/setup (it installs tiledbsoma into .venv), \
             or set TILEDB_LIB to a libtiledb-*.so.2.30"
        );
        std::process::exit(1);
    };
    let lib = lib.canonicalize().unwrap_or(lib);
    let dir = lib.parent().expect("a file has a parent directory");
    let name = lib
        .file_name()
        .and_then(|n| n.to_str())
        .expect("UTF-8 file name");
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib:+verbatim={name}");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    // The directory, not all of .venv: cargo scans a directory named here whole, and pip
    // installing other packages into .venv (scripts/setup does, while this builds) must not
    // make the next build link again. A reinstalled wheel makes a new directory.
    println!("cargo:rerun-if-changed={}", dir.display());
}
