"""What the demo uploads to S3: the tiny target (built once, cached) and small prompt sources in
several formats; for the broken-data demo, a regenerated source that is 87% stubs.

The source files are pure builders (bytes); the upload and the target build are the only I/O.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_dev.errors import DevError
from dflash_dev.paths import REPO_ROOT, cache_root, venv_bin

# The tiny target: 6 layers (tiny-cpu.yaml taps layers 1 and 3). 200 steps of the format
# lesson make it answer in the chat format (think block, answer, end of turn) so that the
# default gates pass; pure random weights fail them (empty and truncated answers).
TARGET_LAYERS = 6
TEACH_STEPS = 200
# Bump when the target's recipe changes, so cached builds are not reused.
TARGET_RECIPE = 1
# The incident: 87% of samples were the 6-token stub `<think>\n\n</think>\n\nOK.<|im_end|>`.
STUB_SHARE = 0.87
STUB_ANSWER = "OK."
STUB_TOKENS = 6


@dataclass(frozen=True)
class SourceFile:
    """One object to upload: `key` under the data prefix, in `format`."""

    name: str
    key: str
    format: str
    body: bytes
    # Imported completions: the sampling they say they were generated with
    # (`spec.data.sources[].sampling`); None: unknown, the likelihood check judges none of them.
    sampling: dict[str, Any] | None = None


# ---------------------------------------------------------------- prompt sources
def _jsonl(records: Iterable[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def _parquet(records: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records), out)
    return out.getvalue()


def build_prompt_sources(per_source: int, seed: int = 0) -> list[SourceFile]:
    """Four sources of `per_source` distinct prompts each, one format (and encoding) apiece:
    openai-messages JSONL, sharegpt JSONL.gz, alpaca Parquet, prompt-only JSONL."""
    from dflash_trainer.tiny.prompts import build_prompts

    prompts = build_prompts(4 * per_source, seed)
    chunks = [prompts[i * per_source : (i + 1) * per_source] for i in range(4)]
    chat = [{"messages": [{"role": "user", "content": p}]} for p in chunks[0]]
    sharegpt = [
        {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "(dropped)"}]}
        for p in chunks[1]
    ]
    alpaca = [{"instruction": p, "input": "", "output": "(dropped)"} for p in chunks[2]]
    plain = [{"prompt": p} for p in chunks[3]]
    return [
        SourceFile("chat", "data/chat.jsonl", "openai-messages", _jsonl(chat)),
        SourceFile(
            "sharegpt", "data/sharegpt.jsonl.gz", "sharegpt", gzip.compress(_jsonl(sharegpt))
        ),
        SourceFile("alpaca", "data/alpaca.parquet", "alpaca", _parquet(alpaca)),
        SourceFile("questions", "data/questions.jsonl", "prompt-only", _jsonl(plain)),
    ]


def build_regenerated_rows(
    conversations: list[list[dict[str, Any]]], stub_share: float, seed: int = 0
) -> list[dict[str, Any]]:
    """`regenerated`-format rows: `stub_share` of them the incident's stub (empty thinking,
    "OK."), the rest the conversation's reasoning trace and answer."""
    rng = random.Random(seed)  # noqa: S311 - deterministic demo data, not security
    stubs = set(rng.sample(range(len(conversations)), round(len(conversations) * stub_share)))
    rows = []
    for index, (user, assistant) in enumerate(conversations):
        stub = index in stubs
        row: dict[str, Any] = {
            "prompt": user["content"],
            "response": STUB_ANSWER if stub else assistant["content"],
            "reasoning": "" if stub else assistant["reasoning_content"],
            "finish_reason": "stop",
        }
        if stub:
            row["num_output_tokens"] = STUB_TOKENS
        rows.append(row)
    return rows


def build_broken_sources(
    per_source: int, seed: int = 0, own_answers: list[dict[str, Any]] | None = None
) -> list[SourceFile]:
    """The incident replayed: `openorca` (regenerated elsewhere, 87% stubs), `magicoder`
    (regenerated elsewhere, healthy: `own_answers`, the target's own answers to its prompts
    from an earlier regeneration, `ensure_own_answers`; without them, text of the tiny
    corpus) and `questions` (prompts the target answers itself); distinct prompts throughout,
    so deduplication keeps every row."""
    from dflash_trainer.tiny.prompts import build_conversations

    conversations = build_conversations(3 * per_source, seed)
    broken = build_regenerated_rows(conversations[:per_source], STUB_SHARE, seed)
    healthy = own_answers or build_regenerated_rows(
        conversations[per_source : 2 * per_source], 0.0, seed
    )
    prompts = [{"prompt": conv[0]["content"]} for conv in conversations[2 * per_source :]]
    # Both imported sources say what the incident's supplier said: the target's own greedy
    # answers (the demo's sampling). The likelihood check holds them to it.
    greedy = {"temperature": 0.0}
    return [
        SourceFile("openorca", "data/openorca-regenerated.jsonl", "regenerated", _jsonl(broken),
                   greedy),
        SourceFile("magicoder", "data/magicoder-regenerated.jsonl", "regenerated",
                   _jsonl(healthy), greedy),
        SourceFile("questions", "data/questions.jsonl", "prompt-only", _jsonl(prompts)),
    ]  # fmt: skip


def magicoder_prompts(per_source: int, seed: int = 0) -> list[str]:
    """The prompts of the broken demo's healthy imported source (`build_broken_sources`)."""
    from dflash_trainer.tiny.prompts import build_conversations

    conversations = build_conversations(3 * per_source, seed)
    return [conv[0]["content"] for conv in conversations[per_source : 2 * per_source]]


