{{/* Labels on every object: the selector label, then the user's. */}}
{{- define "metahooks.labels" -}}
app.kubernetes.io/name: metahooks
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

{{/* A hook's webhook: the Service in the release's namespace, at this path. */}}
{{- define "metahooks.webhook" -}}
version: v2
webhook:
  service:
    name: metahooks
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
{{- end }}
