"""The episode API under fuzzing, on the session's real local sandbox.

- schemathesis sends requests generated from the server's /openapi.json (valid and invalid),
  each without the token (401 only) and with it: no 5xx other than the documented 502/503/504,
  every request answers within its timeout, a canary file outside the sandbox is never read or
  written, and /readyz is 200 again once the fuzz's episodes are released.
- Properties of the action parser (kubecua_episode.actions): a malformed pyautogui or
  computer_13 action is refused naming the field, and an accepted computer_13 action turns into
  pyautogui calls with literal arguments only; on the server, a malformed action is a 422 and
  never runs (its code would create a canary file)."""

from __future__ import annotations

import ast
import math
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from conftest import LocalSandbox
from desktop_env.controllers.python import PythonController
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubecua_episode import actions, osworld

# Bounded for the 2-core machine (about 35 s in all); raise it for a longer hunt.
MAX_EXAMPLES = int(os.environ.get("KUBECUA_FUZZ_EXAMPLES", "200"))
REQUEST_TIMEOUT_S = 150.0  # above the server's own setup/step limits, which answer 504
DOCUMENTED_5XX = {502, 503, 504}  # docs/episode-api.md: SandboxNotReady, SetupFailed, ...
SECRET = "canary-" + secrets.token_hex(8)
TASK: dict[str, Any] = {
    "id": "fuzz",
    "instruction": "nothing",
    "config": [],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "echo hi", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "hi\n"}},
    },
}
FAST = {"observation": {"format": "jpeg", "max_pixels": 57600}, "settle": {"max_seconds": 0.5}}
CASES = {"schemathesis": 0, "actions on the server": 0}


@pytest.fixture(scope="module")
def canary() -> Iterator[Path]:
    """A secret outside the sandbox's home and /tmp (what a task may touch): never read or
    written through the API. Checked after the whole module."""
    d = Path("/var/tmp") / f"kubecua-fuzz-{secrets.token_hex(4)}"
    d.mkdir()
    secret = d / "secret.txt"
    secret.write_text(SECRET)
    before = sorted(os.listdir(d)), secret.stat().st_mtime_ns
    yield secret
    assert (sorted(os.listdir(d)), secret.stat().st_mtime_ns) == before
    assert secret.read_text() == SECRET
    secret.unlink()
    d.rmdir()


@pytest.fixture(scope="module")
def episode_schema(sandbox: LocalSandbox) -> schemathesis.BaseSchema:
    auth = {"Authorization": f"Bearer {sandbox.token}"}
    raw = httpx.get(f"{sandbox.url}/openapi.json", headers=auth, timeout=30).json()
    return schemathesis.openapi.from_dict(raw)


schema = schemathesis.pytest.from_fixture("episode_schema")


def _check(response: Any, what: str) -> None:
    code = response.status_code
    assert code < 500 or code in DOCUMENTED_5XX, f"{what}: {code} {response.text[:500]}"
    assert SECRET.encode() not in response.content, f"{what} returned the canary's content"


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same cases every run: a failure here is reproducible
)
def test_fuzz_episode_api(case: schemathesis.Case, sandbox: LocalSandbox, canary: Path) -> None:
    what = f"{case.method} {case.formatted_path}"
    open_path = case.formatted_path in ("/healthz", "/readyz", "/metrics")
    anonymous = case.call(base_url=sandbox.url, timeout=REQUEST_TIMEOUT_S)
    if not open_path:
        assert anonymous.status_code == 401, f"{what} without the token: {anonymous.text[:300]}"
    auth = {"Authorization": f"Bearer {sandbox.token}"}
    _check(case.call(base_url=sandbox.url, headers=auth, timeout=REQUEST_TIMEOUT_S), what)
    CASES["schemathesis"] += 1


