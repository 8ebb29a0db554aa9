"""Build only what the command needs: `make demo` builds the control plane it uses (Trainer v2,
no training-operator) and nothing else,
the test tools (and Argo CD) come with the targets that use them, `make binaries` and
`make test` (CI) build everything; and the build script says what it builds, about how long, and shows its progress.
The script runs for real, with a stand-in `go` on PATH that "builds" in a few seconds."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
SCRIPT = ROOT / "hack" / "build-binaries.sh"
CLUSTER = {"etcd", "kube", "kwok", "helm", "trainer", "training-operator", "kueue"}
# The demo trains as a TrainJob: no training-operator (v1) in its cold build.
DEMO = CLUSTER - {"training-operator"}
TOOLS = {"actionlint", "promtool", "argocd"}
FAKE_GO = """#!/usr/bin/env bash
case "$1" in
  env) echo go1.26.8 ;;
  mod) echo '{}' ;;
  install)
    sleep "${FAKE_GO_SECONDS:-0}"
    pkg="${*: -1}"; name="$(basename "${pkg%@*}")"
    printf '#!/bin/sh\\n' >"$GOBIN/$name"; chmod +x "$GOBIN/$name" ;;
  *) echo "fake go: $*" >&2; exit 2 ;;
esac
"""


def built_by(target: str) -> set[str]:
    """The names `make -n <target>` passes to hack/build-binaries.sh (every call)."""
    dry = subprocess.run(
        ["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    names: set[str] = set()
    for line in dry.splitlines():
        if "hack/build-binaries.sh" in line:
            words = shlex.split(line)
            rest = words[words.index("hack/build-binaries.sh") + 1 :]
            if rest[:1] == ["--for"]:
                rest = rest[2:]
            names.update(rest)
    return names


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("demo", DEMO),
        ("demo-broken-data", DEMO),
        ("cluster-up", CLUSTER),
        ("test-e2e", CLUSTER | {"argocd"}),  # the GitOps e2e tests run Argo CD
        ("gitops-up", CLUSTER | {"argocd"}),
        ("test-integration", CLUSTER | {"promtool"}),
        ("test-unit", {"actionlint"}),
        ("binaries", CLUSTER | TOOLS),
        ("test", CLUSTER | TOOLS),  # what .ci/run runs
    ],
)
def test_each_target_builds_what_it_uses(target: str, expected: set[str]) -> None:
    assert built_by(target) == expected


def test_make_demo_says_it_builds_for_make_demo() -> None:
    dry = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True).stdout
    assert '--for "make demo"' in dry or "--for 'make demo'" in dry or "--for make demo" in dry


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    """A build cache with the whole control plane in it, and the stand-in `go` on PATH."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "go").write_text(FAKE_GO)
    (tools / "go").chmod(0o755)
    versions = dict(
        line.split("=", 1)
        for line in (ROOT / "hack" / "versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    cache = tmp_path / "cache"
    (cache / "bin").mkdir(parents=True)
    present = [f"etcd-{versions['ETCD_VERSION']}"]
    present += [f"{n}-{versions['KUBERNETES_VERSION']}" for n in
                ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")]  # fmt: skip
    for name in present:
        (cache / "bin" / name).write_text("#!/bin/sh\n")
        (cache / "bin" / name).chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{tools}:{os.environ['PATH']}",
        "DFLASH_CACHE": str(cache),
        "TMPDIR": str(tmp_path),
        "DFLASH_PROGRESS_SECONDS": "1",
    }


def build(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_script_plans_only_what_is_missing_with_an_estimate_and_shows_progress(
    fake_env: dict[str, str],
) -> None:
    done = build({**fake_env, "FAKE_GO_SECONDS": "3"}, "--for", "make test", "etcd", "kube",
                 "actionlint", "promtool")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(
        r"build-binaries: building actionlint promtool for make test, once per version: about "
        r"\d+ min on 2 cores with empty Go caches, less with warm ones \(into .*/cache/bin\)",
        lines[0],
    )
    first = r"build-binaries: \[1/2\] building actionlint v[\d.]+ \(about \d+ (min|s); log: "
    assert re.match(first, lines[1])
    # A line a second here (DFLASH_PROGRESS_SECONDS=1); on a terminal it is rewritten in place.
    progress = (
        r"build-binaries: \[1/2\] actionlint 0:0\d of about \d+:\d\d; all 0:0\d of about \d+:\d\d"
    )
    assert any(re.fullmatch(progress, line) for line in lines), done.stdout
    built = r"build-binaries: \[2/2\] built promtool v[\d.]+ in \ds \(all: 0:0\d\)"
    assert any(re.fullmatch(built, line) for line in lines), done.stdout
    assert lines[-1].startswith("build-binaries: etcd kube actionlint promtool present in ")
    assert list((Path(fake_env["DFLASH_CACHE"]) / "bin").glob("promtool-*"))


def test_nothing_missing_builds_nothing_and_says_so(fake_env: dict[str, str]) -> None:
    done = build(fake_env, "etcd", "kube")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"build-binaries: etcd kube present in {fake_env['DFLASH_CACHE']}/bin"
    ]


def test_an_unknown_name_is_refused_with_the_accepted_ones(fake_env: dict[str, str]) -> None:
    done = build(fake_env, "kubelet")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "build-binaries: unknown binary 'kubelet'; accepted: etcd kube kwok helm "
        "training-operator kueue trainer actionlint promtool argocd"
    )
