//! Finds libtiledb, puts a copy beside the binaries it builds, and links it by file name
//! with a runpath relative to the binary, so that a built `soma-mount` depends on no path of
//! the clone.
//!
//! The only modern libtiledb a registry serves lives inside the PyPI wheels of tiledbsoma
//! (`tiledbsoma.libs/libtiledb-<hash>.so.2.30`, whose file name is its soname) and tiledb-py
//! (`tiledb.libs/…`). `TILEDB_LIB` names the library file (or its directory) explicitly;
//! otherwise the project's `.venv`, made by `scripts/setup`, is searched.
//!
//! At run time the dynamic loader looks for libtiledb, after `LD_LIBRARY_PATH`, in the
//! binary's runpath: `$ORIGIN` (the binary's own directory) and `$ORIGIN/../lib/soma-mount`,
//! then in the system's library directories. The copy in `target/<profile>/` serves the
//! clone's own binary; `cargo test` and `cargo run` find it too, through the library path
//! cargo sets for search paths inside the target directory. A `cargo install` puts the
//! binary alone in `<root>/bin`, and the library goes to `<root>/lib/soma-mount/` (the
//! README's install section has the command); the wheel (`scripts/wheel`) carries it, with
//! the other libraries the binary needs, under a runpath that `auditwheel repair` extends.

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

/// `target/<profile>/` (or `target/<triple>/<profile>/`): where cargo puts the binaries.
/// `OUT_DIR` is `<that>/build/<package>-<hash>/out`.
fn profile_dir() -> PathBuf {
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets this"));
    out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR lies three levels under the profile directory")
        .to_path_buf()
}

/// Copies `lib` into `dir` under its own name, unless an identical-looking copy is there.
fn copy_beside(lib: &Path, dir: &Path) -> PathBuf {
    let copy = dir.join(lib.file_name().expect("a file has a name"));
    let same = |a: &Path, b: &Path| match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.len() == b.len() && a.modified().ok() <= b.modified().ok(),
        _ => false,
    };
    if !same(lib, &copy) {
        // Through a temporary name: a binary running from this directory may hold the copy.
        let partial = dir.join(".libtiledb.partial");
        fs::copy(lib, &partial).expect("copy libtiledb into the target directory");
        fs::rename(&partial, &copy).expect("rename the copy of libtiledb");
    }
    copy
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
    let profile = profile_dir();
    let copy = copy_beside(&lib, &profile);
    let name = copy
        .file_name()
        .and_then(|n| n.to_str())
        .expect("UTF-8 file name");
    println!("cargo:rustc-link-search=native={}", profile.display());
    println!("cargo:rustc-link-lib=dylib:+verbatim={name}");
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN:$ORIGIN/../lib/soma-mount");
    // The directory, not all of .venv: cargo scans a directory named here whole, and pip
    // installing other packages into .venv (scripts/setup does, while this builds) must not
    // make the next build link again. A reinstalled wheel makes a new directory.
    let source_dir = lib.parent().expect("a file has a parent directory");
    println!("cargo:rerun-if-changed={}", source_dir.display());
}
