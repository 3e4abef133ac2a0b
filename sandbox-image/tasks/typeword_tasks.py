"""The typeword family: one parameterised task, `Type '<colour> <thing>' in the box.`, for the
learning benchmark (`make bench-learning`), the demo and the trainer's learning check.

Each instance opens a small Tk window whose text box (focused) saves what is typed to
~/typed.txt; it succeeds when that file holds exactly the two words. The reference solution is
one action in the agent's action space (`pyautogui.write('red apple')`, then DONE), so the
recorder can play it and a model can learn to copy the words from the instruction. Instances
differ by their pair of words: 10 colours x 10 things. Held-out pairs are those whose thing
index minus colour index is 3, 6 or 9 (mod 10): 30 pairs, every word in 3 of them; the other
70 are for training. Every held-out word is also in training pairs (in the same slot): what a
held-out instance tests is a combination never trained on. The warm-up's demonstrations are
the pairs (i, i) and (i, i + 1) for i < 8 (WARMUP_PAIRS, 16 of them): two colours and one
thing are never demonstrated.
Layout, the split in the folder name (tasks.path selects a split):

    typeword/train/typeword-<colour>-<thing>.json     70 instances GRPO trains on
    typeword/heldout/typeword-<colour>-<thing>.json   30 instances never trained on

The nested folders keep the family out of the suite-wide sweep (test_task_suite.py globs
<area>/*.json); that test plays a few instances on their own. Cheap by design: no app but
python3-tk, one action, a one-line check (about 2 s an episode on a local desktop, see
docs/benchmarks.md). Leaves out: anything that needs the screenshot (the words are in the text)."""

from __future__ import annotations

import json
from typing import Annotated

from kubecua_tasks.plugin import TaskFamily
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from taskkit import FILES, H, collect, gui, launch, task, wait_window

# Plain lowercase words; the benchmark's tokenizer makes each one token (tiny_models.py).
COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "pink", "brown", "black", "white"]
THINGS = ["apple", "banana", "cherry", "grape", "lemon", "mango", "melon", "peach", "pear", "plum"]
HELDOUT_OFFSETS = (3, 6, 9)
WARMUP_PAIRS = [(c, c + d) for c in range(8) for d in (0, 1)]
TITLE = "kubecua-typing"

# The window: a focused Entry that writes its whole text to ~/typed.txt on every key release.
APP = (
    "import pathlib, tkinter as tk\n"
    "out = pathlib.Path.home() / 'typed.txt'\n"
    f"root = tk.Tk(); root.title({TITLE!r}); root.geometry('420x90+60+60')\n"
    "tk.Label(root, text='Type here:').pack(anchor='w')\n"
    "box = tk.Entry(root, font=('DejaVu Sans', 18)); box.pack(fill='x')\n"
    "box.bind('<KeyRelease>', lambda _e: out.write_text(box.get()))\n"
    "root.after(50, box.focus_force); root.mainloop()\n"
)


def instruction(words: str) -> str:
    # Single quotes, as in the reply: the trainer writes actions back through ast.unparse
    # (quotes become single), and a copy learns faster when both sides quote alike.
    return f"Type '{words}' in the box."


def typeword(name: str, split: str, words: str, wrong: str) -> None:
    task(
        name,
        f"{name}-" + words.replace(" ", "-"),
        instruction(words),
        [launch("python3", "-c", APP), wait_window(TITLE)],
        {
            "func": "exact_match",
            "result": {
                "type": "vm_command_line",
                "command": f"cat {H}/typed.txt 2>/dev/null | tr -d '\\n'",
                "shell": True,
            },
            "expected": {"type": "rule", "rules": {"expected": words}},
        },
        [gui(f"pyautogui.write('{words}')")],
        [gui(f"pyautogui.write('{wrong}')")],  # the right colour, the next thing
        apps=["python3-tk"],
        folder=f"{name}/{split}",
    )


Word = Annotated[str, StringConstraints(pattern=r"^[a-z]+$", max_length=20)]


class TypewordParams(BaseModel):
    """The family's words; held out: the pairs whose thing index minus colour index is one of
    `heldout_offsets` (mod the number of words)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field("typeword", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    colours: tuple[Word, ...] = Field(tuple(COLOURS), min_length=3)
    things: tuple[Word, ...] = Field(tuple(THINGS), min_length=3)
    heldout_offsets: tuple[int, ...] = Field(HELDOUT_OFFSETS, min_length=1)

    @model_validator(mode="after")
    def _square(self) -> TypewordParams:
        if len(self.things) != len(self.colours):
            raise ValueError(f"things has {len(self.things)} words, colours {len(self.colours)}")
        n = len(self.things)
        if not all(0 < k < n for k in self.heldout_offsets):
            raise ValueError(f"heldout_offsets must lie within 1..{n - 1}")
        return self


def family(p: TypewordParams) -> None:
    n = len(p.things)
    split = {"train": 0, "heldout": 0}
    for c, colour in enumerate(p.colours):
        for t, thing in enumerate(p.things):
            part = "heldout" if (t - c) % n in p.heldout_offsets else "train"
            split[part] += 1
            typeword(p.name, part, f"{colour} {thing}", f"{colour} {p.things[(t + 1) % n]}")
    warmup = [(c, c + d) for c in range(n - 2) for d in (0, 1)]  # n = 10: WARMUP_PAIRS
    FILES[f"{p.name}/family.json"] = (
        json.dumps(
            {
                "name": p.name,
                "generator": "sandbox-image/tasks/typeword_tasks.py",
                "splits": split,
                "warmup": [f"{p.name}-{p.colours[c]}-{p.things[t]}" for c, t in warmup],
                # 28x28, one image token: the words are in the instruction; one action types them.
                "rollout": {"maxPixels": 784, "maxTurns": 1},
            },
            indent=2,
        )
        + "\n"
    )


TYPEWORD = TaskFamily(
    "typeword",
    "type the two words the instruction names into a text box (one action)",
    TypewordParams,
    lambda p: collect(lambda: family(p)),
)
