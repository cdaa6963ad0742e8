"""The `.tvsession` file: a zip holding `manifest.json` (the parts, with the format's version)
and, optionally, arrays as `arrays/NAME.npy`.

Reading is reading untrusted input. Before a member is extracted, the whole archive is
checked from its directory: the file's size, a fixed most members, each name one of the two
forms above (no folders, so no path leaves the archive), no member twice, no symlink, no
encryption, only stored or deflated members, each member's size and its expansion over its
compressed size bounded (a zip bomb is refused before a byte is inflated). The manifest is
parsed by `untrusted_json`; an array is read by numpy with `allow_pickle=False`, after its
header says a plain numeric dtype and a shape that its bytes fill. Writing renders the whole
zip in memory and hands it to `atomic_write`.
"""

from __future__ import annotations

import io
import json
import re
import stat
import zipfile
from dataclasses import dataclass, field

import numpy as np

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import atomic_write, regular_file, untrusted_json
from transformer_viewer.model.files.file_errors import read_errors

FORMAT = "transformer-viewer session"
VERSION = (1, 0)  # major: readers refuse a newer one; minor: additions an older reader ignores
MANIFEST = "manifest.json"
MAX_FILE_BYTES = 256 << 20
MAX_MANIFEST_BYTES = 4 << 20  # a session without arrays is a few KB (a 2,048-token prompt ~10 KB)
MAX_ARRAYS = 16
MAX_MEMBERS = 1 + MAX_ARRAYS
MAX_ARRAY_BYTES = 128 << 20
MAX_TOTAL_BYTES = 256 << 20  # everything inflated
MAX_RATIO = 200  # inflated over compressed; deflate reaches ~1000 only on runs of one byte
ARRAY_NAME = re.compile(r"arrays/([a-z][a-z0-9_-]{0,63})\.npy")
NUMERIC_KINDS = "biuf"  # bool, ints, floats: what a session's arrays may hold
FIX = "the file is damaged or is not a transformer-viewer session"


@dataclass
class SessionFile:
    """A session as stored: the manifest's parts (JSON objects by name) and the arrays."""

    parts: dict[str, object]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    version: tuple[int, int] = VERSION


def _bad(path: str, problem: str) -> ModelError:
    return ModelError(f"{path}: {problem}; {FIX}")


# -- writing ------------------------------------------------------------------------------
def session_bytes(parts: dict[str, object], arrays: dict[str, np.ndarray] | None = None) -> bytes:
    """The whole `.tvsession` file in memory (its size is what Save shows before writing)."""
    arrays = arrays or {}
    if len(arrays) > MAX_ARRAYS:
        raise ModelError(f"a session holds at most {MAX_ARRAYS} arrays, not {len(arrays)}")
    manifest = {"format": FORMAT, "version": f"{VERSION[0]}.{VERSION[1]}", "parts": parts}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        zf.writestr(MANIFEST, json.dumps(manifest, ensure_ascii=False, allow_nan=False, indent=1))
        for name, array in sorted(arrays.items()):
            if not ARRAY_NAME.fullmatch(f"arrays/{name}.npy"):
                raise ModelError(f"array name {name!r}: lower-case letters, digits, '_' and '-' only")
            data = io.BytesIO()
            np.save(data, np.ascontiguousarray(array), allow_pickle=False)
            zf.writestr(f"arrays/{name}.npy", data.getvalue())
    return buffer.getvalue()


def write_session(path: str, parts: dict[str, object], arrays: dict[str, np.ndarray] | None = None) -> str:
    """Write the session whole or not at all; returns the absolute path."""
    return atomic_write.write_bytes(path, session_bytes(parts, arrays))


# -- reading ------------------------------------------------------------------------------
def read_session(path: str) -> SessionFile:
    """The session at `path`, every bound checked (see the module's doc); ModelError otherwise."""
    data = _read_file(path)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, EOFError):
        raise _bad(path, "not a zip archive") from None
    with zf:
        members = _checked_members(zf, path)
        if MANIFEST not in members:
            raise _bad(path, f"no {MANIFEST} in the archive")
        parts, version = _manifest(_extract(zf, members[MANIFEST], path), path)
        arrays = {ARRAY_NAME.fullmatch(name).group(1): _array(_extract(zf, info, path), name, path)
                  for name, info in members.items() if name != MANIFEST}
    return SessionFile(parts, arrays, version)


