"""``backend="te" | "torchao"``: every missing piece is an error that names it."""

import importlib.util

import pytest
import torch
from torch import nn

from icml26.core.errors import UserError
from icml26.quartet2 import backends
from icml26.quartet2.linear import (
    NvidiaNVFP4Linear,
    Quartet2Config,
    QuartetIILinear,
    convert_to_quartet2,
)


def _installed(monkeypatch, *names):
    real = importlib.util.find_spec
    monkeypatch.setattr(backends.importlib.util, "find_spec",
                        lambda n, *a: object() if n in names else (None if n in ("transformer_engine", "torchao") else real(n, *a)))


def test_unknown_backend():
    with pytest.raises(ValueError, match="`backend` must be one of"):
        Quartet2Config(backend="cuda")


@pytest.mark.parametrize("backend, what", [("te", "Transformer Engine"), ("torchao", "torchao")])
def test_library_not_installed(monkeypatch, backend, what):
    _installed(monkeypatch)
    with pytest.raises(UserError, match=f"needs .*{what}.*not installed"):
        backends.check_backend(backend)


@pytest.mark.parametrize("backend", ["te", "torchao"])
def test_no_cuda(monkeypatch, backend):
    _installed(monkeypatch, "transformer_engine", "torchao")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        backends.check_backend(backend)


@pytest.mark.parametrize("backend", ["te", "torchao"])
def test_gpu_capability_too_low(monkeypatch, backend):
    _installed(monkeypatch, "transformer_engine", "torchao")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100")
    with pytest.raises(UserError, match=r"compute capability >= 10.0.*H100 has 9.0"):
        backends.check_backend(backend)


def test_quartet2_recipe_has_no_kernel_backend():
    with pytest.raises(UserError, match="NVIDIA's NVFP4 recipe only"):
        backends.check_backend("te", recipe="quartet2")


def test_layers_and_converter_raise_before_touching_the_model(monkeypatch):
    _installed(monkeypatch)
    with pytest.raises(UserError, match="not installed"):
        NvidiaNVFP4Linear(32, 32, backend="te")
    with pytest.raises(UserError, match="recipe only"):
        QuartetIILinear(128, 128, backend="torchao")
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32))
    with pytest.raises(UserError, match="torchao.*not installed"):
        convert_to_quartet2(model, recipe="nvidia", config=Quartet2Config(recipe="nvidia", backend="torchao"))
    assert all(type(m) is nn.Linear for m in model)


def test_simulate_is_the_default():
    assert Quartet2Config().backend == "simulate"
    assert Quartet2Config.from_dict({"version": 1, "recipe": "nvidia"}).backend == "simulate"
