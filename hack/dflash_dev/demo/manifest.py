"""The DFlashRun the demo applies: examples/tiny-cpu.yaml, with the S3 endpoint that really runs
(the example says 127.0.0.1:8333, the local server may listen elsewhere) and, for tests and the
broken-data demo, another bucket, name, sources or sizes. Pure builders plus `apply_run`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from dflash_dev import operator_local
from dflash_dev.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "tiny-cpu.yaml"
EXAMPLE_BUCKET = "dflash-demo"
MODEL_KEY = "models/tiny-qwen3"  # the example's target.model, under its bucket


def load_example(path: Path = EXAMPLE) -> dict[str, Any]:
    run = yaml.safe_load(path.read_text())
    if not isinstance(run, dict) or run.get("kind") != "DFlashRun":
        raise ValueError(f"{path}: expected one DFlashRun, found {type(run).__name__}")
    return run


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`patch` over `base` (dicts merge, anything else replaces); neither is modified."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _rebucket(uri: str, bucket: str) -> str:
    prefix = f"s3://{EXAMPLE_BUCKET}/"
    return f"s3://{bucket}/{uri.removeprefix(prefix)}" if uri.startswith(prefix) else uri


def build_run(
    example: dict[str, Any],
    *,
    endpoint: str,
    name: str | None = None,
    bucket: str | None = None,
    sources: list[dict[str, Any]] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The example with the real endpoint; `bucket` moves every s3://dflash-demo/ URI and the
    artifacts there; `sources` replaces the data sources; `spec` is merged over the rest."""
    run = copy.deepcopy(example)
    body = run["spec"]
    body["storage"]["endpoint"] = endpoint
    if name is not None:
        run["metadata"]["name"] = name
    if sources is not None:
        body["data"]["sources"] = copy.deepcopy(sources)
    if bucket is not None:
        body["storage"]["bucket"] = bucket
        body["target"]["model"] = _rebucket(body["target"]["model"], bucket)
        for source in body["data"]["sources"]:
            source["uri"] = _rebucket(source["uri"], bucket)
    if spec:
        run["spec"] = deep_merge(body, spec)
    return run


def apply_run(admin: Path, namespace: str, run: dict[str, Any]) -> None:
    operator_local.kubectl(admin, "apply", "-n", namespace, "-f", "-", input=json.dumps(run))


def get_run(admin: Path, namespace: str, name: str) -> dict[str, Any] | None:
    """The DFlashRun, or None when it does not exist (any other failure raises)."""
    try:
        out = operator_local.kubectl(admin, "get", "dflashrun", name, "-n", namespace, "-o", "json")
    except RuntimeError as exc:
        if "NotFound" in str(exc) or "not found" in str(exc):
            return None
        raise
    found: dict[str, Any] = json.loads(out)
    return found


def delete_run(admin: Path, namespace: str, name: str, timeout_seconds: int = 120) -> None:
    """Delete it and wait until it is gone (the operator's finalizer cleans the children)."""
    operator_local.kubectl(
        admin, "delete", "dflashrun", name, "-n", namespace, "--ignore-not-found",
        f"--timeout={timeout_seconds}s",
    )  # fmt: skip
