"""SandboxPool (kubecua.dev/v1alpha1): N desktops (pods, KubeVirt VMs or external machines), each
with an episode server, discoverable by label.

The CRD's schema is generated from these models (kubecua_api.crdgen); its CEL rules (immutable
backend, one backend's settings only, replicas within maxReplicas, no recycling reset on an
external pool) live in the CRD template.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, WithJsonSchema

from kubecua_api.common import (
    LABEL_VALUE_PATTERN,
    ApiModel,
    Condition,
    Image,
    Quantity,
    conditions,
    defaulted,
)
from kubecua_api.liveview import LiveView

# An external sandbox: http://host[:port][/], the port 1-65535. The host goes into an
# EndpointSlice as an IPv4 address or an FQDN: a name of two labels or more, in lower case (the
# slice refuses `desk-1` and `localhost`: the spec fuzz found both, issue 42), at most 253
# characters. A loopback IP becomes a placeholder FQDN (sandboxpool/backends/external.py).
ENDPOINT_PATTERN = (
    r"^http://([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+)"
    r"(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?/?$"
)
# A named port as a NetworkPolicy takes it (an IANA service name): words of [a-z0-9] joined by
# single hyphens, one letter at least ("0" and "a--b" are refused: the spec fuzz found "0").
PORT_NAME_PATTERN = r"^([a-z0-9]+-)*[a-z0-9]*[a-z][a-z0-9]*(-[a-z0-9]+)*$"
# A label key as the Pod API checks it: [DNS subdomain/]name, the name at most 63 characters.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
MEMORY_PATTERN = r"^[1-9][0-9]*(Mi|Gi)$"  # a guest needs some memory: 0Mi never boots
Endpoint = Annotated[str, StringConstraints(max_length=267, pattern=ENDPOINT_PATTERN)]
Cidr = Annotated[str, StringConstraints(max_length=64)]
LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]
# A NetworkPolicy port: a number or a named port.
PortOrName = Annotated[
    Annotated[int, Field(ge=1, le=65535)]
    | Annotated[str, StringConstraints(max_length=15, pattern=PORT_NAME_PATTERN)],
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "minimum": 1,
            "maximum": 65535,
            "maxLength": 15,
            "pattern": PORT_NAME_PATTERN,
        }
    ),
]


# A toleration as the Pod API has it (its fields bounded; anything else the Pod API refuses).
TOLERATION_SCHEMA: Any = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "maxProperties": 5,
    "properties": {
        "key": {"type": "string", "maxLength": 317, "pattern": LABEL_KEY_PATTERN},
        "operator": {"type": "string", "enum": ["Exists", "Equal"]},
        "value": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN},
        "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
        # A year: a NoExecute toleration longer than that is "forever" (omit it).
        "tolerationSeconds": {"type": "integer", "minimum": 0, "maximum": 31536000},
    },
}


class Screen(ApiModel):
    width: int = Field(default=1920, ge=640, le=7680, description="Width in pixels.")
    height: int = Field(default=1080, ge=480, le=4320, description="Height in pixels.")


class SandboxResources(ApiModel):
    limits: dict[str, Quantity] | None = Field(
        default=None, max_length=16, description="Most of each resource a sandbox may use."
    )
    requests: dict[str, Quantity] | None = Field(
        default=None,
        max_length=16,
        description="Resources reserved for each sandbox; never above the limit.",
    )


class PodDesktop(ApiModel):
    image: Image | None = Field(
        default=None,
        description="Sandbox image (episode server and desktop in one pod); the operator's"
        " default when empty.",
    )
    resources: SandboxResources | None = Field(
        default=None,
        description="Kubernetes ResourceRequirements of the sandbox container (limits and"
        " requests, as quantities).",
    )
    # Bounded: each sandbox pod gets a copy (an unbounded spec was admitted at 913 KB).
    node_selector: dict[str, LabelValue] | None = Field(
        default=None, max_length=32, description="Node labels the sandbox pods must match."
    )
    tolerations: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=32,
        description="Kubernetes tolerations of the sandbox pods.",
        json_schema_extra={"items": TOLERATION_SCHEMA},
    )


class VmDesktop(ApiModel):
    volume: str = Field(
        max_length=253,
        description="PersistentVolumeClaim holding the base disk, mounted read-only into every"
        " sandbox of the pool: hack/build-vm-disk.sh's directory (disk.qcow2, vmlinuz,"
        " initrd.img), or a disk that boots itself (set disk).",
    )
    disk: str | None = Field(
        default=None,
        max_length=253,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="A qcow2 file in the volume that boots through its own bootloader, e.g."
        " OSWorld's Ubuntu.qcow2. Empty: the volume holds our disk, booted with its kernel"
        " (direct kernel boot).",
    )
    cpu: int = Field(default=2, ge=1, le=64, description="Virtual CPUs.")
    memory: str = Field(
        default="2Gi",
        max_length=16,
        pattern=MEMORY_PATTERN,
        description="Guest memory, e.g. 2Gi (OSWorld's image expects 4Gi). The pod's memory limit"
        " must cover it plus qemu's own.",
    )
    kvm: bool = Field(
        default=False,
        description="Request /dev/kvm as the devices.kubevirt.io/kvm resource (KubeVirt's device"
        " plugin advertises it). Without it the VM runs under qemu's emulator, unprivileged and"
        " several times slower.",
    )


class KubevirtDesktop(ApiModel):
    container_disk: Image | None = Field(
        default=None,
        description="Image holding the desktop disk (e.g. OSWorld's Ubuntu image); ephemeral, so a"
        " restart resets it.",
    )
    data_volume: str | None = Field(
        default=None,
        max_length=253,
        description="Name of a DataVolume to clone per sandbox as the boot disk.",
    )
    cpu: int = Field(default=4, ge=1, le=128, description="Virtual CPUs.")
    memory: str = Field(
        default="8Gi", max_length=16, pattern=MEMORY_PATTERN, description="Guest memory, e.g. 8Gi."
    )
    desktop_port: int = Field(
        default=5000,
        ge=1,
        le=65535,
        description="Port of the OSWorld desktop server inside the guest.",
    )
    episode_server_image: Image | None = Field(
        default=None,
        description="Image of the episode-server pod pointed at the VM; the operator's sandbox"
        " image when empty.",
    )
    kernel_boot: bool = Field(
        default=False,
        description="The containerDisk is kubecua's VM disk (make vm-containerdisk): boot its"
        " /disk/disk.qcow2 with the kernel and initramfs under its /boot (the disk has no"
        " bootloader). False for disks that boot themselves, such as OSWorld's Ubuntu image.",
    )


class ExternalDesktop(ApiModel):
    endpoints: list[Endpoint] = Field(
        min_length=1,
        max_length=10000,
        description="Episode-server URLs (http://host:port); the first `replicas` are used. Each"
        " at most once (two sandboxes on one desktop would share its episodes).",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class Desktop(ApiModel):
    os: str = Field(
        default="Ubuntu",
        max_length=64,
        description="Guest operating system (what desktop-env's controllers expect): Ubuntu."
        " Windows is refused: the episode server drives Linux desktops only.",
    )
    screen: Screen = defaulted(Screen, "Screen size of the desktop.")
    pod: PodDesktop | None = Field(default=None, description="Pod backend settings.")
    vm: VmDesktop | None = Field(
        default=None,
        description="Pod backend: each sandbox pod boots a VM disk with qemu (KVM with kvm, else"
        " qemu's emulator) on a copy-on-write overlay of a read-only base, and restores its"
        " memory snapshot between episodes (docs/vm-desktops.md). Needs desktop.pod.image with"
        " qemu.",
    )
    kubevirt: KubevirtDesktop | None = Field(
        default=None,
        description="KubeVirt backend settings. Set exactly one of containerDisk and dataVolume.",
    )
    external: ExternalDesktop | None = Field(default=None, description="External backend settings.")


class Reset(ApiModel):
    strategy: Literal["inPlace", "recreate"] = Field(
        default="inPlace",
        description="inPlace: the episode server resets the desktop; recreate: the operator"
        " replaces the sandbox after each episode (not on an external pool: inPlace only).",
    )
    verify: bool = Field(
        default=True,
        description="The episode server checks the desktop is clean before it reports ready again.",
    )
    max_episodes_per_sandbox: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Replace a sandbox once it has served this many episodes; 0 never (an"
        " external pool: 0 only).",
    )


class EgressPort(ApiModel):
    protocol: Literal["TCP", "UDP", "SCTP"] = Field(default="TCP", description="Protocol.")
    port: PortOrName | None = Field(
        default=None, description="A port number (1-65535) or a named port."
    )
    end_port: int | None = Field(
        default=None, ge=1, le=65535, description="Last port of a range starting at port."
    )


class IPBlock(ApiModel):
    cidr: Cidr = Field(description="e.g. 10.0.0.0/8.")
    except_: list[Cidr] | None = Field(
        default=None,
        alias="except",
        max_length=8,
        description="CIDRs inside cidr to leave out.",
    )


class LabelSelectorRequirement(ApiModel):
    key: Annotated[str, StringConstraints(max_length=317, pattern=LABEL_KEY_PATTERN)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] | None = Field(default=None, max_length=64)


class LabelSelector(ApiModel):
    match_labels: dict[str, LabelValue] | None = Field(default=None, max_length=32)
    match_expressions: list[LabelSelectorRequirement] | None = Field(default=None, max_length=32)


class EgressPeer(ApiModel):
    ip_block: IPBlock | None = Field(default=None, description="A CIDR, minus exceptions.")
    namespace_selector: LabelSelector | None = Field(
        default=None, description="Namespaces by label."
    )
    pod_selector: LabelSelector | None = Field(default=None, description="Pods by label.")


class EgressRule(ApiModel):
    ports: list[EgressPort] | None = Field(
        default=None, max_length=16, description="Destination ports; none means all."
    )
    to: list[EgressPeer] | None = Field(
        default=None, max_length=16, description="Destinations; none means all."
    )


class SandboxPoolSpec(ApiModel):
    replicas: int = Field(
        default=1,
        ge=0,
        le=10000,
        description="Desired sandboxes (the scale subresource; kubectl scale and HPA set it).",
    )
    backend: Literal["pod", "kubevirt", "external"] = Field(
        default="pod",
        description="pod: our sandbox image in a pod; kubevirt: a VirtualMachine from a desktop"
        " disk; external: sandboxes elsewhere, by URL. Immutable.",
    )
    max_replicas: int | None = Field(
        default=None,
        ge=0,
        le=10000,
        description="Most sandboxes the demand of this pool's active TrainingRuns (their"
        " spec.sandboxes.capacity) may raise it to; spec.replicas stays the baseline and must not"
        " exceed it. Unset: runs never raise the pool past spec.replicas.",
    )
    warm_spares: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="Idle sandboxes kept beyond the leased ones: the pool grows up to replicas +"
        " warmSpares while leases leave fewer than warmSpares idle.",
    )
    desktop: Desktop = defaulted(Desktop, "The desktop each sandbox runs.")
    reset: Reset = defaulted(Reset, "How a sandbox returns to a clean state between episodes.")
    live_view: LiveView = defaulted(
        LiveView,
        "A read-only view of each sandbox's desktop in the browser (noVNC), for `kubectl"
        " port-forward`; off by default.",
    )
    egress: list[EgressRule] | None = Field(
        default=None,
        max_length=32,
        description="NetworkPolicy egress rules of the sandboxes (networking.k8s.io/v1"
        " NetworkPolicyEgressRule); empty denies all egress except a KubeVirt pool's own traffic"
        " (episode server to its VM, and DNS), which is always allowed.",
    )


class RunDemand(ApiModel):
    name: str | None = Field(default=None, description="The TrainingRun.")
    sandboxes: int | None = Field(default=None, description="Its episodes plus spares.")


class Demand(ApiModel):
    sandboxes: int | None = Field(default=None, description="Summed demand of the active runs.")
    replicas: int | None = Field(
        default=None,
        description="Sandboxes the pool keeps (before warmSpares): the larger of spec.replicas"
        " and the demand capped by spec.maxReplicas.",
    )
    runs: list[RunDemand] | None = Field(
        default=None, description="Each active run's demand, by name."
    )


class SandboxPoolStatus(ApiModel):
    replicas: int | None = Field(default=None, description="Existing sandboxes.")
    ready_replicas: int | None = Field(
        default=None,
        description="Sandboxes whose episode server is ready (desktop up, screen not black).",
    )
    leased_replicas: int | None = Field(
        default=None, description="Ready sandboxes running an episode."
    )
    selector: str | None = Field(
        default=None,
        description="Label selector of the sandboxes (scale subresource, HPA).",
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation this status describes."
    )
    demand: Demand | None = Field(
        default=None,
        description="What the pool's active TrainingRuns ask of it (spec.sandboxes.capacity);"
        " absent while none asks.",
    )
    conditions: list[Condition] | None = conditions(
        "Ready, Progressing, Degraded, ScalingLimited, DemandMet and, while the pool is being"
        " deleted, Deleting."
    )
