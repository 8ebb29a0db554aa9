"""`dflash-audit` / `python -m dflash_trainer.data.audit`: run one gate, write the report, exit
0 (pass), 3 (gate failed) or 2 (unreadable input). Command lines: docs/stage-cli.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from dflash_trainer.data.audit.checks import LIKELIHOOD_CHECK, Verdict, evaluate
from dflash_trainer.data.audit.completion_features import CompletionSettings
from dflash_trainer.data.audit.dataset import (
    COMPLETIONS_COLUMNS,
    TOKENIZED_MANIFEST,
    TOKENS_COLUMNS,
    check_columns,
    coalesce,
    detect_gate,
    iter_batches,
    read_schema,
    resolve_files,
)
from dflash_trainer.data.audit.examples import ExampleCollector
from dflash_trainer.data.audit.likelihood import (
    ScoredSample,
    attach_likelihood,
    judge_scores,
    least_likely_rows,
    off_examples,
)
from dflash_trainer.data.audit.likelihood_scoring import (
    build_sampling_rule,
    load_scores,
    resolve_scores,
    score_here,
)
from dflash_trainer.data.audit.metrics import GateMetrics
from dflash_trainer.data.audit.metrics_completions import CompletionsAccumulator
from dflash_trainer.data.audit.metrics_tokens import TokenAuditSettings, TokensAccumulator
from dflash_trainer.data.audit.prompts_gate import run_prompts_gate
from dflash_trainer.data.audit.report import AuditReport, build_plots, write_report
from dflash_trainer.data.audit.summary import build_console_summary, build_stage_payload
from dflash_trainer.data.audit.thresholds import Thresholds, load_thresholds
from dflash_trainer.data.audit.vocab import VocabInfo
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.regenerate.engine import SamplingSpec
from dflash_trainer.data.stage_result import (
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    EXIT_GATE_FAILED,
    EXIT_OK,
    finish_stage,
)
from dflash_trainer.data.uris import to_local_uri
from dflash_trainer.storage import StorageError, join_uri, read_json, store_for
from dflash_trainer.version import trainer_version

GATES = ("prompts", "completions", "tokens")
TOKENS_BATCH_ROWS = 16384
# Completions carry their text and ids (thousands of tokens a row): smaller batches keep the
# per-batch n-gram sort and text buffers well under the memory budget.
COMPLETIONS_BATCH_ROWS = 2048
# Arrow IPC files come in the writer's batches (1,000 rows for HF datasets): join them up to this
# (without a copy), the tokens gate's batch size: its calls are per table, its passes over the
# tokens per chunk (~8% less time than 4,096-row tables, measured on the seed dataset).
COALESCE_ROWS = TOKENS_BATCH_ROWS
RUN_ROOT_INPUT = {"completions": "regen", "tokens": "tokenized"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dflash-audit",
        description="Audit a DFlash dataset: prompts, regenerated completions or tokenized data.",
    )
    p.add_argument("--version", action="version", version=f"dflash-audit {trainer_version()}")
    p.add_argument(
        "path", nargs="?", help="dataset file/folder/s3 prefix, or sources.yaml (prompts)"
    )
    p.add_argument("--gate", choices=GATES, help="default: detected from the columns")
    p.add_argument("--sources", help="prompts gate: sources.yaml (instead of PATH)")
    p.add_argument(
        "--run-root", help="run root (s3:// or folder): default input and report location"
    )
    p.add_argument(
        "--thresholds", help="YAML/JSON file of thresholds (spec.audit); default: built-in"
    )
    p.add_argument(
        "--out",
        help="report folder or s3 prefix (default: <run-root>/audit/<gate>, else ./audit-<gate>)",
    )
    p.add_argument(
        "--model",
        help="target model folder, s3/pvc prefix or hub id: decodes examples, finds think tokens",
    )
    p.add_argument("--revision", help="model revision (hub ids)")
    p.add_argument(
        "--chat-template", help="Jinja file overriding the target's chat template (prompt lengths)"
    )
    p.add_argument(
        "--block-size", type=int, default=16, help="DFlash block size (anchors need block+1 tokens)"
    )
    p.add_argument(
        "--max-seq-len", type=int, help="training maxSeqLen (tokens gate truncation check)"
    )
    p.add_argument(
        "--format", dest="source_format", help="prompts gate on one data file: its source format"
    )
    p.add_argument("--max-model-len", type=int, help="prompts gate: the engine's context length")
    p.add_argument(
        "--max-new-tokens",
        "--max-tokens",
        dest="max_tokens",
        type=int,
        default=0,
        help="the generation limit (spec.regeneration.maxNewTokens): prompts gate, room kept "
        "for the answer; completions gate, answers at it were cut (silent truncation)",
    )
    p.add_argument(
        "--no-thinking", action="store_true", help="answers were generated with thinking off"
    )
    p.add_argument(
        "--batch-rows",
        type=int,
        help="rows per batch (default: 16384 for tokens, 2048 for completions: long answers)",
    )
    likelihood = p.add_argument_group(
        "target likelihood (completions and tokens gates; docs/audit-gates.md section 8)"
    )
    likelihood.add_argument(
        "--scores",
        help="scores to judge (a folder with scores.parquet: the canary's, the score stage's); "
        "default: score here when --model is a folder with weights",
    )
    likelihood.add_argument(
        "--score-samples",
        type=int,
        metavar="N",
        help="rows per source to score with --model's weights (default: samplesPerSource of "
        "the thresholds, 64); 0 skips the likelihood check",
    )
    likelihood.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                            help="where --model scores (cpu: float32, cuda: bfloat16)")  # fmt: skip
    likelihood.add_argument("--force-cpu-scoring", action="store_true",
                            help="score on CPU although the memory and time estimate says the "
                            "target does not fit (see the estimate printed first)")  # fmt: skip
    sampling = SamplingSpec()
    likelihood.add_argument("--temperature", type=float, default=sampling.temperature,
                            help="the sampling the answers were generated with (0: greedy)")  # fmt: skip
    likelihood.add_argument("--top-p", type=float, default=sampling.top_p)
    likelihood.add_argument("--top-k", type=int, default=sampling.top_k, help="0: none")
    likelihood.add_argument("--min-p", type=float, default=sampling.min_p)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true", help="print only the verdict line")
    p.add_argument(
        "--termination-log",
        help="where to write the stage summary (default /dev/termination-log if present)",
    )
    return p


def default_out(args: argparse.Namespace, gate: str) -> str:
    if args.out:
        return str(args.out)
    if args.run_root:
        return join_uri(args.run_root, "audit", gate)
    return str(Path.cwd() / f"audit-{gate}")


def resolve_input(args: argparse.Namespace) -> tuple[str, str]:
    """(gate, input path) from the arguments; BadInputError when it cannot be decided."""
    path = args.path
    gate = args.gate
    if path is None and args.sources and gate in (None, "prompts"):
        path, gate = args.sources, "prompts"
    if path is None:
        if not (args.run_root and gate in RUN_ROOT_INPUT):
            raise BadInputError(
                "give a dataset path, --sources FILE (prompts gate), or --run-root with "
                "--gate completions|tokens"
            )
        path = join_uri(args.run_root, RUN_ROOT_INPUT[gate])
    if gate is None:
        if path.endswith((".yaml", ".yml", ".jsonl", ".jsonl.gz", ".jsonl.zst", ".json")):
            gate = "prompts"
        else:
            gate = detect_gate(read_schema(resolve_files(path)[0]))
            if gate is None:
                raise BadInputError(
                    f"{path}: cannot tell the gate from its columns; pass --gate "
                    f"(tokens needs {', '.join(TOKENS_COLUMNS)}; completions needs "
                    f"{', '.join(COMPLETIONS_COLUMNS)})"
                )
    return gate, path


def tokenized_manifest(path: str) -> dict[str, Any]:
    uri = join_uri(path.rstrip("/"), TOKENIZED_MANIFEST)
    try:
        if store_for(uri).exists(uri):
            data = read_json(uri)
            return data if isinstance(data, dict) else {}
    except StorageError:
        return {}
    return {}


def load_vocab(
    args: argparse.Namespace, tokenizer: Any, manifest: dict[str, Any]
) -> VocabInfo | None:
    """The vocabulary facts the gates use: from the tokenizer (`--model`), else the tokenize
    stage's manifest, else unknown."""
    if tokenizer is not None:
        from dflash_trainer.data.chat_template import ChatTemplate

        override = (
            Path(args.chat_template).read_text(encoding="utf-8") if args.chat_template else None
        )
        try:
            template = ChatTemplate.from_tokenizer(tokenizer, override)
        except BadInputError:
            template = None
        return VocabInfo.from_tokenizer(tokenizer, template, not args.no_thinking)
    info = manifest.get("tokenizer")
    return VocabInfo.from_manifest(info) if isinstance(info, dict) else None


