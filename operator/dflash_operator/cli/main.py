"""`kubectl dflash` (console script `kubectl-dflash`): the seven commands. The command line is
in `parser.py`, the facts come from `summary.py`, the text from `render.py` and `output.py`,
annotation values from `annotate.py`, shell completion from `completion.py`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from dflash_operator.api.constants import Gate, Stage
from dflash_operator.cli.annotate import AnnotationChange, build_approval, build_retry
from dflash_operator.cli.audit import (
    default_download_path,
    download_report,
    gate_data,
    gate_views,
    has_s3_credentials,
    render_gate,
)
from dflash_operator.cli.completion import Flags, complete
from dflash_operator.cli.completion_scripts import SCRIPTS
from dflash_operator.cli.errors import EXIT_GATE_FAILED, EXIT_INTERRUPTED, EXIT_OK, CliError
from dflash_operator.cli.kube import Kube, kubeconfig_contexts
from dflash_operator.cli.logs import explain_blocked, find_stage_pods, follow_logs, plan_targets
from dflash_operator.cli.output import (
    Format,
    Output,
    as_list,
    render_jsonpath,
    resource_name,
    with_kind,
)
from dflash_operator.cli.parser import build_parser
from dflash_operator.cli.render import dump, render_list, render_status, summary_to_data
from dflash_operator.cli.summary import RunSummary, summarize

# The hidden command shell completion calls (cobra's name for it, which kubectl uses too).
COMPLETE_COMMAND = "__complete"


class Io:
    """Where output goes, and when it is: tests pass their own streams."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err
        self.now = datetime.now(UTC)

    @property
    def unicode(self) -> bool:
        encoding = (getattr(self.out, "encoding", None) or "").lower().replace("-", "")
        return encoding == "utf8"


def _summary(kube: Kube, name: str, io: Io) -> tuple[dict[str, Any], RunSummary]:
    run = kube.get_run(name)
    return run, summarize(run, io.now)


def cmd_status(args: argparse.Namespace, kube: Kube, io: Io) -> int:
    run, summary = _summary(kube, args.run, io)
    output: Output | None = getattr(args, "output", None)
    if output is None or output.format == Format.WIDE:
        wide = output is not None
        io.out.write(render_status(summary, io.now, io.unicode, wide=wide))
    elif output.format == Format.NAME:
        io.out.write(resource_name(run) + "\n")
    elif output.template is not None:
        io.out.write(render_jsonpath(output.template, with_kind(run)))
    else:
        io.out.write(dump(summary_to_data(summary, io.now), output.format.value))
    return EXIT_OK


def cmd_list(args: argparse.Namespace, kube: Kube, io: Io) -> int:
    runs = sorted(
        kube.list_runs(args.all_namespaces, args.selector),
        key=lambda r: ((r.get("metadata") or {}).get("namespace", ""), r["metadata"]["name"]),
    )
    output: Output | None = getattr(args, "output", None)
    if output is not None and output.format == Format.NAME:
        io.out.write("".join(resource_name(run) + "\n" for run in runs))
        return EXIT_OK
    if output is not None and output.template is not None:
        io.out.write(render_jsonpath(output.template, as_list([with_kind(r) for r in runs])))
        return EXIT_OK
    summaries = [summarize(run, io.now) for run in runs]
    if output is not None and output.format in (Format.JSON, Format.YAML):
        data = [summary_to_data(s, io.now) for s in summaries]
        io.out.write(dump(data, output.format.value))
    elif not summaries:
        where = "any namespace" if args.all_namespaces else f"namespace {kube.namespace}"
        matching = f" matching {args.selector}" if args.selector else ""
        io.err.write(f"No DFlashRuns found in {where}{matching}.\n")
    else:
        wide = output is not None and output.format == Format.WIDE
        io.out.write(render_list(summaries, io.now, args.all_namespaces, wide=wide))
    return EXIT_OK


def _show_report(path: str, io: Io) -> None:
    text = Path(path).read_text(encoding="utf-8")
    if io.out.isatty():
        from rich.console import Console
        from rich.markdown import Markdown

        Console(file=io.out).print(Markdown(text))
    else:
        io.out.write(f"\n----- {path} -----\n{text}")
        if not text.endswith("\n"):
            io.out.write("\n")


def cmd_audit(args: argparse.Namespace, kube: Kube, io: Io) -> int:
    run, summary = _summary(kube, args.run, io)
    gate = Gate(args.gate) if args.gate else None
    views = gate_views(summary.status, gate)
    code = EXIT_GATE_FAILED if any(view.failed for view in views) else EXIT_OK
    if getattr(args, "output", None):
        gates = [gate_data(view) for view in views]
        data = {"name": summary.name, "namespace": summary.namespace, "gates": gates}
        io.out.write(dump(data, args.output))
        return code
    if not views:
        io.out.write(f"No audit gate of dflashrun {summary.name} has run yet.\n")
        return code
    for view in views:
        io.out.write("\n".join(render_gate(view, summary.name, summary.namespace)) + "\n")
    # One report to open: the gate asked for, or the only failed one.
    failed = [view for view in views if view.failed]
    chosen = views[0] if gate is not None else (failed[0] if len(failed) == 1 else None)
    if chosen is None or chosen.report_uri is None or args.no_download:
        return code
    if not has_s3_credentials():
        io.err.write(
            f"To download and open {chosen.report_uri}, put S3 credentials in the environment "
            "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE).\n"
        )
        return code
    destination = default_download_path(summary.namespace, summary.name, chosen.gate)
    if args.download_dir:
        destination = Path(args.download_dir) / destination.name
    storage = (run.get("spec") or {}).get("storage") or {}
    path = download_report(chosen.report_uri, storage, destination)
    io.out.write(f"report downloaded to {path}\n")
    _show_report(str(path), io)
    return code


