"""RuleIndex keywords: word tokens, and CJK keywords that match inside unspaced text."""

from __future__ import annotations

from mesh.router.rules import RuleIndex, keyword_tokens, tokens


def test_tokens_are_words_and_cjk_substrings() -> None:
    assert tokens("Refund my ORDER_7") == ["refund", "my", "order", "7"]
    assert tokens("查PIN码") == ["查", "pin", "码"]
    assert tokens("销售") == ["销", "销售", "售"]
    assert "订单量" in tokens("看看订单量") and "看看订单量" not in tokens("看看订单量")


def test_keywords_hit_in_english_and_in_chinese_sentences() -> None:
    rules = RuleIndex()
    rules.add("sales", {}, keyword_tokens(["销售", "订单量"]))
    rules.add("billing", {}, keyword_tokens(["refund policy"]))
    assert rules.keyword_hits("分析一下最近的销售数据走势") == {"sales"}
    assert rules.keyword_hits("上周订单量怎么样") == {"sales"}
    assert rules.keyword_hits("数据分析") == set()
    assert rules.keyword_hits("售销") == set()  # the characters, but not the keyword
    assert rules.keyword_hits("what is the refund policy") == {"billing"}
    assert rules.keyword_hits("a refund please") == set()  # every word of the keyword
