"""Shared setup for the benchmark smoke tests in tests/benchmarks: load a script from
benchmarks/ as a module (skipping without the packages it needs), run it, give it a folder of
MaskBench-style schema files, and read back the JSON it wrote."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str, *, register: bool = False) -> ModuleType:
    """Load ``benchmarks/<name>.py`` as the module ``name``.

    ``register`` puts it in ``sys.modules`` under that name first: scripts whose spawned
    worker processes find their target function by module name need it.
    """
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def benchmark_fixture(name: str, *, register: bool = False, requires: tuple[str, ...] = ()) -> Any:
    """A module-scoped fixture that loads ``benchmarks/<name>.py`` once (see load_benchmark),
    skipping its tests where a package it ``requires`` is not installed; a registered module
    leaves ``sys.modules`` again when the test module is done."""

    @pytest.fixture(scope="module")
    def bench() -> Iterator[ModuleType]:
        for package in requires:
            pytest.importorskip(package)
        yield load_benchmark(name, register=register)
        if register:
            sys.modules.pop(name, None)

    return bench


def read_json(path: Path) -> Any:
    """The JSON a benchmark wrote to ``path``."""
    return json.loads(path.read_text(encoding="utf-8"))


def run_benchmark(bench: ModuleType, output: Path, args: list[str]) -> tuple[Any, Any]:
    """Run ``bench.main`` on ``args`` with ``--output output``: what it returned, and the
    JSON it wrote there."""
    result = bench.main([*args, "--output", str(output)])
    return result, read_json(output)


def maskbench_folder(
    folder: Path, schemas: dict[str, Any], tests: dict[str, list[dict]] | None = None
) -> Path:
    """``folder``, made, holding one MaskBench-style file ``<name>.json`` per schema
    (``{"schema": schema, "tests": tests[name]}``; no tests where ``tests`` has none)."""
    folder.mkdir()
    for name, schema in schemas.items():
        text = json.dumps({"schema": schema, "tests": (tests or {}).get(name, [])})
        (folder / f"{name}.json").write_text(text, encoding="utf-8")
    return folder
