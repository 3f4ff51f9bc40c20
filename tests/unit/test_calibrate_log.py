"""mesh calibrate --from-decisions: the decision log's gate values, no-match share, suggestion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mesh.cli.main import main
from mesh.errors import CalibrationDataError
from mesh.router.calibrate_log import (
    calibrate_from_log,
    load_decisions,
    load_feedback,
)


def decision_line(
    task_id: str, gate: float, threshold: float = 0.5, agent: str = "billing"
) -> dict[str, Any]:
    """A ``route.decision`` line as the observer writes it: routed when `gate` clears."""
    routed = gate >= threshold
    candidates = [
        {
            "agent_id": agent,
            "similarity": gate - 0.05,
            "keyword": 0.05,
            "total": gate,
            "filtered": None if routed else "below_threshold",
        },
        {
            "agent_id": "weather",
            "similarity": gate - 0.2,
            "keyword": 0.0,
            "total": gate - 0.2,
            "filtered": None if gate - 0.2 >= threshold else "below_threshold",
        },
        # tag-filtered and unavailable agents do not count, however similar
        {
            "agent_id": "tagged",
            "similarity": 0.99,
            "keyword": 0.0,
            "total": 0.99,
            "filtered": "tags",
        },
        {
            "agent_id": "down",
            "similarity": 0.98,
            "keyword": 0.0,
            "total": 0.98,
            "filtered": "unavailable",
        },
    ]
    return {
        "observed_ms": 1,
        "by": "router",
        "type": "route.decision",
        "ts_ms": 1,
        "trace_id": f"tr-{task_id}",
        "task_id": task_id,
        "instance_id": None,
        "agent_id": agent if routed else None,
        "data": {
            "capability": "text",
            "route": {"strategy": "semantic", "score": gate, "low_confidence": False}
            if routed
            else None,
            "threshold": threshold,
            "candidates": candidates,
            "agents": 4,
            "runner_up": None,
        },
    }


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n", encoding="utf-8")
    return path


def gates(n: int, low: float, high: float) -> list[float]:
    return [round(float(g), 4) for g in np.linspace(low, high, n)]


def test_gate_is_the_best_gated_similarity_plus_keyword(tmp_path: Path) -> None:
    lines = [decision_line("t1", 0.7), decision_line("t2", 0.3)]
    lines.append({"type": "task.completed", "task_id": "t1", "data": {}})  # skipped
    got = load_decisions(write_jsonl(tmp_path / "decisions.jsonl", lines))
    assert [(d.task_id, d.agent_id, d.strategy, d.gate) for d in got] == [
        ("t1", "billing", "semantic", pytest.approx(0.7)),
        ("t2", None, None, pytest.approx(0.3)),
    ]


def test_without_feedback_the_suggestion_aims_at_the_no_match_share(tmp_path: Path) -> None:
    # 100 decisions with gate values 0.30 .. 0.79 at threshold 0.5: 40 % turned away now
    lines = [decision_line(f"t{i}", g) for i, g in enumerate(gates(100, 0.30, 0.795))]
    report = calibrate_from_log(load_decisions(write_jsonl(tmp_path / "d.jsonl", lines)))
    assert report.decisions == report.scored == 100
    assert report.current_threshold == 0.5
    assert report.no_match_share == pytest.approx(0.40, abs=0.011)
    assert report.method == "target_no_match"
    assert report.suggested_threshold == pytest.approx(0.35, abs=0.01)
    assert report.no_match_share_suggested == pytest.approx(0.10, abs=0.011)
    assert report.newly_routed == pytest.approx(30, abs=1) and report.newly_turned_away == 0
    assert report.percentiles["p50"] == pytest.approx(0.55, abs=0.01)
    assert sum(n for _, n in report.histogram) == 100
    assert report.strategies == {"semantic": 60, "none": 40}


def test_feedback_chooses_the_threshold_that_separates_good_from_bad(tmp_path: Path) -> None:
    # routed at threshold 0.3; good routes have gates >= 0.6, bad ones below 0.5
    good = [decision_line(f"g{i}", g, threshold=0.3) for i, g in enumerate(gates(30, 0.6, 0.9))]
    bad = [decision_line(f"b{i}", g, threshold=0.3) for i, g in enumerate(gates(20, 0.32, 0.48))]
    decisions = load_decisions(write_jsonl(tmp_path / "d.jsonl", good + bad))
    trace = [
        {
            "type": "route.feedback",
            "task_id": line["task_id"],
            "agent_id": "billing",
            "data": {"good": line in good, "counted": True},
        }
        for line in good + bad
    ]
    trace.append({"type": "task.completed", "task_id": "g0", "data": {}})
    feedback = load_feedback(write_jsonl(tmp_path / "trace.jsonl", trace))
    assert len(feedback) == 50
    report = calibrate_from_log(decisions, feedback)
    assert report.method == "feedback"
    assert (report.feedback_good, report.feedback_bad) == (30, 20)
    assert 0.48 < report.suggested_threshold <= 0.6
    assert report.good_kept == (1.0, 1.0)
    assert report.bad_turned_away == (0.0, 1.0)
    assert report.newly_turned_away == 20 and report.newly_routed == 0


def test_bad_files_name_file_and_line(tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"type": "route.decision"\n', encoding="utf-8")
    with pytest.raises(CalibrationDataError, match=r"bad.jsonl:1: invalid JSON"):
        load_decisions(bad_json)
    no_threshold = decision_line("t1", 0.7)
    del no_threshold["data"]["threshold"]
    with pytest.raises(CalibrationDataError, match=r"d.jsonl:1: 'data.threshold'"):
        load_decisions(write_jsonl(tmp_path / "d.jsonl", [no_threshold]))
    with pytest.raises(CalibrationDataError, match=r"no route\.decision lines"):
        load_decisions(write_jsonl(tmp_path / "e.jsonl", [{"type": "task.completed"}]))
    with pytest.raises(CalibrationDataError, match="cannot read"):
        load_decisions(tmp_path / "missing.jsonl")


def test_cli_prints_the_report_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [decision_line(f"t{i}", g) for i, g in enumerate(gates(40, 0.30, 0.795))]
    path = write_jsonl(tmp_path / "decisions.jsonl", lines)
    assert main(["calibrate", "--from-decisions", str(path)]) == 0
    out = capsys.readouterr().out
    assert "no-match share   40.0%" in out
    assert "suggested        0.3" in out and "MESH_SIMILARITY_THRESHOLD=" in out
    assert (
        main(["calibrate", "--from-decisions", str(path), "--json", "--target-no-match", "0.2"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["no_match_share_suggested"] == pytest.approx(0.2, abs=0.03)
    assert main(["calibrate", "--from-decisions", str(tmp_path / "none.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["calibrate"]) == 2
    assert "--from-decisions FILE" in capsys.readouterr().err
