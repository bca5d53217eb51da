"""Tests for condensation.data.corpus: the R lazy-load container (index, record compression) on
databases built with rdata's writer, the reST stripper, paragraphs, atomic export, and
(integration) the real Debian packages."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import rdata

from condensation.data import corpus
from condensation.data.corpus import (
    austen_novels,
    export_documents,
    paragraphs,
    python_docs,
    read_r_lazyload,
    strip_rest,
    unpack_deb,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# R lazy-load databases, built with rdata's writer
# ---------------------------------------------------------------------------------------------


def r_serialization(value: object) -> bytes:
    """``value`` as R's ``serialize()`` writes it (XDR, version 3, uncompressed)."""
    return rdata.unparser.unparse_data(rdata.conversion.convert_python_to_r_data(value))


# R_compress1/2/3 record layouts: 4-byte big-endian length, then (2 and 3) a type byte.
COMPRESSORS = {
    "zlib (R_compress1)": (True, lambda data: zlib.compress(data)),
    "none (type '0')": (2, lambda data: b"0" + data),
    "zlib (type '1')": (2, lambda data: b"1" + zlib.compress(data)),
    "bzip2 (type '2')": (3, lambda data: b"2" + bz2.compress(data)),
    "xz (type 'Z')": (3, lambda data: b"Z" + lzma.compress(data)),
}


def write_lazyload(prefix: Path, objects: dict[str, object], compressed: object = True, compress=zlib.compress) -> None:
    """Write ``prefix.rdx``/``prefix.rdb`` as R's ``makeLazyLoadDB`` lays them out."""
    rdb, variables = b"", {}
    for name, value in objects.items():
        payload = r_serialization(value)
        blob = payload if compressed in (False, 0) else struct.pack(">I", len(payload)) + compress(payload)
        variables[name] = np.array([len(rdb), len(blob)], dtype=np.int32)
        rdb += blob
    flag = np.array([compressed]) if isinstance(compressed, bool) else np.array([compressed], dtype=np.int32)
    index = {"variables": variables, "references": {}, "compressed": flag}
    Path(f"{prefix}.rdx").write_bytes(gzip.compress(r_serialization(index)))
    Path(f"{prefix}.rdb").write_bytes(rdb)


@pytest.mark.parametrize("compressed, compress", COMPRESSORS.values(), ids=COMPRESSORS)
def test_read_r_lazyload_every_compression(tmp_path, compressed, compress):
    objects = {"first": np.array(["one", "two"]), "second": np.array(["£5", None], dtype=object)}
    write_lazyload(tmp_path / "Rdata", objects, compressed, compress)
    loaded = read_r_lazyload(tmp_path / "Rdata")
    assert list(loaded) == ["first", "second"]
    assert loaded["first"].tolist() == ["one", "two"]
    assert loaded["second"].tolist() == ["£5", None]


def test_read_r_lazyload_uncompressed(tmp_path):
    write_lazyload(tmp_path / "Rdata", {"only": np.array(["plain"])}, compressed=False)
    assert read_r_lazyload(tmp_path / "Rdata")["only"].tolist() == ["plain"]


def test_read_r_lazyload_rejects_damaged_records(tmp_path):
    prefix = tmp_path / "Rdata"
    write_lazyload(prefix, {"x": np.array(["abc"])}, 2, lambda data: b"?" + data)
    with pytest.raises(ValueError, match="compression type byte b'\\?'"):
        read_r_lazyload(prefix)

    write_lazyload(prefix, {"x": np.array(["abc"])}, 7)
    with pytest.raises(ValueError, match="compression setting 7"):
        read_r_lazyload(prefix)

    # The length header must match what the record decompresses to.
    write_lazyload(prefix, {"x": np.array(["abc"])}, True, lambda data: zlib.compress(data + b"extra"))
    with pytest.raises(ValueError, match="header says"):
        read_r_lazyload(prefix)

    write_lazyload(prefix, {"x": np.array(["abc"])})
    rdb = Path(f"{prefix}.rdb")
    rdb.write_bytes(rdb.read_bytes()[:-3])  # truncated database: the index points past its end
    with pytest.raises(ValueError, match="'x' at 0\\+\\d+ lies outside the file"):
        read_r_lazyload(prefix)


