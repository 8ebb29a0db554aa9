"""The command line of `kubectl dflash`: commands, flags and kubectl's conventions (-n,
--context, --kubeconfig, -o, -l). Usage errors are one `error:` line and a pointer to --help,
like kubectl, and exit 2. The commands themselves live in `main.py`.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from dflash_operator.api.constants import Gate
from dflash_operator.cli.errors import EXIT_USAGE
from dflash_operator.cli.output import ACCEPTED_FORMATS, parse_output
from dflash_operator.cli.render import OUTPUT_FORMATS
from dflash_operator.cli.summary import PIPELINE
from dflash_operator.version import OPERATOR_VERSION

PROG = "kubectl dflash"
GATES = [gate.value for gate in Gate]
APPROVABLE_GATES = [gate.value for gate in Gate if gate.approvable]
STAGES = [stage.value for stage in PIPELINE]
SHELLS = ("bash", "zsh", "fish")


class Parser(argparse.ArgumentParser):
    """argparse, with kubectl's way of reporting a usage error."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message}\nSee '{self.prog} --help' for usage.\n")
        sys.exit(EXIT_USAGE)


def _common(output: str | None) -> Parser:
    """kubectl's flags, accepted before or after the command (kubectl passes them along).
    output: None (no -o), "data" (json|yaml) or "views" (every kubectl format)."""
    parser = Parser(add_help=False)
    hide = argparse.SUPPRESS
    parser.add_argument("-n", "--namespace", default=hide, help="namespace of the run(s)")
    parser.add_argument("--context", default=hide, help="kubeconfig context to use")
    parser.add_argument("--kubeconfig", default=hide, help="path of the kubeconfig file")
    if output == "data":
        parser.add_argument(
            "-o", "--output", choices=OUTPUT_FORMATS, default=hide, help="json or yaml"
        )
    elif output == "views":
        parser.add_argument(
            "-o",
            "--output",
            type=parse_output,
            default=hide,
            metavar="FORMAT",
            help=f"one of: {ACCEPTED_FORMATS} (kubectl's JSONPath, on the DFlashRun objects)",
        )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        parents=[_common(output=None)],
        description="Follow and steer DFlashRuns: progress, audit gates, approvals, retries, logs.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 an audit gate failed (audit).",
    )
    parser.add_argument("--version", action="version", version=f"kubectl-dflash {OPERATOR_VERSION}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    views = [_common(output="views")]
    data = [_common(output="data")]

    status = commands.add_parser(
        "status", parents=views, help="phase, stages, audit, checkpoint, ETA"
    )
    status.add_argument("run")
    listing = commands.add_parser("list", parents=views, help="runs of a namespace")
    listing.add_argument(
        "-A", "--all-namespaces", action="store_true", help="runs of every namespace"
    )
    listing.add_argument(
        "-l",
        "--selector",
        help="label selector, checked by the API server (e.g. -l team=ml,tier!=test)",
    )
    audit = commands.add_parser("audit", parents=data, help="violated checks and the report")
    audit.add_argument("run")
    audit.add_argument("--gate", choices=GATES, help="one gate (default: every gate that ran)")
    audit.add_argument("--no-download", action="store_true", help="do not fetch the report from S3")
    audit.add_argument("--download-dir", help="where the report goes (default: a temp folder)")
    approve = commands.add_parser("approve", parents=data, help="accept a failed gate")
    approve.add_argument("run")
    approve.add_argument("--gate", choices=APPROVABLE_GATES, required=True)
    retry = commands.add_parser("retry", parents=data, help="retry the stage that failed")
    retry.add_argument("run")
    retry.add_argument("--stage", choices=STAGES, help="the stage that failed (checked)")
    logs = commands.add_parser(
        "logs", parents=[_common(output=None)], help="print (or follow) a stage's pod logs"
    )
    logs.add_argument("run")
    logs.add_argument("--stage", choices=STAGES, help="default: the current stage")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep streaming new lines until Ctrl-C"
    )
    # Before -f existed, following was the default and --no-follow turned it off; it is now
    # the default, so the old flag is accepted (and does nothing) to keep scripts working.
    logs.add_argument("--no-follow", action="store_true", help=argparse.SUPPRESS)
    logs.add_argument("--tail", type=int, help="lines of each log to start with")
    completion = commands.add_parser(
        "completion", help="print a shell completion script (bash, zsh or fish)"
    )
    completion.add_argument("shell", choices=SHELLS)
    return parser
