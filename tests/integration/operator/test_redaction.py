"""A stage pod that prints credentials and fails, on the real control plane: what it said
reaches the run's conditions and events (and the operator's log) with the credentials
replaced by [REDACTED]."""

from __future__ import annotations

import json
from typing import Any

from dflash_dev.kube_wait import get_json

FAKE_AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
FAKE_HF = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"


def test_a_failing_stage_that_prints_secrets_leaves_none_in_status_events_or_log(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    spec = make_spec()
    spec["regeneration"]["retriesPerShard"] = 0
    harness.apply_run("r1", spec)
    pod, other = harness.running_pods("r1-regen", 2)
    crash = f"botocore.exceptions.ClientError: InvalidAccessKeyId {FAKE_AWS_ID}; HF_TOKEN={FAKE_HF}"
    harness.finish_pod(pod, {"ok": False, "message": crash}, exit_code=1)
    harness.finish_pod(other, harness.stage_results["regen"])

    status = harness.wait_phase("r1", "Failed")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert "InvalidAccessKeyId" in failed["message"], failed
    assert "[REDACTED]" in failed["message"], failed
    run = json.dumps(harness.run("r1"))
    events = json.dumps(get_json(harness.cluster, "events", "-n", harness.namespace))
    log = harness.operator.log_tail(400)
    for text in (run, events, log):
        assert FAKE_AWS_ID not in text and FAKE_HF not in text
