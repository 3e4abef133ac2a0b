"""The TrainingRun spec as pydantic models: the one schema shared by the trainer and the CRD.

Field names follow docs/api.md: camelCase in YAML (aliases), snake_case in Python. Every model
forbids unknown fields, so a typo such as `groupsize` fails with the field path named. Load a spec
with `load_manifest(path)` (a TrainingRun YAML file) or `load_from_cluster(name, namespace)` (the
live object); both raise ConfigError with one line per invalid field, e.g.
`spec.algorithm.clip.high: Input should be less than or equal to 1`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml  # type: ignore[import-untyped]
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

API_VERSION = "kubecua.dev/v1alpha1"
KIND = "TrainingRun"


class ConfigError(ValueError):
    """A TrainingRun that cannot be used; the message names every bad field by its YAML path."""


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ModelConfig(_Model):
    path: str = Field(description="Local HF-format directory of the policy (no hub access).")
    volume: str | None = Field(default=None, description="PVC mounted read-only at path's parent.")
    dtype: Literal["auto", "bfloat16", "float32"] = Field(
        default="auto", description="auto: bf16 on GPU, fp32 on CPU."
    )
    freeze_vision: bool = Field(
        default=False, description="Train the language model only; the vision encoder stays."
    )


class LocalSandboxes(_Model):
    replicas: int = Field(ge=1, le=16, description="Local desktops to start (Xvfb).")


class PoolCapacity(_Model):
    episodes: int = Field(
        ge=1, le=10000, description="Episodes the run plays at once (usually maxInFlightEpisodes)."
    )
    spares: int = Field(default=0, ge=0, le=10000, description="Sandboxes beyond those.")


class SandboxesConfig(_Model):
    pool_ref: str | None = Field(default=None, description="SandboxPool in the same namespace.")
    urls: list[str] | None = Field(default=None, description="Static episode-server URLs.")
    local: LocalSandboxes | None = Field(default=None, description="Start N local desktops.")
    min_ready: int = Field(default=1, ge=1, description="The run waits until this many are ready.")
    capacity: PoolCapacity | None = Field(
        default=None, description="Sandboxes the run asks its pool for while active (operator)."
    )
    token_secret_ref: str | None = Field(
        default=None, description="Secret holding the sandbox bearer token (key `token`)."
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> SandboxesConfig:
        given = [n for n in ("pool_ref", "urls", "local") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                f"set exactly one of poolRef, urls, local (got {[to_camel(n) for n in given]})"
            )
        if self.capacity is not None and self.pool_ref is None:
            raise ValueError("capacity asks a pool for sandboxes: it needs poolRef")
        if self.urls is not None:
            bad = [u for u in self.urls if not u.startswith(("http://", "https://"))]
            if not self.urls or bad:
                raise ValueError(f"urls must be non-empty http(s) URLs (bad: {bad})")
        return self


class TasksConfig(_Model):
    config_map_ref: str | None = Field(default=None, description="ConfigMap of OSWorld task JSON.")
    path: str | None = Field(default=None, description="A file or directory of OSWorld task JSON.")
    ids: list[str] | None = Field(default=None, description="Restrict to these task ids.")

    @model_validator(mode="after")
    def _exactly_one_source(self) -> TasksConfig:
        if (self.config_map_ref is None) == (self.path is None):
            raise ValueError("set exactly one of configMapRef, path")
        return self


class ClipConfig(_Model):
    low: float = Field(default=0.2, ge=0, le=1, description="Lower PPO clip (ratio >= 1 - low).")
    high: float = Field(
        default=0.28, ge=0, le=1, description="Upper clip, DAPO clip-higher (arXiv 2503.14476)."
    )

    @model_validator(mode="after")
    def _high_at_least_low(self) -> ClipConfig:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class GspoClipConfig(ClipConfig):
    # Its own defaults, not ClipConfig's: a user who sets only `high` must get the paper's `low`,
    # and the CRD (which defaults each field) must agree field by field.
    low: float = Field(default=3e-4, ge=0, le=1, description="Lower clip (ratio >= 1 - low).")
    high: float = Field(default=4e-4, ge=0, le=1, description="Upper clip (ratio <= 1 + high).")


class ReplayConfig(_Model):
    enabled: bool = Field(
        default=False, description="Inject stored successes into all-fail groups."
    )
    max_per_task: int = Field(default=4, ge=1, description="Successes kept per task.")


class AlgorithmConfig(_Model):
    group_size: int = Field(
        default=8, ge=2, le=64, description="Episodes per task per step (GRPO G)."
    )
    tasks_per_step: int = Field(default=1, ge=1, description="Groups per step.")
    max_turns: int = Field(default=15, ge=1, le=100, description="Agent turns per episode.")
    learning_rate: float = Field(default=1e-6, gt=0, description="AdamW learning rate.")
    clip: ClipConfig = Field(
        default_factory=lambda: ClipConfig(), description="Surrogate clip range."
    )
    normalize_std: bool = Field(default=True, description="false = Dr.GRPO (arXiv 2503.20783).")
    aggregation: Literal["token", "sequence"] = Field(
        default="token", description="Loss aggregation."
    )
    mode: Literal["trajectory", "perTurn"] = Field(
        default="trajectory", description="One sample per episode, or one per turn."
    )
    turn_discount: float = Field(
        default=1.0, ge=0, le=1, description="perTurn: reward * d^(T-1-t)."
    )
    kl_coef: float = Field(
        default=0.0, ge=0, description="k3 KL penalty against the initial policy."
    )
    tis_cap: float = Field(default=2.0, ge=1, description="Truncated importance-sampling cap.")
    dynamic_sampling: bool = Field(default=True, description="Skip zero-variance groups (DAPO).")
    replay: ReplayConfig = Field(
        default_factory=lambda: ReplayConfig(), description="Success replay."
    )
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping norm.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    temperature_end: float | None = Field(
        default=None,
        gt=0,
        description="Temperature schedule: linear from temperature at step 1 to this at the last"
        " step (Slime-OSWorld goes 0.8 -> 0.5); unset keeps temperature.",
    )
    max_new_tokens: int = Field(default=256, ge=1, description="Generated tokens per turn.")
    policy_loss: Literal["ppo", "gspo"] = Field(
        default="ppo",
        description="ppo: per-token ratio and clip; gspo: one length-normalised ratio per"
        " sequence, clipped by gspoClip (GSPO, arXiv 2507.18071).",
    )
    gspo_clip: GspoClipConfig = Field(
        default_factory=lambda: GspoClipConfig(),
        description="policyLoss gspo: clip range of the sequence ratio (the paper's 3e-4/4e-4).",
    )
    entropy_coef: float = Field(
        default=0.0,
        ge=0,
        description="Entropy bonus: subtracts coef x mean token entropy from the loss.",
    )


class RolloutConfig(_Model):
    engine: Literal["hf", "sglang"] = Field(default="hf", description="hf: embedded; sglang: HTTP.")
    replicas: int = Field(default=1, ge=1, description="sglang servers (operator-managed).")
    gpus_per_replica: int = Field(default=1, ge=0, description="GPUs per sglang server.")
    sglang_urls: list[str] | None = Field(default=None, description="External sglang servers.")
    max_in_flight_episodes: int = Field(default=64, ge=1, description="Concurrent episodes.")
    episode_timeout_seconds: float = Field(default=900, gt=0, description="Per-episode time limit.")
    max_pixels: int = Field(default=1003520, ge=784, description="Pixel cap per screenshot.")
    keep_screenshots: int = Field(
        default=3, ge=1, description="K most recent screenshots in context."
    )
    max_staleness: int = Field(
        default=0,
        ge=0,
        le=8,
        description="Updates the behaviour policy may lag: 0 = synchronous, 1 = step k+1 plays"
        " while step k learns.",
    )
    system_prompt: str | None = Field(
        default=None,
        min_length=1,
        max_length=16384,
        description="The agent's system prompt; {width} and {height} become the screenshot's"
        " size. Default: the built-in pyautogui prompt (rollout/agent.py).",
    )

    @field_validator("system_prompt")
    @classmethod
    def _prompt_template(cls, v: str | None) -> str | None:
        # Checked here, not at the first episode: a bad template would otherwise fail every
        # episode of a run that already started.
        if v is not None:
            try:
                v.format(width=1, height=1)
            except (KeyError, IndexError, ValueError) as err:
                raise ValueError(
                    f"only {{width}} and {{height}} may be substituted (write {{{{ and }}}} for"
                    f" a literal brace); {type(err).__name__}: {err}"
                ) from None
        return v


class TrainerConfig(_Model):
    nodes: int = Field(default=1, ge=1, description="Trainer nodes.")
    gpus_per_node: int = Field(default=0, ge=0, description="0 = CPU.")
    image: str | None = Field(
        default=None, description="Trainer image; defaults from the operator."
    )
    resources: dict[str, Any] | None = Field(
        default=None, description="Kubernetes ResourceRequirements."
    )
    gradient_checkpointing: bool = Field(
        default=True, description="Recompute activations in backward."
    )
    compile: bool = Field(
        default=False, description="torch.compile each decoder layer (GPU; pays after warm-up)."
    )
    optimizer_offload: bool = Field(
        default=False,
        description="fp32 master weights and AdamW moments in host memory (ZeRO-Offload style);"
        " meant for model.dtype bfloat16.",
    )


class CheckpointConfig(_Model):
    volume: str | None = Field(default=None, description="PVC name for checkpoints.")
    path: str = Field(default="/ckpt", description="Checkpoint root directory.")
    every_steps: int = Field(default=10, ge=1, description="Save every N steps (and at the end).")
    keep: int = Field(default=3, ge=1, description="Checkpoints kept.")


class MetricsConfig(_Model):
    port: int = Field(default=9400, ge=0, le=65535, description="Prometheus port; 0 disables.")


class KueueConfig(_Model):
    queue_name: str | None = Field(default=None, description="Sets kueue.x-k8s.io/queue-name.")


class EvaluationConfig(_Model):
    tasks: TasksConfig = Field(
        description="Held-out OSWorld tasks, never trained on (an id also in spec.tasks is refused)"
    )
    every_steps: int = Field(
        default=0,
        ge=0,
        description="Evaluate every N steps; 0 = only before the first step and after the last.",
    )
    at_start: bool = Field(default=True, description="Evaluate before the first step (step 0).")
    episodes_per_task: int = Field(
        default=1, ge=1, le=64, description="Episodes per task: success rate and pass@k (k <= n)."
    )
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature; 0 = greedy.")
    max_turns: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Agent turns per episode; default algorithm.maxTurns.",
    )


class WarmupConfig(_Model):
    demonstrations: str = Field(
        description="A JSONL file, or a directory of them, in the trajectory format the trainer"
        " writes for its episodes (docs/trajectories.md); on the model or checkpoint volume in a"
        " cluster."
    )
    epochs: int = Field(default=1, ge=1, le=1000, description="Passes over the demonstrations.")
    batch_size: int = Field(default=8, ge=1, description="Demonstrations per optimizer step.")
    learning_rate: float = Field(default=1e-5, gt=0, description="AdamW learning rate.")
    successes_only: bool = Field(
        default=True,
        description="Use only demonstrations whose outcome is success (reward >= 1).",
    )


class TrainingRunSpec(_Model):
    model: ModelConfig = Field(description="The policy to train.")
    sandboxes: SandboxesConfig = Field(description="Where desktops come from.")
    tasks: TasksConfig = Field(description="OSWorld tasks to train on.")
    algorithm: AlgorithmConfig = Field(
        default_factory=lambda: AlgorithmConfig(), description="GRPO."
    )
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig(), description="Episodes.")
    trainer: TrainerConfig = Field(
        default_factory=lambda: TrainerConfig(), description="Learner pods."
    )
    checkpoint: CheckpointConfig = Field(
        default_factory=lambda: CheckpointConfig(), description="Saves."
    )
    evaluation: EvaluationConfig | None = Field(
        default=None, description="Held-out evaluation before, during and after training."
    )
    warmup: WarmupConfig | None = Field(
        default=None, description="Supervised warm-up on demonstrations before the first step."
    )
    steps: int = Field(
        ge=0, description="GRPO steps to run; 0 = evaluate the model only (needs evaluation)."
    )
    suspend: bool = Field(default=False, description="Pause the run (operator).")
    backoff_limit: int = Field(default=3, ge=0, description="Trainer restarts before Failed.")
    metrics: MetricsConfig = Field(
        default_factory=lambda: MetricsConfig(), description="Prometheus."
    )
    kueue: KueueConfig = Field(
        default_factory=lambda: KueueConfig(), description="Kueue admission."
    )
    seed: int = Field(default=0, description="Seed for sampling and task order.")
    output_dir: str | None = Field(
        default=None, description="Local mode: reports/episodes/checkpoints."
    )

    @field_validator("steps")
    @classmethod
    def _evaluation_only_needs_evaluation(cls, steps: int, info: ValidationInfo) -> int:
        # A field validator (not a model one) so the error names spec.steps; evaluation is
        # declared before steps, so it is already in info.data when it was valid.
        if steps == 0 and info.data.get("evaluation") is None:
            raise ValueError("steps 0 evaluates the model only: set spec.evaluation")
        return steps


class TrainingRun(BaseModel):
    """The whole manifest; metadata is kept as a plain dict (name, namespace)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TrainingRunSpec

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", "local"))

    @property
    def namespace(self) -> str | None:
        ns = self.metadata.get("namespace")
        return str(ns) if ns else None


