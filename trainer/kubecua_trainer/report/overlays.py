"""Where an agent's action lands on its screenshot: pure geometry for the report's overlays.

A reply's pyautogui code is parsed (rollout.agent.parse_action, then ast; nothing is executed)
into Marks in the coordinates of the image the model saw (image_size), following the mouse
through the code as pyautogui would: `moveTo(100, 50); click()` clicks at (100, 50), and
`mouseDown(); moveTo(...); mouseUp()` is a drag. Marks then become Shapes whose positions are
percentages of the image's width and height, so one SVG overlay fits the 320-pixel thumbnail
and the full-size screenshot alike.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

from kubecua_trainer.rollout.agent import ParseError, parse_action

Point = tuple[float, float]
_UNKNOWN = object()  # an argument that is not a literal (a variable, an expression)
_CLICKS = {"click": 1, "doubleClick": 2, "tripleClick": 3, "rightClick": 1, "middleClick": 1}
_BUTTONS = {"rightClick": "right", "middleClick": "middle"}


@dataclass(frozen=True)
class Mark:
    """One action, in image_size pixels. `points` is empty where the position is unknown (a
    click() before any coordinate), one point for click/move/scroll, the path for a drag."""

    kind: Literal["click", "move", "drag", "scroll", "keys", "wait", "signal"]
    points: tuple[Point, ...] = ()
    button: str = "left"
    clicks: int = 1
    text: str = ""


@dataclass(frozen=True)
class Shape:
    """What the SVG overlay draws. x, y (and x2, y2 for a line) are percentages of the image's
    width and height; a label with no position of its own goes in the top-left corner, as
    line `line` of a stack there."""

    kind: Literal["ring", "line", "label"]
    x: float
    y: float
    x2: float = 0.0
    y2: float = 0.0
    css: str = ""
    text: str = ""
    rings: int = 1
    arrow: bool = False
    corner: bool = False
    line: int = 0


def action_marks(reply: str) -> tuple[list[Mark], str | None]:
    """The marks of a reply, or ([], the parser's reason) for an invalid one.

    >>> action_marks("```python\\npyautogui.doubleClick(640, 360)\\n```")
    ([Mark(kind='click', points=((640, 360),), button='left', clicks=2, text='')], None)
    >>> action_marks("DONE")[0][0].text
    'DONE'
    """
    try:
        action = parse_action(reply)
    except ParseError as err:
        return [], str(err)
    if action.kind != "code":
        return [Mark("signal", text=action.kind)], None
    return marks_from_code(action.code), None


def marks_from_code(code: str) -> list[Mark]:
    """Follow the mouse through pyautogui calls (code already checked by parse_action).

    >>> [m.points for m in marks_from_code("pyautogui.moveTo(10, 20)\\npyautogui.dragTo(90, 20)")]
    [((10, 20),), ((10, 20), (90, 20))]
    """
    follow = _Mouse()
    for stmt in ast.parse(code).body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            follow.call(stmt.value)
    follow.release()
    return follow.marks


class _Mouse:
    """The cursor and button state while reading calls in order; emits Marks."""

    def __init__(self) -> None:
        self.at: Point | None = None
        self.path: list[Point] | None = None  # set between mouseDown and mouseUp
        self.marks: list[Mark] = []

    def call(self, call: ast.Call) -> None:
        name = ast.unparse(call.func).rsplit(".", 1)[-1]
        args = [_literal(a) for a in call.args]
        kw = {k.arg: _literal(k.value) for k in call.keywords if k.arg}
        if name in _CLICKS:
            self.click(name, args, kw)
        elif name in ("moveTo", "moveRel", "dragTo", "dragRel"):
            self.move(name, args, kw)
        elif name in ("mouseDown", "mouseUp"):
            self.goto(_xy(args, kw, self.at))
            if name == "mouseDown":
                self.path = [self.at] if self.at else []
            else:
                if self.path is not None and self.at and self.path[-1:] != [self.at]:
                    self.path.append(self.at)  # mouseUp(x, y) ends the drag at x, y
                self.release()
        elif name in ("scroll", "vscroll", "hscroll"):
            self.goto(_xy(args, kw, self.at, first=1))
            amount = args[0] if args else kw.get("clicks", "?")
            text = f"{'h' if name == 'hscroll' else ''}scroll {_show(amount)}"
            self.marks.append(Mark("scroll", self._here(), text=text))
        elif name == "sleep":
            self.marks.append(Mark("wait", text=f"wait {_show(args[0] if args else '?')} s"))
        else:
            text = _keys_text(name, args)
            if text:
                self.marks.append(Mark("keys", self._here(), text=text))

    def click(self, name: str, args: list[Any], kw: dict[str, Any]) -> None:
        self.goto(_xy(args, kw, self.at))
        clicks = kw.get("clicks", args[2] if name == "click" and len(args) > 2 else None)
        clicks = clicks if isinstance(clicks, int) else _CLICKS[name]
        button = kw.get("button", args[4] if name == "click" and len(args) > 4 else None)
        button = button if isinstance(button, str) else _BUTTONS.get(name, "left")
        self.marks.append(Mark("click", self._here(), button=button, clicks=clicks))

    def move(self, name: str, args: list[Any], kw: dict[str, Any]) -> None:
        start = self.at
        if name.endswith("Rel"):
            dx, dy = [*args, 0, 0][:2] if args else (kw.get("xOffset", 0), kw.get("yOffset", 0))
            if start is not None and _number(dx) and _number(dy):
                self.at = (start[0] + dx, start[1] + dy)
            else:
                self.at = None
        else:
            self.goto(_xy(args, kw, self.at))
        if self.path is not None:  # the button is held: this move is part of a drag
            self.path.extend([self.at] if self.at else [])
        elif name.startswith("drag"):
            path = tuple(p for p in (start, self.at) if p)
            self.marks.append(Mark("drag", path, button=str(kw.get("button", "left"))))
        else:
            self.marks.append(Mark("move", self._here()))

    def release(self) -> None:
        """mouseUp, or the end of the code with the button still down."""
        if self.path is None:
            return
        path, self.path = self.path, None
        if len(set(path)) > 1:
            self.marks.append(Mark("drag", tuple(path)))
        else:
            self.marks.append(Mark("click", self._here()))

    def goto(self, xy: Point | None) -> None:
        if xy is not None:
            self.at = xy

    def _here(self) -> tuple[Point, ...]:
        return (self.at,) if self.at else ()


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)  # literals only: never evaluates code
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNKNOWN


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _xy(args: list[Any], kw: dict[str, Any], at: Point | None, first: int = 0) -> Point | None:
    """The position a call names: (x, y) positional from `first`, an (x, y) tuple, or x=/y=;
    a coordinate left out keeps the cursor's (as pyautogui does)."""
    pos = args[first : first + 2]
    if pos and isinstance(pos[0], tuple | list) and len(pos[0]) == 2:
        pos = list(pos[0])
    x: Any = kw.get("x", pos[0] if pos else None)
    y: Any = kw.get("y", pos[1] if len(pos) > 1 else None)
    if x is None and y is None:
        return None
    x = at[0] if x is None and at else x
    y = at[1] if y is None and at else y
    return (x, y) if _number(x) and _number(y) else None


def _keys_text(name: str, args: list[Any]) -> str:
    first = args[0] if args else "?"
    if name in ("write", "typewrite"):  # typewrite also takes a list of key names
        return f"type {first!r}" if isinstance(first, str) else f"press {_show(first)}"
    if name == "hotkey":
        return "hotkey " + "+".join(map(_show, args))
    verbs = {"press": "press", "keyDown": "hold", "keyUp": "release"}
    return f"{verbs[name]} {_show(first)}" if name in verbs else ""


def _show(v: Any) -> str:
    if isinstance(v, list | tuple):
        return " ".join(map(_show, v))
    return "?" if v is _UNKNOWN else str(v)


def percent(point: Point, image_size: Sequence[int]) -> Point:
    """A point in image pixels as percentages of the image's width and height, clamped to the
    image (a model can name a point outside it).

    Worked example: the model saw 1280x720 and clicked (960, 180): 75% across, 25% down. On a
    320x180 thumbnail of the 1920x1080 screenshot that is pixel (240, 45); at full size
    (1440, 270), which is (960, 180) scaled by 1920/1280 = 1.5.
    >>> percent((960, 180), (1280, 720))
    (75.0, 25.0)
    >>> percent((-5, 800), (1280, 720))
    (0.0, 100.0)
    """
    w, h = image_size
    return (
        round(min(max(point[0] / w * 100, 0.0), 100.0), 3),
        round(min(max(point[1] / h * 100, 0.0), 100.0), 3),
    )


def shapes(marks: list[Mark], image_size: Sequence[int]) -> list[Shape]:
    """The overlay of one turn: rings at clicks, lines along moves and drags, labels for the
    rest (next to the cursor where it is known, else stacked in the top-left corner).

    >>> [(s.kind, s.x, s.y, s.rings) for s in shapes([Mark("click", ((640, 360),), clicks=2)],
    ...                                                  (1280, 720))]
    [('ring', 50.0, 50.0, 2)]
    """
    out: list[Shape] = []
    stacked = 0
    for mark in marks:
        pts = [percent(p, image_size) for p in mark.points]
        if mark.kind == "click" and pts:
            out.append(Shape("ring", *pts[0], css=f"click {mark.button}", rings=mark.clicks))
        elif mark.kind == "drag" and pts:
            segments = list(pairwise(pts)) or [(pts[0], pts[0])]
            for i, (a, b) in enumerate(segments):
                last = i == len(segments) - 1
                out.append(Shape("line", *a, *b, css="drag", arrow=last))
        elif mark.kind == "move" and pts:
            out.append(Shape("ring", *pts[0], css="move"))
        text = mark.text if mark.kind not in ("click", "drag", "move") else ""
        if text and pts and mark.kind != "signal":
            out.append(Shape("label", *pts[-1], css=mark.kind, text=text))
        elif text:
            out.append(
                Shape("label", 0.0, 0.0, css=mark.kind, text=text, corner=True, line=stacked)
            )
            stacked += 1
    return out


def describe(mark: Mark) -> str:
    """A caption line for a mark, in the model's image coordinates.

    >>> describe(Mark("click", ((5, 7),), button="right"))
    'right-click (5, 7)'
    >>> describe(Mark("drag", ((1, 2), (3, 4))))
    'drag (1, 2) → (3, 4)'
    """
    where = " → ".join(f"({_show(x)}, {_show(y)})" for x, y in mark.points)
    if mark.kind == "click":
        times = {1: "", 2: "double-", 3: "triple-"}.get(mark.clicks, f"{mark.clicks}x ")
        button = "" if mark.button == "left" else f"{mark.button}-"
        return f"{times}{button}click {where or 'at the cursor'}".strip()
    if mark.kind in ("drag", "move"):
        return f"{mark.kind} {where or 'from the cursor'}"
    return f"{mark.text} at {where}" if where and mark.kind == "scroll" else mark.text
