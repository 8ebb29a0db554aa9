"""The prompts gate: ingest every source as the regenerate stage would, and judge what was read.

Examples are the file:line of rejected rows; prompt lengths are measured when a target is given.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dflash_trainer.data.audit.checks import Verdict, evaluate
from dflash_trainer.data.audit.metrics import GateMetrics
from dflash_trainer.data.audit.metrics_prompts import build_prompt_metrics, count_overlong
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.ingest import MALFORMED_KINDS, IngestStats, iter_prompts
from dflash_trainer.data.sources import SourceSpec, load_sources

ISSUES_OF_CHECK = {
    "malformed_rate": MALFORMED_KINDS,
    "role_error_rate": ("role",),
    "empty_prompt_rate": ("empty_prompt",),
}


def load_prompt_sources(path: str, source_format: str | None) -> list[SourceSpec]:
    if path.endswith((".yaml", ".yml")):
        return load_sources(path)
    if not source_format:
        raise BadInputError(f"{path}: a single data file needs --format (its source format)")
    name = path.rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0] or "source"
    try:
        return [SourceSpec(name=name, uri=path, format=source_format)]  # type: ignore[arg-type]
    except ValueError as exc:
        raise BadInputError(
            f"--format {source_format!r}: {str(exc).splitlines()[-1].strip()}"
        ) from None


def build_prompt_length_fn(
    args: argparse.Namespace, enable_thinking: bool
) -> Callable[[list[list[dict[str, Any]]]], list[int]]:
    """Token length of each prompt as the engine will see it (template + generation prompt)."""
    from dflash_trainer.data.chat_template import ChatTemplate
    from dflash_trainer.data.target import load_tokenizer

    tokenizer = load_tokenizer(args.model, args.revision)
    override = Path(args.chat_template).read_text(encoding="utf-8") if args.chat_template else None
    template = ChatTemplate.from_tokenizer(tokenizer, override)
    backend = tokenizer.backend_tokenizer

    def lengths(conversations: list[list[dict[str, Any]]]) -> list[int]:
        texts = [template.render(c, True, enable_thinking) for c in conversations]
        return [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]

    return lengths


def collect_issue_examples(stats: IngestStats, verdict: Verdict) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for violation in verdict.violations:
        kinds = ISSUES_OF_CHECK.get(violation.check)
        if not kinds:
            continue
        rows = []
        for source in stats.sources.values():
            if violation.sources and source.name not in violation.sources:
                continue
            for kind in kinds:
                rows += [
                    {"source": source.name, "kind": kind, "where": e}
                    for e in source.examples.get(kind, [])
                ]
        out[violation.check] = rows[:5]
    return out


def run_prompts_gate(
    args: argparse.Namespace, path: str, thresholds: Thresholds
) -> tuple[GateMetrics, Verdict, dict[str, Any], dict[str, list[dict[str, Any]]]]:
    sources = load_prompt_sources(path, args.source_format)
    stats = IngestStats()
    records = iter_prompts(sources, stats)
    overlong: Counter[str] | None = None
    if args.model and args.max_model_len:
        lengths = build_prompt_length_fn(args, thresholds.expect_thinking)
        overlong = count_overlong(records, lengths, args.max_model_len - args.max_tokens)
    else:
        for _ in records:
            pass
    metrics = build_prompt_metrics(stats, overlong)
    verdict = evaluate(metrics, thresholds)
    info = {
        "sources": len(sources),
        "maxModelLen": args.max_model_len,
        "maxTokens": args.max_tokens,
    }
    return metrics, verdict, info, collect_issue_examples(stats, verdict)
