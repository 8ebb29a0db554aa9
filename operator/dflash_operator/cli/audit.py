"""`kubectl dflash audit`: each gate's verdict, its violated checks and where its report is;
with S3 credentials in the environment, the Markdown report is downloaded and shown.

boto3 is only an optional dependency of the operator package (its `s3` extra): it is imported
only here, inside the download, when it is installed, and its absence is answered with what to
do instead.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_operator.api.constants import Gate, Verdict
from dflash_operator.api.status import DFlashRunStatus
from dflash_operator.api.status_parts import AuditResult, AuditViolation
from dflash_operator.cli.errors import CliError

REPORT_FILE = "report.md"
# Any one of these means the environment carries S3 credentials boto3 can use.
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE")
# Checks named min* fail below their threshold; all others (max*) above it.
_MINIMUM_PREFIX = "min"


@dataclass(frozen=True)
class GateView:
    gate: Gate
    result: AuditResult | None

    @property
    def failed(self) -> bool:
        return (
            self.result is not None
            and self.result.verdict == Verdict.FAIL
            and not self.result.approved
        )

    @property
    def report_uri(self) -> str | None:
        """s3:// URI of report.md (status holds the report's folder)."""
        uri = self.result.report_uri if self.result else None
        if not uri:
            return None
        return uri if uri.endswith(".md") else f"{uri.rstrip('/')}/{REPORT_FILE}"


def gate_views(status: DFlashRunStatus, gate: Gate | None) -> list[GateView]:
    audit = status.audit
    gates = [gate] if gate is not None else list(Gate)
    views = [GateView(g, audit.result(g) if audit else None) for g in gates]
    if gate is None:  # without --gate, only the gates that ran (the prompts gate may not exist)
        views = [view for view in views if view.result is not None]
    return views


def violation_text(violation: AuditViolation) -> str:
    parts = [violation.check]
    if violation.value is not None and violation.threshold is not None:
        sign = "<" if violation.check.startswith(_MINIMUM_PREFIX) else ">"
        parts.append(f"{violation.value:g} {sign} {violation.threshold:g}")
    if violation.message:
        parts.append(violation.message)
    if violation.sources:
        parts.append(f"[sources: {', '.join(violation.sources)}]")
    return "  ".join(parts)


def render_gate(view: GateView, run: str, namespace: str) -> list[str]:
    result = view.result
    if result is None:
        return [f"{view.gate.value} gate: not run yet"]
    if result.verdict == Verdict.PASS:
        headline = "PASSED"
    else:
        headline = "FAILED, accepted by approval" if result.approved else "FAILED"
    context = []
    if result.observed_generation is not None:
        context.append(f"generation {result.observed_generation}")
    if result.attempt is not None:
        context.append(f"attempt {result.attempt}")
    if result.time is not None:
        context.append(f"{result.time:%Y-%m-%d %H:%M} UTC")
    lines = [
        f"{view.gate.value} gate: {headline}" + (f" ({', '.join(context)})" if context else "")
    ]
    if result.violations:
        lines.append("  violated checks:")
        lines += [f"    - {violation_text(v)}" for v in result.violations]
    elif result.verdict == Verdict.FAIL:
        lines.append("  violated checks: not recorded in status; see the report")
    if result.metrics:
        figures = ", ".join(f"{key}={value:g}" for key, value in sorted(result.metrics.items()))
        lines.append(f"  metrics: {figures}")
    lines.append(f"  report: {view.report_uri or 'not recorded'}")
    if view.failed:
        where = f"{run} -n {namespace}"
        lines.append(f"  accept it: kubectl dflash approve {where} --gate {view.gate.value}")
        lines.append(f"  or fix the data, then: kubectl dflash retry {where}")
    return lines


def gate_data(view: GateView) -> dict[str, Any]:
    data: dict[str, Any] = {"gate": view.gate.value}
    data.update(view.result.to_api() if view.result else {"verdict": None})
    data["reportUri"] = view.report_uri
    return data


def has_s3_credentials() -> bool:
    return any(os.environ.get(name) for name in CREDENTIAL_VARIABLES)


def default_download_path(namespace: str, run: str, gate: Gate) -> Path:
    return (
        Path(tempfile.gettempdir()) / "kubectl-dflash" / namespace / run / gate.value / REPORT_FILE
    )


def _split_s3(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://") or "/" not in uri.removeprefix("s3://"):
        raise CliError(f"report location {uri!r} is not an s3://<bucket>/<key> URI")
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def download_report(uri: str, storage: dict[str, Any], destination: Path) -> Path:
    """Copy report.md from S3. The endpoint: $AWS_ENDPOINT_URL, else spec.storage.endpoint."""
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as exc:
        raise CliError(
            f"boto3 is not installed, so the report cannot be downloaded. Install it next to "
            f"kubectl-dflash (e.g. uv tool install dflash-operator --with boto3), or copy it "
            f"yourself: aws s3 cp {uri} ."
        ) from exc
    bucket, key = _split_s3(uri)
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or storage.get("endpoint")
    path_style = os.environ.get("DFLASH_S3_PATH_STYLE", "").lower() == "true" or bool(
        storage.get("pathStyle")
    )
    region = os.environ.get("AWS_REGION") or storage.get("region")
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        config=Config(s3={"addressing_style": "path" if path_style else "auto"}),
    )
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        s3.download_file(bucket, key, str(destination))
    except (BotoCoreError, ClientError) as exc:
        where = f" at {endpoint}" if endpoint else ""
        raise CliError(
            f"could not download {uri}{where}: {exc}. Check the S3 credentials in your "
            "environment, and set AWS_ENDPOINT_URL if the cluster's endpoint is not reachable "
            "from here"
        ) from exc
    return destination