def token_settings(
    args: argparse.Namespace, manifest: dict[str, Any], vocab: VocabInfo | None
) -> TokenAuditSettings:
    return TokenAuditSettings(
        block_size=args.block_size,
        max_seq_len=args.max_seq_len or manifest.get("maxSeqLen"),
        think_start_id=vocab.think_start if vocab else None,
        think_end_id=vocab.think_end if vocab else None,
        vocab=vocab,
    )


def add_tokenize_counts(metrics: GateMetrics, manifest: dict[str, Any]) -> None:
    """What the tokenize stage did with cut answers, per source, into the report."""
    answers = manifest.get("truncatedAnswers")
    if not isinstance(answers, dict):
        return
    per_source = answers.get("perSource") or {}
    for name, group in metrics.sources.items():
        counts = per_source.get(name)
        if isinstance(counts, dict):
            group.details["truncatedAnswers"] = {"policy": answers.get("policy")} | counts
    metrics.overall.details["truncatedAnswers"] = {
        k: v for k, v in answers.items() if k != "perSource"
    }


def run_dataset_gate(
    args: argparse.Namespace, gate: str, path: str, thresholds: Thresholds, out: str
) -> tuple[GateMetrics, Verdict, dict[str, Any], dict[str, list[dict[str, Any]]]]:
    files = resolve_files(path)
    required = TOKENS_COLUMNS if gate == "tokens" else COMPLETIONS_COLUMNS
    for uri in files[:1]:
        check_columns(uri, read_schema(uri), required, gate)
    scores = resolve_scores(args, thresholds.samples_per_source)
    tokenizer = None
    if args.model:
        from dflash_trainer.data.target import load_tokenizer

        tokenizer = load_tokenizer(args.model, args.revision)
    manifest = tokenized_manifest(path) if gate == "tokens" else {}
    vocab = load_vocab(args, tokenizer, manifest)
    settings = token_settings(args, manifest, vocab) if gate == "tokens" else None
    completion_settings = CompletionSettings(vocab=vocab, max_new_tokens=args.max_tokens or None)
    acc: TokensAccumulator | CompletionsAccumulator
    acc = (
        TokensAccumulator(settings, thresholds)
        if settings
        else CompletionsAccumulator(thresholds, completion_settings)
    )
    try:
        batches = iter_batches(files, acc.columns(), args.batch_rows)
        for batch in coalesce(batches, min(args.batch_rows, COALESCE_ROWS)):
            acc.add(batch)
    except ValueError as exc:  # data the gate cannot read as what it claims to be
        raise BadInputError(f"{path}: {exc}") from None
    metrics = acc.finish()
    if gate == "tokens":
        add_tokenize_counts(metrics, manifest)
    sample: ScoredSample | None = None
    if scores.uri is None:
        metrics.notes.append(f"the target-likelihood check was skipped: {scores.why}")
    else:
        per_source = (
            thresholds.samples_per_source if args.score_samples is None else args.score_samples
        )
        rule = build_sampling_rule(args, thresholds.top_k)
        uri = scores.uri or score_here(args, gate, files, tokenizer, rule, per_source, out)
        table, meta = load_scores(uri)
        sample = judge_scores(table, meta, uri, thresholds)
        attach_likelihood(metrics, sample)
    verdict = evaluate(metrics, thresholds)
    decode = None if tokenizer is None else (lambda ids: tokenizer.decode(ids))
    examples: dict[str, list[dict[str, Any]]] = {}
    if verdict.violations:
        collector = ExampleCollector(
            metrics, verdict.violations, thresholds, settings, decode, completion_settings
        )
        if collector.wanted:
            examples = collector.collect(iter_batches(files, collector.columns(), args.batch_rows))
    info: dict[str, Any] = {"files": len(files), "blockSize": args.block_size}
    if settings is not None:
        info |= {"maxSeqLen": settings.max_seq_len, "thinkEndId": settings.think_end_id}
    else:
        info |= {"maxNewTokens": completion_settings.max_new_tokens}
    info["likelihood"] = build_likelihood_info(sample, scores.why, decode)
    failed = next((v for v in verdict.violations if v.check == LIKELIHOOD_CHECK), None)
    if sample is not None and failed is not None:
        examples[LIKELIHOOD_CHECK] = off_examples(sample, failed.sources, decode)
    return metrics, verdict, info, examples


