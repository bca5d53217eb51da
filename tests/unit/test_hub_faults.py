"""The Hub's faults, injected into a stand-in that serves the session's tree: a model fetch
(``models.prepare_hub``, in a fresh process as a job runs it) retries what is transient and ends
with the same handle as without faults; what is permanent stops it with the cause and the fix."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from condensation.models import missing_weights
from condensation.runtime.hub_retry import HubRetries, transient_fault, with_hub_retries
from stand_in_hub import client_env, inject, requests_received, serve
from stand_in_hub.repository import revision_dir

pytestmark = pytest.mark.slow

MODEL = "openai-community/gpt2"
FETCH = ("import dataclasses, json, sys\n"
         "from condensation.models import prepare_hub\n"
         "handle = prepare_hub('gpt2', sys.argv[1], None if sys.argv[2] == '-' else sys.argv[2], False)\n"
         "print(json.dumps(dataclasses.asdict(handle)))")


@pytest.fixture
def hub(stand_in_hub):
    """A server of its own (faults stay in this test) over the session's tree, and a client
    environment with an empty cache."""
    with serve(stand_in_hub.root) as url, tempfile.TemporaryDirectory() as caches:
        yield url, os.environ | client_env(url, caches) | {"PYTHONPATH": stand_in_hub.env["PYTHONPATH"]}


def fetch(env: dict[str, str], model: str = MODEL, revision: str = "-") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", FETCH, model, revision], env=env, capture_output=True, text=True,
                          timeout=300)


def start_fetch(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", FETCH, MODEL, "-"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def weights_fetched(url: str) -> list[tuple[str | None, int]]:
    """``(Range, status)`` of each download of a ``model.safetensors`` the stand-in answered."""
    return [(r["range"], r["status"]) for r in requests_received(url)
            if r["method"] == "GET" and r["path"].endswith("/model.safetensors")]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached_snapshot(env: dict[str, str], model: str = MODEL) -> Path:
    org, name = model.split("/")
    return next(Path(env["HF_HUB_CACHE"], f"models--{org}--{name}", "snapshots").iterdir())


def test_transient_faults_are_retried_and_the_fetch_ends_as_without_them(hub, stand_in_hub):
    url, env = hub
    clean = fetch(stand_in_hub.env)  # the session's own server: no faults
    assert clean.returncode == 0, clean.stderr[-3000:]
    inject(url, path=rf"^/api/models/{MODEL}", status=429, retry_after=1, times=2)  # the rate limit
    inject(url, path=r"/config\.json$", status=503, times=1)
    inject(url, path=r"/model\.safetensors$", drop_after=1000, times=1)  # a connection dropped mid-file
    inject(url, path=r"/vocab\.json$", delay=3, times=1)  # slower than the client waits (below)
    done = fetch(env | {"HF_HUB_ETAG_TIMEOUT": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == clean.stdout  # the same commit, parameter and layer counts
    # the first 429 meets the disk check (which skips itself where the Hub does not answer), the
    # second the download, which waits the second Retry-After asks for and tries again
    assert done.stderr.count("HTTP 429 (attempt 1 of 6); trying again in 1 s") == 1
    answered = [(r["method"], r["path"].rsplit("/", 1)[-1], r["status"]) for r in requests_received(url)]
    assert [status for _, _, status in answered].count(429) == 2 and ("HEAD", "config.json", 503) in answered
    assert answered.count(("GET", "model.safetensors", 200)) == 2  # cut short once, then whole
    # the answer slower than the client's timeout, given up on, and the next in time
    assert [(method, status) for method, name, status in answered if name == "vocab.json"][:2] == [
        ("HEAD", None), ("HEAD", 200)]


def test_a_file_cut_short_resumes_from_its_last_whole_chunk(tmp_path):
    """A 16 MB weights file dropped after 12 MB: the next request asks for the rest from the
    10 MB that ``huggingface_hub`` had written (its write chunk), not for the whole file again."""
    model = "stand-in/large-weights"
    folder = revision_dir(tmp_path / "hub", "models", model, "main")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 8}))
    values = 4 * 1024 * 1024  # float32: 16 MB
    header = json.dumps({"wte.weight": {"dtype": "F32", "shape": [values], "data_offsets": [0, 4 * values]}}).encode()
    weights = len(header).to_bytes(8, "little") + header + bytes(range(256)) * (values // 64)
    (folder / "model.safetensors").write_bytes(weights)
    with serve(tmp_path / "hub") as url, tempfile.TemporaryDirectory() as caches:
        env = os.environ | client_env(url, caches) | {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        inject(url, path=r"/model\.safetensors$", drop_after=12_000_000)
        done = fetch(env, model=model)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["num_parameters"] == values
        assert weights_fetched(url) == [(None, 200), (f"bytes={10 * 1024 * 1024}-", 206)]
        assert sha256(cached_snapshot(env, model) / "model.safetensors") == hashlib.sha256(weights).hexdigest()


def test_a_file_that_arrives_changed_is_fetched_again(hub, stand_in_hub):
    """The right size, one byte wrong: ``huggingface_hub`` checks sizes only; the fetch checks the
    SHA-256 the Hub gave, drops the file from the cache and downloads it again."""
    url, env = hub
    inject(url, path=r"/model\.safetensors$", corrupt_at=5000)
    done = fetch(env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model.safetensors arrived with SHA-256" in done.stderr and "trying again" in done.stderr
    assert weights_fetched(url) == [(None, 200), (None, 200)]
    served = revision_dir(stand_in_hub.root, "models", MODEL, "main") / "model.safetensors"
    assert sha256(cached_snapshot(env) / "model.safetensors") == sha256(served)


def test_a_killed_fetch_leaves_nothing_a_later_job_takes_for_a_model(hub, stand_in_hub):
    """A fetch killed while the weights stream in: offline, the cache's half snapshot is refused with
    what to do (not read as a model without weights); where the Hub answers, the next fetch
    completes it to the same model."""
    url, env = hub
    clean = fetch(stand_in_hub.env)
    inject(url, path=r"/model\.safetensors$", stall_after=100_000, delay=300)
    job = start_fetch(env)
    deadline = time.monotonic() + 120
    while not weights_fetched(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert weights_fetched(url), "the fetch never asked for the weights"
    time.sleep(0.5)  # the first bytes arrive
    job.kill()
    job.communicate()
    snapshot = cached_snapshot(env)
    assert (snapshot / "config.json").exists() and not (snapshot / "model.safetensors").exists()
    offline = fetch(env | {"HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 1 and offline.stdout == ""
    # huggingface_hub names what is missing where it cached the repository's listing; else missing_weights
    assert f"model 'gpt2': cannot fetch '{MODEL}'" in offline.stderr and "incomplete: 1 file(s) are missing " \
        "(model.safetensors)" in offline.stderr, offline.stderr[-2000:]
    done = fetch(env)
    assert done.returncode == 0 and done.stdout == clean.stdout, done.stderr[-3000:]


def test_a_snapshot_without_all_its_weights_is_named_as_such(tmp_path):
    assert missing_weights(tmp_path) == "its weights (no *.safetensors, no pytorch_model.bin)"
    (tmp_path / "pytorch_model.bin").write_bytes(b"weights")
    assert missing_weights(tmp_path) == ""
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"shard")
    assert missing_weights(tmp_path) == ("1 of the 2 shards its model.safetensors.index.json names "
                                         "(model-00002-of-00002.safetensors)")


def test_two_jobs_fetching_one_repository_download_it_once(hub, stand_in_hub):
    """Two fetches of one model at once (two configured names of one repository): the weights are
    downloaded once, the second job waiting on the cache's lock, and both end with the same handle."""
    url, env = hub
    clean = fetch(stand_in_hub.env)
    inject(url, path=r"/model\.safetensors$", stall_after=100_000, delay=5)  # the first download takes 5 s
    jobs = [start_fetch(env) for _ in range(2)]
    outputs = [job.communicate(timeout=300) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], [err[-2000:] for _, err in outputs]
    assert [out for out, _ in outputs] == [clean.stdout] * 2
    assert weights_fetched(url) == [(None, 200)]
    weights = [r for r in requests_received(url) if r["path"].endswith("/model.safetensors")]
    download = next(r for r in weights if r["method"] == "GET")
    looked_up = [r["at"] for r in weights if r["method"] == "HEAD"]
    assert len(looked_up) == 2 and max(looked_up) < download["at"] + 5  # both jobs were at it while it streamed


