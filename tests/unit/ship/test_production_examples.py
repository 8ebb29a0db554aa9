"""The files of examples/production/ that docs/install-production.md walks through: the S3 IAM
policy grants exactly what the code calls (and no more), the chart values are accepted by the
chart and by the operator's pools loader, and the runs' namespace allows what the pools add."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_operator.api.spec_storage import DEFAULT_PREFIX
from dflash_operator.pools import parse_pools

ROOT = Path(__file__).parents[3]
PRODUCTION = ROOT / "examples" / "production"
CHART_VALUES = ROOT / "charts" / "dflash-operator" / "values.yaml"
# Every module that calls S3 (boto3 clients are made in these two places only).
S3_CALLERS = [
    ROOT / "trainer" / "dflash_trainer" / "storage.py",
    ROOT / "operator" / "dflash_operator" / "cli" / "audit.py",
]
# boto3 S3 client method -> the IAM actions it needs (AWS "Actions defined by Amazon S3").
# Managed transfers (upload_file) use multipart uploads above 8 MiB: PutObject covers
# Create/UploadPart/Complete, and an interrupted one is aborted.
IAM_ACTIONS = {
    "get_object": {"s3:GetObject"},
    "head_object": {"s3:GetObject"},
    "download_file": {"s3:GetObject"},
    "put_object": {"s3:PutObject"},
    "upload_file": {"s3:PutObject", "s3:AbortMultipartUpload"},
    "delete_object": {"s3:DeleteObject"},
    "delete_objects": {"s3:DeleteObject"},
    "list_objects_v2": {"s3:ListBucket"},
}
BUCKET_ACTIONS = {"s3:ListBucket"}
ARTIFACTS = "ml-artifacts"


def s3_calls(source: str) -> set[str]:
    """Methods called on a boto3 S3 client: `client.X(`, `s3.X(` and paginators."""
    calls = set(re.findall(r"(?<![.\w])(?:self\.client|client|s3)\.([a-z_0-9]+)\b", source))
    calls |= set(re.findall(r'get_paginator\(\s*"([a-z_0-9]+)"', source))
    return calls - {"get_paginator", "meta", "exceptions"}


def policy() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((PRODUCTION / "s3-iam-policy.json").read_text())
    return loaded


def granted(resource: str) -> set[str]:
    actions: set[str] = set()
    for statement in policy()["Statement"]:
        if statement["Effect"] == "Allow" and resource in statement["Resource"]:
            actions |= set(statement["Action"])
    return actions


def test_s3_calls_are_found_in_the_code() -> None:
    """The scan can fail: it sees the calls storage.py is known to make."""
    calls = s3_calls(S3_CALLERS[0].read_text())

    assert {"get_object", "put_object", "list_objects_v2", "delete_objects"} <= calls


@pytest.mark.parametrize("path", S3_CALLERS, ids=lambda p: p.name)
def test_every_s3_call_of_the_code_has_a_known_iam_action(path: Path) -> None:
    unknown = s3_calls(path.read_text()) - set(IAM_ACTIONS)

    assert not unknown, f"{path.name} calls {unknown}: add their IAM actions to the policy"


def test_the_policy_grants_what_the_code_needs_on_run_artifacts() -> None:
    needed = set().union(*(IAM_ACTIONS[c] for p in S3_CALLERS for c in s3_calls(p.read_text())))

    assert needed - BUCKET_ACTIONS <= granted(f"arn:aws:s3:::{ARTIFACTS}/{DEFAULT_PREFIX}/*")
    assert needed & BUCKET_ACTIONS <= granted(f"arn:aws:s3:::{ARTIFACTS}")


def test_the_policy_is_least_privilege() -> None:
    for statement in policy()["Statement"]:
        assert statement["Effect"] == "Allow"
        for action in statement["Action"]:
            assert "*" not in action, f"{statement['Sid']}: wildcard action {action}"
        for resource in statement["Resource"]:
            assert resource.startswith("arn:aws:s3:::") and resource != "arn:aws:s3:::*"
    # Writes only under the operator's prefix; prompts and models are read-only.
    for statement in policy()["Statement"]:
        writes = set(statement["Action"]) & {"s3:PutObject", "s3:DeleteObject"}
        if writes:
            assert statement["Resource"] == [f"arn:aws:s3:::{ARTIFACTS}/{DEFAULT_PREFIX}/*"]
    listing = [s for s in policy()["Statement"] if s["Resource"] == [f"arn:aws:s3:::{ARTIFACTS}"]]
    assert listing[0]["Condition"]["StringLike"]["s3:prefix"] == [f"{DEFAULT_PREFIX}/*"]


def production_values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((PRODUCTION / "values.yaml").read_text())
    return loaded


def test_the_production_pools_are_accepted_by_the_operator() -> None:
    chart = yaml.safe_load(CHART_VALUES.read_text())
    pools = production_values()["nodePools"]
    defaults = {stage: pool for stage, pool in chart["defaultPools"].items() if pool}

    config = parse_pools({"nodePools": pools, "defaults": defaults}, "examples/production")

    assert config.node_pools["rtx-pro-6000"].add_capabilities == ("IPC_LOCK",)


def test_the_runs_namespace_allows_what_the_pools_add() -> None:
    """Pod Security "baseline" and "restricted" refuse added capabilities such as IPC_LOCK."""
    namespaces = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in yaml.safe_load_all((PRODUCTION / "namespaces.yaml").read_text())
    }
    adds = any(p.get("addCapabilities") for p in production_values()["nodePools"].values())
    enforce = namespaces["ml-team"]["pod-security.kubernetes.io/enforce"]

    assert enforce == ("privileged" if adds else "restricted")
    assert namespaces["dflash-system"]["pod-security.kubernetes.io/enforce"] == "restricted"
