"""Writing a family's files into a folder, and finding the ones that differ from what its
generator writes (the `--check` of `kubecua tasks generate` and make_tasks.py)."""

from __future__ import annotations

from pathlib import Path

MANIFEST = "verified.json"  # `kubecua tasks verify` writes it beside the tasks: no generator's


def write(files: dict[str, str], out: Path) -> None:
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)


def stale(files: dict[str, str], out: Path, owned: set[str] | None = None) -> list[str]:
    """Paths under `out` that differ from `files` or are missing, and JSON files no generator
    writes any more inside the top folders `files` writes to (or `owned`, when given); a
    verified manifest is none of them."""
    tops = owned if owned is not None else {n.split("/", 1)[0] for n in files}
    found = {
        str(p.relative_to(out))
        for top in tops
        for p in (out / top).rglob("*.json")
        if (out / top).is_dir() and p.name != MANIFEST
    }
    missing_or_changed = [
        n for n in files if not (out / n).is_file() or (out / n).read_text() != files[n]
    ]
    return sorted(set(missing_or_changed) | (found - files.keys()))
