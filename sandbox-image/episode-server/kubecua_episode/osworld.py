"""desktop-env attached to an existing desktop: setup (SetupController) and evaluation (getters
and metrics) exactly as desktop-env runs them, without a VM provider. Every metric module is
available (kubecua_episode.evaluators); a task naming one that cannot run here is refused before
setup with a clear error."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# evaluators first: it registers desktop-env's metric package before desktop_env's controllers.
from kubecua_episode import chrome, evaluators

# isort: split
from desktop_env.controllers.python import PythonController
from desktop_env.controllers.setup import SetupController
from desktop_env.evaluators import getters

log = logging.getLogger("kubecua.episode")


class TaskError(ValueError):
    """The task config is malformed or names something this server does not provide."""


@dataclass
class AttachedEnv:
    """What desktop-env's getters read from a DesktopEnv (env.vm_ip, env.controller, ...)."""

    vm_ip: str
    server_port: int
    chromium_port: int
    vlc_port: int
    cache_dir: str
    controller: PythonController
    setup_controller: SetupController
    vm_platform: str = "Linux"
    current_use_proxy: bool = False
    action_history: list[Any] = field(default_factory=list)

    @classmethod
    def attach(cls, host: str, port: int, cdp: int, vlc: int, cache_dir: str, **kw: Any) -> Any:
        os.makedirs(cache_dir, exist_ok=True)
        setup = SetupController(host, port, cdp, vlc, cache_dir, **kw)
        return cls(host, port, cdp, vlc, cache_dir, PythonController(host, port), setup)


class SetupFailed(RuntimeError):
    """A setup step failed: the episode would not start from the task's state (setup_failed)."""


class _StepLog(logging.Handler):
    """What desktop-env's SetupController logs during one step. Several verbs (launch, execute,
    activate_window, close_window, change_wallpaper) only log an error when the desktop refuses
    them and go on; those errors are failures here. A command's non-zero exit is not a failure
    in desktop-env (`execute` ignores the return code; upstream tasks rely on that, e.g. a
    `pkill` of nothing), so it is logged and the setup goes on."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.errors: list[str] = []
        self.exits: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.errors.append(record.getMessage()[:1000])
            return
        args = record.args if isinstance(record.args, tuple) else ()
        if str(record.msg).startswith("Command executed successfully") and len(args) == 2:
            with contextlib.suppress(ValueError, TypeError):
                body = json.loads(str(args[1]))
                if isinstance(body, dict) and body.get("returncode") not in (0, None):
                    self.exits.append({"command": str(args[0])[:300],
                                       "returncode": body["returncode"],
                                       "stderr": str(body.get("error") or "")[-500:]})  # fmt: skip


@contextlib.contextmanager
def _capture_setup_log() -> Iterator[_StepLog]:
    logger, handler = logging.getLogger("desktopenv.setup"), _StepLog()
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False  # its INFO chatter stays out of our log; failures are logged below
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def run_setup(env: AttachedEnv, config: list[dict[str, Any]], phase: str = "setup") -> None:
    """desktop-env's SetupController.setup (each step runs its `_<type>_setup` method), minus
    setup()'s connectivity probe: that GETs /terminal, which walks the whole accessibility tree
    (19 s with LibreOffice open on the shared test machine); the episode server has already
    seen the desktop answer. A step fails (SetupFailed, logged) when desktop-env raises or logs
    an error for it; a command's non-zero exit is logged as a warning (see _StepLog)."""
    for i, step in enumerate(config):
        fn = getattr(env.setup_controller, f"_{step['type']}_setup")
        where = f"{phase} step {i + 1} ({step['type']})"
        with _capture_setup_log() as steplog:
            try:
                fn(**(step.get("parameters") or {}))
            except Exception as e:
                log.error("%s failed: %s", where, e, extra={"step": step})
                raise SetupFailed(f"{where} failed: {e}") from e
        for ex in steplog.exits:
            log.warning("%s: command exited %s (desktop-env goes on)", where, ex["returncode"],
                        extra=ex)  # fmt: skip
        if steplog.errors:
            log.error("%s failed: %s", where, steplog.errors[-1], extra={"step": step})
            raise SetupFailed(f"{where} failed: {steplog.errors[-1]}")


def _getter(kind: str) -> Callable[..., Any]:
    fn = getattr(getters, f"get_{kind}", None)
    if fn is None:
        raise TaskError(f"unknown getter type {kind!r}")
    return fn


def _metric(name: str) -> Callable[..., Any]:
    try:
        return evaluators.metric(name)
    except LookupError as e:
        raise TaskError(str(e)) from e


