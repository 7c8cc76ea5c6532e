"""vLLM's wing: everything the workbench knows about vLLM.

* :mod:`.cell` — :class:`VllmCell`, the contract on an in-process ``vllm.LLM`` (the one ``import vllm``);
* :mod:`.events` — its KV events (ZMQ publisher) as :class:`~workbench.engine.KvEvent`;
* :mod:`.connector` — a recording v1 KV connector;
* :mod:`.served` — ``vllm serve``: its launch line, its identity and :class:`VllmServerCell`.

Importing this package never imports vllm.
"""
