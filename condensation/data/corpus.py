"""Offline English text for the pipeline, taken from two Debian packages.

Where the text comes from
-------------------------
``tools/fetch_debs.sh`` downloads two ``.deb`` files with ``apt-get download`` (nothing is
installed) into ``resources/debs/``; :func:`unpack_deb` extracts them with ``dpkg-deb -x``.

* ``r-cran-janeaustenr`` (Debian bookworm: 1.0.0-1) ships Jane Austen's six completed novels as
  R lazy-load data (``usr/lib/R/site-library/janeaustenr/data/Rdata.{rdx,rdb}``), one character
  vector of lines per novel. :func:`read_r_lazyload` reads that database (no R needed): it
  looks each record up in the index and decompresses it, and the ``rdata`` package decodes the
  R serialization inside; :func:`austen_novels` joins the lines into text. Licence: the R
  package is MIT-licensed (Julia Silge); the novels themselves are in the public domain.
* ``python3.11-doc`` ships the reStructuredText sources of the Python 3.11 documentation
  (``usr/share/doc/python3.11/html/_sources/**/*.rst.txt``). :func:`python_docs` strips the
  markup into plain prose with a few regular expressions. Licence: Python Software Foundation
  Licence (PSF-2.0), per the documentation's own ``license`` and ``copyright`` pages (which
  are part of the corpus) and the package's ``copyright`` file; code examples in it are
  additionally under the Zero-Clause BSD licence.

:func:`paragraphs` splits any of these texts into paragraphs, and :func:`export_documents`
writes a collection of documents to a directory atomically.
"""

from __future__ import annotations

import bz2
import lzma
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from condensation.config.corpora import CORPORA
from condensation.runtime.io import atomic_path, write_manifest

__all__ = [
    "AUSTEN_NOVELS",
    "DEBS_ENV_VAR",
    "DEFAULT_DEBS_DIR",
    "FETCH_HINT",
    "austen_novels",
    "export_documents",
    "find_deb",
    "paragraphs",
    "python_docs",
    "read_r_lazyload",
    "strip_rest",
    "unpack_deb",
]

FETCH_HINT = "run `bash tools/fetch_debs.sh` from the repository root to download it"
DEBS_ENV_VAR = "CONDENSATION_DEBS_DIR"
DEFAULT_DEBS_DIR = Path(__file__).resolve().parents[2] / "resources" / "debs"

AUSTEN_NOVELS = (
    "emma",
    "mansfieldpark",
    "northangerabbey",
    "persuasion",
    "prideprejudice",
    "sensesensibility",
)
AUSTEN_DATA_PREFIX = Path("usr/lib/R/site-library/janeaustenr/data/Rdata")
# The -doc package puts the HTML under python3.11/ and symlinks python3.11-doc/html to it;
# any python3.X directory is accepted so a newer package keeps working.
PYTHON_SOURCES_GLOB = "usr/share/doc/python3*/html/_sources"


# --------------------------------------------------------------------------------------------
# Debian packages
# --------------------------------------------------------------------------------------------


def find_deb(package: str, debs_dir: str | os.PathLike | None = None) -> Path:
    """Return the ``<package>_*.deb`` file in ``debs_dir``.

    ``debs_dir`` defaults to ``$CONDENSATION_DEBS_DIR`` or ``resources/debs`` in the repository.
    """
    if debs_dir is None:
        debs_dir = os.environ.get(DEBS_ENV_VAR) or DEFAULT_DEBS_DIR
    matches = sorted(Path(debs_dir).glob(f"{package}_*.deb"))
    if not matches:
        raise FileNotFoundError(f"no {package}_*.deb in {debs_dir}; {FETCH_HINT}")
    if len(matches) > 1:
        # Refuse to guess: the corpus must not change silently with whichever file sorts last.
        raise ValueError(f"several {package} packages in {debs_dir}: {[m.name for m in matches]}; keep one")
    return matches[0]


