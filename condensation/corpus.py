"""Offline English text for the pipeline, taken from two Debian packages.

Where the text comes from
-------------------------
``tools/fetch_debs.sh`` downloads two ``.deb`` files with ``apt-get download`` (nothing is
installed) into ``resources/debs/``; :func:`unpack_deb` extracts them with ``dpkg-deb -x``.

* ``r-cran-janeaustenr`` (Debian bookworm: 1.0.0-1) ships Jane Austen's six completed novels as
  R lazy-load data (``usr/lib/R/site-library/janeaustenr/data/Rdata.{rdx,rdb}``), one character
  vector of lines per novel. :func:`read_r_lazyload` reads that database with a small,
  self-contained reader for R's XDR serialization format (no R needed), and
  :func:`austen_novels` joins the lines into text. Licence: the R package is MIT-licensed
  (Julia Silge); the novels themselves are in the public domain.
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
import codecs
import enum
import gzip
import lzma
import math
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from .io import atomic_path, write_manifest

__all__ = [
    "AUSTEN_NOVELS",
    "DEBS_ENV_VAR",
    "DEFAULT_DEBS_DIR",
    "FETCH_HINT",
    "RReference",
    "RSpecial",
    "RSymbol",
    "RVector",
    "austen_novels",
    "export_documents",
    "find_deb",
    "paragraphs",
    "python_docs",
    "read_r_lazyload",
    "strip_rest",
    "unpack_deb",
    "unserialize_r",
]

FETCH_HINT = "run `bash tools/fetch_debs.sh` from the repository root to download it"
DEBS_ENV_VAR = "CONDENSATION_DEBS_DIR"
DEFAULT_DEBS_DIR = Path(__file__).resolve().parent.parent / "resources" / "debs"

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
# R serialization (XDR format, versions 2 and 3)
# --------------------------------------------------------------------------------------------

# SEXP type codes (R's Rinternals.h) ...
NILSXP, SYMSXP, LISTSXP, LANGSXP, CHARSXP = 0, 1, 2, 6, 9
LGLSXP, INTSXP, REALSXP, CPLXSXP, STRSXP = 10, 13, 14, 15, 16
VECSXP, EXPRSXP, RAWSXP = 19, 20, 24
# ... and the pseudo-types that only occur in serialized streams (R's serialize.c).
ALTREP_SXP = 238
BASEENV_SXP = 241
EMPTYENV_SXP = 242
PERSISTSXP = 247
PACKAGESXP = 248
NAMESPACESXP = 249
BASENAMESPACE_SXP = 250
MISSINGARG_SXP = 251
UNBOUNDVALUE_SXP = 252
GLOBALENV_SXP = 253
NILVALUE_SXP = 254
REFSXP = 255

# Names for error messages, so an unsupported object says what it is.
_TYPE_NAMES = {
    0: "NILSXP", 1: "SYMSXP", 2: "LISTSXP", 3: "CLOSXP", 4: "ENVSXP", 5: "PROMSXP",
    6: "LANGSXP", 7: "SPECIALSXP", 8: "BUILTINSXP", 9: "CHARSXP", 10: "LGLSXP", 13: "INTSXP",
    14: "REALSXP", 15: "CPLXSXP", 16: "STRSXP", 17: "DOTSXP", 18: "ANYSXP", 19: "VECSXP",
    20: "EXPRSXP", 21: "BCODESXP", 22: "EXTPTRSXP", 23: "WEAKREFSXP", 24: "RAWSXP",
    25: "S4SXP", 238: "ALTREP_SXP", 239: "ATTRLISTSXP", 240: "ATTRLANGSXP",
    241: "BASEENV_SXP", 242: "EMPTYENV_SXP", 243: "BCREPREF", 244: "BCREPDEF",
    245: "GENERICREFSXP", 246: "CLASSREFSXP", 247: "PERSISTSXP", 248: "PACKAGESXP",
    249: "NAMESPACESXP", 250: "BASENAMESPACE_SXP", 251: "MISSINGARG_SXP",
    252: "UNBOUNDVALUE_SXP", 253: "GLOBALENV_SXP", 254: "NILVALUE_SXP", 255: "REFSXP",
}

# Bits of the packed flags word that precedes every item (bit 8, "is object", is not needed).
_HAS_ATTR = 1 << 9
_HAS_TAG = 1 << 10
# CHARSXP encoding bits, stored in the "levels" part of the flags word (flags >> 12).
_BYTES_MASK = 1 << 1
_LATIN1_MASK = 1 << 2
_UTF8_MASK = 1 << 3
_ASCII_MASK = 1 << 6

_NA_INTEGER = -(2**31)
_NA_REAL_LOW_WORD = 1954  # R's NA_real_ is a NaN whose low 32 bits are 1954


class RSpecial(enum.Enum):
    """The singleton objects R writes as bare type codes (NULL itself becomes ``None``)."""

    GLOBALENV = GLOBALENV_SXP
    EMPTYENV = EMPTYENV_SXP
    BASEENV = BASEENV_SXP
    BASENAMESPACE = BASENAMESPACE_SXP
    UNBOUNDVALUE = UNBOUNDVALUE_SXP
    MISSINGARG = MISSINGARG_SXP


@dataclass(frozen=True)
class RSymbol:
    name: str


@dataclass(frozen=True)
class RReference:
    """An environment R wrote by name instead of by value: a namespace, a package
    environment, or a "persistent" reference resolved by the reader's hook (not done here)."""

    kind: str  # "namespace", "package" or "persistent"
    names: tuple[str | None, ...]


