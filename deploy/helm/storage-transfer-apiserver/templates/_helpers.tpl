{{/*
Helm's own labels, on every object's metadata (never on a selector or a pod
template, so that an upgrade never changes what selects what). tests/helm.rs
strips exactly these before comparing the chart with the kustomize base.
*/}}
{{- define "sta.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The server's objects' labels: its name label, as in deploy/, and Helm's. */}}
{{- define "sta.labels" -}}
app.kubernetes.io/name: storage-transfer-apiserver
{{ include "sta.helmLabels" . }}
{{- end }}

{{/* The bundled etcd's objects' labels. */}}
{{- define "sta.etcdLabels" -}}
app.kubernetes.io/name: storage-transfer-etcd
{{ include "sta.helmLabels" . }}
{{- end }}

{{/* The server's image, also named by the fence pod. */}}
{{- define "sta.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Service's DNS name: what the aggregator and Prometheus verify the serving certificate for. */}}
{{- define "sta.serviceHost" -}}
storage-transfer-apiserver.{{ .Release.Namespace }}.svc
{{- end }}

{{/* --etcd-servers: the bundled etcd's client Service, or the external endpoints. */}}
{{- define "sta.etcdServers" -}}
{{- if eq .Values.etcd.mode "bundled" -}}
https://storage-transfer-etcd.{{ .Release.Namespace }}.svc:2379
{{- else -}}
{{- if not .Values.etcd.endpoints }}{{ fail "etcd.mode external needs etcd.endpoints (https://host:2379, at least one)" }}{{ end -}}
{{ join "," .Values.etcd.endpoints }}
{{- end -}}
{{- end }}

{{/*
The APIService's spec, shared by its plain and cert-manager forms (which
differ in the CA injection annotation and caBundle only).
*/}}
{{- define "sta.apiServiceSpec" -}}
group: storage.transfer.k8s.io
version: v1alpha1
groupPriorityMinimum: 1000
versionPriority: 15
service:
  namespace: {{ .Release.Namespace }}
  name: storage-transfer-apiserver
  port: 443
{{- end }}

{{/*
One object of deploy/monitoring/, read whole from the chart's files/ (symlinks
into deploy/monitoring/, so that the chart and the kustomize overlay cannot
drift apart): its metadata.namespace becomes the release's, Helm's labels are
added to its own, and the Service's DNS name in its spec names the release's
namespace. Called with (list $ "files/NAME.yaml").
*/}}
{{- define "sta.monitoringObject" -}}
{{- $ := index . 0 }}
{{- $path := index . 1 }}
{{- $text := $.Files.Get $path }}
{{- if not $text }}
{{- fail (printf "%s is missing or empty: it should be a symlink to deploy/monitoring/%s (package the chart from a checkout of the repository)" $path (base $path)) }}
{{- end }}
{{- $object := fromYaml $text }}
{{- if hasKey $object "Error" }}
{{- fail (printf "%s: %s" $path $object.Error) }}
{{- end }}
{{- $labels := merge (include "sta.helmLabels" $ | fromYaml) ($object.metadata.labels | default dict) }}
{{- $_ := set $object.metadata "labels" $labels }}
{{- $_ := set $object.metadata "namespace" $.Release.Namespace }}
{{- $spec := toYaml $object.spec | replace ".storage-transfer-system.svc" (printf ".%s.svc" $.Release.Namespace) | fromYaml }}
{{- $_ := set $object "spec" $spec }}
{{- toYaml $object }}
{{- end }}
