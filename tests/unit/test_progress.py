"""Progress lines (when they come, what they say, ETA arithmetic, no carriage returns) and the
metric tracker (DVCLive series, dropping a killed run's rows, nothing written outside its
directory). The tracker inside a training run is tested in test_train.py."""

from __future__ import annotations

import csv
import logging
import os
import shutil
import subprocess
import sys

import pytest

from condensation.runtime.progress import (
    MetricTracker,
    ProgressLog,
    check_tracker,
    drop_rows_after,
    format_duration,
    format_rate,
    library_bars_off_in_files,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lines(caplog) -> list[str]:
    """The messages the ``condensation`` logger writes at INFO, as they come."""
    caplog.set_level(logging.INFO, logger="condensation")
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect()
    logging.getLogger("condensation").addHandler(handler)
    yield messages
    logging.getLogger("condensation").removeHandler(handler)


def test_durations_and_rates_read_well():
    assert [format_duration(s) for s in (0, 42.9, 60, 245, 3600, 4320, 86400 + 3 * 3600 + 59)] == [
        "0s", "42s", "1m00s", "4m05s", "1h00m", "1h12m", "1d03h",
    ]
    assert format_duration(float("inf")) == format_duration(-1) == "?"
    assert [format_rate(r) for r in (5210.4, 100, 99.94, 3.214, 0.5)] == ["5,210", "100", "99.9", "3.21", "0.5"]


def test_a_line_every_n_steps_with_speed_and_eta(lines):
    clock = FakeClock()
    progress = ProgressLog(100, "step", every=10, every_seconds=0, work=(2048, "tok"), clock=clock)
    for step in range(1, 21):
        clock.now += 1.0 if step <= 10 else 0.5  # 1 step/s, then 2 steps/s
        written = progress.update(1, ce=3.41234, aux=None)
        assert written == (step % 10 == 0)
    assert lines == [
        # 10 steps in 10 s: 2,048 tok/s, 90 steps left at 1 step/s
        "step 10/100 (10.0 %) | 2,048 tok/s | ETA 1m30s | ce 3.412",
        # speed and ETA follow the interval since the last line: 2 steps/s, 80 steps left
        "step 20/100 (20.0 %) | 4,096 tok/s | ETA 40s | ce 3.412",
    ]


def test_a_line_after_every_seconds_whichever_comes_first(lines):
    clock = FakeClock()
    progress = ProgressLog(1000, "step", every=100, every_seconds=60, clock=clock)
    for _ in range(10):
        clock.now += 25.0
        progress.update(1)
    # by time after 75 s (3 steps), 150 s (6), 225 s (9): 25 s per step, ETA from that pace
    assert [line.split(" | ")[0] for line in lines] == ["step 3/1000 (0.3 %)", "step 6/1000 (0.6 %)",
                                                        "step 9/1000 (0.9 %)"]
    assert lines[0] == "step 3/1000 (0.3 %) | 0.04 step/s | ETA 6h55m"  # 997 steps x 25 s = 24,925 s
    clock.now += 1.0
    progress.update(90)  # crossing step 100 writes a line at once
    assert lines[-1].startswith("step 100/1000 (10.0 %)")


def test_values_stay_until_replaced_and_the_last_line_says_done(lines):
    clock = FakeClock()
    progress = ProgressLog(4, "step", every=2, every_seconds=0, done=0, label="gpt2/ce", clock=clock)
    clock.now = 10.0
    progress.update(1, ce=3.0, val=3.5)
    clock.now = 20.0
    progress.update(1, ce=2.0, val=None, rho=0.25)  # no new validation loss: the last one stays
    clock.now = 95.0
    progress.update(2, ce=1.0)
    assert lines == [
        "gpt2/ce: step 2/4 (50.0 %) | 0.1 step/s | ETA 20s | ce 2 | val 3.5 | rho 0.25",
        "gpt2/ce: step 4/4 (100.0 %) | done in 1m35s | ce 1 | val 3.5 | rho 0.25",
    ]


def test_a_resumed_count_and_extraction_per_batch(lines):
    clock = FakeClock()
    resumed = ProgressLog(10, "step", every=5, every_seconds=0, done=2, clock=clock)
    clock.now = 2.0
    assert not resumed.update(1) and not resumed.update(1)
    clock.now = 4.0
    assert resumed.update(1)
    assert lines.pop() == "step 5/10 (50.0 %) | 0.75 step/s | ETA 6s"  # 3 steps since the resume in 4 s
    # extraction: one line per batch of sequences, in sequences/s
    extraction = ProgressLog(20, "seq", every=1, every_seconds=0, label="smollm2 on austen", clock=clock)
    for batch in (8, 8, 4):
        clock.now += 2.0
        extraction.update(batch)
    assert lines == [
        "smollm2 on austen: seq 8/20 (40.0 %) | 4 seq/s | ETA 3s",
        "smollm2 on austen: seq 16/20 (80.0 %) | 4 seq/s | ETA 1s",
        "smollm2 on austen: seq 20/20 (100.0 %) | done in 6s",
    ]


def test_no_carriage_return_in_a_log_file(tmp_path):
    path = tmp_path / "job.log"
    handler = logging.FileHandler(path)
    log = logging.getLogger("condensation.test_file")
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        clock = FakeClock()
        progress = ProgressLog(30, "step", every=10, every_seconds=0, log=log, clock=clock)
        for _ in range(30):
            clock.now += 0.1
            progress.update(1, ce=2.5)
    finally:
        log.removeHandler(handler)
        handler.close()
    text = path.read_bytes().decode()  # as written: read_text() would turn "\r" into "\n"
    assert ("\r" not in text and text.count("\n") == 3
            and text.splitlines()[-1].startswith("step 30/30 (100.0 %) | done in"))


def test_library_bars_are_off_while_stderr_is_a_file_only(tmp_path):
    from transformers.utils import logging as hf_logging

    class Terminal:
        def isatty(self) -> bool:
            return True

    assert hf_logging.is_progress_bar_enabled()
    with open(tmp_path / "err", "w") as file, library_bars_off_in_files(file):
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled()
    with library_bars_off_in_files(Terminal()):
        assert hf_logging.is_progress_bar_enabled()


LOAD_A_SAVED_MODEL = """
import contextlib, sys
from condensation.stages import logged
with logged(None) if sys.argv[1] == "logged" else contextlib.nullcontext():
    from transformers import GPT2LMHeadModel
    GPT2LMHeadModel.from_pretrained(sys.argv[2])
"""


def test_a_stage_whose_rule_redirects_its_output_writes_no_bar(tmp_path):
    """Training stages log through the rule's shell redirection (``logged(None)``, stderr a
    file): transformers' "Loading weights" bar must stay out of that file too. The child gets an
    environment without the bar switches (an earlier test in this process may have set them), and
    the same load outside ``logged`` shows that the bar would otherwise be there."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from condensation.stages import NO_BARS_VARIABLES

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=64, n_positions=16,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(tmp_path / "model")
    env = {name: value for name, value in os.environ.items() if name not in NO_BARS_VARIABLES}
    carriage_returns = {}
    for mode in ("plain", "logged"):
        with open(tmp_path / f"{mode}.err", "w") as stderr:
            subprocess.run([sys.executable, "-c", LOAD_A_SAVED_MODEL, mode, str(tmp_path / "model")],
                           env=env, stderr=stderr, check=True)
        carriage_returns[mode] = (tmp_path / f"{mode}.err").read_bytes().count(b"\r")
    assert carriage_returns["plain"] > 0, "the load drew no bar: this test no longer sees what it guards"
    assert carriage_returns["logged"] == 0


def test_progress_log_refuses_nonsense():
    with pytest.raises(ValueError, match="total >= 1"):
        ProgressLog(0)
    with pytest.raises(ValueError, match="every >= 0"):
        ProgressLog(10, every=-1)


# ----------------------------------------------------------------------------- tracker


def read_tsv(path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_tracker_writes_dvclive_series_and_summary(tmp_path):
    tracker = MetricTracker(tmp_path / "dvclive", resume_after=None)
    tracker.log(0, {"val/loss": 4.5, "train/ce": None})
    for step in (1, 2, 3):
        tracker.log(step, {"train/ce": 4.0 - step, "train/aux": None})
    tracker.close()
    metrics = tmp_path / "dvclive" / "plots" / "metrics"
    assert sorted(p.relative_to(metrics).as_posix() for p in metrics.rglob("*.tsv")) == ["train/ce.tsv", "val/loss.tsv"]
    assert read_tsv(metrics / "train" / "ce.tsv") == [{"step": str(s), "ce": str(4.0 - s)} for s in (1, 2, 3)]
    summary = (tmp_path / "dvclive" / "metrics.json").read_text()
    assert '"ce": 1.0' in summary and '"step": 3' in summary and '"loss": 4.5' in summary


def test_drop_rows_after_a_step(tmp_path):
    metrics = tmp_path / "plots" / "metrics"
    (metrics / "train").mkdir(parents=True)
    (metrics / "train" / "ce.tsv").write_text("step\tce\n1\t3.0\n2\t2.5\n3\t2.0\n4\t1.")
    (metrics / "val.tsv").write_text("step\tval\n0\t4.0\n")
    (metrics / "empty.tsv").write_text("")  # a kill between creating the file and writing to it
    (metrics / "cut.tsv").write_text("step\tcut\n1\t3.0\n2")  # a row cut short
    drop_rows_after(tmp_path, 2)
    assert (metrics / "train" / "ce.tsv").read_text() == "step\tce\n1\t3.0\n2\t2.5\n"
    assert (metrics / "val.tsv").read_text() == "step\tval\n0\t4.0\n"  # untouched
    assert (metrics / "cut.tsv").read_text() == "step\tcut\n1\t3.0\n"
    assert not (metrics / "empty.tsv").exists()


def test_resumed_tracker_continues_one_series(tmp_path):
    first = MetricTracker(tmp_path, resume_after=None)
    for step in range(1, 8):  # the state was saved at step 4, then the process was killed after step 7
        first.log(step, {"train/ce": float(step)})
    resumed = MetricTracker(tmp_path, resume_after=4)
    for step in range(5, 10):
        resumed.log(step, {"train/ce": 10.0 + step})
    resumed.close()
    rows = read_tsv(tmp_path / "plots" / "metrics" / "train" / "ce.tsv")
    assert [(int(r["step"]), float(r["ce"])) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)] + [
        (step, 10.0 + step) for step in range(5, 10)
    ]
    fresh = MetricTracker(tmp_path, resume_after=None)  # a run that starts over starts a new series
    fresh.close()
    assert not (tmp_path / "plots" / "metrics" / "train" / "ce.tsv").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_tracker_leaves_the_working_directory_repository_alone(tmp_path, monkeypatch):
    """Plain DVCLive runs `dvc init` (and `git add`) in a git repository without DVC; ours writes
    only into its own directory."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"],
                   cwd=repo, check=True)
    monkeypatch.chdir(repo)
    tracker = MetricTracker(repo / "runs" / "dvclive", resume_after=None)
    tracker.log(1, {"train/ce": 1.0})
    tracker.close()
    assert sorted(p.name for p in repo.iterdir()) == [".git", "runs"]
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    assert status.stdout.splitlines() == ["?? runs/"]


def test_check_tracker_names_the_package_or_the_directory(tmp_path, monkeypatch):
    check_tracker("none", tmp_path / "never-made")
    assert not (tmp_path / "never-made").exists()
    check_tracker("dvclive", tmp_path / "dvclive")
    assert (tmp_path / "dvclive").is_dir() and not list((tmp_path / "dvclive").iterdir())
    (tmp_path / "blocked").write_text("")
    with pytest.raises(OSError, match=r"dvclive tracker cannot write its directory .*blocked/dvclive"):
        check_tracker("dvclive", tmp_path / "blocked" / "dvclive")
    monkeypatch.setitem(sys.modules, "dvclive", None)
    with pytest.raises(ModuleNotFoundError, match=r"package 'dvclive' is not installed.*train\.tracker: none"):
        check_tracker("dvclive", tmp_path / "dvclive")
