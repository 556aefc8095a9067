"""Where kernels are cached: the package folder, an override, or the user's cache directory
seeded from the kernels a built wheel ships (treegram/_kernel_cache.py).

Each case runs in a fresh process on a copy of the package, so numba decides at import time
where the copy's kernels live, as it would after an install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import treegram
from treegram._kernel_cache import _CompilerLockClock

PACKAGE = Path(treegram.__file__).parent

# One small kernel, called once; prints where it was cached and whether it was compiled.
_CALL_ONE_KERNEL = """
import json, numpy as np, treegram
from treegram import kernels
from treegram.warmup import kernel_cache_dir
assert treegram.__file__.startswith({site!r}), treegram.__file__
p = np.array([[-1, 0, 0]], dtype=np.int64)
kernels.tree.links_from_parents(p, np.empty_like(p), np.empty_like(p))
d = kernels.tree.links_from_parents
print(json.dumps({{"dir": kernel_cache_dir(), "compiled": sum(d.stats.cache_misses.values()),
                  "loaded": sum(d.stats.cache_hits.values())}}))
"""


def _copy_package(root: Path) -> Path:
    site = root / "site"
    shutil.copytree(
        PACKAGE, site / "treegram", ignore=shutil.ignore_patterns("_kernel_cache", "__pycache__")
    )
    return site


def _env(site: Path, home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TREEGRAM_KERNEL_CACHE_DIR", "TREEGRAM_KERNEL_CACHE_SEED", "NUMBA_CACHE_DIR")
    }
    env.update(PYTHONPATH=str(site), XDG_CACHE_HOME=str(home), **extra)
    return env


def _run(site: Path, env: dict[str, str], wrap: list[str] | None = None) -> dict:
    code = _CALL_ONE_KERNEL.format(site=str(site))
    cmd = [sys.executable, "-c", code]
    if wrap:
        cmd = [*wrap, " ".join(_quote(c) for c in cmd)]
    proc = subprocess.run(cmd, env=env, cwd=site, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _kernel_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("_tree.links_from_parents-*"))


def test_kernels_are_cached_in_the_package_and_loaded_by_the_next_process(tmp_path):
    site = _copy_package(tmp_path)
    env = _env(site, tmp_path / "home")
    first = _run(site, env)
    assert first["dir"] == str(site / "treegram" / "_kernel_cache")
    assert (first["compiled"], first["loaded"]) == (1, 0)
    assert _kernel_files(site / "treegram" / "_kernel_cache" / "kernels")
    second = _run(site, env)
    assert (second["compiled"], second["loaded"]) == (0, 1)


def test_a_kernel_is_compiled_again_when_a_file_it_reads_changes(tmp_path):
    """A kernel inlines functions and freezes constants of other modules (the array orders
    of kernels/_layout.py): cached machine code built before such a file changed would
    read the wrong arrays, so the stamp covers every file of the kernel packages."""
    site = _copy_package(tmp_path)
    env = _env(site, tmp_path / "home")
    assert _run(site, env)["compiled"] == 1
    assert (_run(site, env)["compiled"], _run(site, env)["loaded"]) == (0, 1)
    layout = site / "treegram" / "kernels" / "_layout.py"
    layout.write_text(layout.read_text() + "\n# an edit\n")
    assert (_run(site, env)["compiled"], _run(site, env)["loaded"]) == (1, 1)


@pytest.mark.parametrize("variable", ["TREEGRAM_KERNEL_CACHE_DIR", "NUMBA_CACHE_DIR"])
def test_an_override_directory_is_seeded_from_the_shipped_kernels(tmp_path, variable):
    site = _copy_package(tmp_path)
    _run(site, _env(site, tmp_path / "home"))  # the "wheel build": ships the kernel
    override = tmp_path / "override"
    target = override if variable == "TREEGRAM_KERNEL_CACHE_DIR" else override / "treegram"
    res = _run(site, _env(site, tmp_path / "home", **{variable: str(override)}))
    assert res["dir"] == str(target)
    assert (res["compiled"], res["loaded"]) == (0, 1)  # the seeded copy, not a compile
    assert _kernel_files(target / "kernels")
    # seeding can be turned off (a cold start, for benchmarks of the JIT itself)
    cold = tmp_path / "cold"
    res = _run(
        site,
        _env(
            site,
            tmp_path / "home",
            TREEGRAM_KERNEL_CACHE_DIR=str(cold),
            TREEGRAM_KERNEL_CACHE_SEED="0",
        ),
    )
    assert (res["compiled"], res["loaded"]) == (1, 0)


def _read_only_wrapper(site: Path) -> list[str] | None:
    """A command prefix under which ``site`` is read-only, or None where this machine has
    no way to make it so (root ignores permission bits: a read-only bind mount instead)."""
    if os.geteuid() != 0:
        return ["sh", "-c"]
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run(
        [unshare, "-m", "sh", "-c", f"mount --bind {site} {site}"],
        capture_output=True,
    )
    if probe.returncode != 0:
        return None
    mount = f"mount --bind {site} {site} && mount -o remount,bind,ro {site} && exec"
    return [unshare, "-m", "sh", "-c", mount + ' "$0" "$@"', "sh", "-c"]


def test_a_read_only_install_caches_in_the_user_directory_seeded_from_the_wheel(tmp_path):
    site = _copy_package(tmp_path)
    home = tmp_path / "home"
    _run(site, _env(site, home))  # the "wheel build": ships the kernel
    shipped = _kernel_files(site / "treegram" / "_kernel_cache" / "kernels")
    wrap = _read_only_wrapper(site)
    if wrap is None:
        pytest.skip("no way to make a folder read-only for root here (no unshare -m)")
    if os.geteuid() != 0:
        for p in [site, *site.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
    try:
        res = _run(site, _env(site, home), wrap=wrap)
    finally:
        if os.geteuid() != 0:
            for p in [site, *site.rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)
    user_dir = home / "treegram" / "kernels"
    assert res["dir"] == str(user_dir)
    assert (res["compiled"], res["loaded"]) == (0, 1)  # loaded from the seeded copy
    assert _kernel_files(user_dir / "kernels") == shipped


def test_lock_clock_counts_overlapping_stalls_once():
    # threads of a worker pool waiting for numba's lock together are one stall
    clock = _CompilerLockClock()
    inside = threading.Barrier(3)

    def stall():
        clock.on_start(None)
        clock.on_start(None)  # a nested acquisition counts once
        inside.wait()
        time.sleep(0.05)
        clock.on_end(None)
        clock.on_end(None)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=stall) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()
    assert clock.seconds() > 0  # a stall under way counts up to now
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - t0
    assert 0.05 <= clock.seconds() <= wall


# Takes the lock of the one kernel by hand, and compiles the kernel once told to (its own
# compile takes the lock again: a count within the process), then lets go.
_HOLD_THE_LOCK = """
import json, sys, numpy as np, treegram
from treegram import _kernel_cache, kernels
d = kernels.tree.links_from_parents
p = np.array([[-1, 0, 0]], dtype=np.int64)
sig = tuple(d.typeof_pyval(a) for a in (p, p, p))
path = _kernel_cache._lock_path(d._cache, sig)
assert _kernel_cache._file_locks.acquire(path, 0)
print("held", flush=True)
sys.stdin.readline()
kernels.tree.links_from_parents(p, np.empty_like(p), np.empty_like(p))
_kernel_cache._file_locks.release(path)
print(json.dumps({"compiled": sum(d.stats.cache_misses.values())}), flush=True)
"""


def test_a_process_waits_for_the_specialization_another_one_compiles(tmp_path):
    # Two processes on one empty cache: the second to miss the kernel waits for the lock
    # the first holds, then loads what it saved instead of compiling the kernel itself.
    site = _copy_package(tmp_path)
    env = _env(site, tmp_path / "home")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_THE_LOCK],
        env=env,
        cwd=site,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        code = _CALL_ONE_KERNEL.format(site=str(site)).replace(
            "p = np.array", "print('calling', flush=True)\np = np.array"
        )
        waiter = subprocess.Popen(
            [sys.executable, "-c", code], env=env, cwd=site, stdout=subprocess.PIPE, text=True
        )
        assert waiter.stdout.readline().strip() == "calling"
        time.sleep(1.0)  # the waiter missed the kernel and waits for the lock
        assert waiter.poll() is None
        # another specialization of the same kernel has a lock of its own: compiled at once
        other = subprocess.run(
            [sys.executable, "-c", code.replace("dtype=np.int64", "dtype=np.int32")],
            env=env,
            cwd=site,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert other.returncode == 0, other.stderr
        assert json.loads(other.stdout.strip().splitlines()[-1])["compiled"] == 1
        assert waiter.poll() is None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert json.loads(holder.stdout.readline()) == {"compiled": 1}
        out, _ = waiter.communicate(timeout=300)
        assert waiter.returncode == 0
        waited = json.loads(out.strip().splitlines()[-1])
        assert (waited["compiled"], waited["loaded"]) == (0, 1)
    finally:
        for proc in (holder, locals().get("waiter")):
            if proc is not None and proc.poll() is None:
                proc.kill()
