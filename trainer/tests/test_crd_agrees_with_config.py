"""The TrainingRun CRD (crds/) and the trainer's pydantic config describe one spec.

Walks both schemas together and compares, field by field: the set of field names, the JSON
type, defaults, enums and numeric bounds. A field added to one side only fails here."""

from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from kubecua_trainer.config import TrainingRunSpec

CRD = Path(__file__).resolve().parents[2] / "crds" / "kubecua.dev_trainingruns.yaml"
# Fields whose CRD schema is Kubernetes' own type rather than ours.
OPAQUE = {"spec.trainer.resources"}
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def crd_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["storage"])
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Follow $ref and drop the `null` branch of Optional fields (`anyOf: [X, null]`)."""
    if "$ref" in node:
        return resolve(defs[node["$ref"].split("/")[-1]], defs)
    branches = [b for b in node.get("anyOf", []) if b.get("type") != "null"]
    if len(branches) == 1:
        merged = {k: v for k, v in node.items() if k != "anyOf"}
        return {**resolve(branches[0], defs), **merged}
    return node


def pairs(crd: dict, model: dict, defs: dict, path: str = "spec"):
    """Yield (path, crd node, model node) for every field of the spec, recursively."""
    yield path, crd, model
    if path in OPAQUE:
        return
    crd_props = crd.get("properties", {})
    model_props = model.get("properties", {})
    assert set(crd_props) == set(model_props), f"{path}: fields differ"
    for name in crd_props:
        yield from pairs(crd_props[name], resolve(model_props[name], defs), defs, f"{path}.{name}")
    if crd.get("type") == "array":
        yield from pairs(crd["items"], resolve(model["items"], defs), defs, f"{path}[]")


def model_schema() -> tuple[dict, dict]:
    schema = TrainingRunSpec.model_json_schema(by_alias=True)
    return schema, schema.get("$defs", {})


FIELDS = list(pairs(crd_spec_schema(), *model_schema()))


def test_both_schemas_cover_every_documented_group():
    top = {p.split(".")[1] for p, _, _ in FIELDS if p.count(".") >= 1}
    assert {"model", "sandboxes", "tasks", "algorithm", "rollout", "trainer", "steps"} <= top


@pytest.mark.parametrize(("path", "crd", "model"), FIELDS, ids=[p for p, _, _ in FIELDS])
def test_field_agrees(path, crd, model):
    if "type" in model:
        want = "number" if model["type"] == "number" else model["type"]
        assert crd.get("type") == want, f"{path}: type"
    if "enum" in model or "const" in model:
        assert set(crd.get("enum", [])) == set(model.get("enum", [model.get("const")]))
    if "default" in model and model["default"] is not None and crd.get("type") != "object":
        assert crd.get("default") == model["default"], f"{path}: default"
    for bound in BOUNDS:
        if bound in model:
            assert _bound(crd, bound) == model[bound], f"{path}: {bound}"


def _bound(crd: dict, bound: str):
    """OpenAPI v3.0 (the CRD) spells exclusive bounds as minimum + exclusiveMinimum: true."""
    if bound.startswith("exclusive"):
        plain = "minimum" if bound == "exclusiveMinimum" else "maximum"
        return crd.get(plain) if crd.get(bound) is True else crd.get(bound)
    return crd.get(bound)
