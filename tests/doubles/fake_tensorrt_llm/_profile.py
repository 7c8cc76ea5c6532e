"""Which ``tensorrt_llm`` release the double stands for: ``__version__`` in ``tensorrt_llm/version.py``.

The release is read once, at import, from ``FAKE_TENSORRT_LLM_RELEASE`` (default ``1.2.1``; the ``fake_trt14``
fixture and a run matrix's ``env_vars`` set ``1.4.0rc1``). Every module that differs between the 1.2 and the 1.4
line asks :data:`V14`; what differs, with the 1.4 source file each row mirrors, is the table in
``tests/cells/test_trtllm_double.py``.
"""

import os

ENV = "FAKE_TENSORRT_LLM_RELEASE"
RELEASE = os.environ.get(ENV, "1.2.1")
LINE = tuple(int(x) for x in RELEASE.split(".")[:2])
V14 = LINE >= (1, 4)