def validate_task(task: dict[str, Any]) -> None:
    """Reject what would only fail later: missing instruction, unknown setup verbs or metrics,
    wrong shapes (each was a 500 under fuzzing), and files on the episode server's own disk."""
    if not isinstance(task.get("instruction"), str):
        raise TaskError("task.instruction must be a string")
    config = task.get("config", []) or []
    if not isinstance(config, list):
        raise TaskError("task.config must be a list of setup steps")
    for i, step in enumerate(config):
        if not isinstance(step, dict) or not isinstance(step.get("type"), str):
            raise TaskError(f"task.config[{i}] must be an object with a string type")
        if not hasattr(SetupController, f"_{step.get('type')}_setup"):
            raise TaskError(f"unknown setup step type {step.get('type')!r}")
        if step["type"] == "upload_file":
            # desktop-env reads local_path on this server's disk: a task could copy any file the
            # server can read (its token, other files) into the desktop. Tasks ship their files
            # by URL (download) instead.
            raise TaskError(f"task.config[{i}]: upload_file reads the sandbox server's own disk; "
                            "use a download step with a URL")  # fmt: skip
    ev = task.get("evaluator")
    if not isinstance(ev, dict) or "func" not in ev:
        raise TaskError("task.evaluator.func is required")
    funcs = ev["func"] if isinstance(ev["func"], list) else [ev["func"]]
    if not funcs or not all(isinstance(f, str) for f in funcs):
        raise TaskError("task.evaluator.func must be a metric name or a list of them")
    for name in funcs:
        if name != "infeasible" and (why := evaluators.unavailable(name)):
            raise TaskError(why)
    _check_cache_names(ev, "task.evaluator")
    if "partial" in task:
        _validate_partial(task["partial"])


def _validate_partial(partial: Any) -> None:
    """task.partial: one desktop-env metric with a continuous value (the trainer's partial
    credit, spec.reward.partial), its getters shaped as an evaluator's."""
    if not isinstance(partial, dict) or not isinstance(partial.get("func"), str):
        raise TaskError("task.partial must be an object whose func names one metric")
    if partial["func"] == "infeasible" or (why := evaluators.unavailable(partial["func"])):
        raise TaskError(f"task.partial.func: {why or 'infeasible has no partial value'}")
    for key in ("result", "expected"):
        getter = partial.get(key)
        if getter is None and key == "expected":
            continue
        if not isinstance(getter, dict) or not isinstance(getter.get("type"), str):
            raise TaskError(f"task.partial.{key} must be a getter object with a string type")
        if getattr(getters, f"get_{getter['type']}", None) is None:
            raise TaskError(f"task.partial.{key}.type: unknown getter type {getter['type']!r}")
    if not isinstance(partial.get("options", {}), dict):
        raise TaskError("task.partial.options must be an object")
    _check_cache_names(partial, "task.partial")