def _read_file(path: str) -> bytes:
    with read_errors(path, "open a .tvsession file", "check the path"):
        data = regular_file.read_at_most(path, MAX_FILE_BYTES)
    if len(data) > MAX_FILE_BYTES:
        raise _bad(path, f"more than the {MAX_FILE_BYTES >> 20} MiB a session may be")
    return data


def _checked_members(zf: zipfile.ZipFile, path: str) -> dict[str, zipfile.ZipInfo]:
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise _bad(path, f"{len(infos):,} members, more than the {MAX_MEMBERS} a session has")
    members: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in infos:
        name = info.filename
        if name != MANIFEST and not ARRAY_NAME.fullmatch(name):
            raise _bad(path, f"a member named {name[:60]!r} (a session holds only {MANIFEST} and arrays/NAME.npy)")
        if name in members:
            raise _bad(path, f"the member {name!r} twice")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise _bad(path, f"the member {name!r} is a symbolic link")
        if info.flag_bits & 0x1:
            raise _bad(path, f"the member {name!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _bad(path, f"the member {name!r} is compressed in a way a session never is")
        limit = MAX_MANIFEST_BYTES if name == MANIFEST else MAX_ARRAY_BYTES
        if info.file_size > limit:
            raise _bad(path, f"the member {name!r} would inflate to {info.file_size:,} bytes, more than {limit:,}")
        if info.file_size > MAX_RATIO * max(info.compress_size, 1) + 1024:
            raise _bad(path, f"the member {name!r} inflates {info.file_size // max(info.compress_size, 1):,}-fold "
                       "(a zip bomb?)")
        total += info.file_size
        members[name] = info
    if total > MAX_TOTAL_BYTES:
        raise _bad(path, f"its members would inflate to {total:,} bytes, more than {MAX_TOTAL_BYTES:,}")
    return members


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> bytes:
    """A member's bytes, never more than its directory entry declared (checked above)."""
    try:
        with zf.open(info) as member:
            data = member.read(info.file_size + 1)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError) as e:
        raise _bad(path, f"the member {info.filename!r} cannot be read ({str(e)[:80]})") from None
    if len(data) != info.file_size:
        raise _bad(path, f"the member {info.filename!r} is not the size its entry says")
    return data


def _manifest(data: bytes, path: str) -> tuple[dict[str, object], tuple[int, int]]:
    doc = untrusted_json.parse(data, f"{path}: {MANIFEST}", FIX)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(path, f"its {MANIFEST} does not say it is a {FORMAT}")
    text = doc.get("version")
    match = re.fullmatch(r"(\d{1,4})\.(\d{1,4})", text) if isinstance(text, str) else None
    if match is None:
        raise _bad(path, f"its {MANIFEST} has no format version such as \"1.0\"")
    version = (int(match.group(1)), int(match.group(2)))
    if version[0] > VERSION[0]:
        raise ModelError(f"{path}: a session of format {text}, written by a newer transformer-viewer (this one "
                         f"reads {VERSION[0]}.x); update transformer-viewer to open it")
    parts = doc.get("parts")
    if not isinstance(parts, dict):
        raise _bad(path, f"its {MANIFEST} has no parts")
    return parts, version


def _array(data: bytes, name: str, path: str) -> np.ndarray:
    """An .npy member: a numeric dtype and a shape its bytes hold, read without pickle."""
    f = io.BytesIO(data)
    try:
        major, _minor = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f, max_header_size=4096)
    except (ValueError, TypeError, OSError, SyntaxError) as e:
        raise _bad(path, f"{name} is not a NumPy array file ({str(e)[:60]})") from None
    if dtype.hasobject or dtype.kind not in NUMERIC_KINDS:
        raise _bad(path, f"{name} holds {dtype} values; a session's arrays hold numbers only, never Python objects")
    if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != len(data) - f.tell():
        raise _bad(path, f"{name}: its shape {tuple(shape)} does not match its bytes")
    f.seek(0)
    try:
        return np.load(f, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise _bad(path, f"{name} cannot be read ({str(e)[:60]})") from None