def test_a_gated_model_names_its_licence_page_and_the_token(hub):
    url, env = hub
    inject(url, path=MODEL, status=401, error_code="GatedRepo", times=100)
    done = fetch(env)
    assert done.returncode == 1
    assert f"'{MODEL}' is gated: accept its licence at https://huggingface.co/{MODEL}" in done.stderr
    assert "HF_TOKEN" in done.stderr and "trying again" not in done.stderr  # permanent: no retry


def test_a_missing_revision_lists_the_branches_and_an_unknown_id_says_so(hub):
    _, env = hub
    done = fetch(env, revision="step99")
    assert done.returncode == 1 and f"'{MODEL}' has no revision 'step99'; its branches: main" in done.stderr
    done = fetch(env, model="openai-community/no-such-model")
    assert done.returncode == 1 and "no such model id on the Hugging Face Hub: 'openai-community/no-such-model'" \
        in done.stderr


def test_a_download_the_cache_disk_cannot_hold_stops_before_it_starts(hub):
    url, env = hub
    small_disk = ("import collections, shutil\n"  # a disk of 1 MB with 10 kB free
                  "usage = collections.namedtuple('usage', 'total used free')\n"
                  "shutil.disk_usage = lambda path: usage(10**6, 0, 10**4)\n")
    done = subprocess.run([sys.executable, "-c", small_disk + FETCH, MODEL, "-"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1
    assert re.search(rf"model 'gpt2': '{MODEL}' needs 0\.\d\d GB more in the Hugging Face cache \(.+\), "
                     r"which has 0\.00 GB free", done.stderr), done.stderr[-2000:]
    assert not any(r["path"].endswith(".safetensors") for r in requests_received(url))  # nothing downloaded


class Answer:
    def __init__(self, status, headers=None):
        self.status_code, self.headers = status, headers or {}


class HTTPFault(Exception):
    def __init__(self, status, headers=None):
        super().__init__(f"HTTP {status}")
        self.response = Answer(status, headers)


class TransportError(Exception):  # as httpx names them: transient by a class name in the MRO
    pass


class ConnectError(TransportError):
    pass


def test_retries_wait_as_the_hub_asks_double_otherwise_and_stop_at_the_limit(monkeypatch):
    waits = []
    monkeypatch.setattr("condensation.runtime.hub_retry.time.sleep", waits.append)
    faults = iter([HTTPFault(429, {"Retry-After": "7"}), HTTPFault(502), ConnectError("reset"), HTTPFault(503)])

    def call():
        fault = next(faults, None)
        if fault is not None:
            raise fault
        return "done"

    assert with_hub_retries(call, "test", HubRetries(attempts=5, first_wait_s=2, max_wait_s=5)) == "done"
    assert waits == [5, 4, 5, 5]  # Retry-After 7 capped at 5; then 2 x 2, 2 x 4 and 2 x 8 capped
    with pytest.raises(HTTPFault):  # the last fault once the attempts are spent
        with_hub_retries(lambda: (_ for _ in ()).throw(HTTPFault(500)), "test", HubRetries(attempts=2))
    with pytest.raises(HTTPFault):  # a permanent answer at once
        with_hub_retries(lambda: (_ for _ in ()).throw(HTTPFault(404)), "test")
    wrapped = RuntimeError("snapshot folder not found")
    wrapped.__cause__ = HTTPFault(429)
    assert transient_fault(wrapped) == ("HTTP 429", None) and transient_fault(ValueError("x")) is None
    offline = RuntimeError("not cached")
    offline.__cause__ = OfflineModeIsEnabled("HF_HUB_OFFLINE=1")  # a ConnectionError no wait cures
    assert transient_fault(offline) is None


class OfflineModeIsEnabled(ConnectionError):  # huggingface_hub's, by name
    pass
