"""What a person sees of a run from the command line: the seed first (--seed overriding spec.seed),
one console line per warm-up epoch with the log records in the run's trainer.log rather than
beside them, the seed in the report; and errors that name what failed (a timeout waiting for
sandboxes says for what, how long, and how many of how many were ready). The run is a real
`python -m kubecua_trainer run` process (the tiny model, a loopback sandbox)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from loopback_sandbox import TOKEN, LoopbackSandbox
from test_warmup_stage import WARMUP, warm_run, write_demos

from kubecua_trainer.cli import describe
from kubecua_trainer.model import Policy
from kubecua_trainer.sources.leases import SandboxLeases
from kubecua_trainer.sources.static import StaticSource

TRAINER = Path(__file__).resolve().parents[1]


@pytest.mark.asyncio
async def test_a_run_prints_its_seed_then_one_line_per_warm_up_epoch(
    tmp_path: Path, tiny_model_dir: Path, policy: Policy
) -> None:
    demos = await write_demos(policy, tmp_path / "demos.jsonl")
    with LoopbackSandbox() as sandbox:
        run = warm_run(tmp_path, tiny_model_dir, sandbox.url, demos,
                       warmup={**WARMUP, "demonstrations": str(demos), "epochs": 3})  # fmt: skip
        body = run.model_dump(by_alias=True, exclude_none=True, mode="json")
        manifest = tmp_path / "run.yaml"
        manifest.write_text(yaml.safe_dump(body))
        out = tmp_path / "cli-out"
        env = {**os.environ, "KUBECUA_SANDBOX_TOKEN": TOKEN}
        cmd = [sys.executable, "-m", "kubecua_trainer", "run", str(manifest), "--seed", "3",
               "--output-dir", str(out)]  # fmt: skip
        proc = await asyncio.to_thread(
            subprocess.run, cmd, cwd=TRAINER, env=env, capture_output=True, text=True, timeout=500
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    seed = f"run w: seed 3 (--seed N: the same recipe with another); log {out}/trainer.log"
    assert seed in lines
    assert lines.index(seed) < min(i for i, x in enumerate(lines) if x.startswith("warm-up"))
    epochs = [x for x in lines if x.startswith("warm-up epoch ")]
    assert [x.split(":")[0] for x in epochs] == [f"warm-up epoch {i}/3" for i in (1, 2, 3)]
    assert not [x for x in lines if x.startswith("INFO ")]  # records are the log file's
    log = (out / "trainer.log").read_text()
    assert log.count("INFO kubecua_trainer.warmup.stage: warm-up epoch") == 3
    assert json.loads((out / "warmup.json").read_text())["seed"] == 3
    assert 'id="seed">Seed 3' in (out / "report.html").read_text()


@pytest.mark.asyncio
async def test_a_timeout_waiting_for_sandboxes_says_for_what_how_long_and_how_many() -> None:
    leases = SandboxLeases()
    with LoopbackSandbox() as sandbox:
        source = StaticSource([sandbox.url, "http://127.0.0.1:9"], TOKEN)  # port 9: nobody
        await source.start(leases)
        try:
            with pytest.raises(TimeoutError) as err:
                await leases.wait_ready(2, 0.5)
        finally:
            await source.stop()
    assert str(err.value) == (
        "waited 0.5 s for 2 ready sandbox(es) (the episode servers at spec.sandboxes.urls,"
        " polled at /readyz): 1 of 2 ready"
    )


def test_an_error_without_a_message_is_printed_with_its_type() -> None:
    assert describe(TimeoutError()) == "TimeoutError (no message)"  # once: `error: ` alone
    assert describe(FileNotFoundError("no model at /m")) == "no model at /m"