def format_errors(err: ValidationError, prefix: str = "") -> str:
    """One line per error: `spec.algorithm.groupSize: Input should be >= 2 (got 1)`."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        got = "" if e["type"] == "missing" else f" (got {e.get('input')!r:.60})"
        lines.append(f"{loc or '<root>'}: {e['msg']}{got}")
    return "\n".join(lines)


def parse_training_run(obj: Any, source: str = "manifest") -> TrainingRun:
    """Validate a TrainingRun dict; raise ConfigError naming each bad field path."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{source}: expected a mapping with apiVersion/kind/spec")
    if obj.get("kind") != KIND or obj.get("apiVersion") != API_VERSION:
        raise ConfigError(
            f"{source}: expected apiVersion {API_VERSION} and kind {KIND}, "
            f"got {obj.get('apiVersion')!r} / {obj.get('kind')!r}"
        )
    try:
        return TrainingRun.model_validate(obj)
    except ValidationError as err:
        raise ConfigError(f"{source}: invalid TrainingRun\n{format_errors(err)}") from None


def load_manifest(path: str | Path) -> TrainingRun:
    """Read a TrainingRun YAML file; relative paths in it resolve against the file's folder."""
    p = Path(path)
    try:
        obj = yaml.safe_load(p.read_text())
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{p}: not valid YAML: {err}") from None
    run = parse_training_run(obj, str(p))
    _resolve_paths(run.spec, p.resolve().parent)
    return run


