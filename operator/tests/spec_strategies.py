"""hypothesis strategies for SandboxPool and TrainingRun specs, built from kubecua_api's pydantic
models (their JSON schema, as `make crds` makes it structural: the same bounds, enums and
patterns the CRDs carry).

Each field is drawn at its valid edges (a bound, the longest string) and inside them, and one
time in ODDS from its invalid edge (one past a bound, an unknown enum value, an empty or overlong
string, a list one item too long or empty). Optional fields are drawn sparsely (a quarter of the
time each) and the "set exactly one of" groups mostly have exactly one, so that about a third of
the specs gets past the models and reaches the operator. Names that point at other objects are
fixed ones (`pool`, `tasks`): the fuzz is about the spec's shape, not the admission guard's
reference checks.

Counts that make the operator write objects (a pool's replicas, a run's trainer nodes) are drawn
small, or past their maxima (refused): a fuzz case never asks kwok for 10,000 pods.
api/tests/test_spec_bounds.py checks the maxima themselves.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kubecua_api import crdgen
from kubecua_api.sandboxpool import SandboxPoolSpec
from kubecua_api.trainingrun import TrainingRunSpec

Node = dict[str, Any]
ASCII = st.characters(codec="ascii", categories=["L", "N", "P", "S"])
SAFE_TEXT = st.text(ASCII, min_size=1, max_size=12)

# One value in ODDS is drawn from a field's invalid edge (one past a bound, an unknown enum value,
# an empty or overlong string, a list one item too long), the rest from its valid range and
# edges: a spec has dozens of fields, and each should often be the one wrong thing in it.
ODDS = 12


def mix(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Not 0: hypothesis draws an integer's lower end far more often than the others.
    return st.integers(0, ODDS - 1).flatmap(lambda i: invalid if i == ODDS // 2 else valid)


def pick(valid: list[Any], invalid: list[Any]) -> st.SearchStrategy[Any]:
    return mix(st.sampled_from(valid), st.sampled_from(invalid))


# Path (dots, `[]` for items) -> a strategy that replaces the schema's, for the reasons above.
HINTS: dict[str, st.SearchStrategy[Any]] = {
    "spec.replicas": pick([0, 1, 2, 3], [-1, 10001]),
    "spec.maxReplicas": pick([2, 3, 5], [-1, 10001]),
    "spec.warmSpares": pick([0, 1, 2], [-1, 1001]),
    "spec.desktop.external.endpoints[]": pick(
        [
            "http://10.0.0.1:8000",
            "http://10.0.0.2:8000/",
            "http://s.lab:65535",
            "http://localhost:1",
        ],
        [
            "http://s.lab:65536",
            "ftp://s",
            "http://a/b",
            "http://desk-1:8000",
            "http://Desk.lab:80",
            "http://localhost:1",
        ],
    ),
    "spec.steps": pick([1, 2, 10, 1_000_000, 0], [-1, 1_000_001]),
    "spec.trainer.generatingProcesses": pick([1, 2], [0, 16385]),
    "spec.trainer.nodes": pick([1, 2], [0, 1025, 1_000_000]),
    "spec.trainer.gpusPerNode": pick([0, 1, 2], [-1, 17]),
    "spec.rollout.replicas": pick([1, 2], [0, 257]),
    "spec.sandboxes.local.replicas": pick([1, 2], [0, 17]),
    "spec.sandboxes.poolRef": pick(["pool"], ["", "x" * 64]),
    "spec.sandboxes.tokenSecretRef": pick(["pool-sandbox-token"], ["other", "A_b"]),
    "spec.sandboxes.urls[]": pick(["http://10.0.0.1:8000", "https://s"], ["ftp://x"]),
    "spec.tasks.configMapRef": pick(["tasks"], [""]),
    "spec.evaluation.tasks.configMapRef": pick(["held-out"], [""]),
    "spec.model.path": pick(["/models/tiny", "/models/qwen/7b"], ["tiny", "/tiny", "/", ""]),
    "spec.model.volume": pick(["models"], [""]),
    "spec.checkpoint.volume": pick(["ckpt"], [""]),
    "spec.checkpoint.path": pick(
        ["/ckpt", "/data/ckpt"], ["/", "/proc/x", "/dev/shm", "/etc/kubecua", "/a:b", "rel"]
    ),
    "spec.model.lora.targetModules[]": pick(
        ["q_proj", "v_proj", "visual.proj"], ["lm_head", "1bad", ""]
    ),
    "spec.rollout.systemPrompt": pick(["act", "{width}x{height}"], ["{x}", "{", ""]),
}
# Optional fields drawn most of the time: each backend needs its own desktop settings.
LIKELY = {"spec.backend", "spec.desktop"}
# Groups of which a spec sets exactly one (most of the time): the object's path -> its fields.
ONE_OF = {
    "spec.sandboxes": ("poolRef", "urls", "local"),
    "spec.tasks": ("configMapRef", "path"),
    "spec.evaluation.tasks": ("configMapRef", "path"),
    "spec.desktop.kubevirt": ("containerDisk", "dataVolume"),
}


def boundary_ints(node: Node) -> st.SearchStrategy[int]:
    low, high = node.get("minimum"), node.get("maximum")
    lo = -5 if low is None else int(low) + (1 if node.get("exclusiveMinimum") else 0)
    hi = lo + 100 if high is None else int(high)
    edges = sorted({lo, min(lo + 1, hi), max(hi - 1, lo), hi})
    valid = st.one_of(st.sampled_from(edges), st.integers(lo, min(hi, lo + 8)))
    return mix(valid, st.sampled_from([lo - 1, hi + 1]))


def boundary_floats(node: Node) -> st.SearchStrategy[float]:
    low, high = node.get("minimum"), node.get("maximum")
    lo = -1.0 if low is None else float(low)
    hi = lo + 10.0 if high is None else float(high)
    inside = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
    valid = st.one_of(st.sampled_from([lo, hi, (lo + hi) / 2]), inside)
    if node.get("exclusiveMinimum"):
        valid = valid.filter(lambda x: x > lo)
    return mix(
        valid, st.sampled_from([lo - 0.5, hi + 0.5] + [lo] * bool(node.get("exclusiveMinimum")))
    )


def strings(node: Node) -> st.SearchStrategy[str]:
    most, least = int(node.get("maxLength", 64)), int(node.get("minLength", 0))
    invalid = st.sampled_from(["x" * (most + 1)] + [""] * (least > 0 or "pattern" in node))
    if "pattern" in node:
        valid = st.from_regex(node["pattern"], fullmatch=True, alphabet=ASCII)
        return mix(valid.filter(lambda s: least <= len(s) <= most), st.one_of(invalid, SAFE_TEXT))
    valid = st.one_of(SAFE_TEXT, st.just("x" * most)).filter(lambda s: least <= len(s) <= most)
    return mix(valid, invalid)


def sparse_object(
    node: Node, path: str, fields: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    required = set(node.get("required", []))
    group = ONE_OF.get(path, ())

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        chosen = draw(st.sampled_from(group)) if group and draw(st.integers(0, 9)) != 5 else None
        for name, sub in fields.items():
            if name in group and chosen is not None:
                keep = name == chosen
            elif name in required or f"{path}.{name}" in LIKELY:
                keep = draw(st.integers(0, 49)) != 25  # a required field missing, now and then
            else:
                keep = draw(st.integers(0, 3)) == 2
            if keep:
                out[name] = draw(sub)
        return out

    return build()


def from_schema(node: Node, path: str) -> st.SearchStrategy[Any]:
    """A strategy for one node of a structural schema (pydantic's JSON schema via crdgen)."""
    if path in HINTS:
        return HINTS[path]
    if node.get("x-kubernetes-int-or-string"):
        return mix(st.one_of(st.integers(0, 65535), strings(node)), st.just(-1))
    if "enum" in node:
        return mix(st.sampled_from(node["enum"]), st.just("Bogus"))
    kind = node.get("type")
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return boundary_ints(node)
    if kind == "number":
        return boundary_floats(node)
    if kind == "string":
        return strings(node)
    if kind == "array":
        items = from_schema(node["items"], path + "[]")
        most = int(node.get("maxItems", 3))
        least = int(node.get("minItems", 0))
        small = st.lists(items, min_size=max(least, 1), max_size=max(least, min(most, 3)))
        if least:  # an empty list where one item is the least
            small = mix(small, st.just([]))
        if most <= 8:  # one item too many is cheap to send
            return mix(small, st.lists(items, min_size=most + 1, max_size=most + 1))
        return small
    if "properties" in node:
        fields = {k: from_schema(v, f"{path}.{k}") for k, v in node["properties"].items()}
        return sparse_object(node, path, fields)
    if isinstance(node.get("additionalProperties"), dict):
        value = from_schema(node["additionalProperties"], path + "{}")
        resources = path.endswith(("limits{}", "requests{}")) or path.endswith(
            ("limits", "requests")
        )
        keys = (
            pick(["cpu", "memory", "nvidia.com/gpu", "hugepages-2Mi"], ["bogus", "kubernetes.io/x"])
            if resources
            else pick(["kubernetes.io/os", "team", "example.com/pool"], ["Bad Key", "a/b/c"])
        )
        return st.dictionaries(keys, value, max_size=3)
    return st.just({})


def pool_specs() -> st.SearchStrategy[dict[str, Any]]:
    """SandboxPool specs; the desktop's backend settings mostly match spec.backend."""
    schema = crdgen.model_schema(SandboxPoolSpec)
    base = from_schema(schema, "spec")

    @st.composite
    def coherent(draw: st.DrawFn) -> dict[str, Any]:
        spec = draw(base)
        desktop = spec.get("desktop")
        backend = spec.get("backend", "pod")
        if draw(st.integers(0, 4)) and backend in ("kubevirt", "external"):
            fields = schema["properties"]["desktop"]["properties"]
            own = draw(from_schema(fields[backend], f"spec.desktop.{backend}"))
            spec["desktop"] = {**(desktop or {}), backend: own}
            for other in ("pod", "vm", "kubevirt", "external"):
                if other != backend and draw(st.integers(0, 4)):
                    spec["desktop"].pop(other, None)
        return spec

    return coherent()


def run_specs() -> st.SearchStrategy[dict[str, Any]]:
    return from_schema(crdgen.model_schema(TrainingRunSpec), "spec")
