"""The streaming runner with a fake engine: finish order, the in-flight bound, parts written while
the shard generates, multi-turn requeueing, and a resume after a crash mid-shard."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dflash_trainer.data.records import Message, PromptRecord
from dflash_trainer.data.regenerate.engine import Generation
from dflash_trainer.data.regenerate.runner import ShardPlan, ShardRunner
from dflash_trainer.data.regenerate.shard_store import ShardStore, base_id

MAX_TOKENS = 8


class FakeTemplate:
    def render(self, messages: list[Message], add_generation_prompt: bool, thinking: bool) -> str:
        return "|".join(m["content"] for m in messages)


@dataclass
class FakeTarget:
    template: FakeTemplate = field(default_factory=FakeTemplate)
    context: int = 1000

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [[1] * len(t) for t in texts]


class CrashError(RuntimeError):
    pass


@dataclass
class SlotEngine:
    """vLLM in miniature: `slots` requests decode one token per step, refilled from the queue;
    a request's answer length is `lengths[sample id]` (MAX_TOKENS or more: cut by `length`)."""

    store: ShardStore
    lengths: dict[str, int]
    slots: int = 2
    crash_after: int | None = None  # finished requests before a crash
    name: str = "fake"
    queue: deque[str] = field(default_factory=deque)
    running: dict[str, int] = field(default_factory=dict)  # request id -> tokens so far
    added: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    most_unfinished: int = 0
    parts_seen: list[int] = field(default_factory=list)  # parts on storage at each step
    closed: bool = False

    def add(self, request_id: str, prompt: list[int]) -> None:
        self.queue.append(request_id)
        self.added.append(request_id)
        self.most_unfinished = max(self.most_unfinished, len(self.queue) + len(self.running))

    def step(self) -> list[tuple[str, Generation]]:
        self.parts_seen.append(len(self.store.part_uris()))
        while self.queue and len(self.running) < self.slots:
            self.running[self.queue.popleft()] = 0
        done = []
        for request_id in list(self.running):
            self.running[request_id] += 1
            length = min(self.lengths[base_id(request_id)], MAX_TOKENS)
            if self.running[request_id] >= length:
                del self.running[request_id]
                if self.crash_after is not None and len(self.finished) >= self.crash_after:
                    raise CrashError("the pod was killed")
                self.finished.append(request_id)
                reason = "length" if self.lengths[base_id(request_id)] >= MAX_TOKENS else "stop"
                done.append((request_id, Generation([7] * length, f"A:{request_id}", reason)))
        return done

    def close(self) -> None:
        self.closed = True


def record(sample_id: str, *questions: str) -> PromptRecord:
    messages: list[Message] = [{"role": "user", "content": q} for q in questions or ("Q",)]
    return PromptRecord(id=sample_id, source="s", messages=messages)


def runner(
    tmp_path: Path, engine: SlotEngine, part_rows: int = 2, in_flight: int = 4
) -> ShardRunner:
    plan = ShardPlan(0, 1, False, part_rows, MAX_TOKENS, progress_seconds=1e9, in_flight=in_flight)
    return ShardRunner(plan, engine.store, FakeTarget, lambda target: engine)


def part_ids(store: ShardStore) -> list[list[str]]:
    return [pq.read_table(uri).column("id").to_pylist() for uri in store.part_uris()]


def test_samples_are_written_in_the_order_they_finish_in_parts_of_part_rows(
    tmp_path: Path,
) -> None:
    store = ShardStore(str(tmp_path), 0, 1)
    lengths = {"a": 5, "b": 1, "c": 3, "d": 2, "e": 1}
    engine = SlotEngine(store, lengths, slots=5)
    counts = runner(tmp_path, engine, part_rows=2, in_flight=5).run_pending(
        [record(i) for i in lengths]
    )
    assert part_ids(store) == [["b", "e"], ["d", "c"], ["a"]]
    assert (counts.rows, counts.generated_samples, len(counts.parts)) == (5, 5, 3)
    assert engine.closed


def test_the_engine_never_holds_more_than_in_flight_requests(tmp_path: Path) -> None:
    store = ShardStore(str(tmp_path), 0, 1)
    lengths = {f"s{i:02d}": 1 + i % 7 for i in range(40)}
    engine = SlotEngine(store, lengths, slots=2)
    counts = runner(tmp_path, engine, part_rows=10, in_flight=3).run_pending(
        [record(i) for i in lengths]
    )
    assert engine.most_unfinished == 3
    assert sorted(engine.added) == sorted(lengths) and counts.rows == 40


