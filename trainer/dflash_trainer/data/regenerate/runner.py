"""Regenerate one shard: pick its prompts, skip what is done, stream them through the engine turn
by turn, write parts of finished samples as they finish, commit. Re-running a committed shard does
nothing; a half-done shard resumes where it stopped (its written parts are kept and skipped).
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.records import Message, PromptRecord
from dflash_trainer.data.regenerate.engine import (
    CUT_REASONS,
    Engine,
    Generation,
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
# Requests kept in the engine at once: several times vLLM's own slots (max_num_seqs, 1024 on a
# B200) so that its scheduler always has the next prompt ready when an answer finishes. Only
# finished samples are written, so a crash loses at most this many answers plus one part.
DEFAULT_IN_FLIGHT = 4096


@dataclass(frozen=True)
class ShardPlan:
    shard: int
    shards: int
    enable_thinking: bool
    part_rows: int
    max_tokens: int  # room kept for the answer: longer prompts are skipped and counted
    progress_seconds: float = PROGRESS_SECONDS
    in_flight: int = DEFAULT_IN_FLIGHT  # requests in the engine at once (see DEFAULT_IN_FLIGHT)


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
    """One sample on its way through the engine: a turn at a time, its rows kept until its last."""

    record: PromptRecord
    history: list[Message]
    users: list[Message]
    turn: int = 0
    prompt: list[Message] = field(default_factory=list)  # the turn being generated
    text: str = ""  # that prompt rendered
    rows: list[dict[str, Any]] = field(default_factory=list)


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
        # Rows of the samples finished since the last part (every turn of each), in finish order.
        self._buffer: list[dict[str, Any]] = []
        self._buffered = 0
        self._progress = Progress("", 0, plan.progress_seconds)

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
        """Imported and canary samples are written at once; the rest stream through the engine.
        A part is written whenever `part_rows` samples have finished, in the order they finished."""
        self._progress = Progress(
            f"regenerate shard {self.plan.shard}/{self.plan.shards}",
            len(pending),
            self.plan.progress_seconds,
            progress_out,
        )
        to_generate = []
        for record in pending:
            if record.completion is not None:
                self.counts.imported += 1
                self.finish_sample([build_imported_row(record)])
            elif record.id in self.canary_rows:
                self.counts.from_canary += 1
                self.finish_sample(self.canary_rows[record.id])
            else:
                to_generate.append(record)
        if to_generate:
            try:
                self.stream(to_generate)
            finally:
                self.engine.close()
        self.flush()
        self._progress.add(0, 0, force=True)
        return self.counts

    def finish_sample(self, rows: list[dict[str, Any]]) -> None:
        """One sample is done (every row of it): buffered, and written with a full part."""
        self._buffer += rows
        self._buffered += 1
        self._progress.add(1, sum(int(r["num_output_tokens"] or 0) for r in rows))
        if self._buffered >= self.plan.part_rows:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self.write(self._buffer)
        self._buffer, self._buffered = [], 0

    def write(self, rows: list[dict[str, Any]]) -> None:
        table = pa.Table.from_pylist(rows, schema=COMPLETION_SCHEMA)
        info = self.store.write_part(table)
        self.counts.parts[info.path] = info
        self.counts.rows += info.rows
        self.counts.output_tokens += info.output_tokens

    def stream(self, records: list[PromptRecord]) -> None:
        """Every user turn of every record through the engine, `in_flight` requests at a time;
        an answer's next turn is queued as soon as the answer finishes."""
        waiting = deque(records)
        live: dict[str, Conversation] = {}  # request id -> its conversation
        while waiting or live:
            if waiting and len(live) < self.plan.in_flight:
                batch = [waiting.popleft() for _ in range(self.plan.in_flight - len(live))
                         if waiting]  # fmt: skip
                self.submit([self.start(record) for record in batch], live)
                continue
            for request_id, out in self.engine.step():
                conversation = live.pop(request_id)
                if self.answer(conversation, request_id, out):
                    self.submit([conversation], live)

    @staticmethod
    def start(record: PromptRecord) -> Conversation:
        prefix, users = split_turns(record.messages)
        return Conversation(record, list(prefix), users)

    def submit(self, conversations: list[Conversation], live: dict[str, Conversation]) -> None:
        """Render and encode the conversations' next turns (in one call) and add them to the
        engine; a prompt too long for the context ends its conversation there."""
        active = [c for c in conversations if c.turn < len(c.users)]
        for c in conversations:
            if c.turn >= len(c.users):
                self.end(c)
        if not active:
            return
        template = self.target.template
        for c in active:
            c.prompt = [*c.history, c.users[c.turn]]
            c.text = template.render(c.prompt, True, self.plan.enable_thinking)
        ids = self.target.encode([c.text for c in active])
        limit = max(1, self.target.context - self.plan.max_tokens)
        for c, prompt_ids in zip(active, ids, strict=True):
            if len(prompt_ids) > limit:
                self.counts.overlong += 1 if c.turn == 0 else 0
                self.end(c)
                continue
            request_id = self.row_id(c.record.id, c.turn)
            live[request_id] = c
            self.engine.add(request_id, prompt_ids)

    def answer(self, c: Conversation, row_id: str, out: Generation) -> bool:
        """Record one answer; whether the conversation goes on to its next turn."""
        reasoning, response = split_generation(
            out.text, self.plan.enable_thinking, is_prompt_opening_think(c.text)
        )
        c.rows.append(
            {
                "id": row_id,
                "source": c.record.source,
                "prompt": json.dumps(c.prompt, ensure_ascii=False),
                "response": response,
                "reasoning": reasoning,
                "output_token_ids": out.token_ids,
                "num_output_tokens": len(out.token_ids),
                "finish_reason": out.finish_reason,
                "turn": c.turn,
            }
        )
        if c.turn == 0:
            self.counts.generated_samples += 1
        answer: Message = {"role": "assistant", "content": response}
        if reasoning is not None:
            answer["reasoning_content"] = reasoning
        c.history = [*c.prompt, answer]
        c.turn += 1
        if out.finish_reason in CUT_REASONS:
            self.counts.truncated += 1
            self.end(c)  # later turns would build on a cut-off answer
            return False
        return True

    def end(self, c: Conversation) -> None:
        if c.rows:
            self.finish_sample(c.rows)
        else:  # its first prompt was overlong: no row, and not done (a rerun skips it again)
            self._progress.add(1, 0)

    @staticmethod
    def row_id(sample_id: str, turn: int) -> str:
        return sample_id if turn == 0 else f"{sample_id}{TURN_SEPARATOR}{turn}"
