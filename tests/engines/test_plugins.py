"""treegram's engine plug-ins load in processes the engines start with ``spawn`` (as SGLang
starts its schedulers and vLLM its engine core): a fresh child runs the engine's own
plug-in loader and finds treegram's backend and drop-ins there when the switch is set
(``TREEGRAM_SGLANG=1`` / ``TREEGRAM_VLLM=1``), and nothing of treegram when it is not.
The plug-ins are the entry points of treegram's installed metadata (pyproject.toml's
``sglang.srt.plugins`` and ``vllm.general_plugins``)."""

from __future__ import annotations

import multiprocessing
import queue as queue_module
from importlib.metadata import entry_points

import engine_setup
from engine_setup import require

from treegram.serving import sglang as tg_sglang
from treegram.serving import vllm as tg_vllm


def run_spawned(target, *args, timeout: float = 300) -> dict:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=target, args=(q, *args))
    proc.start()
    try:
        result = q.get(timeout=timeout)
    except queue_module.Empty:  # pragma: no cover - reported as a failure below
        result = {"error": "no answer from the spawned process"}
    proc.join(timeout=60)
    if proc.is_alive():  # pragma: no cover
        proc.kill()
    assert "error" not in result, result["error"]
    return result


def test_entry_points_are_installed():
    """The installed package declares both plug-ins (reinstall after editing
    pyproject.toml: ``pip install -e .``)."""
    sgl = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    vll = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert sgl.get("treegram") == "treegram.serving.sglang:plugin"
    assert vll.get("treegram") == "treegram.serving.vllm:plugin"


def test_plugins_do_nothing_without_their_switch(monkeypatch):
    monkeypatch.delenv("TREEGRAM_SGLANG", raising=False)
    monkeypatch.delenv("TREEGRAM_VLLM", raising=False)
    tg_sglang.plugin()
    tg_vllm.plugin()
    assert not tg_sglang.installed() and not tg_vllm.installed()


def test_sglang_scheduler_started_with_spawn_has_treegram(monkeypatch):
    require("sglang.srt.plugins")
    monkeypatch.setenv("TREEGRAM_SGLANG", "1")
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    found = run_spawned(engine_setup.sglang_scheduler_child)
    assert found["registered"] and found["drop_in"]
    assert found["backends"] == [
        ("SGLangGrammarBackend", "SGLangGrammarBackend"),
        ("ReasonerGrammarBackend", "SGLangGrammarBackend"),  # wrapped as SGLang wraps its own
    ]


def test_vllm_engine_core_started_with_spawn_has_treegram(monkeypatch, tmp_path):
    require("vllm.plugins")
    monkeypatch.setenv("TREEGRAM_VLLM", "1")
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    model_dir = engine_setup.write_vllm_model_dir(tmp_path)
    found = run_spawned(engine_setup.vllm_engine_core_child, str(model_dir))
    assert found == {
        "backend": "VLLMBackend",
        "grammar": "VLLMGrammar",
        "drop_in": True,
    }
