"""What an episode writes outside the home with sudo is undone by the reset, as it is for the home.
Upstream OSWorld tasks on a local sandbox showed the leak: a folder one episode made with sudo
outside the home was still there in the next episode, so that task's no-op scored 1.

The sandbox is the local launcher's, run as root: the desktop account's sudo is the host's root,
and the default scope (/etc restored from a byte copy; /opt, /srv walked; new entries at the top
of / and /home removed) is what these episodes write to. Every path they touch is named for this
run and removed at the end, and the one host file edited (/etc/issue, a login banner) is put
back by the test too if the reset fails. A directory of this run's under /var/opt, outside the
default scope (so no other local sandbox on the host walks it), is added to the scope without a
copy: a change there cannot be undone and must leave the sandbox not clean."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import LocalSandbox, launch, needs_desktop

from kubecua_episode.local import LOCAL_SYSTEM_SCOPE
from kubecua_episode.settings import Settings, SettingsError
from kubecua_episode.system import walk

RUN = "kubecua-leak-" + secrets.token_hex(3)
LEAK_DIR = Path("/opt") / RUN
LEAK_CONF = Path("/etc") / f"{RUN}.conf"
LEAK_TOP = Path("/") / RUN
BANNER, BANNER_NET = Path("/etc/issue"), Path("/etc/issue.net")
UNDOABLE = Path("/var/opt") / RUN  # tracked with no copy: edits there cannot be restored
FAST = {"observation": {"format": "jpeg", "max_pixels": 57600}, "settle": {"max_seconds": 1.0}}
TASK: dict[str, Any] = {
    "id": "system-leak",
    "instruction": f"Create the folder {LEAK_DIR} (your password is 'password').",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {
            "type": "vm_command_line",
            "command": f"test -d {LEAK_DIR} && echo yes || echo no",
            "shell": True,
        },
        "expected": {"type": "rule", "rules": {"expected": "yes\n"}},
    },
}


def sudo(script: str) -> str:
    """A pyautogui-space action that runs `script` as root through the account's sudo, as an
    agent typing into a terminal would."""
    cmd = f"echo password | sudo -S -p '' sh -c {shlex.quote(script)}"
    return f"import subprocess; subprocess.run({cmd!r}, shell=True, check=True)"


LEAK = sudo(
    f"mkdir -p {LEAK_DIR}/sub && echo x > {LEAK_DIR}/sub/f && echo leak > {LEAK_CONF} && "
    f"mkdir {LEAK_TOP} && echo 'edited by an episode' >> {BANNER} && chmod 600 {BANNER} && "
    f"rm {BANNER_NET}"
)


def _stat(path: Path) -> tuple[bytes, int, int, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns


pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the launcher gives the desktop account sudo only when run as root"
)


@pytest.fixture(scope="module")
def system_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSandbox]:
    needs_desktop()
    saved = {p: (p.read_bytes(), p.stat()) for p in (BANNER, BANNER_NET)}
    UNDOABLE.mkdir()
    (UNDOABLE / "kept.txt").write_text("baseline\n")
    env = {"KUBECUA_SYSTEM_PATHS": LOCAL_SYSTEM_SCOPE["KUBECUA_SYSTEM_PATHS"] + f":{UNDOABLE}"}
    try:
        with launch(tmp_path_factory.mktemp("system"), env) as sb:
            yield sb
    finally:
        for path in (LEAK_DIR, LEAK_TOP, UNDOABLE):
            shutil.rmtree(path, ignore_errors=True)
        LEAK_CONF.unlink(missing_ok=True)
        for path, (data, st) in saved.items():  # only if a reset failed to
            now = _stat(path) if path.exists() else None
            if now != (data, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns):
                path.write_bytes(data)
                path.chmod(st.st_mode & 0o7777)
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def http(system_sandbox: LocalSandbox) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {system_sandbox.token}"}
    with httpx.Client(base_url=system_sandbox.url, headers=headers, timeout=180) as client:
        yield client


def _episode(http: httpx.Client, actions: list[str]) -> tuple[float, dict[str, Any]]:
    started = http.post("/episodes", json={"task": TASK, **FAST})
    assert started.status_code == 201, started.text
    eid = started.json()["episode_id"]
    try:
        for action in actions:
            step = http.post(f"/episodes/{eid}/step", json={"action": action})
            assert step.status_code == 200, step.text
            assert "error" not in step.json()["info"], step.json()["info"]
        score = float(http.post(f"/episodes/{eid}/evaluate").json()["score"])
    finally:
        released = http.delete(f"/episodes/{eid}").json()
    return score, released


def test_sudo_writes_outside_the_home_are_undone_and_a_later_no_op_scores_0(
    http: httpx.Client,
) -> None:
    banner, banner_net = _stat(BANNER), _stat(BANNER_NET)
    score, released = _episode(http, [LEAK])
    assert score == 1.0
    assert released["clean"] is True, released
    print(f"reset seconds: after the sudo writes {released['reset_seconds']}")
    # Read back from the file system: the episode's writes are gone, the edits undone.
    assert [p for p in (LEAK_DIR, LEAK_CONF, LEAK_TOP) if p.exists()] == []
    assert _stat(BANNER) == banner  # bytes, mode, owner and mtime
    assert _stat(BANNER_NET) == banner_net
    score, released = _episode(http, [])  # the no-op of the same task
    assert (score, released["clean"]) == (0.0, True), released
    print(f"reset seconds: after its no-op {released['reset_seconds']}")


def test_a_change_with_no_copy_to_restore_leaves_the_sandbox_not_clean(
    http: httpx.Client,
) -> None:
    """Runs last: the sandbox is then quarantined (/readyz 503), as after any failed reset."""
    assert http.get("/readyz").status_code == 200
    kept = UNDOABLE / "kept.txt"
    _, released = _episode(http, [sudo(f"echo changed >> {kept}")])
    assert released["clean"] is False, released
    assert kept.read_text() == "baseline\nchanged\n"  # not restorable, so not hidden either
    ready = http.get("/readyz")
    assert ready.status_code == 503
    assert "NotClean" in ready.text, ready.text
    assert str(kept) in ready.text, ready.text
    refused = http.post("/episodes", json={"task": TASK, **FAST})
    assert refused.status_code == 503, refused.text


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KUBECUA_SYSTEM_PATHS": "etc"}, "KUBECUA_SYSTEM_PATHS='etc': 'etc' is not an absolute"),
        ({"KUBECUA_SYSTEM_TOP": "/a/../b"}, "KUBECUA_SYSTEM_TOP='/a/../b'"),
        ({"KUBECUA_SYSTEM_PATHS": "/opt", "KUBECUA_SYSTEM_COPIES": "/etc"},
         "KUBECUA_SYSTEM_COPIES: /etc is not inside any of KUBECUA_SYSTEM_PATHS"),
        ({"KUBECUA_DESKTOP_PORT": "x"}, "KUBECUA_DESKTOP_PORT='x': Input should be a valid int"),
        ({"KUBECUA_IDLE_TIMEOUT_SECONDS": "soon"}, "KUBECUA_IDLE_TIMEOUT_SECONDS='soon'"),
        ({"KUBECUA_SANDBOX_TOKEN": "", "KUBECUA_SANDBOX_TOKEN_FILE": "/nonexistent"},
         "cannot read KUBECUA_SANDBOX_TOKEN_FILE=/nonexistent"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_refused_naming_the_variable(
    env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"KUBECUA_SANDBOX_TOKEN": "t", **env}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=re.escape(message)):
        Settings.from_env()


def test_the_scope_parses_into_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECUA_SANDBOX_TOKEN", "t")
    assert Settings.from_env().system_paths == ()
    for name, value in LOCAL_SYSTEM_SCOPE.items():
        monkeypatch.setenv(name, value)
    s = Settings.from_env()
    assert s.system_paths == (Path("/etc"), Path("/opt"), Path("/srv"))
    assert (s.system_copies, s.system_top) == ((Path("/etc"),), (Path("/"), Path("/home")))


def test_the_local_scope_walk_is_cheap() -> None:
    """What a reset with nothing to undo adds: one walk of the local default scope (read only)."""
    roots = LOCAL_SYSTEM_SCOPE["KUBECUA_SYSTEM_PATHS"].split(":")
    times, found = [], {}
    for _ in range(10):
        t0 = time.monotonic()
        found = {k: v for r in roots for k, v in walk(r, ()).items()}
        times.append(time.monotonic() - t0)
    assert found["/etc"][0] == "d"
    assert found["/etc/passwd"][:4] == ("f", 0o644, 0, 0)
    times.sort()
    print(f"walk of {roots}: {len(found)} entries, p50 {times[5] * 1000:.0f} ms")
    assert times[5] < 1.0
