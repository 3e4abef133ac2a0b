{{/* Names and labels shared by every template. */}}

{{- define "kubecua.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The operator's objects: <fullname>-operator (Deployment, Service, ServiceAccount, RBAC). */}}
{{- define "kubecua.operator" -}}
{{- printf "%s-operator" (include "kubecua.fullname" .) -}}
{{- end -}}

{{- define "kubecua.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubecua.operator" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubecua.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: kubecua
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The operator pod's selector; app.kubernetes.io/name matches names.OPERATOR_POD_LABEL. */}}
{{- define "kubecua.selectorLabels" -}}
app.kubernetes.io/name: kubecua-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Namespaces the operator watches in scope "namespace" (default: the release's own). */}}
{{- define "kubecua.watchNamespaces" -}}
{{- if .Values.rbac.watchNamespaces -}}
{{- toJson .Values.rbac.watchNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* Namespace selector for the Prometheus Operator monitors: all, or the watched ones. */}}
{{- define "kubecua.monitorNamespaces" -}}
{{- if eq .Values.rbac.scope "cluster" }}
namespaceSelector:
  any: true
{{- else }}
namespaceSelector:
  matchNames: {{ include "kubecua.watchNamespaces" . }}
{{- end }}
{{- end -}}
