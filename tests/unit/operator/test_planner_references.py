"""No silent hang: a run naming a PriorityClass, a LocalQueue, a ServiceAccount, a ConfigMap or a
Secret that does not exist says so in its stage's condition (reason ObjectMissing, one Warning
event) before any child waits on it, and goes on by itself once the object exists.

The simulated executor (`Sim.absent`) answers the lookups the planner asks for; the unit tests'
pools queue training (`rtx-pro-6000` has `kueue.x-k8s.io/queue-name: gpu-queue`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dflash_operator.plan.actions import CreateChild, LookUp
from dflash_operator.plan.observed import ObjectRef, PodView
from dflash_operator.plan.references import describe, missing_from_pods

PASS = {"verdict": "pass"}


def warnings(world: Any) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for p in world.plans for e in p.events if e.type == "Warning"]


def to_training(world: Any) -> None:
    world.settle()
    for name, result in (
        ("r1-regen", {"samples": 10}),
        ("r1-audit-completions", PASS),
        ("r1-tokenize", {}),
        ("r1-audit-tokens", PASS),
    ):
        world.finish(name, result=result, pods=4 if name == "r1-regen" else 1)
        world.settle()


def test_a_missing_priority_class_stops_the_first_child_and_the_run_goes_on_once_it_exists(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=make_spec(priorityClassName="ml-batch"))
    world.absent = {("PriorityClass", "ml-batch")}
    for _ in range(5):  # retries and resyncs while it is missing
        world.step()

    assert world.created == []  # no child waits on it
    regenerated = world.condition("Regenerated")
    assert regenerated["status"] == "False" and regenerated["reason"] == "ObjectMissing"
    assert regenerated["message"] == (
        "regen cannot start: PriorityClass ml-batch (named by spec.priorityClassName) does not "
        "exist. Create it, or change the field that names it; regen goes on as soon as it "
        "exists, without an operator restart"
    )
    assert world.status["phase"] == "Regenerating"
    assert world.status["message"] == regenerated["message"]
    assert warnings(world) == [("ObjectMissing", regenerated["message"])]  # once, not per retry

    world.absent = set()  # kubectl create priorityclass ml-batch
    world.settle()
    assert "r1-regen" in world.created
    assert world.condition("Regenerated")["reason"] == "StageRunning"
    assert world.child("r1-regen").name == "r1-regen"


def test_every_missing_object_is_named_with_the_field_that_names_it(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    spec = make_spec(queueName="team-a", serviceAccountName="s3-reader")
    spec["storage"]["caBundle"] = {"configMapName": "corp-ca"}
    world = sim(spec=spec)
    world.absent = {
        ("LocalQueue", "team-a"),
        ("ServiceAccount", "s3-reader"),
        ("ConfigMap", "corp-ca"),
    }
    world.step()
    message = world.condition("Regenerated")["message"]
    assert (
        "LocalQueue team-a (named by spec.queueName) does not exist in namespace ml; "
        "ServiceAccount s3-reader (named by spec.serviceAccountName) does not exist in "
        "namespace ml; ConfigMap corp-ca (named by spec.storage.caBundle.configMapName) does "
        "not exist in namespace ml."
    ) in message
    world.absent = {("ServiceAccount", "s3-reader")}
    world.step()
    message = world.condition("Regenerated")["message"]
    assert "LocalQueue" not in message and "ServiceAccount s3-reader" in message
    assert len(warnings(world)) == 1  # the reason stayed ObjectMissing


def test_a_pools_queue_is_checked_when_the_stage_it_queues_starts(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.absent = {("LocalQueue", "gpu-queue")}
    to_training(world)  # the data stages are not queued: they ran
    assert "r1-train" not in world.created
    trained = world.condition("Trained")
    assert trained["reason"] == "ObjectMissing"
    assert (
        "LocalQueue gpu-queue (named by nodePools.rtx-pro-6000.labels[kueue.x-k8s.io/queue-name]) "
        "does not exist in namespace ml"
    ) in trained["message"]
    create = [a for actions in world.actions for a in actions if isinstance(a, CreateChild)]
    train = [a for a in create if a.name == "r1-train"]
    # Training runs as the run's own <run>-trainer account: no ServiceAccount to look up.
    assert {ref.kind for ref in train[-1].requires} == {"LocalQueue"}


def test_a_pod_waiting_for_a_missing_secret_names_it_and_the_run_goes_on_when_it_starts(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.settle()
    regen = world.child("r1-regen")
    waiting = PodView(
        name="r1-regen-0-abcde", uid="pod-0", owner_name="r1-regen", owner_uid=regen.uid,
        stage=regen.stage, waiting_reason="CreateContainerConfigError",
        waiting_message='secret "s3-creds" not found',
    )  # fmt: skip
    world.pods.append(waiting)
    for _ in range(3):
        world.step()
    regenerated = world.condition("Regenerated")
    assert regenerated["reason"] == "ObjectMissing"
    assert regenerated["message"].startswith(
        "regen cannot start: Secret s3-creds (named by spec.storage.credentialsSecretRef.name) "
        "does not exist in namespace ml (the kubelet's CreateContainerConfigError on pod "
        "r1-regen-0-abcde)."
    )
    assert [r for r, _ in warnings(world)] == ["ObjectMissing"]

    world.pods[-1] = replace(waiting, waiting_reason=None, waiting_message=None, phase="Running")
    world.step()  # kubectl create secret ...: the kubelet starts the container
    assert world.condition("Regenerated")["reason"] == "StageRunning"
    assert [r for r, _ in warnings(world)] == ["ObjectMissing"]


def test_the_kubelets_words_for_a_missing_secret_key_or_config_map_are_understood(
    make_spec: Callable[..., dict[str, Any]],
) -> None:
    from dflash_operator.api.validation import parse_spec

    spec = parse_spec(make_spec(hfTokenSecretRef={"name": "hf"}))

    def pod(message: str) -> PodView:
        return PodView(name="p", uid="u", owner_name="j", waiting_reason="CreateContainerConfigError",
                       waiting_message=message)  # fmt: skip

    key = missing_from_pods(
        spec, [pod("couldn't find key AWS_ACCESS_KEY_ID in Secret ml/s3-creds")]
    )
    assert key is not None
    assert describe(key[0], "ml") == (
        "Secret s3-creds in namespace ml has no key AWS_ACCESS_KEY_ID "
        "(named by spec.storage.credentialsSecretRef.name)"
    )
    hub = missing_from_pods(spec, [pod('secret "hf" not found (env HF_TOKEN)')])
    assert hub is not None and hub[0] == ObjectRef("Secret", "hf", "spec.hfTokenSecretRef.name")
    other = missing_from_pods(spec, [pod('configmap "x" not found')])
    assert other is not None and other[0].field == "the stage's pod template"
    assert missing_from_pods(spec, [replace(pod("boom"), waiting_reason="ErrImagePull")]) is None


def test_a_pod_waiting_in_container_creating_names_its_missing_ca_secret_from_failed_mounts(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    """A Secret volume (the CA bundle) that does not exist: a kubelet leaves the pod in
    ContainerCreating, with no message, and says why only in FailedMount events. The run
    names the Secret and its field from them, and looks again soon while the pod waits."""
    spec = make_spec()
    spec["storage"]["caBundle"] = {"secretName": "corp-ca"}
    world = sim(spec=spec)
    world.settle()
    regen = world.child("r1-regen")
    creating = PodView(
        name="r1-regen-0-abcde", uid="pod-0", owner_name="r1-regen", owner_uid=regen.uid,
        stage=regen.stage, waiting_reason="ContainerCreating",
        volumes=(("config", "ConfigMap", "r1-config"), ("s3-ca", "Secret", "corp-ca")),
    )  # fmt: skip
    world.pods.append(creating)
    plan = world.step()
    assert world.condition("Regenerated")["reason"] == "StageRunning"  # no event read yet
    assert plan.requeue_after is not None and plan.requeue_after <= 10

    world.pods[-1] = replace(creating, mount_failures=(
        'MountVolume.SetUp failed for volume "s3-ca" : secret "corp-ca" not found',
    ))  # fmt: skip
    plan = world.step()
    regenerated = world.condition("Regenerated")
    assert regenerated["reason"] == "ObjectMissing"
    assert regenerated["message"].startswith(
        "regen cannot start: Secret corp-ca (named by spec.storage.caBundle.secretName) does "
        "not exist in namespace ml (the kubelet's FailedMount event on pod r1-regen-0-abcde)."
    )
    assert plan.requeue_after is not None and plan.requeue_after <= 10
    assert [r for r, _ in warnings(world)] == ["ObjectMissing"]

    world.pods[-1] = replace(creating, waiting_reason=None, phase="Running")
    world.step()  # the Secret was created: the kubelet mounts it and starts the container
    assert world.condition("Regenerated")["reason"] == "StageRunning"


def test_the_kubelets_failed_mount_words_name_the_object_or_the_key_of_a_volume(
    make_spec: Callable[..., dict[str, Any]],
) -> None:
    from dflash_operator.api.validation import parse_spec

    raw = make_spec()
    raw["storage"]["caBundle"] = {"secretName": "corp-ca", "key": "ca.pem"}
    spec = parse_spec(raw)
    volumes = (("config", "ConfigMap", "r1-config"), ("s3-ca", "Secret", "corp-ca"))

    def pod(*events: str, reason: str = "ContainerCreating") -> PodView:
        return PodView(name="p", uid="u", owner_name="j", waiting_reason=reason,
                       volumes=volumes, mount_failures=events)  # fmt: skip

    key = missing_from_pods(spec, [pod(
        'MountVolume.SetUp failed for volume "s3-ca" : references non-existent secret key: ca.pem'
    )])  # fmt: skip
    assert key is not None and key[2] == "FailedMount"
    assert describe(key[0], "ml") == (
        "Secret corp-ca in namespace ml has no key ca.pem "
        "(named by spec.storage.caBundle.secretName)"
    )
    config = missing_from_pods(spec, [pod(
        'MountVolume.SetUp failed for volume "config" : configmap "r1-config" not found'
    )])  # fmt: skip
    assert config is not None and config[0] == ObjectRef(
        "ConfigMap", "r1-config", "the stage's pod template"
    )
    config_key = missing_from_pods(spec, [pod(
        'MountVolume.SetUp failed for volume "config" : '
        "configmap references non-existent config key: train.yaml"
    )])  # fmt: skip
    assert config_key is not None and config_key[0].key == "train.yaml"
    assert config_key[0].name == "r1-config"
    # The kubelet's later summary names no object; a pod that started has no say.
    timeout = (
        "Unable to attach or mount volumes: unmounted volumes=[s3-ca], unattached volumes=[], "
        "failed to process volumes=[]: timed out waiting for the condition"
    )
    assert missing_from_pods(spec, [pod(timeout)]) is None
    started = pod('MountVolume.SetUp failed for volume "s3-ca" : secret "corp-ca" not found')
    assert missing_from_pods(spec, [replace(started, waiting_reason=None, phase="Running")]) is None


def test_a_queued_child_kueue_makes_no_workload_for_is_explained_by_its_lookups(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    """The PriorityClass went away after the child was created (or an older operator made the
    child): Kueue only logs why it makes no Workload; the run names the object."""
    world = sim(spec=make_spec(priorityClassName="ml-batch"))
    to_training(world)
    world.workloads.clear()
    world.kueue_blocked = True
    train = world.child("r1-train")
    world.children[("PyTorchJob", "r1-train")] = replace(train, suspended=True)
    world.absent = {("PriorityClass", "ml-batch")}
    for _ in range(3):
        world.step()

    assert all(any(isinstance(a, LookUp) for a in actions) for actions in world.actions[-3:])
    assert all(not any(isinstance(a, LookUp) for a in p.actions) for p in world.plans[-3:])
    trained = world.condition("Trained")
    assert trained["reason"] == "ObjectMissing"
    assert (
        "PriorityClass ml-batch (named by spec.priorityClassName) does not exist"
        in (trained["message"])
    )
    assert (
        "; Kueue cannot make a Workload for PyTorchJob r1-train without it." in trained["message"]
    )
    assert world.status["message"] == trained["message"]
    assert [r for r, _ in warnings(world)] == ["ObjectMissing"]

    world.absent = set()
    world.kueue_blocked = False
    world.step()
    assert world.condition("Trained")["reason"] == "StageRunning"
    assert world.condition("Admitted")["reason"] == "Admitted"


def test_with_nothing_missing_a_child_without_workload_says_what_to_check(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    to_training(world)
    world.workloads.clear()
    world.kueue_blocked = True
    train = world.child("r1-train")
    world.children[("PyTorchJob", "r1-train")] = replace(train, suspended=True)
    world.step()
    admitted = world.condition("Admitted")
    assert admitted["reason"] == "Queued"
    assert admitted["message"] == (
        "train waits in Kueue LocalQueue gpu-queue: Kueue has made no Workload for PyTorchJob "
        "r1-train yet: it may not be running, not manage PyTorchJobs in this namespace, or be "
        "unable to build one (its log says why)"
    )
    assert world.condition("Trained")["reason"] == "StageRunning"


def test_a_queue_whose_kueue_api_is_not_served_is_named_never_object_missing(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    """Kueue is not installed (or serves another version): the child is created, it waits
    suspended, and the run says which API is missing and what serves it."""
    world = sim(spec=make_spec(queueName="team-a"))
    world.not_served = {"LocalQueue"}
    world.kueue_blocked = True
    world.step()
    world.settle()

    assert "r1-regen" in world.created
    reasons = {c["reason"] for c in world.status["conditions"]}
    assert "ObjectMissing" not in reasons
    admitted = world.condition("Admitted")
    assert admitted["reason"] == "Queued"
    assert "Kueue LocalQueue v1beta2 is not served: install Kueue >= 0.15" in admitted["message"]
    assert "Kueue LocalQueue v1beta2 is not served" in world.status["message"]


def test_a_workload_kueue_cannot_queue_for_an_unserved_local_queue_api_still_names_the_api(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    """Kueue made the Workload but cannot read the LocalQueue API (not served at v1beta2): it
    says "LocalQueue team-a doesn't exist". The run looks the queue up again and names the
    API (with Kueue's words after it), never ObjectMissing."""
    world = sim(spec=make_spec(queueName="team-a"))
    world.not_served = {"LocalQueue"}
    world.quota_free = False
    world.quota_message = "LocalQueue team-a doesn't exist"
    for _ in range(4):
        world.step()

    assert any(isinstance(a, LookUp) for actions in world.actions[-2:] for a in actions)
    admitted = world.condition("Admitted")
    assert admitted["reason"] == "Queued"
    assert admitted["message"] == (
        "regen waits in Kueue LocalQueue team-a: Kueue LocalQueue v1beta2 is not served: "
        "install Kueue >= 0.15 (the operator uses kueue.x-k8s.io/v1beta2 localqueues; this "
        "cluster does not serve it); Kueue says: LocalQueue team-a doesn't exist"
    )
    assert "ObjectMissing" not in {c["reason"] for c in world.status["conditions"]}


def test_a_workload_whose_served_local_queue_is_missing_is_object_missing(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    """The LocalQueue was deleted after the child was created: Kueue says so on the Workload;
    the run looks it up and names it (ObjectMissing), as before the child was created."""
    world = sim(spec=make_spec(queueName="team-a"))
    world.quota_free = False
    world.quota_message = "LocalQueue team-a doesn't exist"
    world.step()
    world.step()
    assert "r1-regen" in world.created and world.workloads  # Kueue made its Workload
    world.absent = {("LocalQueue", "team-a")}  # kubectl delete localqueue team-a
    for _ in range(3):
        world.step()
    regenerated = world.condition("Regenerated")
    assert regenerated["reason"] == "ObjectMissing", regenerated
    assert "LocalQueue team-a (named by spec.queueName) does not exist" in regenerated["message"]
    assert "Kueue cannot admit Job r1-regen without it" in regenerated["message"]
