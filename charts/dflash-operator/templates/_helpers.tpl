{{/* Names, labels, images, RBAC rules and the pools file, shared by the chart's templates. */}}

{{/* The name of every object of the release: fullnameOverride, else the release name. */}}
{{- define "dflash-operator.fullname" -}}
{{- .Values.fullnameOverride | default .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The ServiceAccount the operator runs as, which every binding and the operator's admission
policy name: serviceAccount.name, else the fullname. Without serviceAccount.create the chart
creates none, so the name must be given (the namespace's "default" account would receive the
operator's rights otherwise).
*/}}
{{- define "dflash-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "dflash-operator.fullname" .) -}}
{{- else if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else -}}
{{- fail "serviceAccount.create=false needs serviceAccount.name: the existing ServiceAccount (in the release namespace) the operator runs as and the chart's RBAC binds" -}}
{{- end -}}
{{- end -}}

{{- define "dflash-operator.labels" -}}
app.kubernetes.io/name: dflash-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: dflash-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "dflash-operator.selectorLabels" -}}
app.kubernetes.io/name: dflash-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* "repository@digest" of an image value when it has a digest (the tag is then ignored),
else "repository:tag"; an empty tag is the chart's appVersion. */}}
{{- define "dflash-operator.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
The operator's rights: exactly the API calls it makes (docs/helm.md, "RBAC"), nothing more.
No wildcards, no Secrets: S3 credentials reach pods as secretKeyRef env, never through the
operator. Rendered into one ClusterRole (every namespace) or one Role per watched namespace.
*/}}
{{- define "dflash-operator.rules" -}}
# Runs: watched by kopf, read at each reconcile; kopf patches its annotations and finalizer.
- apiGroups: [dflash.dev]
  resources: [dflashruns]
  verbs: [get, list, watch, patch]
# Status is the operator's. The per-run trainer Role grants get/patch on it too, and a Role can
# only grant what its creator holds (RBAC escalation prevention).
- apiGroups: [dflash.dev]
  resources: [dflashruns/status]
  verbs: [get, patch]
# Children carry blockOwnerDeletion ownerReferences to their run (OwnerReferencesPermissionEnforcement).
- apiGroups: [dflash.dev]
  resources: [dflashruns/finalizers]
  verbs: [update]
# Stage Jobs (and the S3 cleanup Job): create, watch, read back, suspend/resume, delete (retry, TTL).
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
# Training: the same verbs on PyTorchJobs.
- apiGroups: [kubeflow.org]
  resources: [pytorchjobs]
  verbs: [get, list, watch, create, patch, delete]
# Training on Kubeflow Trainer v2: the same verbs on TrainJobs (patch: spec.suspend of an
# unqueued one; a queued one's suspend is Kueue's).
- apiGroups: [trainer.kubeflow.org]
  resources: [trainjobs]
  verbs: [get, list, watch, create, patch, delete]
# ...and their JobSets, watched only: a TrainJob's pods name their JobSet, not the TrainJob.
- apiGroups: [jobset.x-k8s.io]
  resources: [jobsets]
  verbs: [list, watch]
# Kueue (when a queue applies): read the Workload of a queued child (why it waits), and
# deactivate / reactivate it for spec.suspend (Kueue owns a queued child's own suspend).
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [list, patch]
# The LocalQueue a run names, looked up by name before its child is created (a missing one is
# named in the run's status instead of leaving the child queued forever). ServiceAccounts and
# ConfigMaps a run names are looked up with the rights below; never Secrets.
- apiGroups: [kueue.x-k8s.io]
  resources: [localqueues]
  verbs: [get]
# Stage results are read from the pods' termination messages (no logs, no exec).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# The run's rendered config files (<run>-config): created, and replaced when the spec changes.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update]
# The trainer's per-run identity: ServiceAccount, Role and RoleBinding <run>-trainer.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create]
# Events on runs (kubectl describe dfr); a repeat patches the earlier one's count. Listed (read
# only) too: the kubelet's FailedMount events name the Secret a waiting pod's volume lacks (the
# pod itself says only ContainerCreating), and Secrets are never read.
- apiGroups: [""]
  resources: [events]
  verbs: [list, create, patch]
{{- end -}}

{{- define "dflash-operator.discoveryRules" -}}
# kopf follows CRDs (read-only): the PyTorchJob and TrainJob watches start when the
# training-operator's or the Trainer's CRD is installed after the operator, without a restart.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
# ...and namespaces (read-only), when it watches a list of them: one that is created later is
# watched from then on.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
# ...and the PriorityClass a run names (cluster-scoped, read by name only), looked up before its
# child is created: a missing one would leave the child with no pod and no Workload, silently.
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [get]
# ...and the ClusterTrainingRuntime a TrainJob references (cluster-scoped, read by name only):
# a missing one is named in the run's status before the TrainJob is created.
- apiGroups: [trainer.kubeflow.org]
  resources: [clustertrainingruntimes]
  verbs: [get]
{{- end -}}

{{/* The pools file the operator reads: nodePools plus defaults (empty defaults dropped). */}}
{{- define "dflash-operator.pools" -}}
{{- $pools := .Values.nodePools | default dict -}}
{{- if not $pools -}}
{{- fail "nodePools: at least one pool is needed (every stage runs on one)" -}}
{{- end -}}
{{- $defaults := dict -}}
{{- range $stage, $pool := .Values.defaultPools -}}
{{- if $pool -}}
{{- if not (hasKey $pools $pool) -}}
{{- fail (printf "defaultPools.%s=%q is not a key of nodePools; configured pools: %s" $stage $pool (keys $pools | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $_ := set $defaults $stage $pool -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "nodePools" $pools "defaults" $defaults) -}}
{{- end -}}
