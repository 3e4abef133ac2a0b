"""Checks of the distributed learner that need real ranks, on the CPU with gloo (no desktops).

Run as `torchrun --nproc-per-node 2 -m bench.testing.distributed_check MODEL_DIR WORKDIR`
(tests/test_distributed_learner.py does). Every rank builds the same tiny policy and the same
batch of token-exact samples (Conversations with screenshots, different lengths), then:
1. equivalence: one FSDP2 learner step over the ranks against a plain single-process step on the
   same samples (each rank runs the reference itself): loss, grad norm and the updated weights;
2. weight refresh: after the update, every rank's generation copy equals the gathered learner
   weights, bitwise (fp32 on the CPU);
3. exact resume: a checkpoint written after step 1, loaded into a freshly sharded learner, gives
   step 2 bitwise equal to the uninterrupted run's step 2 (weights, loss, RNG state);
4. a change of world size: the two ranks' checkpoint loaded into a single process, and a single
   process's checkpoint loaded into the two ranks, restore weights and AdamW state bitwise, and
   the next step matches the run that kept its world size (within the tolerances of 1.);
5. pixels only where needed: samples whose pixel values stay on the rank that "played" them
   (sample i on rank i % world) are delivered (exchange.deliver_pixels) to exactly the ranks
   whose passes use them, bitwise, and a step over those partial batches equals the
   single-process step over the whole one;
6. mini-batches (algorithm.miniBatches 2): the step's two optimizer steps over the ranks against
   the single process's, the second mini-batch's proximal log-probs computed by the ranks before
   the first update (within the tolerances of 1.).
Rank 0 prints one JSON line with the figures; the test asserts on them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from bench.testing.images import screenshot
from kubecua_trainer.config import AlgorithmConfig
from kubecua_trainer.engines.base import Generation
from kubecua_trainer.learning.checkpoint import (
    load_checkpoint,
    load_sharded_checkpoint,
    save_checkpoint,
    save_sharded_checkpoint,
)
from kubecua_trainer.learning.learner import Learner, by_name, passes, trainable
from kubecua_trainer.learning.sharded import (
    full_state,
    generation_copy,
    refresh_weights,
    shard_policy,
)
from kubecua_trainer.model import Policy, load_policy
from kubecua_trainer.parallel.distributed import Dist, init_from_env, shutdown
from kubecua_trainer.parallel.exchange import Held, deliver_pixels
from kubecua_trainer.tokens import Conversation, Sample

ALGO = AlgorithmConfig(learning_rate=1e-3)  # clip 0.2/0.28, TIS cap 2, PPO, no KL


def make_samples(policy: Policy, seed: int, n: int = 5) -> list[Sample]:
    """n samples of 1-2 screenshots and 3-9 generated tokens, the same on every rank."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        conv = Conversation(policy, "Act.", 56 * 56 * 2)
        for turn in range(1 + i % 2):
            conv.add_user(f"sample {i} turn {turn}", screenshot(seed * 10 + i + turn))
            k = 3 + (i * 2 + turn) % 7
            ids = torch.randint(10, 200, (k,), generator=gen).tolist()
            logprobs = (-torch.rand(k, generator=gen) * 4).tolist()
            conv.add_generation(Generation(ids, logprobs, "length"))
        s = conv.to_sample()
        s.advantage = 1.0 if i % 2 else -0.8
        out.append(s)
    return out


