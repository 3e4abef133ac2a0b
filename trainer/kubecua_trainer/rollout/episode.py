"""Play one episode on one sandbox: lease, start, turns of generate -> parse -> step, evaluate.

Every episode has a deadline (rollout.episodeTimeoutSeconds) from the start request to the score;
waiting for a free sandbox does not count. The episode is released in `finally`, always.
Infrastructure failures end in an excluded outcome (records.EXCLUDED), never in reward 0:
setup errors (5xx on start), a lost sandbox (5xx / connection / unknown episode mid-run), a
timeout, a failed evaluation. A busy sandbox (409 or not ready) is skipped and another is tried.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from PIL import Image

from kubecua_sandbox_client import (
    InvalidRequest,
    ObservationOptions,
    SandboxBusy,
    SandboxClient,
    SandboxUnavailable,
)
from kubecua_trainer.config import AlgorithmConfig, RolloutConfig
from kubecua_trainer.engines.base import Engine, SamplingParams, seeded
from kubecua_trainer.model import Policy
from kubecua_trainer.rollout.agent import (
    ParseError,
    first_user_text,
    next_user_text,
    parse_action,
    scale_coordinates,
    system_prompt,
)
from kubecua_trainer.rollout.context import CONTEXTS, EpisodeContext
from kubecua_trainer.rollout.records import EpisodeResult, Turn
from kubecua_trainer.rollout.screens import Screen, decode_screen
from kubecua_trainer.sources.leases import Lease, SandboxLeases
from kubecua_trainer.sources.reclaim import episode_id as episode_id_of
from kubecua_trainer.tokens import fit_image

RELEASE_TIMEOUT = 60.0
NOT_READY_REASONS = ("SandboxNotReady",)  # 503 right after a reset: try another sandbox


@dataclass
class Rollout:
    """What every episode of a run shares."""

    policy: Policy
    engine: Engine
    leases: SandboxLeases
    token: str | None
    algorithm: AlgorithmConfig
    rollout: RolloutConfig
    owner: str = ""  # the run's mark in its episode ids (sources/reclaim.py)
    # spec.seed: each sampled turn draws from (seed, task, episode key, turn) on engines that key
    # their draws (SamplingParams.seed), so a run's episodes repeat whatever shares a batch
    seed: int | None = None

    def sampling(self, temperature: float | None = None) -> SamplingParams:
        """temperature: this episode's (a scheduled step's, or 0 = greedy); default the run's."""
        stop = self.policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
        return SamplingParams(
            temperature=self.algorithm.temperature if temperature is None else temperature,
            max_new_tokens=self.algorithm.max_new_tokens,
            stop_token_ids=(int(stop),),
        )

    def fit(self, image: Image.Image) -> Image.Image:
        return fit_image(image, self.policy, self.rollout.max_pixels)

    def new_context(self, screen: Screen) -> EpisodeContext:
        prompt = system_prompt(screen.image.width, screen.image.height, self.rollout.system_prompt)
        return CONTEXTS[self.algorithm.mode](
            self.policy,
            prompt,
            self.rollout.max_pixels,
            keep_screenshots=self.rollout.keep_screenshots,
            turn_discount=self.algorithm.turn_discount,
        )


async def play_episode(
    ro: Rollout, task: dict[str, Any], group_id: str, key: str, *, temperature: float | None = None
) -> EpisodeResult:
    """temperature: sample at this (0 = greedy) instead of algorithm.temperature; its samples
    record it, so the learner recomputes their log-probs at the same temperature."""
    result = EpisodeResult(task_id=str(task.get("id", "")), group_id=group_id, key=key)
    sampling = ro.sampling(temperature)
    started = time.monotonic()
    while True:  # retry only while no episode was started: busy or resetting sandboxes
        async with ro.leases.lease() as lease:
            result.sandbox = lease.url
            client = SandboxClient(lease.url, ro.token, timeout=ro.rollout.episode_timeout_seconds)
            held = time.monotonic()
            try:
                if await _on_sandbox(ro, client, lease, task, result, sampling):
                    break
            finally:
                await client.aclose()
                seconds = time.monotonic() - held
                result.sandbox_seconds += seconds
                ro.leases.held_seconds += seconds  # the run's cost ledger (cost.py)
    result.seconds = time.monotonic() - started
    return result


async def _on_sandbox(
    ro: Rollout,
    client: SandboxClient,
    lease: Lease,
    task: dict[str, Any],
    result: EpisodeResult,
    sampling: SamplingParams,
) -> bool:
    """Run the episode on this sandbox; False when it was busy and another should be tried."""
    deadline = asyncio.get_running_loop().time() + ro.rollout.episode_timeout_seconds
    # Our own id, known before the reply: a stop, a timeout or a lost connection during the
    # start still releases whatever the sandbox started (else it stays busy until its idle
    # timeout). Only an answer that says nothing started clears it.
    episode_id: str | None = episode_id_of(ro.owner, "ep", uuid.uuid4().hex[:16])
    try:
        async with asyncio.timeout_at(deadline):
            try:
                obs = ObservationOptions(format="png", max_pixels=None)
                begun = await client.start_episode(task, observation=obs, episode_id=episode_id)
            except SandboxBusy:
                episode_id = None
                lease.busy()
                return False
            except SandboxUnavailable as err:
                if err.status is not None:  # the server answered: it dropped the episode
                    episode_id = None
                if err.reason in NOT_READY_REASONS:
                    lease.busy()
                    return False
                lease.bad()
                result.fail("setup_failed", str(err))
                return True
            except InvalidRequest as err:
                episode_id = None
                result.fail("invalid_task", str(err))
                return True
            episode_id, result.instruction = begun.episode_id, begun.instruction
            result.start_fingerprint = begun.start_fingerprint
            shot = begun.observation.screenshot
            await _play_turns(ro, client, episode_id, shot, result, sampling)
    except TimeoutError:
        result.fail("timeout", f"over {ro.rollout.episode_timeout_seconds:.0f}s")
    except SandboxUnavailable as err:
        lease.bad()
        result.fail("sandbox_lost", str(err))
    except ValueError as err:  # tokens.check_image_pads: a corrupted sample is never trained
        result.fail("invalid_sample", str(err))
    finally:
        if episode_id is not None:
            await _release(client, lease, episode_id)
    return True


