"""Read what the tests of images/ need from Dockerfiles and .dockerignore: instructions with
their continuation lines joined, stages, shell commands of RUN, and Docker's ignore rules."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[3]
IMAGES = ("operator", "trainer", "regen")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def dockerfile(image: str) -> Path:
    return ROOT / "images" / image / "Dockerfile"


def parse(path: Path) -> list[Instruction]:
    """Instructions in order; comments dropped, `\\` continuations joined with a space."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        pending.append(stripped.removesuffix("\\").strip())
        if stripped.endswith("\\"):
            continue
        keyword, _, arguments = " ".join(pending).partition(" ")
        out.append(Instruction(keyword.upper(), arguments.strip(), start))
        pending = []
    return out


def base_args(path: Path) -> dict[str, str]:
    """`ARG NAME=default` before the first FROM: the build arguments FROM lines may use."""
    found = {}
    for instruction in parse(path):
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG" and "=" in instruction.arguments:
            name, _, value = instruction.arguments.partition("=")
            found[name.strip()] = value.strip()
    return found


def stages(path: Path) -> list[Stage]:
    """Stages with their base, `${ARG}` replaced by the argument's default."""
    args = base_args(path)
    result: list[Stage] = []
    started = False
    for instruction in parse(path):
        if instruction.keyword == "FROM":
            started = True
            words = instruction.arguments.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            result.append(Stage(base=base, name=name))
        elif started:
            result[-1].instructions.append(instruction)
    return result


def mounts(path: Path) -> list[dict[str, str]]:
    """Every `RUN --mount=...` as its options."""
    found = []
    for instruction in parse(path):
        if instruction.keyword == "RUN":
            for mount in re.findall(r"--mount=(\S+)", instruction.arguments):
                found.append(dict(item.split("=", 1) for item in mount.split(",")))
    return found


def run_commands(path: Path) -> list[list[str]]:
    """Every shell command of every RUN, split at `&&`, as argv without the --mount flags."""
    commands = []
    for instruction in parse(path):
        if instruction.keyword != "RUN":
            continue
        for part in instruction.arguments.split("&&"):
            argv = [word for word in shlex.split(part) if not word.startswith("--mount=")]
            while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):  # VAR=value cmd ...
                argv = argv[1:]
            # The proxy-CA preamble (`if [ -s ... ]; then export ...; fi`) is not a command.
            if argv and argv[0] != "if":
                commands.append(argv)
    return commands


def mount_sources(path: Path) -> list[str]:
    """Sources of `--mount=type=bind` (files taken from the build context)."""
    sources = []
    for instruction in parse(path):
        for mount in re.findall(r"--mount=(\S+)", instruction.arguments):
            options = dict(item.split("=", 1) for item in mount.split(","))
            if options.get("type") == "bind" and "from" not in options:
                sources.append(options["source"])
    return sources


def copy_sources(path: Path) -> list[str]:
    """Sources of COPY instructions that read the build context (not `--from=`)."""
    sources = []
    for instruction in parse(path):
        if instruction.keyword != "COPY" or "--from=" in instruction.arguments:
            continue
        words = [w for w in instruction.arguments.split() if not w.startswith("--")]
        sources.extend(words[:-1])
    return sources


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as a regex on relative paths."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(.*/)?"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        char = pattern[i]
        out += {"*": "[^/]*", "?": "[^/]"}.get(char, re.escape(char))
        i += 1
    return re.compile(out)


@dataclass(frozen=True)
class DockerIgnore:
    """Docker's rules: patterns are cleaned paths from the context root; a pattern that matches
    a folder matches everything in it; the last matching pattern wins; `!` re-includes."""

    rules: tuple[tuple[bool, re.Pattern[str]], ...]

    @classmethod
    def load(cls, path: Path) -> DockerIgnore:
        rules = []
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            pattern = line.removeprefix("!").strip().strip("/")
            rules.append((negated, _pattern_regex(pattern)))
        return cls(tuple(rules))

    def is_excluded(self, relative: str) -> bool:
        parts = relative.strip("/").split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for negated, regex in self.rules:
            if any(regex.fullmatch(prefix) for prefix in prefixes):
                excluded = not negated
        return excluded
