"""The typeword task family (sandbox-image/tasks/typeword_tasks.py writes it) as the benchmark
sees it: its splits, the tokenizer corpus that makes every word one token, and the offline
reward of a reply (would this action solve the instance on the desktop?)."""

from __future__ import annotations

import ast
import difflib
import json
from pathlib import Path
from typing import Any

from kubecua_trainer.rollout.agent import (
    ParseError,
    first_user_text,
    parse_action,
    reply_text,
    system_prompt,
)

REPO = Path(__file__).resolve().parents[3]
FAMILY = REPO / "sandbox-image/tasks/typeword"
SPLITS = ("train", "heldout")
# The warm-up's demonstrations (typeword_tasks.WARMUP_PAIRS): colour i with things i and i + 1,
# i < 8: every demonstrated colour with two things, so that copying both words, not a colour's
# one thing, fits them.
_COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "pink", "brown", "black", "white"]
_THINGS = ["apple", "banana", "cherry", "grape", "lemon", "mango", "melon", "peach", "pear", "plum"]
WARMUP_IDS = [f"typeword-{_COLOURS[c]}-{_THINGS[c + d]}" for c in range(8) for d in (0, 1)]
WARMUP_INSTANCES = len(WARMUP_IDS)
# The runs' system prompt (spec.rollout.systemPrompt): the first line of the agent's own. With
# the whole 175-token prompt, the 2-layer model must find the words past it, and its warm-up
# stayed on a memorising plateau; with this one it learns to copy them (docs/benchmarks.md).
BENCH_PROMPT = "You control a Linux desktop with mouse and keyboard to complete a task."


def load_split(split: str, family: Path = FAMILY) -> list[dict[str, Any]]:
    """The tasks of one split with their reference solutions (`reference` key), by id."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    tasks = []
    for path in sorted((family / split).glob("*.json")):
        if path.name.endswith(".solutions.json"):
            continue
        task = json.loads(path.read_text())
        task["reference"] = json.loads(path.with_suffix(".solutions.json").read_text())["reference"]
        tasks.append(task)
    return tasks


def warmup_tasks(family: Path = FAMILY) -> list[dict[str, Any]]:
    by_id = {t["id"]: t for t in load_split("train", family)}
    return [by_id[i] for i in WARMUP_IDS]


def word_of(task: dict[str, Any]) -> str:
    return str(task["evaluator"]["expected"]["rules"]["expected"])


def reference_reply(task: dict[str, Any]) -> str:
    """The reply that carries the instance's reference action (its first one)."""
    return reply_text(task["reference"][0]["action"])


def corpus(family: Path = FAMILY) -> list[str]:
    """Tokenizer text: the prompt the agent reads and every instance's instruction and reply."""
    lines = [system_prompt(224, 224), "DONE"]
    for split in SPLITS:
        for task in load_split(split, family):
            lines += [first_user_text(task["instruction"]), reference_reply(task)]
    return lines


def typed_text(reply: str) -> str | None:
    """What the reply's action would type on the desktop (None: not a typing action).

    >>> typed_text('```python\\npyautogui.write("apple")\\n```')
    'apple'
    >>> typed_text("DONE") is None
    True
    """
    try:
        action = parse_action(reply)
    except ParseError:
        return None
    if action.kind != "code":
        return None
    typed = []
    for stmt in ast.parse(action.code).body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call) or ast.unparse(call.func) not in (
            "pyautogui.write",
            "pyautogui.typewrite",
        ):
            continue
        arg = call.args[0] if call.args else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            typed.append(arg.value)
    return "".join(typed) if typed else None


def offline_reward(task: dict[str, Any], reply: str, fuzzy: bool = False) -> float:
    """The desktop's check of what the reply would type: exact (1.0 or 0.0), or with `fuzzy` the
    similarity 2*matches/(len(typed)+len(expected)), the formula of desktop-env's fuzzy_match
    (rapidfuzz's ratio; difflib's blocks can differ from it by a character on odd strings)."""
    typed, expected = typed_text(reply), word_of(task)
    if not fuzzy:
        return 1.0 if typed == expected else 0.0
    return difflib.SequenceMatcher(None, typed or "", expected).ratio()
