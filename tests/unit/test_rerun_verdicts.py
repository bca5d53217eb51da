"""benchmarks/rerun_verdicts.py: which verdicts and numbers moved between two finished runs."""

import importlib.util
import json
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rerun_verdicts", ROOT / "benchmarks/rerun_verdicts.py")
rerun = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rerun)


def finished_run(directory: Path, verdicts: dict[str, str], difference: float) -> Path:
    (directory / "results/metrics").mkdir(parents=True)
    (directory / "results/tables").mkdir(parents=True)
    findings = [{"claim": claim, "verdict": verdict, "evidence": []} for claim, verdict in verdicts.items()]
    (directory / "results/metrics/findings.json").write_text(json.dumps({"findings": findings}))
    pd.DataFrame([{"model": "toy", "method": "dispersion", "diff_vs_ce": difference, "ci_low_vs_ce": difference - 1,
                   "ci_high_vs_ce": difference + 1, "p_vs_ce": 0.5, "per_seed_vs_ce": "+0.10; -0.20"}]
                 ).to_csv(directory / "results/tables/table2.csv", index=False)
    return directory


def test_compare_says_which_verdicts_moved_and_shows_the_numbers(tmp_path, capsys):
    first = finished_run(tmp_path / "a", {"size": "inconclusive", "scores": "agrees"}, 0.5)
    same = finished_run(tmp_path / "b", {"size": "inconclusive", "scores": "agrees"}, -0.3)
    moved = finished_run(tmp_path / "c", {"size": "inconclusive", "scores": "disagrees"}, -2.0)
    assert rerun.compare(first, same) is True
    shown = capsys.readouterr().out
    assert "every verdict held" in shown and "+0.50 [-0.50, +1.50]" in shown and "-0.30 [-1.30, +0.70]" in shown
    assert rerun.compare(first, moved) is False
    assert "MOVED" in capsys.readouterr().out