def test_an_answer_frees_its_slot_for_the_next_prompt_at_once(tmp_path: Path) -> None:
    """One long answer does not hold the others back: the short ones stream past it."""
    store = ShardStore(str(tmp_path), 0, 1)
    lengths = {"long": 8, **{f"s{i}": 1 for i in range(6)}}
    engine = SlotEngine(store, lengths, slots=2)
    runner(tmp_path, engine, part_rows=100, in_flight=2).run_pending([record(i) for i in lengths])
    assert engine.finished[-1] == "long"
    assert len(engine.parts_seen) == 8  # the long answer's 8 steps; the six others fit beside it


def test_parts_are_written_while_the_shard_is_still_generating(tmp_path: Path) -> None:
    store = ShardStore(str(tmp_path), 0, 1)
    lengths = {f"s{i:02d}": 1 + i % 3 for i in range(12)}
    engine = SlotEngine(store, lengths, slots=2)
    runner(tmp_path, engine, part_rows=3, in_flight=4).run_pending([record(i) for i in lengths])
    assert engine.parts_seen[-1] >= 3  # parts were on storage before the last answer finished
    assert [len(p) for p in part_ids(store)] == [3, 3, 3, 3]


def test_a_later_turn_is_queued_when_its_answer_finishes_and_lands_with_it(tmp_path: Path) -> None:
    store = ShardStore(str(tmp_path), 0, 1)
    lengths = {"chat": 2, "x": 3, "cut": MAX_TOKENS}
    engine = SlotEngine(store, lengths, slots=3)
    counts = runner(tmp_path, engine, part_rows=1, in_flight=3).run_pending(
        [record("chat", "Q1", "Q2"), record("x"), record("cut", "Q1", "Q2")]
    )
    assert engine.added == ["chat", "x", "cut", "chat.t1"]  # "cut" never gets its second turn
    assert part_ids(store) == [["x"], ["chat", "chat.t1"], ["cut"]]
    later = pq.read_table(store.part_uris()[1]).to_pylist()[1]
    prompt = json.loads(later["prompt"])
    assert [m["content"] for m in prompt] == ["Q1", "A:chat", "Q2"]
    assert counts.truncated == 1


def test_an_overlong_prompt_is_counted_and_never_reaches_the_engine(tmp_path: Path) -> None:
    store = ShardStore(str(tmp_path), 0, 1)
    engine = SlotEngine(store, {"ok": 1, "long": 1})
    target_context = FakeTarget().context
    long_question = "x" * (target_context - MAX_TOKENS + 1)
    counts = runner(tmp_path, engine).run_pending([record("ok"), record("long", long_question)])
    assert engine.added == ["ok"] and counts.overlong == 1 and counts.rows == 1


def test_a_crash_mid_shard_resumes_without_regenerating_or_duplicating_a_sample(
    tmp_path: Path,
) -> None:
    store = ShardStore(str(tmp_path), 0, 1)
    lengths = {f"s{i:02d}": 1 + i % 4 for i in range(20)}
    records = [record(i) for i in lengths]
    crashing = SlotEngine(store, lengths, slots=3, crash_after=11)
    with pytest.raises(CrashError):
        runner(tmp_path, crashing, part_rows=4, in_flight=6).run(records)
    assert crashing.closed
    committed = {i for part in part_ids(store) for i in part}
    assert len(committed) == 8  # two full parts; the three answers after them were lost

    fresh = SlotEngine(store, lengths, slots=3)
    resumed = runner(tmp_path, fresh, part_rows=4, in_flight=6)
    counts = resumed.run(records)
    assert counts.already_done == 8 and not committed & set(fresh.added)
    manifest = store.commit(counts.parts, {})
    every = [i for part in part_ids(store) for i in part]
    assert sorted(every) == sorted(lengths) and manifest["samples"] == 20


def test_imported_and_canary_samples_are_written_without_the_engine(tmp_path: Path) -> None:
    store = ShardStore(str(tmp_path), 0, 1)
    engine = SlotEngine(store, {})
    canary_row: dict[str, Any] = {
        "id": "c", "source": "s", "prompt": "[]", "response": "R", "reasoning": None,
        "output_token_ids": [1], "num_output_tokens": 1, "finish_reason": "stop", "turn": 0,
    }  # fmt: skip
    run = ShardRunner(
        ShardPlan(0, 1, False, 10, MAX_TOKENS, progress_seconds=1e9),
        store,
        FakeTarget,
        lambda target: pytest.fail("no engine is needed"),
        canary_rows={"c": [canary_row]},
    )
    counts = run.run_pending([record("c")])
    assert (counts.from_canary, counts.rows) == (1, 1) and not engine.added
