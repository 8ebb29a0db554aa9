"""The incident, replayed: a source that is 87% stub answers stops the run at the canary, before
any shard is regenerated, with the violated checks per source and a decoded stub in the report;
approved, the completions gate stops the whole dataset again; approved too, the run goes on."""

from __future__ import annotations

import json
import subprocess

from dflash_dev.demo import assets
from dflash_dev.demo.harness import DemoHarness
from dflash_dev.demo.summary import decode_answer, fetch_report
from dflash_dev.paths import venv_bin

# As in `make demo-broken-data` (tiny-cpu.yaml): a canary of 16 samples of each source, and
# sources judged one by one from 16 samples.
PER_SOURCE = 24
CANARY = 16


def approve(harness: DemoHarness, name: str, gate: str) -> None:
    generation = harness.run(name)["metadata"]["generation"]
    result = subprocess.run(
        [str(venv_bin() / "kubectl-dflash"), "approve", name, "--gate", gate,
         "-n", harness.namespace, f"--kubeconfig={harness.cluster.kubeconfig}"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    annotations = harness.run(name)["metadata"]["annotations"]
    assert f"{gate}@{generation}" in annotations["dflash.dev/approve-audit"]


def test_an_87_percent_stub_source_stops_at_the_canary_then_at_the_completions_gate(
    harness: DemoHarness,
) -> None:
    harness.start_operator()
    own = assets.ensure_own_answers(harness.target, assets.magicoder_prompts(PER_SOURCE))
    files = assets.build_broken_sources(PER_SOURCE, own_answers=own)
    canary = {"canary": {"samplesPerSource": CANARY}}
    harness.apply(harness.build_run("broken", files, PER_SOURCE, regeneration=canary))

    # The canary (16 samples of every source) stops it before any shard is regenerated.
    status = harness.wait_phase("broken", "AuditFailed", "Succeeded", "Failed", "Training")
    assert status["phase"] == "AuditFailed", harness.describe("broken")
    canary = status["audit"]["canary"]
    violated = {v["check"]: v for v in canary["violations"]}
    assert violated["stub_rate"]["sources"] == ["openorca"]
    assert "openorca 8" in violated["stub_rate"]["message"]  # its own rate: 13 or 14 of 16
    assert "silent_truncation_rate" not in violated  # a repeated stub is not a cut answer
    flagged = {s for v in canary["violations"] for s in v.get("sources") or []}
    assert flagged == {"openorca"}, json.dumps(canary["violations"])[:3000]  # the healthy pass
    assert harness.children("jobs") == ["broken-audit-canary", "broken-canary"]
    assert "completions" not in status["audit"]
    report = fetch_report(harness.s3.client(), canary["reportUri"])
    assert report is not None
    assert report["sources"]["openorca"]["metrics"]["stub_rate"] >= 0.8
    assert report["sources"]["magicoder"]["metrics"]["stub_rate"] == 0.0
    stub = report["examples"]["stub_rate"][0]
    assert stub["source"] == "openorca"
    assert decode_answer(stub) == "<think>\n\n</think>\n\nOK.<|im_end|>"

    # Accepting the canary does not skip the full gate: it stops the whole dataset again.
    approve(harness, "broken", "canary")
    status = harness.wait_until(
        "the completions gate to judge the whole dataset",
        "broken",
        lambda s: "completions" in (s.get("audit") or {}),
    )
    gate = status["audit"]["completions"]
    assert gate["verdict"] == "fail"
    assert {v["check"]: v for v in gate["violations"]}["stub_rate"]["sources"] == ["openorca"]
    assert "broken-regen" in harness.children("jobs")
    assert harness.training_children() == []
    assert status["stages"]["regeneration"]["samples"] == 3 * PER_SOURCE

    # Approved too, it goes on: tokenization runs and the tokens gate judges the data.
    approve(harness, "broken", "completions")
    status = harness.wait_until(
        "the tokens gate to run after the approval",
        "broken",
        lambda s: "tokens" in (s.get("audit") or {}),
    )
    assert status["audit"]["completions"]["approved"] is True
    assert "broken-tokenize" in harness.children("jobs")
    assert status["stages"]["tokenization"]["samples"] > 0