def unpack_deb(deb_path: str | os.PathLike, dest_dir: str | os.PathLike) -> Path:
    """Extract the files of a ``.deb`` into ``dest_dir`` with ``dpkg-deb -x`` (no install)."""
    deb = Path(deb_path)
    if not deb.is_file():
        raise FileNotFoundError(f"Debian package not found: {deb}; {FETCH_HINT}")
    dpkg_deb = shutil.which("dpkg-deb")
    if dpkg_deb is None:
        raise FileNotFoundError(
            "dpkg-deb is not on PATH; it is part of the `dpkg` package (present on every "
            "Debian/Ubuntu system)"
        )
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([dpkg_deb, "-x", str(deb), str(dest)], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as err:
        raise RuntimeError(f"dpkg-deb -x {deb} failed: {err.stderr.strip()}") from err
    return dest


# --------------------------------------------------------------------------------------------
# R lazy-load databases (the serialized objects themselves are decoded by `rdata`)
# --------------------------------------------------------------------------------------------


def _unserialize_r(data: bytes) -> object:
    """Decode one R serialization (gzip/bzip2/xz or uncompressed) with ``rdata``: character
    vectors become NumPy arrays of ``str`` (``None`` for NA), named lists ``dict``."""
    # deferred: rdata, of the workflow extra, pulls in xarray; measure imports this module without it
    import rdata  # noqa: PLC0415

    # extension=".rds": a bare serialization, which is what lazy-load records are.
    return rdata.conversion.convert(rdata.parser.parse_data(data, extension=".rds"))


def _decompress_lazyload_blob(blob: bytes, compression: int) -> bytes:
    """Undo R's ``R_compress1/2/3``: a 4-byte big-endian uncompressed length, then the data
    (compression 1: zlib; 2 and 3: one type byte '0' none, '1' zlib, '2' bzip2, 'Z' xz)."""
    if compression == 0:
        return blob
    if len(blob) < 4:
        raise ValueError("R lazy-load record shorter than its 4-byte length header")
    expected = struct.unpack(">I", blob[:4])[0]
    if compression == 1:
        data = zlib.decompress(blob[4:])
    elif compression in (2, 3):
        method, payload = blob[4:5], blob[5:]
        decoders = {b"0": bytes, b"1": zlib.decompress, b"2": bz2.decompress, b"Z": lzma.decompress}
        if method not in decoders:
            raise ValueError(f"unknown R lazy-load compression type byte {method!r}")
        data = decoders[method](payload)
    else:
        raise ValueError(f"unknown R lazy-load compression setting {compression}")
    if len(data) != expected:
        raise ValueError(f"R lazy-load record decompressed to {len(data)} bytes, header says {expected}")
    return data


def read_r_lazyload(prefix: str | os.PathLike) -> dict[str, object]:
    """Read every object of an R lazy-load database ``prefix.rdx`` + ``prefix.rdb``.

    The ``.rdx`` index (gzip-compressed serialization) is a named list with ``variables``
    (name -> (offset, length) in the ``.rdb``), ``references`` and ``compressed``; each ``.rdb``
    record is a compressed serialization of one object. ``rdata`` decodes serializations but
    not this container, so the index lookup and the record decompression are done here.
    Returns ``{name: decoded object}`` in index order.
    """
    prefix = Path(prefix)
    rdx_path, rdb_path = Path(f"{prefix}.rdx"), Path(f"{prefix}.rdb")
    for path in (rdx_path, rdb_path):
        if not path.is_file():
            raise FileNotFoundError(f"R lazy-load database file not found: {path}")
    index = _unserialize_r(rdx_path.read_bytes())
    if not isinstance(index, dict) or not isinstance(index.get("variables"), dict):
        raise ValueError(f"{rdx_path}: expected a named list with a 'variables' list as index, got {index!r}")
    compressed = index.get("compressed")
    compression = int(compressed[0]) if compressed is not None and len(compressed) else 0  # TRUE means 1 (zlib)

    rdb = rdb_path.read_bytes()
    objects: dict[str, object] = {}
    for name, key in index["variables"].items():
        name, offset, length = str(name), int(key[0]), int(key[1])  # rdata's names are np.str_
        if offset < 0 or offset + length > len(rdb):
            raise ValueError(
                f"{rdb_path}: record {name!r} at {offset}+{length} lies outside the file ({len(rdb)} bytes)"
            )
        objects[name] = _unserialize_r(_decompress_lazyload_blob(rdb[offset : offset + length], compression))
    return objects


# --------------------------------------------------------------------------------------------
# Jane Austen
# --------------------------------------------------------------------------------------------


def austen_novels(unpacked_root: str | os.PathLike) -> dict[str, str]:
    """The six novels from an unpacked ``r-cran-janeaustenr``: ``{name: text}`` with the
    package's lines joined by ``"\\n"`` (names as in :data:`AUSTEN_NOVELS`)."""
    prefix = Path(unpacked_root) / AUSTEN_DATA_PREFIX
    if not Path(f"{prefix}.rdx").is_file():
        raise FileNotFoundError(
            f"janeaustenr data not found at {prefix}.rdx/.rdb; unpack r-cran-janeaustenr_*.deb "
            f"into {unpacked_root} (see unpack_deb) — if the .deb is missing, {FETCH_HINT}"
        )
    objects = read_r_lazyload(prefix)
    novels: dict[str, str] = {}
    for name in AUSTEN_NOVELS:
        lines = objects.get(name)
        # rdata gives a character vector as a 1-d array of str, with None for NA lines.
        is_character = isinstance(lines, np.ndarray) and lines.ndim == 1
        if not is_character or not all(line is None or isinstance(line, str) for line in lines):
            raise ValueError(f"janeaustenr object {name!r} is missing or not a character vector")
        novels[name] = "\n".join(line or "" for line in lines)  # NA lines count as blank
    return novels


# --------------------------------------------------------------------------------------------
# Python documentation (reStructuredText -> plain prose)
# --------------------------------------------------------------------------------------------

# Directives whose content is code, tables of data or navigation rather than prose.
_NON_PROSE_DIRECTIVES = frozenset(
    """code-block sourcecode code literalinclude include parsed-literal productionlist doctest
    testcode testoutput testsetup testcleanup toctree index highlight image figure raw math
    csv-table tabularcolumns graphviz miscnews limited-api-list audit-event-table
    program-output""".split()
)
# Directives whose argument (and its continuation lines) is itself prose.
_ADMONITIONS = frozenset("note warning tip hint important caution attention danger error seealso".split())
# Directives whose argument starts with version numbers (how many), followed by prose.
_VERSION_DIRECTIVES = {"versionadded": 1, "versionchanged": 1, "deprecated": 1, "deprecated-removed": 2}

_DIRECTIVE_RE = re.compile(r"^(\s*)\.\.\s+(?:\|[^|]+\|\s+)?([\w:.-]+)::(?:\s+(.*))?$")
_EXPLICIT_MARKUP_RE = re.compile(r"^(\s*)\.\.(?:\s|$)")  # comments, targets, footnotes
_OPTION_RE = re.compile(r"^\s*:[\w .-]+:(?:\s.*)?$")
_ADORNMENT_RE = re.compile(r"^\s*([=\-~*^\"'`#+.:_])\1{2,}\s*$")
_TABLE_BORDER_RE = re.compile(r"^\s*(?:[=\-]{2,}(?:\s+[=\-]{2,})+|\+(?:[-=]+\+)+)\s*$")
_BULLET_RE = re.compile(r"^([*+-]|#\.|\d+[.)])\s+(?=\S)")

_ROLE_RE = re.compile(r":(?:[\w-]+:)*([\w-]+):`([^`]+)`")
_LINK_RE = re.compile(r"`([^`<]*?)\s*<[^`>]*>`_{1,2}")  # `text <url>`_
_REF_RE = re.compile(r"`([^`]+)`_{1,2}")  # `text`_
_INLINE_TARGET_RE = re.compile(r"_`([^`]+)`")
_LITERAL_RE = re.compile(r"``(.+?)``")
_INTERPRETED_RE = re.compile(r"`([^`]+)`")
_STRONG_RE = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*")
_EMPHASIS_RE = re.compile(r"(?<![\w*\\])\*(?=\S)([^*]*?\S)\*(?![\w*])")
_SIMPLE_REF_RE = re.compile(r"\b([A-Za-z][\w.-]*[A-Za-z0-9])_(?=[\s.,;:!?)\]]|$)")
_FOOTNOTE_REF_RE = re.compile(r"\s*\[(?:#\w*|\*|\d+)\]_")
_SUBSTITUTION_RE = re.compile(r"\|([\w .-]+)\|(?!_)")


def _role_text(match: re.Match) -> str:
    role, content = match.group(1), match.group(2)
    explicit = re.match(r"^(.*?)\s*<[^<>]*>$", content, re.S)
    if explicit and explicit.group(1):
        return explicit.group(1)  # :ref:`title <label>` shows the title
    content = content.lstrip("!")
    if content.startswith("~"):
        content = content[1:].rsplit(".", 1)[-1]  # Sphinx shows only the last component
    if role in ("pep", "rfc"):
        return f"{role.upper()} {content}"
    return content


def _strip_inline(text: str) -> str:
    text = _ROLE_RE.sub(_role_text, text)
    text = _LINK_RE.sub(lambda m: m.group(1), text)
    text = _INLINE_TARGET_RE.sub(r"\1", text)
    text = _LITERAL_RE.sub(r"\1", text)
    text = _REF_RE.sub(r"\1", text)
    text = _INTERPRETED_RE.sub(r"\1", text)
    text = _STRONG_RE.sub(r"\1", text)
    text = _EMPHASIS_RE.sub(r"\1", text)
    text = _FOOTNOTE_REF_RE.sub("", text)
    text = _SIMPLE_REF_RE.sub(r"\1", text)
    text = _SUBSTITUTION_RE.sub(r"\1", text)
    return text.replace("\\ ", "").replace("\\", "")  # escapes: "\ " joins markup, "\*" is "*"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def strip_rest(source: str) -> str:
    """Turn reStructuredText into plain prose: paragraphs separated by blank lines, each on one
    line. Drops directives' own lines and options, code (``::`` blocks, ``>>>`` sessions, code
    directives), comments, targets, headings' underlines and table borders; keeps the prose
    inside directives such as ``function`` or ``note``; replaces roles and inline markup by
    their text. Deliberately approximate: a few regexes, no parser.
    """
    stripper = _RestStripper()
    for raw_line in source.expandtabs(8).splitlines():
        stripper.feed(raw_line.rstrip())
    # Inline markup is replaced per paragraph, because roles and links often wrap lines.
    return "\n\n".join(" ".join(_strip_inline(par).split()) for par in paragraphs("\n".join(stripper.out)))


class _RestStripper:
    """The line-by-line state of :func:`strip_rest`."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.skip_deeper_than: int | None = None  # drop blank lines and lines indented more than this
        self.header_indent: int | None = None  # inside a directive's argument/option lines
        self.header_is_prose = False
        self.in_doctest = False
        self.list_indent: int | None = None  # indentation of the bullets of the list we are in

    def feed(self, line: str) -> None:
        indent = _indent(line)
        if not line:
            self.out.append("")
            self.header_indent = None  # a blank line ends a directive's header
            self.in_doctest = False
            return
        if self.skip_deeper_than is not None:
            if indent > self.skip_deeper_than:
                return
            self.skip_deeper_than = None
        if self.in_doctest:
            return  # a doctest block runs to the next blank line
        if self.header_indent is not None:
            if indent > self.header_indent:
                if self.header_is_prose and not _OPTION_RE.match(line):
                    self.out.append(line.strip())
                return
            self.header_indent = None
        directive = _DIRECTIVE_RE.match(line)
        if directive:
            self._directive(line, indent, directive)
        elif _EXPLICIT_MARKUP_RE.match(line):
            self.skip_deeper_than = indent  # comment, hyperlink target or footnote, with its block
        else:
            self._text(line, indent)

    def _directive(self, line: str, indent: int, directive: re.Match) -> None:
        name, argument = directive.group(2).lower(), (directive.group(3) or "").strip()
        name = name.rsplit(":", 1)[-1] if name.startswith(("py:", "rst:", "std:")) else name
        if name in _NON_PROSE_DIRECTIVES or line.lstrip().startswith(".. |"):
            self.skip_deeper_than = indent  # the whole block, body included
            return
        self.header_indent, self.header_is_prose = indent, name in _ADMONITIONS or name in _VERSION_DIRECTIVES
        if name in _ADMONITIONS and argument:
            self.out.append(argument)
        elif name in _VERSION_DIRECTIVES:
            # ".. versionchanged:: 3.3 Some text": keep what follows the version number(s)
            skip = _VERSION_DIRECTIVES[name]
            rest = argument.split(None, skip)[skip:]
            if rest:
                self.out.append(rest[0])

    def _text(self, line: str, indent: int) -> None:
        stripped = line.strip()
        if stripped.startswith(">>>"):
            self.in_doctest = True
            return
        if _ADORNMENT_RE.match(line) or _TABLE_BORDER_RE.match(line):
            self.out.append("")  # keeps a heading a paragraph of its own
            return
        if stripped.endswith("::"):
            # Literal block follows, indented deeper than this line. "Text::" shows "Text:",
            # "Text ::" and a bare "::" show nothing.
            self.skip_deeper_than = indent
            body = stripped[:-2]
            stripped = body.rstrip() if not body or body[-1].isspace() else body + ":"
            if not stripped:
                return
        if stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1:
            stripped = re.sub(r"\s*\|\s*", "  ", stripped[1:-1])  # grid-table row
        if self.list_indent is not None and indent < self.list_indent:
            self.list_indent = None
        bullet = _BULLET_RE.match(stripped)
        # A list starts after a blank line; without one, "+ 1" is a wrapped line of text.
        if bullet and (not self.out or self.out[-1] == "" or indent == self.list_indent):
            self.list_indent = indent
            self.out.append("")  # each list item becomes a paragraph
            stripped = stripped[bullet.end() :]
        self.out.append(stripped)


def python_docs(unpacked_root: str | os.PathLike) -> dict[str, str]:
    """Prose from an unpacked ``python3.11-doc``: ``{relative path without .rst.txt: text}``,
    sorted by path; documents that are empty once stripped (pure tables of contents) are left
    out."""
    root = Path(unpacked_root)
    # python3.11/html and the python3.11-doc/html symlink are the same directory: dedupe.
    candidates = sorted({path.resolve() for path in root.glob(PYTHON_SOURCES_GLOB) if path.is_dir()})
    if not candidates:
        raise FileNotFoundError(
            f"Python documentation sources not found under {root / PYTHON_SOURCES_GLOB}; unpack "
            f"python3.11-doc_*.deb into {root} (see unpack_deb) — if the .deb is missing, {FETCH_HINT}"
        )
    if len(candidates) > 1:
        raise ValueError(f"several Python documentation trees under {root}: {[str(c) for c in candidates]}")
    sources = candidates[0]
    documents: dict[str, str] = {}
    for path in sorted(sources.rglob("*.rst.txt")):
        name = path.relative_to(sources).as_posix()[: -len(".rst.txt")]
        text = strip_rest(path.read_text(encoding="utf-8", errors="replace"))
        if text:
            documents[name] = text
    return documents


# --------------------------------------------------------------------------------------------
# Paragraphs and export
# --------------------------------------------------------------------------------------------


def paragraphs(text: str, min_words: int = 1) -> list[str]:
    """Split ``text`` at blank lines, join each paragraph's lines (and any run of whitespace)
    with single spaces, and keep paragraphs with at least ``min_words`` words (never empty)."""
    result = []
    for block in re.split(r"\n[ \t\r\f\v]*\n", text):
        words = block.split()
        if words and len(words) >= min_words:
            result.append(" ".join(words))
    return result


def _file_name(name: str) -> str:
    flat = re.sub(r"[/\\]+", "__", name.strip("/\\"))
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", flat)
    if safe.strip(".") == "":
        raise ValueError(f"document name {name!r} gives no usable file name")
    return f"{safe}.txt"


def export_documents(documents: Mapping[str, str], out_dir: str | os.PathLike) -> list[Path]:
    """Write each document to ``out_dir/<name>.txt`` (UTF-8) and return the paths, in order.

    Names are flattened (``a/b`` -> ``a__b``) and reduced to ``[A-Za-z0-9._-]``. The files are
    written into a temporary directory beside ``out_dir`` that then replaces it by rename, so
    ``out_dir`` is either the old complete directory or the new complete one, never partial.
    """
    final = Path(out_dir)
    file_names = [_file_name(name) for name in documents]
    clashes = sorted(name for name, count in Counter(file_names).items() if count > 1)
    if clashes:
        raise ValueError(f"document names collide after sanitising: {clashes}")

    with atomic_path(final) as staging:
        staging.mkdir()
        for file_name, text in zip(file_names, documents.values()):
            with open(staging / file_name, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
        write_manifest(staging, kind="corpus")
    return [final / file_name for file_name in file_names]



def build_corpus_dir(source: str, deb_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, str]:
    """A built-in corpus (``config.corpora.CORPORA[source]``) as ``out_dir``: its Debian package
    unpacked into a scratch directory, its texts exported one file each. Returns the documents."""
    with tempfile.TemporaryDirectory() as scratch:
        unpack_deb(deb_path, scratch)
        documents = CORPORA[source].read(scratch)
    export_documents(documents, out_dir)
    return documents
