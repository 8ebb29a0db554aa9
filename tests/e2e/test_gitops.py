"""GitOps for real: Argo CD 3.6 core (application-controller, repo-server, Redis; gitops.py)
syncs the example of examples/gitops/ from a local Git server, and the DFlashRuns committed
there, on the local control plane.

One Argo CD, one fork of the example and one runs namespace for the whole module; the tests run
in order (bootstrap, runs, upgrade, deletion). The chart's Deployment is created and rolled by
Argo CD for real; its pod runs on a kwok node (no kubelet runs the operator image here), so the
operator itself runs as a local process with that Deployment's ServiceAccount, its RBAC as
Argo CD synced it, and is restarted when the Deployment rolls (docs/gitops.md, "What the tests
prove"). Stage pods run on this session's process executor.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_dev import gitops, gitops_example, operator_local
from dflash_dev.demo import assets
from dflash_dev.demo.harness import DemoHarness
from dflash_dev.executor.testing import LocalExecutor
from dflash_dev.gitserver import LocalRepo
from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.pytest_plugin import ClusterHandle, S3Handle

ARGOCD_NS = gitops.NAMESPACE
APPS = ("dflash", "dflash-operator", "dflash-runs")
# The fork's release: other e2e tests install the chart as release dflash-operator
# (operator_local.install) on the same cluster; Argo CD must not adopt, then delete, theirs.
RELEASE = "dflash-gitops"
OPERATOR_NS = "dflash-system"
CRD = "dflashruns.dflash.dev"
# The example's protection of a run (examples/gitops/runs/qwen3-8b-chat-v1.yaml).
EXAMPLE_RUN = gitops_example.EXAMPLE / "runs" / "qwen3-8b-chat-v1.yaml"
# The example's Application that installs the chart from a Helm repository.
HELM_REPO_APP = gitops_example.EXAMPLE / "from-helm-repo" / "dflash-operator.yaml"
HELM_REPO_PLACEHOLDER = "https://charts.your-org.example/dflash"
SYNC_TIMEOUT = 300.0  # a first sync retries with backoff while the CRD and namespaces appear
QUIET_SECONDS = 120.0  # the window: nothing may turn OutOfSync after a sync
CASCADE = "resources-finalizer.argocd.argoproj.io"
RUNS = "examples/gitops/runs"  # the runs Application's folder in the fork
# An operation or condition message about a failed attempt (Argo CD: "one or more objects failed
# to apply, reason: ... (retried 1 times).", "ComparisonError", ...).
FAILURE_WORDS = ("fail", "error", "retried", "could not", "not found")
PER_SOURCE = 24  # the broken data, as make demo-broken-data (tests/e2e/test_broken_data.py)


@dataclass
class GitOpsWorld:
    cluster: ClusterHandle
    harness: DemoHarness
    repo: LocalRepo
    runs_ns: str
    charts_url: str  # the local Helm repository, with the fork's chart as it was created
    # Every (run, Argo CD health, message) and failed-sync message seen while polling.
    health_seen: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    sync_failures: list[str] = field(default_factory=list)

    # --- Git ------------------------------------------------------------------------------------
    def commit_run(self, run: dict[str, Any], message: str) -> str:
        self.repo.write(f"{RUNS}/{run['metadata']['name']}.yaml", yaml.safe_dump(run))
        return self.commit(message)

    def commit(self, message: str) -> str:
        return self.repo.commit(message)

    def wait_synced(self, app: str, sha: str) -> None:
        """Synced at that commit: compared (OutOfSync for an instant) and applied."""
        wait_for(
            f"{app} synced at {sha[:8]}",
            lambda: self.state(app)[::2] == ("Synced", sha),
            SYNC_TIMEOUT,
        )

    # --- Argo CD --------------------------------------------------------------------------------
    def app(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = get_json(self.cluster, "application", name, "-n", ARGOCD_NS)
        status = found.get("status") or {}
        operation = status.get("operationState") or {}
        messages = [operation.get("message", "")]
        messages += [c.get("message", "") for c in status.get("conditions") or []]
        for message in messages:
            failed = any(word in message.lower() for word in FAILURE_WORDS)
            if failed and f"{name}: {message}" not in self.sync_failures:
                self.sync_failures.append(f"{name}: {message}")
        for resource in status.get("resources") or []:
            if resource.get("kind") == "DFlashRun":
                health = resource.get("health") or {}
                seen = self.health_seen.setdefault(resource["name"], [])
                entry = (health.get("status", ""), health.get("message", ""))
                if not seen or seen[-1] != entry:
                    seen.append(entry)
        return found

    def state(self, name: str) -> tuple[str, str, str]:
        status = self.app(name).get("status") or {}
        return (
            (status.get("sync") or {}).get("status", ""),
            (status.get("health") or {}).get("status", ""),
            (status.get("sync") or {}).get("revision", ""),
        )

    def wait_app(self, name: str, sync: str, health: str, revision: str | None = None) -> None:
        def reached() -> bool:
            state = self.state(name)
            return state[:2] == (sync, health) and revision in (None, state[2])

        try:
            wait_for(f"Application {name} {sync} and {health}", reached, SYNC_TIMEOUT)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.describe()}") from None

    def run_health(self, name: str) -> tuple[str, str]:
        """The run's health as Argo CD computed it (our Lua check in argocd-cm)."""
        for resource in self.app("dflash-runs").get("status", {}).get("resources") or []:
            if resource.get("kind") == "DFlashRun" and resource.get("name") == name:
                health = resource.get("health") or {}
                return health.get("status", ""), health.get("message", "")
        return "", ""

    def wait_run_health(self, name: str, wanted: str, timeout: float = 540.0) -> str:
        try:
            found = wait_for(
                f"DFlashRun {name} {wanted} in Argo CD",
                lambda: self.run_health(name)[0] == wanted and self.run_health(name)[1],
                timeout,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.harness.describe(name)}") from None
        return str(found)

    def describe(self) -> str:
        lines = []
        for name in APPS:
            found = self.cluster.kubectl(
                "get", "application", name, "-n", ARGOCD_NS, "-o", "json", check=False
            )
            if found.returncode:
                lines.append(f"{name}: absent")
                continue
            status = json.loads(found.stdout).get("status") or {}
            lines.append(f"{name}: " + json.dumps({k: status.get(k) for k in (
                "sync", "health", "operationState", "conditions")})[:1500])  # fmt: skip
        logs = Path(gitops.state_dir()) / "logs" / "argocd-application-controller.log"
        tail = (
            "\n".join(logs.read_text(errors="replace").splitlines()[-15:]) if logs.exists() else ""
        )
        return "\n".join(lines) + f"\n--- controller log:\n{tail}"

    # --- the operator ---------------------------------------------------------------------------
    def operator_pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={RELEASE}"
        items: list[dict[str, Any]] = get_json(
            self.cluster, "pods", "-n", OPERATOR_NS, "-l", selector
        )["items"]
        return items

    def start_operator(self) -> None:
        """The operator as the Deployment's pod would run it: its ServiceAccount, its RBAC."""
        operator_local.token_kubeconfig(
            self.cluster.kubeconfig, self.harness.operator_kubeconfig, RELEASE, OPERATOR_NS
        )
        self.harness.start_operator(namespaces=(self.runs_ns,))


