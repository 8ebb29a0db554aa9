"""The target-likelihood check inside a gate: scored rows -> per-source off-distribution rate
(judged like every rate, `checks`), NLL histograms, and the least likely rows of each source
with their least likely tokens marked.

The scores come from the canary (its own sample), the score stage (imported completions) or
`dflash-audit --model` (`likelihood_scoring`); here they are only read and judged with this
gate's thresholds (`spec.audit.likelihood`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from dflash_trainer.data.audit.checks import LIKELIHOOD_CHECK
from dflash_trainer.data.audit.histogram import IntHistogram
from dflash_trainer.data.audit.lists import flatten_list
from dflash_trainer.data.audit.metrics import OVERALL, GateMetrics, GroupMetrics
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.data.likelihood.rows import NLL_BIN, RowFigures, RowRule, build_row_figures
from dflash_trainer.data.likelihood.rows import least_likely as least_likely_positions
from dflash_trainer.data.likelihood.sampling import SamplingRule
from dflash_trainer.data.likelihood.scores import SOURCE_RULES_KEY, ScoresMeta

NLL_PLOT = "nll_per_token"
RULES = ("support", "nll")  # the row rule's two tests (docs/audit-gates.md 8.2)
LEAST_LIKELY_ROWS = 3  # per source, in the report
MARKED_TOKENS = 8  # per row: its least likely tokens, marked in context
CONTEXT_TOKENS = 10  # tokens shown each side of a marked token
OFF_EXAMPLES = 5
MARK_OPEN, MARK_CLOSE = "⟦", "⟧"
Decoder = Callable[[list[int]], str]


def row_rule(thresholds: Thresholds) -> RowRule:
    return RowRule(
        engine_tolerance=thresholds.engine_tolerance,
        nll_tolerance=thresholds.nll_tolerance,
        row_outside_share=thresholds.row_outside_share,
        row_z=thresholds.row_z,
    )


@dataclass
class ScoredSample:
    """A gate's scored rows, judged: the table, its flat token arrays and the row figures."""

    table: pa.Table
    meta: ScoresMeta
    uri: str
    offsets: np.ndarray
    columns: dict[str, np.ndarray]
    figures: RowFigures
    sources: np.ndarray  # source name per row
    rule: RowRule = field(default_factory=RowRule)

    @property
    def share_k(self) -> np.ndarray:
        """k of the top-k share per row (constant within a source)."""
        return self.figures.share_k


def judge_scores(
    table: pa.Table, meta: ScoresMeta, uri: str, thresholds: Thresholds
) -> ScoredSample:
    columns: dict[str, np.ndarray] = {}
    offsets = np.zeros(table.num_rows + 1, dtype=np.int64)
    for name, kind in (("lp", np.float32), ("rank", np.int64), ("gap", np.float32),
                       ("mu", np.float32), ("var", np.float32), ("token_ids", np.int64)):  # fmt: skip
        flat = flatten_list(table.column(name), kind)
        columns[name] = flat.values
        offsets = flat.offsets
    rule = row_rule(thresholds)
    sources = np.asarray(table.column("source").to_pylist(), dtype=object)
    share_k = np.array([share_k_of(meta.source_rule(str(n)), thresholds) for n in sources],
                       dtype=np.int64)  # fmt: skip
    figures = build_row_figures(
        offsets, columns["lp"], columns["rank"], columns["gap"], columns["mu"], columns["var"],
        share_k, rule,
    )  # fmt: skip
    return ScoredSample(table, meta, uri, offsets, columns, figures, sources, rule)


def share_k_of(rule: SamplingRule | None, thresholds: Thresholds) -> int:
    """k of the reported top-k share: the sampling's own top-k, else this gate's
    `audit.likelihood.topK` (1 when greedy)."""
    return replace(rule or UNKNOWN, default_k=thresholds.top_k).share_k


# A source with no declared sampling is scored as if every token could be drawn.
UNKNOWN = SamplingRule(temperature=1.0, top_p=1.0, top_k=0)


