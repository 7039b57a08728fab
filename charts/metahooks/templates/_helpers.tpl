{{/* The chart's name, or nameOverride. */}}
{{- define "metahooks.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* The name of the release's namespaced objects (Deployment, Service, ServiceAccount,
...): fullnameOverride, else the release name when it already holds the chart's name (so
`helm install metahooks` makes `metahooks`), else release-name. */}}
{{- define "metahooks.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "metahooks.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* What selects the server's pods. */}}
{{- define "metahooks.selectorLabels" -}}
app.kubernetes.io/name: {{ include "metahooks.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The standard labels on every object, then the user's. */}}
{{- define "metahooks.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "metahooks.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The image: by digest when one is given, else by tag (the chart's appVersion by default). */}}
{{- define "metahooks.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* A hook's webhook: the release's Service, at this path; with the credentials of
hookAuth when it is on. */}}
{{- define "metahooks.webhook" -}}
version: v2
webhook:
  service:
    name: {{ .service }}
    namespace: {{ .namespace }}
    port: 80
    protocol: http
  path: {{ .path }}
  timeout: 10s
{{- if .etag }}
  # Both fields or neither: Metacontroller dereferences cacheCleanupSeconds
  # whenever cacheTimeoutSeconds is set.
  etag:
    enabled: true
    cacheTimeoutSeconds: 600
    cacheCleanupSeconds: 60
{{- end }}
{{- with .auth }}
  authorization:
    type: Bearer
    secretRef:
      name: {{ .existingSecret }}
      namespace: {{ $.namespace }}
      key: {{ .key }}
{{- end }}
{{- end }}

{{/* The hookAuth values when hook authentication is on (else nothing), after checking
that they name a Secret. */}}
{{- define "metahooks.hookAuth" -}}
{{- if .Values.hookAuth.enabled -}}
{{- if not .Values.hookAuth.existingSecret -}}
{{- fail "hookAuth.enabled needs hookAuth.existingSecret: the Secret (key hookAuth.key, default token) that Metacontroller sends and the server checks" -}}
{{- end -}}
{{- toYaml .Values.hookAuth -}}
{{- end -}}
{{- end }}
