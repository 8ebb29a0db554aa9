"""The demo's pure builders: its prompt sources parse in their formats with the data pipeline's
own reader, the broken dataset is the incident's shape, its pool values target executor nodes,
and its DFlashRun is the example with only the endpoint, bucket, name or sources moved."""

from __future__ import annotations

import json
from pathlib import Path

from dflash_dev.demo import assets, environment, harness, manifest
from dflash_dev.demo.live import build_rows
from dflash_operator.api import parse_run
from dflash_trainer.data.ingest import SourceStats, iter_source
from dflash_trainer.data.sources import SourceFormat, SourceSpec


def _read(files: list[assets.SourceFile], folder: Path) -> dict[str, list[object]]:
    seen: set[int] = set()
    out: dict[str, list[object]] = {}
    for f in files:
        path = folder / f.key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f.body)
        spec = SourceSpec(name=f.name, uri=str(path), format=SourceFormat(f.format))
        stats = SourceStats(f.name, str(path))
        out[f.name] = list(iter_source(spec, stats, seen))
        assert stats.rows == len(out[f.name]), f"{f.name}: rows were rejected or deduplicated"
    return out


def test_the_demo_sources_parse_in_four_formats_and_every_prompt_is_distinct(
    tmp_path: Path,
) -> None:
    files = assets.build_prompt_sources(8)
    assert [f.format for f in files] == ["openai-messages", "sharegpt", "alpaca", "prompt-only"]
    assert [Path(f.key).suffixes for f in files] == [
        [".jsonl"],
        [".jsonl", ".gz"],
        [".parquet"],
        [".jsonl"],
    ]
    records = _read(files, tmp_path)
    assert {name: len(rows) for name, rows in records.items()} == {f.name: 8 for f in files}


def test_the_broken_dataset_is_87_percent_stubs_in_one_source_and_healthy_elsewhere(
    tmp_path: Path,
) -> None:
    files = {f.name: f for f in assets.build_broken_sources(100)}
    rows = {
        name: [json.loads(line) for line in f.body.decode().splitlines()]
        for name, f in files.items()
    }
    stubs = {name: sum(r.get("response") == "OK." for r in rs) for name, rs in rows.items()}
    assert stubs == {"openorca": 87, "magicoder": 0, "questions": 0}
    stub = next(r for r in rows["openorca"] if r["response"] == "OK.")
    assert stub["reasoning"] == "" and stub["num_output_tokens"] == 6
    assert {name: len(rs) for name, rs in _read(list(files.values()), tmp_path).items()} == {
        "openorca": 100, "magicoder": 100, "questions": 100,
    }  # fmt: skip
    # The imported sources say they are the target's greedy answers; the likelihood check
    # holds them to it (a source of unknown sampling would not be judged).
    spec = assets.build_sources_spec(list(files.values()), "bucket", 100)
    assert {s["name"]: s.get("sampling") for s in spec} == {
        "openorca": {"temperature": 0.0}, "magicoder": {"temperature": 0.0}, "questions": None,
    }  # fmt: skip


def test_the_pool_values_put_the_cpu_pool_on_executor_nodes_and_tolerate_their_taint() -> None:
    every = environment.executor_pool_values()["nodePools"]["cpu"]
    assert every["nodeSelector"] == {"dflash.dev/node-pool": "local"}
    assert every["tolerations"] == [
        {"key": "dflash.dev/executor", "operator": "Exists", "effect": "NoSchedule"}
    ]
    one = environment.executor_pool_values("t1a2b3")["nodePools"]["cpu"]
    # null removes the chart's own `dflash.dev/node-pool: cpu` when Helm merges the values
    assert one["nodeSelector"] == {
        "dflash.dev/node-pool": None,
        "dflash.dev/executor-instance": "t1a2b3",
    }


def test_the_demo_run_is_the_example_with_the_real_endpoint_and_a_moved_bucket() -> None:
    example = manifest.load_example()
    run = manifest.build_run(example, endpoint="http://127.0.0.1:4567", name="x", bucket="e2e-1")
    assert run["spec"]["storage"] == {
        **example["spec"]["storage"],
        "endpoint": "http://127.0.0.1:4567",
        "bucket": "e2e-1",
    }
    assert run["spec"]["target"]["model"] == "s3://e2e-1/models/tiny-qwen3"
    assert all(s["uri"].startswith("s3://e2e-1/data/") for s in run["spec"]["data"]["sources"])
    assert run["spec"]["training"] == example["spec"]["training"]
    assert example["spec"]["storage"]["endpoint"] == "http://127.0.0.1:8333"  # not modified
    parse_run(run)


def test_the_example_names_exactly_the_sources_the_demo_uploads() -> None:
    example = manifest.load_example()
    uploaded = assets.build_sources_spec(
        assets.build_prompt_sources(64), manifest.EXAMPLE_BUCKET, 64
    )
    assert example["spec"]["data"]["sources"] == uploaded


def test_the_live_view_lists_the_stages_in_pipeline_order_with_training_progress() -> None:
    status = {
        "phase": "Training",
        "stages": {
            "regeneration": {"samples": 8, "samplesTotal": 8},
            "tokenization": {"samples": 8},
        },
        "audit": {
            "tokens": {"verdict": "pass"},
            "completions": {"verdict": "fail", "approved": True},
        },
        "training": {"step": 3, "totalSteps": 12, "loss": 2.5},
    }
    rows = build_rows(status)
    assert [label for label, *_ in rows] == [
        "regenerate",
        "audit completions",
        "tokenize",
        "audit tokens",
        "train",
    ]
    assert rows[1][3] == "fail (approved)"
    assert rows[-1][1:3] == (3, 12)


def _pod(name: str, created: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "creationTimestamp": created, "labels": labels}}


def test_a_training_childs_pods_are_ordered_by_rank_newest_first_for_either_backend() -> None:
    jobset, index = "jobset.sigs.k8s.io/jobset-name", "batch.kubernetes.io/job-completion-index"
    job, role = "training.kubeflow.org/job-name", "training.kubeflow.org/replica-type"
    pods = [
        _pod("r-train-node-0-1-aaaaa", "2026-12-07T10:00:00Z", **{jobset: "r-train", index: "1"}),
        _pod("r-train-node-0-0-old", "2026-12-07T10:00:00Z", **{jobset: "r-train", index: "0"}),
        _pod("r-train-node-0-0-new", "2026-12-07T10:05:00Z", **{jobset: "r-train", index: "0"}),
        _pod("r-train-2-node-0-0-x", "2026-12-07T10:09:00Z", **{jobset: "r-train-2", index: "0"}),
        _pod("p-train-worker-0", "2026-12-07T10:00:00Z", **{job: "p-train", role: "worker"}),
        _pod("p-train-master-0", "2026-12-07T10:00:01Z", **{job: "p-train", role: "master"}),
        _pod("r-regen-0-abcde", "2026-12-07T10:00:00Z"),
    ]
    assert harness.rank_order(pods, "r-train") == [
        "r-train-node-0-0-new", "r-train-node-0-0-old", "r-train-node-0-1-aaaaa"
    ]  # fmt: skip
    assert harness.rank_order(pods, "p-train") == ["p-train-master-0", "p-train-worker-0"]
    assert harness.rank_order(pods, "gone-train") == []
