"""`turns: all`: every assistant turn regenerated on-policy, in order, by the real engine."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from dflash_trainer.data.regenerate.cli import main as regenerate_main
from dflash_trainer.data.regenerate.shard_store import ShardStore
from dflash_trainer.tiny.build import TinyTarget

CONVERSATIONS = 12


def test_each_later_turn_is_answered_after_the_regenerated_earlier_answer(
    tiny_target: TinyTarget, tmp_path: Path
) -> None:
    rows = [
        {"conversations": [
            {"from": "human", "value": f"First question {i}?"}, {"from": "gpt", "value": "OLD ANSWER"},
            {"from": "human", "value": f"Second question {i}?"}, {"from": "gpt", "value": "OLD ANSWER"},
        ]}
        for i in range(CONVERSATIONS)
    ]  # fmt: skip
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"- {{name: chats, uri: {data}, format: sharegpt, turns: all}}\n")
    run_root = tmp_path / "run"
    # Sampling at temperature 1 from a random model ends some answers early (it samples the
    # end-of-turn token); seeded per request, so the same conversations reach turn 2 every run.
    code = regenerate_main([
        "--run-root", str(run_root), "--sources", str(sources), "--model", str(tiny_target.path),
        "--engine", "transformers", "--temperature", "1", "--top-k", "0", "--top-p", "1",
        "--max-new-tokens", "400", "--threads", "1", "--termination-log", str(tmp_path / "log"),
    ])  # fmt: skip
    assert code == 0
    store = ShardStore(str(run_root), 0, 1)
    table = pq.read_table(store.part_uris()[0]).to_pylist()
    first = {r["id"]: r for r in table if r["turn"] == 0}
    second = [r for r in table if r["turn"] == 1]
    assert len(first) == CONVERSATIONS
    assert second, "no conversation reached its second turn: pick another seed"
    for later in second:
        base = later["id"].removesuffix(".t1")
        earlier = first[base]
        assert earlier["finish_reason"] == "stop"
        prompt = json.loads(later["prompt"])
        assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
        assert prompt[1]["content"] == earlier["response"]
        assert prompt[1].get("reasoning_content") == earlier["reasoning"]
        assert "OLD ANSWER" not in later["prompt"]
    truncated = [r for r in first.values() if r["finish_reason"] == "length"]
    assert all(f"{r['id']}.t1" not in {s["id"] for s in second} for r in truncated)
