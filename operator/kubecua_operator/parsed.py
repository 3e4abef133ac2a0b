"""An object of ours as one reconcile pass sees it: the body as the watch (or a read) delivered it,
for owner references, Events and status, and its spec parsed once into kubecua_api's model. The API
server has applied the CRD's defaults and validation, so builders read the typed spec and restate
no default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

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
