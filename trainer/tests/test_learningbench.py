"""The learning benchmark's pure parts: the families as the benchmark reads them (splits,
disjointness, warm-up instances), the reward read from replies, the paired test, the goal's
verdict, and the demo's closing lines (no desktops, no model)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from bench.learning import family, paired
from bench.learning.run import verdict
from bench.learning.summary import summary

TYPEWORD = family.load(family.TASKS / "typeword")
COLOURKEYS = family.load(family.TASKS / "colourkeys")
# `make demo`'s family: the same generator, a demonstrator that quits one square early.
COLOURKEYS_DEMO = family.load(family.TASKS / "colourkeys-demo")
# `make bench-learning`'s: colourkeys' splits, the demonstrator that quits.
COLOURKEYS_QUITS = family.load(family.TASKS / "colourkeys-quits")
# Each colourkeys-made family: its split sizes, its demonstrator's confusions (right key ->
# key pressed instead) and a demonstrated instance whose demonstration fails the evaluator.
SQUARE_FAMILIES = [
    pytest.param(COLOURKEYS, (65, 60), {"r": "m", "g": "y"}, "colourkeys-ryr", id="colourkeys"),
    pytest.param(COLOURKEYS_DEMO, (95, 30), {}, "colourkeys-demo-rbm", id="demo"),
    pytest.param(COLOURKEYS_QUITS, (65, 60), {}, "colourkeys-quits-bgb", id="quits"),
]


def test_typeword_splits_and_warmup_instances() -> None:
    train, heldout = TYPEWORD.split("train"), TYPEWORD.split("heldout")
    assert (len(train), len(heldout)) == (70, 30)
    assert not {t["id"] for t in train} & {t["id"] for t in heldout}
    warm = TYPEWORD.warmup_tasks()
    assert len(warm) == 16
    assert {t["id"] for t in warm} <= {t["id"] for t in train}
    assert (TYPEWORD.max_pixels, TYPEWORD.max_turns) == (784, 1)


@pytest.mark.parametrize(("fam", "sizes", "confusions", "failing"), SQUARE_FAMILIES)
def test_colourkeys_heldout_sequences_are_new_compositions_of_demonstrated_keys(
    fam: family.Family, sizes: tuple[int, int], confusions: dict[str, str], failing: str
) -> None:
    train, heldout = fam.split("train"), fam.split("heldout")
    seqs = {split: [family.expected_text(t) for t in tasks]
            for split, tasks in (("train", train), ("heldout", heldout))}  # fmt: skip
    demos = [family.expected_text(t) for t in fam.warmup_tasks()]
    assert (len(train), len(heldout)) == sizes
    # No held-out sequence is a training instance or a demonstration.
    assert not set(seqs["heldout"]) & set(seqs["train"])
    assert set(demos) <= set(seqs["train"])
    # Every key a held-out instance needs is demonstrated: a closed vocabulary.
    assert set("".join(seqs["heldout"])) <= set("".join(demos))
    # The answer is on the screen only: every instance has the same instruction.
    assert len({t["instruction"] for t in train + heldout}) == 1
    # Several actions an episode, and partial credit declared beside the evaluator.
    assert fam.max_turns == 3
    assert all(t["partial"]["func"] == "fuzzy_match" for t in heldout)


@pytest.mark.parametrize(("fam", "sizes", "want_confusions", "failing"), SQUARE_FAMILIES)
def test_colourkeys_demonstrator_is_biased_as_family_json_states(
    fam: family.Family, sizes: tuple[int, int], want_confusions: dict[str, str], failing: str
) -> None:
    """The warm-up's demonstrations come from the biased demonstrator: on each confused colour
    it presses the stated wrong key on exactly round(rate x squares) of the demonstrated
    squares of that colour, every other square right; a demonstrator that quits (family.json
    `quits`) ends exactly round(rate x demonstrations) of those ending in each colour one
    square early; the references stay right."""
    assert fam.warmup_solution == "demonstration"
    keys = {s["name"]: s["key"] for s in fam.meta["symbols"]}
    confusions = {keys[c["symbol"]]: c for c in fam.meta["confusions"]}
    assert {k: c["pressed"] for k, c in confusions.items()} == want_confusions
    quits = fam.meta.get("quits")
    quit_by_last: dict[str, list[bool]] = {k: [] for k in keys.values()}
    pressed: dict[str, list[str]] = {k: [] for k in keys.values()}
    warm = {t["id"] for t in fam.warmup_tasks()}
    for task in fam.split("train") + fam.split("heldout"):
        want = family.expected_text(task)
        assert family.offline_reward(task, family.reference_replies(task)) == 1.0
        shown = "".join(family.typed_text(r) or "" for r in
                        family.reference_replies(task, "demonstration"))  # fmt: skip
        if task["id"] not in warm:
            assert shown == want  # no demonstration: the reference stands in
            continue
        quit_by_last[want[-1]].append(len(shown) == len(want) - 1)
        if quits and len(shown) == len(want) - 1:
            want = want[:-1]  # stopped with the last square on the screen
        assert len(shown) == len(want)
        for right, key in zip(want, shown, strict=True):
            pressed[right].append(key)
    for right, did in pressed.items():
        c = confusions.get(right)
        if c is None:
            assert set(did) == {right}, right  # an unconfused colour: always right
            continue
        wrong = did.count(c["pressed"])
        assert (len(did), wrong) == (c["squares"], c["confused"])
        assert wrong == round(c["rate"] * len(did))
        assert wrong + did.count(right) == len(did)  # the rest pressed right
    if quits is None:
        assert not any(q for flags in quit_by_last.values() for q in flags)
    else:
        assert sum(sum(flags) for flags in quit_by_last.values()) == quits["drawn"] > 0
        for last, flags in quit_by_last.items():
            assert sum(flags) == round(quits["rate"] * len(flags)), last
    # The demonstrations fail the evaluator where the demonstrator was confused or quit.
    bad = next(t for t in fam.warmup_tasks() if t["id"] == failing)
    assert family.offline_reward(bad, family.reference_replies(bad, "demonstration")) == 0.0


def _demonstrator() -> ModuleType:
    """The generator's demonstrator (sandbox-image/tasks/colourkeys_demonstrator.py, plain
    Python with no imports from the task kit), loaded from its file."""
    path = family.TASKS / "colourkeys_demonstrator.py"
    spec = importlib.util.spec_from_file_location("colourkeys_demonstrator", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_demonstrator_habits_are_drawn_exactly_on_their_eligible_cases() -> None:
    dm = _demonstrator()
    rgb = tuple(SimpleNamespace(name=n, key=n[0]) for n in ("red", "green", "blue"))
    # Misread: reads the rightmost square still shown; a turn is eligible only where the two
    # ends differ (rrr and the last turn never are).
    keys, _, habits = dm.demonstrator([(0, 1, 2)], rgb, (), 0, misread=dm.Misread(1.0))
    assert (keys, habits) == (["bbb"], {"misread": {"turns": 2, "drawn": 2}})
    keys, _, habits = dm.demonstrator([(0, 1, 2), (0, 0, 0)], rgb, (), 0, dm.Misread(0.5))
    assert keys[0] in ("bgb", "rbb")
    assert keys[1] == "rrr"
    assert habits == {"misread": {"turns": 2, "drawn": 1}}
    # Quits: DONE one square early on round(rate x n) of the demonstrations ending in each
    # colour; every key it does press is right.
    demos = [(0, 1), (1, 1), (0, 2), (2, 2)]
    keys, _, habits = dm.demonstrator(demos, rgb, (), 3, quits=dm.Quits(0.5))
    assert habits == {"quits": {"demonstrations": 4, "drawn": 2}}
    assert [len(k) for k in keys[:2]].count(1) == 1  # one of the two ending in green
    assert [len(k) for k in keys[2:]].count(1) == 1  # one of the two ending in blue
    refs = ["".join(rgb[i].key for i in seq) for seq in demos]
    assert all(ref.startswith(k) for ref, k in zip(refs, keys, strict=True))
    # A confusion counts only the squares pressed: the square left on the screen is not one.
    confused = (dm.Confusion("red", "g", 1.0),)
    keys, counts, _ = dm.demonstrator([(0, 0)], rgb, confused, 0, quits=dm.Quits(1.0))
    assert (keys, counts) == (["g"], {"red": {"squares": 1, "confused": 1}})
    # No habit: the references' keys.
    assert dm.demonstrator(demos, rgb, (), 0) == (["rg", "gg", "rb", "bb"], {}, {})
    with pytest.raises(ValueError, match=r"rate in 0\.\.1"):
        dm.demonstrator(demos, rgb, (), 0, quits=dm.Quits(1.5))


def test_colourkeys_screen_puts_each_square_on_one_image_token() -> None:
    task = next(t for t in COLOURKEYS.split("heldout") if t["id"] == "colourkeys-rgb")
    screen = COLOURKEYS.screen(task)
    assert screen is not None
    assert screen.size == (1920, 1080)
    # maxPixels fits the screen to 3 x 2 cells of 28 pixels: one image token a cell.
    fitted = screen.resize((84, 56))
    assert COLOURKEYS.max_pixels >= 84 * 56
    colours = {s["key"]: s["colour"] for s in COLOURKEYS.meta["symbols"]}
    for i, key in enumerate("rgb"):
        want = tuple(int(colours[key][j : j + 2], 16) for j in (1, 3, 5))
        assert fitted.getpixel((14 + 28 * i, 14)) == want
    after_one = COLOURKEYS.screen(task, typed=1)  # the red square pressed: green moves left
    assert after_one is not None
    assert after_one.resize((84, 56)).getpixel((14, 14)) == (0x20, 0xB0, 0x40)


def test_offline_reward_is_one_only_for_typing_exactly_the_words() -> None:
    task = next(t for t in TYPEWORD.split("heldout") if t["id"] == "typeword-black-banana")
    assert family.offline_reward(task, family.reference_replies(task)) == 1.0
    assert family.offline_reward(task, ["```python\npyautogui.write('black')\n```"]) == 0.0
    wrong = "```python\npyautogui.write('black bananas')\n```"
    assert family.offline_reward(task, [wrong]) == 0.0
    assert family.offline_reward(task, ["DONE"]) == 0.0
    assert family.offline_reward(task, ["write('black banana')"]) == 0.0  # not an action


def test_offline_reward_reads_one_key_a_reply() -> None:
    task = next(t for t in COLOURKEYS.split("heldout") if t["id"] == "colourkeys-rgb")
    replies = family.reference_replies(task)
    assert len(replies) == 3
    assert family.offline_reward(task, replies) == 1.0
    assert family.offline_reward(task, replies[:2]) == 0.0
    assert family.offline_reward(task, replies[:2], fuzzy=True) == 0.8  # 2*2/(2+3)


def test_pooled_mcnemar_counts_discordant_pairs_over_seeds() -> None:
    before = {"a": False, "b": False, "c": True, "d": False}
    after = {"a": True, "b": True, "c": False, "d": False, "e": True}  # e: no pair
    got = paired.compare([(before, after), (before, after)])
    assert (got["pairs"], got["fail_to_success"], got["success_to_fail"]) == (8, 4, 2)
    assert got["p"] == 0.6875  # 2 * (1 + 6 + 15) / 64


def _run(start: float, end: float, n: int = 30) -> dict:
    point = {"episodes": n}
    return {"heldout_start": {**point, "success": start}, "heldout_end": {**point, "success": end},
            "rise": round(end - start, 4)}  # fmt: skip


def test_verdict_needs_every_seed_up_20_points_and_a_still_control() -> None:
    seeds = [_run(0.1, 0.4), _run(0.2, 0.4), _run(0.0, 0.3)]
    assert verdict(seeds, _run(0.1, 0.1333))["goal_reached"]  # the control moved 1 episode of 30
    assert not verdict(seeds, _run(0.1, 0.2))["goal_reached"]  # 3 episodes: it moved
    low = [_run(0.1, 0.4), _run(0.2, 0.3), _run(0.0, 0.3)]
    assert not verdict(low, _run(0.1, 0.1))["every_seed_rises_20_points"]


def test_demo_summary_gives_the_episodes_behind_each_figure(tmp_path: Path) -> None:
    (tmp_path / "evaluations").mkdir()
    rows = [{"step": 0, "success_rate": 0.1, "scored": 30, "excluded": 0},
            {"step": 4, "success_rate": 0.3, "scored": 30, "excluded": 2}]  # fmt: skip
    (tmp_path / "evaluations/history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "curves.png").write_bytes(b"png")
    lines = summary(tmp_path)
    assert lines[1] == "  after the warm-up, step 0: 3/30 episodes = 10% (95% interval 3%-26%)"
    assert (
        lines[2] == "  after GRPO, step 4: 9/30 episodes = 30% (95% interval 17%-48%, 2 excluded)"
    )
    assert lines[3] == f"curves: {tmp_path / 'curves.png'}"
    assert summary(tmp_path / "nothing")[0].startswith("no evaluation found")
    # The untrained model's figure, when the demo evaluated it into <out>/untrained.
    (tmp_path / "untrained/evaluations").mkdir(parents=True)
    row = {"step": 0, "success_rate": 0.0, "scored": 30, "excluded": 0}
    (tmp_path / "untrained/evaluations/history.jsonl").write_text(json.dumps(row) + "\n")
    lines = summary(tmp_path)
    assert lines[1] == "  untrained model: 0/30 episodes = 0% (95% interval 0%-11%)"
    assert lines[2].startswith("  after the warm-up, step 0: 3/30")


def test_a_recording_with_no_successful_demonstration_is_refused_and_not_cached(
    tmp_path: Path,
) -> None:
    from bench.learning.run import check_recorded

    jsonl = tmp_path / "demonstrations.jsonl"
    jsonl.write_text("".join(json.dumps({"outcome": o}) + "\n" for o in ("failure", "timeout")))
    with pytest.raises(SystemExit, match="none of the 2 demonstrations"):
        check_recorded(jsonl)
    jsonl.write_text("".join(json.dumps({"outcome": o}) + "\n" for o in ("failure", "success")))
    check_recorded(jsonl)  # one success: a biased demonstrator's recording, kept


def _evaluation(out: Path, step: int, succeeded: list[bool]) -> None:
    """One held-out evaluation as a run writes it (evaluations/step-NNNN/summary.json)."""
    folder = out / "evaluations" / f"step-{step:04d}"
    folder.mkdir(parents=True)
    rows = [
        {"task_id": f"h{i}", "scored": 1, "successes": int(ok)} for i, ok in enumerate(succeeded)
    ]
    (folder / "summary.json").write_text(json.dumps({"tasks": rows}))


def _arms(tmp: Path, seed: int, control: bool = True) -> dict:
    """One seed's arms: GRPO 2 -> 20 of 30 held out, continued SFT 5, a flat control."""
    grpo_out, sft_out = tmp / f"seed-{seed}", tmp / f"seed-{seed}-sft"
    _evaluation(grpo_out, 0, [True] * 2 + [False] * 28)
    _evaluation(grpo_out, 12, [True] * 20 + [False] * 10)
    _evaluation(sft_out, 0, [True] * 5 + [False] * 25)
    grpo = {**_run(2 / 30, 20 / 30), "seed": seed, "out": str(grpo_out)}
    grpo["heldout_start"]["step"], grpo["heldout_end"]["step"] = 0, 12
    arms = {"grpo": grpo, "sft": {"out": str(sft_out), "heldout_end": {"success": 5 / 30}}}
    if control:
        arms["control"] = _run(2 / 30, 2 / 30)
    return arms


