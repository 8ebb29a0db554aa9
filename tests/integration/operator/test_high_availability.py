"""Two operator replicas with leader election (the chart's default Lease settings: 15 s lease,
10 s renew deadline, 2 s retry): one acts, the other stands by; killing the active one hands
over within 30 s, with no duplicate child and no lost status. A clean stop releases the Lease
at once."""

from __future__ import annotations

import time
from typing import Any

from dflash_dev import operator_local
from dflash_dev.kube_wait import get_json, wait_for

LEASE = "dflash-operator"  # the chart's fullname for the local install's release
HANDOVER_LIMIT_SECONDS = 30.0


def replica(name: str) -> dict[str, str]:
    return {
        "DFLASH_LEADER_ELECTION": "true",
        "DFLASH_LEASE_NAMESPACE": operator_local.NAMESPACE,
        "POD_NAME": name,
    }


def holder(harness: Any) -> str:
    lease = harness.cluster.kubectl(
        "get", "lease", LEASE, "-n", operator_local.NAMESPACE,
        "-o", "jsonpath={.spec.holderIdentity}", check=False,
    )  # fmt: skip
    return str(lease.stdout.strip()) if lease.returncode == 0 else ""


def test_one_replica_acts_and_the_standby_takes_over_within_30s_of_a_kill(
    harness: Any, make_spec: Any
) -> None:
    active = harness.start_operator(replica("op-a"))
    wait_for("op-a to lead", lambda: holder(harness).startswith("op-a_"))
    standby = harness.start_operator(replica("op-b"))  # ready: /healthz answers while it waits
    wait_for("op-b to stand by", lambda: "standing by as op-b_" in standby.log_tail(200))

    harness.apply_run("r1", make_spec())
    pods = harness.running_pods("r1-regen", 2)
    assert "created Job" in active.log_tail(200)
    assert "created" not in standby.log_tail(200)

    active.kill()  # SIGKILL: no release, the lease must run out
    killed_at = time.monotonic()
    for pod in pods:  # the shards finish while nobody leads
        harness.finish_pod(pod, harness.stage_results["regen"])
    wait_for("op-b to lead", lambda: holder(harness).startswith("op-b_"), HANDOVER_LIMIT_SECONDS)
    handover = time.monotonic() - killed_at
    print(f"handover after SIGKILL of the leader: {handover:.1f} s")

    harness.wait_phase("r1", "AuditingCompletions")
    assert "created Job" in standby.log_tail(200)
    assert harness.names("jobs").count("r1-regen") == 1
    assert harness.names("jobs").count("r1-audit-completions") == 1
    regeneration = harness.status("r1")["stages"]["regeneration"]
    assert regeneration["shardsDone"] == 2  # counted by op-b from the pods op-a never saw end


def test_a_clean_stop_releases_the_lease_and_the_standby_leads_at_once(
    harness: Any, make_spec: Any
) -> None:
    first = harness.start_operator(replica("op-a"))
    wait_for("op-a to lead", lambda: holder(harness).startswith("op-a_"))
    harness.start_operator(replica("op-b"))
    first.stop()  # SIGTERM: kopf stops, then the lease is released
    assert holder(harness) in ("",) or holder(harness).startswith("op-b_")
    # Released: taken at op-b's next try (2 s), far before the 15 s lease would run out.
    wait_for("op-b to lead", lambda: holder(harness).startswith("op-b_"), 8)
    lease = get_json(harness.cluster, "lease", LEASE, "-n", operator_local.NAMESPACE)
    assert lease["spec"]["leaseTransitions"] >= 1
    harness.apply_run("r1", make_spec())
    harness.running_pods("r1-regen", 2)
