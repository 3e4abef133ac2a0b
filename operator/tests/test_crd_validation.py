"""The API server itself refuses bad SandboxPools and TrainingRuns, naming the field.

Runs against the real kube-apiserver (OpenAPI schema, defaults and CEL rules); no operator needed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

POOL = {
    "apiVersion": "kubecua.dev/v1alpha1",
    "kind": "SandboxPool",
    "metadata": {"name": "p"},
    "spec": {"replicas": 1, "backend": "pod"},
}
RUN = {
    "apiVersion": "kubecua.dev/v1alpha1",
    "kind": "TrainingRun",
    "metadata": {"name": "r"},
    "spec": {
        "model": {"path": "/models/tiny"},
        "sandboxes": {"poolRef": "p"},
        "tasks": {"configMapRef": "tasks"},
        "steps": 10,
    },
}


def with_spec(base: dict, **changes: Any) -> dict:
    """A copy of `base` with dotted spec paths set; a value of None deletes the key."""
    obj = json.loads(json.dumps(base))
    for path, value in changes.items():
        node = obj["spec"]
        *parents, leaf = path.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return obj


def named(base: dict, name: str) -> dict:
    obj = json.loads(json.dumps(base))
    obj["metadata"]["name"] = name
    return obj


KV = {"kubevirt": {"containerDisk": "img", "dataVolume": "dv"}}
BAD = [
    ("negative replicas", with_spec(POOL, replicas=-1), "spec.replicas"),
    ("unknown backend", with_spec(POOL, backend="docker"), "spec.backend"),
    (
        "kubevirt without settings",
        with_spec(POOL, backend="kubevirt"),
        "spec.desktop.kubevirt is required",
    ),
    (
        "two boot disks",
        with_spec(POOL, backend="kubevirt", desktop=KV),
        "exactly one of containerDisk, dataVolume",
    ),
    (
        "external without endpoints",
        with_spec(POOL, backend="external", desktop={"external": {}}),
        "spec.desktop.external.endpoints",
    ),
    (
        "more replicas than endpoints",
        with_spec(
            POOL,
            backend="external",
            replicas=3,
            desktop={"external": {"endpoints": ["http://10.0.0.1:8000"]}},
        ),
        "spec.replicas must not exceed",
    ),
    (
        "non-http endpoint",
        with_spec(POOL, backend="external", desktop={"external": {"endpoints": ["ftp://x"]}}),
        "spec.desktop.external.endpoints[0]",
    ),
    (  # the operator never recreates or replaces an external pool's machines
        "recreate on external",
        with_spec(
            POOL,
            backend="external",
            reset={"strategy": "recreate"},
            desktop={"external": {"endpoints": ["http://10.0.0.1:8000"]}},
        ),
        "spec.reset.strategy: Invalid value",
    ),
    (
        "an episode cap on external",
        with_spec(
            POOL,
            backend="external",
            reset={"maxEpisodesPerSandbox": 5},
            desktop={"external": {"endpoints": ["http://10.0.0.1:8000"]}},
        ),
        "spec.reset.maxEpisodesPerSandbox: Invalid value",
    ),
    (
        "tiny screen",
        with_spec(POOL, desktop={"screen": {"width": 100}}),
        "spec.desktop.screen.width",
    ),
    ("typo in a field", with_spec(POOL, replica=3), 'unknown field "spec.replica"'),
    (
        "pod settings on external",
        with_spec(
            POOL,
            backend="external",
            desktop={"pod": {"image": "x"}, "external": {"endpoints": ["http://a.lab:1"]}},
        ),
        "spec.desktop.pod is only allowed",
    ),
    (
        "memory in GB",
        with_spec(
            POOL, backend="kubevirt", desktop={"kubevirt": {"containerDisk": "i", "memory": "8GB"}}
        ),
        "spec.desktop.kubevirt.memory",
    ),
    (
        "unknown reset strategy",
        with_spec(POOL, reset={"strategy": "reboot"}),
        "spec.reset.strategy",
    ),
    ("run without steps", with_spec(RUN, steps=None), "spec.steps: Required"),
    (
        "two sandbox sources",
        with_spec(RUN, sandboxes={"poolRef": "p", "urls": ["http://a:1"]}),
        "spec.sandboxes: set exactly one of poolRef, urls, local",
    ),
    (
        "no sandbox source",
        with_spec(RUN, sandboxes={"minReady": 2}),
        "spec.sandboxes: set exactly one",
    ),
    (
        "no task source",
        with_spec(RUN, tasks={"ids": ["a"]}),
        "spec.tasks: set exactly one of configMapRef, path",
    ),
    (
        "clip high below low",
        with_spec(RUN, algorithm={"clip": {"low": 0.3, "high": 0.2}}),
        "spec.algorithm.clip: high must be >= low",
    ),
    ("group of one", with_spec(RUN, algorithm={"groupSize": 1}), "spec.algorithm.groupSize"),
    ("unknown engine", with_spec(RUN, rollout={"engine": "vllm"}), "spec.rollout.engine"),
    (
        "zero learning rate",
        with_spec(RUN, algorithm={"learningRate": 0}),
        "spec.algorithm.learningRate",
    ),
    ("model without path", with_spec(RUN, model={"volume": "v"}), "spec.model.path"),
    (
        "too many local desktops",
        with_spec(RUN, sandboxes={"local": {"replicas": 17}}),
        "spec.sandboxes.local.replicas",
    ),
    (
        "min ready zero",
        with_spec(RUN, sandboxes={"poolRef": "p", "minReady": 0}),
        "spec.sandboxes.minReady",
    ),
    # Accepted before, but no cluster could run them (issue 13, finding 8).
    ("pool name too long", named(POOL, "p" * 51), "at most 50 characters"),
    ("pool name with a dot", named(POOL, "desks.v2"), "no dots"),
    ("run name too long", named(RUN, "r" * 51), "at most 50 characters"),
    (
        "external port past 65535",
        with_spec(
            POOL, backend="external", desktop={"external": {"endpoints": ["http://10.0.0.1:99999"]}}
        ),
        "spec.desktop.external.endpoints[0]",
    ),
    (
        "egress port zero",
        with_spec(POOL, egress=[{"ports": [{"port": 0}]}]),
        "spec.egress[0].ports[0].port",
    ),
    (
        "egress cidr not a cidr",
        with_spec(POOL, egress=[{"to": [{"ipBlock": {"cidr": "everywhere"}}]}]),
        "spec.egress[0].to[0].ipBlock.cidr",
    ),
    (
        "egress misspelt field",
        with_spec(POOL, egress=[{"too": [{"podSelector": {}}]}]),
        'unknown field "spec.egress[0].too"',
    ),
    (
        "egress protocol",
        with_spec(POOL, egress=[{"ports": [{"protocol": "ICMP", "port": 1}]}]),
        "spec.egress[0].ports[0].protocol",
    ),
    (
        "sandbox request above its limit",
        with_spec(
            POOL, desktop={"pod": {"resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}}}
        ),
        "a request must not exceed its limit",
    ),
    (
        "sandbox memory not a quantity",
        with_spec(POOL, desktop={"pod": {"resources": {"limits": {"memory": "lots"}}}}),
        "spec.desktop.pod.resources.limits.memory",
    ),
    (
        "trainer request above its limit",
        with_spec(
            RUN, trainer={"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}
        ),
        "a request must not exceed its limit",
    ),
    (
        "token secret ref not a name",
        with_spec(RUN, sandboxes={"poolRef": "p", "tokenSecretRef": "../etc"}),
        "spec.sandboxes.tokenSecretRef",
    ),
    (
        "token secret ref not a sandbox token",
        with_spec(RUN, sandboxes={"poolRef": "p", "tokenSecretRef": "db-password"}),
        'spec.sandboxes.tokenSecretRef: Invalid value: "string": must end in -sandbox-token',
    ),
    # Issue 19: evaluation, warm-up and the algorithm options.
    (
        "steps 0 without evaluation",
        with_spec(RUN, steps=0),
        'spec.steps: Invalid value: "object": steps 0 evaluates only: set spec.evaluation',
    ),
    ("negative steps", with_spec(RUN, steps=-1), "spec.steps"),
    (
        "no held-out episodes",
        with_spec(RUN, evaluation={"tasks": {"path": "/t"}, "episodesPerTask": 0}),
        "spec.evaluation.episodesPerTask",
    ),
    (
        "held-out tasks without a source",
        with_spec(RUN, evaluation={"tasks": {"ids": ["a"]}}),
        "spec.evaluation.tasks: set exactly one of configMapRef, path",
    ),
    ("evaluation without tasks", with_spec(RUN, evaluation={}), "spec.evaluation.tasks: Required"),
    (
        "gspo clip high below low",
        with_spec(RUN, algorithm={"gspoClip": {"low": 0.001, "high": 0.0005}}),
        "spec.algorithm.gspoClip: high must be >= low",
    ),
    (
        "gspo clip high below the default low",
        with_spec(RUN, algorithm={"gspoClip": {"high": 0.0001}}),
        "spec.algorithm.gspoClip: high must be >= low",
    ),
    (
        "unknown policy loss",
        with_spec(RUN, algorithm={"policyLoss": "grpo"}),
        "spec.algorithm.policyLoss",
    ),
    (
        "negative entropy bonus",
        with_spec(RUN, algorithm={"entropyCoef": -0.1}),
        "spec.algorithm.entropyCoef",
    ),
    (
        "more mini-batches than the step's episodes",
        with_spec(RUN, algorithm={"groupSize": 4, "tasksPerStep": 2, "miniBatches": 9}),
        "spec.algorithm.miniBatches: Invalid value",
    ),
    (
        "zero mini-batches",
        with_spec(RUN, algorithm={"miniBatches": 0}),
        "spec.algorithm.miniBatches",
    ),
    (
        "zero end temperature",
        with_spec(RUN, algorithm={"temperatureEnd": 0}),
        "spec.algorithm.temperatureEnd",
    ),
    (
        "warm-up without demonstrations",
        with_spec(RUN, warmup={"epochs": 2}),
        "spec.warmup.demonstrations: Required",
    ),
    # Issue 30: shaped rewards.
    ("negative reward weight", with_spec(RUN, reward={"partial": -0.3}), "spec.reward.partial"),
    ("reward weight above 10", with_spec(RUN, reward={"format": 11}), "spec.reward.format"),
    (
        "penalty above 1",
        with_spec(RUN, reward={"penalties": {"repeat": 1.5}}),
        "spec.reward.penalties.repeat",
    ),
    # Issue 22: runs that size their pool.
    (
        "baseline above the runs' cap",
        with_spec(POOL, replicas=5, maxReplicas=4),
        'spec.replicas: Invalid value: "object": spec.replicas must not exceed spec.maxReplicas',
    ),
    ("negative max replicas", with_spec(POOL, maxReplicas=-1), "spec.maxReplicas"),
    (
        "capacity without a pool",
        with_spec(RUN, sandboxes={"urls": ["http://a:1"], "capacity": {"episodes": 2}}),
        'spec.sandboxes.capacity: Invalid value: "object": spec.sandboxes.capacity asks a pool',
    ),
    (
        "capacity without episodes",
        with_spec(RUN, sandboxes={"poolRef": "p", "capacity": {"spares": 2}}),
        "spec.sandboxes.capacity.episodes: Required",
    ),
    (
        "zero episodes",
        with_spec(RUN, sandboxes={"poolRef": "p", "capacity": {"episodes": 0}}),
        "spec.sandboxes.capacity.episodes",
    ),
    # Issue 33: LoRA and the curriculum.
    (
        "zero LoRA rank",
        with_spec(RUN, model={"path": "/m", "lora": {"rank": 0}}),
        "spec.model.lora.rank",
    ),
    (
        "LoRA rank above 256",
        with_spec(RUN, model={"path": "/m", "lora": {"rank": 512}}),
        "spec.model.lora.rank",
    ),
    (
        "LoRA on the output head",
        with_spec(RUN, model={"path": "/m", "lora": {"targetModules": ["q_proj", "lm_head"]}}),
        "spec.model.lora.targetModules[1]: Invalid value",
    ),
    (
        "LoRA target module not a name",
        with_spec(RUN, model={"path": "/m", "lora": {"targetModules": ["q_proj; rm"]}}),
        "spec.model.lora.targetModules[0]",
    ),
    (
        "LoRA on a layer sglang cannot adapt",
        with_spec(
            RUN,
            model={"path": "/m", "lora": {"targetModules": ["qkv"]}},
            rollout={"engine": "sglang", "sglangUrls": ["http://s:30000"]},
        ),
        "spec.model.lora.targetModules: Invalid value",
    ),
    (
        "curriculum band upside down",
        with_spec(
            RUN, tasks={"configMapRef": "t", "curriculum": {"band": {"low": 0.8, "high": 0.2}}}
        ),
        "spec.tasks.curriculum.band: high must be >= low",
    ),
    (
        "zero curriculum floor",
        with_spec(RUN, tasks={"configMapRef": "t", "curriculum": {"floor": 0}}),
        "spec.tasks.curriculum.floor",
    ),
    # issue 31 item 4: the disaggregated placement (kubecua_trainer/placement/placement.py)
    (
        "disaggregated on one process",
        with_spec(RUN, trainer={"placement": "disaggregated", "gpusPerNode": 1}),
        "spec.trainer.placement: Invalid value",
    ),
    (
        "every process generating",
        with_spec(
            RUN, trainer={"placement": "disaggregated", "gpusPerNode": 2, "generatingProcesses": 2}
        ),
        "spec.trainer.generatingProcesses: Invalid value",
    ),
    (
        "disaggregated with sglang",
        with_spec(
            RUN,
            trainer={"placement": "disaggregated", "nodes": 2},
            rollout={"engine": "sglang", "sglangUrls": ["http://s:30000"]},
        ),
        "spec.trainer.placement: Invalid value",
    ),
    (
        "beforeWarmup without a warm-up",
        with_spec(RUN, evaluation={"tasks": {"path": "/t"}, "beforeWarmup": True}),
        "spec.evaluation.beforeWarmup: Invalid value",
    ),
]


@pytest.mark.parametrize(("case", "manifest", "field"), BAD, ids=[b[0] for b in BAD])
def test_api_server_refuses_bad_manifest_naming_the_field(cluster, crds, case, manifest, field):
    proc = cluster.kubectl(
        "create",
        "--dry-run=server",
        "-n",
        "default",
        "-f",
        "-",
        input=yaml.safe_dump(manifest),
        check=False,
    )
    assert proc.returncode != 0, f"{case}: accepted"
    assert field in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("manifest", "patch", "message"),
    [
        (POOL, {"spec": {"backend": "external"}}, "spec.backend is immutable"),
        (RUN, {"spec": {"sandboxes": {"poolRef": "other"}}}, "spec.sandboxes.poolRef is immutable"),
        # Removal is a change too: otherwise remove in one patch, set anew in the next.
        (
            RUN,
            {"spec": {"sandboxes": {"poolRef": None, "urls": ["http://a:1"]}}},
            "spec.sandboxes.poolRef is immutable",
        ),
        (
            with_spec(RUN, kueue={"queueName": "gpu"}),
            {"spec": {"kueue": {"queueName": None}}},
            "spec.kueue.queueName is immutable",
        ),
        (RUN, {"spec": {"kueue": {"queueName": "gpu"}}}, "spec.kueue.queueName is immutable"),
    ],
)
def test_immutable_fields_refuse_changes(cluster, crds, namespace, manifest, patch, message):
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    kind = manifest["kind"].lower()
    proc = cluster.kubectl(
        "patch",
        kind,
        manifest["metadata"]["name"],
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps(patch),
        check=False,
    )
    assert proc.returncode != 0
    assert message in proc.stderr


def test_defaults_fill_a_minimal_training_run(cluster, crds, namespace):
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(RUN))
    got = json.loads(
        cluster.kubectl("get", "trainingrun", "r", "-n", namespace, "-o", "json").stdout
    )
    spec = got["spec"]
    assert spec["algorithm"]["groupSize"] == 8
    assert spec["algorithm"]["clip"] == {"low": 0.2, "high": 0.28}
    assert spec["rollout"]["engine"] == "hf"
    assert spec["rollout"]["maxPixels"] == 1003520
    assert spec["sandboxes"]["minReady"] == 1
    assert spec["checkpoint"]["path"] == "/ckpt"
    assert spec["backoffLimit"] == 3
    assert spec["suspend"] is False
    assert spec["algorithm"]["gspoClip"] == {"low": 0.0003, "high": 0.0004}
    assert (spec["algorithm"]["policyLoss"], spec["algorithm"]["entropyCoef"]) == ("ppo", 0)
    assert spec["algorithm"]["miniBatches"] == 1  # one optimizer step a training step
    assert "evaluation" not in spec  # off unless asked for, as the warm-up
    assert spec["reward"] == {"score": 1, "partial": 0, "format": 0,
                              "penalties": {"repeat": 0, "invalid": 0, "turn": 0}}  # fmt: skip
    assert "aggregation" not in spec["algorithm"]  # the trainer's: it follows policyLoss
    assert "warmup" not in spec


def test_defaults_fill_an_evaluation_and_a_warmup(cluster, crds, namespace):
    run = with_spec(
        named(RUN, "ev"),
        steps=0,
        evaluation={"tasks": {"path": "/t"}},
        warmup={"demonstrations": "/d"},
    )
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(run))
    got = json.loads(cluster.kubectl("get", "trun", "ev", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["evaluation"] == {
        "tasks": {"path": "/t"}, "everySteps": 0, "atStart": True, "beforeWarmup": False,
        "episodesPerTask": 1, "temperature": 0,
    }  # fmt: skip
    assert got["spec"]["warmup"] == {
        "demonstrations": "/d", "epochs": 1, "batchSize": 8, "learningRate": 1e-05,
        "schedule": "constant", "rampFraction": 0.0, "floorFraction": 0.1,
        "successesOnly": True,
        # whether the warm-up took is measured in every run (issue 41): extend once, then fail
        "goal": {"demonstrations": 32, "replyMatchMin": 0.7, "onBelowGoal": "extend",
                 "extendEpochs": 30},
    }  # fmt: skip


def test_scale_subresource_short_names_and_category(cluster, crds, namespace):
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(POOL))
    cluster.kubectl("scale", "sbp/p", "-n", namespace, "--replicas=4")
    got = json.loads(cluster.kubectl("get", "spool", "p", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["replicas"] == 4
    assert got["spec"]["desktop"]["screen"] == {"width": 1920, "height": 1080}
    listed = cluster.kubectl("get", "kubecua", "-n", namespace).stdout
    assert "sandboxpool.kubecua.dev/p" in listed
    header = cluster.kubectl("get", "sbp", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "BACKEND", "DESIRED", "CURRENT", "READY", "LEASED", "AGE"]


def test_scaling_a_pool_past_its_max_replicas_is_refused(cluster, crds, namespace):
    """What an HPA whose maxReplicas exceeds the pool's gets from the scale subresource: the
    baseline (spec.replicas, the HPA's) above the runs' cap is the ambiguous case, refused."""
    pool = with_spec(POOL, replicas=2, maxReplicas=6)
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(pool))
    cluster.kubectl("scale", "sbp/p", "-n", namespace, "--replicas=6")
    proc = cluster.kubectl("scale", "sbp/p", "-n", namespace, "--replicas=7", check=False)
    assert proc.returncode != 0
    assert "spec.replicas must not exceed spec.maxReplicas" in proc.stderr, proc.stderr
    got = json.loads(cluster.kubectl("get", "sbp", "p", "-n", namespace, "-o", "json").stdout)
    assert (got["spec"]["replicas"], got["spec"]["maxReplicas"]) == (6, 6)


def test_kubectl_explain_reads_the_field_descriptions(cluster, crds):
    out = cluster.kubectl("explain", "sandboxpools.spec.warmSpares").stdout
    assert "Idle sandboxes kept beyond the leased ones" in out
    out = cluster.kubectl("explain", "trainingruns.spec.algorithm.clip.high").stdout
    assert "Upper clip" in out


RESOURCES = {
    "requests": {"cpu": "500m", "memory": 1073741824},
    "limits": {"cpu": 2, "memory": "2Gi"},
}
GOOD = [
    with_spec(
        POOL,
        egress=[
            {
                "to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                "ports": [{"port": 443}, {"port": "https", "protocol": "TCP"}],
            },
            {
                "to": [
                    {
                        "namespaceSelector": {"matchLabels": {"team": "a"}},
                        "podSelector": {
                            "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]
                        },
                    }
                ]
            },
        ],
        desktop={"pod": {"resources": RESOURCES}},
    ),
    named(POOL, "p" * 50),
    with_spec(
        POOL, backend="external", desktop={"external": {"endpoints": ["http://10.0.0.1:65535/"]}}
    ),
    named(with_spec(RUN, trainer={"resources": {"limits": {"nvidia.com/gpu": 1}}}), "r" * 50),
    with_spec(
        RUN, steps=0, evaluation={"tasks": {"configMapRef": "held-out"}, "episodesPerTask": 64}
    ),
    with_spec(
        RUN,
        algorithm={
            "policyLoss": "gspo",
            "gspoClip": {"low": 0.0003, "high": 0.0003},
            "entropyCoef": 0.01,
            "temperature": 0.8,
            "temperatureEnd": 0.5,
        },
    ),
    with_spec(POOL, replicas=4, maxReplicas=4),
    with_spec(POOL, reset={"strategy": "recreate", "maxEpisodesPerSandbox": 5}),  # pods recycle
    with_spec(  # an external pool's reset as the default has it, written out
        POOL,
        backend="external",
        reset={"strategy": "inPlace", "maxEpisodesPerSandbox": 0, "verify": False},
        desktop={"external": {"endpoints": ["http://10.0.0.1:8000"]}},
    ),
    with_spec(RUN, sandboxes={"poolRef": "p", "capacity": {"episodes": 8, "spares": 2}}),
    with_spec(RUN, model={"path": "/m", "lora": {"rank": 256, "dropout": 0.9}}),
    with_spec(
        RUN,
        model={"path": "/m", "lora": {"targetModules": ["q_proj", "down_proj"]}},
        rollout={"engine": "sglang", "sglangUrls": ["http://s:30000"]},
    ),
    with_spec(RUN, tasks={"configMapRef": "t", "curriculum": {"band": {"low": 0.5, "high": 0.5}}}),
    with_spec(
        RUN,
        evaluation={"tasks": {"path": "/t"}, "beforeWarmup": True},
        warmup={"demonstrations": "/d"},
    ),
]


@pytest.mark.parametrize("manifest", GOOD, ids=range(len(GOOD)))
def test_api_server_accepts_the_valid_edges(cluster, crds, manifest):
    proc = cluster.kubectl(
        "create", "--dry-run=server", "-n", "default", "-f", "-",
        input=yaml.safe_dump(manifest), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("os_name", ["Windows", "windows", "macOS"])
def test_a_non_ubuntu_pool_is_refused_naming_the_field_and_why(cluster, crds, os_name):
    # The episode server refuses any desktop but Linux at start-up (KUBECUA_DESKTOP_OS), so such a
    # pool could never become ready: the API server refuses it instead, and says why.
    pool = with_spec(
        POOL, backend="kubevirt", desktop={"os": os_name, "kubevirt": {"dataVolume": "golden"}}
    )
    proc = cluster.kubectl(
        "create", "--dry-run=server", "-n", "default", "-f", "-",
        input=yaml.safe_dump(pool), check=False,
    )  # fmt: skip
    assert proc.returncode != 0, "accepted"
    assert "spec.desktop.os: Invalid value" in proc.stderr, proc.stderr
    assert "the episode server drives Linux desktops only" in proc.stderr
    assert "a Windows pool could never become ready" in proc.stderr


def test_an_ubuntu_pool_is_accepted_and_os_defaults_to_ubuntu(cluster, crds, namespace):
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(named(POOL, "u")))
    got = json.loads(cluster.kubectl("get", "sbp", "u", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["desktop"]["os"] == "Ubuntu"
