"""The pool's decisions as pure functions: how many sandboxes, which to create, which to remove.

Nothing here talks to the API; reconcile.py feeds in the observed sandboxes and carries out the
plan.
Runs' demand (spec.sandboxes.capacity) raises the pool's baseline spec.replicas up to
spec.maxReplicas (pool_replicas); scale-in never removes a leased sandbox, so capacity given back
when runs finish leaves only with idle sandboxes, and a leased one waits for its episode's end.
The churn guard lives here: sandboxes that are not ready yet cap further creation, and while any is
unschedulable nothing more is created (agent-sandbox #1215: a pool that cannot schedule must hold,
not create pods without bound).
What the plan reads beside the spec's sizes is plan_options': when sandboxes are recycled (never on
an external pool, whatever spec.reset says) and the most sandboxes the backend can have.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubecua_api.sandboxpool import Reset, SandboxPoolSpec
from kubecua_operator.sandboxpool.model import FAILED, PENDING, READY, TERMINATING, Probe, Sandbox

# Reasons of ScalingLimited (closed set).
UNSCHEDULABLE = "Unschedulable"
REPLACEMENT_BACKOFF = "ReplacementBackoff"


@dataclass
class Plan:
    create: list[int] = field(default_factory=list)
    delete: list[tuple[Sandbox, str]] = field(default_factory=list)  # (sandbox, reason)
    limited: str = ""  # a ScalingLimited reason, or "" when scaling is not held back
    target: int = 0
    leased: int = 0
    replicas: int | None = None  # spec.replicas raised by the runs' demand (None: not planned)


def pool_replicas(replicas: int, max_replicas: int | None, demand: int) -> int:
    """Sandboxes to keep before warm spares: the baseline `replicas` (the user's, or an HPA's),
    raised by the active runs' summed `demand` up to `max_replicas`; never below the baseline.

    >>> pool_replicas(2, 10, 6)    # demand above the baseline raises it
    6
    >>> pool_replicas(2, 4, 6)     # capped by maxReplicas
    4
    >>> pool_replicas(2, None, 6)  # no maxReplicas: runs never raise the pool
    2
    >>> pool_replicas(5, 10, 3)    # demand below the baseline changes nothing
    5
    """
    cap = replicas if max_replicas is None else max(replicas, max_replicas)
    return max(replicas, min(demand, cap))


def target_replicas(replicas: int, warm_spares: int, leased: int) -> int:
    """Sandboxes to keep: grow past `replicas` only to keep `warm_spares` idle, by at most that.

    >>> target_replicas(4, 2, leased=1)   # 3 idle already cover the 2 spares
    4
    >>> target_replicas(4, 2, leased=3)   # 3 + 2 spares
    5
    >>> target_replicas(4, 2, leased=6)   # capped at replicas + warm_spares
    6
    """
    return min(replicas + warm_spares, max(replicas, leased + warm_spares))


def backoff_seconds(failures: int, base: float, cap: float) -> float:
    """Delay before replacing after `failures` consecutive failures: base * 2^(n-1), capped.

    >>> [backoff_seconds(n, 5, 300) for n in (0, 1, 2, 3, 10)]
    [0.0, 5.0, 10.0, 20.0, 300.0]
    """
    return 0.0 if failures <= 0 else float(min(cap, base * 2 ** (failures - 1)))


def scale_in_order(sandboxes: list[Sandbox], leased: set[str]) -> list[Sandbox]:
    """Removal order: failed, then not ready, then idle, and leased last; highest index first."""
    rank = {FAILED: 0, PENDING: 1, READY: 2}

    def key(s: Sandbox) -> tuple[int, int]:
        return (3 if s.name in leased else rank.get(s.state, 1), -s.index)

    return sorted(sandboxes, key=key)


def free_indexes(used: set[int], count: int) -> list[int]:
    """The `count` lowest indexes not in use: free_indexes({0, 2}, 3) == [1, 3, 4]."""
    out: list[int] = []
    i = 0
    while len(out) < count:
        if i not in used:
            out.append(i)
        i += 1
    return out


@dataclass(frozen=True)
class Options:
    """What make_plan needs beside the spec's sizes: see plan_options."""

    recycle_after: int  # episodes a sandbox serves before it is replaced; 0: never
    cap: int | None = None  # the most sandboxes the pool can have; None: no bound but its replicas


