"""A local HTTP server answering the Hugging Face Hub endpoints that the clients call.

Endpoints (``{kind}`` is ``models`` or ``datasets``; ``{rev}`` a branch name or a commit sha,
URL-quoted; ``{repo}`` is ``org/name``):

* ``GET /api/{kind}/{repo}`` and ``GET /api/{kind}/{repo}/revision/{rev}``: repository info
  (``sha``, ``siblings``, ``cardData`` for datasets).
* ``GET /api/{kind}/{repo}/tree/{rev}[/{path}]?recursive=``: a folder's entries.
* ``POST /api/{kind}/{repo}/paths-info/{rev}``: entries of the listed ``paths``.
* ``GET /api/{kind}/{repo}/refs``: branches.
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` and ``/datasets/{repo}/resolve/{rev}/{path}``:
  a file, with ``X-Repo-Commit``, ``ETag`` and ``Content-Length``; ``Range`` honoured.

Errors are 404 with the Hub's ``X-Error-Code``: ``RepoNotFound`` (unknown repository),
``RevisionNotFound`` (unknown branch or sha) and ``EntryNotFound`` (missing file or folder),
which ``huggingface_hub`` raises as ``RepositoryNotFoundError``, ``RevisionNotFoundError`` and
``EntryNotFoundError``.

Faults on request, for the tests of what a real Hub does under load (:class:`Fault`):
``POST /_stand_in/faults`` with a fault's fields as JSON (:func:`inject`) makes the next
``times`` requests whose path matches ``path`` answer with ``status`` (429 with ``Retry-After``,
5xx, 401 for a gated repository with ``X-Error-Code: GatedRepo``), wait ``delay`` seconds first,
close the connection after ``drop_after`` bytes of a file, stall ``delay`` seconds after
``stall_after`` bytes of it, or send it with the byte at ``corrupt_at`` changed.
``GET /_stand_in/requests`` lists every request received so far (method, path, ``Range`` header,
when it arrived, and its status once answered: None for one still waiting, or given up on by a
client that timed out).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from stand_in_hub.repository import FileEntry, Snapshot, scan

_REPO = r"(?P<repo>[^/]+/[^/]+)"
_REV = r"(?P<rev>[^/]+)"
API_ROUTES = (
    ("info", re.compile(rf"^/api/(?P<kind>models|datasets)/{_REPO}(?:/revision/{_REV})?/?$")),
    ("tree", re.compile(rf"^/api/(?P<kind>models|datasets)/{_REPO}/tree/{_REV}(?:/(?P<path>.*?))?/?$")),
    ("paths_info", re.compile(rf"^/api/(?P<kind>models|datasets)/{_REPO}/paths-info/{_REV}$")),
    ("refs", re.compile(rf"^/api/(?P<kind>models|datasets)/{_REPO}/refs$")),
)
RESOLVE_ROUTE = re.compile(rf"^/(?P<datasets>datasets/)?{_REPO}/resolve/{_REV}/(?P<path>.+)$")
TIMESTAMP = "2025-01-01T00:00:00.000Z"


@dataclass
class Fault:
    """A misbehaviour for the next ``times`` requests whose URL path ``path`` (a regex) matches."""

    path: str
    times: int = 1
    status: int | None = None
    """Answer with this status instead (a JSON error body)."""
    retry_after: int | None = None
    """``Retry-After`` seconds, with ``status`` (429, 503)."""
    error_code: str | None = None
    """``X-Error-Code`` with ``status`` (``GatedRepo`` with 401 or 403)."""
    delay: float = 0.0
    """Seconds to wait before answering (past a client's timeout: a slow answer)."""
    drop_after: int | None = None
    """Send this many bytes of the file's body, then close the connection."""
    stall_after: int | None = None
    """Send this many bytes of the file's body, then wait ``delay`` seconds (instead of before
    answering) before the rest: a download in progress, for as long as a test needs one."""
    corrupt_at: int | None = None
    """Send the file whole but with the byte at this offset changed: its size is right, its
    checksum is not."""


def inject(url: str, **fault: object) -> None:
    """Add a :class:`Fault` (its fields as keywords) to the stand-in at ``url``."""
    request = urllib.request.Request(f"{url}/_stand_in/faults", data=json.dumps(asdict(Fault(**fault))).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


def requests_received(url: str) -> list[dict[str, Any]]:
    """Every request the stand-in at ``url`` received so far: method, path, range, ``at`` (when it
    arrived, seconds since the epoch) and status (None until answered: a request the client gave
    up on, past its timeout, may never be)."""
    with urllib.request.urlopen(f"{url}/_stand_in/requests", timeout=10) as answer:
        return json.loads(answer.read())


class HubError(Exception):
    def __init__(self, code: str, message: str, commit: str | None = None):
        super().__init__(message)
        self.code, self.commit = code, commit


class Hub:
    """The repositories of a built tree, read once: branch -> snapshot, and sha -> branch."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.repos = scan(self.root)
        if not self.repos:
            raise FileNotFoundError(f"no repositories under {self.root} (expected <kind>/<org>/<name>/<revision>/)")

    def branches(self, kind: str, repo_id: str) -> dict[str, Snapshot]:
        if (kind, repo_id) not in self.repos:
            raise HubError("RepoNotFound", f"Repository not found: {kind}/{repo_id}")
        return self.repos[kind, repo_id]

    def snapshot(self, kind: str, repo_id: str, revision: str | None) -> Snapshot:
        """The snapshot of a branch name or commit sha (``main`` when None)."""
        branches = self.branches(kind, repo_id)
        revision = revision or "main"
        if revision in branches:
            return branches[revision]
        for snapshot in branches.values():
            if snapshot.commit == revision:
                return snapshot
        raise HubError("RevisionNotFound", f"Invalid rev id: {revision}")

    def info(self, kind: str, snapshot: Snapshot) -> dict[str, Any]:
        siblings = [
            {"rfilename": e.path, "size": e.size, "blobId": e.blob_id,
             **({"lfs": {"sha256": e.sha256, "size": e.size, "pointerSize": 134}} if e.is_lfs else {})}
            for e in snapshot.files.values()
        ]
        info = {"_id": snapshot.commit[:24], "id": snapshot.repo_id, "sha": snapshot.commit, "private": False,
                "disabled": False, "gated": False, "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
                "lastModified": TIMESTAMP, "createdAt": TIMESTAMP}
        if kind == "models":
            info.update(modelId=snapshot.repo_id, library_name="transformers", pipeline_tag="text-generation")
        card = snapshot.directory / "README.md"
        if card.is_file():
            info["cardData"] = _card_data(card.read_text(encoding="utf-8"))
        return info

    def entries(self, snapshot: Snapshot, folder: str, recursive: bool) -> list[dict[str, Any]]:
        """Entries below ``folder`` ('' for the root): direct children, or all descendants."""
        prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
        if prefix and not any(path.startswith(prefix) for path in snapshot.files):
            raise HubError("EntryNotFound", f"{folder} does not exist on {snapshot.revision}", snapshot.commit)
        folders: dict[str, None] = {}
        files = []
        for path, entry in snapshot.files.items():
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix):].split("/")
            for depth in range(1, len(parts) if recursive else min(2, len(parts))):
                folders.setdefault(prefix + "/".join(parts[:depth]))
            if recursive or len(parts) == 1:
                files.append(_file_json(entry))
        return [_folder_json(path) for path in folders] + files

    def paths_info(self, snapshot: Snapshot, paths: list[str]) -> list[dict[str, Any]]:
        found = []
        for path in paths:
            path = path.strip("/")
            if path in snapshot.files:
                found.append(_file_json(snapshot.files[path]))
            elif any(name.startswith(f"{path}/") for name in snapshot.files):
                found.append(_folder_json(path))
        return found

    def refs(self, kind: str, repo_id: str) -> dict[str, Any]:
        branches = [{"name": name, "ref": f"refs/heads/{name}", "targetCommit": snapshot.commit}
                    for name, snapshot in self.branches(kind, repo_id).items()]
        return {"branches": branches, "tags": [], "converts": []}


def _file_json(entry: FileEntry) -> dict[str, Any]:
    """A tree entry; LFS files name their sha256 ``oid`` (repository info calls it ``sha256``)."""
    lfs = {"lfs": {"oid": entry.sha256, "size": entry.size, "pointerSize": 134}} if entry.is_lfs else {}
    return {"type": "file", "oid": entry.blob_id, "size": entry.size, "path": entry.path, **lfs}


def _folder_json(path: str) -> dict[str, Any]:
    return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}


def _card_data(text: str) -> dict[str, Any]:
    match = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    return (yaml.safe_load(match.group(1)) or {}) if match else {}


class HubRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: clients report their own errors
        pass

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_POST(self) -> None:
        self._answer(send_body=True)

    def send_response(self, code: int, message: str | None = None) -> None:
        if self.received is not None:
            self.received["status"] = code
        super().send_response(code, message)

    def _answer(self, send_body: bool) -> None:
        url = urlsplit(self.path)
        # Read a request body first, even one that is refused: a keep-alive connection must not keep it.
        self.body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self.received = None  # a keep-alive connection's handler answers several requests
        if url.path.startswith("/_stand_in/"):
            return self._control(url.path, send_body)
        self.received = self.server.record(self.command, url.path, self.headers.get("Range"))
        self.fault = self.server.take_fault(url.path, self.command)
        if self.fault is not None:
            if self.fault.stall_after is None:
                time.sleep(self.fault.delay)
            if self.fault.status is not None:
                headers = {"X-Error-Message": f"fault injected: {self.fault.status}"}
                if self.fault.retry_after is not None:
                    headers["Retry-After"] = str(self.fault.retry_after)
                if self.fault.error_code:
                    headers["X-Error-Code"] = self.fault.error_code
                return self._send_json({"error": f"fault injected: {self.fault.status}"}, send_body,
                                       status=self.fault.status, headers=headers)
        try:
            resolve = RESOLVE_ROUTE.match(url.path)
            if resolve and self.command in ("GET", "HEAD"):
                return self._send_file(resolve, send_body)
            for name, pattern in API_ROUTES:
                match = pattern.match(url.path)
                if match and (self.command == "POST") == (name == "paths_info"):
                    return self._send_json(getattr(self, f"_{name}")(match, parse_qs(url.query)), send_body)
            self._send_json({"error": f"no such endpoint: {self.command} {url.path}"}, send_body, status=404)
        except HubError as error:
            headers = {"X-Error-Code": error.code, "X-Error-Message": str(error)}
            if error.commit:
                headers["X-Repo-Commit"] = error.commit
            self._send_json({"error": str(error)}, send_body, status=404, headers=headers)

    def _control(self, path: str, send_body: bool) -> None:
        if path == "/_stand_in/faults" and self.command == "POST":
            self.server.add_fault(Fault(**json.loads(self.body)))
            return self._send_json({"faults": len(self.server.faults)}, send_body)
        if path == "/_stand_in/requests":
            with self.server._lock:
                received = [dict(entry) for entry in self.server.received]
            return self._send_json(received, send_body)
        self._send_json({"error": f"no such control: {self.command} {path}"}, send_body, status=404)

    def _snapshot(self, match: re.Match) -> tuple[str, Snapshot]:
        groups = match.groupdict()
        kind = groups.get("kind") or ("datasets" if groups.get("datasets") else "models")
        rev = groups.get("rev")
        return kind, self.server.hub.snapshot(kind, unquote(match["repo"]), unquote(rev) if rev else None)

    def _info(self, match: re.Match, query: dict) -> Any:
        kind, snapshot = self._snapshot(match)
        return self.server.hub.info(kind, snapshot)

    def _tree(self, match: re.Match, query: dict) -> Any:
        _, snapshot = self._snapshot(match)
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        return self.server.hub.entries(snapshot, unquote(match["path"] or ""), recursive)

    def _paths_info(self, match: re.Match, query: dict) -> Any:
        _, snapshot = self._snapshot(match)
        if "json" in (self.headers.get("Content-Type") or ""):
            paths = json.loads(self.body or "{}").get("paths", [])
        else:
            paths = parse_qs(self.body).get("paths", [])
        return self.server.hub.paths_info(snapshot, [paths] if isinstance(paths, str) else paths)

    def _refs(self, match: re.Match, query: dict) -> Any:
        return self.server.hub.refs(match["kind"], unquote(match["repo"]))

    def _send_head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def _send_json(self, obj: Any, send_body: bool, status: int = 200, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self._send_head(status, {"Content-Type": "application/json", "Content-Length": str(len(body)),
                                 **(headers or {})})
        if send_body:
            self.wfile.write(body)

    def _send_file(self, match: re.Match, send_body: bool) -> None:
        _, snapshot = self._snapshot(match)
        path = unquote(match["path"])
        entry = snapshot.files.get(path)
        if entry is None:
            raise HubError("EntryNotFound", f"{path} does not exist on {snapshot.revision}", snapshot.commit)
        start, end, status = _byte_range(self.headers.get("Range"), entry.size)
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(end - start),
                   "ETag": f'"{entry.sha256 if entry.is_lfs else entry.blob_id}"', "X-Repo-Commit": snapshot.commit,
                   "Accept-Ranges": "bytes"}
        if entry.is_lfs:
            headers.update({"X-Linked-ETag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{entry.size}"
        self._send_head(status, headers)
        if send_body:
            with open(snapshot.directory / path, "rb") as handle:
                handle.seek(start)
                body = handle.read(end - start)
            fault = self.fault or Fault(path="")
            if fault.drop_after is not None:  # a connection dropped mid-file
                self.wfile.write(body[: fault.drop_after])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if fault.stall_after is not None:  # a download in progress
                self.wfile.write(body[: fault.stall_after])
                self.wfile.flush()
                time.sleep(fault.delay)
                body = body[fault.stall_after :]
            elif fault.corrupt_at is not None and fault.corrupt_at < len(body):
                body = body[: fault.corrupt_at] + bytes([body[fault.corrupt_at] ^ 0xFF]) + body[fault.corrupt_at + 1 :]
            self.wfile.write(body)


def _byte_range(header: str | None, size: int) -> tuple[int, int, int]:
    """``(start, end, status)`` of a ``Range: bytes=a-b`` request (200 for the whole file)."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header or "")
    if not match or not (match[1] or match[2]):
        return 0, size, 200
    if not match[1]:  # a suffix: the last N bytes
        return max(0, size - int(match[2])), size, 206
    start = min(int(match[1]), size)
    end = min(int(match[2]) + 1, size) if match[2] else size
    return start, max(start, end), 206


class HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: str | Path, host: str = "127.0.0.1", port: int = 0):
        self.hub = Hub(root)
        self.faults: list[Fault] = []
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        super().__init__((host, port), HubRequestHandler)

    def add_fault(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def take_fault(self, path: str, method: str) -> Fault | None:
        """The first fault whose ``path`` matches, one of its ``times`` used up (a dropped
        connection, a stall or a changed byte only by a GET: a HEAD has no body)."""
        with self._lock:
            for fault in self.faults:
                of_body = (fault.drop_after, fault.stall_after, fault.corrupt_at) != (None, None, None)
                if re.search(fault.path, path) and (not of_body or method == "GET"):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def record(self, method: str, path: str, byte_range: str | None) -> dict[str, Any]:
        """A request as it arrives; its handler sets ``status`` when it answers."""
        entry = {"method": method, "path": path, "range": byte_range, "at": time.time(), "status": None}
        with self._lock:
            self.received.append(entry)
        return entry

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


@contextlib.contextmanager
def serve(root: str | Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve the tree at ``root`` from a background thread; yields the URL for ``HF_ENDPOINT``."""
    server = HubServer(root, host, port)
    thread = threading.Thread(target=server.serve_forever, name="stand-in-hub", daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
