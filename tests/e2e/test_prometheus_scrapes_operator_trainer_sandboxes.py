"""A real Prometheus (Debian's package) on loopback scrapes a running operator, a trainer (the tiny
model on the CPU, with a held-out evaluation before the first step and after the last) and its
episode servers (local Xvfb desktops), and evaluates the chart's alert rules. Then every dashboard
panel's PromQL and every alert expression is asked of its HTTP API: each must be well-formed, and
every panel whose metric exists must return data. The evaluation's series must carry the figures
the trainer wrote to evaluations/. The training dashboard's key series are drawn as a PNG from
Prometheus's answers (docs/images/ with KUBECUA_WRITE_DOCS=1).

The operator runs as a local process (pods on kwok nodes never run), authenticated as the chart's
own ServiceAccount, so its RBAC is proven sufficient too. It reconciles the examples' pod pool
(scaled to 2; its pods "run" on kwok nodes) and hf TrainingRun, while the trainer runs locally
against the local episode servers. (An external pool pointing at those servers would be closer,
but the API server refuses the `localhost` FQDN the operator writes into its EndpointSlices.)
Leaves out: Grafana itself (panels are evaluated by Prometheus, as Grafana would ask)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import yaml

from kubecua_testkit.components import free_port, start_in_group
from kubecua_testkit.prom import query, query_range
from kubecua_testkit.tools import REPO, binary, cache_dir, run

NS = f"kc-prom-{os.getpid()}"
POOL = "ubuntu-desktops"  # examples/sandboxpool-pod.yaml
RUN = "qwen-vl-hf"  # examples/trainingrun-hf.yaml
SANDBOXES = 2
STEPS = 3
TRAIN_IDS = ["count-lines", "word-count", "sort-names"]
HELD_OUT = ["create-hello-file"]  # never trained on: the trainer refuses an overlap
EVAL_EPISODES = 2  # per held-out task: pass@1 and pass@2
LAUNCHER = REPO / "sandbox-image/episode-server/.venv/bin/kubecua-sandbox-local"
OPERATOR_PY = REPO / "operator/.venv/bin/python"
TRAINER_PY = REPO / "trainer/.venv/bin/python"
TINY_MODEL = cache_dir() / "models/tiny-qwen2_5_vl"
DASHBOARDS = REPO / "charts/kubecua/dashboards"
# Panels whose metric no component exports yet: asked for well-formedness only (see the report).
NOT_EXPORTED = {"kubecua_trainer_last_checkpoint_timestamp_seconds"}
# Series that exist only once something goes wrong; this healthy run must not produce them.
ONLY_ON_FAILURE = {
    "kubecua_sandbox_setup_failures_total",
    "kubecua_operator_reconcile_errors_total",
}
RATE_INTERVAL = "15s"  # Grafana's $__rate_interval for a 1 s scrape interval


def free_display(start: int, taken: set[int]) -> int:
    n = start
    while n in taken or Path(f"/tmp/.X{n}-lock").exists() or Path(f"/tmp/.X11-unix/X{n}").exists():
        n += 1
    return n


def wait_http(url: str, proc: subprocess.Popen, timeout: float, headers: dict | None = None):
    """Poll url until it answers 200: readiness endpoints are the condition itself."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before {url} was up")
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} not ready within {timeout}s")


def operator_kubeconfig(cluster, path: Path) -> Path:
    """A kubeconfig that authenticates as the chart's operator ServiceAccount (in NS)."""
    chart = run([
        binary("helm"), "template", "kubecua", REPO / "charts/kubecua", "-n", NS,
        "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml",
    ]).stdout  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=chart)
    token = cluster.kubectl("create", "token", "kubecua-operator", "-n", NS).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "operator",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": "operator"}}],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


def prometheus_config(targets: dict[str, list[str]], labels: dict[str, dict], rules: Path) -> dict:
    jobs = [
        {
            "job_name": job,
            "honor_labels": job == "kubecua-operator",  # as the chart's ServiceMonitor does
            "static_configs": [{"targets": addrs, "labels": labels[job]}],
        }
        for job, addrs in targets.items()
    ]
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": jobs,
    }


def rendered_rules(path: Path) -> Path:
    out = run([
        binary("helm"), "template", "kubecua", REPO / "charts/kubecua", "-n", NS,
        "--set", "prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml",
    ]).stdout  # fmt: skip
    path.write_text(yaml.safe_dump({"groups": yaml.safe_load(out)["spec"]["groups"]}))
    return path


