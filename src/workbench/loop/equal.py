"""Equal work before equal time: which turns two arms may be timed against each other on.

A turn compares arms only when each of them decoded what the turn asked for (the recorded reply's length,
or the end of generation greedy decoding chooses there: the scorer's top token) and its output is a greedy
decode of the model: every token within a near-tie margin of the top logit of a llama.cpp scorer of the
same model, teacher-forced on the arm's own output (:mod:`.verify`). Two fair engines may break a near-tie
differently and part ways from there; both are still doing the same work. A stop is the exception: an end of
generation that only nearly ties ends the work, and a turn cut short cannot be timed against a full one (the rows
keep no per-token times to cut the other arm to the same length), so a stop must be the greedy stop. Where two arms
both did the work but decoded different lengths (a near-tie broken towards a greedy stop on one of them), the
difference is reported beside the speed-up (``decode_tokens_vs_best_llamacpp``). An arm that fails more than a
stated share of its turns is disqualified: it cannot enter the gate or be the best llama.cpp arm, and its
finding says why. Each output is also shown against a reference arm's (declared, or chosen by
:data:`CHOSEN`), which describes but no longer decides.

An arm whose tokens the workbench verified in batches (prompt lookup) chose them under batch numerics, which part
from the sequential decode the scorer reads by more than a near-tie. Its margin is calibrated, never set: the rule's
margin plus the largest gap the scorer measured, on the same model and engine, between the arm's own verification
batches and sequential decode for its own tokens (:meth:`.verify.Scorer.numeric_gap`, the row's ``numeric_gap_sd``).
Measured, it is the claim's rule still; bounded, it cannot grow to admit another computation: an arm whose gap passes
:data:`NUMERIC_GAP_CAP_SD` is disqualified, not admitted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Collection, Sequence

import pandas as pd

from ..engine import common_prefix
from . import arms as _arms
from . import gate as _gate

CHOSEN = ("the run's first plain arm (reuse on, no speculation) that ran, llama.cpp arms first, never the gate's "
          "subject")  # how the reference is chosen when none is declared
MAX_MARGIN_SD = 2.0  # a margin this wide would admit tokens greedy decoding clearly would not pick
CLAIM_MARGIN_SD = 0.25  # the claim's near-tie margin: a wider one admits more, so it is exploratory
CLAIM_MAX_FAILED_SHARE = 0.1  # the claim's share of failed turns an arm may have before it is disqualified
#: The most a measured batched-vs-sequential gap may widen an arm's margin: twice the claim's margin, above the gap
#: measured on taubench with synthetic:tiny (0.28 σ); wider is no kernel's rounding but another computation.
NUMERIC_GAP_CAP_SD = 2 * CLAIM_MARGIN_SD
CALIBRATION = ("the largest difference, over the arm's turns and tokens, between each token's gap read in the "
               "verification batches the arm fed (the same drafts replayed on the scorer) and read by sequential "
               "decode, both from the scorer's llama.cpp logits")
#: Two arms' decoded lengths on one turn agree, so their times compare as equal work, when they differ by at most this
#: share of the longer (a near-tie broken towards an earlier greedy stop is still each arm's own greedy work, but
#: 5 tokens timed against 200 are not the same work: that turn is left out of the pair's speed-up and counted at its
#: worst, :func:`.results._excluded_at_worst`).
CLAIM_LENGTH_TOLERANCE = 0.1
#: The claim's equal-work rule, field by field: a rule that moves any of them, either way, is exploratory.
CLAIM_WORK = {"margin_sd": CLAIM_MARGIN_SD, "max_failed_share": CLAIM_MAX_FAILED_SHARE,
              "length_tolerance": CLAIM_LENGTH_TOLERANCE}


@dataclass(frozen=True)
class EqualWork:
    margin_sd: float = CLAIM_MARGIN_SD  # a token this close to its position's top logit (σ of the logits) is a near-tie
    max_failed_share: float = CLAIM_MAX_FAILED_SHARE  # an arm that fails more of its turns than this is disqualified
    reference: str | None = None  # the arm every output is shown against; None: chosen (CHOSEN), or none
    chosen_by: str = "declared"  # how the reference was chosen, stated in every finding
    length_tolerance: float = CLAIM_LENGTH_TOLERANCE  # two arms' lengths on a turn agree within this share

    def __post_init__(self) -> None:
        bounds = {"margin_sd": (0, MAX_MARGIN_SD), "max_failed_share": (0, 1), "length_tolerance": (0, 1)}
        for name, (low, high) in bounds.items():
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and low <= v < high):
                raise ValueError(f"{name} must be a finite number in [{low:g}, {high:g}), got {v!r}")

    def for_arms(self, names: Sequence[str], subject: str, ran: Collection[str] | None = None) -> "EqualWork":
        """This rule with its reference fixed for a run of ``names`` (those of them that opened: ``ran``).

        A declared reference must be one of ``names``. Otherwise it is chosen by :data:`CHOSEN` (the subject
        never); a run without a plain arm shows its outputs against none."""
        if self.reference is not None:
            if self.reference not in names:
                raise ValueError(f"--reference {self.reference} is not one of the run's arms ({', '.join(names)}); "
                                 "add it to --arms or name one of them")
            return self
        plain = sorted((n for n in names if n != subject and _arms.plain(n) == n),
                       key=lambda n: not _arms.is_llamacpp(n))  # stable: the run's order within each group
        if not plain:
            return replace(self, chosen_by="no plain arm in the run")
        up = [n for n in plain if ran is None or n in ran]
        pick = (up or plain)[0]
        how = CHOSEN if up or ran is None else f"{CHOSEN}; none ran, so {pick}, which did not run"
        return replace(self, reference=pick, chosen_by=how)

    def describe(self) -> str:
        shown = f"; outputs are shown against {self.reference}'s ({self.chosen_by})" if self.reference else ""
        return (f"a turn is compared only where every arm decoded the tokens it asked for (or stopped where greedy "
                f"decoding does: its end of generation the scorer's top token) and every token it emitted is within "
                f"{self.margin_sd:g} σ of the top logit of a llama.cpp scorer of the same model, teacher-forced on that "
                f"output (a near-tie broken either way is equal work); an arm whose tokens were verified in batches "
                f"(prompt lookup) has that margin widened by its measured batched-vs-sequential gap ({CALIBRATION}; "
                f"at most {NUMERIC_GAP_CAP_SD:g} σ, else it is disqualified); an arm failing more than "
                f"{self.max_failed_share:.0%} of its turns is disqualified; two arms are timed against each other "
                f"only on turns whose decoded lengths agree within {self.length_tolerance:.0%} of the longer (equal "
                "tokens), the others counted at their worst" + shown)

    @property
    def exploratory(self) -> str | None:
        """Why this rule is not the claim's (so no comparison under it is the claim's verdict), or None. Moved
        either way: a laxer one admits more turns and arms, a stricter one can disqualify the fastest llama.cpp arm
        and lower the bar the subject must clear."""
        return _gate.departures(self, CLAIM_WORK)

    def as_dict(self) -> dict:
        return asdict(self) | {"exploratory": self.exploratory}


def output_match(own: Sequence[int], ref: Sequence[int]) -> float:
    """Share of the longer output that the two share as a common prefix (1.0: identical)."""
    longest = max(len(own), len(ref))
    return common_prefix(own, ref) / longest if longest else 1.0


KINDS = {"unscored": "no greedy score", "less-work": "less work than asked",
         "not-greedy": "other output than greedy decoding of the model"}


def numeric_gaps(rows: pd.DataFrame) -> dict[str, float]:
    """Per arm verified in batches, the largest batched-vs-sequential gap the scorer measured over its turns."""
    if "numeric_gap_sd" not in rows:
        return {}
    return {str(a): float(g) for a, g in rows.groupby("arm", sort=False)["numeric_gap_sd"].max().dropna().items()}


def margin(rule: EqualWork, gap: float | None) -> float:
    """The near-tie margin an arm's tokens are held to: the rule's, plus its measured numeric gap where it has one
    within :data:`NUMERIC_GAP_CAP_SD` (past it the arm is disqualified, :func:`disqualified`)."""
    return rule.margin_sd + gap if gap is not None and gap <= NUMERIC_GAP_CAP_SD else rule.margin_sd


def _why(row: dict, rule: EqualWork, near_tie: float) -> tuple[str, str] | None:
    """Why this row's turn cannot be compared (a kind of :data:`KINDS` and the particulars), or None."""
    gap = row.get("greedy_gap_sd")
    if gap is None or pd.isna(gap):
        return "unscored", "the scorer read no greedy gaps for this output"
    asked, got, finish = int(row["max_tokens"]), int(row["decode_tokens"]), row["finish"]
    if got != asked and not (finish == "stop" and row["stop_gap_sd"] == 0):  # only the greedy stop is equal work
        why = (f"; greedy decoding would not stop there (end of generation {row['stop_gap_sd']:.2f} σ below the "
               "scorer's top token; a stop must be the greedy stop)" if finish == "stop" else "")
        return "less-work", f"decoded {got} of the {asked} tokens asked (finish {finish}{why})"
    if not math.isfinite(gap):
        return "not-greedy", f"output token {int(row['greedy_gap_at'])} is not in the model's vocabulary"
    if gap > near_tie:
        return "not-greedy", (f"output token {int(row['greedy_gap_at'])} is {gap:.2f} σ below the scorer's top token "
                              f"(near-tie margin {near_tie:g} σ)")
    return None