def build_likelihood_info(sample: ScoredSample | None, why: str, decode: Any) -> dict[str, Any]:
    """The report's `likelihood` section: how the rows were scored, or why they were not."""
    if sample is None:
        return {"skipped": why}
    rule = sample.meta.rule
    sampling = (
        "greedy decoding"
        if rule.greedy
        else (
            f"temperature {rule.temperature:g}, top-p {rule.top_p:g}, top-k {rule.top_k or 'none'}"
            + (f", min-p {rule.min_p:g}" if rule.min_p else "")
        )
    )
    return {
        "scoresUri": sample.uri,
        "scorer": sample.meta.scorer,
        "model": sample.meta.model,
        "sampling": sampling,
        "rule": rule.to_json(),
        "rowRule": {
            "engineTolerance": sample.rule.engine_tolerance,
            "nllTolerance": sample.rule.nll_tolerance,
            "rowOutsideShare": sample.rule.row_outside_share,
            "rowZ": sample.rule.row_z,
        },
        "topK": rule.share_k,
        "leastLikely": least_likely_rows(sample, decode),
    }


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    for name in ("path", "run_root", "out", "thresholds", "sources", "scores"):
        if getattr(args, name):
            setattr(args, name, to_local_uri(getattr(args, name)))
    gate, path = resolve_input(args)
    thresholds = load_thresholds(args.thresholds)
    if args.no_thinking:
        thresholds = thresholds.model_copy(update={"expect_thinking": False})
    if args.batch_rows is None:
        args.batch_rows = COMPLETIONS_BATCH_ROWS if gate == "completions" else TOKENS_BATCH_ROWS
    out = default_out(args, gate)
    if gate == "prompts":
        metrics, verdict, info, examples = run_prompts_gate(args, path, thresholds)
    else:
        metrics, verdict, info, examples = run_dataset_gate(args, gate, path, thresholds, out)
    info["seconds"] = round(time.monotonic() - started, 3)
    likelihood = info.pop("likelihood", {})
    report = AuditReport(gate, path, verdict, metrics, thresholds, info, examples)
    report.likelihood = likelihood
    if not args.no_plots:
        report.plots = build_plots(metrics, thresholds)
    report_uri = write_report(report, out)
    print(build_console_summary(report, report_uri, quiet=args.quiet))
    payload = build_stage_payload(report, report_uri)
    return finish_stage(
        payload, EXIT_OK if verdict.passed else EXIT_GATE_FAILED, args.termination_log
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except BadInputError as exc:
        payload = {"stage": "audit", "ok": False, "gate": args.gate, "message": str(exc)}
        return finish_stage(payload, EXIT_BAD_INPUT, args.termination_log)
    except StorageError as exc:
        payload = {"stage": "audit", "ok": False, "gate": args.gate, "message": str(exc)}
        return finish_stage(payload, EXIT_ERROR, args.termination_log)


if __name__ == "__main__":
    sys.exit(main())
