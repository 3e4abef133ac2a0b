"""A TaskVerification's status, computed whole from its Job, its pool and its manifest.

Phases: Pending (no Job yet: the pool is missing or has no ready sandbox, or a child is someone
else's), Running (the Job exists and has not finished), Succeeded (the Job completed and its
manifest is in `<name>-manifest`: the counts come from it), Failed (the spec does not parse, the
Job failed: its condition's reason and the verifier's last words, or the Job completed without a
readable manifest). A finished verification stays finished (reconcile.py writes nothing more).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kubecua_api.taskmanifest import VerifiedManifest
from kubecua_api.taskverification import MANIFEST_KEY
from kubecua_operator import conditions as c
from kubecua_operator.ownership import Issue
from kubecua_operator.trainingrun.model import BoundPool
from kubecua_operator.trainingrun.status import JobView

Obj = dict[str, Any]
PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL = (SUCCEEDED, FAILED)
COMPLETE = "Complete"
SUMMARY_ONLY = ("usable", "unreproducible-start")  # the manifest summary's keys beside verdicts


@dataclass(frozen=True)
class Observed:
    """The world as one pass sees it."""

    job: JobView | None
    pool: BoundPool | None = None
    invalid: str = ""  # the spec does not parse: the field and why
    issues: tuple[Issue, ...] = ()  # children not written: someone else's, or refused
    manifest: VerifiedManifest | None = None  # read once the Job completed
    manifest_problem: str = ""  # why a completed Job's manifest could not be read
    last_words: str = ""  # a failed verifier's termination message (its last log lines)


def read_manifest(config_map: Obj | None, name: str) -> tuple[VerifiedManifest | None, str]:
    """The manifest in `config_map` (the verifier's ConfigMap), or why there is none.

    >>> read_manifest({"data": {}}, "ck-manifest")
    (None, 'ConfigMap ck-manifest holds no verified.json: the verifier wrote no manifest')
    >>> read_manifest({"data": {"verified.json": "{}"}}, "ck-manifest")[1][:48]
    'ConfigMap ck-manifest, key verified.json: not a '
    """
    if config_map is None:
        return None, f"ConfigMap {name} is gone: the verifier's manifest is lost"
    text = (config_map.get("data") or {}).get(MANIFEST_KEY)
    if not text:
        return None, f"ConfigMap {name} holds no {MANIFEST_KEY}: the verifier wrote no manifest"
    try:
        return VerifiedManifest.model_validate_json(text), ""
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, (
            f"ConfigMap {name}, key {MANIFEST_KEY}: not a verified manifest ({where}: "
            f"{first['msg']})"
        )


def counts(manifest: VerifiedManifest) -> Obj:
    """The status fields a manifest fills."""
    summary: Mapping[str, int] = manifest.summary
    return {
        "tasks": len(manifest.tasks),
        "usable": int(summary.get("usable", 0)),
        "verdicts": {k: int(v) for k, v in sorted(summary.items()) if k not in SUMMARY_ONLY},
        "unreproducibleStarts": int(summary.get("unreproducible-start", 0)),
        "sandboxes": len(manifest.sandboxes),
        "seconds": round(float(manifest.seconds), 1),
    }


def _sandboxes_condition(seen: Observed, pool_ref: str, gen: int) -> c.Condition:
    if seen.pool is None:
        return c.make(c.SANDBOXES_READY, False, "PoolNotFound",
                      f"SandboxPool {pool_ref} not found in this namespace", gen)  # fmt: skip
    if seen.pool.ready < 1:
        return c.make(c.SANDBOXES_READY, False, "NoReadySandboxes",
                      f"SandboxPool {pool_ref} has no ready sandbox yet", gen)  # fmt: skip
    return c.make(c.SANDBOXES_READY, True, "SandboxesReady",
                  f"SandboxPool {pool_ref} has {seen.pool.ready} ready", gen)  # fmt: skip


def _failure(seen: Observed) -> tuple[str, str] | None:
    """(reason, message) of a failed verification, or None."""
    if seen.invalid:
        return "InvalidSpec", seen.invalid
    job = seen.job
    if job is not None and job.failed_reason:
        message = f"Job {job.name} failed: {job.failed_message or job.failed_reason}"
        if seen.last_words:
            message += f"; the verifier's last output: {seen.last_words}"
        return job.failed_reason, message[:2048]
    if job is not None and job.complete and seen.manifest is None:
        return "ManifestMissing", seen.manifest_problem
    return None


def compute_status(body: Obj, pool_ref: str, seen: Observed, now: str) -> Obj:
    """The status `body` should have; `pool_ref` is '' when the spec does not parse."""
    old: Obj = body.get("status") or {}
    gen = int(body["metadata"].get("generation") or 0)
    failure = _failure(seen)
    job = seen.job
    if failure:
        phase = FAILED
    elif job is not None and job.complete:
        phase = SUCCEEDED
    elif job is not None:
        phase = RUNNING
    else:
        phase = PENDING
    conds = [] if seen.invalid else [_sandboxes_condition(seen, pool_ref, gen)]
    conds.append(c.make(COMPLETE, phase == SUCCEEDED, "ManifestWritten" if phase == SUCCEEDED
                        else phase, f"phase {phase}", gen))  # fmt: skip
    reason, message = failure or ("NotFailed", "")
    conds.append(c.make(c.FAILED, failure is not None, reason, message, gen))
    if seen.issues:
        conds.append(c.make(c.DEGRADED, True, seen.issues[0].reason,
                            "; ".join(i.message for i in seen.issues), gen))  # fmt: skip
    new: Obj = {"phase": phase, "observedGeneration": gen}
    if job is not None:
        new["job"] = job.name
        new["startTime"] = old.get("startTime") or now
    if phase in (SUCCEEDED, FAILED):
        new["completionTime"] = now
    if phase == SUCCEEDED and seen.manifest is not None:
        new["manifest"] = {"configMap": f"{body['metadata']['name']}-manifest",
                           "key": MANIFEST_KEY}  # fmt: skip
        new.update(counts(seen.manifest))
    new["conditions"] = c.merge(old.get("conditions") or [], conds, now)
    return new


def changed(old: Obj | None, new: Obj) -> bool:
    """Whether `new` differs from `old` in anything but timestamps a pass recomputes."""
    return _strip(old or {}) != _strip(new)


def _strip(status: Obj) -> Obj:
    return {k: v for k, v in status.items() if k != "completionTime"}
