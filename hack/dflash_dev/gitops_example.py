"""The example of examples/gitops/ as a user's fork of it: a Git repository on the local Git
server with the chart and the example's Applications pointing at it (repoURL), and the packaged
chart in the local Helm repository. Used by `make gitops-up` and the GitOps e2e tests.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from . import binaries
from .gitserver import LocalRepo, publish_chart
from .paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "gitops"
CHART = REPO_ROOT / "charts" / "dflash-operator"
REPO_NAME = "dflash-operator"
# What a user replaces (root-app.yaml: "your fork").
PLACEHOLDER_URL = "https://github.com/your-org/dflash-operator.git"
APPS = ("root-app.yaml", "apps/dflash-operator.yaml", "apps/dflash-runs.yaml")
RUNS_README = """DFlashRuns committed here are synced into namespace ml-team by the dflash-runs
Application (examples/gitops/apps/dflash-runs.yaml).
"""


def build_app_text(text: str, repo_url: str) -> str:
    """An example Application's file with repoURL set to the fork, comments kept."""
    if PLACEHOLDER_URL not in text:
        raise ValueError(f"no `repoURL: {PLACEHOLDER_URL}` to replace")
    return text.replace(PLACEHOLDER_URL, repo_url)


def chart_version(chart: Path = CHART) -> str:
    return str(yaml.safe_load((chart / "Chart.yaml").read_text())["version"])


def create_fork(root: Path, base_url: str, runs: dict[str, str] | None = None) -> LocalRepo:
    """Repository `dflash-operator` on the local Git server: the chart at charts/dflash-operator,
    the example's Applications at examples/gitops/, and `runs` (file name -> manifest) in
    examples/gitops/runs/ instead of the example's runs (an ExternalSecret needs External
    Secrets Operator, which does not run here). One commit on main."""
    repo = LocalRepo(root, REPO_NAME, base_url).create()
    repo.copy_tree(CHART, "charts/dflash-operator")
    for relative in APPS:
        text = (EXAMPLE / relative).read_text()
        repo.write(f"examples/gitops/{relative}", build_app_text(text, repo.url))
    repo.write("examples/gitops/runs/README.md", RUNS_README)
    for name, manifest in (runs or {}).items():
        repo.write(f"examples/gitops/runs/{name}", manifest)
    repo.commit("The DFlash operator's chart and the GitOps example")
    publish_chart(binaries.cached_path("helm"), CHART, root, base_url)
    return repo


def root_app_path(repo: LocalRepo) -> Path:
    return repo.work / "examples" / "gitops" / "root-app.yaml"
