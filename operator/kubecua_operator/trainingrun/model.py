"""One pass's TrainingRun: the body as the watch delivered it, and its spec parsed once.

The API server has applied the CRD's defaults and validation, so the builders read the typed spec
(kubecua_api's TrainingRunSpec holds every default) and restate none. A spec that does not parse
(an operator bug, or an object stored under an older schema) fails the run, naming the field; it
never stops the operator.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from kubecua_api.trainingrun import TrainingRunSpec
from kubecua_operator.parsed import Parsed

Obj = dict[str, Any]


class InvalidSpec(ValueError):
    """The spec does not parse; the message names each field (spec.<path>: <why>)."""


# the body: owner references, Events, status, and the trainer's ConfigMap (the spec verbatim)
Run = Parsed[TrainingRunSpec]


def parse(body: Obj) -> Run:
    """Raises InvalidSpec.

    >>> parse({"spec": {"model": {"path": "/m"}, "sandboxes": {"poolRef": "p"},
    ...                 "tasks": {"path": "/t"}, "steps": 1, "trainer": {"nodes": 0}}})
    Traceback (most recent call last):
    ...
    kubecua_operator.trainingrun.model.InvalidSpec: spec.trainer.nodes: Input should be greater than or equal to 1
    """  # noqa: E501
    try:
        return Run(body, TrainingRunSpec.model_validate(body.get("spec") or {}))
    except ValidationError as err:
        raise InvalidSpec(describe(err)) from None


def describe(err: ValidationError) -> str:
    """Every error as spec.<path>: <message>, the path as kubectl writes it (urls[0])."""
    found = []
    for e in err.errors(include_url=False):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"])
        found.append(f"spec{path}: {e['msg']}")
    return "; ".join(found)
