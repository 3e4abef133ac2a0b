"""What an episode changed outside the home. The desktop's account has sudo (OSWorld's
convention), so a task or an action can write anywhere: `sudo mkdir /opt/x`, an edit of
/etc/hosts, a new top-level /data. Restoring the home and /tmp misses those, and a later
episode's no-op can then score 1.

At the clean baseline the episode server records a manifest of the tracked trees (`roots`: path
-> kind, mode, owner, and for files size and mtime; links by target) and keeps a byte copy of the
`copies` trees (small config trees such as /etc). A reset walks the same trees: what is new is
removed, what changed or went away is put back from the copy where there is one; then a second
walk must equal the manifest. A change with no copy to restore it from (an edited file under
/usr/local) stays, and the sandbox is reported not clean, like any failed verification. `top`
directories (`/`) get a shallow check: entries made there since the baseline are removed.

The walk never leaves a root's file system (a mount point is recorded, not entered, nor is
anything under it removed) and skips `exclude` (the home, restored by its own copy, and the
server's own files). Stat data, not bytes, is compared: a write that keeps a file's size and
mtime (`touch -d`) goes unseen. The server restores what its own uid may write: in the image
(uid 1000, no privilege escalation in a pod) that is what the account itself could write; a
root-owned change it cannot undo is reported, not hidden."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# kind ("d", "f", "l" or "o"), mode, uid, gid, size, mtime_ns, link target. Directories and links
# carry no size or mtime: a directory's change shows in its entries, a link's in its target.
Entry = tuple[str, int, int, int, int, int, str]


def _entry(path: str, st: os.stat_result) -> Entry:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return ("d", mode, st.st_uid, st.st_gid, 0, 0, "")
    if stat.S_ISLNK(st.st_mode):
        return ("l", 0, st.st_uid, st.st_gid, 0, 0, os.readlink(path))
    kind = "f" if stat.S_ISREG(st.st_mode) else "o"
    return (kind, mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, "")


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def walk(root: str, exclude: tuple[str, ...]) -> dict[str, Entry]:
    """path -> Entry for root and everything below it on root's file system, `exclude` left out.
    A directory this uid cannot list is recorded without its entries."""
    out: dict[str, Entry] = {}
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return out
    out[root] = _entry(root, st)
    if not stat.S_ISDIR(st.st_mode):
        return out
    dev, todo = st.st_dev, [root]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except (PermissionError, FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            if _inside(e.path, exclude):
                continue
            try:
                est = e.stat(follow_symlinks=False)
                out[e.path] = _entry(e.path, est)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(est.st_mode) and est.st_dev == dev:
                todo.append(e.path)
    return out


def remove(path: str, dev: int) -> None:
    """Delete path (a whole directory tree) without crossing into another file system: a mount
    point below it stays, and the verification reports it. Errors are left to the verification."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            return
        if st.st_dev != dev:
            return
        for e in list(os.scandir(path)):
            remove(e.path, dev)
        os.rmdir(path)