async def _play_turns(
    ro: Rollout,
    client: SandboxClient,
    episode_id: str,
    screenshot: str,
    result: EpisodeResult,
    sampling: SamplingParams,
) -> None:
    screen = await asyncio.to_thread(decode_screen, screenshot, ro.fit)
    ctx = ro.new_context(screen)
    user: tuple[str, Screen | None] = (first_user_text(result.instruction), screen)
    for turn_no in range(ro.algorithm.max_turns):
        text, shown = user
        ctx.add_user(text, shown.image if shown else None)
        ids, images = ctx.prompt()
        t0 = time.monotonic()
        turn_sampling = seeded(sampling, ro.seed, result.task_id, result.key, turn_no)
        gen = await ro.engine.generate(ids, images, turn_sampling)
        reply = ro.policy.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        ctx.add_generation(gen, reply)
        turn = Turn(shown.image if shown else None, reply, None)
        turn.screen = shown.encoded if shown else None
        turn.gen_tokens, turn.gen_seconds = len(gen.token_ids), time.monotonic() - t0
        result.turns.append(turn)
        try:
            action = parse_action(reply)
        except ParseError as err:
            turn.feedback = err.feedback
            user = (err.feedback, None)
            continue
        sx, sy = screen.scale
        turn.action = (
            scale_coordinates(action.code, sx, sy) if action.kind == "code" else action.wire
        )
        done, next_screen = await _step(ro, client, episode_id, turn)
        if action.kind in ("DONE", "FAIL") or done:
            break
        if next_screen is not None:
            screen = next_screen
            user = (next_user_text(turn_no + 2), screen)
        else:
            user = (turn.feedback or "", None)
    result.final_screenshot, result.final_screen = screen.image, screen.encoded
    result.screen_size = (screen.screen_width, screen.screen_height)
    await _evaluate(client, episode_id, result, ctx, sampling.temperature)


async def _step(
    ro: Rollout, client: SandboxClient, episode_id: str, turn: Turn
) -> tuple[bool, Screen | None]:
    """Send one action; an action the sandbox rejects (422) becomes feedback for the model."""
    assert turn.action is not None
    t0 = time.monotonic()
    try:
        res = await client.step(episode_id, turn.action)
    except InvalidRequest as err:
        if err.status == 404:  # the sandbox forgot the episode: it restarted under us
            raise SandboxUnavailable(str(err), err.status, "UnknownEpisode") from err
        turn.feedback = f"The sandbox rejected that action: {err}. Try a different action."
        turn.refused = True
        return False, None
    except SandboxBusy:  # 409 EpisodeDone: the episode already ended on the sandbox side
        return True, None
    finally:
        turn.env_seconds = time.monotonic() - t0
    screen = await asyncio.to_thread(decode_screen, res.observation.screenshot, ro.fit)
    return res.done, screen


async def _evaluate(
    client: SandboxClient,
    episode_id: str,
    result: EpisodeResult,
    ctx: EpisodeContext,
    temperature: float,
) -> None:
    try:
        evaluation = await client.evaluate(episode_id)
    except SandboxUnavailable as err:
        if err.status is None:  # no answer at all: the sandbox went away
            raise
        result.fail("evaluation_failed", str(err))
        return
    except (InvalidRequest, SandboxBusy) as err:
        result.fail("evaluation_failed", str(err))
        return
    result.score(evaluation.score)
    result.partial, result.partial_error = evaluation.partial, evaluation.partial_error
    result.samples = ctx.samples(evaluation.score)
    for sample in result.samples:
        sample.task_id, sample.group_id = result.task_id, result.group_id
        sample.temperature = temperature


def _never_started(hand_back: asyncio.Future[Any]) -> bool:
    """A 404 to a release: the sandbox holds no such episode (a DELETE that overtook the POST we
    gave up on, which it will now refuse; or its idle watchdog reset it already)."""
    err = None if hand_back.cancelled() else hand_back.exception()
    return isinstance(err, InvalidRequest) and err.status == 404


async def _release(client: SandboxClient, lease: Lease, episode_id: str) -> None:
    # A cancelled episode (a stop; train.py cancels in-flight work, then cancels it again on its
    # way out) still hands its sandbox back, and finishes doing so (RELEASE_TIMEOUT bounds it)
    # before the cancellation goes on: a release left pending is cancelled with the event loop,
    # and the sandbox would stay leased until its idle timeout, busy for the next run.
    hand_back = asyncio.ensure_future(asyncio.wait_for(client.release(episode_id), RELEASE_TIMEOUT))
    cancelled = False
    while not hand_back.done():
        try:
            await asyncio.shield(hand_back)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:
            break
    failed = hand_back.cancelled() or hand_back.exception() is not None
    if failed and not _never_started(hand_back):
        lease.bad()  # it did not confirm a clean reset; let it cool off
    if cancelled:
        raise asyncio.CancelledError
