"""Attribution adds up, and the theoretical reuse of a hand-built trace is what it should be."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import loop
from workbench.loop import attribution as attr
from workbench.loop import render, traces

TPB = 4  # tokens per block in the hand-built trace's rendering


def test_theoretical_reuse_of_a_hand_built_trace(hand_trace):
    """Blocks [0,1,2] → [0,1,2,3] → [0,1,5] → [0,1,2,3,4]: the LCP with everything seen is 0, 3, 2, 4 blocks."""
    t = traces.load(str(hand_trace))
    r = render.BlockRenderer(t, render.BlockScale(512, TPB, 8192), 49152)
    seen = attr.Seen()
    got = []
    for i, turn in enumerate(t.sessions[0].turns):
        prompt = r.render(turn, (0, i)).prompt
        got.append(seen.lcp(prompt))
        seen.add("k", prompt)
    assert got == [0, 3 * TPB, 2 * TPB, 4 * TPB]


def test_causes_are_charged_in_order():
    p = list(range(100, 120))  # 20 tokens
    seen = attr.Seen()
    seen.add("a", p[:12])
    seen.add("b", p[:16])
    # seen up to 16 only under key b; the engine holds 12 under key a → 4 salt, 4 eviction … under a
    led = attr.attribute(p, seen, "a", attr.Held("a", p[:12]), reused=8, block_tokens=8)
    assert (led.theoretical, led.salt_or_manifest, led.eviction, led.block_rounding, led.reused) == (16, 4, 0, 4, 8)
    assert led.new_content == 4 and led.unexplained == 0
    attr.check(led)
    # the whole prompt held: the last token is recomputed for its logits
    seen.add("a", p)
    led = attr.attribute(p, seen, "a", attr.Held("a", p), reused=19)
    assert (led.theoretical, led.last_token, led.unexplained) == (20, 1, 0)
    # the engine held another sequence: eviction; a sampled token never fed back: last-token rule
    led = attr.attribute(p, seen, "a", attr.Held("a", p[:5] + [1, 2]), reused=5)
    assert led.eviction == 15 and led.unexplained == 0
    led = attr.attribute(p, seen, "a", attr.Held("a", p[:10], unfed=p[10]), reused=10)
    assert (led.eviction, led.last_token, led.unexplained) == (9, 1, 0)
    # the engine reports less than it could have: unexplained, never hidden
    led = attr.attribute(p, seen, "a", attr.Held("a", p), reused=15)
    assert led.unexplained == 4


def test_rerender_divergence_is_told_from_new_content():
    prev = [1, 2, 3, 4, 5, 6]
    seen = attr.Seen()
    seen.add("k", prev)
    now = [1, 2, 3, 9, 5, 6, 7, 8]  # token 3 changed on re-render, 7 and 8 are new
    led = attr.attribute(now, seen, "k", attr.Held("k", prev), reused=3, previous=prev)
    assert (led.theoretical, led.template_rerender, led.new_content) == (3, 3, 2)


tokens = st.lists(st.integers(0, 3), max_size=24)


@settings(max_examples=300, deadline=None)
@given(prompt=st.lists(st.integers(0, 3), min_size=1, max_size=24), history=st.lists(
    st.tuples(st.sampled_from("ab"), tokens), max_size=4), held=tokens, held_key=st.sampled_from("ab"),
    unfed=st.none() | st.integers(0, 3), key=st.sampled_from("ab"), block=st.sampled_from([1, 2, 4, 16]),
    reused=st.integers(0, 24), previous=st.none() | tokens)
def test_attribution_adds_up(prompt, history, held, held_key, unfed, key, block, reused, previous):
    """reused + every miss category = theoretical; theoretical + re-render + new content = prompt."""
    seen = attr.Seen()
    for k, t in history + [(held_key, held + ([unfed] if unfed is not None else []))]:
        seen.add(k, t)
    reused = min(reused, len(prompt))
    led = attr.attribute(prompt, seen, key, attr.Held(held_key, held, unfed), reused, block_tokens=block,
                         previous=previous)
    attr.check(led)
    assert all(getattr(led, c) >= 0 for c in attr.CATEGORIES if c != "unexplained")


def test_real_loop_attributes_every_miss(hand_trace, tmp_path):
    """On real llama.cpp: reuse comes from the engine's counters, and nothing is left unexplained."""
    res = loop.run(str(hand_trace), arms="llamacpp-cold,llamacpp", model="synthetic:tiny", threads=1,
                   context_tokens=1024, tokens_per_block=TPB)
    rows = res.rows
    assert set(rows.reuse_source) == {"engine"}
    assert (rows.unexplained == 0).all()
    for _, r in rows.iterrows():
        attr.check(attr.Ledger(**{k: r[k] for k in attr.Ledger.__dataclass_fields__}))
    warm, cold = rows[rows.arm == "llamacpp"], rows[rows.arm == "llamacpp-cold"]
    assert list(warm.theoretical[:2]) == [0, 3 * TPB]
    assert (cold.reused == 0).all() and (cold.salt_or_manifest == cold.theoretical).all()
    assert warm.reused.sum() > 0 and (warm.engine_resident == warm.held_after).all()