def skipped_rules(
    rule: SamplingRule | None, gap: np.ndarray, mu: np.ndarray, var: np.ndarray
) -> dict[str, str]:
    """The row rules that judged no position of a group's tokens, each with why."""
    if rule is None:
        why = ("the source's sampling is unknown (declare spec.data.sources[].sampling: "
               "temperature, topP, topK, minP)")  # fmt: skip
        return {"support": why, "nll": why}
    out = {}
    if not np.isfinite(gap).any():
        out["support"] = (
            "a repetition or presence penalty: the sampler's support cannot be reproduced"
            if rule.penalized
            else f"top-k {rule.top_k}, top-p {rule.top_p:g} and min-p {rule.min_p:g} at "
            f"temperature {rule.temperature:g}: every token can be drawn, none is outside"
        )
    if not (np.isfinite(mu) & np.isfinite(var)).any():
        out["nll"] = (
            "greedy decoding: a drawn token's NLL has no spread to judge"
            if rule.greedy
            else "no position's sampled distribution is known from the top "
            f"{rule.logprobs} log-probabilities read (no top-k or min-p cuts inside them)"
        )
    return out


def _group_figures(sample: ScoredSample, chosen: np.ndarray) -> tuple[dict[str, Any], float, float]:
    """(details, off rows, scored rows) of the rows `chosen`."""
    f = sample.figures
    scored = float(chosen.sum())
    off = float(f.off[chosen].sum())
    tokens = f.tokens[chosen]
    hist = IntHistogram()
    hist.add(np.round(f.nll[chosen] / NLL_BIN).astype(np.int64))
    weights = np.maximum(tokens.sum(), 1)
    details = {
        "scored": int(scored),
        "offRows": int(off),
        "tokens": int(tokens.sum()),
        "meanNll": round(float((f.nll[chosen] * tokens).sum() / weights), 4),
        "nllP50": round(hist.percentile(50) * NLL_BIN, 4),
        "nllP90": round(hist.percentile(90) * NLL_BIN, 4),
        "topKShare": round(float((f.top_k_share[chosen] * tokens).sum() / weights), 6),
        "topK": int(np.max(sample.share_k[chosen])) if scored else 0,
        "outsideShare": round(float(f.outside[chosen].sum() / weights), 6),
        "rowsOutside": int((f.outside[chosen] > 0).sum()),
        "rowsAboveZ": int((f.z[chosen] > sample.rule.row_z).sum()),
        "zP99": round(float(np.percentile(f.z[chosen], 99)), 3) if scored else 0.0,
    }
    return details, off, scored


def attach_likelihood(metrics: GateMetrics, sample: ScoredSample) -> None:
    """Add the check's value and counts to every group of `metrics`, its details and the NLL
    histograms (a source scored but absent from the gate's data still gets a group)."""
    histograms: dict[str, IntHistogram] = {}
    token_source = np.repeat(sample.sources, np.diff(sample.offsets))
    judged = np.ones(len(sample.sources), dtype=bool)
    for name in sorted(set(sample.sources.tolist())):
        chosen = sample.sources == name
        details, off, scored = _group_figures(sample, chosen)
        at = token_source == name
        c = sample.columns
        skipped = skipped_rules(sample.meta.source_rule(name), c["gap"][at], c["mu"][at],
                                c["var"][at])  # fmt: skip
        group = metrics.sources.get(name)
        if group is None:
            group = metrics.sources[name] = GroupMetrics(samples=int(scored))
        if skipped:
            details["skippedRules"] = skipped
            metrics.notes.append(
                f"target likelihood, {name}: "
                + "; ".join(f"{rule} rule skipped: {why}" for rule, why in skipped.items())
            )
        if len(skipped) == len(RULES):  # judged nothing: neither a pass nor the target's own
            judged &= ~chosen
            details["judged"] = False
            group.details["likelihood"] = details
            continue
        _set(group, details, off, scored)
        hist = IntHistogram()
        hist.add(np.round(sample.figures.nll[chosen] / NLL_BIN).astype(np.int64))
        histograms[name] = hist
    details, off, scored = _group_figures(sample, judged)
    if judged.any():
        _set(metrics.overall, details, off, scored)
    else:
        metrics.overall.details["likelihood"] = details | {"judged": False}
    overall = IntHistogram()
    overall.add(np.round(sample.figures.nll / NLL_BIN).astype(np.int64))
    histograms[OVERALL] = overall
    metrics.histograms[NLL_PLOT] = histograms
    rule = sample.meta.rule
    declared = sample.meta.extra.get(SOURCE_RULES_KEY)
    how = (
        "each source's declared spec.data.sources[].sampling"
        if isinstance(declared, dict)
        else describe_sampling(rule)
    )
    metrics.notes.append(
        f"target likelihood: {int(scored)} rows scored by {sample.meta.scorer} ({sample.uri}), "
        f"judged against the sampling they were generated with ({how})"
    )
    if rule.penalized:
        metrics.notes.append(
            "a repetition or presence penalty was set: the sampler's support cannot be "
            "reproduced, so only NLL figures are reported and no row is judged off-distribution"
        )


