"""Prometheus metrics of the trainer, `kubecua_trainer_` prefix, base units, bounded labels.

One registry per TrainerMetrics so tests and several runs in one process do not collide.
`serve(port, addr)` starts the /metrics HTTP server (port 0 in the spec disables it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from kubecua_trainer.rollout.records import EpisodeResult

P = "kubecua_trainer_"
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900)

# name -> help, for the gauges set from a step's statistics (the learner's and the loop's keys)
STEP_GAUGES = {
    "reward_mean": "Mean evaluator score of the scored episodes of the last step.",
    "shaped_reward_mean": "Mean shaped reward (spec.reward, what GRPO trained on) of the last"
    " step's scored episodes.",
    "success_rate": "Fraction of the last step's scored episodes that solved their task.",
    "loss": "Policy loss of the last step.",
    "kl": "k3 KL estimate against the reference policy, last step.",
    "entropy": "Mean token entropy of the policy on trained tokens, last step.",
    "grad_norm": "Gradient norm before clipping, last step.",
    "clip_fraction": "Fraction of trained tokens whose ratio was clipped, last step.",
    "advantage_std": "Standard deviation of the advantages trained on, last step.",
    "zero_variance_group_fraction": "Fraction of groups with identical rewards, last step.",
    "engine_tokens_per_second": "Generated tokens per second of rollout, last step.",
    "weight_refresh_seconds": "Time to copy the updated weights into the engine, last step.",
    "staleness_max": "Most updates any sample of the last step lagged the learner by.",
    "sandbox_seconds_per_trajectory": "Sandbox-seconds leased per trajectory, last step.",
    "gpu_seconds_per_trajectory": "GPU-seconds held per trajectory (step wall time), last step.",
    "step": "Last completed training step.",
}


# cost.figures' keys -> help, the whole run's cost gauges (kubecua_trainer_run_<key>)
RUN_COST_GAUGES = {
    "sandbox_seconds": "Sandbox-seconds the whole run leased (training and evaluation).",
    "gpu_seconds": "GPU-seconds the whole run held (trainer and sglang engine GPUs).",
    "trajectories": "Training episodes the whole run played, whatever their outcome.",
    "successful_trajectories": "Training episodes of the whole run that solved their task.",
}


class TrainerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.gauges = {k: Gauge(P + k, h, registry=r) for k, h in STEP_GAUGES.items()}
        self.episodes = Counter(
            P + "episodes",
            "Episodes by outcome (success, failure, or an infra reason).",
            ["outcome"],
            registry=r,
        )
        self.episode_turns = Histogram(
            P + "episode_turns",
            "Turns per episode.",
            buckets=(1, 2, 3, 5, 8, 10, 15, 20, 30, 50),
            registry=r,
        )
        self.episode_seconds = Histogram(
            P + "episode_duration_seconds", "Wall time of an episode.", buckets=_SECONDS, registry=r
        )
        self.env_step_seconds = Histogram(
            P + "env_step_duration_seconds",
            "Latency of one sandbox step call.",
            buckets=_SECONDS,
            registry=r,
        )
        self.learner_seconds = Histogram(
            P + "learner_step_duration_seconds",
            "Wall time of one optimizer step.",
            buckets=_SECONDS,
            registry=r,
        )
        self.step_seconds = Histogram(
            P + "step_duration_seconds",
            "Wall time of a whole step (rollout + learning).",
            buckets=_SECONDS,
            registry=r,
        )
        self.sample_staleness = Histogram(
            P + "sample_staleness_steps",
            "Updates between a trained sample's generating weights and the weights it updates.",
            buckets=(0, 1, 2, 3, 4, 6, 8),
            registry=r,
        )
        self.generated_tokens = Counter(P + "generated_tokens", "Tokens sampled.", registry=r)
        self.replay_injections = Counter(
            P + "replay_injections", "Stored successes injected into all-fail groups.", registry=r
        )
        self.partial_failures = Counter(
            P + "partial_failures",
            "Scored episodes whose task-declared partial metric failed (the term was left out).",
            registry=r,
        )
        self.zero_variance_groups = Counter(
            P + "zero_variance_groups", "Groups skipped because all rewards were equal.", registry=r
        )
        self.mixed_start_groups = Counter(
            P + "mixed_start_groups",
            "Groups whose episodes started from different screens (spec.tasks.mixedStartGroups).",
            registry=r,
        )
        # spec.tasks.verified: training tasks the manifest left out, by reason (observe_tasks)
        self.tasks_left_out: Gauge | None = None
        self.gpu_memory = Gauge(
            P + "gpu_memory_bytes", "GPU memory of the learner.", ["kind"], registry=r
        )
        self.sandboxes = Gauge(P + "sandboxes", "Sandboxes by state.", ["state"], registry=r)
        # Registered at the first checkpoint: a 0 before that would read as a 56-year-old one.
        self.last_checkpoint: Gauge | None = None
        # The run's cost (observe_cost), registered once there is a figure to show.
        self.run_cost: dict[str, Gauge] = {}
        self.run_money: Gauge | None = None
        # spec.tasks.curriculum's pass rates (observe_curriculum): only in runs that have one
        self.curriculum_tasks: Gauge | None = None
        self.curriculum_mean: Gauge | None = None
        # spec.warmup.goal's measurement (observe_warmup): only in runs with a warm-up
        self.warmup_gauges: dict[str, Gauge] | None = None
        self._eval_metrics()

    def _eval_metrics(self) -> None:
        """The held-out evaluation's figures (evaluation/stage.py), set after each evaluation."""
        r = self.registry
        # The three unlabelled gauges are registered at the first evaluation, as last_checkpoint:
        # one registered now would read 0 from the start, a measured 0% success of step 0.
        self.eval_success: Gauge | None = None
        self.eval_step: Gauge | None = None
        self.eval_seconds: Gauge | None = None
        self.eval_pass_at_k = Gauge(
            P + "eval_pass_at_k_ratio", "pass@k of the last held-out evaluation.", ["k"], registry=r
        )
        self.eval_task_success = Gauge(
            P + "eval_task_success_ratio",
            "Success rate of each held-out task at the last evaluation.",
            ["task"],
            registry=r,
        )
        self.eval_episodes = Counter(
            P + "eval_episodes",
            "Held-out evaluation episodes by outcome (success, failure, or an infra reason).",
            ["outcome"],
            registry=r,
        )

    def observe_evaluation(self, summary: dict[str, Any], outcomes: dict[str, int]) -> None:
        """Set the eval gauges from a summary.json and count its episodes by outcome. A figure
        with no scored episode behind it is not set (a 0 would read as a measured failure)."""
        if self.eval_step is None or self.eval_seconds is None:
            self.eval_step = Gauge(
                P + "eval_step", "Step of the last held-out evaluation.", registry=self.registry
            )
            self.eval_seconds = Gauge(
                P + "eval_duration_seconds",
                "Wall time of the last held-out evaluation.",
                registry=self.registry,
            )
        self.eval_step.set(summary["step"])
        self.eval_seconds.set(summary["seconds"])
        if summary["success_rate"] is not None:
            if self.eval_success is None:
                self.eval_success = Gauge(
                    P + "eval_success_ratio",
                    "Success rate of the last held-out evaluation.",
                    registry=self.registry,
                )
            self.eval_success.set(summary["success_rate"])
        for k, value in summary["pass_at_k"].items():
            if value is not None:
                self.eval_pass_at_k.labels(k).set(value)
        for row in summary["tasks"]:
            if row["success_rate"] is not None:
                self.eval_task_success.labels(row["task_id"]).set(row["success_rate"])
        for outcome, n in outcomes.items():
            self.eval_episodes.labels(outcome).inc(n)

    def observe_warmup(self, goal: dict[str, Any]) -> None:
        """The warm-up's goal (warmup.json's "goal", warmup/goal.py): the measured share of
        demonstrated replies reproduced, the goal, and 1 when it ended below it. Registered at
        the first measurement: a run without one shows none (a 0 would read as a measured 0%)."""
        if self.warmup_gauges is None:
            r = self.registry
            self.warmup_gauges = {
                "reply_match": Gauge(
                    P + "warmup_reply_match_ratio",
                    "Share of the measured demonstrated replies the greedy policy reproduces"
                    " after the warm-up (spec.warmup.goal).",
                    registry=r,
                ),
                "reply_match_min": Gauge(
                    P + "warmup_goal_ratio", "spec.warmup.goal.replyMatchMin.", registry=r
                ),
                "below_goal": Gauge(
                    P + "warmup_below_goal",
                    "1 when the warm-up ended below spec.warmup.goal, else 0.",
                    registry=r,
                ),
                "epochs": Gauge(
                    P + "warmup_epochs",
                    "Epochs the warm-up ran, an extension included.",
                    registry=r,
                ),
            }
        for key, gauge in self.warmup_gauges.items():
            gauge.set(float(goal[key]))

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        if port:
            start_http_server(port, addr=addr, registry=self.registry)

    def observe_episode(self, ep: EpisodeResult) -> None:
        self.episodes.labels(ep.outcome).inc()
        self.episode_turns.observe(len(ep.turns))
        self.episode_seconds.observe(ep.seconds)
        self.generated_tokens.inc(ep.gen_tokens)
        for turn in ep.turns:
            if turn.env_seconds is not None:
                self.env_step_seconds.observe(turn.env_seconds)

    def observe_tasks(self, trained: int, reasons: dict[str, int]) -> None:
        """spec.tasks.verified's selection: tasks kept, and those left out by reason."""
        if self.tasks_left_out is None:
            self.tasks_left_out = Gauge(
                P + "tasks_left_out",
                "Training tasks the verified manifest left out, by reason (spec.tasks.verified).",
                ["reason"],
                registry=self.registry,
            )
            self.gauges["tasks_trained"] = Gauge(
                P + "tasks_trained", "Training tasks the run draws from.", registry=self.registry
            )
        self.gauges["tasks_trained"].set(trained)
        for reason, n in reasons.items():
            self.tasks_left_out.labels(reason).set(n)

    def observe_step(self, stats: dict[str, float], count: bool = True) -> None:
        """Set the gauges named in STEP_GAUGES from a step's statistics; others are ignored.
        count: also observe the histograms (in a distributed run only rank 0's pod counts, so a
        sum over pods counts each step once; every pod sets the gauges)."""
        for key, value in stats.items():
            if key in self.gauges and value is not None:  # None: undefined (no trajectory)
                self.gauges[key].set(value)
        if "seconds" in stats and count:
            self.learner_seconds.observe(stats["seconds"])

    def observe_curriculum(self, summary: dict[str, Any]) -> None:
        """spec.tasks.curriculum: how many training tasks have a pass rate of each class
        (rollout/curriculum.py CLASSES: unplayed, never, below_band, in_band, above_band,
        always) and the mean pass rate of the played ones."""
        if self.curriculum_tasks is None:
            r = self.registry
            self.curriculum_tasks = Gauge(
                P + "curriculum_tasks",
                "Training tasks by their running pass rate's class (spec.tasks.curriculum).",
                ["pass_rate"],
                registry=r,
            )
            self.curriculum_mean = Gauge(
                P + "curriculum_pass_rate_mean",
                "Mean running pass rate of the training tasks played so far.",
                registry=r,
            )
        for name, count in summary["classes"].items():
            self.curriculum_tasks.labels(name).set(count)
        if summary["mean_pass_rate"] is not None and self.curriculum_mean is not None:
            self.curriculum_mean.set(summary["mean_pass_rate"])

    def observe_cost(self, totals: dict[str, Any]) -> None:
        """The whole run's cost (cost.figures), as gauges: they count earlier pods of the run too,
        so they are set, not counted. Per trajectory is a division in PromQL (the dashboard's
        Cost panel); money only with spec.cost's prices, labelled by its currency."""
        if not self.run_cost:
            for key, text in RUN_COST_GAUGES.items():
                self.run_cost[key] = Gauge(P + "run_" + key, text, registry=self.registry)
        for key, gauge in self.run_cost.items():
            gauge.set(totals[key])
        if totals.get("cost") is not None:
            if self.run_money is None:
                self.run_money = Gauge(
                    P + "run_cost", "The run's cost at spec.cost's prices.", ["currency"],
                    registry=self.registry,
                )  # fmt: skip
            self.run_money.labels(totals["currency"]).set(totals["cost"])

    def checkpoint_written(self, unix_seconds: float) -> None:
        """kubecua_trainer_last_checkpoint_timestamp_seconds; the dashboards' "Checkpoint age"
        panel shows time() minus it (written at 1700000000.0, viewed at 1700000090: 90 s)."""
        if self.last_checkpoint is None:
            self.last_checkpoint = Gauge(
                P + "last_checkpoint_timestamp_seconds",
                "Unix time at which the newest checkpoint of this run was written.",
                registry=self.registry,
            )
        self.last_checkpoint.set(unix_seconds)

    def observe_gpu(self) -> None:
        import torch

        if torch.cuda.is_available():
            self.gpu_memory.labels("allocated").set(torch.cuda.memory_allocated())
            self.gpu_memory.labels("peak").set(torch.cuda.max_memory_allocated())
            self.gpu_memory.labels("reserved").set(torch.cuda.memory_reserved())
