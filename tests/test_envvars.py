import os

import pytest

from workbench import envvars

A, B, C = "WORKBENCH_TEST_ENV_A", "WORKBENCH_TEST_ENV_B", "WORKBENCH_TEST_ENV_C"


@pytest.mark.parametrize("before, kwargs, inside", [
    # set: always wins, absent or present
    ({}, dict(set={A: "1"}), {A: "1"}),
    ({A: "user"}, dict(set={A: "1"}), {A: "1"}),
    # default: only where the user has not set it
    ({}, dict(default={A: "1"}), {A: "1"}),
    ({A: "user"}, dict(default={A: "1"}), {A: "user"}),
    # drop: gone for the span
    ({A: "user"}, dict(drop=(A,)), {A: None}),
    # dropped then set (the cell's own switch): the value set
    ({A: "user", B: "x"}, dict(set={A: "1"}, default={B: "2", C: "3"}, drop=(A,)), {A: "1", B: "x", C: "3"}),
])
def test_the_span_has_its_values_and_every_variable_is_as_before_after_it(monkeypatch, before, kwargs, inside):
    for k in (A, B, C):
        monkeypatch.delenv(k, raising=False)
    for k, v in before.items():
        monkeypatch.setenv(k, v)
    with envvars.scoped(kwargs.pop("set", None), **kwargs):
        assert {k: os.environ.get(k) for k in inside} == inside
    assert {k: os.environ.get(k) for k in (A, B, C)} == {k: before.get(k) for k in (A, B, C)}


def test_an_exception_in_the_span_still_restores(monkeypatch):
    monkeypatch.setenv(A, "user")
    monkeypatch.delenv(B, raising=False)
    with pytest.raises(RuntimeError), envvars.scoped({A: "1", B: "2"}):
        raise RuntimeError("engine failed to start")
    assert os.environ.get(A) == "user" and B not in os.environ
