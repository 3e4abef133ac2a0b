"""Training dashboard: is the policy learning, is it better on tasks it never trained on (the
held-out evaluation), and is it healthy (the collapse signals the seeds saw: advantages near 0,
entropy falling, grad norm exploding), and how fast is it going."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from kubecua_dashboards.cost import cost_row
from kubecua_dashboards.panels import NS, base, graph, quantiles, row, single, stacked

T = "kubecua_trainer_"
BY_POD = "{{namespace}} {{pod}}"


def gauge(name: str, label: str = "") -> tuple[str, str]:
    """(legend, expr) for one of the trainer's per-step gauges, e.g. gauge("kl")."""
    return (f"{BY_POD} {label or name}", f"{T}{name}{{{NS}}}")


def build() -> db.Dashboard:
    d = base("kubecua-training", "kubecua / Training", "GRPO training runs: reward, health, speed.")
    d = d.with_row(row("Progress"))
    d = d.with_panel(single("Step", "Last completed training step.", f"{T}step{{{NS}}}"))
    d = d.with_panel(
        single(
            "Checkpoint age",
            "Seconds since the last checkpoint was written.",
            f"time() - {T}last_checkpoint_timestamp_seconds{{{NS}}}",
            "s",
        )
    )
    d = d.with_panel(
        graph(
            "Reward mean and success rate",
            "Mean evaluator score, mean shaped reward (spec.reward, what GRPO trained on) and"
            " solved fraction of the scored episodes of each step.",
            [
                gauge("reward_mean", "reward"),
                gauge("shaped_reward_mean", "shaped reward"),
                gauge("success_rate", "success"),
            ],
            "percentunit",
        )
    )
    d = d.with_panel(
        stacked(
            "Episodes by outcome",
            "Finished episodes per second by outcome; infra failures are excluded from the loss.",
            [
                (
                    "{{outcome}}",
                    f"sum by (outcome) (rate({T}episodes_total{{{NS}}}[$__rate_interval]))",
                )
            ],
            "ops",
        )
    )
    d = d.with_panel(
        graph(
            "Episode length",
            "Turns per episode (p50/p90) and episode wall time (p50/p90).",
            [(f"turns {k}", e) for k, e in quantiles(f"{T}episode_turns")]
            + [(f"seconds {k}", e) for k, e in quantiles(f"{T}episode_duration_seconds")],
        )
    )
    d = evaluation(d)
    d = d.with_row(row("Policy health"))
    d = d.with_panel(
        graph("KL and entropy", "k3 KL to the reference; token entropy (collapse shows here).",
              [gauge("kl"), gauge("entropy")])
    )  # fmt: skip
    d = d.with_panel(
        graph("Grad norm and clip fraction", "Gradient norm before clipping; clipped ratio share.",
              [gauge("grad_norm", "grad norm"), gauge("clip_fraction", "clip fraction")])
    )  # fmt: skip
    d = d.with_panel(
        graph(
            "Advantage std and zero-variance groups",
            "Std of the advantages trained on, and the share of groups with identical rewards "
            "(no GRPO signal).",
            [
                gauge("advantage_std", "advantage std"),
                gauge("zero_variance_group_fraction", "zero-variance groups"),
            ],
        )
    )
    d = cost_row(d)
    d = d.with_row(row("Speed"))
    d = d.with_panel(
        graph(
            "Tokens per second",
            "Generated tokens per second: the engine's own figure and the counter's rate.",
            [
                gauge("engine_tokens_per_second", "engine"),
                (
                    "all generated",
                    f"sum(rate({T}generated_tokens_total{{{NS}}}[$__rate_interval]))",
                ),
            ],
        )
    )
    return d.with_panel(
        graph(
            "Step time",
            "Wall time of a whole step (rollout + learning) and of the optimizer step alone.",
            [(f"step {k}", e) for k, e in quantiles(f"{T}step_duration_seconds")]
            + [(f"learner {k}", e) for k, e in quantiles(f"{T}learner_step_duration_seconds")],
            "s",
        )
    )


def evaluation(d: db.Dashboard) -> db.Dashboard:
    """The held-out evaluation (spec.evaluation): gauges that hold the last evaluation's figures
    until the next one, so their lines step at each evaluated step."""
    d = d.with_row(row("Evaluation (held-out tasks)"))
    d = d.with_panel(
        graph(
            "Held-out success rate and pass@k",
            "Success rate of the last evaluation (successes / scored episodes; infrastructure "
            "failures are excluded) and pass@k for k = 1 and k = episodes per task.",
            [
                gauge("eval_success_ratio", "success"),
                (f"{BY_POD} pass@{{{{k}}}}", f"{T}eval_pass_at_k_ratio{{{NS}}}"),
            ],
            "percentunit",
        )
    )
    d = d.with_panel(
        graph(
            "Held-out success by task",
            "Success rate of each held-out task at the last evaluation.",
            [(f"{BY_POD} {{{{task}}}}", f"{T}eval_task_success_ratio{{{NS}}}")],
            "percentunit",
        )
    )
    d = d.with_panel(single("Evaluated step", "Step of the last evaluation (0: before training).",
                            f"{T}eval_step{{{NS}}}"))  # fmt: skip
    d = d.with_panel(
        single(
            "Evaluation time",
            "Wall time of the last evaluation.",
            f"{T}eval_duration_seconds{{{NS}}}",
            "s",
        )
    )
    return d.with_panel(
        stacked(
            "Evaluation episodes by outcome",
            "Evaluation episodes per second by outcome; an infrastructure failure is counted "
            "under its reason and never scored.",
            [
                (
                    "{{outcome}}",
                    f"sum by (outcome) (rate({T}eval_episodes_total{{{NS}}}[$__rate_interval]))",
                )
            ],
            "ops",
        )
    )
