"""Writes the task files of every built-in family (kubecua_tasks/builtin.py) into this folder,
each through its plugin (the entry points of kubecua.task_families, as `kubecua tasks generate`
runs them): the offline suite's areas (<area>/<id>.json and <id>.solutions.json, suite_tasks.py)
and the families colourkeys, colourkeys-quits, colourkeys-demo and typeword
(<family>/<split>/<id>.json and family.json).

    sandbox-image/tasks/.venv/bin/python sandbox-image/tasks/make_tasks.py [--check]

--check writes nothing and fails while a file differs from what its generator writes, or a
JSON file no generator writes any more lies in a family's folder (`make check-tasks`, which
`make lint` runs)."""

from __future__ import annotations

import argparse
import sys

from kubecua_tasks.builtin import TASKS_DIR, built_in_files
from kubecua_tasks.files import stale, write


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the built-in families' task files.")
    parser.add_argument("--check", action="store_true", help="write nothing; fail if any is stale")
    args = parser.parse_args()
    files = built_in_files()
    # Every folder of the tasks folder holding task JSON belongs to a built-in family.
    dirs = [p for p in TASKS_DIR.iterdir() if p.is_dir() and p.name[0] not in "._"]
    owned = {p.name for p in dirs if any(p.glob("*.json")) or any(p.glob("*/*.json"))}
    if not args.check:
        write(files, TASKS_DIR)
        print(f"wrote {len(files)} files")
    elif bad := stale(files, TASKS_DIR, owned | {n.split("/", 1)[0] for n in files}):
        sys.exit(f"stale task files (run {sys.argv[0]} to rewrite them): {', '.join(bad)}")


if __name__ == "__main__":
    main()