def plan_options(spec: SandboxPoolSpec, recycles: bool = True, cap: int | None = None) -> Options:
    """What the plan reads of the spec and the backend. An external pool (its backend's
    `recycles` is False) never recycles, whatever spec.reset says: the operator cannot recreate
    a machine it did not make, and the CRD refuses any reset but the default there. `cap`: the
    most sandboxes the backend can have (an external pool's endpoints).

    >>> plan_options(SandboxPoolSpec.model_validate({"reset": {"strategy": "recreate"}}))
    Options(recycle_after=1, cap=None)
    >>> plan_options(SandboxPoolSpec.model_validate({"reset": {"maxEpisodesPerSandbox": 3}}),
    ...              recycles=False, cap=2)
    Options(recycle_after=0, cap=2)
    """
    return Options(recycle_after(spec.reset) if recycles else 0, cap)


def make_plan(
    spec: SandboxPoolSpec,
    sandboxes: list[Sandbox],
    probes: dict[str, Probe],
    *,
    replace_allowed: bool,
    burst: int,
    options: Options | None = None,
    taken: set[int] | frozenset[int] = frozenset(),
    demand: int = 0,
) -> Plan:
    """`options`: plan_options(spec, ...) of the pool's backend (None: a pod pool's).
    `taken`: indexes whose names are held by objects that are not this pool's (never reused).
    `demand`: the summed spec.sandboxes.capacity of the pool's active runs."""
    options = options or plan_options(spec)
    cap = options.cap
    live = [s for s in sandboxes if s.state != TERMINATING]
    leased = {s.name for s in live if s.state == READY and _busy(probes, s.name)}
    plan = Plan(leased=len(leased))
    plan.replicas = pool_replicas(spec.replicas, spec.max_replicas, demand)
    if cap is not None:  # external pools cannot grow past their list of endpoints
        plan.replicas = min(plan.replicas, cap)
    plan.target = target_replicas(plan.replicas, spec.warm_spares, len(leased))
    if cap is not None:
        plan.target = min(plan.target, cap)
    plan.delete = _replacements(options.recycle_after, live, probes, leased, replace_allowed)
    doomed = {s.name for s, _ in plan.delete}
    keep = [s for s in live if s.name not in doomed]
    excess = len(keep) - plan.target
    scaled_in: list[Sandbox] = []
    if excess > 0:  # never a leased sandbox: it leaves once its episode is over and it is idle
        idle = [s for s in scale_in_order(keep, leased) if s.name not in leased]
        scaled_in = idle[:excess]
        plan.delete += [(s, "ScaledIn") for s in scaled_in]
    # Replaced sandboxes hold their slot until they are gone: their successor reuses the index.
    missing = plan.target - (len(live) - len(scaled_in))
    if any(s.state == FAILED for s in live) and not replace_allowed:
        plan.limited = REPLACEMENT_BACKOFF
    if missing > 0:
        if any(s.unschedulable for s in live):
            plan.limited = UNSCHEDULABLE
            return plan
        ready = sum(s.state == READY for s in live)
        pending = sum(s.state == PENDING for s in live)
        room = max(burst, ready) - pending
        used = {s.index for s in sandboxes} | set(taken)
        plan.create = free_indexes(used, max(0, min(missing, room)))
    return plan


def _busy(probes: dict[str, Probe], name: str) -> bool:
    probe = probes.get(name)
    return bool(probe and probe.busy)


def recycle_after(reset: Reset) -> int:
    """Episodes a sandbox serves before it is replaced: 1 under recreate, else
    maxEpisodesPerSandbox; 0 never (and the prober need not ask for episode counts).

    >>> [recycle_after(Reset(strategy=s, max_episodes_per_sandbox=n))
    ...  for s, n in (("inPlace", 0), ("inPlace", 3), ("recreate", 0))]
    [0, 3, 1]
    """
    return 1 if reset.strategy == "recreate" else reset.max_episodes_per_sandbox


def _replacements(
    limit: int,
    live: list[Sandbox],
    probes: dict[str, Probe],
    leased: set[str],
    replace_allowed: bool,
) -> list[tuple[Sandbox, str]]:
    """Failed sandboxes (once replacing is allowed), and idle ones that served `limit`
    episodes (Options.recycle_after)."""
    out = [(s, "Failed") for s in live if s.state == FAILED and replace_allowed]
    if limit > 0:
        for s in live:
            probe = probes.get(s.name)
            if (
                s.state == READY
                and s.name not in leased
                and probe
                and probe.episodes_served >= limit
            ):
                out.append((s, "Recycled"))
    return out
