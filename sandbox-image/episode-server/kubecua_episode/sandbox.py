"""One sandbox, one episode at a time: the episode lifecycle behind the HTTP routes.

Every blocking call (desktop HTTP, desktop-env, psutil) runs in a worker thread with a timeout,
so the event loop keeps answering /healthz, /readyz and 409s while an episode works."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubecua_episode import actions, evaluators, osworld
from kubecua_episode.audio import AudioState
from kubecua_episode.desktop import Desktop, DesktopError, is_black
from kubecua_episode.fingerprint import start_fingerprint
from kubecua_episode.metrics import Metrics
from kubecua_episode.observe import build_observation, settle
from kubecua_episode.reset import RemoteResetter, Resetter
from kubecua_episode.settings import Settings
from kubecua_episode.system import SudoSystemState, SystemState, sudo_works
from kubecua_episode.vm.restore import SnapshotResetter
from kubecua_sandbox_client import (
    EpisodeCreate,
    EpisodeStarted,
    Evaluation,
    Readiness,
    Released,
    SandboxStatus,
    SettleOptions,
    StartFingerprint,
    StepRequest,
    StepResult,
    is_success,
)

log = logging.getLogger("kubecua.episode")
T = TypeVar("T")


def free_port() -> int:
    """A free loopback port (for Chrome's per-episode debugging port on local sandboxes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scored_outcome(score: float) -> str:
    """The outcome label of an evaluated episode, by the definition the trainer shares."""
    return "success" if is_success(score) else "failure"


class ApiError(Exception):
    """Becomes {"detail", "reason"} with `status` (see app.py)."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


@dataclass
class Episode:
    id: str
    request: EpisodeCreate
    steps: int = 0
    done: bool = False
    last_action: Any = None
    started: float = 0.0
    scored: bool = False
    active: int = 1  # calls in progress (start counts); the idle watchdog never interrupts one
    last_call: float = 0.0  # monotonic end of the latest call
    started_up: asyncio.Event = field(default_factory=asyncio.Event)  # start returned or failed
    released_early: bool = False  # a DELETE came while it was starting: start drops it
    start_fingerprint: StartFingerprint | None = None  # of its first observation


@contextlib.contextmanager
def _calling(ep: Episode) -> Iterator[None]:
    ep.active += 1
    try:
        yield
    finally:
        ep.active -= 1
        ep.last_call = time.monotonic()


async def _in_thread(fn: Callable[..., T], *args: Any, limit: float, reason: str) -> T:
    try:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args), limit)
    except TimeoutError as e:
        raise ApiError(504, reason, f"{reason}: timed out after {limit:.0f} s") from e
    except DesktopError as e:
        raise ApiError(502, reason, str(e)) from e


def system_state(s: Settings) -> SystemState | SudoSystemState:
    """What resets undo outside the home. The home (restored from its own copy), that copy and
    the server's cache are never walked; the byte copies sit beside the cache. A server that is
    not root works through the account's sudo where that works (the image under podman)."""
    own = tuple(p for p in (s.home, s.pristine_home, s.cache_dir) if p is not None)
    state = SystemState(s.system_paths, s.system_copies, s.system_top, s.system_exclude + own,
                        snapshot=s.cache_dir.with_name(s.cache_dir.name + ".system"))  # fmt: skip
    if state.enabled and os.geteuid() != 0:
        if sudo_works(s.client_password):
            return SudoSystemState(state, s.client_password)
        state.copies = ()  # what this uid may write it removes; root's files it cannot restore
    return state


class Sandbox:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.s, self.metrics = settings, metrics
        self.desktop = Desktop(settings.desktop_url, settings.token)
        self.resetter: Resetter | RemoteResetter | SnapshotResetter = (
            SnapshotResetter(settings.vm_control_url, self.desktop) if settings.vm_control_url
            else RemoteResetter(self.desktop) if settings.remote
            else Resetter(settings.display, settings.home, settings.pristine_home,
                          settings.scratch_dir, system_state(settings))
        )  # fmt: skip
        self.episode: Episode | None = None
        self.episodes_served = 0
        self.last_reset_seconds: float | None = None
        self.clean_problems: list[str] = []
        self.baseline_windows: set[str] = set()
        self.audio: AudioState | None = None  # the sound server's baseline, restored by reset
        self.releasing = False
        self.started = False  # True once the baseline of a clean desktop is taken
        # Ids a DELETE named before any episode had them: a caller that chose its id and gave up
        # on its POST releases at once, and its POST may still arrive after the DELETE.
        self.released_unknown: dict[str, None] = {}

    def take_baseline(self) -> None:
        """Called once the desktop is up and pristine: what 'clean' looks like. With no pristine
        copy of the home yet (the image; the local launcher makes its own), take it now."""
        home, pristine = self.s.home, self.s.pristine_home
        if home and pristine and not pristine.exists():
            shutil.copytree(home, pristine, symlinks=True)
        self.clean_problems = self.resetter.take_baseline()
        if not self.clean_problems:  # wmctrl answers
            self.baseline_windows = set(self.desktop.window_ids())
        if not self.s.remote:  # a VM's sound state is the VM's (restarting it is the reset)
            self.audio = AudioState.read(self.desktop)
        if self.s.remote and not self.s.vm_control_url:
            log.warning("remote desktop %s: releases close the episode's windows only; the home "
                        "is not restored (restarting the VM is the operator's job)",
                        self.s.desktop_url)  # fmt: skip
        self.started = True

    def env(self) -> osworld.AttachedEnv:
        s = self.s
        return osworld.AttachedEnv.attach(
            s.desktop_host, s.desktop_port, s.cdp_port, s.vlc_port, str(s.cache_dir),
            client_password=s.client_password, screen_width=s.screen_width,
            screen_height=s.screen_height,
        )  # fmt: skip

    # -- readiness ---------------------------------------------------------------------------
    def _check_ready(self) -> str | None:
        if not self.started:
            return "Starting: waiting for the desktop to answer"
        if error := evaluators.import_error():
            return f"EvaluatorsUnavailable: desktop-env's metric modules did not import: {error}"
        if not evaluators.loaded():
            return "Starting: importing desktop-env's metric modules"
        if isinstance(self.resetter, SnapshotResetter):  # a VM: ready once its runner is
            if reason := self.resetter.runner_ready():
                return reason
            if self.clean_problems and self.resetter.recovered():  # snapshotted, or rebuilt
                log.info("VM ready: baseline taken", extra={"was": self.clean_problems})
                self.take_baseline()
        if self.clean_problems:
            return "NotClean: " + "; ".join(self.clean_problems)
        try:
            if is_black(self.desktop.screenshot()):
                return "BlackScreen: the desktop's screenshot is black"
        except DesktopError as e:
            return f"DesktopUnreachable: {e}"
        return None

    @property
    def busy(self) -> bool:
        """An episode runs, or the last one's reset has not finished (the episode id is already
        gone then: a watcher must wait for `busy` false, not for the id to change)."""
        return self.episode is not None or self.releasing

    async def readiness(self) -> Readiness:
        reason = await asyncio.to_thread(self._check_ready)
        if reason is None and self.releasing:
            reason = "Resetting: the last episode's desktop is being reset"
        self.metrics.ready.set(0 if reason else 1)
        return Readiness(ready=reason is None, busy=self.busy, reason=reason)

    def status(self, ready: bool) -> SandboxStatus:
        return SandboxStatus(
            ready=ready,
            busy=self.busy,
            episode_id=self.episode.id if self.episode else None,
            episodes_served=self.episodes_served,
            last_reset_seconds=self.last_reset_seconds,
        )

    def get(self, episode_id: str) -> Episode:
        if self.episode is None or self.episode.id != episode_id:
            raise ApiError(404, "UnknownEpisode", f"no episode {episode_id!r} on this sandbox")
        return self.episode

    def localize(self, task: dict[str, Any]) -> dict[str, Any]:
        """The task as this sandbox must run it: OSWorld's /home/user and CDP ports mapped to a
        local sandbox's own. A remote desktop (a VM) runs OSWorld tasks unchanged: its Service
        may publish CDP on another port, but inside the VM it is 9222 as the task says."""
        if self.s.remote:
            return task
        task = osworld.map_home(task, self.s.home)
        return dict(osworld.map_ports(task, self.s.cdp_port, free_port()))

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, req: EpisodeCreate) -> EpisodeStarted:
        if req.episode_id is not None and req.episode_id in self.released_unknown:
            detail = f"episode {req.episode_id!r} was released before it started"
            raise ApiError(409, "EpisodeReleased", detail)
        if self.episode is not None or self.releasing:
            raise ApiError(409, "SandboxBusy", "this sandbox runs an episode; try another one")
        req = req.model_copy(update={"task": self.localize(req.task)})
        try:
            osworld.validate_task(req.task)
        except osworld.TaskError as e:
            raise ApiError(422, "InvalidTask", str(e)) from e
        eid = req.episode_id or f"ep-{uuid.uuid4().hex[:12]}"
        ep = Episode(id=eid, request=req, started=time.monotonic())
        self.episode = ep  # claimed before the first await: a concurrent POST now gets 409
        self.metrics.busy.set(1)
        if self.s.remote:
            self.desktop.fresh_connections()  # the desktop may be a VM restored since
        try:
            started = await self._start(ep, req)
            if ep.released_early:  # its caller gave up and released it meanwhile (unscored)
                await self._drop(ep, "unscored")
                detail = f"episode {eid!r} was released while it started"
                raise ApiError(409, "EpisodeReleased", detail)
            return started
        finally:
            ep.started_up.set()

    async def _start(self, ep: Episode, req: EpisodeCreate) -> EpisodeStarted:
        if reason := await asyncio.to_thread(self._check_ready):
            await self._drop(ep, "setup_failed")
            raise ApiError(503, "SandboxNotReady", reason)
        t0 = time.monotonic()
        try:
            await _in_thread(self._setup, req.task, limit=self.s.setup_timeout_s,
                             reason="SetupFailed")  # fmt: skip
        except ApiError as e:
            self.metrics.setup_failures.labels(reason=e.reason).inc()
            await self._drop(ep, "setup_failed")
            raise
        except Exception as e:  # desktop-env raises bare Exception on a failed setup step
            self.metrics.setup_failures.labels(reason="SetupStepFailed").inc()
            await self._drop(ep, "setup_failed")
            raise ApiError(502, "SetupFailed", f"task setup failed: {e}") from e
        setup_s = time.monotonic() - t0
        self.metrics.setup_duration.observe(setup_s)
        obs = await self._observe(ep)
        log.info("episode started", extra={"episode": ep.id, "task": req.task.get("id")})
        ep.active, ep.last_call = 0, time.monotonic()
        return EpisodeStarted(episode_id=ep.id, instruction=req.task["instruction"],
                              observation=obs[0], setup_seconds=round(setup_s, 3),
                              start_fingerprint=ep.start_fingerprint)  # fmt: skip

    def _setup(self, task: dict[str, Any]) -> None:
        osworld.run_setup(self.env(), task.get("config") or [])

    async def _observe(self, ep: Episode, final: bool = False) -> tuple[Any, float]:
        """The screen once it has settled. After DONE/FAIL, for at least done_min_seconds: the
        evaluation that follows reads files an app may still be writing (OSWorld sleeps 2 s)."""
        settle_opts = ep.request.settle
        if final:
            least = max(settle_opts.min_seconds, settle_opts.done_min_seconds)
            update = {"min_seconds": least, "max_seconds": max(settle_opts.max_seconds, least)}
            settle_opts = settle_opts.model_copy(update=update)
        return await _in_thread(self._look, ep, settle_opts, limit=self.s.step_timeout_s,
                                reason="DesktopError")  # fmt: skip

    def _look(self, ep: Episode, settle_opts: SettleOptions) -> tuple[Any, float]:
        """Settle, then build the observation, in one worker thread (each hop costs ~0.2 ms)."""
        opts = ep.request.observation
        settled = settle(self.desktop.screenshot_png, settle_opts)
        a11y = self.desktop.get_text("/accessibility") if opts.a11y_tree else None
        term = self.desktop.get_text("/terminal") if opts.terminal else None
        if ep.start_fingerprint is None:  # the first observation: what the episode starts from
            ep.start_fingerprint = start_fingerprint(settled.png, a11y)
        return build_observation(settled.png, opts, ep.steps, a11y, term), settled.seconds

    async def step(self, episode_id: str, req: StepRequest) -> StepResult:
        ep = self.get(episode_id)
        with _calling(ep):
            return await self._step(ep, req)

    async def _step(self, ep: Episode, req: StepRequest) -> StepResult:
        if ep.done:
            raise ApiError(409, "EpisodeDone", "the episode has ended (DONE/FAIL); evaluate it")
        kind = actions.special(req.action)
        try:
            if kind is None:
                actions.check(req.action, req.action_space)
        except actions.InvalidAction as e:
            raise ApiError(422, "InvalidAction", str(e)) from e
        t0 = time.monotonic()
        info: dict[str, Any] = {}
        if kind is None:
            info.update(await _in_thread(self._run, req, limit=self.s.step_timeout_s,
                                         reason="DesktopError"))  # fmt: skip
        ep.steps += 1
        ep.last_action = kind or req.action
        ep.done = kind in ("DONE", "FAIL")
        action_s = time.monotonic() - t0
        obs, settle_s = await self._observe(ep, final=ep.done)
        self.metrics.settle_duration.observe(settle_s)
        self.metrics.step_duration.observe(time.monotonic() - t0)
        info.update(action_seconds=round(action_s, 4), settle_seconds=round(settle_s, 4))
        return StepResult(observation=obs, done=ep.done, info=info)

    def _run(self, req: StepRequest) -> dict[str, Any]:
        if req.action_space == "computer_13":
            self.env().controller.execute_action(req.action)
            return {}
        out = self.desktop.execute(actions.pyautogui_command(str(req.action)))
        if out.get("returncode", 0) != 0:  # the policy's code failed: its problem, not ours
            return {"error": str(out.get("error") or out.get("output"))[-2000:]}
        return {}

    async def evaluate(self, episode_id: str) -> Evaluation:
        ep = self.get(episode_id)
        with _calling(ep):
            return await self._evaluate(ep)

    async def _evaluate(self, ep: Episode) -> Evaluation:
        t0 = time.monotonic()
        try:
            score, details = await _in_thread(
                osworld.evaluate, self.env(), ep.request.task, ep.last_action,
                limit=self.s.evaluate_timeout_s, reason="EvaluationFailed",
            )  # fmt: skip
        except ApiError:
            raise
        except Exception as e:
            raise ApiError(502, "EvaluationFailed", f"evaluation failed: {e!r}") from e
        self.metrics.evaluate_duration.observe(time.monotonic() - t0)
        self.metrics.episodes.labels(outcome=scored_outcome(score)).inc()
        ep.done, ep.scored = True, True
        partial, partial_error = await self._partial(ep)
        return Evaluation(score=score, details=details, partial=partial,
                          partial_error=partial_error)  # fmt: skip

    async def _partial(self, ep: Episode) -> tuple[float | None, str | None]:
        """The task's partial credit beside its score. Its failure leaves the score as it is:
        it is reported (and counted) so the trainer leaves the term out, never scores it 0."""
        if "partial" not in ep.request.task:
            return None, None
        try:
            value = await _in_thread(
                osworld.partial_score, self.env(), ep.request.task,
                limit=self.s.evaluate_timeout_s, reason="PartialFailed",
            )  # fmt: skip
        except ApiError as e:
            why = str(e.detail)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
        else:
            return value, None
        self.metrics.partial_failures.inc()
        log.warning("partial metric failed: %s", why[:1000])
        return None, why[:2000]

    async def release(self, episode_id: str) -> Released:
        ep = self.episode
        if ep is None or ep.id != episode_id:
            self.released_unknown[episode_id] = None
            while len(self.released_unknown) > 256:
                del self.released_unknown[next(iter(self.released_unknown))]
            ep = self.get(episode_id)  # 404
        if not ep.started_up.is_set():
            # Still starting: its caller gave up (it chose the id, so it could name it). Start
            # drops it once setup ends (a setup cannot be interrupted halfway); answer then.
            ep.released_early = True
            await ep.started_up.wait()
            return Released(reset_seconds=round(self.last_reset_seconds or 0.0, 3),
                            clean=not self.clean_problems)  # fmt: skip
        outcome = "completed" if ep.scored else "unscored"
        return await self._drop(ep, outcome)

    async def release_if_idle(self) -> Released | None:
        """The idle watchdog's check: an episode nobody has called for `idle_timeout_s` (its
        trainer died or lost it) is released, so the sandbox does not stay busy forever."""
        ep, limit = self.episode, self.s.idle_timeout_s
        if ep is None or ep.active or limit <= 0 or time.monotonic() - ep.last_call < limit:
            return None
        log.warning("releasing idle episode", extra={"episode": ep.id, "idle_seconds": limit})
        return await self._drop(ep, "abandoned")

    async def _drop(self, ep: Episode, outcome: str) -> Released:
        """End the episode, reset the desktop and verify it. Busy until verified."""
        if outcome != "completed":
            self.metrics.episodes.labels(outcome=outcome).inc()
        self.releasing, self.episode = True, None
        try:
            seconds, problems = await _in_thread(self._reset, limit=self.s.reset_timeout_s,
                                                 reason="ResetFailed")  # fmt: skip
        except ApiError as e:
            seconds, problems = self.s.reset_timeout_s, [str(e)]
        finally:
            self.releasing = False
            self.metrics.busy.set(0)
        self.clean_problems, self.last_reset_seconds = problems, seconds
        self.episodes_served += 1
        self.metrics.lease_duration.observe(time.monotonic() - ep.started)
        self.metrics.reset_duration.observe(seconds)
        if problems:
            self.metrics.reset_failures.inc()
        extra = {"episode": ep.id, "reset_seconds": round(seconds, 3), "problems": problems,
                 "killed": self.resetter.killed}  # fmt: skip
        if isinstance(self.resetter, Resetter) and self.resetter.system.changed:
            extra["system_changed"] = self.resetter.system.changed[:20]
        log.info("episode released", extra=extra)
        return Released(reset_seconds=round(seconds, 3), clean=not problems)

    def _reset(self) -> tuple[float, list[str]]:
        t0 = time.monotonic()
        _, problems = self.resetter.reset()
        if self.audio is not None:
            problems += self.audio.restore(self.desktop)
        extra = set(self.desktop.window_ids()) - self.baseline_windows
        if extra:
            problems.append(f"windows still open: {sorted(extra)}")
        return time.monotonic() - t0, problems
