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
{{- $config := ternary (.Files.Get "files/agent.yaml") (.Files.Get "files/single-node.yaml") .Values.gateway.enabled }}
{{- if .Values.ebpf.enabled }}
{{- $config = include "opscope.withEbpf" (dict "config" $config "ebpf" .Values.ebpf) }}
{{- end }}
{{- $config }}
{{- end }}

{{/* An agent config with the `ebpf` receiver after the others and in the
`metrics` pipeline: deploy/kubernetes/overlays/ebpf/agent.yaml is
config/daemonset.yaml so edited (a test keeps the two in step). */}}
{{- define "opscope.withEbpf" -}}
{{- $pipeline := "    metrics:\n      receivers: [otlp]\n" }}
{{- if not (and (contains "\n\nprocessors:\n" .config) (contains $pipeline .config)) }}
{{- fail "ebpf.enabled: the agent config has no `processors:` after its receivers or no `metrics` pipeline with receivers [otlp] to add the ebpf receiver to" }}
{{- end }}
{{- $receiver := include "opscope.ebpfReceiver" .ebpf }}
{{- .config | replace "\n\nprocessors:\n" (printf "%s\nprocessors:\n" $receiver) | replace $pipeline "    metrics:\n      receivers: [otlp, ebpf]\n" }}
{{- end }}

{{/* The receiver's lines, after the newline that opens the define. */}}
{{- define "opscope.ebpfReceiver" }}
  # The kernel probe (deploy/kubernetes/overlays/ebpf): each operator pod's
  # connections and send calls to the API server, its forks and the ENOSPC its
  # writes get, counted in the kernel.
  ebpf:
    # As the operators' sockets see the API server: the Service address pods are
    # given; where the CNI rewrites it in the socket (Cilium's kube-proxy
    # replacement), the API server's endpoints instead (docs/deploy.md).
    api_servers: {{ include "opscope.flowList" .apiServers }}
    namespaces: {{ include "opscope.flowList" .namespaces }}
    interval: {{ .interval }}
    # The host's cgroups, mounted beside the container's own.
    cgroup_root: /host/sys/fs/cgroup
    pod_logs: /var/log/pods
{{ end }}

{{/* A list of strings as a YAML flow sequence of JSON strings: ["a", "b"]. */}}
{{- define "opscope.flowList" -}}
[{{ range $i, $item := . }}{{ if $i }}, {{ end }}{{ toJson (toString $item) }}{{ end }}]
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
