"""``tensorrt_llm._torch.pyexecutor.connectors.kv_cache_connector`` (1.4 line): the connector interface, moved here
from ``_torch/pyexecutor/kv_cache_connector.py``; absent in 1.2."""

from .... import _profile

if not _profile.V14:
    raise ModuleNotFoundError("No module named 'tensorrt_llm._torch.pyexecutor.connectors.kv_cache_connector'",
                              name="tensorrt_llm._torch.pyexecutor.connectors.kv_cache_connector")

from .._connector_api import KvCacheConnectorScheduler, KvCacheConnectorWorker, RequestData, SchedulerOutput  # noqa: E402,F401
