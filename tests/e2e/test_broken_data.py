"""The incident, replayed: a source that is 87% stub answers stops the run at the completions
gate, before tokenization and training, with the violated checks per source and a decoded stub
in the report; approving the gate (kubectl dflash approve) lets the run go on."""

from __future__ import annotations

import subprocess

from dflash_dev.demo import assets
from dflash_dev.demo.harness import DemoHarness
from dflash_dev.demo.summary import decode_answer, fetch_report
from dflash_dev.paths import venv_bin

# Sources of at least minSourceSamples (20) samples are judged one by one.
PER_SOURCE = 24


def test_an_87_percent_stub_source_stops_at_the_completions_gate_until_the_gate_is_approved(
    harness: DemoHarness,
) -> None:
    harness.start_operator()
    harness.apply(harness.build_run("broken", assets.build_broken_sources(PER_SOURCE), PER_SOURCE))

    status = harness.wait_phase("broken", "AuditFailed", "Succeeded", "Failed", "Training")
    assert status["phase"] == "AuditFailed", harness.describe("broken")
    gate = status["audit"]["completions"]
    assert gate["verdict"] == "fail"
    violated = {v["check"]: v for v in gate["violations"]}
    assert "stub_rate" in violated
    assert violated["stub_rate"]["sources"] == ["openorca"]  # the healthy sources pass
    assert violated["stub_rate"]["value"] > 0.05
    # Stopped before any later stage: no tokenization, no training.
    assert harness.children("jobs") == ["broken-audit-completions", "broken-regen"]
    assert harness.children("pytorchjobs") == []
    assert "tokens" not in status["audit"]

    # The report in S3 breaks it down per source and shows a decoded stub.
    report = fetch_report(harness.s3.client(), gate["reportUri"])
    assert report is not None
    assert report["sources"]["openorca"]["metrics"]["stub_rate"] >= 0.8
    assert report["sources"]["magicoder"]["metrics"]["stub_rate"] == 0.0
    stub = report["examples"]["stub_rate"][0]
    assert stub["source"] == "openorca"
    assert decode_answer(stub) == "<think>\n\n</think>\n\nOK.<|im_end|>"

    generation = harness.run("broken")["metadata"]["generation"]
    approve = subprocess.run(
        [str(venv_bin() / "kubectl-dflash"), "approve", "broken", "--gate", "completions",
         "-n", harness.namespace, f"--kubeconfig={harness.cluster.kubeconfig}"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert approve.returncode == 0, approve.stderr
    annotations = harness.run("broken")["metadata"]["annotations"]
    assert annotations["dflash.dev/approve-audit"] == f"completions@{generation}"

    # It goes on: tokenization runs and the tokens gate judges the (still broken) data.
    status = harness.wait_until(
        "the tokens gate to run after the approval",
        "broken",
        lambda s: "tokens" in (s.get("audit") or {}),
    )
    assert status["audit"]["completions"]["approved"] is True
    assert "broken-tokenize" in harness.children("jobs")
    assert status["stages"]["tokenization"]["samples"] > 0
