"""The shaped reward (spec.reward, reward.py) term by term against hand-computed values, and its
path through batch.assemble_batch: advantages from the shaped reward, success and the success
rate from the evaluator's score, a failed partial metric never trained as 0. The admission side
(a weight out of range refused naming its field path) is in test_config.py for the trainer and
operator/tests/test_crd_validation.py for the API server."""

from __future__ import annotations

import pytest
import torch

from kubecua_api.reward import RewardConfig, RewardPenalties
from kubecua_trainer.config import AlgorithmConfig, ReplayConfig
from kubecua_trainer.learning.batch import assemble_batch
from kubecua_trainer.learning.replay import SuccessReplay
from kubecua_trainer.learning.reward import RewardTerms, group_rewards, shaped_reward, terms_of
from kubecua_trainer.rollout.groups import Group
from kubecua_trainer.rollout.records import EpisodeResult, Turn
from kubecua_trainer.tokens import Sample

CLICK, TYPE = "pyautogui.click(10, 20)", "pyautogui.write('red apple')"


def _turn(action: str | None, refused: bool = False) -> Turn:
    """None: a reply that did not parse (the episode loop sends feedback, no action)."""
    return Turn(None, "reply", action, refused=refused)


def _episode(
    key: str,
    score: float,
    actions: list[str | None],
    partial: float | None = None,
    partial_error: str | None = None,
    refused: tuple[int, ...] = (),
) -> EpisodeResult:
    ep = EpisodeResult("t", "s0001-g00", key)
    ep.turns = [_turn(a, i in refused) for i, a in enumerate(actions)]
    ep.score(score)
    ep.partial, ep.partial_error = partial, partial_error
    ids = torch.tensor([1, 2, len(key)])
    ep.samples = [Sample(ids, torch.tensor([False, True, True]), torch.zeros(3), None, None)]
    return ep


def _terms(**kw: object) -> RewardTerms:
    base: dict = {"score": 0.0, "partial": None, "partial_failed": False, "turns": 1,
                  "invalid": 0, "repeats": 0}  # fmt: skip
    return RewardTerms(**{**base, **kw})


def test_the_default_reward_is_the_evaluators_score_alone() -> None:
    terms = _terms(score=0.5, partial=0.9, turns=4, invalid=2, repeats=1)
    assert shaped_reward(terms, RewardConfig()) == 0.5


def test_score_term_is_weighted() -> None:
    # 2 x 0.75 = 1.5
    assert shaped_reward(_terms(score=0.75), RewardConfig(score=2.0)) == pytest.approx(1.5)


def test_partial_term_adds_weight_times_the_tasks_partial_credit() -> None:
    # Slime-OSWorld's shape: 1 x 0 + 0.3 x 0.8 = 0.24
    cfg = RewardConfig(partial=0.3)
    assert shaped_reward(_terms(score=0.0, partial=0.8), cfg) == pytest.approx(0.24)
    assert shaped_reward(_terms(score=0.0, partial=None), cfg) == 0.0  # the task declares none


def test_format_term_is_the_fraction_of_valid_replies() -> None:
    # 4 replies, 1 invalid: 0.2 x 3/4 = 0.15
    cfg = RewardConfig(score=0.0, format=0.2)
    assert shaped_reward(_terms(turns=4, invalid=1), cfg) == pytest.approx(0.15)
    assert shaped_reward(_terms(turns=0), cfg) == 0.0  # no reply, nothing valid


def test_each_penalty_is_subtracted_per_occurrence() -> None:
    cfg = RewardConfig(penalties=RewardPenalties(repeat=0.05, invalid=0.1, turn=0.01))
    # 1 - 2 x 0.05 - 3 x 0.1 - 5 x 0.01 = 0.55
    terms = _terms(score=1.0, turns=5, invalid=3, repeats=2)
    assert shaped_reward(terms, cfg) == pytest.approx(0.55)


def test_terms_of_an_episode_count_repeats_invalid_replies_and_turns() -> None:
    # turns: click, click (a repeat), no parse (invalid), type, type refused by the sandbox
    # (invalid, and not a repeat: nothing ran), type again (a repeat of the previous action)
    ep = _episode("e0", 1.0, [CLICK, CLICK, None, TYPE, TYPE, TYPE], partial=0.6, refused=(4,))
    terms = terms_of(ep)
    assert (terms.turns, terms.invalid, terms.repeats) == (6, 2, 2)
    assert terms.valid_fraction == pytest.approx(4 / 6)
    assert (terms.score, terms.partial, terms.partial_failed) == (1.0, 0.6, False)


def test_the_module_example_sums_every_term() -> None:
    # reward.py's docstring: 1 + 0.3 x 0.6 + 0.1 x 2/3 - 0.05 - 0.1 - 0.03 = 1.066667
    ep = _episode("e0", 1.0, [CLICK, CLICK, None], partial=0.6)
    cfg = RewardConfig(
        partial=0.3, format=0.1, penalties=RewardPenalties(repeat=0.05, invalid=0.1, turn=0.01)
    )
    assert shaped_reward(terms_of(ep), cfg) == pytest.approx(1.066667, rel=1e-6)


