"""flashnorm.vllm.register, the vllm.general_plugins entry point: the FlashNorm<arch> names are
registered lazily (nothing imported), the stock names replaced only with FLASHNORM_VLLM=1,
registering twice changes nothing, a bad FLASHNORM_VLLM value is refused with a warning naming
it, and a failure inside vLLM's registry is logged, never raised."""
from importlib.metadata import entry_points

import pytest
from vllm import ModelRegistry

import flashnorm.vllm as fv


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    saved = dict(ModelRegistry.models)
    monkeypatch.delenv("FLASHNORM_VLLM", raising=False)
    yield ModelRegistry.models
    ModelRegistry.models.clear()
    ModelRegistry.models.update(saved)


def target(registry, arch):
    m = registry[arch]
    return f"{m.module_name}:{m.class_name}"


def test_entry_point_is_installed():
    eps = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert eps.get("flashnorm") == "flashnorm.vllm:register"


def test_registers_flashnorm_names_and_leaves_stock_ones(registry):
    stock = {a: target(registry, a) for a in fv.ARCHITECTURES}
    fv.register()
    fv.register()  # idempotent
    for arch in fv.ARCHITECTURES:
        assert target(registry, f"FlashNorm{arch}") == f"flashnorm.vllm.models:FlashNorm{arch}"
        assert target(registry, arch) == stock[arch]


def test_opt_in_replaces_stock_names(registry, monkeypatch):
    monkeypatch.setenv("FLASHNORM_VLLM", "1")
    fv.register()
    for arch in fv.ARCHITECTURES:
        assert target(registry, arch) == f"flashnorm.vllm.models:FlashNorm{arch}"


def test_bad_opt_in_value_is_refused_with_a_warning(registry, monkeypatch, caplog):
    monkeypatch.setenv("FLASHNORM_VLLM", "yes")
    stock = target(registry, "LlamaForCausalLM")
    fv.register()
    assert target(registry, "LlamaForCausalLM") == stock
    assert "FLASHNORM_VLLM='yes' ignored" in caplog.text


def test_registry_failure_is_logged_not_raised(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("registry unavailable")
    monkeypatch.setattr(ModelRegistry, "register_model", broken)
    fv.register()
    assert "flashnorm.vllm: not registered: registry unavailable" in caplog.text
