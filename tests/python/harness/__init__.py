"""The shared library of soma-mount's integration tests and benchmarks.

One module a concern:

- `settings`: where the daemon and the fixtures are, and the time bounds tests allow;
- `fixtures`: the fixture stores, built by scripts/make-fixtures.py when missing or stale;
- `process`: what /proc says about a process (alive, found by an argument, memory, threads);
- `mount`: mounting a store with the daemon and always unmounting it, the mount table, and
  the daemons' logs;
- `tree_reference`: what a mounted tree must hold (members, metadata, schemas), read with
  tiledbsoma and tiledb-py;
- `data_reference`: the rows and value texts a data file must hold, read with tiledbsoma;
- `tenx`: the 10x directories' reference, read with tiledbsoma, and their strict parsing;
- `formats`: reading served files (CSV, TSV, JSON Lines, Parquet, npy) and checking them
  against a `data_reference.Ref`, problem by problem;
- `random_store`: random SOMA stores for the differential test;
- `moto_server`, `s3sfs_server`: local S3 servers (moto, and s3s-fs which checks
  signatures); `latency_proxy`, `fault_proxy`: proxies in front of them; `aws_fakes`: the
  AWS credential services.

Nothing here depends on pytest but `formats.fail_if`, which fails the running test.
Tests import it as `harness` (tests/python is on pytest's path); scripts/bench puts
tests/python on PYTHONPATH for the benchmarks.
"""
