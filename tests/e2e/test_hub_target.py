"""A target named by its Hub id, end to end: the run copies it once into its S3 root (the model
stage, through a local stand-in for the Hub), and every other pod (canary, shards, gates,
tokenization, both training pods, evaluation) loads that copy with the Hub switched off. The
Hub serves each file of the model exactly once, whatever the number of pods."""

from __future__ import annotations

from dflash_dev.demo.harness import STAGE_JOBS, DemoHarness
from dflash_dev.hub_server import FAKE_COMMIT, HubServer

REPO = "dflash-test/tiny-qwen3"


def test_the_hub_serves_the_target_once_per_run_and_every_pod_loads_the_runs_copy(
    harness: DemoHarness, hub: HubServer
) -> None:
    hub.add_repo(REPO, harness.target)
    # The demo pool runs offline; the model stage alone needs the Hub (here: the local one).
    harness.start_operator(
        pool_env={"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}
    )
    run = harness.build_run("hub", target={"model": REPO})
    harness.apply(run)

    status = harness.wait_phase("hub", "Succeeded", "Failed", "AuditFailed")
    assert status["phase"] == "Succeeded", harness.describe("hub")

    copy = status["stages"]["model"]
    uid = harness.run("hub")["metadata"]["uid"]
    assert copy["uri"] == f"s3://{harness.bucket}/dflash/{harness.namespace}/hub/{uid}/model"
    assert copy["revision"] == FAKE_COMMIT
    assert copy["bytes"] > 0 and copy["fetchedBytes"] == copy["bytes"]
    # Exactly the model's bytes, once: no other pod reached the Hub.
    assert hub.served_bytes == copy["bytes"], dict(hub.served)
    assert all(count <= size for count, size in _served_against_sizes(hub))
    assert harness.children("jobs") == sorted(["hub-model", *(f"hub-{s}" for s in STAGE_JOBS)])
    pods = [p["metadata"]["name"] for p in harness.pods()]
    loaders = [n for n in pods if not n.startswith("hub-model")]
    assert len(loaders) >= 8, pods  # canary, 2 shards or more, gates, tokenize, 2 trainers, eval


def _served_against_sizes(hub: HubServer) -> list[tuple[int, int]]:
    repo = hub.repos[REPO]
    sizes = {f"{REPO}/{rf.path}": rf.size for rf in repo.files.values()}
    return [(count, sizes[key]) for key, count in hub.served.items()]