def _resolve_paths(spec: TrainingRunSpec, base: Path) -> None:
    # Local manifests name paths like ${KUBECUA_CACHE}/models/tiny or ../sandbox-image/tasks.
    def resolve(value: str) -> str:
        return str(base / Path(os.path.expandvars(value)).expanduser())

    if spec.tasks.path is not None:
        spec.tasks.path = resolve(spec.tasks.path)
    if spec.evaluation is not None and spec.evaluation.tasks.path is not None:
        spec.evaluation.tasks.path = resolve(spec.evaluation.tasks.path)
    if spec.warmup is not None:
        spec.warmup.demonstrations = resolve(spec.warmup.demonstrations)
    if spec.output_dir is not None:
        spec.output_dir = resolve(spec.output_dir)
    spec.model.path = resolve(spec.model.path)


def load_from_cluster(name: str, namespace: str, api: Any = None) -> TrainingRun:
    """Read the live TrainingRun object through the kubernetes client (in-cluster or kubeconfig)."""
    if api is None:
        from kubecua_trainer.status import custom_objects_api

        api = custom_objects_api()
    group, version = API_VERSION.split("/")
    obj = api.get_namespaced_custom_object(group, version, namespace, "trainingruns", name)
    return parse_training_run(obj, f"trainingrun {namespace}/{name}")