@dataclass
class SystemState:
    roots: tuple[Path, ...] = ()
    copies: tuple[Path, ...] = ()  # each inside a root: changes there are restored byte for byte
    top: tuple[Path, ...] = ()  # new direct entries of these are removed
    exclude: tuple[Path, ...] = ()
    snapshot: Path = Path("/nonexistent")  # copies and state (0700: a copy of /etc/shadow)
    manifest: dict[str, Entry] = field(default_factory=dict)
    top_baseline: dict[str, set[str]] = field(default_factory=dict)
    copied: set[str] = field(default_factory=set)  # the manifest's paths that have a copy
    changed: list[str] = field(default_factory=list)  # by the last restore, for the log
    # The last restore's walk equalled the manifest: the verification needs no second walk.
    found_clean: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.roots or self.top)

    def _exclude(self) -> tuple[str, ...]:
        return tuple(str(p) for p in (*self.exclude, self.snapshot))

    def _walk(self) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        for root in self.roots:
            out.update(walk(str(root), self._exclude()))
        return out

    def _top_names(self, top: Path) -> set[str]:
        try:
            return {n for n in os.listdir(top) if not _inside(str(top / n), self._exclude())}
        except OSError:
            return set()

    def take_baseline(self) -> list[str]:
        self.manifest = self._walk()
        self.top_baseline = {str(t): self._top_names(t) for t in self.top}
        shutil.rmtree(self.snapshot, ignore_errors=True)
        self.snapshot.mkdir(parents=True, mode=0o700)
        self.snapshot.chmod(0o700)
        self.copied = set()
        keep = tuple(str(c) for c in self.copies)
        for path, entry in sorted(self.manifest.items()):
            if not _inside(path, keep) or entry[0] == "o":
                continue
            dst = self._copy_of(path)
            try:
                if entry[0] == "d":
                    dst.mkdir(mode=0o700, parents=True, exist_ok=True)
                elif entry[0] == "f":
                    shutil.copyfile(path, dst, follow_symlinks=False)
            except OSError:  # unreadable to this uid: a change there fails the verification
                continue
            self.copied.add(path)
        return []

    def scope(self) -> dict[str, Any]:
        fields = ("roots", "copies", "top", "exclude")
        return {**{k: [str(p) for p in getattr(self, k)] for k in fields},
                "snapshot": str(self.snapshot)}  # fmt: skip

    def save(self) -> None:
        state = {"manifest": self.manifest, "copied": sorted(self.copied),
                 "top": {k: sorted(v) for k, v in self.top_baseline.items()}}  # fmt: skip
        (self.snapshot / "state.json").write_text(json.dumps(state))

    def load(self) -> None:
        state = json.loads((self.snapshot / "state.json").read_text())
        self.manifest = {k: tuple(v) for k, v in state["manifest"].items()}
        self.copied = set(state["copied"])
        self.top_baseline = {k: set(v) for k, v in state["top"].items()}

    def _copy_of(self, path: str) -> Path:
        return self.snapshot / "files" / path.lstrip("/")

    def restore(self) -> None:
        """Remove what is new, put back what changed where a copy has it."""
        self.changed, self.found_clean = [], False
        for top, names in self.top_baseline.items():
            for name in sorted(self._top_names(Path(top)) - names):
                path = os.path.join(top, name)
                self.changed.append(path)
                remove(path, os.lstat(top).st_dev)
        now = self._walk()
        if now == self.manifest and not self.changed:
            self.found_clean = True
            return
        removed: set[str] = set()
        for path in sorted(now.keys() - self.manifest.keys()):
            if any(str(p) in removed for p in Path(path).parents):
                continue
            removed.add(path)
            self.changed.append(path)
            remove(path, os.lstat(os.path.dirname(path)).st_dev)
        for path in sorted(self.manifest):
            want = self.manifest[path]
            if now.get(path) != want and path in self.copied:
                self.changed.append(path)
                with contextlib.suppress(OSError):
                    self._put_back(path, want, now.get(path))

    def _put_back(self, path: str, want: Entry, have: Entry | None) -> None:
        kind, mode, uid, gid, _, mtime_ns, target = want
        if (have is not None and have[0] != kind) or kind == "l":
            remove(path, os.lstat(os.path.dirname(path)).st_dev)
        if kind == "d":
            os.makedirs(path, exist_ok=True)
        elif kind == "f":  # in place when a file is there: keeps the inode (a bind mount)
            shutil.copyfile(self._copy_of(path), path)
        elif kind == "l":
            os.symlink(target, path)
        os.lchown(path, uid, gid)
        if kind != "l":
            os.chmod(path, mode)
        if kind == "f":
            os.utime(path, ns=(mtime_ns, mtime_ns))

    def problems(self) -> list[str]:
        if self.found_clean:  # once: a later call walks again
            self.found_clean = False
            return []
        found = []
        for top, names in self.top_baseline.items():
            new = sorted(self._top_names(Path(top)) - names)
            if new:
                found.append(f"new entries in {top}: {new[:10]}")
        now = self._walk()
        diff = sorted(p for p in now.keys() | self.manifest.keys()
                      if now.get(p) != self.manifest.get(p))  # fmt: skip
        if diff:
            found.append(f"system paths differ from the baseline: {diff[:10]}")
        return found


@dataclass
class SudoSystemState:
    """The same through sudo, as root, for a server that does not run as root but shares the
    account's sudo (the image: uid 1000, password "password"). Where the account's sudo works,
    its writes reach root's files, and so does this; where it does not (a pod: no privilege
    escalation), the server's own uid can undo all the account could write, and SystemState is
    used instead. Each call is one `python -m kubecua_episode.system` run as root."""

    state: SystemState
    password: str
    changed: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return self.state.enabled

    def _run(self, verb: str) -> dict[str, Any]:
        cmd = ["sudo", "-S", "-p", "", "--", sys.executable, "-m", "kubecua_episode.system",
               verb, json.dumps(self.state.scope())]  # fmt: skip
        try:
            done = subprocess.run(cmd, input=self.password + "\n", capture_output=True,
                                  text=True, timeout=120)  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"changed": [], "problems": [f"system {verb} as root timed out"]}
        try:
            answer: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            why = f"exit {done.returncode}: {done.stderr[-300:]}"
            return {"changed": [], "problems": [f"system {verb} as root failed ({why})"]}
        return answer

    def take_baseline(self) -> list[str]:
        self.found = list(self._run("baseline")["problems"])
        return self.found

    def restore(self) -> None:
        answer = self._run("reset")
        self.changed, self.found = list(answer["changed"]), list(answer["problems"])

    def problems(self) -> list[str]:
        return self.found


def sudo_works(password: str) -> bool:
    """Whether this uid gets root through sudo with `password` (not in a pod, where privilege
    escalation is off; not where the password is another)."""
    try:
        done = subprocess.run(["sudo", "-S", "-k", "-p", "", "true"], input=password + "\n",
                              capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def main(argv: list[str]) -> None:
    """`python -m kubecua_episode.system baseline|reset SCOPE_JSON` (SudoSystemState's root side):
    prints {"changed": [...], "problems": [...]}."""
    verb, scope = argv[0], json.loads(argv[1])
    roots, copies, top, exclude = (
        tuple(Path(p) for p in scope[k]) for k in ("roots", "copies", "top", "exclude")
    )
    state = SystemState(roots, copies, top, exclude, snapshot=Path(scope["snapshot"]))
    if verb == "baseline":
        problems = state.take_baseline()
        state.save()
    else:
        state.load()
        state.restore()
        problems = state.problems()
    print(json.dumps({"changed": state.changed, "problems": problems}))


if __name__ == "__main__":
    main(sys.argv[1:])