def _apply(
    change: AnnotationChange, args: argparse.Namespace, kube: Kube, run: dict[str, Any], io: Io
) -> int:
    name = run["metadata"]["name"]
    if not change.unchanged:
        version = run["metadata"].get("resourceVersion")
        run = kube.annotate_run(name, {change.key: change.value}, version)
    if getattr(args, "output", None):
        annotations = run["metadata"].get("annotations") or {}
        data = {"name": name, "namespace": kube.namespace}
        io.out.write(
            dump({**data, "annotations": {change.key: annotations.get(change.key)}}, args.output)
        )
        return EXIT_OK
    verb = "already annotated" if change.unchanged else "annotated"
    io.out.write(f"dflashrun.dflash.dev/{name} {verb}: {change.key}={change.value}\n")
    io.out.write(
        f"Next: {change.explanation}. Watch it: kubectl dflash status {name} -n {kube.namespace}\n"
    )
    return EXIT_OK


def cmd_approve(args: argparse.Namespace, kube: Kube, io: Io) -> int:
    run, summary = _summary(kube, args.run, io)
    return _apply(build_approval(run, summary, Gate(args.gate)), args, kube, run, io)


def cmd_retry(args: argparse.Namespace, kube: Kube, io: Io) -> int:
    run, summary = _summary(kube, args.run, io)
    stage = Stage(args.stage) if args.stage else None
    return _apply(build_retry(summary, stage, io.now), args, kube, run, io)


def cmd_logs(args: argparse.Namespace, kube: Kube, io: Io) -> int:
    _, summary = _summary(kube, args.run, io)
    if args.stage:
        stage = Stage(args.stage)
    elif summary.current is not None:
        stage = summary.current.stage
    else:
        phase = summary.phase.value if summary.phase else "not started"
        raise CliError(
            f"dflashrun {summary.name} is {phase}: no stage is running; name one with --stage"
        )
    pods = find_stage_pods(kube, summary, stage)
    if not pods:
        raise CliError(
            f"no pods of stage {stage.value} of dflashrun {summary.name} in namespace "
            f"{kube.namespace}: the operator has not created them yet, or they were removed "
            "after the run finished (spec.ttlSecondsAfterFinished)"
        )
    targets, blocked = plan_targets(kube, pods)
    if not targets:
        raise CliError(explain_blocked(summary, stage, blocked))
    for pod in blocked:
        io.err.write(f"skipping {pod.pod}: {pod.reason}\n")
    follow_logs(kube, targets, follow=args.follow, tail=args.tail, out=io.out)
    return EXIT_OK


def cmd_completion(args: argparse.Namespace, io: Io) -> int:
    io.out.write(SCRIPTS[args.shell])
    return EXIT_OK


def _lookup(kind: str, flags: Flags) -> list[str]:
    """Runs, namespaces or contexts for completion; never an error (it would land in the
    prompt): no cluster, no CRD, no RBAC, no kubeconfig simply give no candidates."""
    if kind == "contexts":
        return kubeconfig_contexts(flags.kubeconfig)
    try:
        kube = Kube.connect(flags.kubeconfig, flags.context, flags.namespace)
        if kind == "namespaces":
            return kube.list_namespaces()
        return sorted(run["metadata"]["name"] for run in kube.list_runs(False))
    except Exception:
        return []


def run_completion(words: list[str], io: Io) -> int:
    io.out.write(complete(build_parser(), words, _lookup).to_protocol())
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace, Kube, Io], int]] = {
    "status": cmd_status,
    "list": cmd_list,
    "audit": cmd_audit,
    "approve": cmd_approve,
    "retry": cmd_retry,
    "logs": cmd_logs,
}


def main(
    argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    io = Io(out or sys.stdout, err or sys.stderr)
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == [COMPLETE_COMMAND]:
        return run_completion(words[1:], io)
    args = build_parser().parse_args(words)
    if args.command == "completion":
        return cmd_completion(args, io)
    try:
        kube = Kube.connect(
            getattr(args, "kubeconfig", None),
            getattr(args, "context", None),
            getattr(args, "namespace", None),
        )
        return COMMANDS[args.command](args, kube, io)
    except CliError as exc:
        io.err.write(f"error: {exc.message}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def complete_main() -> int:
    """`kubectl_complete-dflash ARGS...`: what kubectl (>= 1.26) runs to complete the plugin."""
    return main([COMPLETE_COMMAND, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
