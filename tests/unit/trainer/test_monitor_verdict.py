"""The monitor's verdict in a termination message: bounded (the kubelet keeps 4096 bytes)
whatever the number of failing sources; the whole verdict is an object in the run root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dflash_trainer.train.verdict import SUMMARY_LIMIT, build_summary, write_verdict

KUBELET_LIMIT = 4096


def stop_payload(sources: int) -> dict[str, Any]:
    """A monitor stop's full stage result, `sources` failing (the shape of
    likelihood_report.build_stage_payload)."""
    names = [f"web-crawl-{i:02d}-translated-answers" for i in range(sources)]
    rates = {name: round(0.9 - i / 1000, 6) for i, name in enumerate(names)}
    message = (
        f"off_distribution_rate: 90.0% of scored rows are not what the target would generate in "
        f"{names[0]} (above the limit 5.0%; 64 rows scored by step 40); also "
        + ", ".join(f"{n} {r:.1%}" for n, r in rates.items())
    )
    violation = {
        "check": "off_distribution_rate", "thresholdField": "maxOffDistributionRate",
        "value": 0.5, "threshold": 0.05, "message": message, "sources": names,
        "perSource": rates, "worstSource": names[0], "worstValue": rates[names[0]],
    }  # fmt: skip
    return {
        "stage": "train", "ok": False, "gate": "training", "verdict": "fail", "step": 40,
        "message": f"training stopped at step 40: {message}", "violations": [violation],
        "metrics": {"step": 40.0, "scoredRows": 3840.0, "offRows": 1920.0},
        "reportUri": "s3://bucket/runs/team/r1/0b6c1a0e/audit/training",
    }  # fmt: skip


@pytest.mark.parametrize("sources", [1, 5, 60, 400])
def test_the_summary_stays_well_under_the_kubelets_cut_whatever_the_sources(sources: int) -> None:
    payload = stop_payload(sources)
    if sources == 60:
        assert len(json.dumps(payload).encode()) > KUBELET_LIMIT  # the case the kubelet cuts
    uri = payload["reportUri"] + "/verdict.json"
    summary = build_summary(payload, uri)
    encoded = json.dumps(summary).encode()

    assert len(encoded) <= SUMMARY_LIMIT < KUBELET_LIMIT
    assert json.loads(encoded) == summary  # readable: a JSON object, nothing cut
    assert (summary["gate"], summary["verdict"], summary["ok"], summary["step"]) == (
        "training", "fail", False, 40,
    )  # fmt: skip
    assert summary["verdictUri"] == uri and summary["reportUri"] == payload["reportUri"]
    (violation,) = summary["violations"]
    assert violation["sourcesTotal"] == sources
    assert violation["worstSource"] == "web-crawl-00-translated-answers"
    assert violation["sources"][0] == violation["worstSource"]
    assert set(violation["perSource"]) == set(violation["sources"])
    if sources > len(violation["sources"]):
        assert "more failing sources in the verdict" in violation["message"]


def test_the_whole_verdict_is_an_object_in_the_run_root(tmp_path: Path) -> None:
    payload = stop_payload(60)
    uri = write_verdict(payload, str(tmp_path / "audit" / "training"))
    assert uri == str(tmp_path / "audit" / "training" / "verdict.json")
    assert json.loads(Path(uri).read_text()) == payload
