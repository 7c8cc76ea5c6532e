"""A Python-backend stand-in for one of the TensorRT-LLM backend's Triton models, for the Triton client's tests
only (it never makes a finding). Triton loads this file as ``1/model.py`` of each model; the model's own
``config.pbtxt`` names its tensors, as the real model's does:

- ``ensemble`` (tensorrtllm_backend all_models/inflight_batcher_llm/ensemble/config.pbtxt at c2e65b8): inputs
  ``text_input`` and ``max_tokens``, ``return_perf_metrics`` switching on ``kv_cache_reused_blocks`` (INT32),
  which the tensorrt_llm model (…/tensorrt_llm/1/model.py:725) sends only when the request asked for its perf
  metrics;
- ``tensorrt_llm`` (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt and 1/model.py): inputs
  ``text_input`` and ``sampling_param_max_tokens``, ``sampling_param_return_perf_metrics`` switching on
  ``kv_cache_reused_block``, sent in ``text_output``'s dtype (a string: the backend's README shows
  ``"kv_cache_reused_block": "5"``).

Its "KV cache" is a chain of block hashes over the prompt's characters (``block_chars`` per block): a request
reuses the leading blocks an earlier request already stored.
"""

import json
import os
import sys

# numpy comes from the environment the test names (the stub's own Python may carry a numpy 2, which this
# python backend stub misreads BYTES tensors with)
sys.path[:0] = [p for p in os.environ.get("STANDIN_SITE_PACKAGES", "").split(os.pathsep) if p]

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.p = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.seen = set()

    def _scalar(self, request, name, default):
        t = pb_utils.get_input_tensor_by_name(request, name)
        return default if t is None else t.as_numpy().reshape(-1)[0]

    def _reused(self, text):
        size = int(self.p["block_chars"])
        chain, reused, leading = 0, 0, True
        for i in range(len(text) // size):
            chain = hash((chain, text[i * size:(i + 1) * size]))
            if leading and chain in self.seen:
                reused += 1
            else:
                leading = False
            self.seen.add(chain)
        return reused

    def execute(self, requests):
        responses = []
        for request in requests:
            text = self._scalar(request, "text_input", b"").decode()
            n = int(self._scalar(request, self.p["max_tokens_input"], 16))
            out = [pb_utils.Tensor("text_output", np.array([" ".join(["tok"] * n).encode()], dtype=np.object_))]
            if bool(self._scalar(request, self.p["perf_input"], False)):
                reused = self._reused(text)
                value = np.array([str(reused).encode()], dtype=np.object_) if self.p["reused_as"] == "string" \
                    else np.array([reused], dtype=np.int32)
                out.append(pb_utils.Tensor(self.p["reused_output"], value))
            responses.append(pb_utils.InferenceResponse(output_tensors=out))
        return responses