def test_read_r_lazyload_index_must_list_variables(tmp_path):
    prefix = tmp_path / "Rdata"
    Path(f"{prefix}.rdx").write_bytes(gzip.compress(r_serialization(np.array(["not", "an", "index"]))))
    Path(f"{prefix}.rdb").write_bytes(b"")
    with pytest.raises(ValueError, match="'variables' list as index"):
        read_r_lazyload(prefix)


def test_read_r_lazyload_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"Rdata\.rdx"):
        read_r_lazyload(tmp_path / "Rdata")
    Path(tmp_path / "Rdata.rdx").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"Rdata\.rdb"):
        read_r_lazyload(tmp_path / "Rdata")


def fake_janeaustenr(root: Path, **override: object) -> Path:
    """An unpacked janeaustenr whose novels are two lines each, unless overridden."""
    prefix = root / corpus.AUSTEN_DATA_PREFIX
    prefix.parent.mkdir(parents=True)
    novels = {name: np.array([name.upper(), "text"]) for name in corpus.AUSTEN_NOVELS}
    write_lazyload(prefix, {**novels, **override})
    return root


def test_austen_novels_joins_lines_and_blanks_na(tmp_path):
    root = fake_janeaustenr(tmp_path, emma=np.array(["EMMA", None, "", "by Jane Austen"], dtype=object))
    novels = austen_novels(root)
    assert list(novels) == list(corpus.AUSTEN_NOVELS)
    assert novels["emma"] == "EMMA\n\n\nby Jane Austen"
    assert novels["persuasion"] == "PERSUASION\ntext"


@pytest.mark.parametrize("bad", [np.array([1, 2], dtype=np.int32), {"a": np.array(["x"])}])
def test_austen_novels_rejects_non_character_objects(tmp_path, bad):
    with pytest.raises(ValueError, match="'persuasion' is missing or not a character vector"):
        austen_novels(fake_janeaustenr(tmp_path, persuasion=bad))


# ---------------------------------------------------------------------------------------------
# Text helpers
# ---------------------------------------------------------------------------------------------


def test_paragraphs():
    text = "First line\nwrapped   here.\n\n\n  Second\tparagraph \n   \nOne\n"
    assert paragraphs(text) == ["First line wrapped here.", "Second paragraph", "One"]
    assert paragraphs(text, min_words=2) == ["First line wrapped here.", "Second paragraph"]
    assert paragraphs("\n\n \n") == []


REST_SNIPPET = """\
.. _intro:

Introduction
============

Call :func:`spam.eggs` or see :ref:`the guide <guide-label>` for *details*
and ``literal`` text::

   >>> spam.eggs()
   42

.. function:: eggs(n)
   :noindex:

   Return *n* eggs, see :class:`~spam.Ham`.

   .. versionchanged:: 3.2
      Added **n**.

.. code-block:: python

   print("hidden")

>>> hidden()
'also hidden'

.. A comment
   spanning two lines.

- A list item
- Another one
"""


def test_strip_rest_keeps_only_prose():
    assert strip_rest(REST_SNIPPET) == (
        "Introduction\n\n"
        "Call spam.eggs or see the guide for details and literal text:\n\n"
        "Return n eggs, see Ham.\n\n"
        "Added n.\n\n"
        "A list item\n\n"
        "Another one"
    )


def test_strip_rest_literal_block_markers():
    assert strip_rest("Example ::\n\n   code\n\nAfter.") == "Example\n\nAfter."
    assert strip_rest("Text\n\n::\n\n   code\n\nAfter.") == "Text\n\nAfter."


def test_export_documents_sanitises_names(tmp_path):
    out = tmp_path / "out"
    paths = export_documents({"library/os.path": "Text é", "odd name?": "x"}, out)
    assert paths == [out / "library__os.path.txt", out / "odd_name_.txt"]
    assert sorted(p.name for p in out.iterdir()) == ["library__os.path.txt", "manifest.json", "odd_name_.txt"]
    assert (out / "library__os.path.txt").read_text(encoding="utf-8") == "Text é"
    with pytest.raises(ValueError, match="collide"):
        export_documents({"a/b": "1", "a__b": "2"}, tmp_path / "clash")


