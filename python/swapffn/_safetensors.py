"""safetensors read and written with NumPy alone, byte for byte as the engine's writer lays a file out
(docs/FORMATS.md): tensors contiguous in the order given, a compact JSON header with sorted keys
padded with spaces to a multiple of 8 bytes, written to a new file of an unpredictable name in the
same directory (created exclusively, so a planted link is never followed), given the mode of the
file it replaces, and renamed over the target. The reader takes regular files only (a FIFO never
blocks it) and reads them whole.

BF16 tensors travel as uint16 arrays of their bits (NumPy has no bfloat16); `bf16_to_f32` and
`f32_to_bf16` convert exactly as include/swapffn/bf16.hpp does.
"""
from __future__ import annotations

import errno
import json
import math
import os
import stat
import secrets
import struct
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

__all__ = ["read", "write", "bf16_to_f32", "f32_to_bf16"]

_NUMPY = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "F64": "<f8", "U8": "u1"}
_MAX_HEADER = 100 * 1024 * 1024
_MAX_BYTES = 2 ** 63 - 1
_MAX_RANK = 64  # as the engine's reader (safetensors.hpp)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) -> float32, exact."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16): round to nearest even, NaN kept quiet (as float_to_bf16)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = (u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    nan &= (u & np.uint32(0x007FFFFF)) != 0
    return np.where(nan, ((u >> 16) | np.uint32(0x0040)).astype(np.uint16), rounded)


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"header names '{k}' twice")
        out[k] = v
    return out


def read(path) -> Tuple[Dict[str, Tuple[str, np.ndarray]], Dict[str, str]]:
    """Returns ({name: (dtype, array)} in data order, metadata). Raises ValueError naming the file and
    the tensor for a malformed file."""
    where = f"{os.fspath(path)}: "
    # O_NONBLOCK: opening a FIFO would otherwise wait for a writer; it is refused below instead.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(where + "not a regular file")
        blob = f.read()
    if len(blob) != st.st_size:
        raise ValueError(where + f"the file changed size while it was read ({st.st_size} bytes, then {len(blob)})")
    if len(blob) < 8:
        raise ValueError(where + f"{len(blob)} bytes, shorter than the 8-byte header length")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if hlen > _MAX_HEADER or hlen > len(blob) - 8:
        raise ValueError(where + f"header length {hlen} runs past the end of the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + hlen].decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(where + f"malformed JSON header: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(where + "header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(where + "__metadata__ is not an object of strings")
    data = memoryview(blob)[8 + hlen:]
    entries = []
    for name, info in header.items():
        t = where + f"tensor '{name}': "
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(t + "header entry must hold exactly dtype, shape and data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in _NUMPY:
            raise ValueError(t + f"unsupported dtype {dtype!r} (known: {', '.join(_NUMPY)})")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(t + f"shape {shape!r} is not a list of non-negative integers")
        if len(shape) > _MAX_RANK:
            raise ValueError(t + f"shape of {len(shape)} dimensions, more than {_MAX_RANK}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise ValueError(t + f"data_offsets {offsets!r} is not [begin, end]")
        begin, end = offsets
        size = math.prod(shape) * np.dtype(_NUMPY[dtype]).itemsize  # exact: Python ints never wrap
        if size > _MAX_BYTES:
            raise ValueError(t + f"shape {shape} of {dtype} has a byte count that overflows int64")
        if not 0 <= begin <= end <= len(data):
            raise ValueError(t + f"data_offsets [{begin}, {end}) run past the {len(data)}-byte data section")
        if end - begin != size:
            raise ValueError(t + f"byte count mismatch: {end - begin} bytes for shape {shape} {dtype}")
        entries.append((begin, end, name, dtype, shape))
    entries.sort()
    covered = 0
    for begin, end, name, _, _ in entries:
        if begin != covered:
            why = "overlaps the tensor before it" if begin < covered else "bytes before it belong to no tensor"
            raise ValueError(where + f"tensor '{name}' starts at byte {begin}: {why}")
        covered = end
    if covered != len(data):
        raise ValueError(where + f"the data section's last {len(data) - covered} bytes belong to no tensor")
    tensors = {name: (dtype, np.frombuffer(data[begin:end], dtype=_NUMPY[dtype]).reshape(shape).copy())
               for begin, end, name, dtype, shape in entries}
    return tensors, dict(metadata)


def write(path, tensors: Mapping[str, Tuple[str, np.ndarray]],
          metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes {name: (dtype, array)} (BF16 as uint16 bits) in the mapping's order. A failed write
    leaves no file, or the old file, at `path` (a failed sync of the directory after the rename says
    so: the file is then in place, not yet durable)."""
    header, chunks, offset = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        if dtype not in _NUMPY:
            raise ValueError(f"tensor '{name}': unsupported dtype {dtype!r} (known: {', '.join(_NUMPY)})")
        raw = np.ascontiguousarray(arr, dtype=_NUMPY[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": [int(d) for d in np.shape(arr)],
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = dict(metadata)
    # The engine's JSON library keeps object keys sorted and prints them without spaces.
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path = os.fspath(path)
    if "\0" in path:
        raise ValueError(f"cannot write {path!r}: the path holds a NUL byte")
    folder, name = os.path.split(path)
    folder = folder or "."
    try:
        old = os.stat(path, follow_symlinks=False).st_mode
        keep = stat.S_IMODE(old) if stat.S_ISREG(old) else None
    except FileNotFoundError:
        keep = None
    # An unpredictable name created exclusively (O_EXCL|O_NOFOLLOW: a planted link is never
    # followed); a new file gets 0666 minus the umask from the kernel, a replaced one is 0600 until
    # it gets that file's mode.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(16):
        tmp = os.path.join(folder, f".{name[:200]}.tmp-{secrets.token_hex(8)}")
        try:
            fd = os.open(tmp, flags, 0o600 if keep is not None else 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, f"cannot write {path}: no free temporary name in its directory")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for raw in chunks:
                f.write(raw)
            f.flush()
            if keep is not None:
                os.fchmod(f.fileno(), keep)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(dir_fd)  # the rename is durable once the directory is
    except OSError as e:
        if e.errno != errno.EINVAL:  # EINVAL: a filesystem that cannot sync a directory
            raise OSError(e.errno, f"{path} was replaced, but syncing its directory failed: {e.strerror}") from e
    finally:
        os.close(dir_fd)
