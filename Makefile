# DFlash Operator: every developer and CI entry point. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

UV_VERSION := 0.13.9
export DFLASH_STATE_DIR ?= $(CURDIR)/.local
PY := $(CURDIR)/.venv/bin/python
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
PYTEST_ARGS ?=

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-18s %s\n", $$1, $$2}'

# ---------------------------------------------------------------- setup
.PHONY: uv
uv: ## install uv (the Python package manager) if it is missing
	@command -v $(UV) >/dev/null 2>&1 || { \
	  echo "installing uv $(UV_VERSION) from PyPI"; \
	  python3 -m pip install --quiet --user "uv==$(UV_VERSION)" || { \
	    echo "error: could not install uv; install it (https://docs.astral.sh/uv/) and rerun" >&2; exit 1; }; }

.PHONY: venv
venv: uv ## create .venv from uv.lock (exact pins; torch is cached by uv after the first run)
	@$(UV) sync --locked --quiet

# What each entry point needs of hack/build-binaries.sh (built once per version into
# ~/.cache/dflash/bin): the control plane (the demo, the cluster, e2e) and the test-only tools.
# Both training backends: Kubeflow Trainer v2 (trainer: its controller and JobSet's) and the
# training-operator v1.
CLUSTER_BINARIES := etcd kube kwok helm trainer training-operator kueue
# The demo's run trains as a TrainJob: its cluster serves Trainer v2 only (cluster.py starts the
# backends whose binaries are built), so a cold first `make demo` skips the training-operator.
DEMO_BINARIES := etcd kube kwok helm trainer kueue
BUILD_BINARIES = bash hack/build-binaries.sh --for "make $(or $(MAKECMDGOALS),$@)"
LINK_TOOLS = mkdir -p .local/bin && . hack/versions.env && cache="$${DFLASH_CACHE:-$$HOME/.cache/dflash}" && \
	ln -sf "$$cache/bin/kubectl-$$KUBERNETES_VERSION" .local/bin/kubectl && \
	ln -sf "$$cache/bin/helm-$$HELM_VERSION" .local/bin/helm

.PHONY: binaries cluster-binaries demo-binaries actionlint promtool argocd
binaries: ## build every binary: the control plane's and the test tools (actionlint, promtool, Argo CD)
	@$(BUILD_BINARIES) $(CLUSTER_BINARIES) actionlint promtool argocd
	@$(LINK_TOOLS)

cluster-binaries: ## build only the control plane's binaries, both training backends (what the cluster and the tests use)
	@$(BUILD_BINARIES) $(CLUSTER_BINARIES)
	@$(LINK_TOOLS)

demo-binaries: ## build only what make demo uses: the control plane with Kubeflow Trainer v2, no training-operator
	@$(BUILD_BINARIES) $(DEMO_BINARIES)
	@$(LINK_TOOLS)

actionlint: ## build actionlint (the workflow linter of the unit tests)
	@$(BUILD_BINARIES) actionlint

promtool: ## build promtool (the chart's alert-rule tests)
	@$(BUILD_BINARIES) promtool

argocd: ## build Argo CD core (make gitops-up, the GitOps e2e tests; Go 1.27 from the module proxy)
	@$(BUILD_BINARIES) argocd

# ---------------------------------------------------------------- local cluster and S3
.PHONY: cluster-up
cluster-up: venv cluster-binaries ## start the local control plane (idempotent; ~10 s warm)
	@$(PY) -m dflash_dev cluster-up

.PHONY: cluster-down
cluster-down: ## stop it and delete its state
	@if [ -x $(PY) ]; then $(PY) -m dflash_dev cluster-down; fi

.PHONY: kubeconfig
kubeconfig: ## print the kubeconfig path: export KUBECONFIG=$$(make -s kubeconfig)
	@echo $(DFLASH_STATE_DIR)/cluster/kubeconfig

.PHONY: operator
operator: cluster-up ## run the operator in the foreground on the local cluster, with the chart's RBAC
	@$(PY) -m dflash_dev.operator_local $(OPERATOR_ARGS)

.PHONY: s3-up
s3-up: venv ## start the S3 server (SeaweedFS) on loopback
	@$(PY) -m dflash_dev s3-up

.PHONY: s3-down
s3-down: ## stop the S3 server and delete its data
	@if [ -x $(PY) ]; then $(PY) -m dflash_dev s3-down; fi

.PHONY: s3-env
s3-env: ## print export lines for the running S3 server: eval "$$(make -s s3-env)"
	@$(PY) -m dflash_dev s3-env

