"""LexicalIndex: grams per script, idf-weighted coverage, incremental add and remove."""

from __future__ import annotations

import numpy as np
import pytest

from mesh.router import lexical
from mesh.router.lexical import LexicalIndex, cjk_words, grams


def test_grams_latin_words_and_cjk_bigrams() -> None:
    assert grams("Pin") == {"<pin", "pin>"}
    assert grams("is") == {"<is>"}
    assert "lock" in grams("Blocked") and "lock" in grams("block")
    assert grams("冻结账户") == {"冻结", "账户"}  # jieba's words, not "结账"
    assert grams("查PIN码") == {"查", "<pin", "pin>", "码"}
    assert grams("  ,;  ") == set()


def test_cjk_runs_are_cut_into_words() -> None:
    assert cjk_words("帮我取消订单") == ["帮", "我", "取消", "订单"]
    assert {"销售", "数据"} <= grams("分析一下最近的销售数据走势")
    # the same words in another sentence match, whatever surrounds them
    lex = LexicalIndex()
    sales = lex.add_agent(["上个月的销售数据"])
    other = lex.add_agent(["日志分析"])
    cov = lex.coverage("帮我看看销售数据为什么下滑", np.array([sales, other]))
    assert cov[0] > 0.1 and cov[1] == 0.0


def test_without_jieba_cjk_runs_fall_back_to_bigrams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexical, "_segmenter", lambda: None)
    assert cjk_words("冻结账户") == ["冻结", "结账", "账户"]
    assert cjk_words("码") == ["码"]


def test_coverage_is_an_idf_weighted_share_in_unit_range() -> None:
    lex = LexicalIndex()
    bank = lex.add_agent(["please freeze my card", "block my card now"])
    fx = lex.add_agent(["please convert dollars", "exchange rate of my euros"])
    cov = lex.coverage("please block my card", np.array([bank, fx]))
    assert cov[0] == pytest.approx(1.0)
    assert 0.0 < cov[1] < 0.5  # only the common words: "please", "my"
    assert lex.coverage("", np.array([bank])).tolist() == [0.0]
    assert lex.coverage("zzz", np.array([bank, fx])).tolist() == [0.0, 0.0]


def test_add_and_remove_texts_and_agents() -> None:
    lex = LexicalIndex()
    a = lex.add_agent(["weather forecast"])
    b = lex.add_agent()
    assert lex.coverage("forecast", np.array([a, b])).tolist() == [1.0, 0.0]
    lex.add_text(b, "forecast tomorrow")
    lex.add_text(b, "forecast tomorrow")
    lex.remove_text(b, "forecast tomorrow")  # one copy left
    assert lex.coverage("forecast", np.array([b]))[0] == pytest.approx(1.0)
    lex.remove_text(b, "forecast tomorrow")
    lex.remove_text(b, "never added")
    assert lex.coverage("forecast", np.array([b])).tolist() == [0.0]
    lex.remove_agent(a)
    assert len(lex) == 1
    c = lex.add_agent(["cooking recipes"])
    assert c == a  # freed slots are reused, empty
    assert lex.coverage("forecast", np.array([c])).tolist() == [0.0]
    with pytest.raises(KeyError):
        lex.coverage("x", np.array([99]))
