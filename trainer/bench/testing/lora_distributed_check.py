"""LoRA under FSDP2 with real ranks, on the CPU with gloo (tests/test_lora_distributed.py).

Run as `torchrun --nproc-per-node 2 -m bench.testing.lora_distributed_check MODEL_DIR WORKDIR`.
Every rank builds the same tiny policy with the same adapter (seeded), then:
1. equivalence: one FSDP2 step of the adapter over the ranks against a single-process step on the
   same samples: loss, grad norm and the updated adapter;
2. the engine's copy: after the update it holds the gathered adapter, bitwise;
3. resume: the sharded checkpoint (the adapter alone, peft's layout; AdamW's state by name, the
   adapter's alone), loaded into a freshly sharded learner, gives step 2 bitwise;
4. the same checkpoint loads into a single process (rank 0), adapter and AdamW bitwise.
Rank 0 prints one JSON line with the figures; the test asserts on them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from bench.testing.distributed_check import ALGO, make_samples, rel
from kubecua_api.lora import LoraConfig
from kubecua_trainer.learning.checkpoint import (
    load_checkpoint,
    load_sharded_checkpoint,
    save_sharded_checkpoint,
)
from kubecua_trainer.learning.learner import Learner, by_name
from kubecua_trainer.learning.sharded import (
    full_state,
    generation_copy,
    refresh_weights,
    shard_policy,
)
from kubecua_trainer.lora import adapter_param_names, add_adapter
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.parallel.distributed import Dist, init_from_env, shutdown

LORA = LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])


def adapted(model_dir: str) -> Policy:
    torch.manual_seed(0)  # the same adapter initialisation in every process and every copy
    policy = load_policy(model_dir, "float32", "cpu")
    add_adapter(policy.model, LORA, model_dir)
    return policy


def sharded(model_dir: str, d: Dist) -> tuple[Policy, Learner, Policy]:
    policy = adapted(model_dir)
    gen = generation_copy(policy)
    net = shard_policy(policy)
    return policy, Learner(policy, ALGO, net=net, dist=d), gen


def adapter_of(policy: Policy) -> dict[str, torch.Tensor]:
    """The gathered adapter (collective under FSDP2)."""
    return full_state(policy.model, keep=True, names=set(adapter_param_names(policy.model)))


def main(model_dir: str, workdir: str) -> None:
    d = init_from_env()
    ref_policy = adapted(model_dir)
    batch1, batch2 = make_samples(ref_policy, 1), make_samples(ref_policy, 2)
    ref_learner = Learner(ref_policy, ALGO)
    ref = ref_learner.step(batch1)
    ref_adapter = adapter_of(ref_policy)

    policy, learner, gen = sharded(model_dir, d)
    got = learner.step(batch1)
    adapter1 = adapter_of(policy)
    refresh_weights(policy.model, gen, 1)
    gen_params = dict(gen.model.named_parameters())
    refresh_bitwise = all(torch.equal(gen_params[k], v) for k, v in adapter1.items())

    path = save_sharded_checkpoint(workdir, 1, policy, learner, None, d)
    step2 = learner.step(batch2)
    adapter2 = adapter_of(policy)
    policy_b, learner_b, _ = sharded(model_dir, d)
    torch.nn.init.normal_(next(p for p in policy_b.model.parameters() if p.requires_grad))
    load_sharded_checkpoint(path, policy_b, learner_b, None, d)
    step2_b = learner_b.step(batch2)
    adapter2_b = adapter_of(policy_b)

    single: dict = {}
    if d.is_main:
        files = sorted(p.name for p in Path(path).iterdir())
        saved = torch.load(Path(path) / "optimizer.pt", weights_only=True)["optimizer_by_name"]
        policy_s = adapted(model_dir)
        learner_s = Learner(policy_s, ALGO)
        load_checkpoint(path, policy_s, learner_s, None)
        mine = by_name(learner_s.optimizer.state_dict(), learner_s.param_names())
        single = {
            "files": files,
            "adam_names": sorted(saved["state"]) == sorted(learner_s.param_names()),
            "adam_bitwise": all(
                torch.equal(torch.as_tensor(mine["state"][n][k]), torch.as_tensor(v))
                for n, st in saved["state"].items()
                for k, v in st.items()
            ),
            "adapter_bitwise": all(
                torch.equal(v, adapter1[k]) for k, v in adapter_of(policy_s).items()
            ),
            "trainable": len(learner_s.param_names()),
        }
    checks = d.gather_to_main({"rank": d.rank, "refresh_bitwise": refresh_bitwise})
    if d.is_main:
        print(json.dumps({
            "world": d.world,
            "rel_diff": {"loss": rel(got["loss"], ref["loss"]),
                         "grad_norm": rel(got["grad_norm"], ref["grad_norm"])},
            "grad_norm": got["grad_norm"],
            "adapter_max_abs_diff": max(
                float((adapter1[k] - ref_adapter[k]).abs().max()) for k in ref_adapter),
            "ranks": checks,
            "resume": {"loss": [step2["loss"], step2_b["loss"]],
                       "adapter_bitwise": all(torch.equal(adapter2[k], adapter2_b[k])
                                              for k in adapter2)},
            "single": single,
        }), flush=True)  # fmt: skip
    shutdown(d)


if __name__ == "__main__":
    main(sys.argv[1], str(Path(sys.argv[2])))
