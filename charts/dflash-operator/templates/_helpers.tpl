{{/* Names and labels shared by the chart's templates. */}}

{{- define "dflash-operator.name" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dflash-operator.labels" -}}
app.kubernetes.io/name: dflash-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: dflash-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "dflash-operator.selectorLabels" -}}
app.kubernetes.io/name: dflash-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The pools file the operator reads: nodePools plus defaults (empty defaults dropped). */}}
{{- define "dflash-operator.pools" -}}
{{- $defaults := dict -}}
{{- range $stage, $pool := .Values.defaultPools -}}
{{- if $pool -}}{{- $_ := set $defaults $stage $pool -}}{{- end -}}
{{- end -}}
{{- toYaml (dict "nodePools" .Values.nodePools "defaults" $defaults) -}}
{{- end -}}
