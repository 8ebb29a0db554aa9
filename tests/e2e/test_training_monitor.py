"""The training likelihood monitor, end to end: one source's data is broken everywhere except
in the canary's sample, so the canary and every gate pass (the breakage is shape-blind and the
canary's sample is clean); training scores its batches under the target and stops the run at
AuditFailed, naming that source and the step, within a bounded number of steps.

The breakage is the join bug: the source's answers paired with other prompts of the source.
The source is imported completions (`format: regenerated`) that are the target's own greedy
answers, so only the pairing is wrong; the canary picks the same 4 rows on every run (the
smallest sha256 of their ids), and those 4 keep their own prompts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dflash_dev.demo import assets
from dflash_dev.demo.harness import PER_SOURCE, DemoHarness
from dflash_trainer.data.ingest import IngestStats, iter_prompts
from dflash_trainer.data.regenerate.canary import select_canary
from dflash_trainer.data.sources import load_sources
from dflash_trainer.tiny.prompts import build_prompts

BROKEN = "web"
BROKEN_ROWS = 32
CANARY = 4  # the harness's canary: samplesPerSource 4
# Global batch: 8 rows x 2 processes; the monitor scores every step and judges a source from
# 16 scored rows (the demo's minSourceSamples). About a third of each batch is from `web`.
MONITOR = {"monitorEverySteps": 1}
MAX_STEPS_TO_CATCH = 8


def ids_and_canary(rows: list[dict[str, Any]], work: Path) -> tuple[list[str], set[str]]:
    """The rows' sample ids and the ids the canary picks, by the pipeline's own ingestion."""
    data = work / "web.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "sources.yaml").write_text(f"- {{name: {BROKEN}, uri: {data}, format: regenerated}}\n")
    records = list(iter_prompts(load_sources(str(work / "sources.yaml")), IngestStats()))
    assert len(records) == len(rows)
    return [r.id for r in records], {r.id for r in select_canary(records, CANARY)}


def broken_outside_the_canary(own: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    """The target's own answers, each paired with another row's prompt, except the rows the
    canary samples (ids depend on the pairing: rotate until the canary picks those same rows)."""
    own_ids, canary = ids_and_canary(own, work)
    keep = {i for i, sample in enumerate(own_ids) if sample in canary}
    movable = [i for i in range(len(own)) if i not in keep]
    for shift in range(1, len(movable)):
        rows = [
            row if i in keep
            else dict(row, prompt=own[movable[(movable.index(i) + shift) % len(movable)]]["prompt"])
            for i, row in enumerate(own)
        ]  # fmt: skip
        if ids_and_canary(rows, work)[1] == canary:
            return rows
    raise AssertionError("no pairing keeps the canary's sample clean")


def test_a_source_broken_outside_the_canary_stops_training_at_audit_failed(
    harness: DemoHarness, tmp_path: Path
) -> None:
    prompts = build_prompts(4 * PER_SOURCE + BROKEN_ROWS)[4 * PER_SOURCE :]  # not the others'
    own = assets.ensure_own_answers(harness.target, prompts)
    rows = broken_outside_the_canary(own, tmp_path)
    assert sum(r["prompt"] != o["prompt"] for r, o in zip(rows, own, strict=True)) == (
        BROKEN_ROWS - CANARY
    )
    files = [
        *assets.build_prompt_sources(PER_SOURCE),
        assets.SourceFile(BROKEN, "data/web-regenerated.jsonl", "regenerated",
                          "".join(json.dumps(r) + "\n" for r in rows).encode()),
    ]  # fmt: skip
    harness.start_operator()
    run = harness.build_run("monitored", files, PER_SOURCE, audit={"likelihood": MONITOR})
    run["spec"]["data"]["sources"][-1]["maxSamples"] = BROKEN_ROWS
    # The rows are the target's own greedy answers: declared, so the monitor judges the source
    # (an imported source with unknown sampling is never judged, docs/audit-gates.md 8.2).
    run["spec"]["data"]["sources"][-1]["sampling"] = {"temperature": 0.0}
    harness.apply(run)

    status = harness.wait_phase("monitored", "AuditFailed", "Succeeded", "Failed")
    assert status["phase"] == "AuditFailed", harness.describe("monitored")
    # Every gate before training passed: the canary's sample was clean, the shapes are fine.
    audit = status["audit"]
    assert {g: audit[g]["verdict"] for g in ("canary", "completions", "tokens")} == {
        "canary": "pass", "completions": "pass", "tokens": "pass",
    }  # fmt: skip
    training = audit["training"]
    (violation,) = training["violations"]
    assert violation["check"] == "off_distribution_rate"
    assert violation["sources"] == [BROKEN]  # the healthy sources are never named
    step = int(training["metrics"]["step"])
    print(f"stopped at step {step}: {violation['message']}")
    assert 1 <= step <= MAX_STEPS_TO_CATCH, violation["message"]
    assert f"by step {step}" in violation["message"]
    trained = next(c for c in status["conditions"] if c["type"] == "Trained")
    assert trained["reason"] == "TrainingAuditFailed"
    assert f"stopped training at step {step}" in trained["message"] and BROKEN in trained["message"]
    monitor = status["training"]["likelihood"]
    assert monitor["verdict"] == "fail" and monitor["sources"][BROKEN]["offRows"] > 0
    assert all(s["offRows"] == 0 for name, s in monitor["sources"].items() if name != BROKEN)
    assert status.get("drafterUri") is None
    assert "monitored-eval" not in harness.children("jobs")
