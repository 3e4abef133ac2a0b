"""One pass's TrainingRun: the body as the watch delivered it, and its spec parsed once; and what a
run reads of the pool it names.

The API server has applied the CRD's defaults and validation, so the builders read the typed spec
(kubecua_api's TrainingRunSpec holds every default) and restate none. A spec that does not parse
(an operator bug, or an object stored under an older schema) fails the run, naming the field; it
never stops the operator.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kubecua_api.trainingrun import TrainingRunSpec
from kubecua_operator import conditions
from kubecua_operator.parsed import Parsed
from kubecua_operator.parsed import parse as parse_spec

Obj = dict[str, Any]

# the body: owner references, Events, status, and the trainer's ConfigMap (the spec verbatim)
Run = Parsed[TrainingRunSpec]


def parse(body: Obj) -> Run:
    """parsed.parse for a TrainingRun. Raises kubecua_api.errors.InvalidSpec."""
    return parse_spec(body, TrainingRunSpec)


class BoundPool(NamedTuple):
    """What a run reads of the pool it names (main.pool_readiness keeps one per pool): the pool
    decides its token Secret's name (its backend's), so the run's children need not know the
    backends."""

    ready: int  # status.readyReplicas
    token_secret: str  # the Secret holding the pool's token, mounted into the trainer
    demand_met: tuple[str, str, str] | None  # its DemandMet condition (status, reason, message)
    uid: str = ""  # the pool's uid: its trainers trust only Services it controls (sources/kube.py)


def bound_pool(pool_status: Obj, token_secret: str, uid: str = "") -> BoundPool:
    """A pool's entry for its runs, from its status and its token Secret's name.

    >>> bound_pool({"readyReplicas": 2, "conditions": [{"type": "DemandMet", "status": "False",
    ...             "reason": "CappedByMaxReplicas", "message": "3 of 5"}]}, "desks-sandbox-token")
    BoundPool(ready=2, token_secret='desks-sandbox-token', demand_met=('False', 'CappedByMaxReplicas', '3 of 5'), uid='')
    """  # noqa: E501
    cond = conditions.find(pool_status.get("conditions") or [], conditions.DEMAND_MET)
    demand_met = None
    if cond:
        demand_met = (
            str(cond.get("status")),
            str(cond.get("reason", "")),
            str(cond.get("message", "")),
        )
    return BoundPool(int(pool_status.get("readyReplicas") or 0), token_secret, demand_met, uid)
