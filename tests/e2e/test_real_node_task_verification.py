"""A TaskVerification run for real: its verifier Job's pod runs on the real node (kubecua_testkit.
node) and plays a small family's solutions on a SandboxPool's sandbox pods there.

The chart is installed by the README's own `helm install` line (the journey's helpers); the
pool is 2 sandboxes from the sandbox image. Two verifications, one after the other:
- the sample: two good tasks of the built-in families (a file task and a typing task, as the
  offline suite samples them) and the offline suite's three known-bad tasks
  (sandbox-image/tasks/tests/known_bad.py: a broken reference, a no-op that passes, a random
  start), with the verdicts that suite expects of them. A TaskVerification's tasks are a folder
  inside its image, and the known-bad ones are not, and should not be, in the tasks image: its
  verifier image (spec.image) is the tasks image with that folder added, built here;
- a built-in family's folder (terminal, 2 tasks) in the operator's default image, the tasks image
  (`hack/build-images.sh tasks`, part of `make node-images`), as examples/taskverification.yaml
  runs one.
Asserted for each: the Job's one pod ran on the real node in the expected image and exited 0;
the status is Succeeded with the manifest's counts (tasks, usable, verdicts, unreproducible
starts, sandboxes) and its conditions; the manifest in `<name>-manifest` gives each task exactly
its verdict and start reproducibility, plays each solution twice on the pool's 2 sandbox pods,
and records each episode's start fingerprint (the first screen's dHash).

Left out: a failing verifier (the Failed phase and its last words) is checked on kwok only
(operator/tests/test_task_verification.py). Timings go to
$KUBECUA_CACHE/node/task-verification-figures.json.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

# The journey's helpers (module-level functions of a sibling test file, on sys.path by pytest).
# Not its `release` fixture: that one records its timing into the journey's own figures file,
# which a run of this module alone would then rewrite with that one figure.
from test_real_node_user_journey import OPERATOR, SYSTEM, quick_start_commands, shell

from kubecua_testkit import node as real
from kubecua_testkit.cluster import Cluster, node_for
from kubecua_testkit.node_tests import Figures, node_images, pod_ready
from kubecua_testkit.tools import REPO
from kubecua_testkit.wait import wait_for_object, wait_for_objects

pytestmark = pytest.mark.timeout(1200)
GROUP, VERSION, PLURAL = "kubecua.dev", "v1alpha1", "taskverifications"
NS, POOL, NAME, SANDBOXES, REPEATS = "task-verify", "desks", "sample", 2, 2
TASKS_IMAGE = "localhost/kubecua/tasks:dev"  # FROM of the verifier's image below
VERIFIER_IMAGE = "localhost/kubecua/tasks-e2e:dev"
FOLDER = "/opt/kubecua/e2e-tasks"  # the verified folder, inside VERIFIER_IMAGE
# A built-in family's folder of the tasks image itself: 2 tasks in a terminal.
BUILTIN_NAME, BUILTIN_FOLDER = "terminal", "/opt/kubecua/tasks/terminal"
IMAGES = ("localhost/kubecua/operator:dev", "localhost/kubecua/sandbox:dev")
PODMAN = ["podman", "--runtime", "runc"]  # as hack/build-images.sh: crun refuses this host
TASKS_DIR = REPO / "sandbox-image" / "tasks"
# Good tasks of the built-in families, as sandbox-image/tasks/tests/test_verify.py samples them.
GOOD = ["files/create-hello-file.json", "typeword/train/typeword-red-apple.json"]
FIGURES = Figures("task-verification-figures")


def known_bad() -> tuple[dict[str, str], dict[str, tuple[str, bool]]]:
    """The offline suite's known-bad tasks (their files, path -> text) and the (verdict,
    reproducible start) it expects of each, from sandbox-image/tasks/tests/known_bad.py. Written
    by a child python (taskkit is a plain module of the tasks folder, stdlib only), so this
    process's sys.path stays as it is."""
    code = (
        "import json; from known_bad import EXPECTED, known_bad_files\n"
        "print(json.dumps({'files': known_bad_files(), 'expected': EXPECTED}))"
    )
    path = f"{TASKS_DIR}:{TASKS_DIR / 'tests'}"
    out = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    found = json.loads(out)
    return found["files"], {k: (v[0], v[1]) for k, v in found["expected"].items()}


