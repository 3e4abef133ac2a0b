"""The recorder: play tasks' reference solutions on real desktops and write demonstrations.

    python -m kubecua_trainer record --tasks ../sandbox-image/tasks \\
        --ids infeasible-cloud-upload gedit-greeting --local 2 --out demos/ [--repeats 2]
    python -m kubecua_trainer record --tasks tasks/ --urls http://10.0.0.5:8000 \\
        --token-file token --out demos/

Each task of --tasks may have beside it `<id>.solutions.json` whose key "reference" is a list of
episode-API StepRequests that solve it. The recorder plays it as the agent would play it: each
step as the agent's reply (agent_step leaves out the scripts' waits, agent.reply_text wraps it),
sent through the episode API with the same leases and token rules as the trainer, a real
screenshot before every step, and the score of the task's real evaluator at the end. It writes
<out>/demonstrations.jsonl (trajectories.py format, screenshots at full size under
<out>/screens/), which spec.warmup.demonstrations takes as it is; the replies' coordinates are
the desktop's own, and the warm-up rescales them to the run's image size.
A task without a reference, or whose reference is not in the agent's action space (e.g. it
assigns variables), is skipped with a message. Every episode is written, failed or not: the
warm-up keeps the successes (warmup.successesOnly). Leaves out: recording a human's actions.
"""

from __future__ import annotations

import ast
import asyncio
import json
import tempfile
import time
import uuid
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubecua_sandbox_client import (
    InvalidRequest,
    ObservationOptions,
    SandboxBusy,
    SandboxClient,
    SandboxUnavailable,
)
from kubecua_trainer.config import ConfigError, LocalSandboxes, SandboxesConfig, TasksConfig
from kubecua_trainer.rollout.agent import ParseError, parse_action, reply_text
from kubecua_trainer.rollout.records import EpisodeResult, Turn
from kubecua_trainer.rollout.screens import Screen, decode_screen
from kubecua_trainer.rollout.tasks import load_tasks
from kubecua_trainer.sources import SandboxLeases, build_source
from kubecua_trainer.trajectories import write_trajectories

OUT_FILE = "demonstrations.jsonl"


@dataclass(frozen=True)
class Reference:
    """A task and its reference solution as the agent's replies, one per turn."""

    task: dict[str, Any]
    replies: list[str]

    @property
    def task_id(self) -> str:
        return str(self.task["id"])


def agent_step(wire: str) -> str:
    r"""A solution step as the agent sends it: without the waits a reference script adds for the
    desktop (imports, `time.sleep`, loops that poll and act on nothing), since an agent waits by
    taking another turn. Anything else stays, and parse_action refuses what is not an action.

    >>> agent_step("import time\npyautogui.press('f5')\nwhile busy():\n    time.sleep(1)")
    "pyautogui.press('f5')"
    """
    try:
        tree = ast.parse(wire)
    except SyntaxError:
        return wire
    kept = [stmt for stmt in tree.body if not _is_wait(stmt)]
    return "\n".join(ast.unparse(stmt) for stmt in kept) if kept != tree.body else wire