# The demo's generation settings (examples/tiny-cpu.yaml): greedy, at most 160 new tokens.
OWN_ANSWER_TOKENS = 160


def ensure_own_answers(
    target: Path, prompts: list[str], max_new_tokens: int = OWN_ANSWER_TOKENS
) -> list[dict[str, Any]]:
    """The target's own greedy answers to `prompts` as `regenerated`-format rows (the CPU
    regeneration engine, as the demo's run generates them), built once and cached next to the
    target: completions made elsewhere that the target would write itself."""
    import hashlib

    key = hashlib.sha256(json.dumps([target.name, prompts, max_new_tokens]).encode()).hexdigest()[
        :16
    ]
    cached = target.parent / f"{target.name}-answers-{key}.jsonl"
    if cached.is_file():
        return [json.loads(line) for line in cached.read_text().splitlines()]
    work = target.parent / f"{cached.stem}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        rows = _generate_answers(target, prompts, max_new_tokens, work)
        partial = work / "answers.jsonl"
        partial.write_text(_jsonl(rows).decode())
        partial.replace(cached)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _generate_answers(
    target: Path, prompts: list[str], max_new_tokens: int, work: Path
) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    (work / "prompts.jsonl").write_text(_jsonl({"prompt": p} for p in prompts).decode())
    (work / "sources.yaml").write_text(
        f"- {{name: own, uri: {work / 'prompts.jsonl'}, format: prompt-only}}\n"
    )
    argv = [
        str(venv_bin() / "python"), "-m", "dflash_trainer.data.regenerate",
        "--run-root", str(work / "run"), "--sources", str(work / "sources.yaml"),
        "--model", str(target), "--engine", "transformers", "--temperature", "0",
        "--max-new-tokens", str(max_new_tokens), "--threads", "1", "--progress-seconds", "0",
        "--termination-log", str(work / "result.json"),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if result.returncode != 0:
        raise DevError(f"generating the target's own answers failed:\n{result.stderr[-2000:]}")
    keep = ("prompt", "response", "reasoning", "output_token_ids", "num_output_tokens",
            "finish_reason")  # fmt: skip
    by_prompt = {}
    for part in sorted((work / "run" / "regen").rglob("*.parquet")):
        for row in pq.read_table(part).to_pylist():
            by_prompt[json.loads(row["prompt"])[-1]["content"]] = {k: row[k] for k in keep}
    return [by_prompt[p] for p in prompts if p in by_prompt]


def build_sources_spec(
    files: list[SourceFile], bucket: str, max_samples: int
) -> list[dict[str, Any]]:
    """`spec.data.sources` naming the uploaded files."""
    return [
        {"name": f.name, "uri": f"s3://{bucket}/{f.key}", "format": f.format, "maxSamples": max_samples}
        | ({"sampling": dict(f.sampling)} if f.sampling is not None else {})
        for f in files
    ]  # fmt: skip


# ---------------------------------------------------------------- the tiny target
def tiny_target_dir(layers: int = TARGET_LAYERS, teach_steps: int = TEACH_STEPS) -> Path:
    return cache_root() / "demo" / f"tiny-qwen3-l{layers}-t{teach_steps}-r{TARGET_RECIPE}"


def _is_complete(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file() and (folder / "dflash_tiny.json").is_file()


def ensure_tiny_target(layers: int = TARGET_LAYERS, teach_steps: int = TEACH_STEPS) -> Path:
    """Build the tiny target once per recipe (about a minute on 2 cores), then reuse it."""
    out = tiny_target_dir(layers, teach_steps)
    if _is_complete(out):
        return out
    # A private folder per process, renamed into place: two sessions building at once (two
    # test runs on one machine) never see each other's half-written model.
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        str(venv_bin() / "python"), "-m", "dflash_trainer.tiny", "--out", str(partial),
        "--layers", str(layers), "--teach-steps", str(teach_steps),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise DevError(
            f"building the tiny target failed ({' '.join(argv[1:])}):\n{result.stderr[-2000:]}"
        )
    if out.exists() and not _is_complete(out):
        shutil.rmtree(out, ignore_errors=True)  # a broken leftover, never a build in progress
    try:
        partial.rename(out)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(partial, ignore_errors=True)
    return out


# ---------------------------------------------------------------- uploads
class UploadError(Exception):
    """An S3 request of the demo failed: `what` names it ("uploading s3://b/k"); the cause is
    the botocore / boto3 exception, which `s3server.explain_failure` turns into one line."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(f"{what} failed: {cause}")
        self.what = what
        self.cause = cause


def _s3_errors() -> tuple[type[BaseException], ...]:
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError, Boto3Error)


def ensure_bucket(client: Any, bucket: str) -> None:
    from botocore.exceptions import ClientError

    try:
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError:
            client.create_bucket(Bucket=bucket)
    except _s3_errors() as exc:
        raise UploadError(f"creating bucket s3://{bucket}", exc) from None


def upload_folder(client: Any, folder: Path, bucket: str, prefix: str) -> int:
    """Every file of `folder` under `s3://bucket/prefix/`; returns the bytes uploaded."""
    total = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        try:
            client.upload_file(str(path), bucket, key)
        except _s3_errors() as exc:
            raise UploadError(f"uploading s3://{bucket}/{key}", exc) from None
        total += path.stat().st_size
    return total


def upload_sources(client: Any, files: list[SourceFile], bucket: str) -> None:
    for f in files:
        try:
            client.put_object(Bucket=bucket, Key=f.key, Body=f.body)
        except _s3_errors() as exc:
            raise UploadError(f"uploading s3://{bucket}/{f.key}", exc) from None
