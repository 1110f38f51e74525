"""How a HORNN layer runs, decided once (hornn_dist/models/plan.py), and the rules checked once."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
import torch

from hornn_dist.models import HornnLayer, LayerPlan, ModelConfig, build_model, plan_for
from hornn_dist.models import triton_scan as ts
from hornn_dist.models.plan import AUTO_TRITON_MAX_OUTPUTS, auto_engine, resolve_plan
from hornn_dist.util.errors import ConfigError

# the autograd node each engine's output hangs from: which engine ran, seen without mocks
ENGINE_NODE = {"fused": "HornnScanBackward", "loop": "StackBackward0"}


def test_plan_on_a_cpu():
    """On a CPU "auto" is "fused"; named engines are kept; the layers in fp32, or in bf16 under
    bf16 autocast (a CPU's bf16 run)."""
    for mixed, words in (("no", "fp32"), ("bf16", "bf16")):
        plan = plan_for(ModelConfig(), "cpu", 20, mixed)
        assert (plan.engine, plan.configured, plan.device_type) == ("fused", "auto", "cpu")
        assert plan.describe() == f"auto engine: fused, layers in {words}"
    for engine in ("fused", "loop"):
        plan = plan_for(ModelConfig(engine=engine), torch.device("cpu"), 20, "no")
        assert plan.engine == engine and plan.describe() == f"{engine} engine, layers in fp32"


def test_auto_rule_is_a_pure_function_of_device_autocast_and_size():
    """triton on CUDA under mixed precision up to B·H = 2^15 outputs a step, fused elsewhere."""
    assert AUTO_TRITON_MAX_OUTPUTS == 2**15
    assert auto_engine("cuda", True, 20, 400) == "triton"  # the paper's size
    assert auto_engine("cuda", True, 32, 1024) == "triton"  # 2^15 exactly
    assert auto_engine("cuda", True, 33, 1024) == "fused"
    assert auto_engine("cuda", True, 128, 1024) == "fused"
    assert auto_engine("cuda", False, 20, 400) == "fused"  # fp32: a tie
    assert auto_engine("cpu", True, 20, 400) == "fused"


def test_auto_plan_on_a_cuda_device_given_by_name(monkeypatch):
    """The plan for a CUDA run, resolved on this machine (no GPU needed): the threshold applies
    to the batch per process and cfg's hidden size; no triton there means fused."""
    monkeypatch.setattr(ts, "unavailable_reason", lambda device=None: None)  # triton runs
    cfg = ModelConfig(hidden_size=400)
    cuda = torch.device("cuda")
    assert plan_for(cfg, cuda, 20, "bf16").describe() == "auto engine: triton, layers in fp16"
    assert plan_for(cfg, cuda, 82, "bf16").engine == "fused"  # 82 x 400 > 2^15
    assert plan_for(cfg, cuda, 20, "no").describe() == "auto engine: fused, layers in fp32"
    monkeypatch.setattr(ts, "unavailable_reason", lambda device=None: "no triton")
    assert plan_for(cfg, cuda, 20, "bf16").describe() == "auto engine: fused, layers in fp16"


def test_precision_words_follow_the_one_rule():
    """The start-up line: fp16 layers under any CUDA mixed precision by default, bf16 ones
    under a CPU's bf16."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")

    def plan(precision: str, device: torch.device, mixed: str) -> LayerPlan:
        cfg = ModelConfig(engine="fused", recurrence_precision=precision)
        return plan_for(cfg, device, 20, mixed)

    assert plan("fp16", cuda, "bf16").describe() == "fused engine, layers in fp16"
    assert plan("autocast", cuda, "bf16").precision_words() == "layers in bf16"
    assert plan("autocast", cuda, "fp16").precision_words() == "layers in fp16"
    assert plan("fp32", cuda, "bf16").precision_words() == "recurrence in fp32"
    for precision in ("fp16", "autocast", "fp32"):  # no autocast: every precision is fp32 math
        assert plan(precision, cuda, "no").precision_words() == "layers in fp32"
    # on a CPU under bf16 the default runs the layer in bf16 (no fp16 products on CPUs)
    assert plan("fp16", cpu, "bf16").precision_words() == "layers in bf16"
    assert plan("autocast", cpu, "bf16").precision_words() == "layers in bf16"
    assert plan("fp32", cpu, "bf16").precision_words() == "recurrence in fp32"


def test_strict_plan_refuses_triton_where_it_cannot_run(monkeypatch):
    """The trainer (strict): a ConfigError naming model.engine and the fix."""
    monkeypatch.setattr(ts, "INTERPRETED", False)
    cfg = ModelConfig(engine="triton")
    with pytest.raises(ConfigError, match=r"^model.engine = 'triton' .*'fused'") as info:
        plan_for(cfg, "cpu", 20, "no")
    assert "\n" not in str(info.value)
    plan_for(ModelConfig(arch="lstm", engine="triton"), "cpu", 20, "no")  # no HORNN layer


def test_lenient_plan_falls_back_to_fused_with_one_warning(monkeypatch):
    """evaluate/generate (not strict) of a triton-trained model on a CPU: the fused engine, one
    warning when the plan is made, none when the model runs, and the fused engine's bits."""
    monkeypatch.setattr(ts, "INTERPRETED", False)
    cfg = ModelConfig(engine="triton", hidden_size=8, embedding_size=6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = plan_for(cfg, "cpu", 2, "no", strict=False)
    assert [str(w.message).endswith("; running engine 'fused' instead") for w in caught] == [True]
    assert str(caught[0].message).startswith("model.engine = 'triton' ")
    assert (plan.engine, plan.configured) == ("fused", "triton")
    assert plan.describe() == "fused engine, layers in fp32"
    torch.manual_seed(0)
    model = build_model(cfg, 20, plan)
    torch.manual_seed(0)
    fused = build_model(replace(cfg, engine="fused"), 20)
    tokens = torch.randint(0, 20, (5, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, _ = model(tokens)
    assert torch.equal(got, fused(tokens)[0])


def test_model_layers_hold_the_plan_and_run_its_engine():
    """Every layer holds the model's one plan; its forward runs the plan's engine, whatever
    "auto" would have picked."""
    cfg = ModelConfig(engine="loop", hidden_size=8, embedding_size=6, num_layers=2)
    plan = plan_for(cfg, "cpu", 3, "no")
    model = build_model(cfg, 20, plan)
    assert model.plan is plan and all(layer.plan is plan for layer in model.layers)
    x = torch.randn(4, 3, 6)
    out, _ = model.layers[0](x)
    assert out.grad_fn.name() == ENGINE_NODE["loop"]
    default = build_model(ModelConfig(hidden_size=8, embedding_size=6), 20)  # plan None: fused
    assert default.plan.describe() == "auto engine: fused, layers in fp32"
    assert default.layers[0](x)[0].grad_fn.name() == ENGINE_NODE["fused"]
    layer = HornnLayer(6, 8)  # a layer alone makes its own plan, of ModelConfig's defaults
    assert layer.plan == LayerPlan("fused", "auto", "fp16") and layer.cfg == ModelConfig(
        hidden_size=8
    )
    assert all(layer.cfg is cfg for layer in model.layers)  # a model's: its one [model] section
    layer.plan = replace(layer.plan, engine="loop")
    assert layer(x)[0].grad_fn.name() == ENGINE_NODE["loop"]


def test_a_plan_must_match_the_config_and_the_layer():
    cfg = ModelConfig(hidden_size=8)
    with pytest.raises(ValueError, match="the plan is for engine 'loop'"):
        build_model(cfg, 20, resolve_plan("loop"))
    with pytest.raises(ValueError, match="the plan is for engine 'loop'"):
        HornnLayer(4, 8, engine="fused", plan=resolve_plan("loop"))
    with pytest.raises(ValueError, match="the plan is for engine 'loop'"):
        HornnLayer(4, cfg=cfg, plan=resolve_plan("loop"))
    assert HornnLayer(4, 8, engine="loop", plan=resolve_plan("loop")).plan.engine == "loop"
    assert HornnLayer(4, 8, plan=resolve_plan("loop")).cfg.engine == "loop"  # the plan's
    for keys in ({"recurrence_precision": "fp32"}, {"precision": "fp32"}):  # the key, or its alias
        assert HornnLayer(4, 8, **keys).plan.precision == "fp32"
    with pytest.raises(ValueError, match="not both"):
        HornnLayer(4, 8, cfg=cfg)
    with pytest.raises(ValueError, match="LayerPlan.engine must be one of fused, loop, triton"):
        LayerPlan("auto")


# (a layer alone's keyword, ModelConfig key, bad value): the layer is its config, one rule
SAME_RULES = [
    ("order", "order", 0),
    ("order", "order", 2.5),
    ("order", "order", True),
    ("alpha", "alpha", 0.0),
    ("alpha", "alpha", 1.0),
    ("pooling", "pooling", "mean"),
    ("activation", "activation", "gelu"),
    ("engine", "engine", "cuda"),
    ("precision", "recurrence_precision", "bf16"),
    ("hidden_size", "hidden_size", 0),
]


@pytest.mark.parametrize("arg,key,bad", SAME_RULES)
def test_layer_and_config_reject_the_same_values_in_the_same_words(arg, key, bad):
    with pytest.raises(ConfigError) as layer_err:
        HornnLayer(**{"input_size": 4, "hidden_size": 8, arg: bad})
    with pytest.raises(ConfigError) as config_err:
        ModelConfig(**{key: bad}).validate()
    assert str(layer_err.value).startswith(f"model.{key} must be ")
    assert str(config_err.value) == str(layer_err.value)


def test_rnn_activation_is_checked_by_the_config():
    with pytest.raises(
        ConfigError, match=r"^model.activation must be one of tanh, relu for arch rnn"
    ):
        ModelConfig(arch="rnn", activation="sigmoid").validate()
    ModelConfig(arch="hornn", activation="sigmoid").validate()
