"""The CRD generator: structural output, template paths checked, and the stale check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kubecua_api import crdgen

REPO = Path(__file__).resolve().parents[2]


def walk(node, path="$"):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


@pytest.mark.parametrize("name", sorted(crdgen.crd_files()))
def test_generated_schemas_are_structural(name: str):
    crd = yaml.safe_load(crdgen.crd_files()[name])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        if isinstance(node, dict) and "type" in node and not path.endswith(".properties"):
            assert not {"$ref", "title", "allOf", "const"} & set(node), path
            assert node.get("default", "") is not None, f"{path}: default null"
            assert node.get("exclusiveMinimum", True) is True, f"{path}: OpenAPI v3.0 bounds"
            assert node.get("additionalProperties", {}) not in (True, False), path
        if isinstance(node, dict) and "anyOf" in node:  # only the int-or-string form
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            assert node.get("x-kubernetes-int-or-string") is True, path


def test_sub_objects_that_default_as_a_whole_default_to_empty():
    crd = yaml.safe_load(crdgen.crd_files()["kubecua.dev_trainingruns.yaml"])
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["metrics"]["default"] == {}
    assert spec["properties"]["metrics"]["properties"]["port"]["default"] == 9400
    assert spec["properties"]["algorithm"]["properties"]["learningRate"]["exclusiveMinimum"] is True
    assert "default" not in spec["properties"]["evaluation"]


def test_a_template_path_without_a_field_fails():
    template = crdgen.templates()["trainingruns"]
    template["schema"] = {"spec.algorithm.nope": {"x-kubernetes-validations": []}}
    with pytest.raises(KeyError, match=r"spec\.algorithm\.nope"):
        crdgen.render(template)


def test_check_names_each_stale_file(tmp_path: Path, capsys):
    for part in ("crds", "charts/kubecua/files/crds", "docs"):
        (tmp_path / part).mkdir(parents=True)
    shutil.copy(REPO / "docs" / "api.md", tmp_path / "docs" / "api.md")
    assert crdgen.main(["--root", str(tmp_path)]) == 0
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0
    stale = tmp_path / "crds" / "kubecua.dev_sandboxpools.yaml"
    stale.write_text(stale.read_text().replace("maximum: 10000", "maximum: 20000", 1))
    (tmp_path / "crds" / "extra.yaml").write_text("{}\n")
    capsys.readouterr()
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "crds/kubecua.dev_sandboxpools.yaml" in err
    assert "crds/extra.yaml" in err
    assert "trainingruns" not in err


def test_the_repository_is_up_to_date():
    """crds/, the chart's copy and docs/api.md are what the models and templates make."""
    assert crdgen.main(["--check"]) == 0, "run `make crds`"
