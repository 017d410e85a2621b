"""The benchmark's headline table in Markdown, and its copies in README.md and
docs/PERFORMANCE.md: each document holds the table between the markers `<!-- bench:table -->`
and `<!-- /bench:table -->`, which `scripts/bench --markdown` rewrites in place (and
scripts/check-docs checks the two copies are the same).

The table is made from the results `scripts/bench` measures (a dict, saved as JSON beside
the data set): the side-by-side rows (soma-mount, Python, ratio = Python's time /
soma-mount's, size and each side's peak RSS), `head`, the lazy read, the `ls -l` of the
chunks, the daemon's peak RSS and the sixteen readers.
"""

from __future__ import annotations

import re
from pathlib import Path

BEGIN, END = "<!-- bench:table -->", "<!-- /bench:table -->"
DOCUMENTS = ("README.md", "docs/PERFORMANCE.md")
MARKED = re.compile(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), re.S)


def seconds(t: float) -> str:
    """A time as the table shows it: milliseconds below a second, else seconds."""
    return f"{t:.2f} s" if t >= 1 else f"{t * 1000:.0f} ms"


def headline_table(results: dict) -> str:
    """The Markdown table of `results` (see scripts/bench.py's `measure`), ending in a
    newline."""
    rows = [("task", "soma-mount", "Python", "ratio", "size; peak RSS of each side")]
    for r in results["side_by_side"]:
        rows.append((
            r["name"], seconds(r["mount_s"]), seconds(r["python_s"]), f"{r['python_s'] / r['mount_s']:.2f}x",
            f"{r['size_bytes'] / 1e6:.0f} MB; {r['mount_peak_mib']:.0f} MiB daemon, "
            f"{r['python_peak_mib']:.0f} MiB Python",
        ))
    rows.append(("head -n 10", seconds(results["head_s"]), "", "", ""))
    lazy = results["lazy"]
    rows.append((
        "lazy rows", seconds(lazy["cold_s"]), seconds(lazy["python_s"]), f"{lazy['python_s'] / lazy['cold_s']:.2f}x",
        f"`read_lazy` + {lazy['rows']} rows to memory (cold mount) against `ExperimentAxisQuery.to_anndata`",
    ))
    for ls in results["listings"]:
        rows.append((
            f"ls -l {ls['format']}", seconds(ls["ls_s"]), "", "",
            f"the sizes of {ls['chunks']} chunks of X; reading them after: {seconds(ls['read_s'])} "
            f"({ls['ls_s'] / ls['read_s']:.0%}); cache {ls['on_disk_bytes'] / 1e6:.0f} MB on disk for "
            f"{ls['apparent_bytes'] / 1e6:.0f} MB of files",
        ))
    rows.append(("daemon RSS", "", "", "", f"{results['peak_mib']:.0f} MiB peak"))
    readers = results["readers"]
    rows.append((
        "16 readers", "", "", "",
        " / ".join(f"{r['peak_mib']:.0f}" for r in readers) + " MiB peak RSS with `--max-memory "
        + "` / `".join(r["budget"] for r in readers) + f"`, from {readers[0]['before_mib']:.0f} MiB "
        "(X as csv, tsv, jsonl and 13 csv chunks at once)",
    ))
    lines = ["|" + "|".join(f" {c} " if c else " " for c in cells) + "|" for cells in rows]
    lines.insert(1, "|---" * len(rows[0]) + "|")
    return "\n".join(lines) + "\n"


def replace_marked(text: str, table: str, where: str = "the document") -> str:
    """`text` with what is between its one pair of markers replaced by `table`."""
    found = MARKED.findall(text)
    if len(found) != 1:
        raise ValueError(f"{where} has {len(found)} marked tables ({BEGIN} ... {END}), not one")
    return MARKED.sub(lambda _: f"{BEGIN}\n{table}{END}", text)


def marked_table(text: str) -> str | None:
    """The table between the markers of `text` (None without them)."""
    found = MARKED.findall(text)
    return found[0] if len(found) == 1 else None


def rewrite_documents(repo: Path, table: str) -> list[Path]:
    """Rewrites the marked table of each of DOCUMENTS under `repo`; returns those changed."""
    changed = []
    for name in DOCUMENTS:
        path = repo / name
        text = path.read_text(encoding="utf-8")
        new = replace_marked(text, table, name)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed
