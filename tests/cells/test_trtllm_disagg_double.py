"""TensorRT-LLM 1.2's disaggregated serving through the gateway's relay, on a double of two workers.

What the double models of 1.2, one row each, with the file it mirrors (tests/doubles/fake_trtllm_disagg.py):

| behaviour | 1.2-era source |
|---|---|
| ``disaggregated_params`` in the body, answered in ``choices[0].disaggregated_params`` with ``encoded_opaque_state`` (base64) | tensorrt_llm/serve/openai_protocol.py ``DisaggregatedParams`` |
| an unknown ``request_type`` is refused | tensorrt_llm/disaggregated_params.py ``get_request_type`` |
| the context request is the client's with ``context_only``, ``stream=False``, no ``stream_options`` | tensorrt_llm/serve/openai_disagg_service.py ``_get_ctx_request`` |
| a context finish reason other than ``length``/``not_finished`` skips generation | openai_disagg_service.py ``_need_gen`` |
| the generation request is the client's with the context answer's params and ``generation_only`` | openai_disagg_service.py ``_get_gen_request`` |
| the orchestrator's YAML: ``hostname``, ``port``, ``backend``, ``context_servers``/``generation_servers`` ``urls`` | tensorrt_llm/llmapi/disagg_utils.py ``parse_disagg_config_file`` |
| ``cache_transceiver_config: {backend, max_tokens_in_buffer}`` in a worker's extra options | tensorrt_llm/llmapi/llm_args.py ``CacheTransceiverConfig`` |
| a repeated ``--extra_llm_api_options``: the last one given is read (a click option) | tensorrt_llm/commands/serve.py |

No finding comes from the double.
"""

from __future__ import annotations

import base64

import httpx
import pytest
from doubles.fake_trtllm_disagg import Workers, next_token

from workbench.cells.trtllm import disagg
from workbench.gateway import pd

CTX, GEN = "http://ctx:8001", "http://gen:8002"


@pytest.fixture
def workers():
    w = Workers()
    with httpx.Client(transport=httpx.MockTransport(w.handler)) as client:
        yield w, client


def _relay(client, **kw):
    wire = disagg.TrtllmWire()
    body = wire.request("m", [300, 301, 302, 303], 4, "salt", **kw.pop("more", {}))
    return pd.relay(client, wire, body, context_url=CTX, generation_url=GEN, **kw)


def test_the_legs_carry_the_request_types_and_the_opaque_state_untouched(workers):
    w, client = workers
    ex = _relay(client)
    (h1, ctx), (h2, gen) = w.seen
    assert (h1, h2) == ("ctx", "gen")
    assert ctx["disaggregated_params"] == {"request_type": "context_only"} and ctx["stream"] is False
    assert "stream_options" not in ctx
    assert gen["disaggregated_params"]["request_type"] == "generation_only"
    assert gen["disaggregated_params"]["encoded_opaque_state"] == ex.state["encoded_opaque_state"]
    assert base64.b64decode(gen["disaggregated_params"]["encoded_opaque_state"]) == b"state-1"
    assert gen["prompt"] == [300, 301, 302, 303] and gen["max_tokens"] == 4 and gen["cache_salt"] == "salt"
    assert ex.token_ids == [next_token([300, 301, 302, 303], i) for i in range(4)] and ex.ttft_s is not None


def test_a_finished_context_result_skips_generation_and_is_counted(workers):
    w, client = workers
    counters = pd.Counters()
    first = next_token([300, 301, 302, 303], 0)
    ex = _relay(client, counters=counters, more={"stop_token_ids": [first]})
    assert ex.early_exit and ex.finish_reason == "stop" and ex.token_ids == [first]
    assert [h for h, _ in w.seen] == ["ctx"] and (counters.early_exits, counters.generation_legs) == (1, 0)


def test_an_altered_state_fails_on_the_generation_worker(workers):
    w, client = workers

    def alter(body):
        body["disaggregated_params"]["encoded_opaque_state"] = base64.b64encode(b"other").decode()
        return body

    with pytest.raises(Exception, match="500"):
        _relay(client, tamper=alter)


def test_a_context_answer_without_params_is_refused():
    with pytest.raises(ValueError, match="no disaggregated_params"):
        disagg.TrtllmWire().generation_body({"prompt": [1]}, None)


def test_the_worker_and_orchestrator_configs(tmp_path):
    wire = disagg.TrtllmWire()
    ctx = wire.cell_options("context", str(tmp_path))
    assert ctx == {"server_args": ("--extra_llm_api_options", str(tmp_path / "context.yml"))}
    text = (tmp_path / "context.yml").read_text()
    assert 'cache_transceiver_config: {"backend": "DEFAULT"}' in text and "disable_overlap_scheduler: true" in text
    wire.cell_options("generation", str(tmp_path))
    assert "disable_overlap_scheduler" not in (tmp_path / "generation.yml").read_text()
    assert wire.store("/unused") is None and wire.transferable(200, 32) == 200
    assert disagg.transceiver("UCX", 4096) == {"backend": "UCX", "max_tokens_in_buffer": 4096}
    with pytest.raises(ValueError, match="backend must be"):
        disagg.transceiver("TCP")
    with pytest.raises(ValueError, match="role must be"):
        disagg.worker_options("prefill")
    text = disagg.orchestrator_config(["http://10.0.0.1:8001/"], ["http://10.0.0.2:8002"], port=8000)
    assert 'context_servers: {"num_instances": 1, "urls": ["10.0.0.1:8001"]}' in text
    assert 'generation_servers: {"num_instances": 1, "urls": ["10.0.0.2:8002"]}' in text and "port: 8000" in text


def test_a_worker_is_started_with_its_options_last(tmp_path):
    from workbench.cells.trtllm.served import launch
    from workbench.serve import ServerRequest

    extra = disagg.TrtllmWire().cell_options("generation", str(tmp_path))["server_args"]
    argv = launch(ServerRequest("trtllm-serve", "/m", extra_args=extra), 8002, tmp_path).argv
    flags = [i for i, a in enumerate(argv) if a == "--extra_llm_api_options"]
    assert len(flags) == 2 and argv[flags[-1] + 1] == str(tmp_path / "generation.yml")  # click keeps the last
