"""kubecua-sandbox-local: one local sandbox (a desktop session + its episode server) in the
foreground, for tests, `make demo` and the trainer's local sandbox source.

    kubecua-sandbox-local --display 91 --episode-port 18091 --desktop-port 15091 \
        --cdp-port 19291 --vlc-port 18191 --token-file /tmp/tok --workdir /tmp/sb91

Starts S1's desktop session (`python -m kubecua_desktop.session` from the desktop-server venv),
waits until its screenshot comes back, snapshots the fresh home as the pristine copy that resets
restore, then runs the episode server. Ready when GET http://127.0.0.1:PORT/readyz is 200.
SIGTERM/SIGINT stop both. Leaves out: containers (see sandbox-image/Dockerfile). Several can run
at once when display and ports differ.

Run as root (CI), the desktop session and every app it starts run as the unprivileged account
kubecua-desktop (made by `make sandbox-env`; sudo with password "password"), as the image runs
them as "user": VLC refuses root, and sudo must ask. The home then lives in a directory of that
account's (pytest's tmp dirs are root-only), linked as WORKDIR/home; the episode server stays
root, to stop the session's apps and restore the home on reset, and to undo what the account's
sudo changed in /etc, /opt, /srv and at the top of / and /home (LOCAL_SYSTEM_SCOPE)."""

from __future__ import annotations

import argparse
import ctypes
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import requests

from kubecua_episode.reset import chown_below

REPO_SANDBOX = Path(__file__).resolve().parents[2]
DEFAULT_DESKTOP_PYTHON = REPO_SANDBOX / "desktop-server" / ".venv" / "bin" / "python"
DESKTOP_ACCOUNT = "kubecua-desktop"
# Run as root, the account's sudo reaches the host's root: resets undo what episodes change here
# (kubecua_episode/system.py). Kept small, since the host is shared: /usr, /var, /root and /tmp
# are the host's own (and other sandboxes'). A variable set for the launcher wins; "" is off.
LOCAL_SYSTEM_SCOPE = {
    "KUBECUA_SYSTEM_PATHS": "/etc:/opt:/srv",
    "KUBECUA_SYSTEM_COPIES": "/etc",
    "KUBECUA_SYSTEM_TOP": "/:/home",
}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kubecua-sandbox-local", description=__doc__.split("\n")[0])
    p.add_argument("--display", type=int, required=True, help="X display number N (:N)")
    p.add_argument("--episode-port", type=int, required=True)
    p.add_argument("--desktop-port", type=int, required=True)
    p.add_argument("--cdp-port", type=int, required=True)
    p.add_argument("--vlc-port", type=int, required=True)
    p.add_argument("--token-file", type=Path, required=True)
    p.add_argument("--workdir", type=Path, required=True, help="home, pristine copy, logs")
    p.add_argument("--desktop-python", type=Path, default=DEFAULT_DESKTOP_PYTHON)
    p.add_argument("--ready-timeout", type=float, default=120.0)
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="release an episode after this many seconds without a call (0: never)",
    )
    a = p.parse_args(argv)
    if not a.token_file.is_file() or not a.token_file.read_text().strip():
        p.error(f"--token-file {a.token_file} is missing or empty")
    if not a.desktop_python.exists():
        p.error(f"no desktop-server python at {a.desktop_python}: run `make sandbox-env`")
    return a


def _die_with_parent() -> None:
    """Runs in each child before exec: SIGTERM it if this launcher dies, even by SIGKILL
    (Linux prctl PR_SET_PDEATHSIG), so a killed launcher leaves no orphans."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


@dataclass
class Account:
    """Whom the desktop session runs as, when that is not the launcher's own user."""

    name: str
    uid: int
    gid: int

    @classmethod
    def for_desktop(cls) -> Account | None:
        """The desktop account if we run as root, else None (the session runs as we do)."""
        if os.geteuid() != 0:
            return None
        name = os.environ.get("KUBECUA_DESKTOP_ACCOUNT", DESKTOP_ACCOUNT)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            sys.exit(
                f"kubecua-sandbox-local: run as root, the desktop runs as the unprivileged account "
                f"{name!r}, which does not exist: run `make sandbox-env` as root (or "
                f"`sandbox-image/install/local-desktop-user.sh {DEFAULT_DESKTOP_PYTHON}`)"
            )
        return cls(name, entry.pw_uid, entry.pw_gid)

    def env(self) -> dict[str, str]:
        return {"USER": self.name, "LOGNAME": self.name, "SHELL": "/bin/bash"}

    def make_dir(self, path: Path) -> None:
        os.chown(path, self.uid, self.gid)
        path.chmod(0o700)

    def own_tree(self, root: Path) -> None:
        os.chown(root, self.uid, self.gid)
        chown_below(root, self.uid, self.gid)


