"""The target-likelihood check on the project's tiny target (the demo's, taught the chat
format): healthy sources are the target's own samples from the CPU regeneration engine; each
corrupted source below passes every shape check, and the likelihood check alone catches it, in
the completions gate and in the tokens gate. A healthy source whose answers are in another
script than its prompts passes the whole gate: the script check defers to the likelihood check.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from dflash_dev.demo import assets
from dflash_dev.paths import REPO_ROOT
from dflash_trainer.data.audit.cli import main as audit_main
from dflash_trainer.data.regenerate.cli import main as regenerate_main
from dflash_trainer.data.regenerate.shard_store import COMPLETION_SCHEMA
from dflash_trainer.data.tokenize.cli import main as tokenize_main
from dflash_trainer.tiny.prompts import build_prompt_records

ROWS = 64  # per source: above minSourceSamples (50)
MAX_NEW_TOKENS = 160
TEMPERATURE = 0.6  # the regeneration's default sampling (top-p 0.95, top-k 20)
HEALTHY = ("chat", "qa")
Rows = list[dict[str, Any]]
# Latin -> Cyrillic letters: the prompts of a translation source, in another script.
CYRILLIC = str.maketrans("abcdefghijklmnopqrstuvwxyz", "абцдефгхийклмнопкрстуввхуз")
TRANSLATE = "Переведите на английский: "
# A further lesson of the tiny target: translation requests in Cyrillic answered in English
# (its own paragraphs). Without it the tiny target has never seen Cyrillic and loops on it.
TRANSLATION_STEPS = 200
TRANSLATION_RECIPE = 1


def thresholds(tmp: Path) -> Path:
    """The demo's thresholds for the tiny world (examples/tiny-cpu.yaml), minus its node pool:
    the tiny target repeats its ~30 paragraphs, the production defaults elsewhere."""
    example = yaml.safe_load((REPO_ROOT / "examples" / "tiny-cpu.yaml").read_text())
    audit = {k: v for k, v in example["spec"]["audit"].items() if k != "nodePool"}
    audit["minSourceSamples"] = 50  # the production default: every source here is judged
    flat = {k: v for k, v in audit.items() if not isinstance(v, dict)}
    for group in ("completions", "tokens", "likelihood"):
        flat |= audit.get(group) or {}
    path = tmp / "thresholds.yaml"
    path.write_text(yaml.safe_dump(flat))
    return path


def generate(target: Path, sources: dict[str, list[str]], work: Path, *extra: str) -> Rows:
    """The target's answers to every prompt, by the project's CPU regeneration engine."""
    work.mkdir(parents=True)
    lines = []
    for name, prompts in sources.items():
        data = work / f"{name}.jsonl"
        data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
        lines.append(f"- {{name: {name}, uri: {data}, format: prompt-only}}\n")
    (work / "sources.yaml").write_text("".join(lines))
    code = regenerate_main([
        "--run-root", str(work / "run"), "--sources", str(work / "sources.yaml"),
        "--model", str(target), "--engine", "transformers", "--temperature", str(TEMPERATURE),
        "--max-new-tokens", str(MAX_NEW_TOKENS), "--threads", "1", "--progress-seconds", "0",
        "--termination-log", str(work / "regen.json"), *extra,
    ])  # fmt: skip
    assert code == 0, (work / "regen.json").read_text()
    return [r for p in sorted((work / "run" / "regen").rglob("*.parquet"))
            for r in pq.read_table(p).to_pylist()]  # fmt: skip


def prompts(part: int) -> list[str]:
    """The `part`-th slice of ROWS distinct prompts (sources never share a prompt: the
    pipeline keeps the first of duplicate prompts across sources)."""
    every = [r["messages"][0]["content"] for r in build_prompt_records(6 * ROWS, seed=0)]
    return every[part * ROWS : (part + 1) * ROWS]


def quantized_copy(target: Path, out: Path, bits: int = 4) -> Path:
    """The target with every matrix rounded to `bits` bits per row: a quantized copy, as made
    to generate distillation data fast."""
    from transformers import AutoModelForCausalLM

    shutil.copytree(target, out)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    levels = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                scale = param.abs().amax(dim=1, keepdim=True) / levels
                param.copy_(torch.round(param / scale) * scale)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def target() -> Path:
    return assets.ensure_tiny_target()


def translation_request(prompt: str) -> str:
    return TRANSLATE + prompt.lower().translate(CYRILLIC)


def ensure_translation_target(target: Path) -> Path:
    """The tiny target taught, in addition, to answer Cyrillic translation requests in English
    (built once from the cached demo target, then cached beside it)."""
    from dflash_trainer.tiny.build import teach_chat_format
    from dflash_trainer.tiny.prompts import build_conversations
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = target.parent / f"{target.name}-translation-s{TRANSLATION_STEPS}-r{TRANSLATION_RECIPE}"
    if (out / "model.safetensors").is_file():
        return out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(target, partial)
    lessons = [
        [{"role": "user", "content": translation_request(user["content"])}, answer]
        if i % 2 else [user, answer]
        for i, (user, answer) in enumerate(build_conversations(256, seed=5))
    ]  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    teach_chat_format(model, AutoTokenizer.from_pretrained(target), TRANSLATION_STEPS, 0, lessons)
    model.save_pretrained(partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


@pytest.fixture(scope="module")
def healthy(target: Path, tmp_path_factory: pytest.TempPathFactory) -> Rows:
    work = tmp_path_factory.mktemp("healthy")
    return generate(target, {"chat": prompts(1), "qa": prompts(2)}, work / "gen")


def renamed(rows: Rows, source: str) -> Rows:
    return [dict(r, source=source, id=f"{source}-{r['id']}") for r in rows]


def wrong_prompts(rows: Rows) -> Rows:
    """Each answer after another row's prompt: a join on the wrong key."""
    return [dict(r, prompt=rows[(i + 7) % len(rows)]["prompt"]) for i, r in enumerate(rows)]


