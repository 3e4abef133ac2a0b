#!/usr/bin/env python3
"""Every repository path that the docs, the examples, the chart and the code comments name exists.

Run by `make lint`: `python3 hack/check-paths.py` prints `file:line: path` for each named path that
is missing and exits 1; `--self-test` checks the checker itself on a temporary tree. Standard
library only, so it runs before any environment is built.

Read: every *.md, every file under examples/, crds/ and charts/ (whole text; no lock or JSON
files; comments and docstrings of *.py), and the comments and docstrings of *.py, *.sh, *.yaml,
Makefile, *.mk and Dockerfiles elsewhere.

A token of path characters containing '/' names a repository path when
1. its first part is a top-level entry of the repository (`docs/api.md`, `charts/kubecua`); or,
   when it also has a path's shape (its last part has an extension, or it ends in '/', or it has
   three parts or more: a bare `word/word` is prose, `train/inference`, or data, `../etc`),
2. it starts with `./` or `../`; or
3. its first part is the name of a folder inside the repository (`kubecua_episode/settings.py`).
It exists when it is found from the naming file's folder, from that file's component (the nearest
folder above holding pyproject.toml, make.mk or Chart.yaml, where its commands run: a comment
under operator/ that names tests/ means operator/tests/) or, unless it starts with `./` or `../`,
from the root; in case 3 also when a path of the repository ends with it.
A bare `<name>.md` (no '/') names a document: a file of that name must exist in the repository.
Anything else is not a repository path: URLs, absolute paths, `~/...`, `$VAR/...`, `out/...`,
API versions (`apps/v1`), images (`name/image:tag`). In a path, `<placeholder>` and `*` stand for
any name within one part, `**` for any parts, `{a,b}` for either; a path with `...` is skipped.
Outputs: a path that git ignores (`.venv/`, `/out/`) is never missing; any other line can opt out
with the marker `check-paths: ignore`.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import re
import subprocess
import sys
import tempfile
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

MARKER = "check-paths: ignore"
# Where a token may start: not inside a word, a URL, an absolute path or a $VAR/~ prefix.
TOKEN = re.compile(r"(?<![\w/.\-~$<>{}*@:])(?:\.\.?/)*[\w.\-<>{},*]+(?:/[\w.\-<>{},*]*)+")
BARE_MD = re.compile(r"(?<![\w/.\-])[\w.\-]+\.md\b(?!/)")
COMPONENT_FILES = ("pyproject.toml", "make.mk", "Chart.yaml")
WHOLE_TEXT_DIRS = ("examples", "crds", "charts")
COMMENT_SUFFIXES = (".sh", ".yaml", ".yml", ".mk")
SKIP_SUFFIXES = (".lock", ".json")


def repo_paths(root: Path) -> list[str]:
    """Files of the working tree, as git sees them (tracked or not ignored); all files elsewhere."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True,
        ).stdout.decode()  # fmt: skip
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = [
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(root).parts
        ]
    return sorted({f for f in files if (root / f).is_file()})


def ignored_by_git(root: Path, paths: Iterable[str]) -> set[str]:
    paths = list(paths)
    if not paths:
        return set()
    try:
        proc = subprocess.run(
            ["git", "check-ignore", "--no-index", "--stdin"],
            cwd=root, input="\n".join(paths), capture_output=True, text=True,
        )  # fmt: skip
    except OSError:
        return set()
    return set(proc.stdout.split("\n")) if proc.returncode in (0, 1) else set()