class RVector(list):
    """An R vector or pairlist: a Python list of its elements plus R type and attributes.

    Elements: ``str`` (or ``bytes`` for strings marked as bytes) / ``None`` for NA in character
    vectors; ``bool``/``int``/``float``/``complex`` or ``None`` for NA in atomic vectors; any
    decoded object in lists. ``attributes`` maps attribute names (``"names"``, ``"class"``, ...)
    to decoded values.
    """

    def __init__(self, rtype: str, items: Iterable[object] = (), attributes: dict[str, object] | None = None):
        super().__init__(items)
        self.rtype = rtype
        self.attributes = attributes or {}

    @property
    def names(self) -> list[str | None] | None:
        names = self.attributes.get("names")
        return list(names) if names is not None else None

    def to_dict(self) -> dict[str, object]:
        """Elements keyed by their names (a named R list becomes a dict)."""
        names = self.names
        if names is None or len(names) != len(self):
            raise ValueError(f"R {self.rtype} of length {len(self)} has no complete names attribute")
        return {str(name): value for name, value in zip(names, self)}

    def __repr__(self) -> str:
        head = list.__repr__(self[:5]) if len(self) > 5 else list.__repr__(self)
        more = f" +{len(self) - 5} more" if len(self) > 5 else ""
        return f"RVector({self.rtype!r}, {head}{more}, attributes={sorted(self.attributes)})"