def test_the_verdict_is_over_the_seeds_requested_and_names_a_failed_arm(tmp_path: Path) -> None:
    from bench.learning.run import arms_verdict

    arms = [_arms(tmp_path, 0), _arms(tmp_path, 1), _arms(tmp_path, 2)]
    whole = arms_verdict(arms, [0, 1, 2], [], control=True)
    assert whole["goal_reached"]
    assert whole["seeds_with_grpo"] == [0, 1, 2]
    assert whole["mcnemar_grpo_start_vs_end"]["fail_to_success"] == 54
    # Seed 2's GRPO run failed twice: the two seeds left rise, but "every seed" is every seed
    # requested, and the failure is named with its error.
    failed = [{"seed": 2, "arm": "grpo", "error": "TimeoutError (no message)"}]
    got = arms_verdict(arms[:2], [0, 1, 2], failed, control=True)
    assert (got["seeds_requested"], got["seeds_with_grpo"]) == ([0, 1, 2], [0, 1])
    assert got["failed"] == failed
    assert got["grpo_rises_20_points_every_seed"] is False
    assert got["grpo_10_points_over_continued_sft"] is False  # seed 2 has no SFT arm either
    assert got["control_flat"] is False  # nor a control
    assert got["mcnemar_p_below_0.01"] is True  # pooled over the seeds there are
    assert got["goal_reached"] is False
    # A seed whose control alone failed: the control goal and the verdict fail, the others hold.
    no_control = {k: v for k, v in _arms(tmp_path / "c", 2).items() if k != "control"}
    failed = [{"seed": 2, "arm": "control", "error": "kubecua_trainer run exited 1: error: ..."}]
    got = arms_verdict([*arms[:2], no_control], [0, 1, 2], failed, control=True)
    assert got["grpo_rises_20_points_every_seed"] is True
    assert got["grpo_10_points_over_continued_sft"] is True
    assert (got["control_flat"], got["goal_reached"]) == (False, False)
    # --no-control: no control goal to fail
    plain = [_arms(tmp_path / "p", s, control=False) for s in (0, 1)]
    got = arms_verdict(plain, [0, 1], [], control=False)
    assert (got["control_flat"], got["goal_reached"]) == (None, True)