CORRUPTIONS: dict[str, Callable[[Path, Rows, Path], Rows]] = {
    # answers paired with the wrong prompts, as a join bug makes
    "joined": lambda target, healthy, work: renamed(
        wrong_prompts([r for r in healthy if r["source"] == "qa"]), "joined"
    ),
    # the target's prompts answered by a 4-bit quantized copy of it
    "quantized": lambda target, healthy, work: generate(
        quantized_copy(target, work / "q4"), {"quantized": prompts(3)}, work / "gen"
    ),
    # sampled hotter (temperature 1.0) than the settings the run declares (0.6)
    "hotter": lambda target, healthy, work: renamed(
        generate(target, {"x": prompts(3)}, work / "gen", "--temperature", "1.0"), "hotter"
    ),
}


def write_regen(run_root: Path, rows: Rows) -> None:
    import pyarrow as pa

    part = run_root / "regen" / "shard-00000" / "part-00000.parquet"
    part.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=COMPLETION_SCHEMA), part)
    manifest = {"shard": 0, "shards": 1, "files": [{"path": "shard-00000/part-00000.parquet"}]}
    (run_root / "regen" / "shard-00000.commit.json").write_text(json.dumps(manifest))


def audit(
    run_root: Path, gate: str, target: Path, limits: Path, *extra: str
) -> tuple[int, dict[str, Any]]:
    out = run_root / "audit" / (gate + "-".join(extra).replace("--", "-"))
    code = audit_main([
        "--run-root", str(run_root), "--gate", gate, "--model", str(target), "--thresholds",
        str(limits), "--temperature", str(TEMPERATURE), "--max-new-tokens", str(MAX_NEW_TOKENS),
        "--max-seq-len", "1024", "--no-plots", "--out", str(out),
        "--termination-log", str(out) + ".json", *extra,
    ])  # fmt: skip
    return code, json.loads((out / "report.json").read_text())


