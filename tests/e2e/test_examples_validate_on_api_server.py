"""Every manifest in examples/ is accepted by the real API server against the CRDs (schema, CEL
rules, and strict field validation: an unknown or misspelt field is an error), and the
TrainingRuns also pass the trainer's own config model."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from kubecua_testkit.tools import REPO, run

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
REQUIRED = {
    "sandboxpool-small.yaml", "tiny-model.yaml", "trainingrun-tiny.yaml",  # the quick start's
    "sandboxpool-pod.yaml", "sandboxpool-kubevirt-ubuntu.yaml", "sandboxpool-external.yaml",
    "trainingrun-hf.yaml", "trainingrun-sglang.yaml", "trainingrun-evaluate.yaml",
}  # fmt: skip
TRAINER_PY = REPO / "trainer" / ".venv" / "bin" / "python"


@pytest.fixture(scope="module")
def crds(cluster):
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/sandboxpools.kubecua.dev", "crd/trainingruns.kubecua.dev",
        "crd/taskverifications.kubecua.dev",  # examples/taskverification.yaml
    )  # fmt: skip
    return cluster


def server_dry_run(cluster, namespace: str, text: str):
    return cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-",
        input=text, check=False,
    )  # fmt: skip


def test_the_examples_the_quick_start_names_exist():
    assert {p.name for p in EXAMPLES} >= REQUIRED


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_accepted_by_the_api_server(crds, namespace, path):
    # Local-mode manifests name ${VAR} paths that the trainer expands; any path will do here.
    text = re.sub(r"\$\{[A-Z_]+\}", "/var/lib/kubecua", path.read_text())
    proc = server_dry_run(crds, namespace, text)
    assert proc.returncode == 0, proc.stderr
    assert "(server dry run)" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("dataVolume", "also-a-disk", "set exactly one of containerDisk, dataVolume"),
        ("cpus", 8, 'unknown field "spec.desktop.kubevirt.cpus"'),
    ],
)
def test_a_broken_example_is_rejected_with_the_reason(crds, namespace, field, value, error):
    pool = yaml.safe_load((REPO / "examples" / "sandboxpool-kubevirt-ubuntu.yaml").read_text())
    pool["spec"]["desktop"]["kubevirt"][field] = value
    proc = server_dry_run(crds, namespace, yaml.safe_dump(pool))
    assert proc.returncode != 0
    assert error in proc.stderr


@pytest.mark.parametrize(
    "name",
    [
        "trainingrun-hf.yaml", "trainingrun-sglang.yaml", "trainingrun-evaluate.yaml",
        "trainingrun-tiny.yaml",
    ],
)  # fmt: skip
def test_trainingrun_examples_pass_the_trainer_config_model(name):
    if not TRAINER_PY.exists():
        pytest.skip("trainer/.venv is missing: run `make trainer-env`")
    path = REPO / "examples" / name
    proc = run([TRAINER_PY, "-m", "kubecua_trainer", "validate", path])
    validated, written = json.loads(proc.stdout), yaml.safe_load(path.read_text())["spec"]
    # The trainer read the manifest it was given: defaults filled, written values kept.
    assert (validated["steps"], validated["model"]) == (
        written["steps"],
        validated["model"] | written["model"],
    )
    assert validated.get("evaluation", {}).items() >= written.get("evaluation", {}).items()


def needs(doc: dict, pools: dict[str, dict]) -> set[str]:
    """What an example needs that this project's machines do not have: GPU, KubeVirt, model."""
    spec, found = doc["spec"], set[str]()
    if doc["kind"] == "SandboxPool":
        return {"KubeVirt"} if spec.get("backend") == "kubevirt" else set()
    if "local" in spec["sandboxes"]:
        return found  # make demo's run: CPU, local desktops, a model built from a config
    found.add("model")
    if spec.get("trainer", {}).get("gpusPerNode", 0) or spec["rollout"].get("engine") == "sglang":
        found.add("GPU")
    pool = pools.get(spec["sandboxes"].get("poolRef", ""), {})
    return found | needs(pool, pools) if pool else found


def test_each_example_says_in_its_first_line_what_it_needs():
    """Every example opens with `# Needs`; one that needs a GPU, KubeVirt or a real model says
    so in that first line (the tiny model's runs say `model` too: they need it on a PVC)."""
    docs = {
        p.name: next(d for d in yaml.safe_load_all(p.read_text()) if d["kind"] in KINDS)
        for p in EXAMPLES
        if any(d["kind"] in KINDS for d in yaml.safe_load_all(p.read_text()))
    }
    pools = {d["metadata"]["name"]: d for d in docs.values() if d["kind"] == "SandboxPool"}
    for path in EXAMPLES:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# Needs"), (path.name, first)
        for need in needs(docs[path.name], pools) if path.name in docs else ():
            assert need in first, (path.name, need, first)


KINDS = {"SandboxPool", "TrainingRun"}
