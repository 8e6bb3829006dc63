{{/* Chart name, truncated to the 63 characters a label allows. */}}
{{- define "infergate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, with the chart's unless it already holds it. */}}
{{- define "infergate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "infergate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "infergate.labels" -}}
helm.sh/chart: {{ include "infergate.chart" . }}
{{ include "infergate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "infergate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "infergate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "infergate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "infergate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The config file the gateway reads: .Values.config, with upstreams appended, models merged over,
redis.addr/prefix, batch.kafka.brokers, batch.dir and auth.keys set from their values.
*/}}
{{- define "infergate.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- with .Values.upstreams }}
{{- $_ := set $cfg "upstreams" (concat ((get $cfg "upstreams") | default list) .) }}
{{- end }}
{{- with .Values.models }}
{{- $_ := set $cfg "models" (mergeOverwrite ((get $cfg "models") | default dict) (deepCopy .)) }}
{{- end }}
{{- if .Values.redis.addr }}
{{- $redis := (get $cfg "redis") | default dict }}
{{- $_ := set $redis "addr" .Values.redis.addr }}
{{- with .Values.redis.prefix }}{{ $_ := set $redis "prefix" . }}{{ end }}
{{- $_ := set $cfg "redis" $redis }}
{{- end }}
{{- if or .Values.kafka.brokers .Values.batchFiles.existingClaim }}
{{- $batch := (get $cfg "batch") | default dict }}
{{- with .Values.kafka.brokers }}
{{- $kafka := (get $batch "kafka") | default dict }}
{{- $_ := set $kafka "brokers" . }}
{{- $_ := set $batch "kafka" $kafka }}
{{- end }}
{{- if .Values.batchFiles.existingClaim }}
{{- $_ := set $batch "dir" .Values.batchFiles.mountPath }}
{{- end }}
{{- $_ := set $cfg "batch" $batch }}
{{- end }}
{{- with .Values.auth.keys }}
{{- $auth := (get $cfg "auth") | default dict }}
{{- $_ := set $auth "keys" . }}
{{- $_ := set $cfg "auth" $auth }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* Whether the config file goes to a Secret: it holds API key hashes. */}}
{{- define "infergate.configInSecret" -}}
{{- if or .Values.auth.keys (dig "auth" "keys" list (.Values.config | default dict)) }}true{{ end }}
{{- end }}

{{/* Refusals: values the gateway would refuse, or the chart cannot honour. */}}
{{- define "infergate.validate" -}}
{{- if and .Values.kafka.brokers (not (or .Values.redis.addr (dig "redis" "addr" "" (.Values.config | default dict)))) }}
{{- fail "kafka.brokers needs redis.addr: replicas and workers share the batches' state there" }}
{{- end }}
{{- if and .Values.auth.existingSecret (or .Values.config .Values.upstreams .Values.models .Values.redis.addr .Values.kafka.brokers .Values.auth.keys .Values.batchFiles.existingClaim) }}
{{- fail "auth.existingSecret holds the whole config file: leave config, upstreams, models, redis.addr, kafka.brokers, auth.keys and batchFiles.existingClaim empty (the gateway reads one file)" }}
{{- end }}
{{- range .Values.auth.keys }}
{{- if not (regexMatch "^[0-9a-f]{64}$" (toString .sha256)) }}
{{- fail (printf "auth.keys: %v: sha256 must be 64 lowercase hex digits (printf %%s \"$KEY\" | sha256sum), never the key itself" .name) }}
{{- end }}
{{- end }}
{{- if lt (int .Values.preStopDelay) 0 }}
{{- fail "preStopDelay must be 0 or more" }}
{{- end }}
{{- end }}
