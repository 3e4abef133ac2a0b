"""The demo's warm start: demonstrations in the exact agent format, a cached supervised pass, and a
warm-started tiny model whose greedy reply to a task is a valid action (a random one's is not)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from kubecua_trainer.engines.base import SamplingParams
from kubecua_trainer.engines.hf import HFEngine
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.rollout.agent import (
    ParseError,
    first_user_text,
    parse_action,
    system_prompt,
)
from kubecua_trainer.testing.demonstrations import load_demos, render_demo
from kubecua_trainer.testing.images import screenshot
from kubecua_trainer.testing.warm_start import MARKER, WarmStartConfig, cache_key, warm_start
from kubecua_trainer.tokens import Conversation, fit_image

SUITE = Path(__file__).resolve().parents[2] / "sandbox-image" / "tasks"
TASK = "infeasible-cloud-upload"  # one turn: reference FAIL, wrong DONE
GEDIT = "gedit-greeting"  # three turns: write (the line, or a truncated one), save, DONE
CFG = WarmStartConfig()  # what `make demo` uses (~1 min here)

pytestmark = pytest.mark.skipif(not SUITE.exists(), reason=f"{SUITE} missing")


@pytest.fixture(scope="module")
def warm(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    cache = tmp_path_factory.mktemp("models")
    out, built = warm_start(tiny_model_dir, SUITE, [TASK, GEDIT], cache, CFG)
    assert built
    return out, cache


def greedy_reply(policy: Policy, instruction: str) -> tuple[str, str]:
    """The first turn of an episode, as the rollout builds it, decoded greedily: (text, finish)."""
    image = fit_image(screenshot(7, (320, 180)), policy, CFG.max_pixels)
    conv = Conversation(policy, system_prompt(*image.size), CFG.max_pixels)
    conv.add_user(first_user_text(instruction), image)
    stop = int(policy.tokenizer.convert_tokens_to_ids("<|im_end|>"))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=48, stop_token_ids=(stop,))

    async def generate():
        engine = HFEngine(policy)
        try:
            return await engine.generate(*conv.prompt(), greedy)
        finally:
            await engine.close()

    gen = asyncio.run(generate())
    return str(policy.tokenizer.decode(gen.token_ids, skip_special_tokens=True)), gen.finish_reason


def test_warm_started_greedy_reply_is_that_tasks_action(warm, tiny_model_dir: Path) -> None:
    infeasible, gedit = load_demos(SUITE, [TASK, GEDIT])
    policy = load_policy(str(warm[0]), "float32", device="cpu")
    reply, finish = greedy_reply(policy, infeasible.instruction)
    assert finish == "stop", reply  # it learned to end its turn
    assert parse_action(reply).wire in ("FAIL", "DONE"), reply  # the reference or the near miss
    reply, finish = greedy_reply(policy, gedit.instruction)  # another task, another action
    assert finish == "stop", reply
    assert parse_action(reply).code.startswith("pyautogui.write('hello from kubec"), reply
    untrained, _ = greedy_reply(load_policy(str(tiny_model_dir), device="cpu"), gedit.instruction)
    with pytest.raises(ParseError):  # the random model's reply is no action at all
        parse_action(untrained)


def test_warm_start_reports_mixed_solution_probabilities(warm) -> None:
    import json

    info = json.loads((warm[0] / MARKER).read_text())
    probs = info["solution_probabilities"][TASK]
    assert probs["reference"] > 0.1, probs  # both are sampled sometimes
    assert probs["wrong"] > 0.1, probs
    assert probs["reference"] + probs["wrong"] > 0.6, probs  # little mass on anything else
    first, last = info["loss_first_last"]
    assert last < first / 4


def test_cached_model_is_reused_and_keyed_by_inputs(warm, tiny_model_dir: Path) -> None:
    out, cache = warm
    again, built = warm_start(tiny_model_dir, SUITE, [TASK, GEDIT], cache, CFG)
    assert (again, built) == (out, False)
    other = WarmStartConfig(**{**CFG.__dict__, "steps": CFG.steps + 1})
    assert cache_key(tiny_model_dir, SUITE, [TASK, GEDIT], CFG) == out.name.rsplit("-", 1)[1]
    assert cache_key(tiny_model_dir, SUITE, [TASK, GEDIT], other) != out.name.rsplit("-", 1)[1]
    assert cache_key(tiny_model_dir, SUITE, [TASK], CFG) != out.name.rsplit("-", 1)[1]


def test_demo_renders_the_exact_agent_turns(policy: Policy) -> None:
    (demo,) = load_demos(SUITE, ["gedit-greeting"])
    sample = render_demo(
        policy, demo.instruction, demo.reference, random.Random(0), (1920, 1080), 50176
    )
    text = policy.tokenizer.decode(sample.input_ids)
    assert "system\nYou control a Linux desktop" in text
    assert "The screen you receive" not in text
    assert "(280x168 pixels in the image you receive" in text  # as the rollout shows 1920x1080
    assert f"user\nTask: {demo.instruction}\nThe current screen:<|vision_start|>" in text
    assert "user\nTurn 3. The screen after your action:<|vision_start|>" in text
    trained = policy.tokenizer.decode(sample.input_ids[sample.loss_mask])
    assert trained == (
        "```python\npyautogui.write('hello from kubecua', interval=0.01)\n```<|im_end|>"
        "```python\npyautogui.hotkey('ctrl', 's')\n```<|im_end|>DONE<|im_end|>"
    )


def test_solutions_outside_the_action_space_are_refused() -> None:
    with pytest.raises(ValueError, match="create-hello-file: reference step not an agent action"):
        load_demos(SUITE, ["create-hello-file"])
    with pytest.raises(ValueError, match=r"task nope: no nope\.json"):
        load_demos(SUITE, ["nope"])
