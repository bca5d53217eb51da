"""Tests for condensation.corpus: the R serialization reader on hand-built streams, the reST
stripper, paragraphs, atomic export, and (integration) the real Debian packages."""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from pathlib import Path

import pytest

from condensation import corpus
from condensation.corpus import (
    RSpecial,
    RSymbol,
    RVector,
    austen_novels,
    export_documents,
    paragraphs,
    python_docs,
    read_r_lazyload,
    strip_rest,
    unpack_deb,
    unserialize_r,
)

REPO_ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------
# Building R XDR streams by hand
# ---------------------------------------------------------------------------------------------


def i32(*values: int) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


def flags(sxptype: int, *, attr: bool = False, tag: bool = False, levels: int = 0) -> bytes:
    return i32(sxptype | (attr << 9) | (tag << 10) | (levels << 12))


HEADER_V2 = b"X\n" + i32(2, 0x030601, 0x020300)
HEADER_V3 = b"X\n" + i32(3, 0x040201, 0x030500) + i32(5) + b"UTF-8"
NIL = i32(254)


def charsxp(text: str) -> bytes:
    data = text.encode("utf-8")
    levels = 64 if text.isascii() else 8  # ASCII_MASK / UTF8_MASK, as R writes them
    return flags(9, levels=levels) + i32(len(data)) + data


NA_STRING = flags(9) + i32(-1)


def strsxp(*elements: bytes, attributes: bytes | None = None) -> bytes:
    body = flags(16, attr=attributes is not None) + i32(len(elements)) + b"".join(elements)
    return body + (attributes or b"")


def vecsxp(*elements: bytes, attributes: bytes | None = None) -> bytes:
    body = flags(19, attr=attributes is not None) + i32(len(elements)) + b"".join(elements)
    return body + (attributes or b"")


def intsxp(*values: int) -> bytes:
    return flags(13) + i32(len(values)) + i32(*values)


def symsxp(name: str) -> bytes:
    return flags(1) + charsxp(name)


def names_attribute(*names: str, tag: bytes | None = None) -> bytes:
    """A one-cell attribute pairlist ``names = c(...)``; ``tag`` defaults to a new symbol."""
    return flags(2, tag=True) + (tag or symsxp("names")) + strsxp(*map(charsxp, names)) + NIL


# ---------------------------------------------------------------------------------------------
# R serialization
# ---------------------------------------------------------------------------------------------


def test_character_vector_of_two_strings():
    value = unserialize_r(HEADER_V2 + strsxp(charsxp("It is a truth"), charsxp("universally acknowledged")))
    assert isinstance(value, RVector) and value.rtype == "character"
    assert value == ["It is a truth", "universally acknowledged"]
    assert value.attributes == {}


def test_na_string_and_non_ascii_utf8():
    value = unserialize_r(HEADER_V3 + strsxp(charsxp("£5"), NA_STRING, charsxp("")))
    assert value == ["£5", None, ""]


def test_named_list_via_attributes():
    stream = HEADER_V3 + vecsxp(
        strsxp(charsxp("a"), charsxp("b")),
        intsxp(7, -(2**31)),  # second element is NA_integer_
        attributes=names_attribute("letters", "numbers"),
    )
    value = unserialize_r(stream)
    assert value.rtype == "list"
    assert value.names == ["letters", "numbers"]
    assert value.to_dict() == {"letters": ["a", "b"], "numbers": [7, None]}


def test_refsxp_refers_back_to_an_earlier_symbol():
    # The symbol `names` is written in full once (reference table entry 1); the second
    # attribute pairlist refers to it with REFSXP, index packed into the flags word.
    ref_to_first_symbol = i32((1 << 8) | 255)
    inner = strsxp(charsxp("x"), attributes=names_attribute("inner"))
    stream = HEADER_V3 + vecsxp(inner, attributes=names_attribute("outer", tag=ref_to_first_symbol))
    value = unserialize_r(stream)
    assert value.names == ["outer"]
    assert value[0].names == ["inner"]


def test_refsxp_with_unknown_index_is_an_error():
    with pytest.raises(ValueError, match="reference index 3"):
        unserialize_r(HEADER_V3 + i32((3 << 8) | 255))