def build_fork_apps(repo: LocalRepo, runs_ns: str) -> None:
    """The fork's own choices: a release name of its own (see RELEASE) and its runs namespace."""
    for relative in gitops_example.APPS:
        path = repo.work / "examples" / "gitops" / relative
        text = path.read_text().replace("releaseName: dflash-operator", f"releaseName: {RELEASE}")
        path.write_text(text.replace("ml-team", runs_ns))


def protect_like_the_example(run: dict[str, Any]) -> dict[str, Any]:
    """The example run's Argo CD annotations on a test run."""
    example = yaml.safe_load(EXAMPLE_RUN.read_text())
    run["metadata"].setdefault("annotations", {}).update(example["metadata"]["annotations"])
    return run


def remove_stale_crd(cluster: ClusterHandle) -> None:
    """Without the CRD the first sync applies a run before its kind exists (what a fresh cluster
    does). Runs left by earlier tests (finished; their operators stopped) are released first."""
    runs = get_json(cluster, "dflashruns", "-A") if _has_crd(cluster) else {"items": []}
    for run in runs["items"]:
        meta = run["metadata"]
        cluster.kubectl("patch", "dflashrun", meta["name"], "-n", meta["namespace"],
                        "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    cluster.kubectl("delete", "crd", CRD, "--ignore-not-found", "--timeout=120s")


def _has_crd(cluster: ClusterHandle) -> bool:
    return exists(cluster, "crd", CRD)


def exists(cluster: ClusterHandle, *args: str) -> bool:
    return cluster.kubectl("get", *args, check=False).returncode == 0


def uids(cluster: ClusterHandle, kind: str, namespace: str, *selector: str) -> dict[str, str]:
    items = get_json(cluster, kind, "-n", namespace, *selector)["items"]
    return {item["metadata"]["name"]: item["metadata"]["uid"] for item in items}


# Stages before training: a tiny run spends minutes in them, not the instant before it ends.
EARLY_STAGES = ("Regenerating", "Scoring", "AuditingCompletions", "Tokenizing", "AuditingTokens")


@pytest.fixture(scope="module")
def world(
    cluster: ClusterHandle,
    s3: S3Handle,
    e2e_executor: LocalExecutor,
    tiny_target: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GitOpsWorld]:
    was_up = gitops.is_healthy()
    info = gitops.up(cluster.kubeconfig)
    remove_stale_crd(cluster)
    runs_ns = f"ml-team-{secrets.token_hex(3)}"
    workdir = tmp_path_factory.mktemp("gitops")
    harness = DemoHarness(
        cluster, s3, e2e_executor, workdir / "operator.kubeconfig", workdir, runs_ns,
        bucket=f"e2e-{secrets.token_hex(5)}", target=tiny_target,
    )  # fmt: skip
    first = protect_like_the_example(harness.build_run("first"))
    repo = gitops_example.create_fork(
        Path(info.state_dir) / "sources", info.sources_url, {"first.yaml": yaml.safe_dump(first)}
    )
    build_fork_apps(repo, runs_ns)
    repo.commit("The fork's release name and runs namespace")
    found = GitOpsWorld(cluster, harness, repo, runs_ns, f"{info.sources_url}/charts")
    yield found
    harness.stop()
    for name in APPS:  # what the deletion test left, if it failed
        cluster.kubectl("patch", "application", name, "-n", ARGOCD_NS, "--type=merge",
                        "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        cluster.kubectl("delete", "application", name, "-n", ARGOCD_NS, "--wait=false", check=False)
    remove_stale_crd(cluster)  # the runs of this module (their operator is gone)
    operator_local.install(cluster.kubeconfig)  # the CRD other tests expect
    cluster.kubectl("delete", "namespace", runs_ns, "--wait=false", check=False)
    if not was_up:
        gitops.down()


def test_the_bootstrapped_example_syncs_to_synced_and_healthy_and_creates_the_operator(
    world: GitOpsWorld,
) -> None:
    cluster = world.cluster
    cluster.kubectl("apply", "-n", ARGOCD_NS, "-f", str(gitops_example.root_app_path(world.repo)))
    # The Secret "by hand" (docs/gitops.md, "The S3 Secret") once Argo CD created the namespace.
    wait_for(
        "the runs namespace", lambda: exists(cluster, "namespace", world.runs_ns), SYNC_TIMEOUT
    )
    world.harness.prepare_namespace(world.runs_ns)
    wait_for(
        "the operator's Deployment",
        lambda: exists(cluster, "deployment", RELEASE, "-n", OPERATOR_NS),
        SYNC_TIMEOUT,
    )
    world.start_operator()

    world.wait_app("dflash", "Synced", "Healthy")
    world.wait_app("dflash-operator", "Synced", "Healthy")
    deployment = get_json(cluster, "deployment", RELEASE, "-n", OPERATOR_NS)
    assert deployment["status"].get("availableReplicas") == 1, deployment["status"]
    tracking = deployment["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"]
    assert tracking.startswith("dflash-operator:apps/Deployment:"), tracking
    assert _has_crd(cluster)
    # The runs Application: synced; its health is the run's, Progressing until it succeeds.
    wait_for("dflash-runs Synced", lambda: world.state("dflash-runs")[0] == "Synced", SYNC_TIMEOUT)
    annotations = world.harness.run("first")["metadata"]["annotations"]
    assert annotations["argocd.argoproj.io/tracking-id"].startswith(
        "dflash-runs:dflash.dev/DFlashRun:"
    )


def test_a_run_applied_before_its_crd_exists_is_ordered_or_fails_saying_why(
    world: GitOpsWorld,
) -> None:
    """The bootstrap above applied runs/ (wave 1) and the chart with the CRD (wave -1) on a
    cluster without the CRD: every failed attempt must say why, and the sync ends applied."""
    print("failed sync attempts seen:", *world.sync_failures, sep="\n  ")
    for message in world.sync_failures:
        assert any(word in message for word in ("DFlashRun", "dflash.dev", "namespace")), (
            world.sync_failures
        )
    crd = get_json(world.cluster, "crd", CRD)
    run = world.harness.run("first")
    assert run["metadata"]["creationTimestamp"] >= crd["metadata"]["creationTimestamp"]
    assert world.state("dflash-runs")[0] == "Synced"


@pytest.mark.timeout(900)  # two runs and the 2-minute window on 2 shared cores
def test_runs_from_git_are_progressing_then_healthy_or_degraded_and_nothing_drifts_for_2_min(
    world: GitOpsWorld,
) -> None:
    harness = world.harness
    own = assets.ensure_own_answers(harness.target, assets.magicoder_prompts(PER_SOURCE))
    files = assets.build_broken_sources(PER_SOURCE, own_answers=own)
    canary = {"canary": {"samplesPerSource": 16}}
    broken = harness.build_run("broken", files, PER_SOURCE, regeneration=canary)
    sha = world.commit_run(protect_like_the_example(broken), "A run of broken data")
    world.wait_synced("dflash-runs", sha)
    # The quiet window: the operator writes status, finalizers and annotations meanwhile.
    drift: list[str] = []
    started = time.monotonic()
    while time.monotonic() - started < QUIET_SECONDS:
        for name in APPS:
            sync = world.state(name)[0]
            if sync != "Synced":
                drift.append(f"{name}: {sync} after {time.monotonic() - started:.0f}s")
        time.sleep(3)
    assert not drift, f"{drift}\n{world.describe()}"

    message = world.wait_run_health("first", "Healthy")
    assert message.startswith("Drafter exported to s3://"), message
    assert "Progressing" in {h for h, _ in world.health_seen["first"]}, world.health_seen
    message = world.wait_run_health("broken", "Degraded")
    assert message.startswith("canary audit failed: "), message
    assert "openorca" in message and "report: s3://" in message, message
    assert "Progressing" in {h for h, _ in world.health_seen["broken"]}, world.health_seen
    assert harness.status("broken")["phase"] == "AuditFailed"


def bump_chart_version(repo: LocalRepo) -> str:
    """A new patch version of the fork's chart (its pods carry helm.sh/chart: a roll)."""
    chart_file = repo.work / "charts" / "dflash-operator" / "Chart.yaml"
    text = chart_file.read_text()
    version = str(yaml.safe_load(text)["version"])
    major, minor, patch = version.split("-")[0].split(".")
    upgraded = f"{major}.{minor}.{int(patch) + 1}"
    chart_file.write_text(text.replace(f"version: {version}", f"version: {upgraded}"))
    return upgraded


@pytest.mark.timeout(900)
def test_a_chart_upgrade_committed_to_git_rolls_the_operator_and_a_run_in_flight_goes_on(
    world: GitOpsWorld,
) -> None:
    harness, cluster = world.harness, world.cluster
    sha = world.commit_run(protect_like_the_example(harness.build_run("third")), "A third run")
    world.wait_synced("dflash-runs", sha)
    harness.wait_until("a stage running", "third", lambda s: s.get("phase") in EARLY_STAGES)
    # The old pod's process stops here, so the roll meets the run in flight whatever the speed
    # of this machine: with leader election (the chart's default) the new pod acts only once
    # the old one is gone, and a stage's Job runs on meanwhile without any operator.
    for process in harness.operators:
        process.stop()
    assert harness.status("third")["phase"] != "Succeeded", "the run finished before the roll"
    jobs_before = uids(cluster, "jobs", world.runs_ns, "-l", "dflash.dev/run=third")
    pods_before = set(
        uids(cluster, "pods", OPERATOR_NS, "-l", f"app.kubernetes.io/instance={RELEASE}")
    )
    generation = get_json(cluster, "deployment", RELEASE, "-n", OPERATOR_NS)["metadata"][
        "generation"
    ]

    upgraded = bump_chart_version(world.repo)
    sha = world.commit(f"Chart {upgraded}")
    world.wait_app("dflash-operator", "Synced", "Healthy", revision=sha)
    deployment = get_json(cluster, "deployment", RELEASE, "-n", OPERATOR_NS)
    assert deployment["metadata"]["generation"] > generation
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["helm.sh/chart"] == f"dflash-operator-{upgraded}"

    def rolled() -> bool:
        pods = world.operator_pods()
        running = {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"}
        return bool(running - pods_before) and not pods_before & {
            p["metadata"]["name"] for p in pods
        }

    wait_for("the old operator pod replaced by a new one", rolled, 120)
    # The roll replaced the pod: the operator process it stands for starts anew.
    world.start_operator()
    final = harness.wait_phase("third", "Succeeded", "Failed", "AuditFailed")
    assert final["phase"] == "Succeeded", harness.describe("third")
    jobs_after = uids(cluster, "jobs", world.runs_ns, "-l", "dflash.dev/run=third")
    for name, uid in jobs_before.items():
        assert jobs_after.get(name) == uid, f"{name} was re-created by the upgrade"
    assert world.wait_run_health("third", "Healthy")


def build_helm_repo_app(charts_url: str, runs_ns: str) -> tuple[dict[str, Any], str]:
    """The example's Helm-repository Application, beside (not instead of) the fork's: its own
    name, release and namespace, the CRD and the cluster's training runtime left to the fork's
    release (two Applications must not own one resource). The namespace it installs into."""
    app = yaml.safe_load(HELM_REPO_APP.read_text().replace(HELM_REPO_PLACEHOLDER, charts_url))
    assert app["spec"]["source"]["repoURL"] == charts_url, "the placeholder moved"
    namespace = f"dflash-helm-{secrets.token_hex(3)}"
    app["metadata"]["name"] = "dflash-operator-helm"
    app["spec"]["destination"]["namespace"] = namespace
    helm = app["spec"]["source"]["helm"]
    helm["releaseName"] = "dflash-helm"
    helm["skipCrds"] = True
    helm["valuesObject"]["operator"]["watchNamespaces"] = [runs_ns]
    helm["valuesObject"]["training"] = {"runtime": {"enabled": False}}
    return app, namespace


def test_the_operator_from_the_helm_repository_syncs_healthy_and_uninstalls_with_cascade(
    world: GitOpsWorld, tmp_path: Path
) -> None:
    cluster = world.cluster
    app, namespace = build_helm_repo_app(world.charts_url, world.runs_ns)
    name = app["metadata"]["name"]
    path = tmp_path / "helm-app.yaml"
    path.write_text(yaml.safe_dump(app))
    cluster.kubectl("apply", "-f", str(path))
    try:
        world.wait_app(name, "Synced", "Healthy")
        status = world.app(name)["status"]
        assert status["sourceType"] == "Helm", status.get("sourceType")
        version = str(app["spec"]["source"]["targetRevision"])
        assert status["sync"]["revision"] == version, status["sync"]
        deployment = get_json(cluster, "deployment", "dflash-helm", "-n", namespace)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["helm.sh/chart"] == f"dflash-operator-{version}"
        tracking = deployment["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"]
        assert tracking.startswith(f"{name}:apps/Deployment:"), tracking
        assert deployment["status"].get("availableReplicas") == 1, deployment["status"]
        crd_uid = get_json(cluster, "crd", CRD)["metadata"]["uid"]

        cluster.kubectl("delete", "application", name, "-n", ARGOCD_NS, "--wait=false")
        wait_for(
            "the Helm repository's release uninstalled by the cascade",
            lambda: (
                not exists(cluster, "deployment", "dflash-helm", "-n", namespace)
                and not exists(cluster, "application", name, "-n", ARGOCD_NS)
            ),
            SYNC_TIMEOUT,
        )
        assert get_json(cluster, "crd", CRD)["metadata"]["uid"] == crd_uid
        assert world.state("dflash-operator")[:2] == ("Synced", "Healthy")
    finally:
        cluster.kubectl("delete", "application", name, "-n", ARGOCD_NS, "--wait=false",
                        check=False)  # fmt: skip
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_a_commit_that_edits_an_immutable_field_fails_the_sync_and_leaves_the_run_alone(
    world: GitOpsWorld,
) -> None:
    before = world.harness.run("first")
    original = (world.repo.work / RUNS / "first.yaml").read_text()
    edited = yaml.safe_load(original)
    edited["spec"]["data"]["sources"][0]["maxSamples"] += 1
    world.commit_run(edited, "Edit an immutable field of a finished run")

    def refused() -> str:
        status = world.app("dflash-runs").get("status") or {}
        message = str((status.get("operationState") or {}).get("message", ""))
        return message if "immutable" in message else ""

    message = wait_for("the sync refused by the API", refused, SYNC_TIMEOUT)
    print("refused sync:", message)
    assert "spec.data" in message, message
    assert world.state("dflash-runs")[0] == "OutOfSync"
    after = world.harness.run("first")
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert world.run_health("first")[0] == "Healthy"

    # The failed sync retries (with the same commit) until its retry limit, and while it does
    # Argo CD neither syncs a newer commit nor deletes the Application: revert, and stop the
    # operation as `argocd app terminate-op dflash-runs` does (core mode has no API server).
    world.repo.write(f"{RUNS}/first.yaml", original)
    sha = world.commit("Revert the immutable edit")
    terminate = json.dumps({"status": {"operationState": {"phase": "Terminating"}}})
    world.cluster.kubectl(
        "patch", "application", "dflash-runs", "-n", ARGOCD_NS, "--type=merge", "-p", terminate
    )
    world.wait_synced("dflash-runs", sha)


def test_deleting_the_applications_with_cascade_keeps_the_crd_and_every_dflashrun(
    world: GitOpsWorld,
) -> None:
    cluster = world.cluster
    runs = uids(cluster, "dflashruns", world.runs_ns)
    assert set(runs) >= {"first", "broken", "third"}
    # The root first (no finalizer: its Applications stay), then each Application the way
    # `argocd app delete --cascade` does it: the resources finalizer, then delete.
    cluster.kubectl("delete", "application", "dflash", "-n", ARGOCD_NS)
    finalizer = json.dumps([{"op": "add", "path": "/metadata/finalizers", "value": [CASCADE]}])
    for name in ("dflash-runs", "dflash-operator"):
        cluster.kubectl(
            "patch", "application", name, "-n", ARGOCD_NS, "--type=json", "-p", finalizer
        )
        cluster.kubectl(
            "delete", "application", name, "-n", ARGOCD_NS, "--timeout=180s", timeout=200
        )
    # The cascade ran: the chart's Deployment is gone...
    wait_for(
        "the operator's Deployment deleted",
        lambda: not exists(cluster, "deployment", RELEASE, "-n", OPERATOR_NS),
        60,
    )
    # ...but neither the CRD nor any run.
    assert _has_crd(cluster)
    assert uids(cluster, "dflashruns", world.runs_ns) == runs
