"""The agent format: the system prompt that explains the action space, and the action parser.

A reply must hold exactly one action: a ```python block of pyautogui calls, or one of the words
DONE (task finished), FAIL (task impossible) or WAIT (let the screen change). Anything else gets
`ParseError.feedback`, a short message that the episode loop sends back as the next user turn so
the model learns the format instead of the episode silently ending.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

SYSTEM_PROMPT = """You control a Linux desktop with mouse and keyboard to complete a task.
Each turn you see a screenshot of the screen ({width}x{height} pixels in the image you receive;
coordinates refer to that image). Reply with a short thought, then exactly one action:
- a Python code block using pyautogui, for example
```python
pyautogui.click(640, 360)
pyautogui.write("hello")
pyautogui.press("enter")
```
  allowed: click, doubleClick, tripleClick, rightClick, moveTo, dragTo, mouseDown, mouseUp,
  scroll, hscroll, write, typewrite, press, hotkey, keyDown, keyUp, and time.sleep(seconds);
- DONE when the task is complete;
- FAIL when the task cannot be done;
- WAIT to let the screen change before acting again.
Do not write anything after the action."""

# Every pyautogui function a reply may call, with where its screen coordinates sit: the parser
# reads the names (which calls are allowed), scale_coordinates the places (which numbers are
# pixels). "xy": the first two positional arguments or x=/y=; "offset": the same, as offsets
# (or xOffset=/yOffset=); "after": the 2nd and 3rd (scroll-like calls take the amount first);
# None: no coordinates.
PYAUTOGUI_CALLS: dict[str, Literal["xy", "offset", "after"] | None] = {
    "click": "xy",
    "doubleClick": "xy",
    "tripleClick": "xy",
    "rightClick": "xy",
    "middleClick": "xy",
    "moveTo": "xy",
    "moveRel": "offset",
    "dragTo": "xy",
    "dragRel": "offset",
    "mouseDown": "xy",
    "mouseUp": "xy",
    "scroll": "after",
    "hscroll": "after",
    "vscroll": "after",
    "write": None,
    "typewrite": None,
    "press": None,
    "hotkey": None,
    "keyDown": None,
    "keyUp": None,
}
ALLOWED_CALLS = frozenset(f"pyautogui.{name}" for name in PYAUTOGUI_CALLS) | {"time.sleep"}

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_WORD = re.compile(r"\b(DONE|FAIL|WAIT)\b\W*\Z")
_FORMAT_HINT = "Reply with one ```python code block of pyautogui calls, or with DONE, FAIL or WAIT."


@dataclass(frozen=True)
class Action:
    kind: Literal["code", "DONE", "FAIL", "WAIT"]
    code: str = ""

    @property
    def wire(self) -> str:
        """What the episode API's StepRequest.action carries."""
        return self.code if self.kind == "code" else self.kind


class ParseError(ValueError):
    """An invalid reply; `feedback` is the user turn that tells the model what to fix."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.feedback = f"Your last reply was not a valid action: {reason} {_FORMAT_HINT}"


def system_prompt(width: int, height: int, template: str | None = None) -> str:
    """The system prompt for a width x height screenshot: spec.rollout.systemPrompt or ours."""
    return (template or SYSTEM_PROMPT).format(width=width, height=height)


def first_user_text(instruction: str) -> str:
    """The first user turn's text; the screenshot follows it."""
    return f"Task: {instruction}\nThe current screen:"


def next_user_text(turn_no: int) -> str:
    """The text of user turn `turn_no` (1-based, so >= 2), before the new screenshot."""
    return f"Turn {turn_no}. The screen after your action:"


def reply_text(wire_action: str) -> str:
    """The reply that carries a wire action (the inverse of parse_action(...).wire).

    >>> reply_text("DONE"), reply_text("pyautogui.press('enter')")
    ('DONE', "```python\\npyautogui.press('enter')\\n```")
    """
    if wire_action in ("DONE", "FAIL", "WAIT"):
        return wire_action
    return f"```python\n{wire_action}\n```"


def parse_action(text: str) -> Action:
    """Parse one model reply into an Action or raise ParseError with feedback.

    >>> parse_action("Open it.\\n```python\\npyautogui.click(10, 20)\\n```").code
    'pyautogui.click(10, 20)'
    >>> parse_action("All set. DONE").kind
    'DONE'
    """
    blocks = _CODE_BLOCK.findall(text)
    if len(blocks) > 1:
        raise ParseError(f"found {len(blocks)} code blocks; send exactly one.")
    if blocks:
        code = blocks[0].strip()
        _check_code(code)
        return Action("code", code)
    if "```" in text:
        raise ParseError("the code block is not closed with ```.")
    word = _WORD.search(text.strip())
    if word:
        return Action(word.group(1))  # type: ignore[arg-type]
    raise ParseError("no action found.")


def _check_code(code: str) -> None:
    if not code:
        raise ParseError("the code block is empty.")
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        raise ParseError(f"the code does not parse (line {err.lineno}: {err.msg}).") from None
    for stmt in tree.body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            continue  # `import pyautogui` is harmless and common
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            raise ParseError(f"line {stmt.lineno} is not a function call; only calls are allowed.")
        name = ast.unparse(stmt.value.func)
        if name not in ALLOWED_CALLS:
            raise ParseError(f"{name}() is not an allowed action.")


def scale_coordinates(code: str, sx: float, sy: float) -> str:
    """Map numeric pixel literals from the model's image back to the real screen.

    The model sees a screenshot resized to the pixel cap, so its coordinates are in that image.
    >>> scale_coordinates("pyautogui.click(640, 360)", 1.5, 1.5)
    'pyautogui.click(960, 540)'
    >>> scale_coordinates("pyautogui.scroll(-3, x=100, y=10)", 2.0, 3.0)
    'pyautogui.scroll(-3, x=200, y=30)'
    """
    if sx == 1.0 and sy == 1.0:
        return code
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            _scale_call(node, node.func.attr, sx, sy)
    return ast.unparse(tree)


def _scale_call(call: ast.Call, name: str, sx: float, sy: float) -> None:
    where = PYAUTOGUI_CALLS.get(name)
    if where is None:
        return
    first = 1 if where == "after" else 0
    names = ("xOffset", "yOffset", "x", "y") if where == "offset" else ("x", "y")
    for i, scale in ((first, sx), (first + 1, sy)):
        if i < len(call.args):
            call.args[i] = _scaled(call.args[i], scale)
    for kw in call.keywords:
        if kw.arg in names:
            kw.value = _scaled(kw.value, sx if kw.arg in ("x", "xOffset") else sy)


def _scaled(node: ast.expr, scale: float) -> ast.expr:
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return ast.Constant(round(value * scale))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):  # offsets can be negative
        inner = _scaled(node.operand, scale)
        if isinstance(inner, ast.Constant) and isinstance(inner.value, int):
            return ast.Constant(-inner.value)
    return node