def trainingrun_manifest(urls: list[str], out: Path, metrics_port: int) -> dict:
    return {
        "apiVersion": "kubecua.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "prom-check"},
        "spec": {
            "model": {"path": str(TINY_MODEL), "dtype": "float32"},
            "sandboxes": {"urls": urls, "minReady": len(urls)},
            "tasks": {"path": str(REPO / "sandbox-image/tasks/files"), "ids": TRAIN_IDS},
            "evaluation": {"tasks": {"path": str(REPO / "sandbox-image/tasks/files"),
                                     "ids": HELD_OUT},
                           "episodesPerTask": EVAL_EPISODES},
            "algorithm": {"groupSize": 2, "tasksPerStep": 1, "maxTurns": 1, "maxNewTokens": 16,
                          "learningRate": 1.0e-4,
                          # learn from every group, all-fail ones too, so the learner's panels
                          # (KL, entropy, grad norm, learner time) have values in a short run
                          "dynamicSampling": False},
            "rollout": {"engine": "hf", "maxInFlightEpisodes": 2, "episodeTimeoutSeconds": 240,
                        "maxPixels": 50176, "keepScreenshots": 1},
            "trainer": {"gradientCheckpointing": False},
            "checkpoint": {"everySteps": 1, "keep": 1},
            "steps": STEPS,
            "metrics": {"port": metrics_port},
            # prices, so the cost row's money panel has a series (it is absent without them)
            "cost": {"pricePerSandboxHour": 0.25, "pricePerGpuHour": 2.5},
            "outputDir": str(out),
        },
    }  # fmt: skip


def need(path: Path, how: str) -> None:
    if not path.exists():
        pytest.skip(f"{path} is missing: {how}")


def start_sandboxes(stack: ExitStack, tmp: Path) -> list[str]:
    """SANDBOXES local desktops with episode servers, all ready; returns their URLs."""
    urls: list[str] = []
    displays: set[int] = set()
    procs = []
    for i in range(SANDBOXES):
        display = free_display(150, displays)
        displays.add(display)
        port = free_port()
        args = [LAUNCHER, "--display", display, "--episode-port", port,
                "--desktop-port", free_port(), "--cdp-port", free_port(),
                "--vlc-port", free_port(), "--token-file", tmp / "token",
                "--workdir", tmp / f"sandbox-{i}"]  # fmt: skip
        procs.append((start_in_group(stack, args, tmp / f"sandbox-{i}.log"), port))
        urls.append(f"http://127.0.0.1:{port}")
    for proc, port in procs:
        wait_http(f"http://127.0.0.1:{port}/readyz", proc, 180)
    return urls


def cluster_objects() -> str:
    """The examples' pod pool (2 sandboxes, no spares) and hf run, with the run's task ConfigMap."""
    pool = yaml.safe_load((REPO / "examples/sandboxpool-pod.yaml").read_text())
    pool["spec"].update(replicas=SANDBOXES, warmSpares=0)
    run_ = yaml.safe_load((REPO / "examples/trainingrun-hf.yaml").read_text())
    task = (REPO / "sandbox-image/tasks/files/count-lines.json").read_text()
    tasks = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "osworld-train"},
             "data": {"count-lines.json": task}}  # fmt: skip
    return "---\n".join(yaml.safe_dump(d) for d in (pool, tasks, run_))


def start_operator(stack: ExitStack, cluster, tmp: Path) -> tuple[int, int]:
    """The operator as the chart's ServiceAccount, reconciling the examples, with kopf's health
    endpoint as the chart starts it; returns (metrics port, health port)."""
    kubeconfig = operator_kubeconfig(cluster, tmp / "operator.kubeconfig")
    port, health = free_port(), free_port()
    env = {"KUBECONFIG": str(kubeconfig), "KUBECUA_OPERATOR_METRICS_PORT": str(port),
           "KUBECUA_OPERATOR_METRICS_HOST": "127.0.0.1"}  # fmt: skip
    args = [OPERATOR_PY, "-m", "kubecua_operator", "--namespace", NS,
            f"--liveness=http://127.0.0.1:{health}/healthz"]  # fmt: skip
    operator = start_in_group(stack, args, tmp / "operator.log", env=env)
    wait_http(f"http://127.0.0.1:{port}/metrics", operator, 60)
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=cluster_objects())
    # It creates the pool's pods, and the run's Role, which it may grant only because it holds
    # every verb in it (RBAC's escalation check).
    cluster.kubectl(
        "wait", "-n", NS, f"sandboxpool/{POOL}", "--timeout=100s",
        f"--for=jsonpath={{.status.replicas}}={SANDBOXES}",
    )  # fmt: skip
    cluster.kubectl("wait", "-n", NS, f"role/{RUN}-trainer", "--for=create", "--timeout=60s")
    return port, health


