"""Reading a GGUF model file: metadata, tensor layout and dequantized weights.

The header (metadata and tensor table) is parsed here with :mod:`struct`: the ``gguf``
package's reader builds a numpy view per array element and takes seconds on a vocabulary of
49,152 tokens and as many merges. Quantized tensor blocks are decoded by ``gguf.quants``
(imported when weights are read).

The GGUF layout (version 2 and 3, little-endian): magic ``GGUF``, version (u32), tensor
count and metadata count (u64), the metadata (key string, value type u32, value), the tensor
table (name, number of dimensions u32, dimensions u64 each, ggml type u32, data offset u64),
then the tensor data, aligned to ``general.alignment`` (default 32). Strings are a u64
length and UTF-8 bytes; arrays are an element type (u32), a count (u64) and the elements.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from treegram.errors import ArgumentError, MissingDependencyError

__all__ = ["GGUFFile", "GGUFTensor", "read_gguf", "require_gguf"]

_MAGIC = b"GGUF"
_SCALARS = {  # value type -> struct format
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8"}
_NUMPY.update({11: "<i8", 12: "<f8"})
_STRING, _ARRAY = 8, 9
_F32, _F16 = 0, 1


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file.

    Attributes
    ----------
    name : str
    shape : tuple of int
        In numpy order (the file stores the fastest-varying dimension first; this is the
        reverse), e.g. ``(out_features, in_features)`` for a weight matrix.
    ggml_type : int
        The ggml type id (0 float32, 1 float16, 2 Q4_0, 3 Q4_1, 8 Q8_0, ...).
    offset : int
        Byte offset of the data in the file.
    nbytes : int
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int


class _Cursor:
    """Sequential reads over a bytes-like buffer."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: Any) -> None:
        self.buf = buf
        self.pos = 0

    def scalar(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        (n,) = struct.unpack_from("<Q", self.buf, self.pos)
        start = self.pos + 8
        self.pos = start + n
        return bytes(self.buf[start : self.pos]).decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.scalar("<I")
            count = self.scalar("<Q")
            if etype == _STRING:
                return [self.string() for _ in range(count)]
            if etype in _NUMPY:
                dtype = np.dtype(_NUMPY[etype])
                arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
                self.pos += dtype.itemsize * count
                return arr.tolist()
            return [self.value(etype) for _ in range(count)]  # nested arrays
        fmt = _SCALARS.get(vtype)
        if fmt is None:
            raise ValueError(f"unknown GGUF value type {vtype}")
        return self.scalar(fmt)


class GGUFFile:
    """A GGUF file opened read-only (memory-mapped).

    Parameters
    ----------
    path : str or Path

    Attributes
    ----------
    path : Path
    version : int
    metadata : dict
        Key to value (str, int, float, bool or list).
    tensors : dict of str to GGUFTensor
        In file order.

    Raises
    ------
    ArgumentError
        The file is not a GGUF file of version 2 or 3, or is truncated.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse()
        except (struct.error, ValueError, UnicodeDecodeError) as exc:
            raise ArgumentError(f"{self.path}: not a readable GGUF file ({exc})") from None

    def _parse(self) -> None:
        cur = _Cursor(self._map)
        if bytes(self._map[:4]) != _MAGIC:
            raise ValueError("bad magic")
        cur.pos = 4
        self.version = cur.scalar("<I")
        if self.version not in (2, 3):
            raise ValueError(f"GGUF version {self.version} (2 and 3 are read)")
        n_tensors = cur.scalar("<Q")
        n_kv = cur.scalar("<Q")
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            self.metadata[key] = cur.value(cur.scalar("<I"))
        table = []
        for _ in range(n_tensors):
            name = cur.string()
            dims = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
            table.append((name, tuple(reversed(dims)), cur.scalar("<I"), cur.scalar("<Q")))
        align = int(self.metadata.get("general.alignment", 32))
        data_start = -(-cur.pos // align) * align
        self.tensors: dict[str, GGUFTensor] = {}
        for name, shape, ggml_type, offset in table:
            nbytes = _nbytes(shape, ggml_type)
            start = data_start + offset
            if start + nbytes > len(self._map):
                raise ValueError(f"tensor {name} runs past the end of the file")
            self.tensors[name] = GGUFTensor(name, shape, ggml_type, start, nbytes)

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes of tensor ``name`` (uint8, a read-only view of the file)."""
        t = self.tensors[name]
        return np.frombuffer(self._map, dtype=np.uint8, count=t.nbytes, offset=t.offset)

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` decoded to float32, in numpy order (see :class:`GGUFTensor`); a
        new array (it outlives :meth:`close`)."""
        t = self.tensors[name]
        raw = self.raw(name)
        if t.ggml_type == _F32:
            return raw.view(np.float32).reshape(t.shape).copy()
        if t.ggml_type == _F16:
            return raw.view(np.float16).astype(np.float32).reshape(t.shape)
        gguf = require_gguf()
        qtype = gguf.GGMLQuantizationType(t.ggml_type)
        rows = raw.reshape(math.prod(t.shape[:-1]), -1)
        return gguf.quants.dequantize(rows, qtype).reshape(t.shape)

    def close(self) -> None:
        """Unmap the file (views returned by :meth:`raw` must be gone: ``BufferError``
        otherwise)."""
        self._map.close()


def _nbytes(shape: tuple[int, ...], ggml_type: int) -> int:
    count = math.prod(shape)
    if ggml_type == _F32:
        return 4 * count
    if ggml_type == _F16:
        return 2 * count
    gguf = require_gguf()
    try:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
    except (KeyError, ValueError):
        raise ValueError(f"unknown ggml type {ggml_type}") from None
    if shape[-1] % block:
        raise ValueError(f"row length {shape[-1]} is not a multiple of the block ({block})")
    return count // block * size


def require_gguf() -> Any:
    """The ``gguf`` package, or :class:`~treegram.errors.MissingDependencyError`."""
    try:
        import gguf
        import gguf.quants  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "reading a GGUF model needs the gguf package: pip install 'treegram[model]' "
            "(or pip install gguf==0.19.0)"
        ) from None
    return gguf


def read_gguf(path: str | Path) -> GGUFFile:
    """Open a GGUF file (see :class:`GGUFFile`)."""
    return GGUFFile(path)
