"""``tensorrt_llm._torch.pyexecutor.connectors`` (1.4 line): the connector package (a registry and presets beside)."""