def start_prometheus(stack: ExitStack, tmp: Path, targets: dict[str, list[str]]) -> str:
    """Prometheus on loopback scraping every second and evaluating the chart's rules."""
    labels = {
        "kubecua-operator": {"namespace": NS},
        "kubecua-trainer": {"namespace": NS, "pod": f"{RUN}-trainer-0"},
        "kubecua-sandboxes": {"namespace": NS, "kubecua_dev_pool": POOL},
    }
    config = prometheus_config(targets, labels, rendered_rules(tmp / "rules.yaml"))
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    args = ["/usr/bin/prometheus", f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    prom = start_in_group(stack, args, tmp / "prometheus.log")
    api = f"http://127.0.0.1:{port}"
    wait_http(f"{api}/-/ready", prom, 60)
    return api


def run_trainer(stack: ExitStack, tmp: Path, urls: list[str], port: int, token: str) -> None:
    manifest = tmp / "trainingrun.yaml"
    manifest.write_text(yaml.safe_dump(trainingrun_manifest(urls, tmp / "out", port)))
    args = [TRAINER_PY, "-m", "kubecua_trainer", "run", manifest, "--no-progress",
            "--metrics-addr", "127.0.0.1"]  # fmt: skip
    trainer = start_in_group(stack, args, tmp / "trainer.log", env={"KUBECUA_SANDBOX_TOKEN": token})
    rc = trainer.wait(timeout=540)
    assert rc == 0, (tmp / "trainer.log").read_text()[-3000:]


@pytest.fixture(scope="module")
def stack(cluster, tmp_path_factory) -> Iterator[dict]:
    """Everything running, the trainer finished, and Prometheus holding the whole run."""
    for path, how in [
        (LAUNCHER, "make sandbox-env"),
        (OPERATOR_PY, "make operator-env"),
        (TRAINER_PY, "make trainer-env"),
        (TINY_MODEL, "make demo builds it"),
    ]:
        need(path, how)  # fmt: skip
    if not Path("/usr/bin/prometheus").exists():
        pytest.skip("prometheus is missing: `make setup-apt` installs Debian's package")
    tmp = tmp_path_factory.mktemp("prom")
    token = secrets.token_hex(16)
    (tmp / "token").write_text(token)
    (tmp / "token").chmod(0o600)
    with ExitStack() as stack:
        cluster.kubectl("create", "namespace", NS)
        stack.callback(cluster.kubectl, "delete", "namespace", NS, "--wait=false", check=False)
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        urls = start_sandboxes(stack, tmp)
        op_port, health_port = start_operator(stack, cluster, tmp)
        trainer_port = free_port()
        targets = {
            "kubecua-operator": [f"127.0.0.1:{op_port}"],
            "kubecua-trainer": [f"127.0.0.1:{trainer_port}"],
            "kubecua-sandboxes": [u.removeprefix("http://") for u in urls],
        }
        api = start_prometheus(stack, tmp, targets)
        started = time.time()
        run_trainer(stack, tmp, urls, trainer_port, token)
        yield {"api": api, "start": started, "end": time.time(), "tmp": tmp,
               "ports": {"metrics": op_port, "health": health_port}}  # fmt: skip


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, PromQL) for every query of every shipped dashboard."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((path.stem, panel["title"], _substitute(target["expr"])))
    return out


def _substitute(expr: str) -> str:
    """Grafana's variables as this test sets them: its namespace, a 15 s rate window."""
    return expr.replace("$namespace", NS).replace("$__rate_interval", RATE_INTERVAL)


def metric_names(expr: str) -> set[str]:
    return {m.removesuffix("_bucket") for m in re.findall(r"kubecua_[a-z_]+", expr)}


def test_every_target_is_scraped_up(stack):
    result = query(stack["api"], "up", stack["end"])["result"]
    jobs = {(r["metric"]["job"], r["value"][1]) for r in result}
    assert jobs >= {("kubecua-operator", "1"), ("kubecua-sandboxes", "1")}
    ran = query_range(stack["api"], 'up{job="kubecua-trainer"} == 1', stack["start"], stack["end"])
    assert ran, "the trainer was never scraped while it ran"


