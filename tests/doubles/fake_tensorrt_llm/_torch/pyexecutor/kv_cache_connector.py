"""``tensorrt_llm._torch.pyexecutor.kv_cache_connector``: where the 1.2 line keeps the connector interface; gone in
1.4, which moved it to ``_torch/pyexecutor/connectors/kv_cache_connector.py``."""

from ... import _profile

if _profile.V14:
    raise ModuleNotFoundError("No module named 'tensorrt_llm._torch.pyexecutor.kv_cache_connector'",
                              name="tensorrt_llm._torch.pyexecutor.kv_cache_connector")

from ._connector_api import KvCacheConnectorScheduler, KvCacheConnectorWorker, RequestData, SchedulerOutput  # noqa: E402,F401
