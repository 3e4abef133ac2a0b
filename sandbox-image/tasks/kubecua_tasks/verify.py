"""Verification: every task of a folder played on real desktops, each of its solutions (the
reference, a no-op, and the wrong one where the task has one) `repeats` times, in parallel
across the desktops, and judged into a TaskRecord of the verified manifest
(kubecua_api/taskmanifest.py).

Each desktop has one worker that takes the next episode from a shared queue, so a slow task
never holds up the others and every desktop stays busy until the queue is empty; repeats are
queued round by round, so a task's repeats usually run on different desktops. The desktops may
change while it runs (a pool followed by pool.PoolWatch): a new one gets a worker at once, one
that leaves the pool is not leased again once its episode in flight ends, and while a pool has
none to lease verification waits for one (WAIT_FOR_SANDBOXES), where a fixed list fails.

A desktop that answers 409 (another client holds it: a pool shared with a trainer) or 503 right
after a reset hands the episode back to the queue and waits a moment, as the trainer's leases do
(trainer/kubecua_trainer/sources/leases.py). A desktop whose reset is not clean is retired:
the episode server has quarantined it; one that stops answering is retired too, and its
episode goes back to the queue for another desktop.

The verdicts, first match wins: setup-fails (an episode's setup failed), flaky (one solution
passed on some repeats and not on others), reference-fails, noop-passes, wrong-passes, else
verified. Passing is the evaluator's score at the success bar (kubecua_sandbox_client.success)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubecua_api.taskmanifest import (
    EpisodeRecord,
    Solution,
    TaskRecord,
    Verdict,
    VerifiedManifest,
    content_hash,
    task_digest,
)
from kubecua_sandbox_client import (
    InvalidRequest,
    ObservationOptions,
    SandboxBusy,
    SandboxClient,
    SandboxError,
    SandboxUnavailable,
    SettleOptions,
    StartFingerprint,
    is_success,
    starts_agree,
)
from kubecua_tasks.pool import Sandboxes

# Small JPEG observations: verification reads scores; the fingerprint is taken by the server
# at full size. Settling as for a GUI agent, so the first screen is the app drawn, not loading.
OBS = ObservationOptions(format="jpeg", max_pixels=320 * 180)
SETTLE = SettleOptions(min_seconds=0.2, max_seconds=4.0, stable_frames=2)
BUSY_WAIT = 2.0
MAX_REQUEUES = 150  # about five minutes of a busy pool per episode, then it is recorded failed
WAIT_FOR_SANDBOXES = 300.0  # a pool with episodes left and no sandbox to lease: then it fails
Connect = Callable[[str, str | None], SandboxClient]


class DesktopLost(Exception):
    """The desktop stopped answering (no HTTP answer at all): its episode goes back to the queue
    for another desktop and this one is retired, so a lost sandbox never becomes a verdict."""


@dataclass
class Task:
    path: str  # relative to the folder
    task: dict[str, Any]
    solutions: dict[str, list[dict[str, Any]]]

    @property
    def id(self) -> str:
        return str(self.task["id"])

    def plays(self) -> list[Solution]:
        wrong: list[Solution] = ["wrong"] if self.solutions.get("wrong") else []
        return ["reference", "noop", *wrong]


@dataclass
class Job:
    task: Task
    solution: Solution
    attempt: int
    requeued: int = 0


def load_folder(folder: Path) -> tuple[list[Task], str]:
    """The tasks under `folder` (recursively: <id>.json with a reference in <id>.solutions.json)
    and the content hash of their files."""
    tasks, digests = [], {}
    for path in sorted(folder.rglob("*.json")):
        if path.name.endswith(".solutions.json") or path.name == "family.json":
            continue
        task = json.loads(path.read_text())
        if not isinstance(task, dict) or not {"id", "instruction", "evaluator"} <= task.keys():
            continue
        sols_path = path.with_name(path.stem + ".solutions.json")
        sols = json.loads(sols_path.read_text()) if sols_path.is_file() else {}
        if not sols.get("reference"):
            raise ValueError(f"{path}: no reference solution in {sols_path.name}")
        rel = str(path.relative_to(folder))
        tasks.append(Task(rel, task, sols))
        digests[rel] = task_digest(task)
        digests[str(sols_path.relative_to(folder))] = task_digest(sols)
    if not tasks:
        raise ValueError(f"{folder}: no tasks (OSWorld task JSON with id, instruction, evaluator)")
    return tasks, content_hash(digests)


async def _play(sb: SandboxClient, url: str, job: Job, a11y: bool) -> EpisodeRecord | None:
    """One episode; None when the desktop was busy (the job goes back to the queue)."""
    actions = [] if job.solution == "noop" else job.task.solutions[job.solution]
    rec: dict[str, Any] = {"solution": job.solution, "attempt": job.attempt, "sandbox": url}
    t0 = time.monotonic()
    eid = f"verify-{uuid.uuid4().hex[:16]}"
    obs = OBS.model_copy(update={"a11y_tree": a11y})
    try:
        started = await sb.start_episode(job.task.task, obs, SETTLE, episode_id=eid)
    except SandboxBusy:
        return None
    except SandboxUnavailable as err:
        if err.reason == "SandboxNotReady":
            return None
        if err.status is None:
            raise DesktopLost(str(err)) from err
        return EpisodeRecord(**rec, score=None, seconds=time.monotonic() - t0,
                             error=f"setup: {err}", setup_failed=True)  # fmt: skip
    except InvalidRequest as err:
        return EpisodeRecord(**rec, score=None, seconds=time.monotonic() - t0,
                             error=f"invalid task: {err}", setup_failed=True)  # fmt: skip
    fp: StartFingerprint | None = started.start_fingerprint
    if fp is not None:
        rec.update(screen=fp.screen, a11y=fp.a11y)
    score: float | None = None
    error = None
    try:
        for action in actions:
            await sb.step(eid, action["action"], action.get("action_space", "pyautogui"))
        score = (await sb.evaluate(eid)).score
    except SandboxUnavailable as err:
        if err.status is None:
            raise DesktopLost(str(err)) from err
        error = f"{type(err).__name__}: {err}"
    except SandboxError as err:
        error = f"{type(err).__name__}: {err}"
    try:
        released = await sb.release(eid)
    except SandboxUnavailable as err:
        if err.status is None:
            raise DesktopLost(str(err)) from err
        raise
    if not released.clean:
        error = (error or "") + " reset not clean: desktop retired"
    return EpisodeRecord(**rec, score=score, seconds=time.monotonic() - t0, error=error)


def judge(task: Task, episodes: list[EpisodeRecord]) -> TaskRecord:
    scores: dict[Solution, list[float | None]] = {s: [] for s in task.plays()}
    for e in sorted(episodes, key=lambda e: (e.solution, e.attempt)):
        scores[e.solution].append(e.score)
    passed = {s: [v is not None and is_success(v) for v in vs] for s, vs in scores.items()}
    verdict: Verdict = "verified"
    if any(e.setup_failed for e in episodes):
        verdict = "setup-fails"
    elif any(len(set(p)) > 1 for p in passed.values()):
        verdict = "flaky"
    elif not all(passed["reference"]):
        verdict = "reference-fails"
    elif any(passed["noop"]):
        verdict = "noop-passes"
    elif any(passed.get("wrong", [])):
        verdict = "wrong-passes"
    prints = [StartFingerprint(screen=e.screen, a11y=e.a11y) for e in episodes if e.screen]
    return TaskRecord(
        id=task.id,
        path=task.path,
        digest=task_digest(task.task),
        verdict=verdict,
        reproducible_start=starts_agree(prints) if len(prints) >= 2 else None,
        scores=scores,
        seconds=round(sum(e.seconds for e in episodes), 3),
        episodes=sorted(episodes, key=lambda e: (e.solution, e.attempt)),
    )


async def verify(
    folder: Path,
    sandboxes: list[str] | Sandboxes,
    token: str | None,
    repeats: int = 2,
    a11y: bool = False,
    connect: Connect | None = None,
    wait_for_sandboxes: float = WAIT_FOR_SANDBOXES,
    max_sandboxes: int | None = None,
) -> VerifiedManifest:
    """Play and judge every task under `folder` on `sandboxes`: a list of episode URLs, or a
    Sandboxes set that may change while this runs (a pool: pool.PoolWatch), each URL leased by
    one worker at a time, at most `max_sandboxes` at once (a retired one frees its place).
    `connect` makes a URL's client (a benchmark's stand-in server)."""
    if repeats < 2:
        raise ValueError("repeats: at least 2, or a flaky task cannot show")
    pool = sandboxes if isinstance(sandboxes, Sandboxes) else Sandboxes(sandboxes)
    connect = connect or (lambda url, token: SandboxClient(url, token, timeout=300))
    tasks, digest = load_folder(folder)
    queue: asyncio.Queue[Job] = asyncio.Queue()
    for attempt in range(repeats):
        for t in tasks:
            for s in t.plays():
                queue.put_nowait(Job(t, s, attempt))
    done: dict[str, list[EpisodeRecord]] = {t.id: [] for t in tasks}
    t0 = time.monotonic()
    lost: list[str] = []
    played: dict[str, None] = {}  # the URLs episodes ran on, in order
    # A URL retired (lost, or its reset not clean) is not leased again while the pool names it;
    # once it leaves the pool it is forgotten, so a sandbox that comes back is leased again.
    retired: set[str] = set()
    playing: set[str] = set()  # URLs in an episode now: a worker is stopped only between them

    def put_back(job: Job) -> None:
        queue.put_nowait(job)
        queue.task_done()  # the job counts once in queue.join(), however often it is requeued

    async def worker(url: str) -> None:
        async with connect(url, token) as sb:
            while url in pool.urls:
                job = await queue.get()
                playing.add(url)
                try:
                    rec = await _play(sb, url, job, a11y)
                except DesktopLost:
                    put_back(job)
                    lost.append(url)
                    retired.add(url)
                    return
                except BaseException:
                    put_back(job)
                    raise
                finally:
                    playing.discard(url)
                if rec is None and job.requeued < MAX_REQUEUES:
                    job.requeued += 1
                    put_back(job)
                    await asyncio.sleep(BUSY_WAIT)
                    continue
                if rec is None:
                    rec = EpisodeRecord(
                        solution=job.solution,
                        attempt=job.attempt,
                        sandbox=url,
                        score=None,
                        seconds=0.0,
                        error="no free desktop",
                    )
                else:
                    played[url] = None
                done[job.task.id].append(rec)
                queue.task_done()
                if rec.error and "desktop retired" in rec.error:
                    retired.add(url)
                    return

    workers: dict[str, asyncio.Task[None]] = {}
    finished = asyncio.create_task(queue.join())
    idle_since: float | None = None  # when the last worker stopped with episodes left
    try:
        while not finished.done():
            ready = pool.urls
            retired &= ready | workers.keys()
            room = len(ready) if max_sandboxes is None else max_sandboxes - len(workers)
            for url in sorted(ready - workers.keys() - retired)[: max(room, 0)]:
                workers[url] = asyncio.create_task(worker(url), name=f"verify {url}")
            for url, w in workers.items():
                if url not in ready and url not in playing:
                    w.cancel()  # gone from the pool: no next lease (an episode in flight ends)
            live = [w for w in workers.values() if not w.done()]
            wait: float | None = None
            if live:
                idle_since = None
            elif not pool.follows:
                raise RuntimeError(
                    f"{queue.qsize()} episodes left unplayed: every desktop was retired "
                    f"(lost: {lost})"
                )
            else:
                idle_since = idle_since or time.monotonic()
                wait = idle_since + wait_for_sandboxes - time.monotonic()
                if wait <= 0:
                    raise RuntimeError(
                        f"{queue.qsize()} episodes left unplayed: no sandbox to lease for "
                        f"{wait_for_sandboxes:.0f} s (lost: {lost})"
                    )
            change = asyncio.create_task(pool.changed())
            await asyncio.wait(
                {finished, change, *live}, timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            change.cancel()
            for url, w in list(workers.items()):
                if w.done():
                    del workers[url]
                    err = None if w.cancelled() else w.exception()
                    if err is not None:
                        raise err
    finally:
        finished.cancel()
        for w in workers.values():
            w.cancel()
        await asyncio.gather(*workers.values(), return_exceptions=True)
    records = [judge(t, done[t.id]) for t in tasks]
    summary = Counter[str](r.verdict for r in records)
    summary["unreproducible-start"] = sum(r.reproducible_start is False for r in records)
    summary["usable"] = sum(r.usable for r in records)
    return VerifiedManifest(
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        folder=str(folder),
        content_hash=digest,
        sandboxes=list(played),
        repeats=repeats,
        seconds=round(time.monotonic() - t0, 3),
        summary=dict(summary),
        tasks=records,
    )
