"""risk.version_churn: the signature tables of two or more surveys compared in release order."""

from __future__ import annotations

from workbench import claims
from workbench.probes.churn import CLAIM, churn_verdict, signature_changes

CHURN_COMMAND = claims.get(CLAIM).resolve

SIG = {"LLM.generate_async [core]": {"at": "LLM.generate_async", "names": {"inputs": True, "cache_salt": True},
                                     "defaults": {}},
       "llmapi.KvCacheConfig [core]": {"at": "llmapi.KvCacheConfig", "names": {"max_tokens": True},
                                       "defaults": {"use_kv_cache_manager_v2": "False"}}}


def _changed(key, **part):
    return SIG | {key: SIG[key] | part}


def test_churn_rule_returns_each_of_its_verdicts():
    one = churn_verdict({"1.2.1": SIG})
    assert one.verdict == "inconclusive" and "≥2 TensorRT-LLM versions" in one.summary and CHURN_COMMAND in one.summary
    assert churn_verdict({"1.2.0": SIG, "1.2.1": SIG}).verdict == "refuted"
    gone = churn_verdict({"1.2.1": SIG, "1.3.0": _changed("LLM.generate_async [core]",
                                                         names={"inputs": True, "cache_salt": False})})
    assert gone.verdict == "confirmed" and gone.rows == [
        {"from": "1.2.1", "to": "1.3.0", "change": "LLM.generate_async [core]: cache_salt gone"}]
    assert "1.2.1 → 1.3.0: LLM.generate_async [core]: cache_salt gone" in gone.summary
    apart = churn_verdict({"1.2.1": {"a [core]": SIG["LLM.generate_async [core]"]}, "1.3.0": {"b [core]": {}}})
    assert apart.verdict == "inconclusive" and "share no entry point" in apart.summary


def test_churn_sees_a_moved_symbol_and_a_changed_default():
    moved = _changed("LLM.generate_async [core]", at="llm.LLM.generate_async")
    default = _changed("llmapi.KvCacheConfig [core]", defaults={"use_kv_cache_manager_v2": "'auto'"})
    out = churn_verdict({"1.2.1": SIG, "1.3.0rc1": moved, "1.4.0rc1": default})
    assert out.verdict == "confirmed" and [r["change"] for r in out.rows] == [
        "LLM.generate_async [core]: found at llm.LLM.generate_async, was LLM.generate_async",
        "LLM.generate_async [core]: found at LLM.generate_async, was llm.LLM.generate_async",
        "llmapi.KvCacheConfig [core]: use_kv_cache_manager_v2 defaults to 'auto', was False"]


def test_churn_compares_versions_in_release_order_not_text_order():
    out = churn_verdict({"1.10.0": _changed("LLM.generate_async [core]", names={"inputs": True, "cache_salt": False}),
                         "1.9.0": SIG})
    assert out.rows[0]["from"] == "1.9.0" and out.rows[0]["change"].endswith("cache_salt gone")


def test_what_only_one_survey_checked_is_a_change_of_the_table_not_churn():
    """A newer workbench checks one more name: the engine did not change, so identical is still refuted."""
    more = _changed("LLM.generate_async [core]", names={"inputs": True, "cache_salt": True, "streaming": True})
    out = churn_verdict({"1.2.0": SIG, "1.2.1": more})
    assert out.verdict == "refuted" and any("streaming (checked in one survey only)" in n for n in out.notes)
    assert signature_changes(SIG, more) == ([], ["LLM.generate_async [core]: streaming (checked in one survey only)"])


def test_surveys_without_signature_tables_cannot_answer_churn():
    out = churn_verdict({"1.2.0": None, "1.2.1": SIG})
    assert out.verdict == "inconclusive" and any("1.2.0 recorded no signature table" in n for n in out.notes)


def test_a_default_no_longer_declared_is_churn_not_identity():
    """A pinned field whose default stopped being declared was dropped from the record and read as identical."""
    undeclared = _changed("llmapi.KvCacheConfig [core]", defaults={"use_kv_cache_manager_v2": "(not declared)"})
    out = churn_verdict({"1.2.1": SIG, "1.3.0": undeclared})
    assert out.verdict == "confirmed" and out.rows[0]["change"].endswith("defaults to (not declared), was False")


def test_entry_points_found_in_neither_survey_are_not_a_reading():
    nowhere = {k: {"at": None, "names": {}, "defaults": {}} for k in SIG}
    out = churn_verdict({"1.2.1": nowhere, "1.3.0": nowhere})
    assert out.verdict == "inconclusive" and "share no entry point" in out.summary