def test_pairlist_with_symbol_values():
    # list(a = quote(b)) as a pairlist: tag `a`, value the symbol `b`.
    value = unserialize_r(HEADER_V2 + flags(2, tag=True) + symsxp("a") + symsxp("b") + NIL)
    assert value.rtype == "pairlist"
    assert value.to_dict() == {"a": RSymbol("b")}


def test_sentinels():
    codes = [254, 253, 242, 241, 251, 252, 250]
    value = unserialize_r(HEADER_V3 + vecsxp(*(i32(code) for code in codes)))
    assert value == [
        None,
        RSpecial.GLOBALENV,
        RSpecial.EMPTYENV,
        RSpecial.BASEENV,
        RSpecial.MISSINGARG,
        RSpecial.UNBOUNDVALUE,
        RSpecial.BASENAMESPACE,
    ]


def test_doubles_logicals_and_na():
    na_real = struct.pack(">II", 0x7FF00000, 1954)
    doubles = flags(14) + i32(3) + struct.pack(">d", 1.5) + na_real + struct.pack(">d", math.nan)
    logicals = flags(10) + i32(3) + i32(1, 0, -(2**31))
    value = unserialize_r(HEADER_V3 + vecsxp(doubles, logicals))
    assert value[0][0] == 1.5 and value[0][1] is None and math.isnan(value[0][2])
    assert value[1] == [True, False, None]


def test_altrep_compact_sequence_is_expanded():
    # 3:5 as R >= 3.5 writes it: ALTREP class info (class, package, type), then the state
    # (length, start, step) and no attributes.
    info = flags(2) + symsxp("compact_intseq") + flags(2) + symsxp("base") + flags(2) + intsxp(13) + NIL
    state = flags(14) + i32(3) + struct.pack(">3d", 3, 3, 1)
    value = unserialize_r(HEADER_V3 + i32(238) + info + state + NIL)
    assert value.rtype == "integer" and value == [3, 4, 5]


@pytest.mark.parametrize("code, name", [(99, "unknown"), (4, "ENVSXP"), (3, "CLOSXP")])
def test_unsupported_type_names_its_code(code, name):
    with pytest.raises(ValueError, match=rf"type {code} \({name}\)"):
        unserialize_r(HEADER_V3 + vecsxp(flags(code)))


def test_bad_streams_are_rejected_clearly():
    with pytest.raises(ValueError, match="ASCII"):
        unserialize_r(b"A\n" + b"2\n")
    with pytest.raises(ValueError, match="version 4"):
        unserialize_r(b"X\n" + i32(4, 0, 0) + NIL)
    with pytest.raises(ValueError, match="truncated"):
        unserialize_r(HEADER_V3 + strsxp(charsxp("abc"))[:-2])


def test_read_r_lazyload_round_trip(tmp_path):
    objects = {
        "first": strsxp(charsxp("one"), charsxp("two")),
        "second": strsxp(charsxp("three")),
    }
    rdb = b""
    keys = []
    for stream in objects.values():
        payload = HEADER_V3 + stream
        blob = struct.pack(">I", len(payload)) + zlib.compress(payload)  # R_compress1 layout
        keys.append(intsxp(len(rdb), len(blob)))
        rdb += blob
    index = vecsxp(
        vecsxp(*keys, attributes=names_attribute(*objects)),
        vecsxp(attributes=names_attribute()),
        flags(10) + i32(1) + i32(1),  # compressed = TRUE
        attributes=names_attribute("variables", "references", "compressed"),
    )
    (tmp_path / "Rdata.rdx").write_bytes(gzip.compress(HEADER_V3 + index))
    (tmp_path / "Rdata.rdb").write_bytes(rdb)

    loaded = read_r_lazyload(tmp_path / "Rdata")
    assert loaded == {"first": ["one", "two"], "second": ["three"]}


def test_read_r_lazyload_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"Rdata\.rdx"):
        read_r_lazyload(tmp_path / "Rdata")


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


def test_austen_novels_from_the_package(unpacked):
    novels = austen_novels(unpacked("r-cran-janeaustenr"))
    assert sorted(novels) == sorted(corpus.AUSTEN_NOVELS)
    for name, text in novels.items():
        assert len(text) > 400_000, name
    assert novels["emma"].startswith("EMMA")
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