@pytest.mark.asyncio
async def test_a_failed_arm_is_run_once_more_then_named_with_its_errors() -> None:
    from bench.learning.run import ArmError, ArmFailed, retried

    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError()  # a loaded machine: no message at all
        return "done"

    assert await retried(0, "control", flaky) == "done"
    assert len(calls) == 2

    async def broken() -> str:
        raise ArmError("sft", "the continued fit: bench.learning.continued_sft exited 1")

    with pytest.raises(ArmFailed) as err:
        await retried(1, "grpo", broken)
    assert err.value.record(1) == {
        "seed": 1, "arm": "sft",
        "error": "the continued fit: bench.learning.continued_sft exited 1",
        "errors": ["the continued fit: bench.learning.continued_sft exited 1"] * 2,
    }  # fmt: skip

    async def silent() -> str:
        raise TimeoutError()

    with pytest.raises(ArmFailed) as err:
        await retried(2, "control", silent)
    assert err.value.record(2)["error"] == "TimeoutError (no message)"


def test_a_failed_childs_error_line_is_what_the_verdict_quotes(tmp_path: Path) -> None:
    from bench.learning.run import last_error

    log = tmp_path / "run.log"
    log.write_text("INFO x: warm-up epoch 1/2\nerror: waited 600 s for 3 ready sandbox(es)"
                   " (...): 1 of 3 ready\n")  # fmt: skip
    assert last_error(log) == "error: waited 600 s for 3 ready sandbox(es) (...): 1 of 3 ready"
    log.write_text("Traceback (most recent call last):\n  ...\nRuntimeError: boom\n")
    assert last_error(log) == "RuntimeError: boom"
    assert last_error(tmp_path / "missing.log") == "(no log)"
