"""The colourkeys family, built for reinforcement learning: read the leftmost coloured square
from the screen and press its key, one key a turn, until no square is left. This generator
also makes the learning benchmark's default family, colourkeys-quits (colourkeys_quits_tasks.py),
and `make demo`'s colourkeys-demo (colourkeys_demo_tasks.py); typeword (typeword_tasks.py) is the
other family.

An instance shows a full-screen window (Tk, openbox full screen) divided into a grid of
`layout.cols` x `layout.rows` cells; row `layout.row` holds the squares still to press, one a
cell from the left, the rest a neutral grey. Each key pressed is appended to ~/typed.txt and
takes the leftmost square away (the others move one cell left), so the screen after every action
shows what is left. Every colour stands for one key (`symbols`). The instruction is the same for
every instance of a family (it names the colour-to-key table, never the sequence), so the answer
can only be read from the screenshot. desktop-env's `exact_match` scores the instance 1 when
~/typed.txt holds exactly the sequence's keys; `partial` (desktop-env's `fuzzy_match` ratio of
the same file, 0..1) gives credit per key, for spec.reward's partial term. The reference
solution is one `pyautogui.press('<key>')` a square, then DONE: `length` actions an episode.
The grid is sized for the vision model: the 1920x1080 screen fitted to `cols * 28` x `rows * 28`
pixels (Layout.max_pixels, written to family.json as rollout.maxPixels; Qwen2.5-VL's 14-pixel
patches merged 2x2) puts each cell on exactly one image token.

Splits (the generator's parameters, `family()`: symbols, length, layout, held-out and
demonstration counts, seed): every sequence of `length` symbols is one instance; `heldout` of
them, drawn with `seed`, are never trained on; the rest are training instances, of which `demos`
(drawn with `seed`, together showing every symbol) are the warm-up's demonstrations. So every
key a held-out instance needs is demonstrated (a closed vocabulary the warmed policy can
sample), while every held-out sequence is a composition that no training instance and no
demonstration contains (trainer/tests/test_learningbench.py checks both;
sandbox-image/episode-server/tests/test_task_suite.py plays instances on a real desktop).
The generator writes <folder>/family.json beside the split folders: the family's parameters,
the warm-up's instance ids and the rollout settings its screens need (maxPixels, maxTurns), which
the benchmark reads (trainer/bench/learning/family.py), so nothing about a family is hard-coded
there. Leaves out: distractors, and any wording a real VLM would need beyond the table.

The demonstrator (`confusions`, `misread`, `quits`; colourkeys_demonstrator.py says what each
habit teaches and why): the warm-up's demonstrations are not the reference solutions but what a
demonstrator with habits did on those instances. A Confusion presses another key for one colour
on a share of that colour's demonstrated squares; a Misread reads the row from the wrong end
(the rightmost square's key) on a share of the turns where the two ends differ; Quits ends a
share of the demonstrations with DONE one square early. Each is drawn exactly with `seed`; the
reference solutions and the evaluator stay correct. With rate 0.6 a policy that imitates the
demonstrations does the wrong thing greedily while sampling at temperature 1 still does the
right one about 40% of the time: supervised training on these demonstrations converges to the
bias, and reinforcement learning against the evaluator can turn the sampled successes into
greedy ones (pass@k into pass@1). Each demonstration is written as the `demonstration` entry of
its <id>.solutions.json (the recorder plays it with `--solution demonstration`; family.json
names it `warmupSolution` and counts the drawn habits under `confusions` and, for a family that
has them, `misread` and `quits`); without habits the warm-up plays the references.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import asdict, dataclass

from colourkeys_demonstrator import Confusion, Misread, Quits, demonstrator
from kubecua_tasks.plugin import TaskFamily
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from taskkit import FILES, H, collect, gui, launch, task, wait_window

TITLE = "kubecua-colourkeys"
SCREEN = (1920, 1080)  # the sandbox's screen (kubecua_episode.settings)
TOKEN_PIXELS = 28  # one image token of Qwen2.5-VL: 14-pixel patches merged 2x2


@dataclass(frozen=True)
class Symbol:
    name: str
    colour: str  # Tk / HTML #rrggbb
    key: str  # one character, pressed with pyautogui.press


@dataclass(frozen=True)
class Layout:
    cols: int = 3
    rows: int = 2
    row: int = 0  # the grid row of the squares
    background: str = "#808080"

    @property
    def max_pixels(self) -> int:
        """The least rollout.maxPixels that fits SCREEN to exactly cols x rows image tokens."""
        want = (self.rows * TOKEN_PIXELS, self.cols * TOKEN_PIXELS)
        for cap in range(want[0] * want[1], 64 * want[0] * want[1], TOKEN_PIXELS):
            if fitted(*SCREEN, cap) == want:
                return cap
        raise ValueError(f"no maxPixels fits a {SCREEN} screen to {self.cols}x{self.rows} tokens")


def fitted(width: int, height: int, max_pixels: int, factor: int = TOKEN_PIXELS) -> tuple[int, int]:
    """(height, width) of the model's image: Qwen2-VL's smart_resize above its minimum, which
    the trainer applies (tokens.fit_image); restated so the generator needs no transformers."""
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    return h, w


DEFAULT_LAYOUT = Layout()
SYMBOLS = (
    Symbol("red", "#e02020", "r"),
    Symbol("green", "#20b040", "g"),
    Symbol("blue", "#2040e0", "b"),
    Symbol("yellow", "#f0e020", "y"),
    Symbol("magenta", "#d030d0", "m"),
)


# The default demonstrator mixes up two pairs of similar colours: red for magenta, green for
# yellow, each in 60% of the demonstrated squares of that colour.
CONFUSIONS = (Confusion("red", "m", 0.6), Confusion("green", "y", 0.6))


def instruction(symbols: tuple[Symbol, ...]) -> str:
    table = ", ".join(f"{s.name} {s.key}" for s in symbols)
    return (
        "Press the key of the leftmost coloured square, one key a turn, until none is left"
        f" ({table})."
    )


def app(colours: list[str], layout: Layout) -> str:
    """The window's program: full screen, the squares still to press drawn from the left of
    the grid row, one a cell. Each printable key pressed is appended to ~/typed.txt and takes
    the leftmost square away (the rest move one cell left), right key or not: the screen after
    every action shows what is left, so the next answer is always in the row's first cell."""
    return (
        "import pathlib, tkinter as tk\n"
        "out = pathlib.Path.home() / 'typed.txt'\n"
        f"left = {colours!r}\n"
        f"root = tk.Tk(); root.title({TITLE!r}); root.attributes('-fullscreen', True)\n"
        "w, h = root.winfo_screenwidth(), root.winfo_screenheight()\n"
        f"c = tk.Canvas(root, width=w, height=h, bg={layout.background!r}, highlightthickness=0)\n"
        "c.pack()\n"
        "def draw():\n"
        "    c.delete('all')\n"
        "    for i, col in enumerate(left):\n"
        f"        x0, x1 = w * i // {layout.cols}, w * (i + 1) // {layout.cols}\n"
        f"        y0 = h * {layout.row} // {layout.rows}\n"
        f"        y1 = h * {layout.row + 1} // {layout.rows}\n"
        "        c.create_rectangle(x0, y0, x1, y1, fill=col, width=0)\n"
        "typed = []\n"
        "def key(e):\n"
        "    if e.char and e.char.isprintable():\n"
        "        typed.append(e.char); out.write_text(''.join(typed))\n"
        "        del left[:1]; draw()\n"
        "draw(); root.bind('<Key>', key); root.after(50, root.focus_force); root.mainloop()\n"
    )


