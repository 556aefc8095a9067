"""Import stub of torchvision for the engine tests (see tests/engine_setup.py).

The registry's torchvision wheels need CUDA torch, and SGLang's config modules import
torchvision at module level for image models the tests never build. Any attribute is a
placeholder that fails loudly if it is ever called.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _Placeholder:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return _Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a torchvision import stub (tests only)")

    def __mro_entries__(self, bases):
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())
__version__ = "0.0.0+stub"
__path__ = []  # noqa: F811  (a package, so submodules resolve through the finder)


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Placeholder(f"torchvision.{attr}")