def test_the_run_is_visible_with_its_real_values(stack):
    api, start_, end = stack["api"], stack["start"], stack["end"]
    steps = query_range(api, "max_over_time(kubecua_trainer_step[10m])", start_, end)
    # The last step's gauge may change in the second between the final scrape and the exit.
    assert STEPS - 1 <= max(float(v) for s in steps for _, v in s["values"]) <= STEPS
    episodes = query(api, "sum(max_over_time(kubecua_trainer_episodes_total[10m]))", end)
    # groupSize 2 per step; as with the step, the last step's episodes may miss the last scrape
    assert (STEPS - 1) * 2 <= float(episodes["result"][0]["value"][1]) <= STEPS * 2
    pool = query_range(
        api, f'sum(kubecua_pool_sandboxes{{pool="{POOL}", state!="leased"}})', start_, end
    )
    assert max(float(v) for s in pool for _, v in s["values"]) == SANDBOXES
    kinds = query(api, "sum by (kind) (kubecua_operator_reconcile_total)", end)["result"]
    assert {r["metric"]["kind"] for r in kinds} == {"SandboxPool", "TrainingRun"}
    resets = query(api, "sum(kubecua_sandbox_reset_duration_seconds_count)", end)
    assert float(resets["result"][0]["value"][1]) >= (STEPS - 1) * 2  # one reset per episode


def evaluations(out: Path) -> dict[int, dict]:
    """The trainer's own record of each evaluation (evaluations/step-NNNN/summary.json)."""
    found = {}
    for path in sorted((out / "evaluations").glob("step-*/summary.json")):
        summary = json.loads(path.read_text())
        found[summary["step"]] = summary
    return found


def by_time(api: str, expr: str, start_: float, end: float) -> dict[float, float]:
    """One series' samples as {time: value}; the query must yield exactly one series."""
    (series,) = query_range(api, expr, start_, end)
    return {float(t): float(v) for t, v in series["values"]}


def test_the_evaluation_is_visible_with_the_trainers_own_figures(stack):
    """Prometheus's eval series equal the summary.json of the step they say was evaluated."""
    api, start_, end = stack["api"], stack["start"], stack["end"]
    out = stack["tmp"] / "out"
    summaries = evaluations(out)
    assert set(summaries) == {0, STEPS}  # before the first step and after the last
    steps = by_time(api, "kubecua_trainer_eval_step", start_, end)
    # No eval series before the first evaluation: a 0 there would read as a measured failure.
    # (1 s: a scrape may fall between the gauges being set and summary.json's write.)
    first_written = (out / "evaluations/step-0000/summary.json").stat().st_mtime
    assert min(steps) >= first_written - 1, "eval series exported before any evaluation"
    # The step-0 evaluation is scraped for the whole run; the last one may miss the final scrape.
    assert set(steps.values()) in ({0.0}, {0.0, float(STEPS)})
    ratio = by_time(api, "kubecua_trainer_eval_success_ratio", start_, end)
    task = by_time(api, f'kubecua_trainer_eval_task_success_ratio{{task="{HELD_OUT[0]}"}}',
                   start_, end)  # fmt: skip
    pass_k = {
        k: by_time(api, f'kubecua_trainer_eval_pass_at_k_ratio{{k="{k}"}}', start_, end)
        for k in ("1", str(EVAL_EPISODES))
    }
    compared = 0
    for t, step in steps.items():
        summary = summaries[int(step)]
        if summary["success_rate"] is None or t not in ratio:
            continue  # every episode excluded: the gauge keeps its earlier figure
        assert ratio[t] == pytest.approx(summary["success_rate"])
        assert task[t] == pytest.approx(summary["tasks"][0]["success_rate"])
        for k, series in pass_k.items():
            assert series[t] == pytest.approx(summary["pass_at_k"][k])
        compared += 1
    assert compared >= 3, "fewer than 3 scrapes carried an evaluation's figures"
    counted = query(api, "sum(max_over_time(kubecua_trainer_eval_episodes_total[10m]))", end)
    first = summaries[0]
    # Every step-0 episode is counted, scored or excluded; the last evaluation's may be missed.
    total = sum(s["scored"] + s["excluded"] for s in summaries.values())
    assert first["scored"] + first["excluded"] == len(HELD_OUT) * EVAL_EPISODES
    assert len(HELD_OUT) * EVAL_EPISODES <= float(counted["result"][0]["value"][1]) <= total


