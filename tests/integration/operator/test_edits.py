"""Spec edits of a running run, on the real control plane: an edit of the running stage's
settings takes effect (its Job is replaced by the next attempt, rendered from the new spec,
only once the old pods stopped; observedGeneration follows only then), a deadline edit is
patched onto the running Job, and an edit of a later stage restarts nothing."""

from __future__ import annotations

from typing import Any

from dflash_dev.kube_wait import get_json, wait_for


def _args(job: dict[str, Any]) -> list[str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return [*container.get("command", []), *container.get("args", [])]


def _job(harness: Any, name: str) -> dict[str, Any] | None:
    items = get_json(harness.cluster, "jobs", "-n", harness.namespace)["items"]
    return next((j for j in items if j["metadata"]["name"] == name), None)


def _generation_observed(harness: Any, name: str) -> bool:
    run = harness.run(name)
    return bool(run.get("status", {}).get("observedGeneration") == run["metadata"]["generation"])


def test_an_edit_of_the_running_stage_replaces_its_job_with_one_rendered_from_the_edit(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    harness.apply_run("r1", make_spec())
    old_pods = harness.running_pods("r1-regen", 2)
    old_uid = get_json(harness.cluster, "job", "r1-regen", "-n", harness.namespace)
    old_uid = old_uid["metadata"]["uid"]

    harness.patch_spec("r1", {"regeneration": {"maxNewTokens": 1024}})

    wait_for("r1-regen to be deleted", lambda: "r1-regen" not in harness.names("jobs"))
    new = wait_for("r1-regen-2", lambda: _job(harness, "r1-regen-2"))
    assert new["metadata"]["uid"] != old_uid
    args = _args(new)
    assert args[args.index("--max-tokens") + 1] == "1024", args
    # Never beside the old attempt: every old pod was gone before the new Job existed.
    names = {p["metadata"]["name"] for p in old_pods}
    assert not [p for p in harness.pods_of("r1-regen") if p["metadata"]["name"] in names]
    wait_for("observedGeneration to catch up", lambda: _generation_observed(harness, "r1"))
    harness.running_pods("r1-regen-2", 2)
    said = [m for _, r, m in harness.events("r1") if r == "SpecChanged"]
    assert len(said) == 1, harness.events("r1")
    assert "regen restarts as attempt 2 to apply the edit of spec.regeneration" in said[0]
    regen = harness.condition("r1", "Regenerated")
    assert regen and "attempt 2" in regen["message"], regen


def test_a_deadline_edit_reaches_the_running_job_without_a_restart(
    harness: Any, make_spec: Any
) -> None:
    harness.start_operator()
    harness.apply_run("r1", make_spec())
    harness.running_pods("r1-regen", 2)

    harness.patch_spec("r1", {"regeneration": {"activeDeadlineSeconds": 3600}})
    wait_for(
        "the deadline on the Job",
        lambda: (
            (_job(harness, "r1-regen") or {}).get("spec", {}).get("activeDeadlineSeconds") == 3600
        ),
    )
    wait_for("observedGeneration to catch up", lambda: _generation_observed(harness, "r1"))
    assert "r1-regen-2" not in harness.names("jobs")
    assert len(harness.running_pods_now("r1-regen")) == 2


def test_an_edit_of_a_later_stage_restarts_nothing(harness: Any, make_spec: Any) -> None:
    harness.start_operator()
    harness.apply_run("r1", make_spec())
    pods = harness.running_pods("r1-regen", 2)

    harness.patch_spec("r1", {"training": {"learningRate": 0.0002}})
    wait_for("observedGeneration to catch up", lambda: _generation_observed(harness, "r1"))
    assert harness.names("jobs") == ["r1-regen"]
    still = {p["metadata"]["uid"] for p in harness.running_pods_now("r1-regen")}
    assert still == {p["metadata"]["uid"] for p in pods}