def tokenize(run_root: Path, target: Path) -> None:
    code = tokenize_main([
        "--run-root", str(run_root), "--model", str(target), "--max-seq-len", "1024",
        "--truncated-answers", "keep", "--termination-log", str(run_root / "tok.json"),
    ])  # fmt: skip
    assert code == 0, (run_root / "tok.json").read_text()


def violated(report: dict[str, Any]) -> dict[str, set[str]]:
    return {v["check"]: set(v["sources"]) for v in report["violations"]}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corruption_no_shape_check_sees_is_caught_by_the_likelihood_check_alone(
    corruption: str, target: Path, healthy: Rows, tmp_path: Path
) -> None:
    limits = thresholds(tmp_path)
    broken = CORRUPTIONS[corruption](target, healthy, tmp_path)
    assert {r["source"] for r in broken} == {corruption}
    run_root = tmp_path / "run"
    write_regen(run_root, healthy + broken)

    # Every shape check passes: nothing about these rows' shape is wrong.
    code, shapes_only = audit(run_root, "completions", target, limits, "--score-samples", "0")
    assert code == 0, shapes_only["violations"]
    assert "skipped" in shapes_only["likelihood"]
    # The likelihood check fails the corrupted source, and only it.
    code, report = audit(run_root, "completions", target, limits)
    assert code == 3
    assert violated(report) == {"off_distribution_rate": {corruption}}
    figures = {n: s["details"]["likelihood"] for n, s in report["sources"].items()}
    assert all(figures[n]["offRows"] <= 2 for n in HEALTHY), figures
    # Caught with a margin, not at the edge: at least twice the gate's limit. (The tiny target
    # is rebuilt on each machine and its figures move: 8-15 of 64 joined rows seen off.)
    (violation,) = report["violations"]
    limit = violation["threshold"]
    assert figures[corruption]["offRows"] >= 2 * limit * ROWS, (limit, figures[corruption])
    example = report["examples"]["off_distribution_rate"][0]
    assert example["source"] == corruption and "⟦" in example["marked"]
    least = report["likelihood"]["leastLikely"][corruption][0]
    assert least["leastLikely"] and least["nllPerToken"] > 0

    # The tokens gate scores the ids training will see, and agrees.
    tokenize(run_root, target)
    code, shapes_only = audit(run_root, "tokens", target, limits, "--score-samples", "0")
    assert code == 0, shapes_only["violations"]
    code, report = audit(run_root, "tokens", target, limits)
    assert code == 3 and violated(report) == {"off_distribution_rate": {corruption}}


def test_a_healthy_source_answering_in_another_script_passes_the_whole_gate(
    target: Path, tmp_path: Path
) -> None:
    limits = thresholds(tmp_path)
    bilingual = ensure_translation_target(target)
    own = generate(bilingual, {"translation": [translation_request(p) for p in prompts(4)]},
                   tmp_path / "gen")  # fmt: skip
    # Only answers: the tiny target taught on some machines leaves a few empty (4 of 64 seen),
    # which the empty-response check rightly fails; this test is about the script check.
    own = [r for r in own if r["response"].strip()]
    assert len(own) >= 50, f"{len(own)} non-empty answers: too few to judge (minSourceSamples)"
    run_root = tmp_path / "run"
    write_regen(run_root, own)

    # The script check alone fails it: its prompts are Cyrillic, the target answers in Latin.
    code, shapes_only = audit(run_root, "completions", bilingual, limits, "--score-samples", "0")
    assert code == 3 and violated(shapes_only) == {"wrong_language_rate": {"translation"}}
    # The target scores the rows as its own: the script check is advisory, the gate passes.
    code, report = audit(run_root, "completions", bilingual, limits)
    assert code == 0, report["violations"]
    (advisory,) = report["advisory"]
    assert advisory["check"] == "wrong_language_rate" and advisory["sources"] == ["translation"]
    assert report["sources"]["translation"]["details"]["likelihood"]["offRows"] <= 2
    # ... and the same rows paired with English prompts are not the target's: they fail.
    english = [dict(r, prompt=json.dumps([{"role": "user", "content": p}]))
               for r, p in zip(own, prompts(5)[: len(own)], strict=True)]  # fmt: skip
    other = tmp_path / "other"
    write_regen(other, english)
    code, report = audit(other, "completions", bilingual, limits)
    assert code == 3 and violated(report) == {"off_distribution_rate": {"translation"}}