@pytest.mark.parametrize(("board", "title", "expr"), panel_queries(), ids=lambda x: str(x)[:40])
def test_panel_query_is_well_formed_and_returns_data(stack, board, title, expr):
    result = query_range(stack["api"], expr, stack["start"], stack["end"])
    names = metric_names(expr)
    if names & (NOT_EXPORTED | ONLY_ON_FAILURE):
        return  # well-formed (status success) is all that can be asked; see the constants
    assert result, f"{board} / {title}: no data for {expr}"
    assert any(v != "NaN" for s in result for _, v in s["values"]), f"{title}: only NaN"


def test_every_alert_expression_evaluates_and_every_rule_is_healthy(stack):
    rules = httpx.get(f"{stack['api']}/api/v1/rules", timeout=30).json()["data"]["groups"]
    alerts = [r for g in rules for r in g["rules"]]
    assert len(alerts) == 6
    assert all(r["health"] == "ok" for r in alerts), [
        (r["name"], r.get("lastError")) for r in alerts
    ]
    for r in alerts:
        data = query(stack["api"], r["query"], stack["end"])
        assert data["resultType"] == "vector"
    firing = {r["name"] for r in alerts if r["state"] == "firing"}
    assert "KubecuaOperatorDown" not in firing


def test_helm_test_hook_script_passes_against_the_running_operator(stack):
    """kwok never runs the hook's pod, so its script runs here, against the live operator."""
    ports = stack["ports"]
    rendered = run([
        binary("helm"), "template", "kubecua", REPO / "charts/kubecua", "-n", NS,
        "--set", f"metrics.port={ports['metrics']},health.port={ports['health']}",
        "--show-only", "templates/tests/test-operator-answers.yaml",
    ]).stdout  # fmt: skip
    script = yaml.safe_load(rendered)["spec"]["containers"][0]["command"][-1]
    script = script.replace(f"http://kubecua-operator.{NS}.svc", "http://127.0.0.1")
    proc = run([OPERATOR_PY, "-c", script])
    assert proc.stdout.strip() == "operator answers"


def test_operator_ran_with_the_charts_rbac_without_being_forbidden(stack):
    log = (stack["tmp"] / "operator.log").read_text()
    assert "Forbidden" not in log, log[-3000:]
    assert '"status": 403' not in log, log[-3000:]


PNG_PANELS = [
    "Reward mean and success rate", "Episodes by outcome", "KL and entropy",
    "Grad norm and clip fraction", "Advantage std and zero-variance groups", "Step time",
    "Held-out success rate and pass@k",
]  # fmt: skip
GEN_PY = REPO / "charts/kubecua-dashboards-gen/.venv/bin/python"


def test_training_dashboard_renders_as_png(stack):
    need(GEN_PY, "make dashboards-gen-env")
    board = json.loads((DASHBOARDS / "kubecua-training.json").read_text())
    panels = {}
    for panel in board["panels"]:
        if panel["title"] not in PNG_PANELS:
            continue
        unit = panel["fieldConfig"]["defaults"].get("unit", "")
        series = [
            {"label": _legend(target["legendFormat"], found["metric"]),
             "points": [[t - stack["start"], float(v)] for t, v in found["values"] if v != "NaN"]}
            for target in panel["targets"]
            for found in query_range(stack["api"], _substitute(target["expr"]), stack["start"],
                                     stack["end"])
        ]  # fmt: skip
        panels[panel["title"]] = {"title": panel["title"], "unit": unit, "series": series}
    title = "kubecua / Training: a tiny-model run, from Prometheus's answers to the panels"
    spec = {"title": title, "panels": list(panels.values())}
    (stack["tmp"] / "series.json").write_text(json.dumps(spec))
    out = stack["tmp"] / "dashboard-training.png"
    proc = run([GEN_PY, "-m", "kubecua_dashboards.render_png", stack["tmp"] / "series.json", out])
    drawn = int(proc.stdout.split()[1])
    assert drawn >= len(PNG_PANELS)  # every panel has at least one series
    assert all(p["series"] for p in panels.values())
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000
    if os.environ.get("KUBECUA_WRITE_DOCS") == "1":
        target = REPO / "docs" / "images" / "dashboard-training.png"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(data)


def _legend(fmt: str, labels: dict) -> str:
    """Grafana's legend format filled from a series' labels; namespace and pod are dropped
    (one run here), e.g. "{{namespace}} {{pod}} kl" -> "kl"."""
    text = re.sub(r"\{\{(\w+)\}\}", lambda m: labels.get(m.group(1), ""), fmt)
    return text.replace(NS, "").replace(f"{RUN}-trainer-0", "").strip() or "value"