def mark(rows: pd.DataFrame, rule: EqualWork) -> pd.DataFrame:
    """Add ``near_tie_margin_sd`` (the arm's :func:`margin`), ``comparable``, ``excluded`` (a kind) and
    ``excluded_why`` to every (turn, arm) row; needs the scorer's columns (:meth:`.verify.Greedy.as_row`, and
    ``numeric_gap_sd`` where an arm was verified in batches)."""
    if rows.empty:
        return rows.assign(near_tie_margin_sd=pd.Series(dtype=float), comparable=pd.Series(dtype=bool),
                           excluded=pd.Series(dtype=object), excluded_why=pd.Series(dtype=object))
    gaps = numeric_gaps(rows)
    near = [margin(rule, gaps.get(a)) for a in rows["arm"]]
    why = [_why(r, rule, m) for r, m in zip(rows.to_dict("records"), near)]
    return rows.assign(near_tie_margin_sd=near, comparable=[w is None for w in why], excluded=[w and w[0] for w in why],
                       excluded_why=[w and w[1] for w in why])


def disqualified(rows: pd.DataFrame, arm: str, rule: EqualWork) -> str | None:
    """Why ``arm``'s turns cannot carry a comparison (a numeric gap past the cap, too many excluded), or None."""
    gap = numeric_gaps(rows).get(arm)
    if gap is not None and gap > NUMERIC_GAP_CAP_SD:
        return (f"its verification batches part from sequential decode by {gap:.2f} σ on its own tokens (the scorer's "
                f"llama.cpp logits), more than the {NUMERIC_GAP_CAP_SD:g} σ a calibrated margin may add")
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


def lengths_agree(a: int, b: int, tolerance: float) -> bool:
    """Two decoded lengths are equal work: they differ by at most ``tolerance`` of the longer."""
    return abs(a - b) <= tolerance * max(a, b)


def equal_tokens(rows: pd.DataFrame, a: str, b: str, rule: EqualWork) -> list[int]:
    """Steps on which ``a`` and ``b`` are both comparable and decoded lengths that agree (:func:`lengths_agree`):
    the turns their times may be compared on as equal work."""
    wide = rows.pivot(index="step", columns="arm", values="decode_tokens")
    return [s for s in common_turns(rows, [a, b])
            if lengths_agree(int(wide.at[s, a]), int(wide.at[s, b]), rule.length_tolerance)]


__all__ = ["CALIBRATION", "CHOSEN", "CLAIM_LENGTH_TOLERANCE", "EqualWork", "KINDS", "NUMERIC_GAP_CAP_SD",
           "common_turns", "disqualified", "equal_tokens", "lengths_agree", "margin", "mark", "numeric_gaps",
           "output_match"]
