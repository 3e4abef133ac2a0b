"""The interface a SandboxPool backend implements. A pass (reconcile.py, view.py, writes.py) calls
these methods and never asks which backend it has, so a new backend is one module here plus its
entry in backends.KINDS.

The defaults fit a backend whose sandboxes are plain pods of the operator's making: the operator
makes the pool's token Secret, needs nothing installed, lists nothing beyond its watched children
and has nothing to repair."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

from pydantic import BaseModel

from kubecua_operator import names
from kubecua_operator.k8s import Kube
from kubecua_operator.sandboxpool.model import Pool, Probe, Sandbox, Summary
from kubecua_operator.settings import Settings

Obj = dict[str, Any]
# How reconcile writes a repair: server-side apply as is; create (adopted) an object that is
# missing; restore (adopted) the fields of an edited Service.
Repair = tuple[Literal["apply", "create", "restore"], Obj]


def dump(model: BaseModel | None) -> Obj:
    """A part of the typed spec as the Kubernetes object it passes through to (camelCase, unset
    fields left out); {} for None."""
    return model.model_dump(by_alias=True, exclude_none=True) if model is not None else {}


class Backend(ABC):
    # Sandboxes are pods: the pool's NetworkPolicy applies, sandbox Services select the pods,
    # and the operator makes the token Secret they mount.
    uses_pods: bool = True
    # Sandboxes are the operator's to recreate, so spec.reset may recycle them (plan_options).
    recycles: bool = True

    @abstractmethod
    def build(self, pool: Pool, index: int, settings: Settings) -> list[Obj]:
        """The workload objects of sandbox `index`; the first is its main object (its Service
        is built separately)."""

    @abstractmethod
    def parts(self, sandbox: str) -> list[tuple[str, str]]:
        """(kind, name) of every workload object of a sandbox, main object first, for deletion."""

    @abstractmethod
    def observe(
        self, pool: Pool, children: list[Summary], probes: dict[str, Probe]
    ) -> list[Sandbox]:
        """Sandboxes with their state, from the pool's children (watched and extra)."""

    def token_secret(self, pool: str, uid: str) -> str:
        """Name of the Secret holding the pool's token, which its sandboxes and a bound run's
        trainer mount: the one the operator makes (never a namesake: names.own_token_secret)."""
        return names.own_token_secret(pool, uid)

    def shared_objects(self, pool: Pool, operator_namespace: str) -> list[Obj]:
        """Objects of the whole pool, applied on every pass (beside the token Secret)."""
        return []

    def not_installed(self, api: Kube) -> tuple[str, str] | None:
        """(reason, message) when the cluster lacks an API this backend needs; the pool then
        creates nothing. Asked at most once a minute."""
        return None

    def extra_children(self, api: Kube, pool: Pool) -> list[Summary]:
        """The pool's own children of kinds the operator does not watch (listed every pass)."""
        return []

    def repairs(
        self, pool: Pool, children: list[Summary], probes: dict[str, Probe], settings: Settings
    ) -> list[Repair]:
        """Writes that fix what the pool's children drifted to, beside creating and deleting
        whole sandboxes."""
        return []

    def cap(self, pool: Pool) -> int | None:
        """The most sandboxes the pool can have (None: no bound besides its replicas)."""
        return None
