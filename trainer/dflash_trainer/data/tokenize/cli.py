"""`python -m dflash_trainer.data.tokenize`: the tokenization Job's entry point.

Exit 0 with a termination summary when `tokenized/_SUCCESS.json` is written (or already was),
2 on bad input, including a chat template that cannot mask the data correctly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dflash_trainer.data.audit.vocab import VocabInfo
from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.stage_result import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_OK, finish_stage
from dflash_trainer.data.tokenize.core import TRUNCATED_POLICIES, TokenizeSettings
from dflash_trainer.data.tokenize.stage import (
    MANIFEST,
    StageSettings,
    build_manifest,
    plan_jobs,
    run_shards,
)
from dflash_trainer.data.uris import to_local_uri
from dflash_trainer.storage import StorageError, join_uri, read_json, store_for, write_json
from dflash_trainer.versions import VersionError, require_supported_versions

DEFAULT_MAX_SEQ_LEN = 3072  # the DFlash paper's training length
# A template that cannot mask 1% of rows drops them and goes on; more is a wrong template.
DEFAULT_MISMATCH_RATE = 0.01


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dflash_trainer.data.tokenize",
        description="Chat-template and tokenize regenerated completions into input_ids/loss_mask.",
    )
    p.add_argument("--run-root", required=True, help="run root (s3:// prefix or folder)")
    p.add_argument(
        "--model", required=True, help="target model: folder, s3:// or pvc:// prefix, or hub id"
    )
    p.add_argument("--revision", help="model revision (hub ids)")
    p.add_argument("--input", help="completions to tokenize (default: <run-root>/regen)")
    p.add_argument("--output", help="output folder (default: <run-root>/tokenized)")
    p.add_argument("--max-seq-len", type=int, default=DEFAULT_MAX_SEQ_LEN)
    p.add_argument(
        "--thinking",
        "--enable-thinking",
        dest="enable_thinking",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the answers were generated with enable_thinking (default on)",
    )
    p.add_argument("--supervise", choices=("last", "all"), default="last",
                   help="last: the row's answer; all: every assistant turn (append-only templates)")  # fmt: skip
    p.add_argument("--end-of-turn", help="end-of-turn token (default: the tokenizer's eos)")
    p.add_argument("--chat-template", help="Jinja file overriding the tokenizer's chat template")
    p.add_argument("--max-template-mismatch-rate", type=float, default=DEFAULT_MISMATCH_RATE,
                   help="fraction of rows the template may fail to mask before the stage fails "
                        "(spec.tokenization.maxTemplateMismatchRate; default 0.01)")  # fmt: skip
    p.add_argument("--truncated-answers", choices=TRUNCATED_POLICIES, default="drop",
                   help="answers cut by the generation limit: drop them (default) or keep them "
                        "without an end of turn (spec.tokenization.truncatedAnswers)")  # fmt: skip
    p.add_argument("--max-new-tokens", type=int,
                   help="the generation limit: rows without finish_reason that reach it count "
                        "as cut (spec.regeneration.maxNewTokens)")  # fmt: skip
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes; 1 (default) encodes with the tokenizer's own threads on every core, "
        "which measured fastest for thinking-length rows",
    )
    p.add_argument("--termination-log", help="default /dev/termination-log when it exists")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    from dflash_trainer.data.target import (
        THINK_END,
        THINK_START,
        load_tokenizer,
        single_token_id,
        token_ids,
    )

    if args.max_seq_len < 2:
        raise BadInputError(f"--max-seq-len {args.max_seq_len}: must be at least 2")
    if not 0 <= args.max_template_mismatch_rate <= 1:
        raise BadInputError(
            f"--max-template-mismatch-rate {args.max_template_mismatch_rate}: must be in [0, 1]"
        )
    for name in ("run_root", "input", "output"):
        if getattr(args, name):
            setattr(args, name, to_local_uri(getattr(args, name)))
    output = args.output or join_uri(args.run_root, "tokenized")
    manifest_uri = join_uri(output, MANIFEST)
    base = {"stage": "tokenize", "manifestUri": manifest_uri}
    if store_for(manifest_uri).exists(manifest_uri):
        done = read_json(manifest_uri)
        return (
            base
            | _summary(done)
            | {"ok": True, "skipped": True, "message": "already tokenized; nothing to do"}
        )
    tokenizer = load_tokenizer(args.model, args.revision)
    ids = token_ids(tokenizer, args.end_of_turn)
    eot = args.end_of_turn or tokenizer.eos_token
    override = Path(args.chat_template).read_text(encoding="utf-8") if args.chat_template else None
    settings = StageSettings(
        model_dir=args.model,
        revision=args.revision,
        chat_template=override,
        tokenize=TokenizeSettings(
            args.max_seq_len,
            eot,
            args.enable_thinking,
            args.supervise,
            args.truncated_answers,
            args.max_new_tokens,
        ),
    )
    jobs = plan_jobs(args.input or join_uri(args.run_root, "regen"), output)
    stats, reused = run_shards(jobs, settings, args.workers)
    mismatched = sum(sum(s.get("templateMismatches", {}).values()) for s in stats)
    rows = sum(int(s["rows"]) for s in stats) + mismatched
    if rows and mismatched / rows > args.max_template_mismatch_rate:
        examples = [e for s in stats for e in s.get("mismatchExamples", [])][:3]
        raise BadInputError(
            f"the chat template cannot mask {mismatched} of {rows} rows "
            f"({mismatched / rows:.1%}, allowed {args.max_template_mismatch_rate:.1%}); first: "
            + " | ".join(examples)
        )
    template = ChatTemplate.from_tokenizer(tokenizer, override)
    vocab = VocabInfo.from_tokenizer(tokenizer, template, args.enable_thinking)
    extra = {
        "model": args.model,
        "tokenizer": vocab.to_manifest()
        | {
            "endOfTurnId": ids.end_of_turn,
            "thinkStartId": single_token_id(tokenizer, THINK_START),
            "thinkEndId": single_token_id(tokenizer, THINK_END),
            "vocabSize": ids.vocab_size,
        },
    }
    manifest = build_manifest(stats, settings, extra)
    write_json(manifest_uri, manifest)
    return (
        base
        | _summary(manifest)
        | {
            "ok": True,
            "skipped": False,
            "reusedShards": reused,
            "message": f"tokenized {manifest['samples']} samples, {manifest['tokens']} tokens "
            f"({manifest['supervisedTokens']} supervised) into {len(stats)} shards",
        }
    )


def _summary(manifest: Any) -> dict[str, Any]:
    m = manifest if isinstance(manifest, dict) else {}
    return {
        "samples": m.get("samples", 0),
        "tokens": m.get("tokens", 0),
        "supervisedTokens": m.get("supervisedTokens", 0),
        "truncated": m.get("truncated", 0),
        "drift": m.get("drift", 0),
        "shards": len(m.get("shards", [])),
        "truncatedAnswers": {
            k: v for k, v in (m.get("truncatedAnswers") or {}).items() if k != "perSource"
        },
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        require_supported_versions(with_torch=False)
        payload = run(args)
    except (BadInputError, VersionError) as exc:
        return finish_stage(
            {"stage": "tokenize", "ok": False, "message": str(exc)},
            EXIT_BAD_INPUT,
            args.termination_log,
        )
    except StorageError as exc:
        return finish_stage(
            {"stage": "tokenize", "ok": False, "message": str(exc)},
            EXIT_ERROR,
            args.termination_log,
        )
    print(payload["message"], flush=True)
    return finish_stage(payload, EXIT_OK, args.termination_log)


if __name__ == "__main__":
    sys.exit(main())