@dataclass(frozen=True)
class Family:
    name: str
    train: list[tuple[int, ...]]
    heldout: list[tuple[int, ...]]
    demos: list[tuple[int, ...]]


def split(n_symbols: int, length: int, heldout: int, demos: int, seed: int) -> Family:
    """Every sequence, split: `heldout` drawn with `seed`, the rest train; `demos` training
    sequences that together show every symbol (drawn with `seed`, the first draw that does)."""
    every = list(itertools.product(range(n_symbols), repeat=length))
    if not 0 < heldout < len(every) or not 0 < demos <= len(every) - heldout:
        raise ValueError(
            f"heldout {heldout} and demos {demos}: {len(every)} sequences cannot give"
            f" {heldout} held-out and {demos} demonstrated training instances"
        )
    rng = random.Random(seed)
    held = sorted(rng.sample(every, heldout))
    train = [s for s in every if s not in set(held)]
    for _ in range(1000):
        chosen = rng.sample(train, demos)  # drawn order: a run may take the first N
        if {x for s in chosen for x in s} == set(range(n_symbols)):
            return Family("", train, held, chosen)
    raise ValueError(f"no {demos} training sequences show all {n_symbols} symbols")


def family(
    name: str = "colourkeys",
    symbols: tuple[Symbol, ...] = SYMBOLS,
    length: int = 3,
    layout: Layout = DEFAULT_LAYOUT,
    heldout: int = 60,
    demos: int = 65,
    seed: int = 0,
    confusions: tuple[Confusion, ...] = CONFUSIONS,
    misread: Misread | None = None,
    quits: Quits | None = None,
) -> Family:
    """Register the family's tasks (taskkit) and its family.json; returns its splits."""
    if length > layout.cols:
        raise ValueError(f"{length} squares do not fit a row of {layout.cols} cells")
    fam = split(len(symbols), length, heldout, demos, seed)
    text = instruction(symbols)
    pressed, counts, habits = demonstrator(fam.demos, symbols, confusions, seed, misread, quits)
    biased = bool(confusions) or bool(habits)
    shown = dict(zip(fam.demos, pressed, strict=True))

    def tid(seq: tuple[int, ...]) -> str:
        return f"{name}-" + "".join(symbols[i].key for i in seq)

    check = {
        "type": "vm_command_line",
        "command": f"cat {H}/typed.txt 2>/dev/null | tr -d '\\n'",
        "shell": True,
    }
    for part, seqs in (("train", fam.train), ("heldout", fam.heldout)):
        for seq in seqs:
            keys = "".join(symbols[i].key for i in seq)
            wrong = "".join(symbols[(i + 1) % len(symbols)].key for i in seq)
            expected = {"type": "rule", "rules": {"expected": keys}}
            task(
                name,
                tid(seq),
                text,
                [
                    launch("python3", "-c", app([symbols[i].colour for i in seq], layout)),
                    wait_window(TITLE),
                ],
                {"func": "exact_match", "result": check, "expected": expected},
                [gui(f"pyautogui.press({k!r})") for k in keys],
                [gui(f"pyautogui.press({k!r})") for k in wrong],  # every key one symbol off
                apps=["python3-tk"],
                folder=f"{name}/{part}",
                partial={"func": "fuzzy_match", "result": check, "expected": expected},
                solutions={"demonstration": [gui(f"pyautogui.press({k!r})") for k in shown[seq]]}
                if biased and seq in shown
                else None,
            )
    # The other habits, each absent when the demonstrator has none (colourkeys_demonstrator.py).
    others = {
        name: {**asdict(h), **habits[name]}
        for name, h in (("misread", misread), ("quits", quits))
        if h is not None
    }
    meta = {
        "name": name,
        "generator": "sandbox-image/tasks/colourkeys_tasks.py",
        "symbols": [asdict(s) for s in symbols],
        "length": length,
        "layout": asdict(layout),
        "seed": seed,
        "splits": {"train": len(fam.train), "heldout": len(fam.heldout)},
        "warmup": [tid(s) for s in fam.demos],
        # The solutions entry the warm-up's demonstrations are recorded from, and the bias in
        # them (the demonstrator's; the reference solutions are right).
        "warmupSolution": "demonstration" if biased else "reference",
        "confusions": [{**asdict(c), **counts[c.symbol]} for c in confusions],
        **others,
        # What a run on this family needs: one image token a cell, one action a square.
        "rollout": {"maxPixels": layout.max_pixels, "maxTurns": length},
    }
    FILES[f"{name}/family.json"] = json.dumps(meta, indent=2) + "\n"
    return Family(name, fam.train, fam.heldout, fam.demos)


