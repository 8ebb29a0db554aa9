"""`kubectl dflash -o ...` and completion, the pure parts: kubectl's JSONPath templates, the
-o vocabulary and its errors, the wide and name views, and the completion answers (the
commands against a live API server are in tests/integration/plugin)."""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from dflash_operator.cli.completion import complete, flags_of
from dflash_operator.cli.completion_scripts import SCRIPTS
from dflash_operator.cli.jsonpath import JsonPathError, parse_template
from dflash_operator.cli.logs import PodTarget, follow_logs
from dflash_operator.cli.output import Format, parse_output, resource_name
from dflash_operator.cli.parser import build_parser
from dflash_operator.cli.render import render_list, render_status
from dflash_operator.cli.summary import summarize

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
RUNS: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "metadata": {"name": "qwen", "annotations": {"dflash.dev/retry": "train-1"}},
            "spec": {"target": {"model": "Qwen/Qwen3-8B"}},
            "status": {"phase": "Failed", "gpuHours": {"total": 12.5}},
        },
        {
            "metadata": {"name": "llama", "labels": {"team": "ml"}},
            "spec": {"target": {"model": "meta/Llama"}},
            "status": {"phase": "Training", "gpuHours": {"total": 3120}},
        },
    ],
}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{.items[*].metadata.name}", "qwen llama"),
        ("{.items[0].status.phase}", "Failed"),
        ("{.items[-1].metadata.name}", "llama"),
        ("{$.kind}", "List"),
        ("{.items[0:1].metadata.name}", "qwen"),
        ("{.items[0,1].status.gpuHours.total}", "12.5 3120"),
        ('{.items[?(@.status.phase=="Training")].metadata.name}', "llama"),
        ("{.items[?(@.status.gpuHours.total>100)].metadata.name}", "llama"),
        ("{.items[?(@.metadata.labels.team)].metadata.name}", "llama"),
        ("{.items[0].metadata.annotations.dflash\\.dev/retry}", "train-1"),
        ("{.items[0].metadata.annotations['dflash.dev/retry']}", "train-1"),
        ("{..model}", "Qwen/Qwen3-8B meta/Llama"),
        ('{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}',
         "qwen\tFailed\nllama\tTraining\n"),
        ("phase={.items[1].status.phase}!", "phase=Training!"),
        ("{.items[1].metadata.labels}", '{"team":"ml"}'),
        ("{.items[5].metadata.name}{.nothing.here}", ""),
    ],
)  # fmt: skip
def test_jsonpath_templates_read_like_kubectls(template: str, expected: str) -> None:
    assert parse_template(template).render(RUNS) == expected


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{.items[*].metadata.name", "unclosed action"),
        ("{range .items[*]}{.metadata.name}", "{range ...} without its {end}"),
        ("{.metadata.name}{end}", "{end} without a {range ...}"),
        ("{.items[x]}", "index 'x' is not an integer"),
        ("{.items[?(.status)]}", "a filter starts with @"),
        ("{.items[?(@.n==Running)]}", "filter value 'Running' is not a quoted string"),
        ("{}", "empty action"),
        ("{.items[1:2:3:4]}", "more than start:end:step"),
    ],
)
def test_a_bad_jsonpath_template_says_what_is_wrong(template: str, problem: str) -> None:
    with pytest.raises(JsonPathError, match=problem.replace("[", r"\[").replace("{", r"\{")):
        parse_template(template)


def test_output_formats_are_kubectls_and_a_bad_one_names_itself_and_the_accepted_ones() -> None:
    assert parse_output("wide").format == Format.WIDE
    assert parse_output("name").format == Format.NAME
    assert parse_output("jsonpath={.status.phase}").template is not None
    with pytest.raises(argparse.ArgumentTypeError) as unknown:
        parse_output("table")
    with pytest.raises(argparse.ArgumentTypeError) as bad:
        parse_output("jsonpath={.status.phase")
    with pytest.raises(argparse.ArgumentTypeError) as bare:
        parse_output("jsonpath")

    assert str(unknown.value) == (
        "unknown output format 'table'; accepted: wide, name, json, yaml, jsonpath=TEMPLATE"
    )
    assert str(bad.value).startswith("bad jsonpath template '{.status.phase': unclosed action")
    assert "jsonpath needs a template" in str(bare.value)


