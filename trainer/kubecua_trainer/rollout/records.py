"""What one episode leaves behind: its turns (for the report), its samples (for the learner)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PIL import Image

# What a solved task is: the episode server's definition too (kubecua_sandbox_client.success).
from kubecua_sandbox_client import SUCCESS_SCORE as SUCCESS_SCORE
from kubecua_sandbox_client import StartFingerprint
from kubecua_sandbox_client import is_success as is_success

if TYPE_CHECKING:
    from kubecua_trainer.tokens import Sample

# Outcomes of an episode that ran to evaluation, and the infrastructure failures that exclude an
# episode from the loss (a failure is never trained as reward 0; docs/trajectories.md, `outcome`).
SCORED = ("success", "failure")
EXCLUDED = (
    "setup_failed",
    "sandbox_lost",
    "timeout",
    "evaluation_failed",
    "invalid_task",
    "invalid_sample",
)


@dataclass
class Turn:
    screenshot: Image.Image | None  # what the model saw before this reply (None: text feedback)
    reply: str  # decoded model output
    action: str | None  # what was sent to the sandbox; None when the reply was invalid
    feedback: str | None = None  # what the model is told about an invalid reply
    gen_tokens: int = 0
    gen_seconds: float = 0.0
    env_seconds: float | None = None  # the sandbox step call, when one was made
    screen: bytes | None = None  # the screenshot at the desktop's full size, as it sent it
    refused: bool = False  # the sandbox refused the parsed action (422): an invalid reply


@dataclass
class EpisodeResult:
    task_id: str
    group_id: str
    key: str  # unique within the run, e.g. "s0003-g01-e05"
    instruction: str = ""
    sandbox: str = ""
    outcome: str = "failure"
    detail: str = ""  # why an excluded episode failed
    reward: float | None = None  # the evaluator's score: success, evaluations and status
    partial: float | None = None  # the task's declared partial credit, when it has one
    partial_error: str | None = None  # why the partial metric failed (its term is left out)
    shaped_reward: float | None = None  # what training used (spec.reward; batch.assemble_batch)
    turns: list[Turn] = field(default_factory=list)
    final_screenshot: Image.Image | None = None
    final_screen: bytes | None = None  # full size, as the desktop sent it
    screen_size: tuple[int, int] | None = None  # the desktop's (width, height)
    samples: list[Sample] = field(default_factory=list)
    seconds: float = 0.0
    sandbox_seconds: float = 0.0  # time a sandbox was held for it (waiting for one excluded)
    # what it started from (the episode server's; None from an older server): groups.py compares
    start_fingerprint: StartFingerprint | None = None

    @property
    def excluded(self) -> bool:
        return self.outcome in EXCLUDED

    @property
    def gen_tokens(self) -> int:
        return sum(t.gen_tokens for t in self.turns)

    @property
    def gen_seconds(self) -> float:
        return sum(t.gen_seconds for t in self.turns)

    def fail(self, outcome: str, detail: str) -> None:
        assert outcome in EXCLUDED, outcome
        self.outcome, self.detail, self.reward, self.samples = outcome, detail, None, []
        self.partial, self.partial_error, self.shaped_reward = None, None, None

    def score(self, reward: float) -> None:
        self.reward = reward
        self.outcome = "success" if is_success(reward) else "failure"

    def summary(self) -> dict[str, Any]:
        """The JSON line saved per episode (screenshots are saved beside it as files)."""
        return {
            "key": self.key,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "sandbox": self.sandbox,
            "instruction": self.instruction,
            "outcome": self.outcome,
            "detail": self.detail,
            "reward": self.reward,
            "partial": self.partial,
            "partial_error": self.partial_error,
            "shaped_reward": self.shaped_reward,
            "seconds": round(self.seconds, 3),
            "start_screen": self.start_fingerprint.screen if self.start_fingerprint else None,
            "gen_tokens": self.gen_tokens,
            "samples": len(self.samples),
            "turns": [
                {
                    "reply": t.reply,
                    "action": t.action,
                    "feedback": t.feedback,
                    "refused": t.refused,
                    "gen_tokens": t.gen_tokens,
                    "env_seconds": t.env_seconds,
                }
                for t in self.turns
            ],
        }
