"""Every count and size a user sets is bounded in both CRDs (issue 42): each integer has a maximum,
each string a maxLength (or an enum), each list a maxItems, each map a maxProperties, so the API
server refuses an abusive spec (spec.trainer.nodes: 1000000) naming its path. Walks the schemas
`make crds` generates, so a new unbounded field fails here, not in a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from kubecua_api import crdgen
from kubecua_api.errors import InvalidSpec, validate_spec
from kubecua_api.trainingrun import MAX_NODES, TrainingRunSpec


def spec_schema(plural: str) -> dict[str, Any]:
    crd = crdgen.render(crdgen.templates()[plural])
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def unbounded(node: dict[str, Any], path: str) -> list[str]:
    """Paths of the nodes below `node` that lack the bound of their type."""
    out = []
    kind = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        if "maxLength" not in node:
            out.append(f"{path} (int-or-string without maxLength)")
    elif kind == "integer" and "maximum" not in node:
        out.append(f"{path} (integer without maximum)")
    elif kind == "string" and "maxLength" not in node and "enum" not in node:
        out.append(f"{path} (string without maxLength)")
    elif kind == "array":
        if "maxItems" not in node:
            out.append(f"{path} (list without maxItems)")
        out += unbounded(node["items"], f"{path}[]")
    elif kind == "object" and "additionalProperties" in node:
        if "maxProperties" not in node:
            out.append(f"{path} (map without maxProperties)")
        out += unbounded(node["additionalProperties"], f"{path}{{}}")
    for name, child in node.get("properties", {}).items():
        out += unbounded(child, f"{path}.{name}")
    return out


@pytest.mark.parametrize("plural", ["trainingruns", "sandboxpools"])
def test_every_count_and_size_in_the_spec_is_bounded(plural: str) -> None:
    assert unbounded(spec_schema(plural), "spec") == []


def test_trainer_nodes_maximum_is_in_the_crd_and_the_model() -> None:
    nodes = spec_schema("trainingruns")["properties"]["trainer"]["properties"]["nodes"]
    assert (nodes["minimum"], nodes["maximum"]) == (1, MAX_NODES) == (1, 1024)
    base = {"model": {"path": "/m"}, "sandboxes": {"poolRef": "p"}, "tasks": {"path": "/t"}}
    with pytest.raises(InvalidSpec, match=r"^spec.trainer.nodes: Input should be less than or"):
        validate_spec(TrainingRunSpec, {**base, "steps": 1, "trainer": {"nodes": 1_000_000}})
    assert validate_spec(TrainingRunSpec, {**base, "steps": 1, "trainer": {"nodes": 1024}})


def test_an_empty_task_id_list_is_refused_naming_the_field() -> None:
    base = {"model": {"path": "/m"}, "sandboxes": {"poolRef": "p"}, "steps": 1}
    with pytest.raises(InvalidSpec, match=r"^spec.tasks.ids: List should have at least 1 item"):
        validate_spec(TrainingRunSpec, {**base, "tasks": {"path": "/t", "ids": []}})
