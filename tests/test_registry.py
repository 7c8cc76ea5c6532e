"""The one registry: lazy entries, type checks on load, collisions refused, "did you mean" on typos."""

from __future__ import annotations

import sys

import pytest

from workbench import cells, probes
from workbench.registry import Registry, UnknownName


class Base:
    pass


class Good(Base):
    pass


class Stranger:
    pass


def test_entries_load_lazily_and_are_type_checked():
    r: Registry = Registry("widget", base=Base)
    r.register("good", f"{__name__}:Good")
    r.register("bad", f"{__name__}:Stranger")
    assert r.names() == ["bad", "good"] and r.get("good") is Good
    with pytest.raises(TypeError, match="widget 'bad' .* is not a Base"):
        r.get("bad")


def test_a_name_cannot_be_registered_twice_with_another_target():
    r: Registry = Registry("widget")
    r.register("good", f"{__name__}:Good")
    r.register("good", f"{__name__}:Good")  # the same target again is harmless
    with pytest.raises(ValueError, match="already registered"):
        r.register("good", f"{__name__}:Stranger")


def test_required_callables_are_checked():
    r: Registry = Registry("engine", requires=("open",))
    r.register("x", f"{__name__}:Good")
    with pytest.raises(TypeError, match="lacks open"):
        r.get("x")


def test_unknown_names_get_did_you_mean_and_the_valid_ones():
    with pytest.raises(UnknownName, match=r"unknown engine 'llamacp' \(did you mean 'llamacpp' or 'llamacpp-server'\?\); valid engines"):
        cells.cell_class("llamacp")
    with pytest.raises(probes.ParamError, match="did you mean 'isolation.cache_salt'"):
        probes.get("isolation.cache_slat")


def test_listing_engines_imports_no_engine():
    assert "llamacpp" in cells.engines()
    assert "tensorrt_llm" not in sys.modules


def test_every_registered_probe_loads_as_a_probe():
    for name in probes.names():
        assert isinstance(probes.get(name), probes.Probe)


def test_loop_arms_live_in_the_registry_with_did_you_mean_and_keep_their_declared_order():
    from workbench.loop import arms

    assert isinstance(arms.ARMS, Registry) and arms.names()[:3] == ["llamacpp-cold", "llamacpp", "llamacpp-spec"]
    assert arms.get("vllm-spec").engine == "vllm"
    with pytest.raises(UnknownName, match="did you mean 'llamacpp-spec'"):
        arms.get("llamacpp-spek")


def test_an_added_entry_must_be_of_the_base_and_cannot_be_replaced():
    from workbench.loop.arms import ArmSpec

    r = Registry("arm", base=ArmSpec)
    a = ArmSpec("x", "llamacpp", True, "none", "an arm")
    r.add("x", a)
    r.add("x", a)  # the same entry again is harmless
    assert r.get("x") is a and r.declared() == ["x"]
    with pytest.raises(ValueError, match="already registered"):
        r.add("x", ArmSpec("x", "vllm", True, "none", "another"))
    with pytest.raises(TypeError, match="not a ArmSpec"):
        r.add("y", object())


@pytest.mark.parametrize("facts, refusal", [
    (None, "declare its facts as a EngineFacts"),
    (cells.EngineFacts("workbench.cells.served.ServedOptions"), "options must be 'module:Class'"),
    (cells.EngineFacts("m:Options", events="m:plane"), "events must name a module"),
    (cells.EngineFacts("m:Options", runs="vllm-server"), "runs must name an in-process engine"),
    (cells.EngineFacts("m:Options", runs="sglang"), "runs must name an in-process engine"),
    (cells.EngineFacts("m:Options", runs="sglang-server"), "runs must name an in-process engine"),
    (cells.EngineFacts("m:Options", watched_at=("grpc://HOST:PORT",)), "watched_at needs an event plane"),
    (cells.EngineFacts("m:Options", events="m", watched_at=("HOST:PORT",)), "must be 'scheme://…' forms"),
    (cells.EngineFacts("m:Options", events="m", watched_at=("tcp://HOST:PORT",)), "another engine declares"),
])
def test_an_engines_facts_are_checked_as_it_registers(facts, refusal):
    """As pluggy checks a hook implementation at register(): a wrong fact is refused before anything asks it."""
    r: Registry = Registry("engine", facts=cells.EngineFacts)
    r.register("vllm", "m:Cell", cells.EngineFacts("m:Options"))
    r.register("vllm-server", "m:Served", cells.EngineFacts("m:Options", runs="vllm", events="m",
                                                            watched_at=("ipc://PATH", "tcp://HOST:PORT")))
    with pytest.raises((TypeError, ValueError), match=refusal):
        r.register("sglang-server", "m:Cell", facts)


def test_events_watch_finds_the_engine_by_the_endpoint_form_its_wing_declared():
    assert cells.watched_at("http://127.0.0.1:8000") == cells.watched_at("https://h:1") == "trtllm-serve"
    assert cells.watched_at("ipc:///tmp/kv") == cells.watched_at("tcp://127.0.0.1:5557") == "vllm-server"
    assert cells.watched_at("ftp://x") is None and cells.watched_at("127.0.0.1:8000") is None
    assert "trtllm-serve's (http://HOST:PORT or https://HOST:PORT)" in cells.watch_forms()


def test_an_event_plane_that_drifts_from_its_spec_is_refused_when_first_asked(monkeypatch):
    import types

    plane = types.ModuleType("drifted_plane")
    plane.hasher = lambda d, seed: None  # the spec asks hasher(d, seed, block_size)
    monkeypatch.setitem(sys.modules, "drifted_plane", plane)
    monkeypatch.setattr(cells, "ENGINES", Registry("engine", facts=cells.EngineFacts))
    cells.ENGINES.register("drifted", f"{__name__}:Good", cells.EngineFacts("m:Options", events="drifted_plane"))
    cells.event_plane.cache_clear()
    try:
        with pytest.raises(TypeError, match=r"answers hasher\(d, seed\), the spec asks hasher\(d, seed, block_size\)"):
            cells.event_plane("drifted")
    finally:
        cells.event_plane.cache_clear()