def write_context(root: Path) -> dict[str, tuple[str, bool]]:
    """The verifier image's build context under `root`: its Dockerfile and the tasks folder (the
    good tasks copied from the families' folders, the known-bad ones written); what each task's
    manifest entry must say, (verdict, reproducible start), by id."""
    tasks = root / "tasks"
    for rel in GOOD:
        for name in (rel, rel.replace(".json", ".solutions.json")):
            (tasks / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(TASKS_DIR / name, tasks / name)
    files, expected = known_bad()
    for name, text in files.items():
        (tasks / name).parent.mkdir(parents=True, exist_ok=True)
        (tasks / name).write_text(text)
    (root / "Dockerfile").write_text(f"FROM {TASKS_IMAGE}\nCOPY tasks/ {FOLDER}/\n")
    return {Path(r).stem: ("verified", True) for r in GOOD} | expected


def context_inputs(root: Path) -> str:
    """What the verifier image is made of: its base image's id and the context's files."""
    base = subprocess.run(
        [*PODMAN, "image", "inspect", "--format", "{{.Id}}", TASKS_IMAGE],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    h = hashlib.sha256(base.encode())
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(root)}\0".encode() + f.read_bytes())
    return h.hexdigest()[:16]


def build_verifier_image(root: Path) -> None:
    """podman build of the context, skipped when its inputs are unchanged (the node's import is
    then skipped too: the same image id); the version it replaces is removed."""
    inputs = context_inputs(root)
    inspect = [*PODMAN, "image", "inspect", "--format"]
    now = subprocess.run(
        [*inspect, '{{index .Labels "io.kubecua.inputs"}}', VERIFIER_IMAGE],
        capture_output=True, text=True,
    )  # fmt: skip
    if now.returncode == 0 and now.stdout.strip() == inputs:
        return
    old = subprocess.run([*inspect, "{{.Id}}", VERIFIER_IMAGE], capture_output=True, text=True)
    subprocess.run(
        [*PODMAN, "build", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
         "--label", f"io.kubecua.inputs={inputs}", "-t", VERIFIER_IMAGE, str(root)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    if old.returncode == 0:
        subprocess.run([*PODMAN, "rmi", old.stdout.strip()], capture_output=True)


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> tuple[Path, dict[str, tuple[str, bool]]]:
    root = tmp_path_factory.mktemp("verifier-image")
    return root, write_context(root)


@pytest.fixture(scope="module")
def cluster(real_node_cluster: Cluster, expected) -> Cluster:
    missing = [i for i in IMAGES if i not in node_images(real_node_cluster)]
    if missing:  # `make test-e2e` builds them first; a bare pytest run may not have
        pytest.skip(f"images {missing} are not built: run `make node-images`")
    have = subprocess.run([*PODMAN, "image", "exists", TASKS_IMAGE], capture_output=True)
    if have.returncode != 0:
        pytest.skip(f"{TASKS_IMAGE} is not built: run `make node-images`")
    started = time.monotonic()
    build_verifier_image(expected[0])
    # The whole image is streamed (podman save), the tasks image's layers with it; skipped when
    # the node already holds this image id.
    node_for(real_node_cluster).import_images([TASKS_IMAGE, VERIFIER_IMAGE])
    FIGURES.record("verifier_image_build_and_import_s", time.monotonic() - started)
    return real_node_cluster


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> Iterator[None]:
    install = quick_start_commands()[0]  # the README's own `helm install`, as written
    assert install.startswith(f"helm install kubecua charts/kubecua -n {SYSTEM}"), install
    started = time.monotonic()
    try:  # a failed install is uninstalled too: the next module installs the same release name
        shell(cluster, install)
        wait_for_objects(
            client.CoreV1Api(cluster.api_client()).list_namespaced_pod,
            lambda pods: any(pod_ready(p) for p in pods),
            timeout=120, namespace=SYSTEM, label_selector=OPERATOR,
        )  # fmt: skip
        FIGURES.record("helm_install_to_operator_ready_s", time.monotonic() - started)
        yield
    finally:
        cluster.helm("uninstall", "kubecua", "-n", SYSTEM, "--wait", check=False)


@pytest.fixture(scope="module")
def pool(cluster: Cluster, release) -> Iterator[str]:
    cluster.kubectl("create", "namespace", NS)
    manifest = {
        "apiVersion": "kubecua.dev/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "replicas": SANDBOXES, "backend": "pod", "warmSpares": 0,
            "desktop": {"os": "Ubuntu", "screen": {"width": 1280, "height": 720},
                        "pod": {"image": "localhost/kubecua/sandbox:dev",
                                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                                              "limits": {"memory": "3Gi"}}}},
        },
    }  # fmt: skip
    started = time.monotonic()
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
        cluster.kubectl(
            "wait", f"sandboxpool/{POOL}", "-n", NS, "--for=condition=Ready", "--timeout=420s",
            timeout=450,
        )  # fmt: skip
        FIGURES.record(f"pool_apply_to_{SANDBOXES}_ready_sandboxes_s", time.monotonic() - started)
        yield NS
    finally:
        # The kinds first, while the operator runs: it removes their finalizers.
        cluster.kubectl(
            "delete", "taskverifications,sandboxpools", "--all", "-n", NS, "--timeout=120s",
            check=False, timeout=150,
        )  # fmt: skip
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def wait_finished(cluster: Cluster, name: str, timeout: float) -> dict:
    """TaskVerification `name` once its phase is Succeeded or Failed."""
    custom = client.CustomObjectsApi(cluster.api_client())
    return wait_for_object(
        custom, GROUP, VERSION, NS, PLURAL, name,
        lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        timeout=timeout, what=f"{name} finished",
    )  # fmt: skip


def verify(cluster: Cluster, name: str, spec: dict) -> dict:
    """Apply TaskVerification `name` with `spec` (beside the pool, repeats and the verifier's
    sizes), wait until it finished, and return what the tests read: its status, the manifest
    from its ConfigMap, its Job's pods and their logs, and the pool's sandbox URLs."""
    core = client.CoreV1Api(cluster.api_client())
    sandboxes = [p for p in core.list_namespaced_pod(
        NS, label_selector=f"kubecua.dev/pool={POOL}").items if pod_ready(p)]  # fmt: skip
    body = {
        "apiVersion": "kubecua.dev/v1alpha1", "kind": "TaskVerification",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"poolRef": POOL, "repeats": REPEATS, "timeoutSeconds": 900, "backoffLimit": 0,
                 "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                               "limits": {"memory": "1Gi"}}, **spec},
    }  # fmt: skip
    started = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    final = wait_finished(cluster, name, timeout=900)
    FIGURES.record(f"{name}: apply_to_finished_s", time.monotonic() - started)
    job = f"{name}-verifier"
    pods = core.list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={job}")
    logs = {
        p.metadata.name: str(cluster.kubectl("logs", "-n", NS, p.metadata.name,
                                             check=False, timeout=60).stdout)
        for p in pods.items
    }  # fmt: skip
    status = final.get("status") or {}
    assert status.get("phase") == "Succeeded", (status, logs)
    cm = core.read_namespaced_config_map(f"{name}-manifest", NS)
    manifest = json.loads(cm.data["verified.json"])
    FIGURES.record(f"{name}: manifest_seconds", float(manifest["seconds"]))
    return {
        "status": status, "manifest": manifest, "pods": pods.items, "logs": logs,
        "sandbox_urls": {f"http://{p.status.pod_ip}:8000" for p in sandboxes},
    }  # fmt: skip


@pytest.fixture(scope="module")
def verification(cluster: Cluster, pool: str) -> dict:
    """The good and known-bad sample, in the verifier image built for it."""
    return verify(cluster, NAME, {"tasks": {"path": FOLDER}, "image": VERIFIER_IMAGE})


@pytest.fixture(scope="module")
def builtin(cluster: Cluster, pool: str, verification) -> dict:
    """A built-in family's folder in the operator's default image (the chart's
    operator.tasksImage), as examples/taskverification.yaml runs it; after the sample, so that
    each has both sandboxes to itself."""
    return verify(cluster, BUILTIN_NAME, {"tasks": {"path": BUILTIN_FOLDER}})


def check_ran_on_the_real_node(found: dict, name: str, image: str) -> None:
    pods = found["pods"]
    assert len(pods) == 1, [p.metadata.name for p in pods]  # backoffLimit 0: one try, it passed
    pod = pods[0]
    assert pod.spec.node_name == real.NAME
    assert pod.spec.containers[0].image == image
    assert pod.status.phase == "Succeeded", pod.status
    done = pod.status.container_statuses[0].state.terminated
    assert done is not None, pod.status
    assert done.exit_code == 0, done
    log = found["logs"][pod.metadata.name]
    assert f"manifest written into ConfigMap {NS}/{name}-manifest" in log, log[-3000:]
    status = found["status"]
    assert status["job"] == f"{name}-verifier"
    assert status["manifest"] == {"configMap": f"{name}-manifest", "key": "verified.json"}
    assert status["sandboxes"] == SANDBOXES
    assert status["seconds"] == round(found["manifest"]["seconds"], 1)
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Complete"]["status"] == "True", conds
    assert conds["Failed"]["status"] == "False", conds
    assert conds["SandboxesReady"]["status"] == "True", conds
    assert "Degraded" not in conds, conds


def check_episodes(found: dict) -> None:
    """Each solution played REPEATS times on the pool's sandbox pods (found by its
    EndpointSlices: both used), each episode with its start's fingerprint."""
    manifest = found["manifest"]
    assert manifest["repeats"] == REPEATS
    assert set(manifest["sandboxes"]) == found["sandbox_urls"], manifest["sandboxes"]
    solutions = ["reference", "noop", "wrong"]
    for t in manifest["tasks"]:
        assert list(t["scores"]) == solutions, t["scores"]
        assert all(len(t["scores"][s]) == REPEATS for s in solutions), t["scores"]
        assert len(t["episodes"]) == REPEATS * len(solutions)
        for e in t["episodes"]:  # every start's fingerprint: the first screen's dHash
            assert re.fullmatch(r"[0-9a-f]{64}", e["screen"] or ""), e
            assert e["sandbox"] in found["sandbox_urls"], e
            assert e["error"] is None, e
            assert not e["setup_failed"], e


def test_verifier_job_runs_on_the_real_node_and_the_status_counts_its_manifest(verification):
    check_ran_on_the_real_node(verification, NAME, VERIFIER_IMAGE)
    status = verification["status"]
    assert (status["tasks"], status["usable"], status["unreproducibleStarts"]) == (5, 2, 1)
    assert status["verdicts"] == {"verified": 3, "reference-fails": 1, "noop-passes": 1}


def test_manifest_gives_each_task_its_verdict_and_records_start_fingerprints(
    verification, expected
):
    manifest, want = verification["manifest"], expected[1]
    got = {t["id"]: (t["verdict"], t["reproducible_start"]) for t in manifest["tasks"]}
    assert got == want, {
        t["id"]: (t["scores"], t["episodes"])
        for t in manifest["tasks"]
        if got[t["id"]] != want[t["id"]]
    }
    assert manifest["folder"] == FOLDER
    assert manifest["summary"]["usable"] == len(GOOD)
    assert manifest["summary"]["unreproducible-start"] == 1
    check_episodes(verification)
    scores = {t["id"]: t["scores"] for t in manifest["tasks"]}
    assert scores["known-bad-broken-reference"]["reference"] == [0.0, 0.0]
    assert scores["known-bad-noop-passes"]["noop"] == [1.0, 1.0]
    for good in GOOD:
        assert scores[Path(good).stem] == {"reference": [1.0, 1.0], "noop": [0.0, 0.0],
                                           "wrong": [0.0, 0.0]}  # fmt: skip


def test_a_built_in_family_verifies_in_the_default_tasks_image(builtin):
    check_ran_on_the_real_node(builtin, BUILTIN_NAME, TASKS_IMAGE)
    status, manifest = builtin["status"], builtin["manifest"]
    ids = sorted(p.stem for p in (TASKS_DIR / "terminal").glob("*.json")
                 if not p.name.endswith(".solutions.json"))  # fmt: skip
    assert sorted(t["id"] for t in manifest["tasks"]) == ids
    assert all((t["verdict"], t["reproducible_start"]) == ("verified", True)
               for t in manifest["tasks"]), manifest["tasks"]  # fmt: skip
    assert (status["tasks"], status["usable"], status["unreproducibleStarts"]) == (2, 2, 0)
    assert status["verdicts"] == {"verified": 2}
    assert manifest["folder"] == BUILTIN_FOLDER
    check_episodes(builtin)
