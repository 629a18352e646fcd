"""The kernel preflight (training/kernels.py): flash-linear-attention with triton >= 3.4, < 3.7.1 on a Hopper GPU
is routed to transformers' torch form of the chunked gated delta rule, or refused before the model loads.

No GPU here: the versions and the device are faked (``gather_facts``), and fla's kernel is a stand-in bound through
transformers' own hub wrapper, whose backward raises what fla 0.6's does."""

import functools
import sys
import types

import pytest
import torch

from tests.training.conftest import tiny_run_config
from training import kernels
from training.events import read_events
from training.trainer import train

HOPPER = kernels.KernelFacts(fla="0.6.0", triton="3.6.0", tilelang=False, device_type="cuda", capability=(9, 0),
                             device_name="NVIDIA H200")
CPU = kernels.KernelFacts(fla=None, triton=None, tilelang=False, device_type="cpu", capability=None, device_name=None)


class _FlaBackward(torch.autograd.Function):
    """Passes its input through; its backward raises as fla 0.6's gated chunk backward does on Hopper."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(kernels.FLA_HOPPER_ERROR + ": `pip install tilelang`")


@pytest.fixture
def fla_on_hopper(monkeypatch):
    """Qwen3.5's chunked rule bound to a stand-in fla kernel (through transformers' real hub wrapper), and the
    facts of an H200 with fla 0.6 and triton 3.6. Yields the modeling module."""
    from transformers.integrations.hub_kernels import use_kernel_func_from_hub_with_fallback
    from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling

    torch_function = modeling.torch_chunk_gated_delta_rule.__wrapped__

    @functools.wraps(torch_function)  # same parameters: the wrapper passes on only the kernel's own
    def fla_chunk(*args, **kwargs):
        out, state = torch_function(*args, **kwargs)
        return _FlaBackward.apply(out), state

    monkeypatch.setitem(sys.modules, "crucible_fake_fla", types.SimpleNamespace(crucible_chunk=fla_chunk))
    wrapper = use_kernel_func_from_hub_with_fallback("crucible_chunk", "crucible_fake_fla")(torch_function)
    monkeypatch.setattr(modeling, kernels.CHUNK_FUNCTION, wrapper)  # restored after the test, rerouted or not
    monkeypatch.setattr(kernels, "gather_facts", lambda device: HOPPER)
    yield modeling
    kernels.preflight("cpu", facts=CPU)  # leave this process's report empty for the next test


@pytest.mark.parametrize("facts", [
    HOPPER,
    kernels.KernelFacts(fla="0.6.0", triton="3.4.0", tilelang=False, device_type="cuda", capability=(9, 0),
                        device_name="NVIDIA H100 80GB HBM3"),
    kernels.KernelFacts(fla="0.4.1", triton="3.7.0", tilelang=False, device_type="cuda", capability=None,
                        device_name="NVIDIA H20"),  # fla's own test also takes the name
])
def test_it_knows_fla_with_triton_below_3_7_1_on_hopper(facts):
    (finding,) = kernels.known_bad(facts)
    assert finding.kernel == "gated_delta_rule" and finding.error == kernels.FLA_HOPPER_ERROR
    assert f"triton {facts.triton}" in finding.combination and "upgrade Triton to >= 3.7.1" in finding.fix


@pytest.mark.parametrize("change", [
    {"triton": "3.7.1"}, {"triton": "3.8.0"}, {"triton": "3.3.1"}, {"fla": None}, {"tilelang": True},
    {"capability": (8, 0), "device_name": "NVIDIA A100-SXM4-80GB"},
    {"capability": (10, 0), "device_name": "NVIDIA B200"},
    {"device_type": "cpu", "capability": None, "device_name": None},
])
def test_every_other_combination_passes(change):
    facts = kernels.KernelFacts(**{**HOPPER.__dict__, **change})
    assert kernels.known_bad(facts) == []
    assert kernels.preflight("cuda", facts=facts) == {"refused": [], "rerouted": []}


def test_the_stand_in_fails_the_backward_the_way_fla_does(fla_on_hopper):
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)
    v = torch.randn(1, 4, 2, 8, requires_grad=True)
    g, beta = -torch.rand(1, 4, 2), torch.rand(1, 4, 2)
    out, _ = fla_on_hopper.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)
    with pytest.raises(RuntimeError, match="Triton >= 3.4.0 and < 3.7.1 on Hopper"):
        out.sum().backward()


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_a_rerouted_run_trains_through_the_torch_form_and_says_so(tmp_path, qwen3_5_model_dir, train_problems_file,
                                                                   runner, fla_on_hopper):
    cfg = tiny_run_config(qwen3_5_model_dir, train_problems_file, train={"steps": 1},
                          sampling={"problems_per_step": 1, "candidates_per_problem": 2, "max_new_tokens": 4})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"  # no crash at the update
    start = read_events(tmp_path / "run" / "events.jsonl")[0]
    kernel_block = start["runtime"]["kernels"]
    (entry,) = kernel_block["rerouted"]
    assert kernel_block["refused"] == [] and entry["kernel"] == "gated_delta_rule"
    assert entry["from"] == "fla" and entry["to"] == "torch" and entry["error"] == kernels.FLA_HOPPER_ERROR
    assert "NVIDIA H200" in entry["combination"] and "upgrade Triton to >= 3.7.1" in entry["fix"]
    assert kernel_block["gated_delta_rule"] == "torch"  # the chunked form now runs transformers' function
    assert any("gated_delta_rule rerouted" in w for w in start["runtime"]["warnings"])
    assert kernels._fast_chunk(fla_on_hopper) is None  # the module's name is bound to the torch function itself
    forms = start["runtime"]["linear_attention"]
    assert forms["sampler"] == "recurrent" and forms["trainer"] == "chunked" and forms["same_form"] is False


def test_a_refused_combination_ends_the_run_before_the_model_loads(tmp_path, train_problems_file, runner,
                                                                     qwen3_5_model_dir, fla_on_hopper, monkeypatch):
    # A transformers whose linear-attention module has no rebindable chunked rule: nothing to reroute.
    monkeypatch.setitem(sys.modules, "crucible_fake_modeling", types.ModuleType("crucible_fake_modeling"))
    monkeypatch.setattr(kernels, "LINEAR_ATTENTION_MODULES", ("crucible_fake_modeling",))
    import transformers

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    cfg = tiny_run_config(qwen3_5_model_dir, train_problems_file, train={"steps": 1})
    with pytest.raises(kernels.KernelRefused, match="Triton >= 3.4.0 and < 3.7.1 on Hopper") as refused:
        train(cfg, tmp_path / "run", runner=runner, progress=False)
    assert "Fix: upgrade Triton to >= 3.7.1" in str(refused.value)
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert [e["event"] for e in events] == ["done"]  # no start: nothing was loaded, nothing sampled
    assert events[0]["status"] == "failed" and kernels.FLA_HOPPER_ERROR in events[0]["error"]
    assert "upgrade Triton to >= 3.7.1" in events[0]["error"]


def test_the_cli_says_a_refusal_in_one_error_line(tmp_path, train_problems_file, qwen3_5_model_dir, fla_on_hopper,
                                                  monkeypatch, capsys):
    from training.cli import main
    from training.config import save_config

    monkeypatch.setattr(kernels, "LINEAR_ATTENTION_MODULES", ("crucible_missing_modeling_module",))
    config = tmp_path / "run.yaml"
    save_config(tiny_run_config(qwen3_5_model_dir, train_problems_file, train={"steps": 1}), config)
    assert main(["run", "--config", str(config), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: refused: flash-linear-attention 0.6.0 with triton 3.6.0 on NVIDIA H200")
    assert "Fix: upgrade Triton to >= 3.7.1" in err[-1]


def test_the_pinned_gpu_set_is_past_the_known_bad_triton():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "requirements-gpu.txt").read_text()
    pins = dict(line.split("==") for line in text.splitlines() if line and not line.startswith("#"))
    facts = kernels.KernelFacts(**{**HOPPER.__dict__, "fla": pins["fla-core"], "triton": pins["triton"]})
    assert pins["flash-linear-attention"] == pins["fla-core"] and kernels.known_bad(facts) == []
