"""The example Argo CD Applications of examples/gitops/: waves, sync options and the
ignoreDifferences entries match the API they manage, and every run in the folder is valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_operator.api import parse_run
from dflash_operator.api.constants import ANNOTATION_APPROVE_AUDIT, ANNOTATION_RETRY, GROUP, KIND

ROOT = Path(__file__).parents[3]
GITOPS = ROOT / "examples" / "gitops"
WAVE = "argocd.argoproj.io/sync-wave"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
RESOURCES_FINALIZER = "resources-finalizer.argocd.argoproj.io"


def application(relative: str) -> dict[str, Any]:
    app: dict[str, Any] = yaml.safe_load((GITOPS / relative).read_text())
    assert app["apiVersion"] == "argoproj.io/v1alpha1"
    assert app["kind"] == "Application"
    return app


def json_pointer_to_key(pointer: str, prefix: str) -> str:
    """RFC 6901: '/metadata/annotations/dflash.dev~1retry' -> 'dflash.dev/retry'."""
    assert pointer.startswith(prefix), pointer
    return pointer.removeprefix(prefix).replace("~1", "/").replace("~0", "~")


def manifest_kind(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["kind"])


def runs() -> list[Path]:
    """The DFlashRuns of the runs folder (it also holds the S3 Secret's ExternalSecret)."""
    return [p for p in sorted((GITOPS / "runs").glob("*.yaml")) if manifest_kind(p) == KIND]


def applications() -> list[Path]:
    return [GITOPS / "root-app.yaml", *sorted((GITOPS / "apps").glob("*.yaml"))]


def test_the_operator_is_synced_in_an_earlier_wave_than_the_runs() -> None:
    operator = application("apps/dflash-operator.yaml")
    runs_app = application("apps/dflash-runs.yaml")

    assert int(operator["metadata"]["annotations"][WAVE]) < int(
        runs_app["metadata"]["annotations"][WAVE]
    )


def test_the_root_application_syncs_the_folder_that_holds_both_applications() -> None:
    root = application("root-app.yaml")
    folder = ROOT / root["spec"]["source"]["path"]

    assert {path.name for path in folder.glob("*.yaml")} == {
        "dflash-operator.yaml",
        "dflash-runs.yaml",
    }


def test_the_runs_application_skips_the_dry_run_while_the_crd_is_missing_and_retries() -> None:
    spec = application("apps/dflash-runs.yaml")["spec"]

    assert "SkipDryRunOnMissingResource=true" in spec["syncPolicy"]["syncOptions"]
    assert spec["syncPolicy"]["retry"]["limit"] > 0
    assert (ROOT / spec["source"]["path"]) == GITOPS / "runs"


def test_the_runs_application_ignores_exactly_the_annotations_the_plugin_sets() -> None:
    spec = application("apps/dflash-runs.yaml")["spec"]
    (entry,) = spec["ignoreDifferences"]
    keys = {json_pointer_to_key(p, "/metadata/annotations/") for p in entry["jsonPointers"]}

    assert (entry["group"], entry["kind"]) == (GROUP, KIND)
    assert keys == {ANNOTATION_RETRY, ANNOTATION_APPROVE_AUDIT}
    assert "RespectIgnoreDifferences=true" in spec["syncPolicy"]["syncOptions"]


def test_removing_a_run_from_git_or_deleting_the_application_never_deletes_runs() -> None:
    runs_app = application("apps/dflash-runs.yaml")

    assert runs_app["spec"]["syncPolicy"]["automated"]["prune"] is False
    assert RESOURCES_FINALIZER not in runs_app["metadata"].get("finalizers", [])
    # A cascading delete ignores Prune=false: only Delete=false keeps a run (e2e test_gitops).
    assert "Delete=false" in runs_app["spec"]["syncPolicy"]["syncOptions"]
    for path in runs():
        annotations = yaml.safe_load(path.read_text())["metadata"].get("annotations", {})
        options = annotations.get(SYNC_OPTIONS, "").split(",")
        assert {"Prune=false", "Delete=false"} <= set(options), path.name


def test_the_operator_application_installs_the_chart_of_this_repository() -> None:
    source = application("apps/dflash-operator.yaml")["spec"]["source"]

    assert source["path"] == "charts/dflash-operator"
    assert "skipCrds" not in source["helm"]


def _unknown_keys(given: Any, defaults: Any, path: str) -> list[str]:
    """Keys of `given` the chart's values do not have; an empty map there takes any key."""
    if not isinstance(given, dict) or not isinstance(defaults, dict) or not defaults:
        return []
    unknown = []
    for key, value in given.items():
        if key not in defaults:
            unknown.append(f"{path}{key}")
        else:
            unknown += _unknown_keys(value, defaults[key], f"{path}{key}.")
    return unknown


def test_every_value_the_operator_application_sets_exists_in_the_chart() -> None:
    chart_values = ROOT / "charts" / "dflash-operator" / "values.yaml"
    if not chart_values.exists():
        pytest.skip("the chart is not in this checkout yet")
    values = yaml.safe_load(chart_values.read_text())
    given = application("apps/dflash-operator.yaml")["spec"]["source"]["helm"]["valuesObject"]

    assert _unknown_keys(given, values, "") == []


@pytest.mark.parametrize("path", runs(), ids=lambda p: p.name)
def test_each_run_in_the_folder_is_a_valid_dflashrun(path: Path) -> None:
    manifest = yaml.safe_load(path.read_text())

    run = parse_run(manifest)

    assert (manifest["apiVersion"], manifest["kind"]) == (f"{GROUP}/v1alpha1", KIND)
    assert run.metadata.name == path.stem, "name the file after the run"
    assert "namespace" not in manifest["metadata"], "the Application's destination sets it"


def test_the_runs_folder_is_not_empty() -> None:
    assert runs()


@pytest.mark.parametrize("path", applications(), ids=lambda p: p.name)
def test_every_application_retries_a_failed_sync(path: Path) -> None:
    retry = application(str(path.relative_to(GITOPS)))["spec"]["syncPolicy"]["retry"]

    assert retry["limit"] > 0
    assert retry["backoff"]["maxDuration"]


@pytest.mark.parametrize("relative", ["apps/dflash-operator.yaml", "apps/dflash-runs.yaml"])
def test_a_fresh_cluster_gets_the_namespaces_with_a_pod_security_level(relative: str) -> None:
    spec = application(relative)["spec"]

    assert "CreateNamespace=true" in spec["syncPolicy"]["syncOptions"]
    labels = spec["syncPolicy"]["managedNamespaceMetadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] in {"restricted", "baseline", "privileged"}


def _secret_makers() -> dict[str, dict[str, Any]]:
    """The ExternalSecret the runs Application syncs and the SealedSecret alternative."""
    return {
        "external": yaml.safe_load((GITOPS / "runs/dflash-s3.externalsecret.yaml").read_text()),
        "sealed": yaml.safe_load((GITOPS / "secrets/dflash-s3.sealedsecret.yaml").read_text()),
    }


def test_the_s3_secret_is_made_with_the_name_and_keys_every_run_reads() -> None:
    makers = _secret_makers()
    external, sealed = makers["external"], makers["sealed"]
    made = {external["spec"]["target"]["name"], sealed["spec"]["template"]["metadata"]["name"]}
    for path in runs():
        ref = parse_run(yaml.safe_load(path.read_text())).spec.storage.credentials_secret_ref
        keys = {ref.access_key_id_key, ref.secret_access_key_key}

        assert {ref.name} == made, path.name
        assert {d["secretKey"] for d in external["spec"]["data"]} == keys
        assert set(sealed["spec"]["encryptedData"]) == keys


def test_the_secret_is_synced_before_the_runs_and_only_where_the_store_allows() -> None:
    external = _secret_makers()["external"]
    wave = int(external["metadata"]["annotations"][WAVE])
    for path in runs():
        annotations = yaml.safe_load(path.read_text())["metadata"].get("annotations", {})
        assert wave < int(annotations.get(WAVE, "0")), path.name

    store = yaml.safe_load((GITOPS / "secrets/cluster-secret-store.yaml").read_text())
    assert external["spec"]["secretStoreRef"] == {
        "kind": store["kind"],
        "name": store["metadata"]["name"],
    }
    namespace_labels = application("apps/dflash-runs.yaml")["spec"]["syncPolicy"][
        "managedNamespaceMetadata"
    ]["labels"]
    for condition in store["spec"]["conditions"]:
        wanted = condition["namespaceSelector"]["matchLabels"]
        assert wanted.items() <= namespace_labels.items()


def test_the_helm_repository_alternative_differs_from_the_git_one_only_in_its_source() -> None:
    """from-helm-repo/ replaces apps/dflash-operator.yaml: everything but where the chart
    comes from must stay the same, and it pins the chart version this checkout releases."""
    git = application("apps/dflash-operator.yaml")
    helm = application("from-helm-repo/dflash-operator.yaml")
    chart = yaml.safe_load((ROOT / "charts" / "dflash-operator" / "Chart.yaml").read_text())

    git_source, helm_source = git["spec"].pop("source"), helm["spec"].pop("source")
    assert helm == git
    assert helm_source["chart"] == chart["name"]
    assert str(helm_source["targetRevision"]) == str(chart["version"])
    assert "path" not in helm_source
    assert helm_source["helm"] == git_source["helm"]
