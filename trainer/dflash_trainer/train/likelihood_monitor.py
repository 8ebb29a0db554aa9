"""The in-training likelihood monitor: on every `likelihood.every_steps`-th step the target's
forward (which runs anyway) goes on to its last layer, the LM head scores the supervised tokens
of the step's batch, and every row is judged by the same rule as the gates
(`data/likelihood`); per-source counts are summed over the ranks and over training so far.

A source whose off-distribution rate is above `max_off_distribution_rate` beyond sampling
noise (the gates' one-sided Wilson bound, on at least `min_source_rows` scored rows) stops
training: broken shards that the canary's sample missed are caught within minutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dflash_trainer.data.audit.stats import is_rate_above
from dflash_trainer.data.likelihood.hf_scorer import score_positions
from dflash_trainer.data.likelihood.rows import RowRule, build_row_figures
from dflash_trainer.data.likelihood.rows import least_likely as least_likely_positions
from dflash_trainer.data.likelihood.rule import SamplingRule
from dflash_trainer.model.target import TargetParts
from dflash_trainer.train.batches import TokenRows
from dflash_trainer.train.config import LikelihoodSection
from dflash_trainer.train.distributed import DistEnv, all_reduce_sum
from dflash_trainer.train.step import MicroBatch

# Per source: rows scored, rows off-distribution, supervised tokens, sum of NLL (nats).
SCORED, OFF, TOKENS, NLL = range(4)
EXAMPLES_PER_SOURCE = 3
MARKED_TOKENS = 8


@dataclass
class OffRow:
    """An off-distribution row seen by this rank, for the report."""

    id: str
    source: str
    step: int
    nll: float
    tokens: int
    outside: int
    z: float
    least_likely: list[tuple[int, int, float]]  # (position, token id, log-probability)


@dataclass
class MonitorFailure:
    step: int
    sources: list[str]
    rates: dict[str, float]
    scored: dict[str, int]


@dataclass
class LikelihoodMonitor:
    cfg: LikelihoodSection
    target: TargetParts
    rows: TokenRows
    env: DistEnv
    totals: np.ndarray = field(init=False)
    pending: np.ndarray = field(init=False)
    examples: dict[str, list[OffRow]] = field(default_factory=dict)
    steps_scored: int = 0
    last_step: int = 0
    failure: MonitorFailure | None = None

    def __post_init__(self) -> None:
        names = self.rows.source_names or ("(no source column)",)
        self.names = list(names)
        self.totals = np.zeros((len(self.names), 4), dtype=np.float64)
        self.pending = np.zeros_like(self.totals)
        self.rule = SamplingRule(
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            top_k=self.cfg.top_k,
            min_p=self.cfg.min_p,
            penalized=self.cfg.penalized,
            default_k=self.cfg.default_k,
        )
        # Per source index: the rule its rows are judged by (None: sampling unknown, unscored).
        self.source_rules = [self._rule_of(name) for name in self.names]
        self.row_rule = RowRule(
            self.cfg.engine_tolerance,
            self.cfg.nll_tolerance,
            self.cfg.row_outside_share,
            self.cfg.row_z,
        )
        self._step = 0

    def _rule_of(self, name: str) -> SamplingRule | None:
        if name not in self.cfg.sources:
            return self.rule
        declared = self.cfg.sources[name]
        if declared is None:
            return None
        return SamplingRule(
            temperature=declared.temperature, top_p=declared.top_p, top_k=declared.top_k,
            min_p=declared.min_p, default_k=self.cfg.default_k,
        )  # fmt: skip

    @property
    def unjudged(self) -> list[str]:
        """Sources whose sampling is unknown: never scored, never passed."""
        return [n for n, r in zip(self.names, self.source_rules, strict=True) if r is None]

    @property
    def enabled(self) -> bool:
        return self.cfg.every_steps > 0

    def is_due(self, step: int) -> bool:
        """Whether step number `step` (1-based) is scored."""
        return self.enabled and step % self.cfg.every_steps == 0

    def start_step(self, step: int) -> None:
        self._step = step

    def observe(self, mb: MicroBatch, hidden: torch.Tensor) -> None:
        """Score one micro-batch's supervised tokens from the target's final hidden states."""
        if mb.loss_mask is None or mb.rows is None:
            return
        sources = self._sources(mb.rows)
        predicted = mb.loss_mask[:, 1:].bool()
        rules = [self.source_rules[int(i)] for i in sources]
        known = torch.tensor([r is not None for r in rules], device=predicted.device)
        predicted &= known[:, None]  # rows of unknown sampling are not scored
        rows_at, cols_at = predicted.nonzero(as_tuple=True)
        targets = mb.input_ids[:, 1:][rows_at, cols_at]
        columns = self._score_by_rule(hidden[:, :-1][rows_at, cols_at], targets, rows_at, rules)
        lp, rank, gap, mu, var = columns
        counts = predicted.sum(dim=1).cpu().numpy()
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        share_k = np.array([(r or self.rule).share_k for r in rules], dtype=np.int64)
        figures = build_row_figures(offsets, lp, rank, gap, mu, var, share_k, self.row_rule)
        sources = self._sources(mb.rows)
        scored = figures.tokens > 0
        np.add.at(self.pending[:, SCORED], sources, scored.astype(np.float64))
        np.add.at(self.pending[:, OFF], sources, figures.off.astype(np.float64))
        np.add.at(self.pending[:, TOKENS], sources, figures.tokens.astype(np.float64))
        np.add.at(self.pending[:, NLL], sources, figures.nll * figures.tokens)
        token_ids = targets.cpu().numpy()
        for j in np.flatnonzero(figures.off).tolist():
            self._keep_example(int(mb.rows[j]), int(sources[j]), figures, j, offsets, lp, token_ids)

    def _score_by_rule(
        self,
        hidden: torch.Tensor,
        targets: torch.Tensor,
        rows_at: torch.Tensor,
        rules: list[SamplingRule | None],
    ) -> list[np.ndarray]:
        """(lp, rank, gap, mu, var) per position, each row's positions under its source's rule
        (one LM-head pass per distinct rule over its own positions only)."""
        n = int(targets.shape[0])
        out: list[np.ndarray] = [np.zeros(n, dtype=np.float32), np.zeros(n, dtype=np.int64)]
        out += [np.zeros(n, dtype=np.float32) for _ in range(3)]
        row_of = rows_at.cpu().numpy()
        for rule in {r for r in rules if r is not None}:
            rows = [j for j, r in enumerate(rules) if r == rule]
            at = np.flatnonzero(np.isin(row_of, rows))
            if not len(at):
                continue
            index = torch.from_numpy(at).to(hidden.device)
            scores = score_positions(hidden[index], targets[index], self.target.lm_head, rule)
            for column, value in zip(out, (scores.lp, scores.rank, scores.gap, scores.mu,
                                            scores.var), strict=True):  # fmt: skip
                column[at] = value.float().cpu().numpy() if value.is_floating_point() else (
                    value.cpu().numpy())  # fmt: skip
        return out

    def _sources(self, rows: np.ndarray) -> np.ndarray:
        if self.rows.sources is None:
            return np.zeros(len(rows), dtype=np.int64)
        picked: np.ndarray = self.rows.sources[rows].astype(np.int64)
        return picked

    def _keep_example(
        self,
        row: int,
        source: int,
        figures: Any,
        j: int,
        offsets: np.ndarray,
        lp: np.ndarray,
        token_ids: np.ndarray,
    ) -> None:
        name = self.names[source]
        kept = self.examples.setdefault(name, [])
        if len(kept) >= EXAMPLES_PER_SOURCE:
            return
        lo, hi = int(offsets[j]), int(offsets[j + 1])
        picked = least_likely_positions(lp[lo:hi], MARKED_TOKENS)
        kept.append(
            OffRow(
                id=str(self.rows.ids[row]),
                source=name,
                step=self._step,
                nll=float(figures.nll[j]),
                tokens=int(figures.tokens[j]),
                outside=int(figures.outside[j]),
                z=float(figures.z[j]),
                least_likely=[(int(p), int(token_ids[lo + p]), float(lp[lo + p])) for p in picked],
            )
        )

    def finish_step(self, step: int) -> MonitorFailure | None:
        """Sum this step's counts over the ranks (every rank calls it on the same steps), add
        them to the totals and judge every source; the same verdict on every rank."""
        device = self.env.device
        reduced = all_reduce_sum(torch.from_numpy(self.pending).to(device), self.env)
        self.totals += reduced.cpu().numpy()
        self.pending[:] = 0.0
        self.steps_scored += 1
        self.last_step = step
        failing = [
            i
            for i, (scored, off) in enumerate(self.totals[:, [SCORED, OFF]])
            if scored >= self.cfg.min_source_rows
            and is_rate_above(off, scored, self.cfg.max_off_distribution_rate)
        ]
        if failing and self.failure is None:
            self.failure = MonitorFailure(
                step=step,
                sources=[self.names[i] for i in failing],
                rates={self.names[i]: self.rate(i) for i in failing},
                scored={self.names[i]: int(self.totals[i, SCORED]) for i in failing},
            )
        return self.failure

    def state(self) -> dict[str, Any]:
        """The totals so far (every rank holds the same, summed over the ranks), for the
        trainer's checkpoint: a resumed run goes on counting instead of restarting at zero."""
        return {
            "totals": {n: self.totals[i].tolist() for i, n in enumerate(self.names)},
            "stepsScored": self.steps_scored,
            "lastStep": self.last_step,
        }

    def restore(self, state: dict[str, Any] | None) -> None:
        """Totals from a checkpoint's `state()` (None: a checkpoint from before they were
        saved; the totals then start at the resumed step). Sources matched by name."""
        if not state:
            return
        for name, values in (state.get("totals") or {}).items():
            if name in self.names and len(values) == self.totals.shape[1]:
                self.totals[self.names.index(name)] = np.asarray(values, dtype=np.float64)
        self.steps_scored = int(state.get("stepsScored", 0))
        self.last_step = int(state.get("lastStep", 0))

    def rate(self, i: int) -> float:
        scored = self.totals[i, SCORED]
        return float(self.totals[i, OFF] / scored) if scored else 0.0

    def snapshot(self) -> dict[str, Any]:
        """`status.training.likelihood` (camelCase, JSON merge patch friendly)."""
        sources = {}
        for i, name in enumerate(self.names):
            scored = int(self.totals[i, SCORED])
            if not scored:
                continue
            tokens = max(self.totals[i, TOKENS], 1.0)
            sources[name] = {
                "scoredRows": scored,
                "offRows": int(self.totals[i, OFF]),
                "offDistributionRate": round(self.rate(i), 6),
                "meanNll": round(float(self.totals[i, NLL] / tokens), 6),
            }
        verdict = "fail" if self.failure else "pass"
        return {
            "step": self.last_step,
            "everySteps": self.cfg.every_steps,
            "scoredRows": int(self.totals[:, SCORED].sum()),
            "offRows": int(self.totals[:, OFF].sum()),
            "maxOffDistributionRate": self.cfg.max_off_distribution_rate,
            "verdict": verdict,
            "sources": sources,
        }
