"""The trajectory format: one JSON line per episode, screenshots as files beside the JSONL file.

The trainer writes its own episodes this way (episodes/step-NNNN.jsonl), evaluations write theirs
(evaluations/step-NNNN/episodes.jsonl), the recorder writes demonstrations this way, and the
warm-up reads any of them: the successes of one run are the next run's demonstrations.
docs/trajectories.md documents every field. A line (format kubecua.trajectory/v1):

    {"format": "kubecua.trajectory/v1", "key": "s0003-g01-e05", "task_id": "gedit-greeting",
     "instruction": "...", "outcome": "success", "reward": 1.0, "step": 3,
     "screen_size": [1920, 1080], "image_size": [280, 168],
     "turns": [{"reply": "```python\\npyautogui.click(10, 20)\\n```", "action": "...",
                "screenshot": "screens/<key>/turn-00.png", ...}, ...],
     "final_screenshot": "screens/<key>/final.png", ...}

- Screenshot paths are relative to the JSONL file's folder, so a folder can be moved whole.
- A screenshot file is what the desktop sent, at screen_size (readable at full size); a turn
  that showed no screenshot (feedback on an invalid reply) has screenshot null.
- Replies are the model's text; coordinates in them refer to an image of image_size (what the
  model saw). A reader that shows the screenshot at another size rescales them.
- `action` is what was sent to the sandbox (screen coordinates), null for an invalid reply.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from kubecua_trainer.rollout.records import EpisodeResult

FORMAT = "kubecua.trajectory/v1"


def write_trajectories(jsonl: str | Path, episodes: Iterable[EpisodeResult], **extra: Any) -> Path:
    """Append one line per episode to `jsonl` (extra keys, e.g. step=3, go on every line) and
    write its screenshots under <jsonl's folder>/screens/<key>/."""
    path = Path(jsonl)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for ep in episodes:
            f.write(json.dumps(episode_record(ep, path.parent, **extra)) + "\n")
    return path


def episode_record(ep: EpisodeResult, folder: Path, **extra: Any) -> dict[str, Any]:
    """The JSON line of one episode; writes its screenshots under folder/screens/<key>/."""
    line: dict[str, Any] = {"format": FORMAT, **ep.summary(), **extra}
    shown = next((t.screenshot for t in ep.turns if t.screenshot is not None), None)
    shown = shown or ep.final_screenshot
    line["image_size"] = list(shown.size) if shown is not None else None
    line["screen_size"] = list(ep.screen_size) if ep.screen_size else line["image_size"]
    for i, (row, turn) in enumerate(zip(line["turns"], ep.turns, strict=True)):
        row["screenshot"] = _save(folder, ep.key, f"turn-{i:02d}", turn.screen, turn.screenshot)
    line["final_screenshot"] = _save(folder, ep.key, "final", ep.final_screen, ep.final_screenshot)
    return line


def _save(
    folder: Path, key: str, name: str, encoded: bytes | None, image: Image.Image | None
) -> str | None:
    """Write the desktop's own bytes when there are some (full size), else the model's image."""
    if encoded is None and image is None:
        return None
    out = folder / "screens" / key
    out.mkdir(parents=True, exist_ok=True)
    if encoded is not None:
        ext = ".jpg" if encoded[:3] == b"\xff\xd8\xff" else ".png"
        (out / f"{name}{ext}").write_bytes(encoded)
        return f"screens/{key}/{name}{ext}"
    assert image is not None
    image.save(out / f"{name}.png", optimize=False, compress_level=1)
    return f"screens/{key}/{name}.png"


@dataclass
class TrajectoryTurn:
    reply: str
    action: str | None
    screenshot: Path | None  # absolute
    feedback: str | None = None  # what the agent was told after this reply (next turn's text)


@dataclass
class Trajectory:
    """One line read back, screenshot paths made absolute."""

    task_id: str
    instruction: str
    outcome: str
    reward: float | None
    image_size: tuple[int, int] | None
    screen_size: tuple[int, int] | None
    turns: list[TrajectoryTurn] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)  # the whole line as written

    @property
    def succeeded(self) -> bool:
        return self.outcome == "success"

    def image(self, turn: int) -> Image.Image | None:
        shot = self.turns[turn].screenshot
        if shot is None:
            return None
        with Image.open(io.BytesIO(shot.read_bytes())) as img:
            return img.convert("RGB")


def read_trajectories(path: str | Path) -> Iterator[Trajectory]:
    """Every line of a JSONL file, or of every *.jsonl file under a folder (sorted)."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such trajectory file or folder")
    files = sorted(root.rglob("*.jsonl")) if root.is_dir() else [root]
    for f in files:
        for n, text in enumerate(f.read_text().splitlines(), start=1):
            if text.strip():
                yield _parse(json.loads(text), f.parent, f"{f}:{n}")


def _parse(line: dict[str, Any], folder: Path, where: str) -> Trajectory:
    if "turns" not in line or "task_id" not in line:
        raise ValueError(f"{where}: not a trajectory line (needs task_id and turns)")

    def size(v: Any) -> tuple[int, int] | None:
        return (int(v[0]), int(v[1])) if v else None

    turns = [
        TrajectoryTurn(
            str(t.get("reply", "")),
            t.get("action"),
            folder / t["screenshot"] if t.get("screenshot") else None,
            t.get("feedback"),
        )
        for t in line["turns"]
    ]
    return Trajectory(
        task_id=str(line["task_id"]),
        instruction=str(line.get("instruction", "")),
        outcome=str(line.get("outcome", "")),
        reward=line.get("reward"),
        image_size=size(line.get("image_size")),
        screen_size=size(line.get("screen_size")),
        turns=turns,
        record=line,
    )