def describe_sampling(rule: SamplingRule) -> str:
    if rule.greedy:
        return "greedy"
    return (
        f"temperature {rule.temperature:g}, top-p {rule.top_p:g}, top-k {rule.top_k or 'off'}"
        + (f", min-p {rule.min_p:g}" if rule.min_p else "")
    )


def _set(group: GroupMetrics, details: dict[str, Any], off: float, scored: float) -> None:
    group.counts[LIKELIHOOD_CHECK] = (off, scored)
    group.values[LIKELIHOOD_CHECK] = off / scored if scored else 0.0
    group.details["likelihood"] = details


# --- the one look: the least likely rows, their least likely tokens marked -----------------
def _marked(token_ids: np.ndarray, positions: np.ndarray, decode: Decoder) -> str:
    """The text around the marked tokens (windows of CONTEXT_TOKENS each side, merged where
    they overlap), each marked token between ⟦ ⟧: `...context ⟦token⟧ context...`."""
    marked = sorted(int(p) for p in positions)
    windows: list[list[int]] = []
    for p in marked:
        lo, hi = max(0, p - CONTEXT_TOKENS), min(len(token_ids), p + CONTEXT_TOKENS + 1)
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = hi
        else:
            windows.append([lo, hi])
    pieces = []
    for lo, hi in windows:
        text, cursor = "", lo
        for p in (q for q in marked if lo <= q < hi):
            text += decode(token_ids[cursor:p].tolist())
            text += MARK_OPEN + decode([int(token_ids[p])]) + MARK_CLOSE
            cursor = p + 1
        text += decode(token_ids[cursor:hi].tolist())
        pieces.append(("..." if lo else "") + text + ("..." if hi < len(token_ids) else ""))
    return "\n".join(pieces)


def build_row_view(sample: ScoredSample, row: int, decode: Decoder | None) -> dict[str, Any]:
    f = sample.figures
    lo, hi = int(sample.offsets[row]), int(sample.offsets[row + 1])
    lp = sample.columns["lp"][lo:hi]
    ids = sample.columns["token_ids"][lo:hi]
    picked = least_likely_positions(lp, MARKED_TOKENS)
    worst = picked[np.argsort(lp[picked])]
    tokens = [
        {
            "position": int(p),
            "token": decode([int(ids[p])]) if decode else int(ids[p]),
            "logprob": round(float(lp[p]), 3),
            "rank": int(sample.columns["rank"][lo + p]),
            "outside": bool(sample.columns["gap"][lo + p] > sample.rule.engine_tolerance),
        }
        for p in worst
    ]
    view: dict[str, Any] = {
        "id": sample.table.column("id")[row].as_py(),
        "source": str(sample.sources[row]),
        "offDistribution": bool(f.off[row]),
        "nllPerToken": round(float(f.nll[row]), 4),
        "tokens": int(f.tokens[row]),
        "outsideTokens": int(f.outside[row]),
        "z": round(float(f.z[row]), 2),
        "leastLikely": tokens,
    }
    tail = sample.table.column("prompt_tail")[row].as_py() or []
    if decode is not None:
        view["promptTail"] = decode(tail)
        view["marked"] = _marked(ids, picked, decode)
    return view


def least_likely_rows(
    sample: ScoredSample, decode: Decoder | None, per_source: int = LEAST_LIKELY_ROWS
) -> dict[str, list[dict[str, Any]]]:
    """Per source, its `per_source` rows with the highest NLL per token."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(set(sample.sources.tolist())):
        rows = np.flatnonzero(sample.sources == name)
        worst = rows[np.argsort(-sample.figures.nll[rows], kind="stable")[:per_source]]
        out[name] = [build_row_view(sample, int(r), decode) for r in worst]
    return out


def off_examples(
    sample: ScoredSample, sources: list[str], decode: Decoder | None
) -> list[dict[str, Any]]:
    """Examples for a failed check: off-distribution rows of the failing sources, at least one
    from each, least likely first."""
    f = sample.figures
    picked: list[int] = []
    for name in sources or sorted(set(sample.sources.tolist())):
        rows = np.flatnonzero((sample.sources == name) & f.off)
        picked += rows[np.argsort(-f.z[rows] - f.outside_share[rows] * 100)][:1].tolist()
    rest = [int(r) for r in np.argsort(-f.nll) if f.off[r] and int(r) not in picked]
    picked += rest[: max(0, OFF_EXAMPLES - len(picked))]
    return [build_row_view(sample, r, decode) for r in picked[: max(OFF_EXAMPLES, len(sources))]]
