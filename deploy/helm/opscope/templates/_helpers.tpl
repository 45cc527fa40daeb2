{{/* The labels every object has, as the kustomize trees give them. */}}
{{- define "opscope.partOf" -}}
app.kubernetes.io/part-of: opscope
{{- end }}

{{/* A name with the 10-character content suffix kustomize gives a generated
ConfigMap, so that a changed config rolls the pods that mount it. */}}
{{- define "opscope.hashed" -}}
{{ .name }}-{{ .content | sha256sum | trunc 10 }}
{{- end }}

{{- define "opscope.backendsData" -}}
{{- if .Values.gateway.enabled }}
OPSCOPE_GATEWAY_HOSTNAME: opscope-gateway.{{ .Release.Namespace }}.svc.cluster.local
{{- end }}
CLUSTER_NAME: {{ .Values.backends.clusterName | quote }}
LOKI_ENDPOINT: {{ .Values.backends.lokiEndpoint | quote }}
PROMETHEUS_REMOTE_WRITE_ENDPOINT: {{ .Values.backends.prometheusRemoteWriteEndpoint | quote }}
JAEGER_OTLP_ENDPOINT: {{ .Values.backends.jaegerOtlpEndpoint | quote }}
ALERTMANAGER_ENDPOINT: {{ .Values.backends.alertmanagerEndpoint | quote }}
{{- end }}

{{- define "opscope.agentConfig" -}}
{{- if .Values.gateway.enabled }}{{ .Files.Get "files/agent.yaml" }}{{ else }}{{ .Files.Get "files/single-node.yaml" }}{{ end }}
{{- end }}

{{- define "opscope.configName" -}}
{{ include "opscope.hashed" (dict "name" "opscope-config" "content" (include "opscope.agentConfig" .)) }}
{{- end }}
{{- define "opscope.gatewayConfigName" -}}
{{ include "opscope.hashed" (dict "name" "opscope-gateway-config" "content" (.Files.Get "files/gateway.yaml")) }}
{{- end }}
{{- define "opscope.backendsName" -}}
{{ include "opscope.hashed" (dict "name" "opscope-backends" "content" (include "opscope.backendsData" .)) }}
{{- end }}