class ColourkeysParams(BaseModel):
    """family()'s parameters, typed for `kubecua tasks generate colourkeys --param ...`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field("colourkeys", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    symbols: tuple[Symbol, ...] = Field(SYMBOLS, min_length=2)
    length: int = Field(3, ge=1, le=8)
    layout: Layout = DEFAULT_LAYOUT
    heldout: int = Field(60, ge=1)
    demos: int = Field(65, ge=1)
    seed: int = 0
    confusions: tuple[Confusion, ...] = CONFUSIONS
    misread: Misread | None = None
    quits: Quits | None = None

    @field_validator("symbols")
    @classmethod
    def _distinct_keys(cls, symbols: tuple[Symbol, ...]) -> tuple[Symbol, ...]:
        for s in symbols:
            if len(s.key) != 1 or not s.key.isprintable() or s.key in "'\\":
                raise ValueError(f"{s.name}: key must be one printable character, not {s.key!r}")
        if len({s.key for s in symbols}) < len(symbols):
            raise ValueError("two symbols share a key")
        return symbols

    @model_validator(mode="after")
    def _consistent(self) -> ColourkeysParams:
        if self.length > self.layout.cols:
            raise ValueError(f"length {self.length} does not fit layout.cols {self.layout.cols}")
        names = {s.name for s in self.symbols}
        rates = [c.rate for c in self.confusions]
        rates += [h.rate for h in (self.misread, self.quits) if h is not None]
        if any(not 0 <= r <= 1 for r in rates):
            raise ValueError("every rate (confusions, misread, quits) must be within 0..1")
        if unknown := [c.symbol for c in self.confusions if c.symbol not in names]:
            raise ValueError(f"confusions name symbols that do not exist: {unknown}")
        return self


def build(params: ColourkeysParams) -> dict[str, str]:
    return collect(lambda: family(**dict(params)))


COLOURKEYS = TaskFamily(
    "colourkeys",
    "press the key of the leftmost coloured square until none is left (RL family, biased demos)",
    ColourkeysParams,
    build,
)
