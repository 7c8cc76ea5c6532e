"""Prompt-lookup speculation: drafting, and token identity with the plain arm on real llama.cpp."""

from __future__ import annotations

import pytest

from workbench import models
from workbench.loop import arms, spec


def test_ngram_index_drafts_what_followed_the_latest_match():
    idx = spec.NgramIndex(spec.Drafter(k=3, max_ngram=2))
    idx.extend([1, 2, 3, 4, 9, 1, 2, 7, 8, 5, 1, 2])
    assert idx.draft(10) == [7, 8, 5]  # the latest earlier "1 2" was followed by 7 8 5
    assert idx.draft(2) == [7, 8]
    idx.extend([6])
    assert idx.draft(10) == []  # "2 6" and "6" never occurred before
    with pytest.raises(ValueError):
        spec.Drafter(k=0)


COPY = ("Reservation ABC123 for user mia_li_3668: flight HAT001 JFK→SEA on 2024-05-20, economy, "
        "one passenger, paid by certificate_7504069 then credit_card_4421486. ")


def _pair(model: str, prompts: list[str], budget: int):
    opts = dict(threads=1, context_tokens=2048, drafter=spec.Drafter())
    plain, fast = arms.open_arm("llamacpp", model, **opts), arms.open_arm("llamacpp-spec", model, **opts)
    try:
        out = []
        for text in prompts:
            p = plain.cell.tokenize(text)
            a, b = plain.turn(p, budget), fast.turn(p, budget)
            out.append((a, b))
            assert plain.held() == fast.held()  # same KV afterwards (what the next turn reuses)
            assert a.engine_resident == b.engine_resident
        return out
    finally:
        plain.close()
        fast.close()


@pytest.mark.parametrize("model", ["synthetic:tiny", models.DEFAULT_MODEL])
def test_spec_arm_is_token_identical_to_plain(model):
    if model == models.DEFAULT_MODEL:
        try:
            models.resolve(model)
        except models.ModelSpecError as e:  # pragma: no cover - make setup installs it
            pytest.skip(str(e))
    prompts = [COPY * 3 + "Repeat the reservation: Reservation", COPY * 3 + "Summary:", "Hello"]
    results = _pair(model, prompts, 24)  # 48 before: at 24 the copies' drafts are accepted and "Hello"'s rejected
    drafted = sum(b.drafted for _, b in results)
    for a, b in results:
        assert a.tokens == b.tokens and a.finish == b.finish
    assert drafted > 0  # the comparison exercised verification, not only single steps
    if model == models.DEFAULT_MODEL:  # a real model copies: drafts are accepted and also rejected
        assert 0 < sum(b.accepted for _, b in results) < drafted


@pytest.mark.vllm
def test_vllm_speculation_reports_its_acceptance_from_the_engine(vllm_child):
    """vLLM's own n-gram speculation: drafted and accepted tokens are vLLM's counters, not ours. In a child
    process (tests/conftest.py: vllm_child): its n-gram proposer imports numba, whose objects break later in-process
    vLLM starts here."""
    import json

    done = vllm_child
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for source, drafted, accepted, steps in results:
        assert source == "engine"
        assert drafted >= accepted >= 0 and steps >= 0
    assert sum(r[1] for r in results) > 0  # the engine drafted: its speculation ran