def sharded(
    model_dir: str, d: Dist, algo: AlgorithmConfig = ALGO
) -> tuple[Policy, Learner, Policy]:
    policy = load_policy(model_dir, "float32", "cpu")
    gen = generation_copy(policy)
    net = shard_policy(policy)
    return policy, Learner(policy, algo, net=net, dist=d), gen


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def state_of(policy: Policy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def same_optimizer(a: dict, b: dict, d: Dist | None) -> bool:
    """Two by-name optimizer states hold bitwise equal tensors (on rank 0: `a` is full there)."""
    if d is not None and not d.is_main:
        return True
    if (
        a["param_groups"][0]["params"] != b["param_groups"][0]["params"]
        or a["state"].keys() != b["state"].keys()
    ):
        return False
    return all(
        torch.equal(torch.as_tensor(a["state"][n][k]), torch.as_tensor(b["state"][n][k]))
        for n in a["state"]
        for k in a["state"][n]
    )


def main(model_dir: str, workdir: str) -> None:
    d = init_from_env()
    torch.manual_seed(0)
    ref_policy = load_policy(model_dir, "float32", "cpu")
    batch1 = make_samples(ref_policy, 1)
    batch2 = make_samples(ref_policy, 2)
    ref_learner = Learner(ref_policy, ALGO)
    ref = ref_learner.step(batch1)
    ref_weights = {k: v.detach().clone() for k, v in ref_policy.model.state_dict().items()}
    single_dir = Path(workdir).parent / "single"
    if d.is_main:  # a single process's checkpoint after step 1, for the 1 -> 2 resume
        single_path = save_checkpoint(single_dir, 1, ref_policy, ref_learner, None)
    single_path = d.broadcast(single_path if d.is_main else "")

    policy, learner, gen = sharded(model_dir, d)
    got = learner.step(batch1)
    weights1 = full_state(policy.model, keep=True)
    refresh_seconds = refresh_weights(policy.model, gen, 1)
    gen_weights = dict(gen.model.named_parameters())
    refresh_equal = all(torch.equal(gen_weights[k], weights1[k]) for k in gen_weights)

    path = save_sharded_checkpoint(workdir, 1, policy, learner, None, d)
    rng_at_save = torch.get_rng_state()
    step2 = learner.step(batch2)
    weights2 = full_state(policy.model, keep=True)

    torch.manual_seed(1234)  # a restarted process has another RNG state until the load
    policy_b, learner_b, _ = sharded(model_dir, d)
    load_sharded_checkpoint(path, policy_b, learner_b, None, d)
    rng_restored = torch.equal(torch.get_rng_state(), rng_at_save)
    step2_b = learner_b.step(batch2)
    weights2_b = full_state(policy_b.model, keep=True)

    # 1 -> 2: the single process's checkpoint into the two ranks, then step 2 on both sides.
    policy_c, learner_c, _ = sharded(model_dir, d)
    load_sharded_checkpoint(single_path, policy_c, learner_c, None, d)
    loaded_c = full_state(policy_c.model, keep=True)
    single_adam = by_name(ref_learner.optimizer.state_dict(), ref_learner.param_names())
    grown: dict[str, Any] = {
        "weights_bitwise": all(torch.equal(loaded_c[k], ref_weights[k]) for k in loaded_c),
        "adam_bitwise": same_optimizer(learner_c.state_dict()["optimizer_by_name"], single_adam, d),
    }
    ref2 = ref_learner.step(batch2)
    step2_c = learner_c.step(batch2)
    weights2_c = full_state(policy_c.model, keep=True)
    grown.update(loss_rel_diff=rel(step2_c["loss"], ref2["loss"]),
                 weights_max_abs_diff=max_diff(weights2_c, state_of(ref_policy)))  # fmt: skip

    # 2 -> 1: the two ranks' checkpoint into a single process (rank 0 alone), then step 2.
    shrunk: dict = {}
    if d.is_main:
        policy_s = load_policy(model_dir, "float32", "cpu")
        learner_s = Learner(policy_s, ALGO)
        load_checkpoint(path, policy_s, learner_s, None)
        saved = torch.load(Path(path) / "optimizer.pt", weights_only=True)["optimizer_by_name"]
        mine = by_name(learner_s.optimizer.state_dict(), learner_s.param_names())
        shrunk["weights_bitwise"] = all(
            torch.equal(v, weights1[k]) for k, v in state_of(policy_s).items()
        )
        shrunk["adam_bitwise"] = same_optimizer(mine, saved, None)
        step2_s = learner_s.step(batch2)
        shrunk.update(loss_rel_diff=rel(step2_s["loss"], step2["loss"]),
                      weights_max_abs_diff=max_diff(state_of(policy_s), weights2),
                      steps=learner_s.steps)  # fmt: skip

    # 5. Pixels delivered only to the ranks whose passes use them.
    batch3 = make_samples(ref_policy, 3, n=7)
    whole = [s.pixel_values for s in batch3 if s.pixel_values is not None]
    held = Held()
    for i, s in enumerate(batch3):  # as exchange.strip leaves a step's samples on every rank
        s.pixels_key = f"{i % d.world}/3/{i}"
        if i % d.world == d.rank:
            held.pixels[s.pixels_key] = whole[i]
        s.pixel_values = None
    plan = passes(trainable(batch3), d.world)
    need = [[batch3[i] for i, _ in share] for share in plan]
    received = deliver_pixels(d, held, need)
    wanted = {i for i, _ in plan[d.rank]}
    delivery: dict[str, Any] = {
        "rank": d.rank,
        "received": received,
        "wanted": len(wanted),
        "only_wanted": all((s.pixel_values is not None) == (i in wanted)
                           for i, s in enumerate(batch3)),
        "bitwise": all(torch.equal(batch3[i].pixel_values, whole[i]) for i in wanted),  # type: ignore[arg-type]
    }  # fmt: skip
    _, learner_p, _ = sharded(model_dir, d)
    partial = learner_p.step(batch3)
    ref_policy3 = load_policy(model_dir, "float32", "cpu")
    for s, px in zip(batch3, whole, strict=True):
        s.pixel_values = px
    full = Learner(ref_policy3, ALGO).step(batch3)
    delivery["loss_rel_diff"] = rel(partial["loss"], full["loss"])
    delivery["grad_norm_rel_diff"] = rel(partial["grad_norm"], full["grad_norm"])
    deliveries = d.gather_to_main(delivery)

    # 6. two mini-batches: 5 samples -> 3 + 2, each one AdamW step, on both sides
    split = AlgorithmConfig(learning_rate=1e-2, mini_batches=2)
    policy_m, learner_m, _ = sharded(model_dir, d, split)
    mini = learner_m.step(batch1)
    weights_m = full_state(policy_m.model, keep=True)
    ref_policy_m = load_policy(model_dir, "float32", "cpu")
    mini_ref = Learner(ref_policy_m, split).step(batch1)
    ref_weights_m = {k: v.detach() for k, v in ref_policy_m.model.state_dict().items()}

    checks = d.gather_to_main({"rank": d.rank, "refresh_bitwise": refresh_equal,
                               "rng_restored": rng_restored})  # fmt: skip
    if d.is_main:
        print(json.dumps({
            "world": d.world,
            "single": {"loss": ref["loss"], "grad_norm": ref["grad_norm"]},
            "sharded": {"loss": got["loss"], "grad_norm": got["grad_norm"]},
            "rel_diff": {"loss": rel(got["loss"], ref["loss"]),
                         "grad_norm": rel(got["grad_norm"], ref["grad_norm"])},
            "weights_max_abs_diff": max_diff(weights1, ref_weights),
            "weight_refresh_seconds": refresh_seconds,
            "ranks": checks,
            "resume": {"loss": [step2["loss"], step2_b["loss"]],
                       "weights_bitwise": all(torch.equal(weights2[k], weights2_b[k])
                                              for k in weights2),
                       "steps": learner_b.steps},
            "world_1_to_2": grown,
            "world_2_to_1": shrunk,
            "pixels": deliveries,
            "mini_batches": {"loss_rel_diff": rel(mini["loss"], mini_ref["loss"]),
                             "clip_fraction": [mini["clip_fraction"], mini_ref["clip_fraction"]],
                             "weights_max_abs_diff": max_diff(weights_m, ref_weights_m)},
        }), flush=True)  # fmt: skip
    shutdown(d)


if __name__ == "__main__":
    main(sys.argv[1], str(Path(sys.argv[2])))
