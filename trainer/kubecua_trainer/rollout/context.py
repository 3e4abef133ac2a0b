"""How an episode's model context is kept, one class per training mode (algorithm.mode).

- trajectory: one Conversation grows for the whole episode; one sample with the full exact
  context, trained with the episode's reward.
- perTurn: every turn gets a fresh exact prompt with only the last K screenshots (a sliding
  window); each turn is one sample, rewarded reward * turn_discount^(turns after it).
Both hand the engine exactly the ids and images they later train on (tokens.py keeps that exact).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PIL import Image

from kubecua_trainer.tokens import Conversation, Sample, build_turn_prompt

if TYPE_CHECKING:
    from kubecua_trainer.engines.base import Generation
    from kubecua_trainer.model import Policy


class EpisodeContext(Protocol):
    def add_user(self, text: str, image: Image.Image | None) -> None: ...
    def prompt(self) -> tuple[list[int], list[Image.Image]]: ...
    def add_generation(self, gen: Generation, text: str) -> None: ...
    def samples(self, reward: float) -> list[Sample]: ...


class TrajectoryContext:
    def __init__(self, policy: Policy, system_prompt: str, max_pixels: int, **_: object) -> None:
        self.conv = Conversation(policy, system_prompt, max_pixels)
        self.turns = 0

    def add_user(self, text: str, image: Image.Image | None) -> None:
        self.conv.add_user(text, image)

    def prompt(self) -> tuple[list[int], list[Image.Image]]:
        return self.conv.prompt()

    def add_generation(self, gen: Generation, text: str) -> None:
        self.conv.add_generation(gen)
        self.turns += 1

    def samples(self, reward: float) -> list[Sample]:
        if self.turns == 0:
            return []
        sample = self.conv.to_sample()
        sample.reward = reward
        return [sample]


class PerTurnContext:
    def __init__(
        self,
        policy: Policy,
        system_prompt: str,
        max_pixels: int,
        keep_screenshots: int = 3,
        turn_discount: float = 1.0,
    ) -> None:
        self.policy, self.system_prompt, self.max_pixels = policy, system_prompt, max_pixels
        self.keep, self.discount = keep_screenshots, turn_discount
        self.history: list[tuple[str, Image.Image | None, str | None]] = []
        self._conv: Conversation | None = None
        self._samples: list[Sample] = []

    def add_user(self, text: str, image: Image.Image | None) -> None:
        self.history.append((text, image, None))

    def prompt(self) -> tuple[list[int], list[Image.Image]]:
        self._conv = build_turn_prompt(
            self.policy, self.system_prompt, self.history, self.keep, self.max_pixels
        )
        return self._conv.prompt()

    def add_generation(self, gen: Generation, text: str) -> None:
        assert self._conv is not None, "prompt() first"
        self._conv.add_generation(gen)
        self._samples.append(self._conv.to_sample())
        user_text, image, _ = self.history[-1]
        self.history[-1] = (user_text, image, text)
        self._conv = None

    def samples(self, reward: float) -> list[Sample]:
        """Turn t of T gets reward * d^(T-1-t): with d=0.9 and 3 turns, 0.81r, 0.9r, r."""
        last = len(self._samples) - 1
        for t, sample in enumerate(self._samples):
            sample.reward = reward * self.discount ** (last - t)
        return list(self._samples)


CONTEXTS: dict[str, type[TrajectoryContext] | type[PerTurnContext]] = {
    "trajectory": TrajectoryContext,
    "perTurn": PerTurnContext,
}