def _release_and_wait_ready(sandbox: LocalSandbox) -> None:
    auth = {"Authorization": f"Bearer {sandbox.token}"}
    with httpx.Client(base_url=sandbox.url, headers=auth, timeout=120) as c:
        eid = c.get("/status").json()["episode_id"]
        if eid is not None:
            assert c.delete(f"/episodes/{eid}").status_code == 200
        deadline = time.monotonic() + 120
        while (ready := c.get("/readyz")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ready.status_code == 200, ready.text


def test_ready_after_fuzzing(sandbox: LocalSandbox) -> None:
    """Runs after the fuzz (file order): an episode the fuzz left is released (reset, the
    documented way back), and /readyz answers 200 again."""
    _release_and_wait_ready(sandbox)
    print(f"episode server fuzz: {CASES}")


def test_upload_file_task_cannot_read_the_servers_disk(sandbox: LocalSandbox, canary: Path) -> None:
    """Found by reading what the fuzz could reach: desktop-env's upload_file step reads
    local_path on the episode server's disk, so a task could copy the canary into the desktop."""
    upload = {
        "type": "upload_file",
        "parameters": {"files": [{"local_path": str(canary), "path": "/tmp/stolen"}]},
    }
    auth = {"Authorization": f"Bearer {sandbox.token}"}
    resp = httpx.post(
        f"{sandbox.url}/episodes",
        headers=auth,
        timeout=120,
        json={"task": {**TASK, "config": [upload]}, **FAST},
    )
    assert resp.status_code == 422, resp.text
    assert resp.json()["reason"] == "InvalidTask"
    assert "upload_file" in resp.json()["detail"]
    assert not Path("/tmp/stolen").exists()


# -- the action parser -------------------------------------------------------------------------

VALID: dict[str, dict[str, Any]] = {
    "MOVE_TO": {"x": 5, "y": 6.5},
    "CLICK": {"button": "left", "x": 3, "y": 4, "num_clicks": 2},
    "MOUSE_DOWN": {"button": "right"},
    "MOUSE_UP": {},
    "RIGHT_CLICK": {"x": 1, "y": 1},
    "DOUBLE_CLICK": {},
    "DRAG_TO": {"x": 10, "y": 10},
    "SCROLL": {"dx": 0, "dy": -3},
    "TYPING": {"text": 'it\'s \\ "quoted"\n'},
    "PRESS": {"key": "enter"},
    "KEY_DOWN": {"key": "shift"},
    "KEY_UP": {"key": "shift"},
    "HOTKEY": {"keys": ["ctrl", "c"]},
}
NOT_A_NUMBER = st.one_of(st.text(), st.booleans(), st.none(), st.lists(st.integers(), max_size=2))


@st.composite
def malformed(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid computer_13 action with one fault, and the field the refusal must name."""
    kind = draw(st.sampled_from(sorted(VALID)))
    action: dict[str, Any] = {"action_type": kind, **VALID[kind]}
    fault = draw(
        st.sampled_from(["unknown", "wrong_type", "missing"] if VALID[kind] else ["unknown"])
    )
    if fault == "unknown":
        name = draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8))
        if name in actions.PARAMETERS[kind] or name in ("action_type", "parameters"):
            name += "_bogus"
        action[name] = draw(st.integers())
        return action, f"action.{name}"
    if fault == "missing":
        if kind in ("CLICK", "RIGHT_CLICK"):  # x and y are optional, but only as a pair
            del action["y"]
            return action, "action.y"
        if kind == "SCROLL":  # dx or dy, at least one
            del action["dx"], action["dy"]
            return action, "action.dx"
        if kind in ("MOUSE_DOWN",):  # button is optional
            action["button"] = 1
            return action, "action.button"
        name = draw(st.sampled_from(sorted(VALID[kind])))
        del action[name]
        return action, f"action.{name}"
    name = draw(st.sampled_from(sorted(VALID[kind])))
    kind_of = actions.PARAMETERS[kind][name]["type"]
    bad: Any
    if kind_of is float:
        bad = draw(st.one_of(NOT_A_NUMBER, st.sampled_from([-1, math.inf, -math.inf, math.nan])))
    elif kind_of is int:
        bad = draw(st.one_of(NOT_A_NUMBER, st.sampled_from([2.5, math.inf])))
    elif kind_of is str:
        bad = draw(st.one_of(st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2)))
    else:
        bad = draw(st.one_of(st.text(), st.just([]), st.just([1]), st.just(["no-such-key"])))
    action[name] = bad
    return action, f"action.{name}"


@given(malformed())
@settings(max_examples=300, deadline=None)
def test_malformed_computer_13_actions_name_the_field(case: tuple[dict[str, Any], str]) -> None:
    action, field = case
    with pytest.raises(actions.InvalidAction) as refused:
        actions.check(action, "computer_13")
    assert field in str(refused.value), (action, str(refused.value))


class Recorder(PythonController):
    """desktop-env's real controller, with what it would send to the desktop recorded."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1", 9)
        self.sent: list[str] = []

    def execute_python_command(self, command: str) -> None:
        self.sent.append(command)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@given(
    kind=st.sampled_from(sorted(VALID)),
    params=st.dictionaries(
        st.sampled_from(
            ["x", "y", "button", "num_clicks", "dx", "dy", "text", "key", "keys", "other"]
        ),
        JSON,
        max_size=4,
    ),
)
@settings(max_examples=500, deadline=None)
def test_accepted_computer_13_actions_run_only_literal_pyautogui_calls(
    kind: str, params: dict[str, Any]
) -> None:
    """Whatever passes check() desktop-env executes without raising, as pyautogui calls whose
    arguments are literals (no name but pyautogui's own): no code smuggled in a parameter."""
    action = {"action_type": kind, **params}
    try:
        actions.check(action, "computer_13")
    except actions.InvalidAction:
        return
    controller = Recorder()
    controller.execute_action(action)
    for code in controller.sent:
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue  # a quote key ("'") makes upstream's code unparseable: it fails, runs nothing
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                assert node.id == "pyautogui", (action, code)


@given(st.text(max_size=200))
@settings(max_examples=500, deadline=None)
def test_pyautogui_code_is_compiled_or_refused(code: str) -> None:
    """Any string: accepted (it compiles) or InvalidAction naming the action, never another
    exception (which would be a 500)."""
    try:
        compile(code, "<action>", "exec")
    except (SyntaxError, ValueError):
        with pytest.raises(actions.InvalidAction, match="action"):
            actions.check(code, "pyautogui")
    else:
        actions.check(code, "pyautogui")


@pytest.mark.parametrize("action", [{"x": 1}, ["pyautogui.click()"], 5, None])
def test_pyautogui_space_refuses_non_strings(action: Any) -> None:
    with pytest.raises(actions.InvalidAction, match="action"):
        actions.check(action, "pyautogui")


# -- on the server: refused, and never run ------------------------------------------------------


@pytest.fixture(scope="module")
def episode(sandbox: LocalSandbox) -> Iterator[tuple[httpx.Client, str]]:
    _release_and_wait_ready(sandbox)
    auth = {"Authorization": f"Bearer {sandbox.token}"}
    with httpx.Client(base_url=sandbox.url, headers=auth, timeout=120) as c:
        resp = c.post("/episodes", json={"task": TASK, **FAST})
        assert resp.status_code == 201, resp.text
        eid = resp.json()["episode_id"]
        yield c, eid
        c.delete(f"/episodes/{eid}")


BROKEN_TAILS = ["(", "def", "x = = 1", "\x00", "pyautogui.click((", "  indent", "'''"]


@given(
    tail=st.sampled_from(BROKEN_TAILS),
    c13=st.sampled_from(["code_in_x", "missing_y", "key_as_code", "unknown"]),
)
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_malformed_actions_on_the_server_are_422_and_never_run(
    episode: tuple[httpx.Client, str], sandbox: LocalSandbox, tail: str, c13: str
) -> None:
    client, eid = episode
    marker = sandbox.home / f"ran-{secrets.token_hex(4)}"
    touch = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    code = f"{touch}\n{tail}"
    computer_13 = {
        "code_in_x": ({"action_type": "MOVE_TO", "x": f"{touch} or 5", "y": 5}, "action.x"),
        "missing_y": ({"action_type": "CLICK", "x": 5}, "action.y"),
        "key_as_code": ({"action_type": "PRESS", "key": f"a'); {touch}; ('"}, "action.key"),
        "unknown": ({"action_type": "TYPING", "text": "a", "then": touch}, "action.then"),
    }[c13]
    for body, field in (
        ({"action": code, "action_space": "pyautogui"}, "action"),
        ({"action": computer_13[0], "action_space": "computer_13"}, computer_13[1]),
    ):
        resp = client.post(f"/episodes/{eid}/step", json=body)
        assert resp.status_code == 422, (body, resp.text)
        assert resp.json()["reason"] == "InvalidAction"
        assert field in resp.json()["detail"], (body, resp.text)
        CASES["actions on the server"] += 1
    ok = client.post(f"/episodes/{eid}/step", json={"action": "WAIT"})  # also keeps it from idling
    assert ok.status_code == 200, ok.text
    assert not marker.exists(), f"a refused action ran: {body}"


def test_a_valid_action_still_runs(
    episode: tuple[httpx.Client, str], sandbox: LocalSandbox
) -> None:
    """The other side of the property: the same canary, well-formed, does run."""
    client, eid = episode
    marker = sandbox.home / f"ran-{secrets.token_hex(4)}"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    resp = client.post(f"/episodes/{eid}/step", json={"action": code})
    assert resp.status_code == 200, resp.text
    assert marker.exists()
    print(f"episode server fuzz: {CASES}")


# -- faults the fuzzing found, each a 500 or a path escape before its fix -----------------------


@pytest.mark.parametrize(
    ("task", "field"),
    [
        ({**TASK, "config": {"type": "execute"}}, "task.config"),
        ({**TASK, "config": ["execute"]}, "task.config[0]"),
        ({**TASK, "config": [{"type": 5}]}, "task.config[0]"),
        ({**TASK, "evaluator": {"func": [{"a": 1}]}}, "task.evaluator.func"),
        ({**TASK, "evaluator": {"func": 7}}, "task.evaluator.func"),
        (
            {
                **TASK,
                "config": [
                    {
                        "type": "upload_file",
                        "parameters": {
                            "files": [{"local_path": "/var/tmp/secret.txt", "path": "/tmp/x"}]
                        },
                    }
                ],
            },
            "upload_file",
        ),
        (
            {
                **TASK,
                "evaluator": {
                    **TASK["evaluator"],
                    "result": {"type": "vm_file", "path": "/tmp/a", "dest": "../../var/tmp/x"},
                },
            },
            "task.evaluator.result.dest",
        ),
        (
            {
                **TASK,
                "evaluator": {
                    **TASK["evaluator"],
                    "expected": {"type": "cache_file", "path": "/var/tmp/secret.txt"},
                },
            },
            "task.evaluator.expected.path",
        ),
    ],
)
def test_bad_tasks_are_refused_naming_the_field(task: dict[str, Any], field: str) -> None:
    with pytest.raises(osworld.TaskError) as refused:
        osworld.validate_task(task)
    assert field in str(refused.value)


def test_faults_found_by_fuzzing_are_4xx_on_the_server(episode: tuple[httpx.Client, str]) -> None:
    client, eid = episode
    for body in (
        {"action": {"action_type": {"a": 1}}, "action_space": "computer_13"},  # TypeError
        {"action": {"action_type": ["MOVE_TO"]}, "action_space": "computer_13"},  # TypeError
        {"action": {"action_type": "CLICK", "x": 5}, "action_space": "computer_13"},  # Exception
        {"action": {"action_type": "PRESS", "key": 5}, "action_space": "computer_13"},
    ):
        resp = client.post(f"/episodes/{eid}/step", json=body)
        assert resp.status_code == 422, (body, resp.text)
        assert resp.json()["reason"] == "InvalidAction"
