"""Labels, selectors and child names: every name the operator gives is derived here.

Names are deterministic so that a create after a crash or a restart hits 409 instead of making a
duplicate: sandbox `<pool>-<index>`, token Secret `<pool>-sandbox-token`, Job `<run>-trainer`.
"""

from __future__ import annotations

# The API's names (group, version, the labels and Secret type the trainer and the chart also
# use) come from the API package; the `X as X` ones are re-exported for the operator's modules.
from kubecua_api.constants import (
    GROUP,
    MANAGED_BY_LABEL,
    OPERATOR_MANAGER,
    POOL_LABEL,
    RUN_LABEL,
    SANDBOX_LABEL,
)
from kubecua_api.constants import ROLE_LABEL as ROLE_LABEL
from kubecua_api.constants import TOKEN_KEY as TOKEN_KEY
from kubecua_api.constants import TOKEN_SECRET_TYPE as TOKEN_SECRET_TYPE
from kubecua_api.constants import VERSION as VERSION

COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY = {MANAGED_BY_LABEL: OPERATOR_MANAGER}
OPERATOR_POD_LABEL = {"app.kubernetes.io/name": "kubecua-operator"}
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# On a trainer's pods: the uid of their run, whose controller reference the admission guard
# requires on the ServiceAccount they run as (charts/kubecua/templates/admissionpolicies.yaml).
RUN_UID_ANNOTATION = f"{GROUP}/trainingrun-uid"
# A TaskVerification's children carry its name; its verifier pods its uid, as a trainer's do.
VERIFICATION_LABEL = f"{GROUP}/taskverification"
VERIFICATION_UID_ANNOTATION = f"{GROUP}/taskverification-uid"
TOKEN_MOUNT = "/var/run/kubecua/sandbox-token"
MIN_TOKEN_BYTES = 16
# Label domains the operator owns or that select traffic and workloads: a user's value for any
# key in them (e.g. kubecua.dev/client-of-<pool>) is never copied onto a child.
RESERVED_LABEL_DOMAINS = ("kubecua.dev", "kubernetes.io", "k8s.io", "x-k8s.io")

PORTS = {"episodes": 8000, "desktop": 5000, "cdp": 9222, "vlc": 8080}


def client_label(pool: str) -> str:
    """The label the pool's NetworkPolicy admits: `kubecua.dev/client-of-<pool>=true`."""
    return f"{GROUP}/client-of-{pool}"


def reserved_label(key: str) -> bool:
    """Whether a label key is the operator's or Kubernetes': never taken from a user's object.

    >>> [reserved_label(k) for k in ("kubecua.dev/client-of-x", "app.kubernetes.io/name", "team")]
    [True, True, False]
    >>> reserved_label("kueue.x-k8s.io/queue-name"), reserved_label("evil.kubecua.dev/x")
    (True, True)
    """
    domain = key.partition("/")[0] if "/" in key else ""
    return any(domain == d or domain.endswith("." + d) for d in RESERVED_LABEL_DOMAINS)


def user_labels(labels: dict[str, str] | None) -> dict[str, str]:
    """A user's labels minus reserved keys: what may be copied from a pool or run to children."""
    return {k: v for k, v in (labels or {}).items() if not reserved_label(k)}


def pool_labels(pool: str) -> dict[str, str]:
    return {POOL_LABEL: pool, **MANAGED_BY}


def sandbox_labels(pool: str, sandbox: str) -> dict[str, str]:
    return {POOL_LABEL: pool, SANDBOX_LABEL: sandbox, COMPONENT_LABEL: "sandbox", **MANAGED_BY}


def pool_selector(pool: str) -> str:
    """The scale subresource's selector; `kubectl get pods -l` with it lists the sandboxes."""
    return f"{POOL_LABEL}={pool},{COMPONENT_LABEL}=sandbox"


def sandbox_name(pool: str, index: int) -> str:
    """`sandbox_name("ubuntu", 3)` is `ubuntu-3`; indexes are reused after a sandbox is gone."""
    return f"{pool}-{index}"


def sandbox_index(pool: str, name: str) -> int | None:
    """Inverse of sandbox_name: `sandbox_index("ubuntu", "ubuntu-3")` is 3; others give None."""
    prefix = f"{pool}-"
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def token_secret(pool: str) -> str:
    """The token Secret of an external pool, made by its owner beforehand (the operator reads
    nothing from it)."""
    return f"{pool}-sandbox-token"


def own_token_secret(pool: str, uid: str) -> str:
    """The token Secret the operator makes for a pod or KubeVirt pool. Its name carries the pool's
    uid, so no Secret can exist under it before the pool does: the operator never mounts a
    namesake someone else made (it may not read Secrets to tell them apart)."""
    return f"{pool}-sandbox-token-{uid.replace('-', '')[:10]}"


def run_network_policy(run: str) -> str:
    return f"{run}-run"


def network_policy(pool: str) -> str:
    return f"{pool}-sandboxes"


def run_labels(run: str, component: str) -> dict[str, str]:
    return {RUN_LABEL: run, COMPONENT_LABEL: component, **MANAGED_BY}


def run_child(run: str, suffix: str) -> str:
    """`run_child("qwen", "trainer")` is `qwen-trainer` (Job, headless Service, SA, Role)."""
    return f"{run}-{suffix}"


def verification_labels(name: str, component: str) -> dict[str, str]:
    return {VERIFICATION_LABEL: name, COMPONENT_LABEL: component, **MANAGED_BY}
