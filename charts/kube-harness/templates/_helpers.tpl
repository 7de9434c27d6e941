{{/*
Names, labels and the restricted security contexts shared by every template.
*/}}

{{- define "kube-harness.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name; object names append "-operator", "-session-log" and so on, so it
is kept to 40 characters to leave room for those suffixes within 63.
*/}}
{{- define "kube-harness.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kube-harness.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object. Call with (dict "root" $ "component" "operator").
*/}}
{{- define "kube-harness.labels" -}}
helm.sh/chart: {{ include "kube-harness.chart" .root }}
{{ include "kube-harness.selectorLabels" . }}
app.kubernetes.io/part-of: kube-harness
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels (immutable in a Deployment). The name is kube-harness-<component>, so
NetworkPolicies and dashboards can pick each role out. Call with (dict "root" $ "component" "x").
*/}}
{{- define "kube-harness.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "kube-harness-%s" .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/*
Labels of a pod template: the selector labels plus part-of and component. Never
app.kubernetes.io/managed-by: the NetworkPolicies read managed-by=kube-harness-operator as
"a worker pod", so the chart's own pods must not carry that label.
*/}}
{{- define "kube-harness.podLabels" -}}
{{ include "kube-harness.selectorLabels" . }}
app.kubernetes.io/part-of: kube-harness
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kube-harness.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}
{{- end }}

{{- define "kube-harness.operatorServiceAccount" -}}
{{- printf "%s-operator" (include "kube-harness.fullname" .) }}
{{- end }}

{{- define "kube-harness.sessionLogUrl" -}}
{{- printf "http://%s-session-log.%s.svc:8080" (include "kube-harness.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "kube-harness.tierApiUrl" -}}
{{- printf "http://%s-operator.%s.svc:8081" (include "kube-harness.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "kube-harness.ledgerUrl" -}}
{{- printf "http://%s-ledger.%s.svc:8080" (include "kube-harness.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
Pod-level security context meeting the "restricted" Pod Security Standard. fsGroup makes PVCs
writable by the non-root user.
*/}}
{{- define "kube-harness.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
Container-level security context meeting the "restricted" Pod Security Standard.
*/}}
{{- define "kube-harness.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
The bearer token of a service's Secret: generated once (randAlphaNum 40) and kept across
upgrades by reading the live Secret with lookup. `helm template` has no cluster, so it renders a
fresh token each time. Call with (dict "root" $ "name" "<secret name>"); returns base64.
*/}}
{{- define "kube-harness.token" -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .name }}
{{- if and $existing $existing.data (hasKey $existing.data "token") }}
{{- index $existing.data "token" }}
{{- else }}
{{- randAlphaNum 40 | b64enc }}
{{- end }}
{{- end }}