def test_usage_errors_are_one_error_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["list", "-o", "jsonpath={.items["])

    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.splitlines()[0].startswith(
        "error: argument -o/--output: bad jsonpath template '{.items[': unclosed action"
    )
    assert err.splitlines()[1] == "See 'kubectl dflash list --help' for usage."
    assert "Traceback" not in err


def _summary(generation: int, observed: int) -> Any:
    run = {
        "metadata": {"name": "qwen", "namespace": "ml", "generation": generation},
        "spec": {"target": {"model": "Qwen/Qwen3-8B"}},
        "status": {
            "phase": "Training",
            "observedGeneration": observed,
            "nodePools": "regen=b200 train=h100",
            "gpuHours": {"total": 3532.54, "byStage": {"regen": 412.5, "train": 3120.04}},
        },
    }
    return summarize(run, NOW)


def test_wide_list_adds_target_pools_gpu_hours_and_generations() -> None:
    table = render_list([_summary(3, 2)], NOW, all_namespaces=False, wide=True)

    header, row = (line.split() for line in table.splitlines())
    assert header[-4:] == ["TARGET", "POOLS", "GPU-HOURS", "GENERATION"]
    assert row[-4:] == ["Qwen/Qwen3-8B", "regen=b200,train=h100", "3532.5", "3/2"]


def test_wide_status_says_when_the_operator_has_not_seen_the_newest_spec() -> None:
    pending = render_status(_summary(3, 2), NOW, unicode=False, wide=True)
    current = render_status(_summary(2, 2), NOW, unicode=False, wide=True)

    assert (
        "Generation:  3 (observed 2): the operator has not acted on the newest spec yet" in pending
    )
    assert "Generation:  2 (observed 2)\n" in current
    assert "Pools:       regen=b200 train=h100" in current
    assert "GPU-hours:   3532.5 (regen 412.5, train 3120.0)" in current


def test_name_output_is_kubectls_resource_slash_name() -> None:
    assert resource_name(RUNS["items"][0]) == "dflashrun.dflash.dev/qwen"


def _complete(*words: str, runs: list[str] | None = None) -> tuple[list[str], int]:
    known = {"runs": runs or [], "namespaces": ["ml", "ml-test", "default"], "contexts": ["prod"]}
    answer = complete(build_parser(), list(words), lambda kind, flags: known[kind])
    return answer.values, answer.directive


@pytest.mark.parametrize(
    ("words", "values"),
    [
        (["st"], ["status"]),
        ([""], ["status", "list", "audit", "approve", "retry", "logs", "completion"]),
        (["list", "-o", ""], ["wide", "name", "json", "yaml", "jsonpath="]),
        (["audit", "qwen", "--gate", "c"], ["canary", "completions"]),
        (["logs", "qwen", "--stage", "tr"], ["train"]),
        (["completion", ""], ["bash", "zsh", "fish"]),
        (["list", "--sel"], ["--selector"]),
        (["logs", "qwen", "--f"], ["--follow"]),
        (["-n", "ml", "status", "qw"], ["qwen"]),
        (["status", "--kubeconfig", "k", ""], ["qwen", "quick"]),
        (["status", "qwen", ""], []),
        (["list", "-n", "ml"], ["ml", "ml-test"]),
        (["--context", "p"], ["prod"]),
    ],
)
def test_completion_offers_commands_flags_values_and_run_names(
    words: list[str], values: list[str]
) -> None:
    assert _complete(*words, runs=["qwen", "quick"])[0] == values


def test_completion_leaves_file_names_to_the_shell_for_path_flags() -> None:
    assert _complete("list", "--kubeconfig", "") == ([], 0)
    assert _complete("list", "-o", "js")[1] == 4
    assert _complete("list", "-o", "jsonp") == (["jsonpath="], 4 | 2)


def test_completion_reads_the_cluster_flags_typed_so_far() -> None:
    flags = flags_of(["status", "-n", "ml", "--context=prod", "--kubeconfig", "/k"])

    assert (flags.namespace, flags.context, flags.kubeconfig) == ("ml", "prod", "/k")


