#!/usr/bin/env python3
"""Each target that runs only local desktops installs only the demo's Debian packages.

`make test`'s lists (hack/apt/*.txt: podman, qemu, LibreOffice, Chromium, about 830 packages)
take minutes on a fresh machine; `make demo` and `make bench-learning` start two or more Xvfb
desktops with a Tk window and the CPU trainer, which hack/apt/demo/desktops.txt covers. A target
that pulled in the whole set (bench-learning did, through sandbox-env) would still work, only
slower, so nothing else would notice: this check reads what each target would run
(`make -n TARGET`: recursive makes are followed in dry-run mode, nothing is installed) and fails
when a setup-apt call there names any list but the demo's.
Run by `make lint` (lint-paths' neighbour); `--self-test` checks the parser on made-up lines.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO_LIST = "hack/apt/demo/desktops.txt"
# Targets whose code starts local desktops and nothing heavier (no images, VMs or cluster).
DESKTOP_ONLY = ("demo", "bench-learning")
CALL = re.compile(r"hack/setup-apt\.sh\b(?P<args>[^;&|\n]*)")


def apt_calls(dry_run: str) -> list[list[str]]:
    """The argument lists of every hack/setup-apt.sh call in `make -n`'s output."""
    return [m["args"].split() for m in CALL.finditer(dry_run)]


def wrong_lists(calls: list[list[str]]) -> list[str]:
    """What is wrong with them: no call at all is fine (nothing to install), a call with no
    argument installs every list, any other list is more than the desktops need."""
    problems = []
    for args in calls:
        lists = [a.removeprefix(str(REPO) + "/") for a in args]
        if not lists:
            problems.append("hack/setup-apt.sh with no list installs all of hack/apt/*.txt")
        problems += [f"installs {a}, not only {DEMO_LIST}" for a in lists if a != DEMO_LIST]
    return problems


def self_test() -> None:
    out = "cd x && hack/setup-apt.sh hack/apt/demo/desktops.txt\nhack/setup-apt.sh \n"
    assert apt_calls(out) == [[DEMO_LIST], []], apt_calls(out)
    assert wrong_lists([[DEMO_LIST]]) == []
    assert len(wrong_lists([[]])) == 1
    assert wrong_lists([["hack/apt/sandbox.txt"]]) == [f"installs hack/apt/sandbox.txt, not only {DEMO_LIST}"]
    print("check-apt-targets: self-test passed")


def main() -> int:
    if "--self-test" in sys.argv:
        self_test()
        return 0
    failed = False
    for target in DESKTOP_ONLY:
        dry = subprocess.run(
            ["make", "--no-print-directory", "-n", target],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if dry.returncode != 0:
            print(f"check-apt-targets: make -n {target} failed:\n{dry.stderr}", file=sys.stderr)
            failed = True
            continue
        for problem in wrong_lists(apt_calls(dry.stdout)):
            print(f"check-apt-targets: make {target} {problem}", file=sys.stderr)
            failed = True
    if not failed:
        print(f"check-apt-targets: {', '.join(DESKTOP_ONLY)} install only {DEMO_LIST}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
