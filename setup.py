"""Build hook: compile treegram's numba kernels into the wheel.

Everything else about the package is declared in pyproject.toml. When a wheel is built (a
plain ``pip install .`` builds one), the package copied into the build folder runs
:func:`treegram.warm_up` in a subprocess, which compiles every kernel into
``treegram/_kernel_cache/`` there; the wheel ships those files, and a fresh install's first
run loads machine code instead of compiling it (see treegram/_kernel_cache.py). numba keys
each file by its own version, the source's hash and the CPU, so a wheel built on one machine
and installed on another compiles whatever does not match, as if nothing were shipped.

Editable installs skip it (their kernels are cached beside the sources on first use), and so
does ``TREEGRAM_PRECOMPILE_KERNELS=0``. A failure here is reported and never fails the
build: the package then compiles its kernels on first use.
"""

from __future__ import annotations

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

_WARM_UP = (
    "import treegram\n"
    "r = treegram.warm_up()\n"
    "print(f'treegram: {r.compiled} kernel specializations compiled in {r.kernel_seconds:.0f} s"
    " into {r.cache_dir}')\n"
)


class BuildPyWithKernels(build_py):
    """``build_py``, then the kernels compiled into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or self.dry_run:
            return
        if os.environ.get("TREEGRAM_PRECOMPILE_KERNELS", "1") == "0":
            return
        build_lib = os.path.abspath(self.build_lib)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("TREEGRAM_KERNEL_CACHE_DIR", "NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")
        }
        env["PYTHONPATH"] = build_lib
        try:
            done = subprocess.run([sys.executable, "-c", _WARM_UP], env=env, cwd=build_lib)
        except OSError as exc:
            self.warn(f"treegram kernels not precompiled ({exc}); they compile on first use")
            return
        if done.returncode != 0:
            self.warn("treegram kernels not precompiled (see above); they compile on first use")


setup(cmdclass={"build_py": BuildPyWithKernels})
