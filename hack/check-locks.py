#!/usr/bin/env python3
"""One version of each library across components: every uv.lock in the repository must resolve a
package from the index to the same version (docs/development.md says why the components keep
separate locks and how a shared version is chosen).

Run by `make lint`: `python3 hack/check-locks.py` prints each package whose locks disagree, with
the version each component resolves, and exits 1; `--self-test` checks the checker on two
temporary locks. Standard library only. Path dependencies (the components themselves) are not
compared. A package may differ only when it is in EXCEPTIONS, with the reason.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXCEPTIONS = {
    # kubernetes 34.1.0 (the operator, the trainer and the test kit) requires urllib3<2.4; the
    # sandbox servers use no Kubernetes client and keep a urllib3 with the 2.5+ security fixes
    # (their task getters download from URLs that task files name).
    "urllib3": "kubernetes 34.1.0 caps urllib3<2.4; the sandbox servers do not use it",
}


def locked_versions(lock: Path) -> dict[str, set[str]]:
    """Package name -> the versions this lock resolves from an index (not path or git sources)."""
    out: dict[str, set[str]] = defaultdict(set)
    for pkg in tomllib.loads(lock.read_text()).get("package", []):
        if "registry" in pkg.get("source", {}):
            out[pkg["name"]].add(pkg["version"])
    return out


def mismatches(locks: list[Path], root: Path) -> dict[str, dict[str, str]]:
    """Package -> {component dir: versions} for every package two locks resolve differently."""
    seen: dict[str, dict[str, str]] = defaultdict(dict)
    for lock in locks:
        for name, versions in locked_versions(lock).items():
            seen[name][str(lock.parent.relative_to(root))] = ", ".join(sorted(versions))
    return {
        name: comps
        for name, comps in sorted(seen.items())
        if len(set(comps.values())) > 1 and name not in EXCEPTIONS
    }


def repo_locks() -> list[Path]:
    """The uv.lock files git tracks or would track (ignored ones, under .venv, are left out)."""
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*uv.lock"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return sorted(ROOT / n for n in names if Path(n).name == "uv.lock" and (ROOT / n).exists())


def self_test() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for comp, numpy in (("a", "1.26.4"), ("b", "2.4.6")):
            (root / comp).mkdir()
            (root / comp / "uv.lock").write_text(
                "version = 1\n"
                f'[[package]]\nname = "numpy"\nversion = "{numpy}"\n'
                'source = { registry = "https://pypi.org/simple" }\n'
                '[[package]]\nname = "httpx"\nversion = "0.28.1"\n'
                'source = { registry = "https://pypi.org/simple" }\n'
                f'[[package]]\nname = "{comp}"\nversion = "0.1.0"\nsource = {{ editable = "." }}\n'
                '[[package]]\nname = "urllib3"\n'
                f'version = "{"2.3.0" if comp == "a" else "2.8.0"}"\n'
                'source = { registry = "https://pypi.org/simple" }\n'
            )
        got = mismatches([root / "a" / "uv.lock", root / "b" / "uv.lock"], root)
    want = {"numpy": {"a": "1.26.4", "b": "2.4.6"}}
    if got != want:
        sys.exit(f"check-locks self-test failed:\n got  {got}\n want {want}")
    print("check-locks: self-test passed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true", help="check the checker, then exit")
    if parser.parse_args().self_test:
        self_test()
        return
    locks = repo_locks()
    bad = mismatches(locks, ROOT)
    for name, comps in bad.items():
        print(f"{name}: " + "; ".join(f"{c} {v}" for c, v in comps.items()))
    if bad:
        sys.exit(f"check-locks: {len(bad)} package(s) resolve to different versions across locks")
    print(f"check-locks: {len(locks)} locks agree ({len(EXCEPTIONS)} documented exception)")


if __name__ == "__main__":
    main()
