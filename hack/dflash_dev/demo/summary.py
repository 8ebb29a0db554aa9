"""What the demo prints at the end: the run's outcome, the time in each phase, where the drafter
is and how well it drafts, and the next commands; for a failed gate, the violated checks, the
per-source breakdown and a decoded example, from the status and the gate's report in S3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from dflash_dev.demo.live import Timeline
from dflash_dev.paths import REPO_ROOT, venv_bin

# Checks whose rows show per source (report.json `sources.<name>.metrics`).
MAX_SOURCE_COLUMNS = 6
EXAMPLE_CHARS = 300
BIN_DIRS = f"{REPO_ROOT / '.local' / 'bin'}:{venv_bin()}"


def split_s3_uri(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def fetch_report(client: Any, report_uri: str) -> dict[str, Any] | None:
    """report.json of a gate (status.audit.<gate>.reportUri is its folder); None if missing."""
    bucket, key = split_s3_uri(report_uri.rstrip("/"))
    if not key.endswith(".json"):
        key = f"{key}/report.json"
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception:
        return None
    report: dict[str, Any] = json.loads(body)
    return report


def build_phase_table(timeline: Timeline) -> Table:
    table = Table(title="time per phase", show_edge=False, title_justify="left")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    for phase, seconds in timeline.durations():
        table.add_row(phase, f"{seconds:.0f}")
    table.add_row("[bold]total[/bold]", f"[bold]{timeline.total:.0f}[/bold]")
    return table


def decode_answer(example: dict[str, Any]) -> str:
    """A completions example as the target wrote it (think block, answer, end of turn)."""
    if "text" in example:  # tokens-gate examples are decoded already
        return str(example["text"])
    reasoning = example.get("reasoning") or ""
    return f"<think>\n{reasoning}\n</think>\n\n{example.get('response') or ''}<|im_end|>"


def format_metric(check: str, value: float) -> str:
    """Rates and shares as percentages; token counts (the length floors) as counts."""
    if check.endswith(("_rate", "_share", "_fraction")):
        return f"{value:.1%}"
    return f"{value:,.0f}"


def build_source_table(report: dict[str, Any]) -> Table:
    """The gate's checks per source (violated checks first), as in report.md."""
    violated = [v["check"] for v in report.get("violations") or []]
    checks = list(dict.fromkeys(violated + list((report.get("overall") or {}).get("metrics", {}))))
    checks = [c for c in checks if c != "samples"][:MAX_SOURCE_COLUMNS]
    table = Table(show_edge=False)
    table.add_column("source")
    table.add_column("samples", justify="right")
    for check in checks:
        table.add_column(check, justify="right", style="red" if check in violated else None)
    rows = [("ALL", report.get("overall") or {}), *(report.get("sources") or {}).items()]
    for name, entry in rows:
        metrics = entry.get("metrics") or {}
        cells = [format_metric(c, metrics[c]) if c in metrics else "-" for c in checks]
        table.add_row(name, str(entry.get("samples", "?")), *cells)
    return table


def print_audit_failure(
    console: Console, run: dict[str, Any], report: dict[str, Any] | None, namespace: str
) -> None:
    status = run.get("status") or {}
    name = run["metadata"]["name"]
    for gate, result in (status.get("audit") or {}).items():
        if result.get("verdict") != "fail" or result.get("approved"):
            continue
        console.print(
            f"\n[bold red]The {gate} gate stopped the run before any training.[/bold red]"
        )
        console.print("violated checks:")
        for violation in result.get("violations") or []:
            console.print(
                f"  [red]x[/red] {violation.get('message') or violation['check']}", highlight=False
            )
        if report is not None:
            console.print("\nper source:")
            console.print(build_source_table(report))
            print_likelihood(console, report)
            examples = report.get("examples") or {}
            for check in ("stub_rate", "empty_thinking_rate", *examples):
                if examples.get(check):
                    example = examples[check][0]
                    console.print(f"\na decoded example ({check}, source {example.get('source')}):")
                    console.print(f"  {decode_answer(example)[:EXAMPLE_CHARS]!r}", highlight=False)
                    break
        console.print(f"\nfull report: {result.get('reportUri')}")
        generation = run["metadata"].get("generation")
        console.print("to accept the data anyway (you should not):")
        console.print(
            f"  kubectl dflash approve {name} -n {namespace} --gate {gate}    # {gate}@{generation}"
        )


