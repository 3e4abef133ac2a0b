"""An object of ours as one reconcile pass sees it: the body as the watch (or a read) delivered it,
for owner references, Events and status, and its spec parsed once into kubecua_api's model. The API
server has applied the CRD's defaults and validation, so builders read the typed spec and restate
no default.

`parse` is the one way the operator reads a spec, for both kinds, in the loops and the kopf
indexes alike. A spec the model refuses (an object stored under an older schema, or a rule the
CRD's schema cannot say) raises InvalidSpec naming each field as kubectl would; it never stops
the operator."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from kubecua_api.errors import InvalidSpec, validate_spec

log = logging.getLogger(__name__)
SpecT = TypeVar("SpecT", bound=BaseModel)


@dataclass(frozen=True, eq=False)
class Parsed(Generic[SpecT]):
    body: dict[str, Any]
    spec: SpecT

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def uid(self) -> str:
        return str(self.body["metadata"].get("uid", ""))


def parse(body: dict[str, Any], model: type[SpecT]) -> Parsed[SpecT]:
    """`body` with its spec as `model`. Raises kubecua_api.errors.InvalidSpec.

    >>> from kubecua_api.trainingrun import TrainingRunSpec
    >>> parse({"spec": {"model": {"path": "/m"}, "sandboxes": {"poolRef": "p"},
    ...                 "tasks": {"path": "/t"}, "steps": 1, "trainer": {"nodes": 0}}},
    ...       TrainingRunSpec)
    Traceback (most recent call last):
    ...
    kubecua_api.errors.InvalidSpec: spec.trainer.nodes: Input should be greater than or equal to 1
    """
    return Parsed(body, validate_spec(model, body.get("spec") or {}))


_REFUSED: dict[tuple[str, str, str], str] = {}  # (kind, namespace, name): the refusal last logged


def parse_or_none(body: dict[str, Any], model: type[SpecT]) -> Parsed[SpecT] | None:
    """parse for the kopf indexes: None where the spec does not parse, the refusal logged once per
    object and message. An index function that raised would have kopf drop the entry and log a
    traceback at every event of the object; the object's own loop reports the refusal (status,
    Event)."""
    meta = body.get("metadata") or {}
    kind = str(body.get("kind") or model.__name__.removesuffix("Spec"))
    key = (kind, str(meta.get("namespace", "")), str(meta.get("name", "")))
    try:
        found = parse(body, model)
    except InvalidSpec as err:
        if _REFUSED.get(key) != str(err):
            _REFUSED[key] = str(err)
            log.warning("%s %s/%s: its spec does not parse: %s", *key, err)
        return None
    _REFUSED.pop(key, None)
    return found
