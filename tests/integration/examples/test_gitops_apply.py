"""Every file of examples/gitops/ is accepted by the API server as Argo CD would apply it: the
Applications against Argo CD's own CRD schema, the ExternalSecret, ClusterSecretStore and
SealedSecret against theirs, the runs against the DFlashRun CRD (schema and CEL)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT, ensure_namespace

GITOPS = ROOT / "examples" / "gitops"
FILES = sorted(GITOPS.rglob("*.yaml"))


def _runs_namespace() -> str:
    app = yaml.safe_load((GITOPS / "apps/dflash-runs.yaml").read_text())
    return str(app["spec"]["destination"]["namespace"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(GITOPS)))
def test_each_gitops_file_is_accepted_by_the_api_server(
    path: Path, example_crds: Any, dry_run_apply: Callable[..., None]
) -> None:
    manifest = yaml.safe_load(path.read_text())
    # Applications live in argocd; the runs folder is applied into the runs Application's
    # destination, created by CreateNamespace=true (here: by the test).
    namespace = manifest["metadata"].get("namespace") or _runs_namespace()
    ensure_namespace(example_crds, namespace)

    dry_run_apply(path, namespace if "namespace" not in manifest["metadata"] else None)


def test_a_wrong_field_in_an_application_is_refused_by_argo_cds_schema(
    example_crds: Any, tmp_path: Path
) -> None:
    """The check above can fail: Argo CD's CRD refuses what Argo CD would refuse."""
    app = yaml.safe_load((GITOPS / "apps/dflash-runs.yaml").read_text())
    app["spec"]["syncPolicy"]["retry"]["limit"] = "ten"
    path = tmp_path / "bad-app.yaml"
    path.write_text(yaml.safe_dump(app))
    ensure_namespace(example_crds, "argocd")

    result = example_crds.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)

    assert result.returncode != 0
    assert "spec.syncPolicy.retry.limit" in result.stderr
