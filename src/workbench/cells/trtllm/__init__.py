"""TensorRT-LLM's wing: everything the workbench knows about TensorRT-LLM (written against 1.2; not run here).

* :mod:`.guard` — the version guard and the one ``import tensorrt_llm``;
* :mod:`.cell` — :class:`TrtLlmCell`, the contract on an in-process ``tensorrt_llm.LLM``;
* :mod:`.events`, :mod:`.sources` — its KV events, parsed and drained (in-process or ``POST /kv_cache_events``);
* :mod:`.connector`, :mod:`.metrics` — a recording KV connector and the per-request perf metrics;
* :mod:`.served` — ``trtllm-serve``: its launch line, its identity and :class:`TrtllmServeCell`.

Importing this package never imports tensorrt_llm.
"""
