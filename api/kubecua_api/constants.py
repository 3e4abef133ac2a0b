"""Names of the kubecua.dev API and the defaults more than one component needs.

The operator, the trainer and the models import these; none of them restates a value.
"""

GROUP = "kubecua.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

TRAININGRUN_KIND = "TrainingRun"
TRAININGRUN_PLURAL = "trainingruns"
SANDBOXPOOL_KIND = "SandboxPool"
SANDBOXPOOL_PLURAL = "sandboxpools"

# Labels and annotations other components select or read.
POOL_LABEL = f"{GROUP}/pool"  # every sandbox object; trainers discover EndpointSlices by it
SANDBOX_LABEL = f"{GROUP}/sandbox"
RUN_LABEL = f"{GROUP}/trainingrun"
ROLE_LABEL = f"{GROUP}/role"  # part of a sandbox: episode-server, vm
URL_ANNOTATION = f"{GROUP}/url"  # an external sandbox's URL on its EndpointSlice
# The operator's mark on what it made; the chart's owner-label admission policy lets nobody else
# set it, so a trainer trusts only sandbox Services that carry it (sources/kube.py).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
OPERATOR_MANAGER = "kubecua-operator"
POOL_UID_ENV = "KUBECUA_POOL_UID"  # the trainer's pool, by uid, as the operator bound it
TOKEN_SECRET_TYPE = f"{GROUP}/sandbox-token"  # never kubernetes.io/service-account-token
TOKEN_KEY = "token"  # the key of a sandbox token Secret

# Defaults of TrainingRun spec fields, given by its model; components read the parsed spec.
METRICS_PORT = 9400  # TrainingRun spec.metrics.port; 0 disables metrics
CHECKPOINT_PATH = "/ckpt"  # TrainingRun spec.checkpoint.path
