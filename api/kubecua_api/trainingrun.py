"""TrainingRun (kubecua.dev/v1alpha1): one GRPO run of a computer-use policy against desktops.

The trainer validates its spec with these models, and the CRD's schema is generated from them
(kubecua_api.crdgen). Descriptions are the CRD's and docs/api.md's. Rules that need the old object
or cross fields in CEL live in the CRD template (kubecua_api/templates/); the validators below
repeat the ones the trainer must also enforce on a local manifest.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

from kubecua_api.common import (
    LABEL_VALUE_PATTERN,
    MOUNT_PATH_PATTERN,
    ApiModel,
    Condition,
    DateTime,
    Image,
    Quantity,
    conditions,
    defaulted,
)
from kubecua_api.constants import CHECKPOINT_PATH, METRICS_PORT
from kubecua_api.cost import CostConfig, CostStatus
from kubecua_api.curriculum import CurriculumConfig, CurriculumStatus
from kubecua_api.liveview import LiveViewStatus
from kubecua_api.lora import LoraConfig
from kubecua_api.reward import RewardConfig
from kubecua_api.taskverify import (
    MIXED_START_DESCRIPTION,
    MixedStartGroups,
    VerifiedTasksConfig,
    VerifiedTasksStatus,
)
from kubecua_api.warmup import WarmupGoalConfig, WarmupStatus, WarmupStopConfig

HTTP_URL = r"^https?://"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
TaskId = Annotated[str, StringConstraints(min_length=1, max_length=256)]
HttpUrl = Annotated[str, StringConstraints(max_length=2048, pattern=HTTP_URL)]
# Upper bounds of counts (issue 42): each far above any real run, and each low enough that a typo
# or an abusive spec cannot make the operator write thousands of pods or the trainer allocate
# without end. A user who may create no pods still gets a Job of spec.trainer.nodes pods.
MAX_NODES = 1024  # trainer pods: the largest GPU clusters train on a few thousand GPUs, 8-16 a node
MAX_GPUS_PER_NODE = 16  # the largest GPU servers hold 8-16 accelerators
MAX_SANDBOXES = 10000  # as a SandboxPool's spec.replicas
MAX_STEPS = 1_000_000  # GRPO steps; a step takes seconds at the very least
MAX_TASKS_PER_STEP = 1024  # groups per step; times groupSize (<= 64) episodes of one step
MAX_NEW_TOKENS = 32768  # generated tokens per turn: the longest context of the supported models
MAX_PIXELS = 7680 * 4320  # one 8K screenshot


class ModelConfig(ApiModel):
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="Local HF-format model directory (on model.volume in a cluster); no hub"
        " access.",
    )
    volume: str | None = Field(
        default=None,
        max_length=253,
        description="PVC mounted read-only at the parent directory of path.",
    )
    dtype: Literal["auto", "bfloat16", "float32"] = Field(
        default="auto",
        description="Parameter dtype; auto means bfloat16 on GPU and float32 on CPU.",
    )
    freeze_vision: bool = Field(
        default=False,
        description="Train the language model only; the vision encoder keeps its loaded weights.",
    )
    lora: LoraConfig | None = Field(
        default=None,
        description="Train a LoRA adapter (peft) instead of the weights: the optimizer and the"
        " checkpoints hold the adapter alone, in peft's layout (`python -m kubecua_trainer"
        " export-merged` writes a merged model).",
    )


class LocalSandboxes(ApiModel):
    replicas: int = Field(ge=1, le=16, description="Local desktops to start under Xvfb.")


class PoolCapacity(ApiModel):
    episodes: int = Field(
        ge=1,
        le=10000,
        description="Episodes the run plays at once (usually rollout.maxInFlightEpisodes).",
    )
    spares: int = Field(
        default=0,
        ge=0,
        le=10000,
        description="Sandboxes beyond those to cover resets and failures.",
    )


class SandboxesConfig(ApiModel):
    pool_ref: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description="Name of a SandboxPool in the same namespace. Immutable (neither changed nor"
        " removed).",
    )
    # Bounds and pattern in the schema only: the validator below names a bad URL more clearly.
    urls: list[str] | None = Field(
        default=None,
        description="Static episode-server URLs (http or https).",
        json_schema_extra={
            "minItems": 1,
            "maxItems": 4096,
            "x-kubernetes-list-type": "set",  # each desktop once: a second lease would be a 409
            "items": {"type": "string", "maxLength": 2048, "pattern": HTTP_URL},
        },
    )
    local: LocalSandboxes | None = Field(
        default=None,
        description="Start N local desktops (local mode and make demo only; refused in a cluster).",
    )
    min_ready: int = Field(
        default=1,
        ge=1,
        le=MAX_SANDBOXES,
        description="The run stays Pending until this many sandboxes are ready.",
    )
    capacity: PoolCapacity | None = Field(
        default=None,
        description="Sandboxes this run asks its pool for while it is active (not suspended, not"
        " finished): episodes plus spares. The pool keeps the summed demand of its active runs,"
        " up to its spec.maxReplicas, and gives it back, idle sandboxes only, when they finish or"
        " are suspended. Needs poolRef.",
    )
    token_secret_ref: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Secret holding the sandbox bearer token under key `token`, mounted into the"
        " trainer; its name ends in -sandbox-token. Only a Secret the run's author may read"
        " themselves (the chart's ValidatingAdmissionPolicy refuses any other); leave it empty to"
        " use the token the operator made for a pod or KubeVirt pool, or an external pool's"
        " <pool>-sandbox-token.",
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


class TasksConfig(ApiModel):
    config_map_ref: str | None = Field(
        default=None,
        max_length=253,
        description="ConfigMap whose values are OSWorld task JSON documents.",
    )
    path: str | None = Field(
        default=None,
        max_length=4096,
        description="A file or directory of OSWorld task JSON (inside the trainer image or a"
        " volume).",
    )
    ids: list[TaskId] | None = Field(
        default=None,
        min_length=1,
        max_length=10000,
        description="Restrict to these task ids; omit for every task (an empty list is refused:"
        " it would mean every task, not none).",
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> TasksConfig:
        if (self.config_map_ref is None) == (self.path is None):
            raise ValueError("set exactly one of configMapRef, path")
        return self


class TrainingTasksConfig(TasksConfig):
    """spec.tasks: the training tasks, and how each step draws from them."""

    curriculum: CurriculumConfig | None = Field(
        default=None,
        description="Draw tasks by their running pass rate instead of uniformly (`{}` for the"
        " defaults); absent: every task once per epoch, in a seeded order.",
    )
    verified: VerifiedTasksConfig | None = Field(
        default=None,
        description="Train only on the tasks a verified manifest calls usable (docs/tasks.md);"
        " absent: every task of the source.",
    )
    mixed_start_groups: MixedStartGroups = Field(
        default="count", description=MIXED_START_DESCRIPTION
    )


class ClipConfig(ApiModel):
    low: float = Field(default=0.2, ge=0, le=1, description="Lower clip (ratio >= 1 - low).")
    high: float = Field(default=0.28, ge=0, le=1, description="Upper clip (ratio <= 1 + high).")

    @model_validator(mode="after")
    def _high_at_least_low(self) -> ClipConfig:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class GspoClipConfig(ClipConfig):
    # Its own defaults, not ClipConfig's: a user who sets only `high` must get the paper's `low`
    # (the CRD defaults each field).
    low: float = Field(
        default=3e-4, ge=0, le=1, description="Lower clip (sequence ratio >= 1 - low)."
    )
    high: float = Field(
        default=4e-4, ge=0, le=1, description="Upper clip (sequence ratio <= 1 + high)."
    )


class ReplayConfig(ApiModel):
    enabled: bool = Field(
        default=False, description="Inject stored successes into all-fail groups."
    )
    max_per_task: int = Field(default=4, ge=1, le=1024, description="Successes kept per task.")


class AlgorithmConfig(ApiModel):
    group_size: int = Field(
        default=8,
        ge=2,
        le=64,
        description="Episodes per task per step (the GRPO group size G).",
    )
    tasks_per_step: int = Field(
        default=1, ge=1, le=MAX_TASKS_PER_STEP, description="Groups (tasks) per step."
    )
    max_turns: int = Field(default=15, ge=1, le=100, description="Agent turns per episode.")
    learning_rate: float = Field(default=1e-6, gt=0, description="AdamW learning rate.")
    clip: ClipConfig = defaulted(
        ClipConfig,
        "PPO ratio clip range [1 - low, 1 + high]; DAPO clip-higher (arXiv 2503.14476).",
    )
    normalize_std: bool = Field(
        default=True,
        description="Divide advantages by the group's std; false gives Dr.GRPO (arXiv 2503.20783).",
    )
    # No default in the CRD: it follows policyLoss. None only until _aggregation_of_policy_loss
    # fills it in, so readers see a Literal (an explicit null is refused).
    aggregation: Literal["token", "sequence"] = Field(
        default=None,  # type: ignore[arg-type]
        description="Loss aggregation. token: every trained token of the batch weighs the same,"
        " so a sequence weighs by its length; sequence: the mean over each sequence's tokens,"
        " then over sequences, so every sequence weighs the same. Default: token with policyLoss"
        " ppo; sequence with gspo, the GSPO paper's objective (verl's loss_mode gspo), where"
        " token would weigh each sequence's one ratio by its length.",
    )
    mode: Literal["trajectory", "perTurn"] = Field(
        default="trajectory", description="One training sample per episode, or one per turn."
    )
    turn_discount: float = Field(
        default=1.0, ge=0, le=1, description="perTurn mode: reward * d^(T-1-t)."
    )
    kl_coef: float = Field(
        default=0.0,
        ge=0,
        description="k3 KL penalty coefficient against the initial policy.",
    )
    tis_cap: float = Field(default=2.0, ge=1, description="Truncated importance-sampling cap.")
    dynamic_sampling: bool = Field(
        default=True, description="Skip groups whose rewards have zero variance (DAPO)."
    )
    replay: ReplayConfig = defaulted(ReplayConfig, "Success replay into all-fail groups.")
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping norm.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    temperature_end: float | None = Field(
        default=None,
        gt=0,
        description="Temperature schedule: linear from temperature at step 1 to this at the last"
        " step (Slime-OSWorld goes 0.8 to 0.5); unset keeps temperature.",
    )
    max_new_tokens: int = Field(
        default=256, ge=1, le=MAX_NEW_TOKENS, description="Generated tokens per turn."
    )
    policy_loss: Literal["ppo", "gspo"] = Field(
        default="ppo",
        description="ppo: a ratio and clip per token; gspo: one length-normalised ratio per"
        " sequence, clipped by gspoClip (GSPO, arXiv 2507.18071).",
    )
    gspo_clip: GspoClipConfig = defaulted(
        GspoClipConfig,
        "policyLoss gspo: clip range [1 - low, 1 + high] of the sequence ratio (the paper's 3e-4"
        " and 4e-4).",
    )
    entropy_coef: float = Field(
        default=0.0,
        ge=0,
        description="Entropy bonus: coef x the mean token entropy is subtracted from the loss.",
    )

    mini_batches: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Optimizer steps per training step: the step's samples are split, in their"
        " order (a group's episodes together), into this many mini-batches, each one AdamW step"
        " with its own aggregation (verl's ppo_mini_batch_size). With more than 1 the ratio and"
        " its clip act against the log-probs the learner computed before the step's first"
        " update. At most one mini-batch an episode (groupSize x tasksPerStep).",
    )

    @model_validator(mode="after")
    def _mini_batches_fit(self) -> AlgorithmConfig:
        # the CRD says the same in CEL; this is for specs validated without an API server
        # (make demo, kubecua validate)
        episodes = self.group_size * self.tasks_per_step
        if self.mini_batches > episodes:
            raise ValueError(
                f"algorithm.miniBatches: {self.mini_batches} is more than the step's"
                f" {episodes} episodes (groupSize x tasksPerStep)"
            )
        return self

    @model_validator(mode="after")
    def _aggregation_of_policy_loss(self) -> AlgorithmConfig:
        if self.aggregation is None:
            self.aggregation = "sequence" if self.policy_loss == "gspo" else "token"
        return self


class RolloutConfig(ApiModel):
    engine: Literal["hf", "sglang"] = Field(
        default="hf",
        description="hf: generation embedded in the trainer; sglang: sglang servers over HTTP.",
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=256,
        description="sglang servers the operator runs (engine sglang without sglangUrls).",
    )
    gpus_per_replica: int = Field(
        default=1, ge=0, le=MAX_GPUS_PER_NODE, description="GPUs per sglang server."
    )
    sglang_urls: list[HttpUrl] | None = Field(
        default=None,
        max_length=256,
        description="External sglang servers; when set the operator runs none. They must read"
        " spec.checkpoint.path at the same path as the trainer (each step's weights are loaded"
        " from there).",
    )
    max_in_flight_episodes: int = Field(
        default=64, ge=1, le=MAX_SANDBOXES, description="Episodes run concurrently."
    )
    episode_timeout_seconds: float = Field(
        default=900, gt=0, le=86400, description="Time limit of one episode (at most a day)."
    )
    max_pixels: int = Field(
        default=1003520, ge=784, le=MAX_PIXELS, description="Pixel cap per screenshot (w*h)."
    )
    keep_screenshots: int = Field(
        default=3,
        ge=1,
        le=100,
        description="The K most recent screenshots kept in the context (at most maxTurns matter).",
    )
    max_staleness: int = Field(
        default=0,
        ge=0,
        le=8,
        description="Updates the behaviour policy may lag the learner: 0 plays each step's"
        " episodes after the previous update (synchronous); 1 plays step k+1 while step k"
        " learns.",
    )
    system_prompt: str | None = Field(
        default=None,
        min_length=1,
        max_length=16384,
        description="The agent's system prompt; {width} and {height} become the screenshot's"
        " size. Default: the built-in pyautogui prompt.",
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


class TrainerResources(ApiModel):
    limits: dict[str, Quantity] | None = Field(
        default=None, max_length=16, description="Most of each resource a trainer pod may use."
    )
    requests: dict[str, Quantity] | None = Field(
        default=None,
        max_length=16,
        description="Resources reserved for each trainer pod; never above the limit.",
    )


class TrainerConfig(ApiModel):
    nodes: int = Field(default=1, ge=1, le=MAX_NODES, description="Trainer pods (torchrun nodes).")
    gpus_per_node: int = Field(
        default=0,
        ge=0,
        le=MAX_GPUS_PER_NODE,
        description="GPUs per trainer pod; 0 trains on the CPU.",
    )
    image: Image | None = Field(
        default=None,
        description="Trainer image; the operator's default when empty.",
    )
    resources: TrainerResources | None = Field(
        default=None,
        description="Kubernetes ResourceRequirements of the trainer container (GPUs are added"
        " from gpusPerNode).",
    )
    # Unset: the trainer chooses at start-up from the model, the largest sample the rollout
    # settings allow and the GPU's memory, and logs the choice (speedups/choice.py, issue 31).
    gradient_checkpointing: bool | None = Field(
        default=None,
        description="Recompute activations in the backward pass to save memory (true: every"
        " layer; false: none). Unset: as few decoder layers as fit the GPU (every layer on the"
        " CPU).",
    )
    compile: bool | None = Field(
        default=None,
        description="torch.compile each decoder layer and vision block (GPU only; pays after the"
        " first steps' compilation). Unset: on wherever the trainer has a GPU.",
    )
    optimizer_offload: bool | None = Field(
        default=None,
        description="Keep fp32 master weights and AdamW moments in host memory (ZeRO-Offload"
        " style); meant for model.dtype bfloat16. Unset: on with bfloat16 parameters when those"
        " would take more than a quarter of the GPU.",
    )
    # Issue 31 item 4; the trainer's side is kubecua_trainer/placement/. Declared after nodes
    # and gpusPerNode so the validators below see them and name these fields.
    placement: Literal["colocated", "disaggregated"] = Field(
        default="colocated",
        description="colocated: every process generates its share of the episodes and learns;"
        " disaggregated: generatingProcesses processes only generate (embedded engine) and the"
        " others only learn (FSDP2), the weights broadcast to the generators after each step"
        " (needs at least 2 processes, rollout.engine hf, no warmup or evaluation).",
    )
    generating_processes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="placement disaggregated: the processes that generate (the last ones; at"
        " least one must learn). Unset: chosen from the world size.",
    )

    @field_validator("placement")
    @classmethod
    def _disaggregated_needs_two_processes(cls, v: str, info: ValidationInfo) -> str:
        world = info.data.get("nodes", 1) * max(1, info.data.get("gpus_per_node", 0))
        if v == "disaggregated" and world < 2:
            raise ValueError(
                f"disaggregated needs at least 2 processes (one generating, one learning); "
                f"nodes x gpusPerNode gives {world}"
            )
        return v

    @field_validator("generating_processes")
    @classmethod
    def _one_process_learns(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is None:
            return v
        if info.data.get("placement") != "disaggregated":
            raise ValueError("only placement disaggregated has generating processes")
        world = info.data.get("nodes", 1) * max(1, info.data.get("gpus_per_node", 0))
        if v >= world:
            raise ValueError(f"{v} of {world} processes would generate: at least one must learn")
        return v


class CheckpointConfig(ApiModel):
    volume: str | None = Field(
        default=None,
        max_length=253,
        description="PVC mounted at path; without it checkpoints live in an emptyDir and die with"
        " the pod. Required for engine sglang without sglangUrls: the operator's sglang servers"
        " mount it read-only at the same path to load each step's weights (a ReadWriteOnce PVC"
        " then needs those pods on trainer pod 0's node).",
    )
    path: str = Field(
        default=CHECKPOINT_PATH,
        max_length=4096,
        pattern=MOUNT_PATH_PATTERN,
        description="Checkpoint root directory (absolute; the trainer's and sglang's mount path).",
    )
    every_steps: int = Field(
        default=10, ge=1, le=MAX_STEPS, description="Save every N steps (and at the end)."
    )
    keep: int = Field(default=3, ge=1, le=1000, description="Checkpoints kept.")


class MetricsConfig(ApiModel):
    port: int = Field(
        default=METRICS_PORT,
        ge=0,
        le=65535,
        description="Metrics port; 0 disables metrics and the PodMonitor.",
    )


class KueueConfig(ApiModel):
    queue_name: str | None = Field(
        default=None,
        min_length=1,  # "" would label the Job with no queue: Kueue would silently not manage it
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="Sets the kueue.x-k8s.io/queue-name label on the trainer Job. Immutable"
        " (neither changed nor removed).",
    )


class EvaluationConfig(ApiModel):
    tasks: TasksConfig = Field(
        description="Held-out OSWorld tasks, never trained on: a run with steps > 0 refuses a"
        " task id that is also in spec.tasks. Set exactly one of configMapRef and path."
    )
    every_steps: int = Field(
        default=0,
        ge=0,
        le=MAX_STEPS,
        description="Evaluate every N steps; 0 evaluates only before the first step and after"
        " the last.",
    )
    at_start: bool = Field(default=True, description="Evaluate before the first step (step 0).")
    before_warmup: bool = Field(
        default=False,
        description="Also evaluate the starting model before spec.warmup, as every evaluation"
        " of the run does, into untrained/evaluations/step-0000/ under the run's output"
        " directory (the layout of `kubecua_trainer evaluate --output-dir <out>/untrained`; the"
        " report shows it as its own point); once per run, and not in the status or metrics."
        " Needs spec.warmup: without one, step 0 is the starting model already.",
    )
    episodes_per_task: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Episodes per task, giving the success rate and pass@k for k = 1 and k ="
        " episodesPerTask.",
    )
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature; 0 is greedy.")
    max_turns: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Agent turns per episode; algorithm.maxTurns when unset.",
    )


class WarmupConfig(ApiModel):
    demonstrations: str = Field(
        min_length=1,
        max_length=4096,
        description="A JSONL file, or a directory of them, in the trajectory format the trainer"
        " writes for its own episodes (docs/trajectories.md); on the model or checkpoint volume"
        " in a cluster.",
    )
    epochs: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="Passes over the demonstrations (with stopWhen: the most it runs).",
    )
    batch_size: int = Field(
        default=8, ge=1, le=4096, description="Demonstrations per optimizer step."
    )
    learning_rate: float = Field(
        default=1e-5, gt=0, description="AdamW learning rate of the warm-up."
    )
    schedule: Literal["constant", "cosine"] = Field(
        default="constant",
        description="The learning rate over the warm-up's planned steps (epochs x batches), after"
        " rampFraction's rise: constant, or cosine (a half cosine down to floorFraction x"
        " learningRate, kept for any extension). kubecua_trainer/warmup/schedule.py.",
    )
    ramp_fraction: float = Field(
        default=0.0,
        ge=0.0,
        le=0.5,
        description="The share of planned steps over which the rate rises linearly from 0 to"
        " learningRate, either schedule (0: none).",
    )
    floor_fraction: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="cosine: the rate at the last planned step, as a share of learningRate.",
    )
    successes_only: bool = Field(
        default=True,
        description="Use only demonstrations whose outcome is success (reward 1).",
    )
    stop_when: WarmupStopConfig | None = Field(
        default=None,
        description="End the warm-up by measurement on training tasks (greedy pass@1 in a"
        " window, pass@k above a floor), never on held-out ones; absent: run every epoch.",
    )
    goal: WarmupGoalConfig = defaulted(
        WarmupGoalConfig,
        "Whether the warm-up took, measured after its last epoch on its own demonstrations"
        " (no desktop needed), and what to do below it (kubecua_api/warmup.py).",
    )


class TrainingRunSpec(ApiModel):
    model: ModelConfig = Field(description="The policy to train.")
    sandboxes: SandboxesConfig = Field(
        description="Where desktops come from. Set exactly one of poolRef, urls and local."
    )
    tasks: TrainingTasksConfig = Field(
        description="OSWorld tasks to train on. Set exactly one of configMapRef and path."
    )
    algorithm: AlgorithmConfig = defaulted(AlgorithmConfig, "GRPO hyper-parameters.")
    rollout: RolloutConfig = defaulted(RolloutConfig, "How episodes are generated.")
    trainer: TrainerConfig = defaulted(
        TrainerConfig,
        "The learner pods (an Indexed Job, one pod per node, torchrun inside).",
    )
    checkpoint: CheckpointConfig = defaulted(
        CheckpointConfig,
        "Where and how often checkpoints are written; a run resumes from the latest.",
    )
    reward: RewardConfig = defaulted(
        RewardConfig,
        "The shaped reward GRPO trains on: weighted terms (the evaluator's score, a task's"
        " partial credit, a format term) minus penalties. Success, evaluations and status use the"
        " evaluator's score alone.",
    )
    evaluation: EvaluationConfig | None = Field(
        default=None,
        description="Held-out evaluation: before the first step, every everySteps steps and after"
        " the last. Its episodes follow the training episodes' lease and failure rules: an"
        " infrastructure failure is excluded and counted, never scored 0.",
    )
    warmup: WarmupConfig | None = Field(
        default=None,
        description="Supervised warm-up on demonstrations before the first GRPO step; the loss"
        " counts reply tokens only.",
    )
    steps: int = Field(
        ge=0,
        le=MAX_STEPS,
        description="GRPO steps to run; 0 evaluates the model only (needs spec.evaluation).",
    )
    suspend: bool = Field(
        default=False,
        description="true removes the trainer pods (they checkpoint on SIGTERM); false resumes"
        " from the latest checkpoint.",
    )
    backoff_limit: int = Field(
        default=3,
        ge=0,
        le=1000,
        description="Trainer pod failures tolerated before the run is Failed.",
    )
    metrics: MetricsConfig = defaulted(MetricsConfig, "Prometheus metrics of the trainer.")
    kueue: KueueConfig = defaulted(KueueConfig, "Kueue admission.")
    # 32 bits: a seed every library the trainer seeds accepts (numpy's legacy range included).
    seed: int = Field(
        default=0,
        ge=0,
        le=2**32 - 1,
        description="Seed for sampling and task order. With the embedded (hf) engine each sampled"
        " turn draws from (seed, task, episode, turn) alone, so a run's episodes repeat whatever"
        " else shares their batch; sglang samples from its own generator.",
    )
    cost: CostConfig = defaulted(
        CostConfig,
        "Prices for the cost figures in status.cost (none by default: seconds only).",
    )
    output_dir: str | None = Field(
        default=None,
        max_length=4096,
        description="Local mode only: where reports, episodes and checkpoints go.",
    )

    @model_validator(mode="after")
    def _before_warmup_needs_warmup(self) -> TrainingRunSpec:
        # A ValidationError with the field's own location, not a ValueError: a model rule's
        # error would name spec alone, and the CRD's CEL rule names spec.evaluation.beforeWarmup.
        if self.evaluation is not None and self.evaluation.before_warmup and self.warmup is None:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError(
                            "before_warmup",
                            "evaluates the starting model before the warm-up: it needs"
                            " spec.warmup (without one, step 0's evaluation is of the starting"
                            " model already; leave beforeWarmup false)",
                        ),
                        loc=("evaluation", "beforeWarmup"),  # as the aliases name it
                        input=True,
                    )
                ],
            )
        return self

    @field_validator("steps")
    @classmethod
    def _evaluation_only_needs_evaluation(cls, steps: int, info: ValidationInfo) -> int:
        # A field validator (not a model one) so the error names spec.steps; evaluation is
        # declared before steps, so it is already in info.data when it was valid.
        if steps == 0 and info.data.get("evaluation") is None:
            raise ValueError("steps 0 evaluates the model only: set spec.evaluation")
        return steps


class TrainingRun(BaseModel):
    """The whole manifest; metadata is kept as a plain dict (name, namespace), status ignored."""

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


# Status: the trainer patches the progress fields, the operator phase and conditions.


class CheckpointStatus(ApiModel):
    step: int | None = Field(default=None, description="Step of the checkpoint.")
    path: str | None = Field(default=None, description="Directory of the checkpoint.")
    time: DateTime | None = Field(default=None, description="When it was written.")


class PassAtK(ApiModel):
    k: int | None = Field(default=None, description="Attempts per task.")
    value: float | None = Field(
        default=None, description="Chance that at least one of k attempts succeeds."
    )


class TaskEvaluation(ApiModel):
    id: str | None = Field(default=None, description="Task id.")
    success_rate: float | None = Field(
        default=None, description="Successes over scored episodes of this task."
    )
    episodes: int | None = Field(default=None, description="Scored episodes of this task.")


class EvaluationStatus(ApiModel):
    step: int | None = Field(
        default=None, description="The step whose policy was evaluated (0 is before training)."
    )
    success_rate: float | None = Field(default=None, description="Successes over scored episodes.")
    mean_score: float | None = Field(default=None, description="Mean score of the scored episodes.")
    episodes: int | None = Field(default=None, description="Scored episodes.")
    excluded: int | None = Field(
        default=None,
        description="Episodes excluded for an infrastructure failure (never scored 0).",
    )
    pass_at_k: PassAtK | None = Field(
        default=None,
        description="pass@k at k = episodesPerTask: the unbiased estimate, averaged over tasks.",
    )
    time: DateTime | None = Field(default=None, description="When the evaluation finished.")
    tasks: list[TaskEvaluation] | None = Field(
        default=None,
        max_length=100,
        description="Success per held-out task, sorted by id (the first 100).",
    )
    tasks_truncated: bool | None = Field(
        default=None,
        description="True when there are more than 100 tasks and tasks lists the first 100.",
    )


class TrainingRunStatus(ApiModel):
    phase: Literal["Pending", "Running", "Suspended", "Succeeded", "Failed"] | None = Field(
        default=None, description="Lifecycle phase."
    )
    step: int | None = Field(default=None, description="Last finished GRPO step (trainer).")
    total_steps: int | None = Field(default=None, description="Steps the run will take (trainer).")
    mean_reward: float | None = Field(
        default=None, description="Mean episode reward of the last step (trainer)."
    )
    success_rate: float | None = Field(
        default=None,
        description="Fraction of episodes with reward 1 in the last step (trainer).",
    )
    tokens_per_second: float | None = Field(
        default=None, description="Generated tokens per second in the last step (trainer)."
    )
    last_checkpoint: CheckpointStatus | None = Field(
        default=None, description="The newest checkpoint (trainer)."
    )
    start_time: DateTime | None = Field(default=None, description="When the trainer first started.")
    completion_time: DateTime | None = Field(
        default=None, description="When the run succeeded or failed."
    )
    restarts: int | None = Field(
        default=None,
        description="Trainer pod failures so far (counted against backoffLimit).",
    )
    ready_sandboxes: int | None = Field(
        default=None, description="Ready sandboxes of the bound pool at the last reconcile."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation this status describes."
    )
    evaluation: EvaluationStatus | None = Field(
        default=None, description="The last held-out evaluation (trainer)."
    )
    warmup: WarmupStatus | None = Field(
        default=None,
        description="The warm-up's outcome against spec.warmup.goal (trainer); the operator's"
        " WarmupBelowGoal condition follows it.",
    )
    cost: CostStatus | None = Field(
        default=None,
        description="Sandbox-seconds and GPU-seconds the run used, per trajectory and per"
        " successful trajectory; money at spec.cost's prices (trainer).",
    )
    live_view: LiveViewStatus | None = Field(
        default=None,
        description="Where to watch the sandbox of the latest episode (a pool's sandbox only;"
        " trainer).",
    )
    curriculum: CurriculumStatus | None = Field(
        default=None,
        description="How the training tasks' running pass rates are spread"
        " (spec.tasks.curriculum; trainer).",
    )
    verified_tasks: VerifiedTasksStatus | None = Field(
        default=None,
        description="What spec.tasks.verified left out of training, by reason (trainer).",
    )
    conditions: list[Condition] | None = conditions(
        "SandboxesReady, TrainerReady, Progressing, Failed, with spec.sandboxes.capacity"
        " DemandMet, and once the warm-up is measured WarmupBelowGoal."
    )