class _XdrReader:
    """Cursor over one XDR-format R serialization stream (everything big-endian)."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0
        # Symbols and environments are written once and later referred to by 1-based index.
        self.refs: list[object] = []
        self.native_encoding = "utf-8"

    # -- primitives -------------------------------------------------------------------------

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            available = len(self.data) - self.pos
            raise ValueError(f"truncated R serialization: need {n} bytes at offset {self.pos}, have {available}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def length(self) -> int:
        n = self.int()
        if n == -1:  # long vector: length follows as two 32-bit halves
            upper, lower = struct.unpack(">II", self._take(8))
            n = (upper << 32) | lower
        elif n < 0:
            raise ValueError(f"bad R vector length {n} at offset {self.pos - 4}")
        return n

    # -- stream -----------------------------------------------------------------------------

    def read_header(self) -> None:
        magic = self._take(2)
        if magic != b"X\n":
            if magic[:2] == b"\x1f\x8b":
                raise ValueError("R serialization is gzip-compressed; decompress it first")
            kinds = {b"A\n": "ASCII", b"B\n": "native binary"}
            kind = kinds.get(magic, repr(magic))
            raise ValueError(f"unsupported R serialization format {kind}; only XDR ('X\\n') is read")
        version = self.int()
        self.int()  # R version that wrote the stream
        self.int()  # minimal R version able to read it
        if version == 3:
            # Version 3 records the writer's native encoding, used for unflagged strings.
            encoding = self._take(self.int()).decode("ascii")
            self.native_encoding = _python_encoding(encoding)
        elif version != 2:
            raise ValueError(f"unsupported R serialization version {version} (only 2 and 3)")

    def read_item(self) -> object:
        return self._read_body(self.int())

    def _read_body(self, flags: int) -> object:
        sxptype = flags & 0xFF
        if sxptype == NILVALUE_SXP:
            return None
        if sxptype in _SPECIAL_CODES:
            return RSpecial(sxptype)
        if sxptype == REFSXP:
            index = flags >> 8 or self.int()  # large indices do not fit in the flags word
            if not 1 <= index <= len(self.refs):
                raise ValueError(f"R reference index {index} out of range (table has {len(self.refs)})")
            return self.refs[index - 1]
        if sxptype == SYMSXP:
            symbol = RSymbol(_as_str(self.read_item()))
            self.refs.append(symbol)
            return symbol
        if sxptype in (PERSISTSXP, NAMESPACESXP, PACKAGESXP):
            kind = {PERSISTSXP: "persistent", NAMESPACESXP: "namespace", PACKAGESXP: "package"}[sxptype]
            ref = RReference(kind, tuple(self._string_list()))
            self.refs.append(ref)
            return ref
        if sxptype in (LISTSXP, LANGSXP):
            return self._read_pairlist(flags)
        if sxptype == CHARSXP:
            return self._read_charsxp(flags)
        if sxptype == ALTREP_SXP:
            return self._read_altrep()

        reader = _VECTOR_READERS.get(sxptype)
        if reader is None:
            name = _TYPE_NAMES.get(sxptype, "unknown")
            raise ValueError(
                f"unsupported R SEXP type {sxptype} ({name}) at offset {self.pos - 4}; "
                "this reader only handles vectors, lists, symbols and pairlists"
            )
        rtype, read_elements = reader
        vector = RVector(rtype, read_elements(self, self.length()))
        if flags & _HAS_ATTR:
            vector.attributes = self._read_attributes()
        return vector

    def _read_charsxp(self, flags: int) -> str | bytes | None:
        n = self.int()
        value: str | bytes | None
        if n == -1:
            value = None  # NA_character_
        else:
            raw = self._take(n)
            levels = flags >> 12
            if levels & _BYTES_MASK:
                value = raw
            elif levels & _UTF8_MASK:
                value = raw.decode("utf-8")
            elif levels & _LATIN1_MASK:
                value = raw.decode("latin-1")
            elif levels & _ASCII_MASK:
                value = raw.decode("ascii")
            else:
                try:
                    value = raw.decode(self.native_encoding)
                except UnicodeDecodeError:
                    value = raw.decode("latin-1")  # never fails; old files are often latin-1
        if flags & _HAS_ATTR:
            self.read_item()  # old writers attached attributes to CHARSXPs; R ignores them too
        return value

    def _read_pairlist(self, flags: int) -> RVector:
        # Pairlists are linked cells (attributes?, tag?, car, cdr); walk the cdr chain in a
        # loop rather than recursing, so long pairlists cannot hit the recursion limit.
        rtype = "pairlist" if flags & 0xFF == LISTSXP else "language"
        values: list[object] = []
        tags: list[str | None] = []
        attributes: dict[str, object] = {}
        while True:
            if flags & _HAS_ATTR:
                cell_attributes = self._read_attributes()
                if not values:  # only the head cell's attributes belong to the object
                    attributes = cell_attributes
            tag = self.read_item() if flags & _HAS_TAG else None
            tags.append(tag.name if isinstance(tag, RSymbol) else None if tag is None else str(tag))
            values.append(self.read_item())
            flags = self.int()
            if flags & 0xFF not in (LISTSXP, LANGSXP):
                break
        tail = self._read_body(flags)
        if tail is not None:
            raise ValueError(f"dotted R pairlist (cdr is {type(tail).__name__}, not NULL)")
        if any(tag is not None for tag in tags):
            attributes = {"names": tags, **attributes}
        return RVector(rtype, values, attributes)

    def _read_attributes(self) -> dict[str, object]:
        pairlist = self.read_item()
        if not isinstance(pairlist, RVector) or pairlist.rtype != "pairlist":
            raise ValueError(f"R attributes must be a pairlist, got {pairlist!r}")
        return {str(name): value for name, value in zip(pairlist.names or [], pairlist)}

    def _string_list(self) -> list[str | None]:
        # PERSISTSXP/NAMESPACESXP/PACKAGESXP payload: a 0 placeholder, a length, then CHARSXPs.
        if self.int() != 0:
            raise ValueError("names of R namespaces or packages are not supported in this form")
        return [_as_str(self.read_item()) for _ in range(self.int())]

    def _read_altrep(self) -> object:
        # R >= 3.5 may write compact sequences (e.g. 1:n) and "wrapper" objects in ALTREP form:
        # class info, state, attributes. Expand the two simple classes; refuse the rest.
        info, state, attributes = self.read_item(), self.read_item(), self.read_item()
        class_name = info[0].name if isinstance(info, RVector) and info and isinstance(info[0], RSymbol) else "?"
        if class_name in ("compact_intseq", "compact_realseq"):
            n, start, step = state
            values = [start + i * step for i in range(int(n))]
            if class_name == "compact_intseq":
                vector = RVector("integer", [int(v) for v in values])
            else:
                vector = RVector("double", values)
        elif class_name.startswith("wrap_") and isinstance(state, RVector) and isinstance(state[0], RVector):
            vector = RVector(state[0].rtype, state[0], dict(state[0].attributes))
        else:
            raise ValueError(f"unsupported R ALTREP class {class_name!r} (SEXP type {ALTREP_SXP})")
        if isinstance(attributes, RVector) and attributes.rtype == "pairlist":
            vector.attributes.update(zip(attributes.names or [], attributes))
        return vector


_SPECIAL_CODES = frozenset(member.value for member in RSpecial)


def _read_logicals(reader: _XdrReader, n: int) -> list[bool | None]:
    return [None if v == _NA_INTEGER else bool(v) for v in struct.unpack(f">{n}i", reader._take(4 * n))]


def _read_integers(reader: _XdrReader, n: int) -> list[int | None]:
    return [None if v == _NA_INTEGER else v for v in struct.unpack(f">{n}i", reader._take(4 * n))]


def _read_doubles(reader: _XdrReader, n: int) -> list[float | None]:
    raw = reader._take(8 * n)
    values: list[float | None] = list(struct.unpack(f">{n}d", raw))
    for i, value in enumerate(values):
        # NA_real_ becomes None; an ordinary NaN stays NaN, as in R.
        if value is not None and math.isnan(value):
            if struct.unpack_from(">I", raw, 8 * i + 4)[0] == _NA_REAL_LOW_WORD:
                values[i] = None
    return values


def _read_complex(reader: _XdrReader, n: int) -> list[complex]:
    parts = struct.unpack(f">{2 * n}d", reader._take(16 * n))
    return [complex(parts[2 * i], parts[2 * i + 1]) for i in range(n)]


def _read_strings(reader: _XdrReader, n: int) -> list[str | bytes | None]:
    values = []
    for _ in range(n):
        flags = reader.int()
        if flags & 0xFF != CHARSXP:
            raise ValueError(f"R character vector element has SEXP type {flags & 0xFF}, expected CHARSXP ({CHARSXP})")
        values.append(reader._read_charsxp(flags))
    return values


def _read_items(reader: _XdrReader, n: int) -> list[object]:
    return [reader.read_item() for _ in range(n)]


def _read_raw(reader: _XdrReader, n: int) -> list[int]:
    return list(reader._take(n))


_VECTOR_READERS = {
    LGLSXP: ("logical", _read_logicals),
    INTSXP: ("integer", _read_integers),
    REALSXP: ("double", _read_doubles),
    CPLXSXP: ("complex", _read_complex),
    STRSXP: ("character", _read_strings),
    VECSXP: ("list", _read_items),
    EXPRSXP: ("expression", _read_items),
    RAWSXP: ("raw", _read_raw),
}


def _as_str(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise ValueError(f"expected an R string, got {value!r}")


def _python_encoding(r_encoding: str) -> str:
    # R writes names such as "UTF-8", "latin1", "ISO-8859-1", "CP1252"; Python knows most.
    try:
        return codecs.lookup(r_encoding).name
    except LookupError:
        return "utf-8"


def unserialize_r(data: bytes) -> object:
    """Decode one R serialization stream (XDR format, version 2 or 3; not compressed).

    R ``NULL`` becomes ``None``, vectors and pairlists :class:`RVector`, symbols
    :class:`RSymbol`, special environments and markers :class:`RSpecial`. Unsupported types
    (closures, environments, bytecode, ...) raise ``ValueError`` naming the type code.
    """
    reader = _XdrReader(bytes(data))
    reader.read_header()
    value = reader.read_item()
    if reader.pos != len(reader.data):
        raise ValueError(f"{len(reader.data) - reader.pos} unread bytes after the R object")
    return value


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
    record is a compressed serialization of one object. Returns ``{name: decoded object}``.
    """
    prefix = Path(prefix)
    rdx_path, rdb_path = Path(f"{prefix}.rdx"), Path(f"{prefix}.rdb")
    for path in (rdx_path, rdb_path):
        if not path.is_file():
            raise FileNotFoundError(f"R lazy-load database file not found: {path}")
    raw_index = rdx_path.read_bytes()
    if raw_index[:2] == b"\x1f\x8b":
        raw_index = gzip.decompress(raw_index)
    index = unserialize_r(raw_index)
    if not isinstance(index, RVector) or index.rtype != "list":
        raise ValueError(f"{rdx_path}: expected a named list as index, got {index!r}")
    index_fields = index.to_dict()
    variables = index_fields.get("variables")
    if not isinstance(variables, RVector):
        raise ValueError(f"{rdx_path}: index has no 'variables' list")
    compressed = index_fields.get("compressed")
    compressed_flag = compressed[0] if isinstance(compressed, RVector) and compressed else False
    compression = int(compressed_flag or 0)  # TRUE means 1 (zlib)

    rdb = rdb_path.read_bytes()
    objects: dict[str, object] = {}
    for name, key in variables.to_dict().items():
        offset, length = int(key[0]), int(key[1])
        if offset < 0 or offset + length > len(rdb):
            raise ValueError(f"{rdb_path}: record {name!r} at {offset}+{length} lies outside the file ({len(rdb)} bytes)")
        objects[name] = unserialize_r(_decompress_lazyload_blob(rdb[offset : offset + length], compression))
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
        if not isinstance(lines, RVector) or lines.rtype != "character":
            raise ValueError(f"janeaustenr object {name!r} is missing or not a character vector")
        novels[name] = "\n".join(_as_str(line) or "" for line in lines)  # NA lines count as blank
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
    out: list[str] = []
    skip_deeper_than: int | None = None  # drop blank lines and lines indented more than this
    header_indent: int | None = None  # inside a directive's argument/option lines
    header_is_prose = False
    in_doctest = False
    list_indent: int | None = None  # indentation of the bullets of the list we are in

    for raw_line in source.expandtabs(8).splitlines():
        line = raw_line.rstrip()
        indent = _indent(line)
        if not line:
            out.append("")
            header_indent = None  # a blank line ends a directive's header
            in_doctest = False
            continue
        if skip_deeper_than is not None:
            if indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        if in_doctest:
            continue  # a doctest block runs to the next blank line
        if header_indent is not None:
            if indent > header_indent:
                if header_is_prose and not _OPTION_RE.match(line):
                    out.append(line.strip())
                continue
            header_indent = None

        directive = _DIRECTIVE_RE.match(line)
        if directive:
            name, argument = directive.group(2).lower(), (directive.group(3) or "").strip()
            name = name.rsplit(":", 1)[-1] if name.startswith(("py:", "rst:", "std:")) else name
            if name in _NON_PROSE_DIRECTIVES or line.lstrip().startswith(".. |"):
                skip_deeper_than = indent  # the whole block, body included
                continue
            header_indent, header_is_prose = indent, name in _ADMONITIONS or name in _VERSION_DIRECTIVES
            if name in _ADMONITIONS and argument:
                out.append(argument)
            elif name in _VERSION_DIRECTIVES:
                # ".. versionchanged:: 3.3 Some text": keep what follows the version number(s)
                skip = _VERSION_DIRECTIVES[name]
                rest = argument.split(None, skip)[skip:]
                if rest:
                    out.append(rest[0])
            continue
        if _EXPLICIT_MARKUP_RE.match(line):
            skip_deeper_than = indent  # comment, hyperlink target or footnote, with its block
            continue

        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_doctest = True
            continue
        if _ADORNMENT_RE.match(line) or _TABLE_BORDER_RE.match(line):
            out.append("")  # keeps a heading a paragraph of its own
            continue

        if stripped.endswith("::"):
            # Literal block follows, indented deeper than this line. "Text::" shows "Text:",
            # "Text ::" and a bare "::" show nothing.
            skip_deeper_than = indent
            body = stripped[:-2]
            stripped = body.rstrip() if not body or body[-1].isspace() else body + ":"
            if not stripped:
                continue
        if stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1:
            stripped = re.sub(r"\s*\|\s*", "  ", stripped[1:-1])  # grid-table row
        if list_indent is not None and indent < list_indent:
            list_indent = None
        bullet = _BULLET_RE.match(stripped)
        # A list starts after a blank line; without one, "+ 1" is a wrapped line of text.
        if bullet and (not out or out[-1] == "" or indent == list_indent):
            list_indent = indent
            out.append("")  # each list item becomes a paragraph
            stripped = stripped[bullet.end() :]
        out.append(stripped)

    # Inline markup is replaced per paragraph, because roles and links often wrap lines.
    return "\n\n".join(" ".join(_strip_inline(par).split()) for par in paragraphs("\n".join(out)))


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