def canary(work: Path, target: Path, sources: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """A canary that regenerates the run's own sources at the run's sampling and imports the
    `format: regenerated` ones, scored under the target; then the canary gate on it."""
    work.mkdir(parents=True)
    (work / "sources.yaml").write_text(yaml.safe_dump(sources))
    run_root = work / "run"
    code = regenerate_main([
        "--run-root", str(run_root), "--sources", str(work / "sources.yaml"),
        "--model", str(target), "--engine", "transformers", "--temperature", str(TEMPERATURE),
        "--max-new-tokens", str(MAX_NEW_TOKENS), "--threads", "1", "--progress-seconds", "0",
        "--canary-samples-per-source", str(ROWS), "--score-likelihood", "--max-seq-len", "1024",
        "--termination-log", str(work / "canary.json"),
    ])  # fmt: skip
    assert code == 0, (work / "canary.json").read_text()
    out = run_root / "audit" / "canary"
    code = audit_main([
        str(run_root / "canary" / "regen"), "--gate", "completions", "--run-root", str(run_root),
        "--model", str(target), "--thresholds", str(thresholds(work)),
        "--max-new-tokens", str(MAX_NEW_TOKENS), "--max-seq-len", "1024", "--no-plots",
        "--scores", str(run_root / "canary" / "likelihood"), "--out", str(out),
        "--termination-log", str(out) + ".json",
    ])  # fmt: skip
    return code, json.loads((out / "report.json").read_text())


def test_the_canary_judges_imported_rows_by_their_declared_sampling(
    target: Path, tmp_path: Path
) -> None:
    """Imported answers sampled at temperature 1.0 (no truncation) beside the run's own
    prompts regenerated at 0.6: declared as what they are they pass; declared as the run's
    sampling the same rows fail; declared as nothing they are not judged."""
    hot = generate(target, {"hot": prompts(3)}, tmp_path / "gen", "--temperature", "1.0")
    data = tmp_path / "hot.jsonl"
    fields = ("prompt", "response", "reasoning", "output_token_ids", "num_output_tokens",
              "finish_reason")  # fmt: skip
    data.write_text("".join(json.dumps({k: r[k] for k in fields if k in r}) + "\n" for r in hot))
    own_prompts = tmp_path / "own.jsonl"
    own_prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts(1)))
    own = {"name": "own", "uri": str(own_prompts), "format": "prompt-only"}
    imported = {"name": "imported", "uri": str(data), "format": "regenerated"}

    declared = {"temperature": 1.0, "topP": 1.0, "topK": 0}
    code, report = canary(tmp_path / "as-made", target,
                          [own, imported | {"sampling": declared}])  # fmt: skip
    assert code == 0, report["violations"]
    figures = {n: s["details"]["likelihood"] for n, s in report["sources"].items()}
    assert figures["imported"]["offRows"] <= 2 and figures["own"]["offRows"] <= 2, figures

    as_run = {"temperature": TEMPERATURE, "topP": 0.95, "topK": 20}
    code, report = canary(tmp_path / "as-run", target,
                          [own, imported | {"sampling": as_run}])  # fmt: skip
    assert code == 3 and violated(report) == {"off_distribution_rate": {"imported"}}

    code, report = canary(tmp_path / "unknown", target, [own, imported])
    assert code == 0, report["violations"]
    assert report["sources"]["imported"]["details"]["likelihood"]["judged"] is False
    assert any("imported" in note and "skipped" in note for note in report["notes"])
