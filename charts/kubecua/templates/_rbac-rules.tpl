{{/* What the operator does in a watched namespace, and nothing more: every verb below is one the
code issues (operator/kubecua_operator/k8s.py lists the kinds; docs/reliability.md says why each
verb is granted, and operator/tests/test_security.py fails on any other). No Secret read
of any kind: pool tokens are derived from the operator's own key and only ever created. A
trainer's Role can be granted only because the operator holds every verb in it itself (RBAC
escalation check), so no `escalate` or `bind`. */}}
{{- define "kubecua.operatorRules" -}}
# Its own resources: kopf lists and watches them, and patches only to take off the finalizer an
# operator before 0.2 put on them (this one adds none); get is held only to grant it: a trainer
# its run, a TaskVerification's verifier its pool (for the pool's uid).
- apiGroups: [kubecua.dev]
  resources: [sandboxpools]
  verbs: [get, list, watch, patch]
- apiGroups: [kubecua.dev]
  resources: [trainingruns]
  verbs: [get, list, watch, patch]
- apiGroups: [kubecua.dev]
  resources: [taskverifications]
  verbs: [list, watch]
- apiGroups: [kubecua.dev]
  resources: [sandboxpools/status, taskverifications/status]
  verbs: [patch]
- apiGroups: [kubecua.dev]
  resources: [trainingruns/status]
  verbs: [get, patch]
# Sandboxes: pods, one Service each (and run Services), external EndpointSlices. get and patch:
# a sandbox whose labels were edited away is read and relabelled (adopted), never recreated.
- apiGroups: [""]
  resources: [pods, services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch, create, patch, delete]
# Pool token Secrets: create only (never read, list, watch, patch or delete).
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
# The children kept equal to the spec by server-side apply: a PATCH, and create when it makes one;
# get, to read each first and write none that is not its own (a namesake someone else made).
- apiGroups: [""]
  resources: [configmaps, serviceaccounts]
  verbs: [get, create, patch]
# Events: its own (create), and a trainer Job's FailedCreate (list: why its pods are refused).
- apiGroups: [""]
  resources: [events]
  verbs: [list, create]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch]
# A trainer's or a verifier's Role and RoleBinding (discover sandboxes, read its config, patch
# its status or write its manifest ConfigMap).
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, create, patch]
- apiGroups: [kubevirt.io]
  resources: [virtualmachines]
  verbs: [get, list, create, patch, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, create, patch]
# Kueue's Workload of a queued run's Job: list (by the Job's uid label) to show its admission in
# the run's Admitted condition, and patch spec.active, how spec.suspend pauses a queued run.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [list, patch]
{{- end -}}

{{/* kopf itself, cluster-wide in either scope: it follows CRDs appearing, and lists the
namespaces it is given with --namespace (scope "namespace"; kept in both scopes so the account
works however the operator is started: namespace names are no secret). */}}
{{- define "kubecua.frameworkRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end -}}