def _is_wait(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return True
    if isinstance(stmt, ast.For | ast.While):  # a poll, unless it acts on the desktop
        calls = [ast.unparse(n.func) for n in ast.walk(stmt) if isinstance(n, ast.Call)]
        return not any(c.startswith("pyautogui.") for c in calls)
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(call, ast.Call) and ast.unparse(call.func) == "time.sleep"


def load_references(
    tasks: Path, ids: list[str] | None, solution: str = "reference"
) -> tuple[list[Reference], list[str]]:
    """(the tasks' usable references, a message per skipped task). solution: the solutions
    file's entry to play (`reference`, or e.g. a family's biased `demonstration`)."""
    root = tasks if tasks.is_dir() else tasks.parent
    solutions = {p.name.removesuffix(".solutions.json"): p for p in root.rglob("*.solutions.json")}
    refs, skipped = [], []
    for task in load_tasks(TasksConfig(path=str(tasks), ids=ids)):
        tid = str(task["id"])
        if tid not in solutions:
            skipped.append(f"{tid}: no {tid}.solutions.json beside the task; skipped")
            continue
        steps = json.loads(solutions[tid].read_text()).get(solution) or []
        try:
            replies = [_reply(step) for step in steps]
        except ParseError as err:
            skipped.append(f"{tid}: its reference is not in the agent's action space ({err})")
            continue
        if not replies:
            skipped.append(f"{tid}: {solutions[tid].name} has no {solution} steps; skipped")
            continue
        refs.append(Reference(task, replies))
    return refs, skipped


def _reply(step: dict[str, Any]) -> str:
    action = step.get("action")
    if step.get("action_space", "pyautogui") != "pyautogui" or not isinstance(action, str):
        raise ParseError(f"a {step.get('action_space')} step; the agent speaks pyautogui.")
    reply = reply_text(agent_step(action))
    parse_action(reply)
    return reply


async def record_references(
    refs: list[Reference],
    leases: SandboxLeases,
    token: str | None,
    out: Path,
    repeats: int = 1,
    episode_seconds: float = 300.0,
) -> list[EpisodeResult]:
    """Play every reference `repeats` times on the leased sandboxes (as many at once as there
    are sandboxes) and append each episode to out/demonstrations.jsonl as soon as it ends."""
    jsonl = out / OUT_FILE

    async def one(ref: Reference, r: int) -> EpisodeResult:
        ep = await record_episode(
            leases, token, ref, f"rec-{ref.task_id}-r{r:02d}", episode_seconds
        )
        write_trajectories(jsonl, [ep], recorded_by="kubecua record")
        return ep

    return list(await asyncio.gather(*(one(ref, r) for ref in refs for r in range(repeats))))


async def record_episode(
    leases: SandboxLeases, token: str | None, ref: Reference, key: str, episode_seconds: float
) -> EpisodeResult:
    """One episode of the reference on one leased sandbox, always released; infrastructure
    failures end in an excluded outcome, as in the rollout."""
    result = EpisodeResult(task_id=ref.task_id, group_id=ref.task_id, key=key)
    started = time.monotonic()
    async with leases.lease() as lease, SandboxClient(lease.url, token, episode_seconds) as client:
        result.sandbox = lease.url
        episode_id = f"rec-{uuid.uuid4().hex[:16]}"
        try:
            async with asyncio.timeout(episode_seconds):
                obs = ObservationOptions(format="png", max_pixels=None)
                begun = await client.start_episode(ref.task, observation=obs, episode_id=episode_id)
                result.instruction = begun.instruction
                await _play(client, episode_id, begun.observation.screenshot, ref, result)
        except TimeoutError:
            result.fail("timeout", f"over {episode_seconds:.0f}s")
        except (SandboxUnavailable, SandboxBusy) as err:
            lease.bad()
            result.fail("setup_failed" if not result.turns else "sandbox_lost", str(err))
        except InvalidRequest as err:  # the server refused the task or a reference step
            result.fail("invalid_task", str(err))
        finally:
            with suppress(Exception):
                await client.release(episode_id)
    result.seconds = time.monotonic() - started
    return result


async def _play(
    client: SandboxClient, episode_id: str, first: str, ref: Reference, result: EpisodeResult
) -> None:
    # The demonstration's model image is the whole screen: its replies keep the desktop's
    # coordinates (image_size = screen_size), and the warm-up rescales them.
    screen = await asyncio.to_thread(decode_screen, first, _as_is)
    for reply in ref.replies:
        action = parse_action(reply)
        turn = Turn(screen.image, reply, action.wire)
        turn.screen = screen.encoded
        result.turns.append(turn)
        t0 = time.monotonic()
        res = await client.step(episode_id, action.wire)
        turn.env_seconds = time.monotonic() - t0
        screen = await asyncio.to_thread(decode_screen, res.observation.screenshot, _as_is)
        if action.kind in ("DONE", "FAIL") or res.done:
            break
    _final(result, screen)
    result.score((await client.evaluate(episode_id)).score)


def _final(result: EpisodeResult, screen: Screen) -> None:
    result.final_screenshot, result.final_screen = screen.image, screen.encoded
    result.screen_size = (screen.screen_width, screen.screen_height)


def _as_is(image: Any) -> Any:
    return image


def summary_lines(episodes: list[EpisodeResult], skipped: list[str], out: Path) -> list[str]:
    outcomes = Counter(e.outcome for e in episodes)
    lines = [f"skipped {m}" for m in skipped]
    for ep in sorted(episodes, key=lambda e: e.key):
        why = f" ({ep.detail})" if ep.detail else ""
        lines.append(f"{ep.key}: {ep.outcome} reward {ep.reward} in {len(ep.turns)} turns{why}")
    lines.append(f"{len(episodes)} episodes {dict(outcomes)} -> {out / OUT_FILE}")
    return lines


def check_out(out: Path) -> None:
    if (out / OUT_FILE).exists():
        raise ConfigError(f"--out: {out / OUT_FILE} exists; record into a new folder")


async def record_command(
    tasks: Path,
    ids: list[str] | None,
    out: Path,
    local: int | None = None,
    urls: list[str] | None = None,
    token_file: Path | None = None,
    repeats: int = 1,
    episode_seconds: float = 300.0,
    solution: str = "reference",
) -> list[str]:
    """`python -m kubecua_trainer record`: start (local) or reach (urls) the sandboxes, record
    every usable reference (or `solution` entry), stop what was started; returns the lines to
    print."""
    check_out(out)
    refs, skipped = load_references(tasks, ids, solution)
    if not refs:
        raise ConfigError(f"--tasks {tasks}: no task with a usable reference: {skipped}")
    sandboxes = (
        SandboxesConfig(local=LocalSandboxes(replicas=local))
        if local
        else SandboxesConfig(urls=urls)
    )
    with tempfile.TemporaryDirectory(prefix="kubecua-record-") as work:
        source = build_source(sandboxes, work, None)  # local desktops live in `work`
        if token_file is not None:
            source.token = token_file.read_text().strip()
        leases = SandboxLeases()
        try:
            await source.start(leases)
            await leases.wait_ready(1, episode_seconds)
            episodes = await record_references(
                refs, leases, source.token, out, repeats, episode_seconds
            )
        finally:
            await source.stop()
    return summary_lines(episodes, skipped, out)