def test_the_bash_script_completes_through_the_program(tmp_path: Any) -> None:
    """The script, sourced in a real bash, with a stand-in program that answers like ours."""
    program = tmp_path / "kubectl-dflash"
    program.write_text('#!/bin/sh\necho "$@" > "$0.args"\nprintf "status\\nstop\\tx\\n:4\\n"\n')
    program.chmod(0o755)
    script = tmp_path / "completion.bash"
    script.write_text(SCRIPTS["bash"])
    result = subprocess.run(
        ["bash", "-c", f'source {script}; COMP_WORDS=({program} -n ml st); COMP_CWORD=3; '
         '_kubectl_dflash; printf "%s\\n" "${COMPREPLY[@]}"'],
        capture_output=True, text=True, check=True,
    )  # fmt: skip

    assert result.stdout.splitlines() == ["status", "stop"]
    assert (tmp_path / "kubectl-dflash.args").read_text() == "__complete -n ml st\n"


@pytest.mark.parametrize("shell", sorted(SCRIPTS))
def test_each_completion_script_calls_the_hidden_complete_command(shell: str) -> None:
    assert "__complete" in SCRIPTS[shell] and "kubectl-dflash" in SCRIPTS[shell]


def test_logs_print_and_exit_unless_follow_is_asked_for() -> None:
    parser = build_parser()

    assert parser.parse_args(["logs", "qwen"]).follow is False
    assert parser.parse_args(["logs", "qwen", "-f"]).follow is True
    assert parser.parse_args(["logs", "qwen", "--follow", "--tail", "5"]).tail == 5
    # The flag of the old default still parses, so scripts that pass it keep working.
    assert parser.parse_args(["logs", "qwen", "--no-follow"]).follow is False


def test_follow_reaches_the_log_request() -> None:
    asked: list[tuple[str, bool, int | None]] = []

    class Kube:
        def stream_log(self, pod: str, container: str, follow: bool, tail: int | None) -> list[str]:
            asked.append((pod, follow, tail))
            return ["line"]

    out = io.StringIO()
    follow_logs(Kube(), [PodTarget("p-0", ["c"])], follow=False, tail=3, out=out)  # type: ignore[arg-type]

    assert asked == [("p-0", False, 3)]
    assert out.getvalue() == "line\n"


def _stand_in(tmp_path: Path, answer: str) -> Path:
    """A `kubectl-dflash` that records its arguments and answers like `__complete` does."""
    program = tmp_path / "kubectl-dflash"
    program.write_text(f'#!/bin/sh\necho "$@" > "$0.args"\nprintf "{answer}"\n')
    program.chmod(0o755)
    return program


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_the_zsh_script_completes_through_the_program(tmp_path: Path) -> None:
    program = _stand_in(tmp_path, "json\\njsonpath=\\n:4\\n")
    script = tmp_path / "completion.zsh"
    script.write_text(SCRIPTS["zsh"])
    # compdef and _describe belong to zsh's completion system: stand-ins print what they get.
    result = subprocess.run(
        ["zsh", "-c", f"compdef() {{ :; }}; source {script}; "
         '_describe() { print -l -- "${(@P)4}"; }; '
         f"words=({program} list -o j); CURRENT=4; _kubectl_dflash"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip

    assert result.stdout.splitlines() == ["json", "jsonpath="]
    assert (tmp_path / "kubectl-dflash.args").read_text() == "__complete list -o j\n"


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_the_fish_script_completes_through_the_program(tmp_path: Path) -> None:
    program = _stand_in(tmp_path, "status\\tphase and stages\\n:4\\n")
    script = tmp_path / "completion.fish"
    script.write_text(SCRIPTS["fish"])
    result = subprocess.run(
        ["fish", "-c", f"set -x PATH {program.parent} $PATH; source {script}; "
         "complete -C 'kubectl-dflash st'"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip

    assert result.stdout.splitlines() == ["status\tphase and stages"]
    assert (tmp_path / "kubectl-dflash.args").read_text() == "__complete st\n"
