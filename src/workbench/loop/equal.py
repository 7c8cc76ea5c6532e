"""Equal work before equal time: which turns two arms may be timed against each other on.

A turn compares arms only when each of them decoded what the turn asked for (the recorded reply's
length, or a genuine end of generation that the reference greedy arm also hit at the same length)
and produced the reference arm's output (token-identical, or within a declared tolerance). An arm
that fails more than a stated share of its turns is disqualified: it cannot enter the gate or be
the best llama.cpp arm, and its finding says why. The reference is declared or chosen by a stated
rule (:meth:`EqualWork.for_arms`), and every finding names it; without it nothing can be checked, so
nothing is compared.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Collection, Sequence

import pandas as pd

from ..contract import common_prefix
from . import arms as _arms

CHOSEN = ("the run's first plain arm (reuse on, no speculation) that ran, llama.cpp arms first, never the gate's "
          "subject")  # how the reference is chosen when none is declared


@dataclass(frozen=True)
class EqualWork:
    reference: str | None = None  # the plain greedy arm every output is checked against; None: chosen (CHOSEN)
    token_tolerance: float = 0.0  # share of a turn's output tokens that may differ from the reference's
    max_failed_share: float = 0.1  # an arm that fails more of its turns than this is disqualified
    chosen_by: str = "declared"  # how the reference was chosen, stated in every finding

    def __post_init__(self) -> None:
        for name in ("token_tolerance", "max_failed_share"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 1):
                raise ValueError(f"{name} must be a finite number in [0, 1), got {v!r}")

    def for_arms(self, names: Sequence[str], subject: str, ran: Collection[str] | None = None) -> "EqualWork":
        """This rule with its reference fixed for a run of ``names`` (those of them that opened: ``ran``).

        A declared reference must be one of ``names``. Otherwise it is chosen by :data:`CHOSEN`: the
        subject never, since its own output would then be the measure of its work. An arm set whose arms
        need a reference but hold no plain arm is a ``ValueError`` naming the arm to add (exit 2)."""
        if self.reference is not None:
            if self.reference not in names:
                raise ValueError(f"--reference {self.reference} is not one of the run's arms ({', '.join(names)}); "
                                 "add it to --arms or name one of them")
            return self
        plain = [n for n in names if n != subject and _arms.plain(n) == n]
        checked = [n for n in names if n != subject]
        if not plain:
            if not checked:  # the subject alone: nothing to compare, the gate says why
                return self
            need = list(dict.fromkeys(_arms.plain(n) for n in checked))
            raise ValueError(f"no plain arm in --arms {','.join(names)} to check the other arms' output against "
                             f"(equal work): add {' or '.join(need)} (plain decode on the same engine) to --arms, "
                             "or declare one with --reference ARM")
        order = sorted(plain, key=lambda n: not _arms.is_llamacpp(n))  # stable: the run's order within each group
        up = [n for n in order if ran is None or n in ran]
        pick = (up or order)[0]
        how = CHOSEN if up or ran is None else f"{CHOSEN}; none ran, so {pick}, which did not run"
        return replace(self, reference=pick, chosen_by=how)

    def describe(self) -> str:
        same = ("token-identical to" if self.token_tolerance == 0
                else f"within {self.token_tolerance:.0%} of the output tokens of")
        return (f"a turn is compared only where every arm decoded the tokens it asked for (or stopped where "
                f"{self.reference} stopped) with output {same} {self.reference} (the reference arm: "
                f"{self.chosen_by}); an arm failing more than {self.max_failed_share:.0%} of its turns is disqualified")

    def as_dict(self) -> dict:
        return asdict(self)


def output_match(own: Sequence[int], ref: Sequence[int]) -> float:
    """Share of the longer output that the two share as a common prefix (1.0: identical)."""
    longest = max(len(own), len(ref))
    return common_prefix(own, ref) / longest if longest else 1.0


KINDS = {"no-reference": "no reference arm", "reference-incomplete": "the reference did not complete",
         "less-work": "less work than asked", "other-output": "other output than the reference"}


def _why(row: dict, ref: dict | None, rule: EqualWork) -> tuple[str, str] | None:
    """Why this row's turn cannot be compared (a kind of :data:`KINDS` and the particulars), or None."""
    if ref is None:
        return "no-reference", f"the reference arm {rule.reference} did not serve this turn to check the output against"
    if ref is not row and _why(ref, ref, rule):
        return "reference-incomplete", f"{rule.reference} itself did not complete this turn"
    asked, got = int(row["max_tokens"]), int(row["decode_tokens"])
    if got != asked:
        genuine = (row["finish"] == "stop"
                   and (ref is row or (ref["finish"] == "stop" and int(ref["decode_tokens"]) == got)))
        if not genuine:
            return "less-work", f"decoded {got} of the {asked} tokens asked (finish {row['finish']})"
    if ref is not row and 1 - row["output_match"] > rule.token_tolerance:
        return "other-output", (f"output differs from {rule.reference}'s ({row['output_match']:.0%} common "
                                f"prefix, tolerance {rule.token_tolerance:.0%})")
    return None


def mark(rows: pd.DataFrame, rule: EqualWork) -> pd.DataFrame:
    """Add ``comparable``, ``excluded`` (a kind) and ``excluded_why`` to every (turn, arm) row; needs
    ``output_match`` (see :mod:`.replay`)."""
    if rows.empty:
        return rows.assign(comparable=pd.Series(dtype=bool), excluded=pd.Series(dtype=object),
                           excluded_why=pd.Series(dtype=object))
    recs = rows.to_dict("records")
    refs = {r["step"]: r for r in recs if r["arm"] == rule.reference}
    why = [_why(r, refs.get(r["step"]), rule) for r in recs]
    return rows.assign(comparable=[w is None for w in why], excluded=[w and w[0] for w in why],
                       excluded_why=[w and w[1] for w in why])


def disqualified(rows: pd.DataFrame, arm: str, rule: EqualWork) -> str | None:
    """Why ``arm``'s turns cannot carry a comparison (too many excluded), or None."""
    mine = rows[rows.arm == arm]
    bad = mine[~mine["comparable"]]
    if not len(mine) or len(bad) / len(mine) <= rule.max_failed_share:
        return None
    causes = "; ".join(f"{len(g)}× {KINDS[kind]} (e.g. {g['excluded_why'].iloc[0]})"
                       for kind, g in bad.groupby("excluded", sort=False))
    return (f"{len(bad)} of its {len(mine)} turns could not be compared (more than "
            f"{rule.max_failed_share:.0%}): {causes}")


def common_turns(rows: pd.DataFrame, arms: Sequence[str]) -> list[int]:
    """Steps on which every one of ``arms`` is comparable."""
    ok = rows[rows.arm.isin(arms) & rows["comparable"]].groupby("step")["arm"].nunique()
    return sorted(int(s) for s in ok[ok == len(set(arms))].index)


__all__ = ["CHOSEN", "EqualWork", "KINDS", "common_turns", "disqualified", "mark", "output_match"]
