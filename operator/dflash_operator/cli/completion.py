"""Shell completion. The hidden command `kubectl-dflash __complete ARGS... WORD` answers in
cobra's protocol (one `value<TAB>description` per line, then `:<directive>`), the protocol
kubectl (>= 1.26) speaks to a `kubectl_complete-dflash` executable; the bash, zsh and fish
scripts of `completion_scripts.py` call the same command. Runs and namespaces come from the
API, contexts from the kubeconfig, through the `lookup` the caller passes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from dflash_operator.cli.output import Format

# cobra's ShellCompDirective bits.
DIRECTIVE_DEFAULT = 0  # nothing special: the shell may fall back to file names
DIRECTIVE_NO_SPACE = 2  # `jsonpath=` goes on with the template
DIRECTIVE_NO_FILE = 4  # no file names when nothing matched
# Flags whose value is a path: the shell completes file names.
PATH_FLAGS = ("--kubeconfig", "--download-dir")
OUTPUT_VALUES = [f.value for f in Format if f != Format.JSONPATH] + ["jsonpath="]
# Commands whose first positional argument is a run.
RUN_COMMANDS = ("status", "audit", "approve", "retry", "logs")


@dataclass(frozen=True)
class Flags:
    """What the words typed so far say about the cluster: used to list run names there."""

    namespace: str | None
    context: str | None
    kubeconfig: str | None


@dataclass(frozen=True)
class Completions:
    values: list[str]
    directive: int

    def to_protocol(self) -> str:
        return "".join(f"{value}\n" for value in self.values) + f":{self.directive}\n"


# What the cluster and kubeconfig know: lookup("runs" | "namespaces" | "contexts", flags).
Lookup = Callable[[str, Flags], list[str]]
# Flags whose values are looked up, and under which name.
LOOKED_UP = {"-n": "namespaces", "--namespace": "namespaces", "--context": "contexts"}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {name: sub for name, sub in action.choices.items() if not name.startswith("_")}
    return {}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings}


def _visible_options(parser: argparse.ArgumentParser) -> list[str]:
    return [
        option
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
    ]


def _flag_value(words: list[str], *names: str) -> str | None:
    for index, word in enumerate(words):
        if word in names and index + 1 < len(words):
            return words[index + 1]
        for name in names:
            if name.startswith("--") and word.startswith(f"{name}="):
                return word.split("=", 1)[1]
    return None


def flags_of(words: list[str]) -> Flags:
    return Flags(
        namespace=_flag_value(words, "-n", "--namespace"),
        context=_flag_value(words, "--context"),
        kubeconfig=_flag_value(words, "--kubeconfig"),
    )


def _positionals(words: list[str], options: dict[str, argparse.Action]) -> list[str]:
    """Words that are not flags or flag values."""
    found, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-"):
            action = options.get(word)
            skip = action is not None and action.nargs != 0 and "=" not in word
        else:
            found.append(word)
    return found


def _value_of(
    action: argparse.Action, option: str, partial: str, before: list[str], lookup: Lookup
) -> Completions:
    if option in PATH_FLAGS:
        return Completions([], DIRECTIVE_DEFAULT)
    if option in LOOKED_UP:
        values = lookup(LOOKED_UP[option], flags_of(before))
    elif action.choices:
        values = [str(choice) for choice in action.choices]
    elif option in ("-o", "--output"):
        values = OUTPUT_VALUES
    else:
        values = []
    matching = [value for value in values if value.startswith(partial)]
    no_space = DIRECTIVE_NO_SPACE if matching == ["jsonpath="] else 0
    return Completions(matching, DIRECTIVE_NO_FILE | no_space)


def complete(parser: argparse.ArgumentParser, words: list[str], lookup: Lookup) -> Completions:
    """Candidates for the last of `words` (the word being typed, maybe empty)."""
    partial, before = (words[-1], words[:-1]) if words else ("", [])
    commands = _subparsers(parser)
    top_options = _options(parser)
    command = next((w for w in _positionals(before, top_options) if w in commands), None)
    current = commands[command] if command else parser
    options = {**top_options, **_options(current)}
    previous = before[-1] if before else None
    if previous in options and options[previous].nargs != 0:
        return _value_of(options[previous], previous, partial, before, lookup)
    if partial.startswith("-"):
        names = sorted(set(_visible_options(current)) | set(_visible_options(parser)))
        return Completions([n for n in names if n.startswith(partial)], DIRECTIVE_NO_FILE)
    if command is None:
        return Completions(
            [name for name in commands if name.startswith(partial)], DIRECTIVE_NO_FILE
        )
    given = _positionals(before, options)[1:]  # after the command itself
    if command == "completion" and not given:
        choices = next(a.choices for a in current._actions if a.dest == "shell")
        return Completions(
            [str(c) for c in choices or [] if str(c).startswith(partial)], DIRECTIVE_NO_FILE
        )
    if command in RUN_COMMANDS and not given:
        names = lookup("runs", flags_of(before))
        return Completions([n for n in names if n.startswith(partial)], DIRECTIVE_NO_FILE)
    return Completions([], DIRECTIVE_NO_FILE)
