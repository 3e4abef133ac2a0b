"""The warm executor: desktop-env's pyautogui actions run forked from a pre-imported python, with
the same outputs, return codes, timeouts and kill semantics as a fresh `python3 -c`."""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubecua_desktop.warm import WarmPython, warm_argv
from tests.conftest import Desktop, run, wait_for

PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; "  # desktop-env's prefix
WHO = "import os; print(open(f'/proc/{os.getppid()}/cmdline').read().split(chr(0))[2]); "

CASES = [
    PREFIX + "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)",
    PREFIX + "raise ValueError('bad click')",
    PREFIX + "print(pyautogui.size()); pyautogui.moveTo(10, 20); print(pyautogui.position())",
    PREFIX + "import sys; print(__name__, sys.argv); sys.exit('bye')",
    PREFIX + "import sys; sys.stdout.write('no newline'); sys.exit(None)",
    PREFIX + "syntax error here",
]


def _warm(desktop: Desktop, code: str) -> dict[str, object]:
    return run(desktop, ["python3", "-c", code])


def _cold(desktop: Desktop, code: str) -> dict[str, object]:
    # A shell command never takes the warm path: this is a fresh `python3 -c` from the same PATH.
    return run(desktop, f"python3 -c {shlex.quote(code)}", shell=True)


def test_only_desktop_env_style_python_takes_the_warm_path() -> None:
    assert warm_argv(["python", "-c", PREFIX + "pass", "x"], False) == ["x"]
    assert warm_argv("python3 -c 'import pyautogui'", False) == []
    assert warm_argv("python3 -c 'import pyautogui'", True) is None  # shell
    assert warm_argv(["python3", "-c", "print(1)"], False) is None  # no pyautogui
    assert warm_argv(["python3", "-u", "-c", "import pyautogui"], False) is None  # flags
    assert warm_argv(["/usr/bin/python3", "-c", "import pyautogui"], False) is None


@pytest.mark.parametrize("code", CASES, ids=range(len(CASES)))
def test_warm_and_cold_answers_are_identical(desktop: Desktop, code: str) -> None:
    assert _warm(desktop, code) == _cold(desktop, code)


def test_actions_run_in_the_zygote_and_survive_a_crash(desktop: Desktop) -> None:
    first = _warm(desktop, PREFIX + WHO)
    assert first["output"] == "kubecua_desktop.zygote\n"
    crash = _warm(desktop, PREFIX + "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert crash["returncode"] == -signal.SIGSEGV
    code = PREFIX + "import os; print(os.getppid()); pyautogui.moveTo(640, 360)"
    parents = {_warm(desktop, code)["output"] for _ in range(2)}
    assert len(parents) == 1  # the same zygote served both, after the crash
    assert run(desktop, ["true"])["returncode"] == 0  # and the server is fine


@pytest.fixture
def warm(desktop: Desktop, monkeypatch: pytest.MonkeyPatch) -> Iterator[WarmPython]:
    """A zygote of our own on the test desktop, to use short timeouts and kill it."""
    for name in ("DISPLAY", "XAUTHORITY", "PATH"):
        monkeypatch.setenv(name, desktop.info.env[name])
    executor = WarmPython()
    yield executor
    executor.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]


def test_timeout_kills_the_whole_process_group(warm: WarmPython, tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    code = (
        "import pyautogui, subprocess, time\n"
        f"p = subprocess.Popen(['sleep', '300']); open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True); time.sleep(300)"
    )
    result = warm.run(code, [], timeout=1.5)
    assert result is not None
    assert (result.timed_out, result.returncode, result.output) == (True, -9, "started\n")
    sleeper = int(pidfile.read_text())
    wait_for(lambda: not _alive(sleeper), 10, "the action's background sleep to be killed")
    after = warm.run("import pyautogui; print(6 * 7)", [], timeout=30)
    assert after is not None
    assert (after.output, after.returncode) == ("42\n", 0)


def test_a_dead_zygote_is_restarted(warm: WarmPython) -> None:
    assert warm.start()
    first = warm.pid
    assert first is not None
    # An action that kills its own zygote gets a clear error, not a hang.
    died = warm.run("import os, signal, time; os.kill(os.getppid(), 9); time.sleep(30)", [], 30)
    assert died is not None
    assert died.returncode == -9
    assert "warm python executor died" in died.error
    again = warm.run("import pyautogui, os; print(os.getppid())", [], timeout=30)
    assert again is not None
    assert again.returncode == 0
    assert int(again.output) == warm.pid
    assert warm.pid != first


def test_a_zygote_dead_before_its_exit_is_reported_is_restarted_not_skipped(
    warm: WarmPython, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race CI met: the zygote's socket already refuses connections while poll() does not yet
    report its exit. The action must go to a new zygote, not fall back to a cold run."""
    assert warm.start()
    proc = warm._proc
    assert proc is not None
    first = proc.pid
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{first}/stat").exists()
             or Path(f"/proc/{first}/stat").read_text().split()[2] == "Z")  # fmt: skip
    real_poll, calls = proc.poll, []

    def poll_late() -> int | None:  # its exit not yet seen by start()'s first look
        calls.append(1)
        return None if len(calls) == 1 else real_poll()

    monkeypatch.setattr(proc, "poll", poll_late)
    again = warm.run("import os; print(os.getppid())", [], timeout=30)
    assert again is not None
    assert again.returncode == 0
    assert int(again.output) == warm.pid
    assert warm.pid != first


def test_a_zygote_without_display_falls_back_to_cold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    executor = WarmPython()
    try:
        assert executor.run("import pyautogui", [], timeout=30) is None  # caller goes cold
    finally:
        executor.stop()


def _wall(warm: WarmPython, code: str) -> float:
    import time

    start = time.monotonic()
    result = warm.run(code, [], timeout=30)
    assert result is not None
    assert result.returncode == 0, result.error
    return time.monotonic() - start


def test_pauses_are_kept_between_calls_and_dropped_after_the_last(warm: WarmPython) -> None:
    warm.start()
    # One call with a 1 s PAUSE: a fresh python sleeps 1 s after it; the warm one returns.
    assert _wall(warm, "import pyautogui; pyautogui.PAUSE = 1.0; pyautogui.moveTo(5, 5)") < 0.5
    # Two calls: the second still waits out the first's pause.
    two = "import pyautogui; pyautogui.PAUSE = 0.6; pyautogui.moveTo(5, 5); pyautogui.moveTo(9, 9)"
    assert 0.6 <= _wall(warm, two) < 1.2
    # Time the action spends between the calls counts towards the pause.
    slept = "import pyautogui, time; pyautogui.PAUSE = 0.6; pyautogui.moveTo(5, 5); time.sleep(0.6)"
    assert 0.6 <= _wall(warm, slept + "; pyautogui.moveTo(9, 9)") < 1.0


def test_an_action_inherits_no_descriptors_of_the_zygote(warm: WarmPython) -> None:
    """Only stdio and its own X connection: a caller's socket held by an action would hide the
    zygote's death from that caller."""
    code = (
        "import os, pyautogui\n"
        "def kind(fd):\n"
        "    try: return os.readlink(f'/proc/self/fd/{fd}').split(':')[0]\n"
        "    except OSError: return None  # listdir's own directory, closed by now\n"
        "print([kind(f) for f in sorted(map(int, os.listdir('/proc/self/fd'))) if f > 2])"
    )
    for _ in range(2):  # the first spare (forked at start) and one forked after a hand-over
        result = warm.run(code, [], timeout=30)
        assert result is not None
        assert result.returncode == 0, result.error
        assert [k for k in eval(result.output) if k] == ["socket"]  # the X connection