# ---------------------------------------------------------------- GitOps (docs/gitops.md)
.PHONY: gitops-up
gitops-up: cluster-up argocd ## start Argo CD core (controller, repo-server, Redis) and a local Git + Helm source with the example
	@$(PY) -m dflash_dev gitops-up

.PHONY: gitops-down
gitops-down: ## stop Argo CD core and its sources
	@if [ -x $(PY) ]; then $(PY) -m dflash_dev gitops-down; fi

.PHONY: down
down: demo-down gitops-down executor-down cluster-down s3-down ## stop everything (demo operator, Argo CD, executor, cluster, S3)

# ---------------------------------------------------------------- code
.PHONY: crds
regen-requirements: venv ## resolve images/regen/requirements.txt against the Dockerfile's vLLM and uv.lock
	@$(PY) -m dflash_dev.regen_requirements

crds: venv ## regenerate crds/ and docs/crd-reference.md from the pydantic models
	@$(PY) -m dflash_operator.api.generate

.PHONY: lint
lint: venv ## ruff + mypy
	@$(UV) run --quiet ruff check .
	@$(UV) run --quiet ruff format --check .
	@$(UV) run --quiet mypy operator/dflash_operator trainer/dflash_trainer hack/dflash_dev memplan/dflash_memplan

# ---------------------------------------------------------------- kubectl plugin
.PHONY: plugin
plugin: venv ## build dist/kubectl-dflash (one-file zipapp, any Linux/macOS with Python >= 3.11) and dist/kubectl-dflash.tar.gz (krew)
	@$(PY) -m dflash_dev.plugin_zipapp $(PLUGIN_ARGS)

# ---------------------------------------------------------------- tests
.PHONY: test
test: venv binaries lint ## the whole suite: unit, integration (real control plane + S3), e2e
	@$(PY) -m pytest $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-regen-pins
	@$(MAKE) --no-print-directory test-version-floor

.PHONY: test-regen-pins
test-regen-pins: venv ## the data stages' unit tests with the regen image's versions (vLLM's transformers, numpy)
	@with="$$($(PY) -m dflash_dev.regen_requirements --uv-with)"; \
	$(UV) run --quiet $$with python -c 'import numpy, transformers; print(f"regen image versions: transformers {transformers.__version__}, numpy {numpy.__version__}")' && \
	$(UV) run --quiet $$with python -m pytest -m unit tests/unit/data -q -p no:cacheprovider

.PHONY: test-version-floor
test-version-floor: venv ## the trainer's and data stages' unit tests on the GPU machine's stack: Python 3.12, torch 2.11, transformers 5.17 (the oldest supported), psutil, numpy 2.5
	@python="$$($(PY) -m dflash_dev.floor_env --python)"; \
	export DFLASH_FLOOR_BASE_SITE="$$($(PY) -m dflash_dev.floor_env --base-site)"; \
	$$python -c 'import sys, numpy, psutil, torch, transformers; print(f"version floor: Python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, numpy {numpy.__version__}, psutil {psutil.__version__}")' && \
	$$python -m pytest -m "unit and not slow" tests/unit/trainer tests/unit/data -q -p no:cacheprovider \
	  -k "not loss_decreases_over_50_steps and not gpu_smoke_dry_run"

.PHONY: test-unit
test-unit: venv actionlint ## unit tests only (no servers)
	@$(PY) -m pytest -m unit $(PYTEST_ARGS)

.PHONY: test-integration
test-integration: venv cluster-binaries promtool ## integration tests (starts the control plane and S3 if needed)
	@$(PY) -m pytest -m integration $(PYTEST_ARGS)

.PHONY: test-e2e
test-e2e: venv cluster-binaries argocd ## end-to-end tests (pods run as local processes)
	@$(PY) -m pytest -m e2e $(PYTEST_ARGS)

# ---------------------------------------------------------------- demo
# FROM_IMAGES=1: the operator and every pod run from the built images (docs/images.md, "Running
# from the images"); it builds them first (make images), which needs about 20 GB of disk.
FROM_IMAGES ?=
DEMO_IMAGE_ARGS = $(if $(FROM_IMAGES),--from-images --image-registry=$(IMAGE_REGISTRY) --image-tag=$(IMAGE_TAG))

.PHONY: demo
demo: venv demo-binaries $(if $(FROM_IMAGES),images) ## the first impression: a whole DFlashRun end to end on the local control plane (docs/demo.md); FROM_IMAGES=1 from the images
	@$(PY) -m dflash_dev.demo run $(DEMO_IMAGE_ARGS) $(if $(DRAFTER),--drafter=$(DRAFTER))

