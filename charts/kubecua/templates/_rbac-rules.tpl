{{/* What the operator does in a watched namespace, and nothing more (kubecua_operator/k8s.py
lists the kinds). It can grant a trainer's Role only because it holds every verb in it
itself (RBAC escalation check), so no `escalate` or `bind`. */}}
{{- define "kubecua.operatorRules" -}}
# Its own resources: watched by kopf, which patches annotations/finalizers and status.
- apiGroups: [kubecua.dev]
  resources: [sandboxpools, trainingruns]
  verbs: [get, list, watch, patch]
- apiGroups: [kubecua.dev]
  resources: [sandboxpools/status, trainingruns/status]
  verbs: [get, patch]
# Sandboxes: pods (pod backend, episode servers of VMs), one Service each, external EndpointSlices.
- apiGroups: [""]
  resources: [pods, services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch, create, patch, delete]
# Token Secrets, run ConfigMaps, trainer ServiceAccounts; never list or watch Secrets.
- apiGroups: [""]
  resources: [secrets, configmaps, serviceaccounts]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
# A trainer's Role and RoleBinding (discover sandboxes, read its token, patch its status).
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, create, patch, delete]
- apiGroups: [kubevirt.io]
  resources: [virtualmachines]
  verbs: [get, list, create, patch, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, create, patch]
{{- end -}}

{{/* kopf itself, cluster-wide in either scope: it follows CRDs and namespaces appearing. */}}
{{- define "kubecua.frameworkRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end -}}
