"""The spec fuzz (issue 42): hypothesis specs (tests/spec_strategies.py) against the real API
server and the real operator, each one judged.

For each generated spec:
1. admission: a server-side dry run create. A refusal must name a field path (each cause's field,
   or the message, says `spec...`).
2. the operator's model: the admitted (defaulted) spec through kubecua_api's validate_spec, as the
   operator's parse does; a refusal there must name a field too (the operator reports it as
   InvalidSpec).
3. the operator: every admitted spec is created for real, in batches, and watched until the
   operator has answered it:
   - invalid_reported: a condition of reason InvalidSpec whose message names `spec.`;
   - reconciled: its status describes this generation and the operator made its children (a
     pool: at least spec.replicas sandboxes, or a condition saying why it holds back; a run: its
     ServiceAccount, and with static URLs and not suspended its trainer Job);
   - child_refused: a Degraded condition for a child the API server refused (the spec got past
     admission, but something it asks for cannot be made): a gap in the CRD's rules;
   - silent: none of these in time, or a run Succeeded or Failed without naming a field;
   - crash: the operator logged a failed reconcile of it, or exited.
The counts come back as a dict (the JSON `make fuzz-specs` prints).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from kubecua_api.errors import InvalidSpec, validate_spec
from kubecua_api.sandboxpool import SandboxPoolSpec
from kubecua_api.trainingrun import TrainingRunSpec
from kubecua_operator.k8s import Kube

Obj = dict[str, Any]
MODELS = {"SandboxPool": SandboxPoolSpec, "TrainingRun": TrainingRunSpec}
# A field path as the API server or errors.py writes it (the scale subresource's: `.spec.replicas`).
FIELD = re.compile(r"(^|[\s\[(:'\"])\.?spec(\.|\[|:|$)")
SILENT = ("silent", "crash")
SKIPPED = "some validation rules were not checked because the object was invalid"


def names_a_field(text: str) -> bool:
    return bool(FIELD.search(text))


@dataclass
class Case:
    kind: str
    name: str
    spec: Obj
    admitted: Obj | None = None
    refusal: str = ""
    model_refusal: str = ""
    verdict: str = ""  # refused, invalid_reported, reconciled, child_refused, silent, crash
    detail: str = ""


@dataclass
class SpecFuzz:
    kube: Kube
    namespace: str
    operator_log: Path | None = None
    prefix: str = "f"
    cases: list[Case] = field(default_factory=list)
    _stored: int = 0

    # 1 and 2: admission and the model, one case at a time (the hypothesis test body).

    def admit(self, kind: str, spec: Obj) -> Case:
        case = Case(kind, f"{self.prefix}{len(self.cases)}", spec)
        self.cases.append(case)
        body = {
            "apiVersion": "kubecua.dev/v1alpha1",
            "kind": kind,
            "metadata": {"name": case.name, "namespace": self.namespace},
            "spec": spec,
        }
        try:
            case.admitted = self.kube.request(
                "POST", self.kube.path(kind, self.namespace) + "?dryRun=All", body
            )
        except ApiException as err:
            if err.status not in (400, 422):
                raise
            lines = refusal_lines(err)
            case.refusal, case.verdict = "\n".join(lines), "refused"
            # The API server's own note that CEL rules were skipped (a field was wrong already)
            # names no field, and needs none: the causes beside it do.
            unnamed = [line for line in lines if not names_a_field(line) and SKIPPED not in line]
            if unnamed or not any(names_a_field(line) for line in lines):
                case.detail = f"a refusal that names no field: {unnamed}"
            return case
        try:
            validate_spec(MODELS[kind], case.admitted["spec"])
        except InvalidSpec as err:
            case.model_refusal = str(err)
        return case

    # 3: the operator, for every admitted spec, in batches.

    def judge_admitted(self, batch: int = 40, timeout: float = 45) -> None:
        todo = [c for c in self.cases if c.admitted is not None and not c.verdict]
        for start in range(0, len(todo), batch):
            self._judge(todo[start : start + batch], timeout)

    def _judge(self, cases: list[Case], timeout: float) -> None:
        log_from = self._log_size()
        for case in cases:
            assert case.admitted is not None
            body = {k: case.admitted[k] for k in ("apiVersion", "kind", "spec")}
            body["metadata"] = {"name": case.name, "namespace": self.namespace}
            self.kube.create(body)
        deadline = time.monotonic() + timeout
        pending = list(cases)
        while pending and time.monotonic() < deadline:
            objs = {
                kind: {o["metadata"]["name"]: o for o in self.kube.list(kind, self.namespace)}
                for kind in {c.kind for c in pending}
            }
            for case in list(pending):
                obj = objs[case.kind].get(case.name)
                verdict = self._verdict(case, obj) if obj else ("", "")
                if verdict[0]:
                    case.verdict, case.detail = verdict
                    pending.remove(case)
            if pending:
                time.sleep(0.3)  # polling: the verdict needs several objects, not one event
        log = self._log_since(log_from)
        for case in cases:
            if f"{self.namespace}/{case.name} failed" in log:
                case.verdict, case.detail = "crash", "the operator logged a failed reconcile"
            elif not case.verdict:
                obj = self.kube.get(case.kind, self.namespace, case.name) or {}
                case.verdict = "silent"
                case.detail = f"no answer in {timeout:.0f} s: {json.dumps(obj.get('status'))}"
        for case in cases:
            self.kube.delete(case.kind, self.namespace, case.name)

    def _verdict(self, case: Case, obj: Obj) -> tuple[str, str]:
        status = obj.get("status") or {}
        if status.get("observedGeneration") != obj["metadata"].get("generation"):
            return "", ""
        conds = {c["type"]: c for c in status.get("conditions") or []}
        for cond in conds.values():
            if cond.get("reason") == "InvalidSpec" and cond.get("status") == "True":
                message = str(cond.get("message", ""))
                ok = names_a_field(message)
                return ("invalid_reported" if ok else "silent"), message
        if case.kind == "TrainingRun":
            return self._run_verdict(case, obj, status, conds)
        return self._pool_verdict(obj, status, conds)

    def _run_verdict(
        self, case: Case, obj: Obj, status: Obj, conds: dict[str, Obj]
    ) -> tuple[str, str]:
        phase, spec = status.get("phase"), obj["spec"]
        failed = conds.get("Failed", {})
        if phase == "Failed":
            message = str(failed.get("message", ""))
            kind = "invalid_reported" if failed.get("reason") == "InvalidSpec" else "silent"
            return (kind if names_a_field(message) else "silent"), message
        if phase == "Succeeded":
            return "silent", "Succeeded on kwok, where no trainer runs"
        degraded = conds.get("Degraded", {})
        if degraded.get("status") == "True":
            return "child_refused", str(degraded.get("message", ""))
        if not self.kube.get("ServiceAccount", self.namespace, f"{case.name}-trainer"):
            return "", ""
        wants_job = "urls" in spec["sandboxes"] and not spec.get("suspend")
        if wants_job and not self.kube.get("Job", self.namespace, f"{case.name}-trainer"):
            return "", ""
        return "reconciled", str(phase)

    def _pool_verdict(self, obj: Obj, status: Obj, conds: dict[str, Obj]) -> tuple[str, str]:
        degraded = conds.get("Degraded", {})
        if degraded.get("status") == "True" and degraded.get("reason") != "SandboxesFailed":
            return "child_refused", str(degraded.get("message", ""))
        limited = conds.get("ScalingLimited", {})
        if limited.get("status") == "True":
            return "reconciled", f"held back: {limited.get('message')}"
        # Warm spares may add sandboxes beyond spec.replicas (status.demand says why).
        if (status.get("replicas") or 0) >= obj["spec"]["replicas"]:
            return "reconciled", f"{status.get('replicas')} sandboxes"
        return "", ""

    def _log_size(self) -> int:
        return self.operator_log.stat().st_size if self.operator_log else 0

    def _log_since(self, offset: int) -> str:
        if not self.operator_log:
            return ""
        with self.operator_log.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def counts(self, kind: str) -> dict[str, Any]:
        mine = [c for c in self.cases if c.kind == kind]
        verdicts = Counter(c.verdict for c in mine)
        return {
            "cases": len(mine),
            "admitted": sum(c.admitted is not None for c in mine),
            "refused": verdicts["refused"],
            "refused_without_field": sum(bool(c.detail) for c in mine if c.verdict == "refused"),
            "admitted_then_model_refused": sum(bool(c.model_refusal) for c in mine),
            **{v: verdicts[v] for v in ("invalid_reported", "reconciled", "child_refused")},
            "silent": verdicts["silent"],
            "crash": verdicts["crash"],
        }

    def problems(self, kind: str) -> list[str]:
        """The cases that break the rules, for an assertion's message: a refusal naming no
        field, a model refusal naming none, a child refused, silence, a crash."""
        out = []
        for c in self.cases:
            bad = (c.verdict == "refused" and c.detail) or c.verdict in (*SILENT, "child_refused")
            bad = bad or (c.model_refusal and not names_a_field(c.model_refusal))
            if c.kind == kind and bad:
                out.append(f"{c.verdict}: {c.detail or c.model_refusal} <- {json.dumps(c.spec)}")
        return out


def problem_classes(problems: list[str]) -> dict[str, int]:
    """Problems by kind: the verdict and the message up to its first value or name."""
    classes: Counter[str] = Counter()
    for p in problems:
        head = p.split(" <- ", 1)[0]
        classes[re.sub(r'("[^"]*"|\b[a-z]+[0-9]+(-[a-z0-9]+)*\b|[0-9]+)', "_", head)[:120]] += 1
    return dict(classes.most_common())


def refusal_lines(err: ApiException) -> list[str]:
    """The API server's refusal, one line per cause (`<field>: <message>`), or its message."""
    try:
        status = json.loads(err.body)
    except (TypeError, ValueError):
        return [str(err.body)]
    causes = (status.get("details") or {}).get("causes") or []
    lines = [f"{c.get('field', '')}: {c.get('message', '')}" for c in causes]
    return lines or [str(status.get("message", ""))]
