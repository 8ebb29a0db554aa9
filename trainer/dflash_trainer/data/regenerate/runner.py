"""Regenerate one shard: pick its prompts, skip what is done, generate turn by turn, write parts,
commit. Re-running a committed shard does nothing; a half-done shard resumes where it stopped.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.records import Message, PromptRecord
from dflash_trainer.data.regenerate.engine import (
    CUT_REASONS,
    Engine,
    is_prompt_opening_think,
    split_generation,
)
from dflash_trainer.data.regenerate.shard_store import (
    COMPLETION_SCHEMA,
    TURN_SEPARATOR,
    PartInfo,
    ShardStore,
    shard_of,
)

PROGRESS_SECONDS = 30.0


@dataclass(frozen=True)
class ShardPlan:
    shard: int
    shards: int
    enable_thinking: bool
    part_rows: int
    max_tokens: int  # room kept for the answer: longer prompts are skipped and counted
    progress_seconds: float = PROGRESS_SECONDS


class PromptTarget(Protocol):
    """What the runner needs of the target to build prompts (loaded only if it generates)."""

    template: ChatTemplate
    context: int

    def encode(self, texts: list[str]) -> list[list[int]]: ...


@dataclass
class ShardCounts:
    assigned: int = 0
    already_done: int = 0
    generated_samples: int = 0
    rows: int = 0
    output_tokens: int = 0
    imported: int = 0
    from_canary: int = 0
    overlong: int = 0
    truncated: int = 0
    parts: dict[str, PartInfo] = field(default_factory=dict)


class Progress:
    """Periodic progress lines for pod logs: samples/s, output tokens/s, ETA."""

    def __init__(self, label: str, total: int, every: float, out: Any = None) -> None:
        self.label = label
        self.total = total
        self.every = every
        self.out = out or sys.stdout
        self.started = time.monotonic()
        self.last = self.started
        self.samples = 0
        self.tokens = 0

    def add(self, samples: int, tokens: int, force: bool = False) -> None:
        self.samples += samples
        self.tokens += tokens
        now = time.monotonic()
        if force or now - self.last >= self.every:
            self.last = now
            print(self.line(now), file=self.out, flush=True)

    def line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = self.samples / elapsed
        eta = (self.total - self.samples) / rate if rate > 0 else float("inf")
        pct = 100.0 * self.samples / self.total if self.total else 100.0
        eta_text = f"{eta:.0f}s" if eta != float("inf") else "?"
        return (
            f"{self.label}: {self.samples}/{self.total} samples ({pct:.1f}%), "
            f"{rate:.2f} samples/s, {self.tokens / elapsed:.0f} output tokens/s, ETA {eta_text}"
        )


def split_turns(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """(system prefix, user turns) of a prompt record."""
    prefix = [m for m in messages if m["role"] == "system"]
    return prefix, [m for m in messages if m["role"] == "user"]


def build_imported_row(record: PromptRecord) -> dict[str, Any]:
    c = record.completion
    if c is None:
        raise ValueError("build_imported_row needs a record with a completion")
    return {
        "id": record.id,
        "source": record.source,
        "prompt": json.dumps(record.messages, ensure_ascii=False),
        "response": c.response,
        "reasoning": c.reasoning,
        "output_token_ids": c.output_token_ids,
        "num_output_tokens": c.num_output_tokens,
        "finish_reason": c.finish_reason,
        "turn": 0,
    }


@dataclass
class Conversation:
    record: PromptRecord
    history: list[Message]
    users: list[Message]
    alive: bool = True


class ShardRunner:
    def __init__(
        self,
        plan: ShardPlan,
        store: ShardStore,
        target_factory: Callable[[], PromptTarget],
        engine_factory: Callable[[Any], Engine],
        canary_rows: dict[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        self.plan = plan
        self.store = store
        # Answers the canary already generated for this shard: copied, never generated twice.
        self.canary_rows = canary_rows or {}
        self.target_factory = target_factory
        self.engine_factory = engine_factory
        self._target: PromptTarget | None = None
        self._engine: Engine | None = None
        self.counts = ShardCounts()

    @property
    def target(self) -> PromptTarget:
        if self._target is None:
            self._target = self.target_factory()
        return self._target

    @property
    def engine(self) -> Engine:
        if self._engine is None:  # loading vLLM takes minutes: only when there is work
            self._engine = self.engine_factory(self.target)
        return self._engine

    def select(self, records: Iterable[PromptRecord]) -> list[PromptRecord]:
        done = self.store.done_ids()
        mine = []
        for record in records:
            if shard_of(record.id, self.plan.shards) != self.plan.shard:
                continue
            self.counts.assigned += 1
            if record.id in done:
                self.counts.already_done += 1
            else:
                mine.append(record)
        return mine

    def run(self, records: Iterable[PromptRecord], progress_out: Any = None) -> ShardCounts:
        return self.run_pending(self.select(records), progress_out)

    def run_pending(self, pending: list[PromptRecord], progress_out: Any = None) -> ShardCounts:
        progress = Progress(
            f"regenerate shard {self.plan.shard}/{self.plan.shards}",
            len(pending),
            self.plan.progress_seconds,
            progress_out,
        )
        for start in range(0, len(pending), self.plan.part_rows):
            chunk = pending[start : start + self.plan.part_rows]
            rows = [build_imported_row(r) for r in chunk if r.completion is not None]
            self.counts.imported += len(rows)
            from_canary = [r for r in chunk if r.completion is None and r.id in self.canary_rows]
            for record in from_canary:
                rows += self.canary_rows[record.id]
            self.counts.from_canary += len(from_canary)
            to_generate = [
                r for r in chunk if r.completion is None and r.id not in self.canary_rows
            ]
            if to_generate:
                rows += self.generate_conversations(to_generate)
            if rows:
                self.write(rows)
            progress.add(len(chunk), sum(int(r["num_output_tokens"] or 0) for r in rows))
        progress.add(0, 0, force=True)
        return self.counts

    def write(self, rows: list[dict[str, Any]]) -> None:
        table = pa.Table.from_pylist(rows, schema=COMPLETION_SCHEMA)
        info = self.store.write_part(table)
        self.counts.parts[info.path] = info
        self.counts.rows += info.rows
        self.counts.output_tokens += info.output_tokens

    def generate_conversations(self, records: list[PromptRecord]) -> list[dict[str, Any]]:
        """Every user turn of every record, in order; each answer feeds the next turn's prompt."""
        states = []
        for record in records:
            prefix, users = split_turns(record.messages)
            states.append(Conversation(record, list(prefix), users))
        rows: list[dict[str, Any]] = []
        turn = 0
        while True:
            active = [s for s in states if s.alive and turn < len(s.users)]
            if not active:
                break
            prompts = [[*s.history, s.users[turn]] for s in active]
            template = self.target.template
            texts = [template.render(p, True, self.plan.enable_thinking) for p in prompts]
            ids = self.target.encode(texts)
            limit = max(1, self.target.context - self.plan.max_tokens)
            keep = []
            for s, prompt, text, prompt_ids in zip(active, prompts, texts, ids, strict=True):
                if len(prompt_ids) > limit:
                    self.counts.overlong += 1 if turn == 0 else 0
                    s.alive = False
                    continue
                keep.append((s, prompt, text, prompt_ids))
            if not keep:
                break
            request_ids = [self.row_id(k[0].record.id, turn) for k in keep]
            outputs = self.engine.generate([k[3] for k in keep], request_ids)
            for (s, prompt, text, _), out, row_id in zip(keep, outputs, request_ids, strict=True):
                reasoning, response = split_generation(
                    out.text, self.plan.enable_thinking, is_prompt_opening_think(text)
                )
                rows.append(
                    {
                        "id": row_id,
                        "source": s.record.source,
                        "prompt": json.dumps(prompt, ensure_ascii=False),
                        "response": response,
                        "reasoning": reasoning,
                        "output_token_ids": out.token_ids,
                        "num_output_tokens": len(out.token_ids),
                        "finish_reason": out.finish_reason,
                        "turn": turn,
                    }
                )
                if turn == 0:
                    self.counts.generated_samples += 1
                answer: Message = {"role": "assistant", "content": response}
                if reasoning is not None:
                    answer["reasoning_content"] = reasoning
                s.history = [*prompt, answer]
                if out.finish_reason in CUT_REASONS:
                    self.counts.truncated += 1
                    s.alive = False  # later turns would build on a cut-off answer
            turn += 1
        return rows

    @staticmethod
    def row_id(sample_id: str, turn: int) -> str:
        return sample_id if turn == 0 else f"{sample_id}{TURN_SEPARATOR}{turn}"
