"""A local sandbox started as root runs its desktop as the unprivileged account kubecua-desktop,
as the image runs it as "user": the session's processes and the files tasks make are the
account's, a reset restores the home with that owner, VLC starts, and sudo asks for the password
"password". The episode server stays root (it stops the account's apps and restores the home)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from conftest import LocalSandbox

from kubecua_episode.local import DESKTOP_ACCOUNT

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the launcher drops to the desktop account only when run as root"
)
FAST = {"observation": {"format": "jpeg", "max_pixels": 57600}, "settle": {"max_seconds": 1.0}}


def _task(config: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "local-account",
        "instruction": "nothing",
        "config": config,
        "evaluator": {
            "func": "exact_match",
            "result": {"type": "vm_command_line", "command": "echo hi", "shell": True},
            "expected": {"type": "rule", "rules": {"expected": "hi\n"}},
        },
    }


@pytest.fixture
def http(sandbox: LocalSandbox) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {sandbox.token}"}
    with httpx.Client(base_url=sandbox.url, headers=headers, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def account() -> pwd.struct_passwd:
    return pwd.getpwnam(DESKTOP_ACCOUNT)


def _start(http: httpx.Client, config: list[dict[str, Any]]) -> str:
    resp = http.post("/episodes", json={"task": _task(config), **FAST})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["episode_id"])


def _desktop_run(sandbox: LocalSandbox, command: str) -> dict[str, Any]:
    """A shell command through the desktop's API: it runs as the desktop's user."""
    resp = httpx.post(sandbox.desktop_url + "/execute", json={"command": command, "shell": True},
                      headers={"Authorization": f"Bearer {sandbox.token}"}, timeout=60)  # fmt: skip
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def _owners(root: Path) -> set[tuple[int, int]]:
    found = {(root.stat().st_uid, root.stat().st_gid)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            found.add((st.st_uid, st.st_gid))
    return found


def test_desktop_processes_run_as_the_account_and_the_episode_server_as_root(
    sandbox: LocalSandbox, account: pwd.struct_passwd
) -> None:
    launcher = psutil.Process(sandbox.proc.pid)
    session = next(p for p in launcher.children() if "kubecua_desktop.session" in p.cmdline())
    episode = next(p for p in launcher.children() if "kubecua_episode" in p.cmdline())
    desktop = [session, *session.children(recursive=True)]
    assert {"Xvfb", "dbus-daemon", "openbox", "pulseaudio"} <= {p.name() for p in desktop}
    for p in desktop:
        assert p.uids().real == p.uids().effective == account.pw_uid, p.cmdline()
        assert p.gids().real == account.pw_gid, p.cmdline()
    assert session.gids().effective == account.pw_gid
    assert episode.uids().effective == 0
    out = _desktop_run(sandbox, "id -u; id -G; echo $HOME")["output"].split()
    assert out == [str(account.pw_uid), str(account.pw_gid), str(sandbox.home)]


def test_task_files_belong_to_the_account_and_reset_restores_the_home_as_its_own(
    http: httpx.Client, sandbox: LocalSandbox, account: pwd.struct_passwd
) -> None:
    made = {
        "type": "execute",
        "parameters": {"command": "echo x > /home/user/made.txt", "shell": True},
    }
    eid = _start(http, [made])
    try:
        st = (sandbox.home / "made.txt").stat()
        assert (st.st_uid, st.st_gid) == (account.pw_uid, account.pw_gid)
        # The episode removes a file of the pristine home: the reset brings it back.
        gone = _desktop_run(sandbox, "rm -r ~/.config/vlc && test ! -e ~/.config/vlc")
        assert gone["returncode"] == 0, gone
    finally:
        released = http.delete(f"/episodes/{eid}").json()
    assert released["clean"] is True, released
    assert not (sandbox.home / "made.txt").exists()
    assert "[qt]" in (sandbox.home / ".config/vlc/vlcrc").read_text()
    assert _owners(sandbox.home) == {(account.pw_uid, account.pw_gid)}
    # ...and the account can change what was restored (a root-owned copy would refuse).
    assert _desktop_run(sandbox, "touch ~/.config/vlc/vlcrc")["returncode"] == 0


def test_vlc_starts_on_a_local_sandbox(http: httpx.Client, sandbox: LocalSandbox) -> None:
    eid = _start(http, [{"type": "launch", "parameters": {"command": ["vlc"]}}])
    try:
        for _ in range(100):  # VLC's window appears asynchronously: step WAIT until listed
            if "vlc.vlc" in _desktop_run(sandbox, "wmctrl -lx")["output"]:
                break
            assert http.post(f"/episodes/{eid}/step", json={"action": "WAIT"}).status_code == 200
        else:
            raise AssertionError("no VLC window: " + _desktop_run(sandbox, "wmctrl -lx")["output"])
    finally:
        released = http.delete(f"/episodes/{eid}").json()
    assert released["clean"] is True, released
    assert "vlc.vlc" not in _desktop_run(sandbox, "wmctrl -lx")["output"]


def test_sudo_asks_for_the_password_and_accepts_password(sandbox: LocalSandbox) -> None:
    asked = _desktop_run(sandbox, "sudo -n true")
    assert asked["returncode"] != 0
    assert "password is required" in asked["error"]
    wrong = _desktop_run(sandbox, "echo wrong | sudo -S -k -p '' id -u")
    assert wrong["returncode"] != 0
    right = _desktop_run(sandbox, "echo password | sudo -S -k -p '' id -u")
    assert (right["returncode"], right["output"]) == (0, "0\n"), right


def test_launcher_as_root_without_the_account_says_what_to_run(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    cmd = [sys.executable, "-m", "kubecua_episode.local", "--display", "999",
           "--episode-port", "1", "--desktop-port", "1", "--cdp-port", "1", "--vlc-port", "1",
           "--token-file", str(token), "--workdir", str(tmp_path / "w")]  # fmt: skip
    env = {**os.environ, "KUBECUA_DESKTOP_ACCOUNT": "kubecua-no-such-account"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "'kubecua-no-such-account', which does not exist" in done.stderr
    assert "make sandbox-env" in done.stderr
    assert not (tmp_path / "w").exists()  # refused before it made anything