def _check_cache_names(value: Any, where: str) -> None:
    """Getters write `dest` (and cache_file reads `path`) joined onto the cache dir: a name with
    '..' or an absolute one would reach outside it on the episode server's disk."""
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_cache_names(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        names = [("dest", value.get("dest"))]
        if value.get("type") == "cache_file":
            names.append(("path", value.get("path")))
        for key, name in names:
            for one in name if isinstance(name, list) else [name]:
                if one is None:
                    continue
                if not isinstance(one, str) or os.path.isabs(one) or ".." in one.split("/"):
                    raise TaskError(f"{where}.{key} must be a file name inside the cache dir")
        for k, v in value.items():
            _check_cache_names(v, f"{where}.{k}")


OSWORLD_HOME = "/home/user"


def map_home(value: Any, home: Any) -> Any:
    """OSWorld tasks hard-code /home/user; a local sandbox's home is elsewhere. Rewrites every
    string under the task (setup and evaluator) to the real home.

    >>> map_home({"path": "/home/user/a.txt", "n": 1}, "/tmp/sb/home")
    {'path': '/tmp/sb/home/a.txt', 'n': 1}
    """
    if home is None or str(home) == OSWORLD_HOME:
        return value
    if isinstance(value, str):
        return value.replace(OSWORLD_HOME, str(home))
    if isinstance(value, list):
        return [map_home(v, home) for v in value]
    if isinstance(value, dict):
        return {k: map_home(v, home) for k, v in value.items()}
    return value


OSWORLD_CDP_PORT, OSWORLD_DEBUG_PORT = 9222, 1337


def map_ports(value: Any, cdp_port: int, debug_port: int) -> Any:
    """OSWorld tasks start Chrome with --remote-debugging-port=1337 and publish it with socat on
    9222. Several local sandboxes share one host, so each gets its own CDP port and, per
    episode, a free debugging port. Only those exact patterns are rewritten.

    >>> map_ports(["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"], 19222, 41000)
    ['socat', 'tcp-listen:19222,fork', 'tcp:localhost:41000']
    """
    if cdp_port == OSWORLD_CDP_PORT:
        return value
    if isinstance(value, str):
        for old, new in (
            (f"tcp-listen:{OSWORLD_CDP_PORT}", f"tcp-listen:{cdp_port}"),
            (f"localhost:{OSWORLD_CDP_PORT}", f"localhost:{cdp_port}"),
            (f"127.0.0.1:{OSWORLD_CDP_PORT}", f"127.0.0.1:{cdp_port}"),
            (f"localhost:{OSWORLD_DEBUG_PORT}", f"localhost:{debug_port}"),
            (f"remote-debugging-port={OSWORLD_DEBUG_PORT}", f"remote-debugging-port={debug_port}"),
        ):
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [map_ports(v, cdp_port, debug_port) for v in value]
    if isinstance(value, dict):
        return {k: map_ports(v, cdp_port, debug_port) for k, v in value.items()}
    return value


def _as_list(x: Any, n: int) -> list[Any]:
    return list(x) if isinstance(x, list) else [x] * n


def evaluate(env: AttachedEnv, task: dict[str, Any], last_action: Any) -> tuple[float, dict]:
    """desktop-env's DesktopEnv.evaluate semantics: postconfig, infeasible, and/or of metrics.
    First, when the getters read Chrome's profile files, Chrome is closed so they are written."""
    ev = task["evaluator"]
    if chrome.needs_flush(ev):
        chrome.close_browser(f"http://{env.vm_ip}:{env.server_port}")
    run_setup(env, ev.get("postconfig") or [], "postconfig")
    if ev["func"] == "infeasible":
        return (1.0 if last_action == "FAIL" else 0.0), {"metric": "infeasible"}
    if last_action == "FAIL":
        return 0.0, {"metric": ev["func"], "reason": "agent answered FAIL"}
    funcs = ev["func"] if isinstance(ev["func"], list) else [ev["func"]]
    n, conj = len(funcs), ev.get("conj", "and")
    results, exps = _as_list(ev.get("result"), n), _as_list(ev.get("expected"), n)
    options = _as_list(ev.get("options", {}), n)
    scores: list[float] = []
    details: list[dict[str, Any]] = []
    for i, name in enumerate(funcs):
        try:
            got = _getter(results[i]["type"])(env, results[i])
        except FileNotFoundError:
            got = None
        args = [got]
        if exps[i]:
            args.append(_getter(exps[i]["type"])(env, exps[i]))
        score = float(_metric(name)(*args, **(options[i] or {})))
        scores.append(score)
        details.append({"metric": name, "score": score, "result": _short(got)})
        if (conj == "and" and score == 0.0) or (conj == "or" and score == 1.0):
            break
    if conj == "and":  # any zero fails the task; otherwise the mean (fractional credit)
        final = 0.0 if scores[-1] == 0.0 else sum(scores) / len(scores)
    else:
        final = max(scores)
    return max(0.0, min(1.0, final)), {"metric": funcs, "conj": conj, "metrics": details}


def partial_score(env: AttachedEnv, task: dict[str, Any]) -> float | None:
    """The task's declared partial credit (task.partial, validated by validate_task): its
    getters and metric as the evaluator runs them, clamped to [0, 1]; None without one. Runs
    after evaluate (its postconfig has run). Raises what the getter or metric raises: the
    caller reports the failure beside the score, which it never changes."""
    partial = task.get("partial")
    if partial is None:
        return None
    try:
        got = _getter(partial["result"]["type"])(env, partial["result"])
    except FileNotFoundError:
        got = None
    args = [got]
    if partial.get("expected"):
        args.append(_getter(partial["expected"]["type"])(env, partial["expected"]))
    value = float(_metric(partial["func"])(*args, **(partial.get("options") or {})))
    if value != value:  # NaN: no value at all, a failure rather than a score
        raise ValueError(f"metric {partial['func']!r} returned NaN")
    return max(0.0, min(1.0, value))


def _short(value: Any, limit: int = 500) -> Any:
    text = repr(value)
    return value if len(text) <= limit and isinstance(value, str | int | float) else text[:limit]
