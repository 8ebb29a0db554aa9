"""`python -m dflash_dev.executor [run] --kubeconfig ... | kill NS/POD | logs NS/POD`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from dflash_dev.errors import DevError
from dflash_dev.paths import venv_bin

from .config import (
    BACKOFF_INITIAL_SECONDS,
    BACKOFF_MAX_SECONDS,
    DEFAULT_NODES,
    DEFAULT_POD_CIDR,
    ExecutorConfig,
)
from .logs import default_state_dir, executor_logs
from .process import kill_pod

FOLLOW_POLL_SECONDS = 0.5


def _pod_ref(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected <namespace>/<pod>")
    return namespace, name


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dflash_dev.executor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="serve nodes and run their pods (the default)")
    run.add_argument(
        "--kubeconfig", type=Path, required=True, help="admin kubeconfig of the cluster"
    )
    run.add_argument("--nodes", type=int, default=DEFAULT_NODES, help="how many nodes to serve")
    run.add_argument("--node-prefix", default="local", help="nodes are <prefix>-0..N-1")
    run.add_argument("--state-dir", type=Path, default=default_state_dir(), help="logs, sandboxes")
    run.add_argument(
        "--python", type=Path, default=venv_bin() / "python", help="the image's Python"
    )
    run.add_argument("--pod-cidr", default=DEFAULT_POD_CIDR, help="loopback range for pod IPs")
    run.add_argument("--cpu", help="cpu capacity per node (default: 2 x this machine)")
    run.add_argument("--memory", help="memory capacity per node (default: 2 x this machine)")
    run.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu advertised per node")
    run.add_argument("--delete-nodes-on-exit", action="store_true", help="instead of NotReady")
    run.add_argument("--backoff-initial", type=float, default=BACKOFF_INITIAL_SECONDS)
    run.add_argument("--backoff-max", type=float, default=BACKOFF_MAX_SECONDS)
    run.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="copy this variable of the executor's environment into every pod (repeatable)",
    )
    run.add_argument("--exit-with-pid", type=int, help="stop when this process is gone (tests)")
    run.add_argument(
        "--from-images",
        action="store_true",
        help="run each pod from its image's root filesystem (Buildah/Podman storage; root)",
    )
    run.add_argument("-v", "--verbose", action="store_true")
    kill = sub.add_parser("kill", help="SIGKILL a pod's process (simulates a crash)")
    kill.add_argument("pod", type=_pod_ref, metavar="NAMESPACE/POD")
    kill.add_argument("--state-dir", type=Path, default=default_state_dir())
    logs = sub.add_parser("logs", help="print a pod's container log")
    logs.add_argument("pod", type=_pod_ref, metavar="NAMESPACE/POD")
    logs.add_argument("-c", "--container")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--state-dir", type=Path, default=default_state_dir())
    return parser


def _run(args: argparse.Namespace) -> None:
    from .executor import Executor

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    cfg = ExecutorConfig(
        kubeconfig=args.kubeconfig.resolve(),
        state_dir=args.state_dir.resolve(),
        python=args.python.absolute(),
        nodes=args.nodes,
        node_prefix=args.node_prefix,
        pod_cidr=args.pod_cidr,
        cpu=args.cpu,
        memory=args.memory,
        gpus=args.gpus,
        delete_nodes_on_exit=args.delete_nodes_on_exit,
        backoff_initial=args.backoff_initial,
        backoff_max=args.backoff_max,
        pass_env=tuple(args.pass_env),
        exit_with_pid=args.exit_with_pid,
        from_images=args.from_images,
    )
    cfg.validate()
    Executor(cfg).run()


def _logs(args: argparse.Namespace) -> None:
    namespace, name = args.pod
    shown = executor_logs(namespace, name, args.container, args.state_dir)
    sys.stdout.write(shown)
    while args.follow:
        time.sleep(FOLLOW_POLL_SECONDS)
        text = executor_logs(namespace, name, args.container, args.state_dir)
        sys.stdout.write(text[len(shown) :])
        sys.stdout.flush()
        shown = text


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["run", *argv]
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            _run(args)
        elif args.command == "kill":
            namespace, name = args.pod
            pid = kill_pod(namespace, name, state_dir=args.state_dir)
            print(f"killed pod {namespace}/{name} (process group {pid})")
        else:
            _logs(args)
    except DevError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