def scanned_text(root: Path, rel: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of what the file says to readers."""
    path, name = root / rel, rel.rsplit("/", 1)[-1]
    top = rel.split("/", 1)[0]
    if name.endswith(SKIP_SUFFIXES):
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    if name.endswith(".md") or (top in WHOLE_TEXT_DIRS and not name.endswith(".py")):
        yield from enumerate(text.splitlines(), 1)
    elif name.endswith(".py"):
        yield from python_comments(text)
    elif name.endswith(COMMENT_SUFFIXES) or name in ("Makefile", "Dockerfile"):
        for number, line in enumerate(text.splitlines(), 1):
            m = re.search(r"(?:^|\s)#(.*)", line)
            if m:
                yield number, m.group(1)


def python_comments(text: str) -> Iterator[tuple[int, str]]:
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
        tree = ast.parse(text)
    except (SyntaxError, tokenize.TokenError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                doc = body[0].value
                if isinstance(doc.value, str):
                    for offset, line in enumerate(doc.value.splitlines()):
                        yield doc.lineno + offset, line


def pattern(path: str) -> re.Pattern[str] | None:
    """A regex for a path with placeholders or globs; None when it has none."""
    if not re.search(r"[<*{]", path):
        return None
    parts = []
    for part in path.split("/"):
        if part == "**":
            parts.append(".*")
            continue
        out, i = "", 0
        while i < len(part):
            c = part[i]
            if c == "<" and ">" in part[i:]:
                out, i = out + "[^/]*", part.index(">", i) + 1
            elif c == "*":
                out, i = out + "[^/]*", i + 1
            elif c == "{" and "}" in part[i:]:
                end = part.index("}", i)
                out += "(?:" + "|".join(map(re.escape, part[i + 1 : end].split(","))) + ")"
                i = end + 1
            else:
                out, i = out + re.escape(c), i + 1
        parts.append(out)
    return re.compile("/".join(parts))


class Tree:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = repo_paths(root)
        self.paths: set[str] = set()
        self.suffixes: set[str] = set()
        self.dir_names: set[str] = set()
        for f in self.files:
            parts = f.split("/")
            for i in range(1, len(parts) + 1):
                self.paths.add("/".join(parts[:i]))
                self.suffixes.update("/".join(parts[j:i]) for j in range(i))
            self.dir_names.update(parts[:-1])
        self.top = {f.split("/", 1)[0] for f in self.files}
        self.names = {f.rsplit("/", 1)[-1] for f in self.files}
        self.component_of: dict[str, str] = {}

    def has(self, path: str, pool: set[str]) -> bool:
        rx = pattern(path)
        return path in pool if rx is None else any(rx.fullmatch(p) for p in pool)

    def component(self, folder: str) -> str:
        """The nearest folder at or above `folder` that holds a component file, else the root."""
        if folder not in self.component_of:
            here, found = folder, ""
            while here:
                if any(f"{here}/{c}" in self.paths for c in COMPONENT_FILES):
                    found = here
                    break
                here = here.rpartition("/")[0]
            self.component_of[folder] = found
        return self.component_of[folder]

    def check(self, rel: str, token: str, after: str) -> list[str]:
        """[] when `token` is not a repository path or exists; else the paths it was looked for."""
        folder = rel.rpartition("/")[0]
        path = token.rstrip("/")
        relative = path.startswith(("./", "../"))
        parts = re.sub(r"^(\.\.?/)+", "", path).split("/")
        shaped = "." in parts[-1].lstrip(".") or token.endswith("/") or len(parts) >= 3
        top = not relative and parts[0] in self.top
        if not (shaped or top) or "..." in path or "{{" in path or parts[0] in ("", ".", ".."):
            return []
        if not (relative or top or parts[0] in self.dir_names):
            return []
        if not (relative or top) and after[:1] == ":" and "." not in parts[-1]:
            return []  # an image, name/image:tag
        bases = [folder, self.component(folder)] + ([] if relative else [""])
        tried = []
        for base in bases:
            joined = os.path.normpath(os.path.join(base, path))
            if joined.startswith(".."):
                continue  # outside the repository: not ours to check
            if self.has(joined, self.paths):
                return []
            tried.append(joined)
        if not (relative or top):
            if self.has(path, self.suffixes):
                return []
            tried.insert(0, path)
        return sorted(set(tried), key=tried.index)


def find_missing(root: Path) -> list[tuple[str, int, str]]:
    tree = Tree(root)
    found: list[tuple[str, int, str, list[str]]] = []
    for rel in tree.files:
        for number, line in scanned_text(root, rel):
            if MARKER in line:
                continue
            for m in TOKEN.finditer(line):
                token = balanced(m.group(0).rstrip(".,:;"))
                tried = tree.check(rel, token, line[m.end() :])
                if tried:
                    found.append((rel, number, token, tried))
            for m in BARE_MD.finditer(line):
                if m.group(0) not in tree.names:
                    found.append((rel, number, m.group(0), []))
    ignored = ignored_by_git(root, {p for *_, tried in found for p in tried})
    return [(rel, n, token) for rel, n, token, tried in found if not ignored & set(tried)]


def balanced(token: str) -> str:
    """Without the braces of the text around it (`{path: a/b}`), keeping `{a,b}` alternatives."""
    while token.endswith("}") and token.count("}") > token.count("{"):
        token = token[:-1]
    while token.startswith("{") and token.count("{") > token.count("}"):
        token = token[1:]
    return token.rstrip(".,:;")


def self_test() -> None:
    """A temporary repository with one good and one bad reference of each kind."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {
            "docs/guide.md": "",
            "hack/build.sh": "",
            "tool/pyproject.toml": "",
            "tool/tests/test_a.py": "",
            "tool/pkg_x/mod.py": "",
            ".gitignore": "/out/\n.venv/\n",
        }
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        (root / "README.md").write_text(
            "See docs/guide.md and [guide](docs/guide.md#top), hack/<script>.sh, docs/*.md.\n"
            "Broken: docs/gone.md and hack/nothing/.\n"
            "Not paths: https://example.com/docs/x.md, /usr/share/docs/x, apps/v1, ~/.cache/k\n"
            "Outputs: out/report.html, tool/.venv/bin/python; docs/later.md check-paths: ignore\n"
            "Cited by name: guide.md, and MISSING.md.\n"
            "Prose, data and images: pkg_x/mod, ../etc, pkg_x/image:1; {path: ./docs/guide.md}\n"
            "Top-level: hack/gone, tool/pkg_x\n"
        )
        (root / "tool/pkg_x/other.py").write_text(
            '"""Uses pkg_x/mod.py and tests/test_a.py; not pkg_x/none.py."""\n'
            "# from ../pyproject.toml and ./mod.py, not ./absent.py\n"
            'X = "docs/in-code-not-a-comment.md"\n'
        )
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        got = sorted(find_missing(root))
        want = sorted([
            ("README.md", 2, "docs/gone.md"),
            ("README.md", 2, "hack/nothing/"),
            ("README.md", 5, "MISSING.md"),
            ("README.md", 7, "hack/gone"),
            ("tool/pkg_x/other.py", 1, "pkg_x/none.py"),
            ("tool/pkg_x/other.py", 2, "./absent.py"),
        ])  # fmt: skip
        if got != want:
            sys.exit(f"check-paths self-test failed:\n got  {got}\n want {want}")
    print("check-paths: self-test passed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--self-test", action="store_true", help="check the checker, then exit")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    missing = find_missing(args.root)
    for rel, number, path in missing:
        print(f"{rel}:{number}: names {path}, which is not in the repository")
    if missing:
        sys.stdout.flush()
        print(
            f"check-paths: {len(missing)} missing path(s); fix the reference, or mark an output's "
            f"line with '{MARKER}' (hack/check-paths.py says what counts as a path)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