def test_export_documents_is_atomic(tmp_path):
    out = tmp_path / "out"
    export_documents({"old": "old text", "stale": "gone after the next export"}, out)

    # A run that dies half-way (the second document cannot be written) leaves the old
    # directory exactly as it was and no temporary directories behind.
    with pytest.raises(TypeError):
        export_documents({"new": "new text", "broken": 12345}, out)  # type: ignore[dict-item]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "old.txt", "stale.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]

    # A successful run replaces the whole directory: stale files do not survive.
    export_documents({"new": "new text"}, out)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_unpack_deb_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="fetch_debs.sh"):
        unpack_deb(tmp_path / "missing.deb", tmp_path / "x")
    fake = tmp_path / "fake.deb"
    fake.write_bytes(b"not a deb")
    with pytest.raises(RuntimeError, match="dpkg-deb -x"):
        unpack_deb(fake, tmp_path / "x")
    monkeypatch.setattr(corpus.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="dpkg-deb is not on PATH"):
        unpack_deb(fake, tmp_path / "x")


def test_missing_unpacked_data_names_path_and_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"janeaustenr/data/Rdata\.rdx.*fetch_debs\.sh"):
        austen_novels(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"fetch_debs\.sh"):
        python_docs(tmp_path)


# ---------------------------------------------------------------------------------------------
# Integration: the real packages (CI always fetches them, so absence is a failure)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """Callable: package name -> directory it was unpacked into (once per module)."""
    debs_dir = Path(os.environ.get(corpus.DEBS_ENV_VAR) or REPO_ROOT / "resources" / "debs")
    cache: dict[str, Path] = {}

    def get(package: str) -> Path:
        if package not in cache:
            try:
                deb = corpus.find_deb(package, debs_dir)
            except FileNotFoundError as err:
                missing = str(err)  # names the fetch script; fail outside the except block
            else:
                cache[package] = unpack_deb(deb, tmp_path_factory.mktemp(package))
                return cache[package]
            pytest.fail(f"{missing} (or set ${corpus.DEBS_ENV_VAR} to a directory holding it)", pytrace=False)
        return cache[package]

    return get


# The six texts as the project's own R reader produced them before rdata replaced it
# (sha256 of the UTF-8 text, characters, lines, first line); rdata 0.11.2 and 1.1.0 match.
AUSTEN_FINGERPRINTS = {
    "emma": ("dd08b340a56ad4a0a00718d5682528a5a5886ae0aef91c9e0fa528074fa64b75", 883027, 16235, "EMMA"),
    "mansfieldpark": ("e0e9ef3863ea77f51f6070062ee0dd50ad9b933223880617629e4e4963ea40ff", 883278, 15349,
                      "MANSFIELD PARK"),
    "northangerabbey": ("8618a5acf5be50cc6e9b7680c7469fb6012649ab08c709dfc63c6367989fd31d", 433410, 7856,
                        "NORTHANGER ABBEY"),
    "persuasion": ("726513a6c18bb678427bcbcf7c72d0d20816a67c25b0471b26ddcabf3ebac140", 466853, 8328, "Persuasion"),
    "prideprejudice": ("2e44edaa4946d64ad541c68e0224f5d672f43bf3ce2a8a0b0637ad5e02fc6eb3", 684767, 13030,
                       "PRIDE AND PREJUDICE"),
    "sensesensibility": ("0996d90842bbe8093f3b8142c1e77d1b20cff52d1d0615f3ed67733653e74e26", 673687, 12624,
                         "SENSE AND SENSIBILITY"),
}


def test_austen_novels_from_the_package(unpacked):
    novels = austen_novels(unpacked("r-cran-janeaustenr"))
    assert list(novels) == list(corpus.AUSTEN_NOVELS)
    fingerprints = {
        name: (hashlib.sha256(text.encode("utf-8")).hexdigest(), len(text), len(text.split("\n")),
               text.split("\n", 1)[0])
        for name, text in novels.items()
    }
    assert fingerprints == AUSTEN_FINGERPRINTS
    assert "Emma Woodhouse" in novels["emma"]
    assert "It is a truth universally acknowledged" in novels["prideprejudice"]


def test_python_docs_from_the_package(unpacked):
    docs = python_docs(unpacked("python3.11-doc"))
    assert len(docs) > 400
    assert sum(len(text.encode("utf-8")) for text in docs.values()) > 5_000_000

    tutorial = docs["tutorial/controlflow"]
    assert "The for statement in Python differs a bit from what you may be used to in C or Pascal." in tutorial
    for markup in (":func:", ":keyword:", "``", ">>>", ".. index::"):
        assert markup not in tutorial
    # Roles are stripped everywhere, not only on the page checked above.
    assert sum(":func:`" in text for text in docs.values()) <= len(docs) // 100