def test_a_failed_partial_metric_takes_the_groups_mean_partial() -> None:
    # partials [0.8, 0.2, failed] -> the failed one gets 0.5: [1 + 0.4, 0.1, 0.25]
    cfg = RewardConfig(partial=0.5)
    terms = [_terms(score=1.0, partial=0.8), _terms(partial=0.2),
             _terms(partial=None, partial_failed=True)]  # fmt: skip
    assert group_rewards(terms, cfg) == pytest.approx([1.4, 0.1, 0.25])
    # every one failed: the term is left out of all of them alike
    failed = _terms(partial=None, partial_failed=True)
    assert group_rewards([failed, _terms(score=1.0, partial_failed=True)], cfg) == [0.0, 1.0]


def test_equal_success_but_different_shaped_rewards_gives_advantages() -> None:
    """Every episode failed (score 0): the score alone gives no signal, the partial credit does.
    Shaped rewards 0.3 x [0.9, 0.5, 0.1, 0.5] = [0.27, 0.15, 0.03, 0.15]: mean 0.15, sample std
    sqrt((0.0144 + 0 + 0.0144 + 0) / 3) = 0.097980 -> [1.224745, 0, -1.224745, 0]."""
    group = Group("t", "s0001-g00")
    group.episodes = [_episode(f"e{i}", 0.0, [TYPE], partial=p)
                      for i, p in enumerate([0.9, 0.5, 0.1, 0.5])]  # fmt: skip
    algo = AlgorithmConfig()
    assert assemble_batch([group], algo, None).zero_variance_groups == 1  # score alone: skipped

    batch = assemble_batch([group], algo, None, RewardConfig(partial=0.3))
    assert batch.zero_variance_groups == 0
    assert [s.advantage for s in batch.samples] == pytest.approx(
        [1.224745, 0.0, -1.224745, 0.0], rel=1e-4, abs=1e-6
    )
    assert [e.shaped_reward for e in group.episodes] == pytest.approx([0.27, 0.15, 0.03, 0.15])
    assert [s.reward for s in batch.samples] == pytest.approx([0.27, 0.15, 0.03, 0.15])
    stats = batch.stats()  # success stays the evaluator's: 0 of 4
    assert (stats["reward_mean"], stats["success_rate"]) == (0.0, 0.0)
    assert stats["shaped_reward_mean"] == pytest.approx(0.15)


def test_a_failed_partial_is_counted_and_moves_no_advantage() -> None:
    # partials [0.9, 0.1, failed], scores 0: the failed one gets their mean 0.5, so its
    # advantage is 0. Shaped 0.3 x [0.9, 0.1, 0.5] = [0.27, 0.03, 0.15]: mean 0.15, sample std
    # sqrt((0.0144 + 0.0144) / 2) = 0.12 -> [1, -1, 0]
    group = Group("t", "s0001-g00")
    group.episodes = [_episode("e0", 0.0, [TYPE], partial=0.9),
                      _episode("e1", 0.0, [TYPE], partial=0.1),
                      _episode("e2", 0.0, [TYPE], partial_error="getter raised")]  # fmt: skip
    batch = assemble_batch([group], AlgorithmConfig(), None, RewardConfig(partial=0.3))
    assert [s.advantage for s in batch.samples] == pytest.approx([1.0, -1.0, 0.0], abs=1e-4)
    assert batch.partial_failures == 1
    assert batch.stats()["partial_failures"] == 1.0


def test_replay_injects_a_success_with_the_shaped_reward_it_earned() -> None:
    cfg = RewardConfig(penalties=RewardPenalties(turn=0.1))
    algo = AlgorithmConfig(replay=ReplayConfig(enabled=True))
    replay = SuccessReplay()
    first = Group("t", "s0001-g00")
    first.episodes = [_episode("e0", 1.0, [TYPE, "DONE"]), _episode("e1", 0.0, [TYPE])]
    assemble_batch([first], algo, replay, cfg)  # stores the success: 1 - 2 x 0.1 = 0.8
    second = Group("t", "s0002-g00")
    second.episodes = [_episode(f"e{i}", 0.0, [TYPE]) for i in range(3)]  # -0.1 each
    batch = assemble_batch([second], algo, replay, cfg)
    assert batch.replay_injections == 1
    # [-0.1, -0.1, -0.1, 0.8]: mean 0.125, std 0.45 -> [-0.5, -0.5, -0.5, 1.5]
    assert [s.advantage for s in batch.samples] == pytest.approx([-0.5, -0.5, -0.5, 1.5], rel=1e-4)


def test_per_turn_samples_carry_the_shaped_reward_discounted() -> None:
    algo = AlgorithmConfig(mode="perTurn", turn_discount=0.5)
    ep = _episode("e0", 1.0, [CLICK, TYPE])
    first = ep.samples[0]  # perTurn mode: one sample per turn
    ep.samples.append(Sample(first.input_ids, first.loss_mask, first.behaviour_logprobs, None,
                             None))  # fmt: skip
    group = Group("t", "s0001-g00")
    group.episodes = [ep, _episode("e1", 0.0, [CLICK])]
    assemble_batch([group], algo, None, RewardConfig(score=2.0))
    assert [s.reward for s in ep.samples] == [1.0, 2.0]  # 2 x 1, discounted 0.5 for turn 0
