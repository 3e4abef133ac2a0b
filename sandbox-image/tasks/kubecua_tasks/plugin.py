"""A task family generator as a plugin: an object of TaskFamily, named by an entry point of the
group `kubecua.task_families` in the pyproject.toml of the package that ships it:

    [project.entry-points."kubecua.task_families"]
    colourkeys = "colourkeys_tasks:COLOURKEYS"

A family takes typed parameters (a pydantic model, `params`), validated before anything runs,
and returns its files: path (under the folder tasks are written to) -> text. It writes
OSWorld-format task JSON, <id>.solutions.json beside each task and, for a family, family.json;
taskkit.py's helpers build them, and `taskkit.collect` hands back what a build registered.
One generator may be registered several times under other names with other defaults
(`defaults`): colourkeys-demo is colourkeys with the demo's splits."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

GROUP = "kubecua.task_families"
P = TypeVar("P", bound=BaseModel)


class ParamError(ValueError):
    """Parameters a family refuses; the message names each parameter and what to fix."""


@dataclass(frozen=True)
class TaskFamily(Generic[P]):
    name: str
    summary: str
    params: type[P]
    build: Callable[[P], dict[str, str]]
    defaults: dict[str, Any] = field(default_factory=dict)

    def parse(self, given: dict[str, Any]) -> P:
        """The family's parameters: its defaults, then `given` over them (nested dicts merge)."""
        try:
            return self.params.model_validate(_merge(self.defaults, given))
        except ValidationError as err:
            raise ParamError(_worded(self.name, err)) from None

    def generate(self, params: P) -> dict[str, str]:
        try:
            return self.build(params)
        except ValueError as err:  # a rule across parameters the model could not state
            raise ParamError(f"{self.name}: {err}") from None

    def describe(self) -> list[tuple[str, str, str]]:
        """(parameter, type, default) rows for `kubecua tasks list --params`."""
        base = self.params()
        rows = []
        for name, info in self.params.model_fields.items():
            value = self.defaults.get(name, getattr(base, name))
            shown = json.dumps(_plain(value), separators=(",", ":"))
            rows.append((name, _type_name(info.annotation), shown))
        return rows


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _worded(family: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if not e["loc"]:  # a rule across parameters: its message names them
            lines.append(f"{family}: {msg}")
            continue
        where = ".".join(str(p) for p in e["loc"])
        got = "" if e["type"] == "missing" else f" (got {json.dumps(_plain(e.get('input')))})"
        lines.append(f"{family}: parameter {where!r}: {msg}{got}")
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", str(annotation))  # colourkeys_tasks.Symbol: Symbol


def discover() -> dict[str, TaskFamily[Any]]:
    """Every installed family by name (loading each entry point imports its module)."""
    found: dict[str, TaskFamily[Any]] = {}
    for ep in entry_points(group=GROUP):
        family = ep.load()
        if not isinstance(family, TaskFamily):
            raise TypeError(f"entry point {ep.name} = {ep.value} is not a TaskFamily")
        if family.name != ep.name:
            raise TypeError(f"entry point {ep.name} names a family called {family.name!r}")
        found[ep.name] = family
    return dict(sorted(found.items()))


def parse_assignments(pairs: Iterable[str]) -> dict[str, Any]:
    """`--param k=v` values: v as JSON when it parses (numbers, lists, objects, null), else a
    string; a dotted key sets a nested field (layout.cols=4)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ParamError(f"--param {pair!r}: write NAME=VALUE, e.g. --param length=2")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ParamError(f"--param {pair!r}: {p} is set to a value and to fields")
        node[leaf] = value
    return out