def _spawn(
    cmd: list[str],
    env: dict[str, str],
    log: IO[bytes],
    account: Account | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    # Popen sets the ids before preexec_fn, so the death signal survives the switch (the kernel
    # clears it on a change of credentials). extra_groups=[] drops root's supplementary groups.
    drop = {"user": account.uid, "group": account.gid, "extra_groups": []} if account else {}
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True,
                            preexec_fn=_die_with_parent, cwd=cwd, **drop)  # type: ignore[call-overload]  # fmt: skip


def _account_home(work: Path, account: Account, token: str) -> tuple[Path, Path, Path]:
    """A directory of the account's in the temp dir holding the home and a copy of the token;
    WORKDIR/home links to the home while the sandbox runs. A home a former run left in WORKDIR
    moves in (and back out at exit). Returns (the directory, the home, the token file)."""
    own = Path(tempfile.mkdtemp(prefix="kubecua-desktop-"))
    account.make_dir(own)
    home, link = own / "home", work / "home"
    if link.is_dir() and not link.is_symlink():
        shutil.move(link, home)
    home.mkdir(exist_ok=True)
    account.own_tree(home)
    link.unlink(missing_ok=True)
    link.symlink_to(home)
    token_file = own / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    os.chown(token_file, account.uid, account.gid)
    return own, home, token_file


def _wait_desktop(url: str, token: str, proc: subprocess.Popen[bytes], limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"kubecua-sandbox-local: desktop session exited with {proc.returncode}")
        try:
            r = requests.get(url + "/screenshot", headers={"Authorization": f"Bearer {token}"},
                             timeout=5)  # fmt: skip
            if r.status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    sys.exit(f"kubecua-sandbox-local: desktop at {url} not up after {limit:.0f} s")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main(argv: list[str] | None = None) -> None:
    a = _args(argv)
    account = Account.for_desktop()
    work = a.workdir.resolve()
    home, pristine, logs = work / "home", work / "home.pristine", work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    token_file = a.token_file.resolve()
    env = {**os.environ, "KUBECUA_SANDBOX_TOKEN_FILE": str(token_file)}
    env.pop("KUBECUA_SANDBOX_TOKEN", None)
    desktop_env, own = dict(env), None
    if account:
        own, home, desktop_token = _account_home(work, account, token_file.read_text())
        desktop_env.update(account.env(), KUBECUA_SANDBOX_TOKEN_FILE=str(desktop_token))
    else:
        home.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    try:
        desktop_cmd = [
            str(a.desktop_python), "-m", "kubecua_desktop.session",
            "--display", f":{a.display}", "--port", str(a.desktop_port),
            "--cdp-port", str(a.cdp_port), "--vlc-port", str(a.vlc_port), "--home", str(home),
        ]  # fmt: skip
        with open(logs / "desktop.log", "ab") as out:
            procs.append(_spawn(desktop_cmd, desktop_env, out, account, cwd=home))
        url = f"http://127.0.0.1:{a.desktop_port}"
        _wait_desktop(url, a.token_file.read_text().strip(), procs[0], a.ready_timeout)
        shutil.rmtree(pristine, ignore_errors=True)
        shutil.copytree(home, pristine, symlinks=True)
        episode_env = {
            **env, "KUBECUA_DESKTOP_PORT": str(a.desktop_port), "KUBECUA_CDP_PORT": str(a.cdp_port),
            "KUBECUA_VLC_PORT": str(a.vlc_port), "KUBECUA_DISPLAY": f":{a.display}",
            "KUBECUA_HOME": str(home), "KUBECUA_PRISTINE_HOME": str(pristine),
            "KUBECUA_CACHE_DIR": str(work / "cache"),
        }  # fmt: skip
        if account:
            for name, value in LOCAL_SYSTEM_SCOPE.items():
                episode_env.setdefault(name, value)
            mine = [episode_env.get("KUBECUA_SYSTEM_EXCLUDE", ""), str(work), str(own)]
            episode_env["KUBECUA_SYSTEM_EXCLUDE"] = ":".join(filter(None, mine))
        if a.idle_timeout is not None:
            episode_env["KUBECUA_IDLE_TIMEOUT_SECONDS"] = str(a.idle_timeout)
        episode_env.pop("DISPLAY", None)  # not on the desktop's display: resets would kill us
        cmd = [sys.executable, "-m", "kubecua_episode", "--port", str(a.episode_port)]
        with open(logs / "episode.log", "ab") as out:
            procs.append(_spawn(cmd, episode_env, out))
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(0.2)
    finally:
        _stop(procs)
        if own is not None:  # the home goes back to WORKDIR, as without the account
            (work / "home").unlink(missing_ok=True)
            shutil.move(home, work / "home")
            shutil.rmtree(own, ignore_errors=True)
    failed = [p for p in procs if p.returncode not in (0, -signal.SIGTERM)]
    sys.exit(1 if failed and not stopping else 0)


if __name__ == "__main__":
    main()