def build_likelihood_table(report: dict[str, Any]) -> Table | None:
    """Per source: rows scored under the target, how many it would not have written, NLL."""
    rows = [("ALL", report.get("overall") or {}), *(report.get("sources") or {}).items()]
    figures = [(n, (e.get("details") or {}).get("likelihood")) for n, e in rows]
    if not any(f for _, f in figures):
        return None
    table = Table(show_edge=False)
    for column in ("source", "scored", "off-distribution", "mean NLL/token", "outside support"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for name, f in figures:
        if f:
            rate = f["offRows"] / f["scored"] if f["scored"] else 0.0
            table.add_row(name, str(f["scored"]), f"{f['offRows']} ({rate:.0%})",
                          f"{f['meanNll']:.3f}", f"{f['outsideShare']:.1%}")  # fmt: skip
    return table


def print_likelihood(console: Console, report: dict[str, Any]) -> None:
    """The target-likelihood figures of a gate, and the least likely row of the source the
    target is least likely to have written, its least likely tokens marked."""
    info = report.get("likelihood") or {}
    if info.get("skipped"):
        console.print(f"\ntarget likelihood: skipped ({info['skipped']})")
        return
    table = build_likelihood_table(report)
    if table is None:
        return
    console.print(f"\ntarget likelihood ({info.get('scorer')}, {info.get('sampling')}):")
    console.print(table)
    least = info.get("leastLikely") or {}
    worst = [row for rows in least.values() for row in rows[:1] if row.get("offDistribution")]
    if worst and worst[0].get("marked"):
        row = worst[0]
        console.print(
            f"least likely row of {row['source']} ({row['nllPerToken']:.2f} nats/token, "
            f"{row['outsideTokens']} of {row['tokens']} tokens the target would not write, ⟦marked⟧):"
        )
        console.print(f"  {row['marked'][:EXAMPLE_CHARS]!r}", highlight=False)


def _rounded(value: Any) -> Any:
    """Numbers to 2 decimals (lists too), for reading; None stays None."""
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.2f}" for v in value) + "]"
    return f"{value:.2f}" if isinstance(value, float) else value


def print_success(
    console: Console, run: dict[str, Any], timeline: Timeline, namespace: str, kubeconfig: Path
) -> None:
    status = run.get("status") or {}
    name = run["metadata"]["name"]
    phase = status.get("phase")
    style = "bold green" if phase == "Succeeded" else "bold red"
    console.print(
        f"\n[{style}]DFlashRun {namespace}/{name}: {phase}[/{style}]  {status.get('message') or ''}"
    )
    console.print(build_phase_table(timeline))
    training = status.get("training") or {}
    evaluation = (status.get("stages") or {}).get("evaluation") or {}
    facts = [
        ("drafter (servable)", status.get("drafterUri")),
        ("acceptance length", _rounded(status.get("acceptanceLength"))),
        ("per-position acceptance", _rounded(evaluation.get("perPositionAcceptance"))),
        (
            "training",
            f"{training.get('step')} steps, final loss {training.get('loss')}"
            if training
            else None,
        ),
        ("newest checkpoint", (status.get("checkpoint") or {}).get("uri")),
        ("audit", status.get("auditVerdict")),
    ]
    for label, value in facts:
        if value is not None:
            console.print(f"  {label:24} {value}", highlight=False)


def print_next_commands(console: Console, name: str, namespace: str, kubeconfig: Path) -> None:
    console.print("\nnext:")
    console.print(f"  export KUBECONFIG={kubeconfig}", highlight=False)
    console.print(
        f"  export PATH={BIN_DIRS}:$PATH   # kubectl, helm, kubectl-dflash", highlight=False
    )
    console.print(f"  kubectl dflash status {name} -n {namespace}", highlight=False)
    console.print(f"  kubectl get dfr -o wide -n {namespace}", highlight=False)
    console.print(f"  kubectl dflash audit {name} -n {namespace}", highlight=False)
    console.print("  make demo-broken-data      # the incident replayed: the gate stops it")
    console.print("  make down                  # stop everything the demo started")
