"""The live view: polls the DFlashRun's status and shows its phase, a progress bar per stage,
the training loss and the newest checkpoint; records when each phase was first seen.

On a terminal it redraws one panel (rich); elsewhere (CI, a pipe) it prints a line per change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

POLL_SECONDS = 2.0
# Phases a run stops in (AuditFailed waits for a person; Suspended for spec.suspend=false).
STOP_PHASES = ("Succeeded", "Failed", "AuditFailed", "Suspended")
PIPELINE = (
    "Pending", "Regenerating", "AuditingCompletions", "Tokenizing", "AuditingTokens",
    "Training", "Evaluating", "Succeeded",
)  # fmt: skip


@dataclass
class Timeline:
    """When each phase was first seen, in seconds since the watch started."""

    started: float = field(default_factory=time.monotonic)
    phases: dict[str, float] = field(default_factory=dict)
    ended: float | None = None

    def see(self, phase: str) -> bool:
        if phase in self.phases:
            return False
        self.phases[phase] = time.monotonic() - self.started
        return True

    def durations(self) -> list[tuple[str, float]]:
        """(phase, seconds spent in it) in the order they were seen."""
        order = sorted(self.phases.items(), key=lambda item: item[1])
        end = (self.ended or time.monotonic()) - self.started
        out = []
        for index, (phase, at) in enumerate(order):
            following = order[index + 1][1] if index + 1 < len(order) else end
            out.append((phase, following - at))
        return out

    @property
    def total(self) -> float:
        return (self.ended or time.monotonic()) - self.started


def _bar(done: float, total: float, width: int = 30) -> ProgressBar:
    return ProgressBar(total=max(total, 1), completed=min(done, total), width=width)


def build_rows(status: dict[str, Any]) -> list[tuple[str, float | None, float | None, str]]:
    """(label, done, total, text) per stage the status knows about: pure, for the view."""
    rows: list[tuple[str, float | None, float | None, str]] = []
    canary = (status.get("stages") or {}).get("canary") or {}
    if canary:
        text = f"{canary.get('samples', 0)} samples, {canary.get('outputTokens', 0)} tokens"
        rows.append(("canary", None, None, text))
    audit = status.get("audit") or {}
    if audit.get("canary"):
        result = audit["canary"]
        approved = " (approved)" if result.get("approved") else ""
        rows.append(("audit canary", None, None, f"{result.get('verdict', '?')}{approved}"))
    regen = (status.get("stages") or {}).get("regeneration") or {}
    if regen:
        done, total = regen.get("samples", 0), regen.get("samplesTotal") or 0
        text = f"shards {regen.get('shardsDone', 0)}/{regen.get('shardsTotal', '?')}"
        text += f", {done}/{total or '?'} samples, {regen.get('outputTokens', 0)} tokens"
        rows.append(("regenerate", done, total or None, text))
    audit = status.get("audit") or {}

    def gate_row(gate: str) -> None:
        result = audit.get(gate)
        if result:
            approved = " (approved)" if result.get("approved") else ""
            rows.append((f"audit {gate}", None, None, f"{result.get('verdict', '?')}{approved}"))

    gate_row("prompts")
    gate_row("completions")
    tokenized = (status.get("stages") or {}).get("tokenization") or {}
    if tokenized:
        text = f"{tokenized.get('samples', 0)} samples, {tokenized.get('tokens', 0)} tokens"
        text += f" ({tokenized.get('supervisedTokens', 0)} supervised)"
        rows.append(("tokenize", None, None, text))
    gate_row("tokens")
    training = status.get("training") or {}
    if training:
        step, total = training.get("step", 0), training.get("totalSteps") or 0
        parts = [f"step {step}/{total or '?'}"]
        if training.get("loss") is not None:
            parts.append(f"loss {training['loss']:.3f}")
        if training.get("accuracy") is not None:
            parts.append(f"acc {training['accuracy']:.2f}")
        if training.get("etaSeconds") is not None:
            parts.append(f"ETA {training['etaSeconds']:.0f}s")
        rows.append(("train", step, total or None, ", ".join(parts)))
    checkpoint = status.get("checkpoint") or {}
    if checkpoint:
        rows.append(
            ("checkpoint", None, None, f"step {checkpoint.get('step')}: {checkpoint.get('uri')}")
        )
    evaluation = (status.get("stages") or {}).get("evaluation") or {}
    if evaluation:
        rows.append(
            ("evaluate", None, None, f"acceptance length {evaluation.get('acceptanceLength')}")
        )
    return rows


def render(name: str, status: dict[str, Any], timeline: Timeline) -> Group:
    phase = status.get("phase", "Pending")
    header = Text.assemble(
        ("DFlashRun ", "bold"), (name, "bold cyan"), "  phase ",
        (phase, "bold green" if phase == "Succeeded" else "bold yellow"),
        f"  {timeline.total:.0f}s",
    )  # fmt: skip
    steps = Text("  ")
    reached = PIPELINE.index(phase) if phase in PIPELINE else -1
    for index, step in enumerate(PIPELINE):
        done = index < reached or (step in timeline.phases and step != phase)
        steps.append(step, "bold yellow" if step == phase else "green" if done else "dim")
        steps.append(" > " if step != PIPELINE[-1] else "")
    table = Table.grid(padding=(0, 2))
    for label, done, total, text in build_rows(status):
        bar: Any = _bar(done or 0, total) if total else Text("")
        table.add_row(Text(label, "bold"), bar, Text(text))
    message = Text(status.get("message") or "", "dim")
    return Group(header, steps, table, message)


def _line(status: dict[str, Any]) -> str:
    parts = [status.get("phase", "Pending"), status.get("progress") or ""]
    training = status.get("training") or {}
    if training.get("totalSteps") and status.get("phase") == "Training":
        parts.append(f"step {training.get('step', 0)}/{training['totalSteps']}")
    if training.get("loss") is not None:
        parts.append(f"loss {training['loss']:.3f}")
    return "  ".join(p for p in parts if p)


def watch_run(
    name: str,
    get_status: Callable[[], dict[str, Any] | None],
    timeout: float,
    console: Console | None = None,
    stop_phases: tuple[str, ...] = STOP_PHASES,
) -> tuple[dict[str, Any], Timeline]:
    """Poll until the run reaches one of `stop_phases` (or `timeout`); return (status, timeline)."""
    console = console or Console()
    timeline = Timeline()
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    last_line = ""

    def poll() -> bool:
        nonlocal status, last_line
        status = get_status() or {}
        phase = status.get("phase", "Pending")
        timeline.see(phase)
        if not console.is_terminal:
            line = _line(status)
            if line != last_line:
                console.print(f"[{timeline.total:5.0f}s] {line}", highlight=False)
                last_line = line
        return phase in stop_phases

    if console.is_terminal:
        with Live(render(name, status, timeline), console=console, refresh_per_second=2) as live:
            while not poll() and time.monotonic() < deadline:
                live.update(render(name, status, timeline))
                time.sleep(POLL_SECONDS)
            live.update(render(name, status, timeline))
    else:
        while not poll() and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
    timeline.ended = time.monotonic()
    return status, timeline
