"""`dflash-dev`: start and stop the local control plane and S3 server (used by the Makefile)."""

from __future__ import annotations

import argparse
import sys
import time

from . import cluster, executor_service, gitops, gitops_example, s3server
from .errors import DevError


def _cluster_up(_: argparse.Namespace) -> None:
    start = time.monotonic()
    was_up = cluster.is_healthy()
    info = cluster.up()
    verb = "already up" if was_up else f"up in {time.monotonic() - start:.1f}s"
    print(f"cluster {verb}: Kubernetes {info.kubernetes_version} at {info.server}")
    print(f"  training backends: {', '.join(info.backends)} ({cluster.BACKENDS_ENV} picks them)")
    print(f"  export KUBECONFIG={info.kubeconfig}")


def _cluster_down(_: argparse.Namespace) -> None:
    print("cluster stopped" if cluster.down() else "cluster was not running")


def _cluster_status(_: argparse.Namespace) -> None:
    info = cluster.read_info()
    if info is None or not cluster.is_healthy(info):
        print("cluster: down")
        sys.exit(1)
    print(f"cluster: up, Kubernetes {info.kubernetes_version} at {info.server}")
    print(f"  training backends: {', '.join(info.backends)}")


def _kubeconfig(_: argparse.Namespace) -> None:
    print(cluster.kubeconfig_path())


def _s3_up(_: argparse.Namespace) -> None:
    info = s3server.up()
    print(
        f"S3 up at {info.endpoint_url}, bucket {info.bucket}; `make -s s3-env` prints its settings"
    )


def _s3_down(_: argparse.Namespace) -> None:
    print("S3 stopped" if s3server.down() else "S3 was not running")


def _s3_env(_: argparse.Namespace) -> None:
    info = s3server.status()
    if info is None:
        raise DevError("the S3 server is not running: start it with `make s3-up`")
    print(s3server.export_lines(info))


def _gitops_up(_: argparse.Namespace) -> None:
    if not cluster.is_healthy():
        raise DevError("the local cluster is not running: start it with `make cluster-up`")
    start = time.monotonic()
    info = gitops.up(cluster.kubeconfig_path())
    repo = gitops_example.create_fork(gitops.state_dir() / "sources", info.sources_url)
    print(
        f"Argo CD {info.argocd_version} core up in {time.monotonic() - start:.0f}s (namespace argocd)"
    )
    print(f"  Git:  {repo.url} (commit from the clone {repo.work})")
    print(f"  Helm: {info.sources_url}/charts (dflash-operator {gitops_example.chart_version()})")
    print(f"  bootstrap: kubectl apply -n argocd -f {gitops_example.root_app_path(repo)}")


def _gitops_down(_: argparse.Namespace) -> None:
    print("Argo CD stopped" if gitops.down() else "Argo CD was not running")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dflash-dev", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, text in (
        ("cluster-up", _cluster_up, "start the local control plane (idempotent)"),
        ("cluster-down", _cluster_down, "stop it and delete its state"),
        ("cluster-status", _cluster_status, "exit 0 when it is up and healthy"),
        ("kubeconfig", _kubeconfig, "print the kubeconfig path"),
        ("s3-up", _s3_up, "start the S3 server (idempotent)"),
        ("s3-down", _s3_down, "stop it and delete its data"),
        ("s3-env", _s3_env, "print export lines for the running S3 server"),
        ("gitops-up", _gitops_up, "start Argo CD core and its Git and Helm sources"),
        ("gitops-down", _gitops_down, "stop them"),
    ):
        sub.add_parser(name, help=text).set_defaults(fn=fn)
    executor_service.add_commands(sub)
    args = parser.parse_args(argv)
    try:
        args.fn(args)
    except DevError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
