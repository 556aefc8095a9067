"""Host-function launchers for :class:`~treegram.serving.StepExecutor`.

A launcher runs the executor's two host functions, *fetch* then *build*, for one decoding
step, and then copies the executor's host bitmask buffer to its device buffer. It is the only
part of the step executor that knows about streams:

- :class:`EagerLauncher` runs ``fetch()``, ``build()`` and the copy synchronously in the
  calling thread when :meth:`~EagerLauncher.launch` is called. It needs no GPU (the device
  buffer may live on the CPU), so the executor's whole state machine is testable on CPU; it
  also serves machines without CUDA.
- :class:`CudaHostLauncher` enqueues the two functions with ``cudaLaunchHostFunc`` on a side
  stream that first waits for the current stream, then enqueues the host-to-device copy of
  the (pinned) host buffer on that side stream, and makes the current stream wait for the
  side stream. Everything it enqueues is capturable into a CUDA graph: captured, the host
  functions become host nodes that run on every replay, the copy becomes a memcpy node. The
  binding is, in order of preference: cuda-python (``cuda.bindings.runtime``, then the older
  ``cuda.cudart``), ``cudaLaunchHostFunc`` from the CUDA runtime library that torch already
  loaded (ctypes), ``cuLaunchHostFunc`` from the driver library ``libcuda.so.1`` (ctypes).
  Nothing is compiled at install time.

Host functions must not call CUDA (that is CUDA's rule for ``cudaLaunchHostFunc``): the
executor's fetch and build only touch host memory, and the device copy is a separate stream
operation enqueued by the launcher. A host function must not raise either; the launcher's
trampoline catches anything that escapes, and keeps it in :attr:`CudaHostLauncher.errors`.

torch is imported when a launcher is constructed, never at import time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import threading
from collections.abc import Callable
from typing import Any, Protocol

from treegram._checks import import_torch
from treegram.errors import ArgumentError, MissingDependencyError

__all__ = ["HostLauncher", "EagerLauncher", "CudaHostLauncher", "default_launcher"]

HostFunction = Callable[[], None]


def _torch() -> Any:
    """Import and return torch, or raise MissingDependencyError."""
    return import_torch("the step executor")


class HostLauncher(Protocol):
    """What :class:`~treegram.serving.StepExecutor` needs from a launcher.

    Attributes
    ----------
    device : torch.device
        Where the executor allocates its device bitmask buffer.
    synchronous : bool
        True when :meth:`launch` has run both host functions before it returns.
    """

    device: Any
    synchronous: bool

    def allocate_host(self, rows: int, words: int) -> Any:
        """An int32 ``[rows, words]`` CPU tensor to stage masks in (pinned when useful)."""

    def launch(self, fetch: HostFunction, build: HostFunction, host: Any, device: Any) -> None:
        """Run ``fetch()`` then ``build()``, then copy ``host`` into ``device``, in order."""


class EagerLauncher:
    """Runs fetch, build and the copy synchronously in the thread that calls :meth:`launch`.

    Parameters
    ----------
    device : str or torch.device, default "cpu"
        Device of the executor's device buffer. With a CUDA device the host buffer is pinned
        and the copy is a blocking ``copy_`` (no graph capture: use CudaHostLauncher).

    Notes
    -----
    Thread safety: stateless apart from ``device``; calls of :meth:`launch` from different
    threads run concurrently, so the executor serialises them itself. Exceptions raised by
    ``fetch`` or ``build`` propagate to the caller of :meth:`launch`.
    """

    synchronous = True

    def __init__(self, device: Any = "cpu") -> None:
        torch = _torch()
        self.device = torch.device(device)

    def allocate_host(self, rows: int, words: int) -> Any:
        """int32 ``[rows, words]`` CPU tensor; pinned when the device is a GPU."""
        torch = _torch()
        host = torch.zeros((rows, words), dtype=torch.int32)
        if self.device.type == "cuda":
            host = host.pin_memory()
        return host

    def launch(self, fetch: HostFunction, build: HostFunction, host: Any, device: Any) -> None:
        """Call ``fetch()``, ``build()``, then ``device.copy_(host)`` (skipped if same)."""
        fetch()
        build()
        if device.data_ptr() != host.data_ptr():
            device.copy_(host)

    def __repr__(self) -> str:
        return f"EagerLauncher(device={str(self.device)!r})"


# --------------------------------------------------------------------------- CUDA bindings

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Binding:
    """One way to call ``cudaLaunchHostFunc(stream, fn, user_data)``."""

    name = ""

    def launch(self, stream: int, fn_ptr: int, user_data: int) -> None:
        raise NotImplementedError


class _CudaPythonBinding(_Binding):
    def __init__(self, module: Any, name: str) -> None:
        self._rt = module
        self.name = name

    def launch(self, stream: int, fn_ptr: int, user_data: int) -> None:
        rt = self._rt
        result = rt.cudaLaunchHostFunc(rt.cudaStream_t(stream), rt.cudaHostFn_t(fn_ptr), user_data)
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            raise RuntimeError(f"cudaLaunchHostFunc failed ({self.name}): {err!r}")


class _CtypesBinding(_Binding):
    def __init__(self, fn: Any, name: str) -> None:
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._fn = fn
        self.name = name

    def launch(self, stream: int, fn_ptr: int, user_data: int) -> None:
        err = self._fn(ctypes.c_void_p(stream), ctypes.c_void_p(fn_ptr), ctypes.c_void_p(user_data))
        if err != 0:
            raise RuntimeError(f"{self.name} failed with CUDA error {err}")


def _runtime_library_names() -> list[str]:
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"]
    found = ctypes.util.find_library("cudart")
    if found:
        names.append(found)
    return names


_BINDINGS = ("auto", "cuda-python", "ctypes")


def _find_binding(kind: str = "auto") -> _Binding:
    """The first usable cudaLaunchHostFunc binding of ``kind``, or MissingDependencyError."""
    if kind not in _BINDINGS:
        raise ArgumentError(f"binding must be one of {_BINDINGS}, got {kind!r}")
    tried = []
    python_modules = () if kind == "ctypes" else ("cuda.bindings.runtime", "cuda.cudart")
    for module_name in python_modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            tried.append(f"{module_name} (not installed)")
            continue
        if hasattr(module, "cudaLaunchHostFunc") and hasattr(module, "cudaHostFn_t"):
            return _CudaPythonBinding(module, module_name)
        tried.append(f"{module_name} (no cudaLaunchHostFunc)")
    for lib_name in _runtime_library_names() if kind != "cuda-python" else ():
        try:
            lib = ctypes.CDLL(lib_name)
            return _CtypesBinding(lib.cudaLaunchHostFunc, f"{lib_name}:cudaLaunchHostFunc")
        except (OSError, AttributeError):
            tried.append(lib_name)
    if kind != "cuda-python":
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            return _CtypesBinding(lib.cuLaunchHostFunc, "libcuda.so.1:cuLaunchHostFunc")
        except (OSError, AttributeError):
            tried.append("libcuda.so.1")
    raise MissingDependencyError(
        "CudaHostLauncher needs cudaLaunchHostFunc: install cuda-python "
        "(pip install cuda-python) or make the CUDA runtime library loadable; tried "
        + ", ".join(tried)
    )


class CudaHostLauncher:
    """Enqueues fetch/build with ``cudaLaunchHostFunc`` and the copy on a side stream.

    Parameters
    ----------
    device : str, int or torch.device, optional
        CUDA device (default: the current one).
    stream : torch.cuda.Stream, optional
        Side stream for the host functions and the copy (default: a new one).
    binding : {"auto", "cuda-python", "ctypes"}, default "auto"
        How to reach ``cudaLaunchHostFunc``: "auto" tries cuda-python, then ctypes.

    Raises
    ------
    MissingDependencyError
        torch is missing, or no binding of ``cudaLaunchHostFunc`` can be loaded.
    ArgumentError
        CUDA is not available, or ``device`` is not a CUDA device.

    Notes
    -----
    :meth:`launch` enqueues, in this order, on the side stream: a wait for the current stream,
    ``fetch``, ``build``, ``device.copy_(host, non_blocking=True)``; then makes the current
    stream wait for the side stream. It is capturable: call it inside ``torch.cuda.graph``
    and every replay runs fetch, build and the copy again. The host functions run on a CUDA
    driver thread and take the GIL; a Python thread that blocks on the GPU while holding the
    GIL would deadlock (torch's synchronize and copy calls release it).

    Thread safety: :meth:`launch` may be called from one thread at a time (stream order is
    the order of calls). Exceptions escaping a host function are caught (they cannot cross
    the driver) and appended to :attr:`errors`.
    """

    synchronous = False

    def __init__(self, device: Any = None, *, stream: Any = None, binding: str = "auto") -> None:
        torch = _torch()
        if not torch.cuda.is_available():
            raise ArgumentError("CudaHostLauncher needs CUDA; use EagerLauncher without a GPU")
        self.device = (
            torch.device("cuda", torch.cuda.current_device())
            if device is None
            else torch.device(device)
        )
        if self.device.type != "cuda":
            raise ArgumentError(f"device must be a CUDA device, got {self.device}")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self._binding = _find_binding(binding)
        self.stream = stream if stream is not None else torch.cuda.Stream(device=self.device)
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._functions: dict[int, HostFunction] = {}
        # One C callback for every host function; user data is the function's key. Kept
        # alive as long as the launcher (graphs hold the raw pointer).
        self._trampoline = _HOST_FN(self._call)
        ptr = ctypes.cast(self._trampoline, ctypes.c_void_p).value
        if ptr is None:  # a live ctypes callback always has an address
            raise RuntimeError("could not take the address of the host-function trampoline")
        self._trampoline_ptr: int = ptr

    @property
    def binding(self) -> str:
        """Which binding enqueues the host functions (for logs and tests)."""
        return self._binding.name

    def _call(self, user_data: int | None) -> None:
        fn = self._functions.get(int(user_data or 0))
        try:
            if fn is not None:
                fn()
        except BaseException as exc:  # noqa: BLE001 - nothing may cross the driver
            with self._lock:
                self.errors.append(exc)

    def _key(self, fn: HostFunction) -> int:
        """A stable non-zero key for ``fn``; the launcher keeps ``fn`` alive."""
        with self._lock:
            for key, known in self._functions.items():
                if known == fn:
                    return key
            key = len(self._functions) + 1
            self._functions[key] = fn
            return key

    def allocate_host(self, rows: int, words: int) -> Any:
        """Pinned int32 ``[rows, words]`` tensor (pinned memory makes the copy capturable)."""
        torch = _torch()
        return torch.zeros((rows, words), dtype=torch.int32).pin_memory()

    def launch(self, fetch: HostFunction, build: HostFunction, host: Any, device: Any) -> None:
        """Enqueue fetch, build and the host-to-device copy after the current stream's work."""
        torch = _torch()
        keys = (self._key(fetch), self._key(build))
        main = torch.cuda.current_stream(self.device)
        side = self.stream
        side.wait_stream(main)
        with torch.cuda.stream(side):
            for key in keys:
                self._binding.launch(int(side.cuda_stream), self._trampoline_ptr, key)
            device.copy_(host, non_blocking=True)
        main.wait_stream(side)

    def __repr__(self) -> str:
        return f"CudaHostLauncher(device={str(self.device)!r}, binding={self.binding!r})"


def default_launcher() -> Any:
    """:class:`CudaHostLauncher` when torch sees a GPU, else :class:`EagerLauncher` (CPU)."""
    torch = _torch()
    if torch.cuda.is_available():
        return CudaHostLauncher()
    return EagerLauncher()
