"""The plan as text: one line per term in GiB, the total against the GPU, and the fixes."""

from __future__ import annotations

from collections.abc import Mapping

from dflash_memplan.estimate import GIB, MemoryEstimate
from dflash_memplan.fixes import Fix, Knob
from dflash_memplan.terms import Term

NAME_WIDTH = 28


def gib(size: int) -> str:
    return f"{size / GIB:.2f} GiB"


def _line(term: Term) -> str:
    return f"  {term.name:<{NAME_WIDTH}} {gib(term.bytes):>12}  {term.detail}"


def format_estimate(
    estimate: MemoryEstimate, capacity: int | None, capacity_source: str = ""
) -> list[str]:
    """Every term (persistent, then the peak phase), the total and the verdict."""
    setup, target, drafter = estimate.setup, estimate.target, estimate.drafter
    lines = [
        f"memory of one training rank: target {target.name} ({target.model_type}, "
        f"{target.num_layers} layers, hidden {target.hidden_size}, vocab {target.vocab_size}); "
        f"drafter {drafter.num_layers} layers, block {drafter.block_size}; "
        f"{setup.world_size} rank(s), {setup.strategy if setup.world_size > 1 else 'one process'}"
        f", {setup.device}",
    ]
    lines += [_line(term) for term in estimate.persistent]
    lines.append(f"  at the peak ({estimate.peak_phase}):")
    lines += [_line(term) for term in estimate.peak_terms]
    lines.append(_other_phases(estimate))
    lines.append(_line(estimate.workspace))
    lines.append(f"  {'total':<{NAME_WIDTH}} {gib(estimate.total_bytes):>12}")
    if capacity is not None:
        spare = capacity - estimate.total_bytes
        verdict = (
            f"fits, {gib(spare)} spare ({spare / capacity:.1%})"
            if spare >= 0
            else f"does NOT fit by {gib(-spare)}"
        )
        source = f" ({capacity_source})" if capacity_source else ""
        lines.append(f"  {'GPU memory':<{NAME_WIDTH}} {gib(capacity):>12}  {verdict}{source}")
    return lines


def _other_phases(estimate: MemoryEstimate) -> str:
    """The moments that are not the peak, each as its terms' sum on top of the persistent
    ones: how far each is from becoming the peak (the likelihood monitor's LM head, say)."""
    others = [phase for phase in estimate.phases if phase.name != estimate.peak_phase]
    shown = ", ".join(f"{phase.name} {gib(sum(t.bytes for t in phase.terms))}" for phase in others)
    return f"  other phases (not the peak): {shown}"


def _shown(value: object) -> str:
    """YAML spelling: true/false for booleans."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def format_fixes(
    fixes: list[Fix], fields: Mapping[Knob, str], current: Mapping[Knob, object]
) -> str:
    """`field: old -> new (total X GiB)` for each fix, or what to do when none works alone."""
    if not fixes:
        return "no single field makes it fit: use a GPU with more memory or a smaller drafter"
    parts = [
        f"{fields[fix.knob]} {_shown(current[fix.knob])} -> {_shown(fix.value)} "
        f"({gib(fix.total_bytes)})"
        for fix in fixes
    ]
    return "change one of: " + "; ".join(parts)


def format_terms_inline(estimate: MemoryEstimate) -> str:
    """`frozen target 50.10 GiB + activations 27.88 GiB + ...`: every term on one line."""
    terms = (*estimate.persistent, *estimate.peak_terms, estimate.workspace)
    return " + ".join(f"{term.name} {gib(term.bytes)}" for term in terms if term.bytes)
