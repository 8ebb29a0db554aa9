"""Inside each built image, as its user, read-only root, /tmp the only writable path: the entry
points answer --help and --version, every stage command the operator renders for the examples
parses in the image it names, each stage's imports succeed, and the sizes stay under budget."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from dflash_dev.images.engine import Engine, image_config, image_size
from dflash_dev.images.launch import run_in_image
from dflash_dev.version import read_version
from dflash_operator.config import DEFAULT_RUN_AS_USER


def _load(name: str) -> ModuleType:
    """A helper module next to this file (tests are imported in importlib mode)."""
    spec = importlib.util.spec_from_file_location(
        f"dflash_images_{name}", Path(__file__).with_name(f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


SCRIPT: str = _load("parse_only").SCRIPT
rendered_containers = _load("stage_commands").rendered_containers

# Budgets, uncompressed, on the stand-in bases (docs/images.md, "Sizes"): the measured size
# plus about 10% of headroom, so a new heavy dependency fails here and is decided on purpose.
BUDGETS_GB = {"operator": 0.55, "trainer": 8.0, "regen": 12.0}
ENTRY_POINTS = {
    "operator": ["dflash-operator", "kubectl-dflash"],
    "trainer": ["dflash-audit"],
    "regen": ["dflash-audit"],
}
# What each stage of the image imports at its start (a missing or broken wheel fails here,
# not in a pod on a GPU node).
IMPORTS = {
    "operator": ["dflash_operator.main", "dflash_operator.cli.main", "kopf", "kubernetes"],
    "trainer": [
        "dflash_trainer.train.__main__", "dflash_trainer.eval.__main__",
        "dflash_trainer.data.tokenize", "dflash_trainer.data.audit.cli",
        "dflash_trainer.model.fetch", "dflash_trainer.cleanup", "dflash_trainer.plan.__main__",
        "dflash_memplan", "torch.distributed.run", "transformers", "boto3", "fla",
    ],
    "regen": [
        "dflash_trainer.data.regenerate", "dflash_trainer.data.audit.cli",
        "dflash_trainer.plan.__main__", "dflash_memplan", "vllm", "transformers", "boto3",
        "runai_model_streamer",
    ],
}  # fmt: skip
# What the operator image must not carry (it never trains or reads S3).
ABSENT = {"operator": ["torch", "boto3", "dflash_trainer"]}


TESTED = os.environ.get("DFLASH_IMAGES", "operator trainer regen").split()


def under_test(images: list[str]) -> list[str]:
    return [i for i in images if i in TESTED]


def _run(engine: Engine, ref: str, command: list[str]) -> tuple[int, str]:
    result = run_in_image(engine, ref, command)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("image", "script"),
    [(i, s) for i, scripts in ENTRY_POINTS.items() if i in TESTED for s in scripts],
)
def test_the_entry_points_answer_help_and_version(
    engine: Engine, refs: dict[str, str], image: str, script: str
) -> None:
    code, out = _run(engine, refs[image], [script, "--help"])
    assert code == 0 and "usage:" in out, out
    code, out = _run(engine, refs[image], [script, "--version"])
    assert code == 0, out
    assert out.strip().endswith(read_version()), out


def test_the_operator_image_starts_its_entrypoint_as_a_non_root_user(
    engine: Engine, refs: dict[str, str]
) -> None:
    config = image_config(engine, refs["operator"])
    assert config.entrypoint == ["dflash-operator"]
    code, out = _run(engine, refs["operator"], ["sh", "-c", "id -u; touch /x"])
    assert out.splitlines()[0] == str(DEFAULT_RUN_AS_USER)
    assert code != 0 and "Read-only file system" in out, out


@pytest.mark.parametrize("image", under_test(["trainer", "regen"]))
def test_the_memory_plan_runs_in_the_image(
    engine: Engine, refs: dict[str, str], image: str
) -> None:
    """`python -m dflash_trainer.plan`, which the operator's MemoryCheckSkipped message and the
    docs tell users to run (it needed dflash_operator before memplan was a package)."""
    python = "python3" if image == "regen" else "python"
    code, out = _run(engine, refs[image], [python, "-m", "dflash_trainer.plan", "--help"])
    assert code == 0 and "usage:" in out, out


@pytest.mark.parametrize("image", under_test(list(IMPORTS)))
def test_what_each_stage_imports_is_in_the_image(
    engine: Engine, refs: dict[str, str], image: str
) -> None:
    python = "python3" if image == "regen" else "python"
    script = (
        "import importlib, sys\n"
        f"for name in {IMPORTS[image]!r}:\n"
        "    importlib.import_module(name)\n"
        f"for name in {ABSENT.get(image, [])!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    sys.exit(f'{name} must not be in this image')\n"
        "print('imports ok')\n"
    )
    code, out = _run(engine, refs[image], [python, "-c", script])
    assert code == 0 and "imports ok" in out, out[-3000:]


def test_every_command_the_operator_renders_parses_in_its_image(
    engine: Engine, refs: dict[str, str]
) -> None:
    """Each container of each stage child of each example, in the image it names: the program
    (python/python3 of that image, the module, torchrun and the module it launches) parses the
    operator's args. One failure lists every command that did not parse."""
    regen = refs["regen"] if "regen" in TESTED else refs["trainer"]
    rendered = rendered_containers(regen_image=regen, trainer_image=refs["trainer"])
    assert {r.image for r in rendered} == {regen, refs["trainer"]}
    assert len({r.example for r in rendered}) >= 4
    failures = []
    parsed_modules = set()
    for item in rendered:
        args = [str(a).replace("$$", "$") for a in item.container["args"]]
        assert args[1] == "-m", f"{item.id}: {args[:3]}"
        code, out = _run(engine, item.image, [args[0], "-c", SCRIPT, *args[1:]])
        if code != 0:
            failures.append(f"{item.id} ({item.image}): exit {code}: {out.strip()[-800:]}")
            continue
        programs = json.loads(out.strip().splitlines()[-1])
        parsed_modules.update(p["module"] for p in programs)
    assert not failures, "\n".join(failures)
    assert {
        "dflash_trainer.data.regenerate", "dflash_trainer.data.audit", "dflash_trainer.data.tokenize",
        "torch.distributed.run", "dflash_trainer.train", "dflash_trainer.eval",
        "dflash_trainer.cleanup", "dflash_trainer.model.fetch",
    } <= parsed_modules, parsed_modules  # fmt: skip


@pytest.mark.parametrize("image", under_test(list(BUDGETS_GB)))
def test_the_image_stays_under_its_size_budget(
    engine: Engine, refs: dict[str, str], image: str
) -> None:
    size = image_size(engine, refs[image]) / 1e9
    assert size <= BUDGETS_GB[image], f"{refs[image]}: {size:.2f} GB > {BUDGETS_GB[image]} GB"
