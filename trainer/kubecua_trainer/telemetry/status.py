"""Patch the trainer's own TrainingRun status subresource (cluster mode only).

The trainer owns step, totalSteps, meanReward, successRate, tokensPerSecond, lastCheckpoint,
evaluation (the last held-out evaluation), warmup (its goal's measurement) and cost (cost.py);
the operator owns phase and conditions, so this merge-patch never names those. A patch is sent
only when a value changed, and a failed patch is logged, never fatal: training goes on.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any

from kubecua_api.constants import GROUP as GROUP
from kubecua_api.constants import TRAININGRUN_PLURAL as PLURAL
from kubecua_api.constants import VERSION as VERSION

log = logging.getLogger(__name__)


def load_kube_config() -> None:
    """In-cluster service account when running in a pod, else $KUBECONFIG / ~/.kube/config."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        # $KUBECONFIG is read now: the client's own default froze it at import time.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)


def custom_objects_api(api_client: Any = None) -> Any:
    from kubernetes import client

    if api_client is None:
        load_kube_config()
    return client.CustomObjectsApi(api_client)


def core_v1_api(api: Any = None) -> Any:
    """`api` when given (tests pass one), else a CoreV1Api on the default configuration."""
    from kubernetes import client

    if api is not None:
        return api
    load_kube_config()
    return client.CoreV1Api()


def build_status(
    step: int,
    total_steps: int,
    mean_reward: float | None,
    success_rate: float | None,
    tokens_per_second: float | None,
    checkpoint: tuple[int, str] | None = None,
) -> dict[str, Any]:
    """The trainer-owned part of TrainingRun.status (camelCase, as in docs/api.md)."""
    status: dict[str, Any] = {"step": step, "totalSteps": total_steps}
    if mean_reward is not None:
        status["meanReward"] = round(mean_reward, 6)
    if success_rate is not None:
        status["successRate"] = round(success_rate, 6)
    if tokens_per_second is not None:
        status["tokensPerSecond"] = round(tokens_per_second, 3)
    if checkpoint is not None:
        status["lastCheckpoint"] = {
            "step": checkpoint[0],
            "path": checkpoint[1],
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    return status


def build_curriculum_status(step: int, summary: dict[str, Any]) -> dict[str, Any]:
    """status.curriculum from Curriculum.summary() (camelCase, as in docs/api.md)."""
    classes = summary["classes"]
    mean = summary["mean_pass_rate"]
    return {
        "step": step,
        "tasks": summary["tasks"],
        "unplayed": classes["unplayed"],
        "never": classes["never"],
        "belowBand": classes["below_band"],
        "inBand": classes["in_band"],
        "aboveBand": classes["above_band"],
        "always": classes["always"],
        "meanPassRate": None if mean is None else round(mean, 6),  # null: absent once patched
        "histogram": list(summary["histogram"]),
    }


MAX_STATUS_TASKS = 100  # a status is not a results store: evaluations/ on disk has every task


def build_evaluation_status(
    summary: dict[str, Any], finished: datetime | None = None
) -> dict[str, Any]:
    """status.evaluation from an evaluation's summary.json (evaluation/results.py), finished
    at `finished` (default now).

    passAtK is pass@k at k = episodesPerTask (the largest k evaluated). Undefined figures (no
    episode scored) are sent as null, which a merge patch turns into "absent", so a figure of
    an earlier evaluation never lingers. Tasks are sorted by id, at most MAX_STATUS_TASKS.
    """
    k = max(int(key) for key in summary["pass_at_k"])
    rows = sorted(summary["tasks"], key=lambda r: r["task_id"])
    tasks = []
    for row in rows[:MAX_STATUS_TASKS]:
        task: dict[str, Any] = {"id": row["task_id"], "episodes": row["scored"]}
        if row["success_rate"] is not None:
            task["successRate"] = round(row["success_rate"], 6)
        tasks.append(task)
    pass_k = summary["pass_at_k"][str(k)]
    return {
        "step": summary["step"],
        "successRate": _rounded(summary["success_rate"]),
        "meanScore": _rounded(summary["mean_score"]),
        "episodes": summary["scored"],
        "excluded": summary["excluded"],
        "passAtK": {"k": k, "value": round(pass_k, 6)} if pass_k is not None else None,
        "time": (finished or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tasks": tasks,
        "tasksTruncated": len(rows) > MAX_STATUS_TASKS,
    }


def build_warmup_status(goal: dict[str, Any], measured: datetime | None = None) -> dict[str, Any]:
    """status.warmup from warmup.json's "goal" (warmup/goal.py record()), measured at `measured`
    (default now); the operator's WarmupBelowGoal condition follows belowGoal."""
    return {
        "epochs": goal["epochs"],
        "extendedEpochs": goal["extended_epochs"],
        "replyMatch": round(goal["reply_match"], 6),
        "replies": goal["replies"],
        "goal": goal["reply_match_min"],
        "belowGoal": goal["below_goal"],
        "result": goal["result"],
        "time": (measured or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


# cost.figures' keys -> status.cost's (kubecua_api.cost.CostStatus)
COST_FIELDS = {
    "sandbox_seconds": "sandboxSeconds",
    "gpu_seconds": "gpuSeconds",
    "trajectories": "trajectories",
    "successful_trajectories": "successfulTrajectories",
    "sandbox_seconds_per_trajectory": "sandboxSecondsPerTrajectory",
    "gpu_seconds_per_trajectory": "gpuSecondsPerTrajectory",
    "sandbox_seconds_per_success": "sandboxSecondsPerSuccess",
    "gpu_seconds_per_success": "gpuSecondsPerSuccess",
    "currency": "currency",
    "cost": "total",
    "cost_per_trajectory": "perTrajectory",
    "cost_per_success": "perSuccess",
}


def build_cost_status(totals: dict[str, Any]) -> dict[str, Any]:
    """status.cost from cost.figures(): seconds to the millisecond, money to 6 places; a figure
    not defined yet (per success before the first success) is sent as null, so a merge patch
    leaves it absent."""
    out: dict[str, Any] = {}
    for key, field in COST_FIELDS.items():
        value = totals.get(key)
        digits = 3 if "seconds" in key else 6
        out[field] = round(value, digits) if isinstance(value, float) else value
    return out


class StatusPatcher:
    def __init__(self, name: str, namespace: str, api: Any = None) -> None:
        self.name = name
        self.namespace = namespace
        self.api = api if api is not None else custom_objects_api()
        self._last: dict[str, Any] = {}

    def patch(self, status: dict[str, Any]) -> bool:
        """Merge-patch the changed fields; True when a request was sent and succeeded."""
        changed = {k: v for k, v in status.items() if self._last.get(k) != v}
        if not changed:
            return False
        try:
            self.api.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, self.name, {"status": changed}
            )
        except Exception as err:  # the apiserver being away must not stop training
            log.warning("status patch of %s/%s failed: %s", self.namespace, self.name, err)
            return False
        self._last.update(changed)
        log.info("status of %s/%s patched: step %s", self.namespace, self.name, status.get("step"))
        return True
