"""AIPerf's tokenizer folder for a GGUF the workbench accepts (issue 52): ``notebooks/80_evaltable`` on
``synthetic:tiny`` with llama.cpp failed, the folder written by ``transformers``' conversion splitting
``'  two  spaces\\tand a tab\\nnew line'`` into 22 tokens where llama-server makes 23. A SentencePiece GGUF's folder is
now written as llama.cpp merges it and checked against llama.cpp's own tokenizer (the library the server runs);
where a folder still disagrees with the server, that backend's rows are not-run with the reason, never a failure."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import TINY, require_engine
from workbench import models
from workbench.evaltable import aiperf, run as evaltable, tokenizer

#: Beyond the check texts: runs of spaces, a leading one, byte fallbacks, a word no piece covers, the empty string.
MORE = ("   ", " leading", "trailing ", "\t\t\n\n", "zzqx", "€ ∑ 🙂", "aaaaaaaaaaaaaaaa", "")


def _llama_ids(path, texts):
    """llama.cpp's own ids for ``texts`` (no BOS, special tokens parsed: as the check asks /tokenize)."""
    from llama_cpp import Llama

    llm = Llama(str(path), vocab_only=True, verbose=False)
    try:
        return [llm.tokenize(t.encode(), add_bos=False, special=True) for t in texts]
    finally:
        llm.close()


@pytest.mark.parametrize("spec", [TINY, "synthetic:vocab=2048"])
def test_a_synthetic_ggufs_folder_splits_every_text_as_llama_cpp_does(spec):
    require_engine("llamacpp")
    model = models.resolve(spec)
    folder = tokenizer.folder_for(model, model.path)
    texts = tokenizer.CHECK_TEXTS + MORE
    assert tokenizer.encode(folder, texts) == _llama_ids(model.path, texts)
    assert folder.name.endswith("-spm")
    tokenizer.check(folder, _llama_ids(model.path, tokenizer.CHECK_TEXTS), "llama.cpp")  # what a table run asks
    assert json.loads((folder / "tokenizer_config.json").read_text())["bos_token"] == "<s>"


@pytest.mark.slow
def test_a_folder_that_disagrees_with_the_server_makes_its_rows_not_run_with_the_reason(tmp_path, monkeypatch):
    """A tokenizer that sizes prompts otherwise than the server (here the synthetic model's Hugging Face twin's,
    which segments by its own rule) is no reason to fail the table: the backend is not measured, and says why."""
    require_engine("llamacpp-server")
    if aiperf.binary() is None:
        pytest.skip(f"no aiperf command: `make setup` installs it (or set {aiperf.AIPERF_ENV})")
    twin = models.hf_directory(models.resolve(TINY))
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    shutil.copy(twin / "tokenizer.json", wrong)
    monkeypatch.setattr(tokenizer, "folder_for", lambda model, served: wrong)
    req = evaltable.TableRequest(("llamacpp-server",), TINY, (1,), ("no-prefix", "prefix-1k"), 1, tmp_path / "t",
                                 requests=4, prompt_tokens=16, output_tokens=4, prefix_tokens=64)
    rows, as_json, _ = evaltable.run(req)
    assert [(r.workload, r.status) for r in rows] == [("no-prefix", "not-run"), ("prefix-1k", "not-run")]
    assert all(r.reason.startswith(f"not measured: the tokenizer in {wrong} splits ") for r in rows)
    assert [r["status"] for r in json.loads(as_json.read_text())["rows"]] == ["not-run", "not-run"]
