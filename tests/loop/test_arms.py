"""On target every llama.cpp arm, in-process and served, asks for all its layers on the GPU; off target none does."""

from __future__ import annotations

import pytest

from workbench import cells, serve
from workbench.cells.llamacpp import served as llama_served
from workbench.loop import arms


@pytest.mark.parametrize("name, on_target", [
    ("llamacpp-cold", {"gpu_layers": -1}),
    ("llamacpp", {"gpu_layers": -1}),
    ("llamacpp-spec", {"gpu_layers": -1}),
    ("llamacpp-server", {"gpu_layers": -1}),
    ("llamacpp-server-spec", {"gpu_layers": -1}),
    ("vllm", {}), ("vllm-spec", {}), ("vllm-server", {}), ("trtllm", {}),
])
def test_on_target_the_llamacpp_arms_hold_every_layer_on_the_gpu(name, on_target):
    assert arms.target_options(name) == on_target
    assert set(arms.names()) == {"llamacpp-cold", "llamacpp", "llamacpp-spec", "llamacpp-server", "llamacpp-server-spec",
                                 "vllm", "vllm-spec", "vllm-server", "trtllm"}  # a new arm gets a row here


@pytest.mark.parametrize("gpu_layers, argv", [
    (None, None),  # off target: llama-server's own default, its command line as before
    (-1, ["-ngl", "all"]),  # every layer: llama-server's "all" (its -ngl -1 would be "auto")
    (0, ["-ngl", "0"]),
    (12, ["-ngl", "12"]),
])
def test_llama_server_is_started_with_the_layers_asked_for(monkeypatch, tmp_path, gpu_layers, argv):
    monkeypatch.setenv(llama_served.LLAMA_SERVER_ENV, "/bin/true")  # any executable: only the command line is built
    req = serve.ServerRequest("llamacpp-server", "m.gguf", options={"gpu_layers": gpu_layers})
    got = list(llama_served.launch(req, 8080, tmp_path).argv)
    if argv is None:
        assert "-ngl" not in got
    else:
        i = got.index("-ngl")
        assert got[i:i + 2] == argv


def test_gpu_layers_is_llamas_and_refused_on_other_served_engines():
    """Options are typed per server: llama-server's class has gpu_layers, the others refuse it by name."""
    assert cells.options_class("llamacpp-server").from_options("llamacpp-server", {"gpu_layers": -1}).gpu_layers == -1
    for engine in ("vllm-server", "trtllm-serve"):
        with pytest.raises(TypeError, match="unknown .* option.*gpu_layers"):
            cells.options_class(engine).from_options(engine, {"gpu_layers": -1})