.PHONY: demo-broken-data
demo-broken-data: venv demo-binaries $(if $(FROM_IMAGES),images) ## the incident replayed: an 87%-stub dataset stops at the completions gate
	@$(PY) -m dflash_dev.demo run --broken-data $(DEMO_IMAGE_ARGS)

.PHONY: demo-down
demo-down: ## stop the demo's operator (make down stops it too)
	@if [ -x $(PY) ]; then $(PY) -m dflash_dev.demo down; fi

# ---------------------------------------------------------------- release version
# VERSION (the file) is the one source of the release version (docs/release.md).
RELEASE_VERSION := $(shell cat $(CURDIR)/VERSION 2>/dev/null)

.PHONY: version
version: ## print the release version (the VERSION file)
	@echo $(RELEASE_VERSION)

.PHONY: set-version
set-version: venv ## write a new release version everywhere: make set-version VERSION=x.y.z
	@[ -n "$(VERSION)" ] || { echo "error: give the new version: make set-version VERSION=x.y.z" >&2; exit 1; }
	@$(PY) -m dflash_dev.version set "$(VERSION)"
	@$(UV) lock --quiet
	@$(UV) sync --locked --quiet  # the installed packages' metadata: what the operator reports
	@$(PY) -m dflash_dev.version check

# ---------------------------------------------------------------- images
IMAGE_REGISTRY ?= ghcr.io/dflash-dev
IMAGE_TAG ?= $(RELEASE_VERSION)
# The container engine: docker (BuildKit), podman or buildah; empty: the first that answers.
DOCKER ?=
IMAGES ?= operator trainer regen
# CA bundle of a TLS-intercepting proxy, passed to builds as the secret `proxy-ca` (default:
# this machine's SSL_CERT_FILE, when set).
PROXY_CA ?=
DEBIAN_MIRROR ?= http://deb.debian.org/debian
IMAGES_CLI = $(PY) -m dflash_dev.images $(if $(DOCKER),--engine=$(DOCKER)) $(if $(PROXY_CA),--proxy-ca=$(PROXY_CA))

.PHONY: images
images: venv ## build the operator, trainer and regen images (Docker+BuildKit, Podman or Buildah; docs/images.md)
	@$(IMAGES_CLI) build --registry=$(IMAGE_REGISTRY) --tag=$(IMAGE_TAG) $(IMAGES)

.PHONY: base-images
base-images: venv ## build stand-ins of the images' bases from Debian and PyPI, under the upstream names (docs/images.md)
	@$(IMAGES_CLI) base --debian-mirror=$(DEBIAN_MIRROR) $(if $(REBUILD),--rebuild=$(if $(filter 1,$(REBUILD)),all,$(REBUILD))) $(if $(PYTHON312),--python312=$(PYTHON312)) $(IMAGES)

.PHONY: test-images
test-images: venv ## check the built images from inside: entry points, every stage command, imports, sizes (docs/images.md)
	@DFLASH_IMAGE_TESTS=1 DFLASH_IMAGES="$(IMAGES)" DFLASH_IMAGE_REGISTRY=$(IMAGE_REGISTRY) DFLASH_IMAGE_TAG=$(IMAGE_TAG) \
	  $(PY) -m pytest tests/images -m "not e2e" $(PYTEST_ARGS)
	@case " $(IMAGES) " in *" regen "*) $(PY) -m dflash_dev.images regen-inputs --write;; esac

.PHONY: test-images-e2e
test-images-e2e: venv binaries ## the demo's run with every pod and the operator from the images (make images first)
	@DFLASH_IMAGE_TESTS=1 DFLASH_IMAGES="$(IMAGES)" DFLASH_IMAGE_REGISTRY=$(IMAGE_REGISTRY) DFLASH_IMAGE_TAG=$(IMAGE_TAG) \
	  $(PY) -m pytest tests/images -m e2e $(PYTEST_ARGS)

# ---------------------------------------------------------------- process executor
.PHONY: executor-up
executor-up: cluster-up ## run pods of executor nodes local-0/1 as local processes (idempotent)
	@$(PY) -m dflash_dev executor-up $(if $(EXECUTOR_NODES),--nodes=$(EXECUTOR_NODES))

.PHONY: executor-down
executor-down: ## stop the executor: its pods' processes stop, its nodes go NotReady
	@if [ -x $(PY) ]; then $(PY) -m dflash_dev executor-down; fi

.PHONY: executor-logs
executor-logs: ## a pod's log: make executor-logs POD=<namespace>/<pod> [FOLLOW=1]; no POD: the executor's own
	@$(PY) -m dflash_dev executor-logs $(POD) $(if $(FOLLOW),--follow)
