"""The model runner a pin picks, read from the pin's own source (verify.runners)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_report import CONFIG_22
from verify import body, runners, sdist

CONFIG_33 = """
class VllmConfig:
    @property
    def use_v2_model_runner(self):
        return not self._get_v2_model_runner_unsupported_features()

    def _get_v2_model_runner_unsupported_features(self):
        unsupported = []
        if self.parallel_config.use_ubatching:
            unsupported.extend(self._get_dbo_unsupported_features())
        return unsupported

    def _get_dbo_unsupported_features(self):
        if envs.VLLM_USE_V2_MODEL_RUNNER is None:
            return ["dual batch overlap"]
        return []
"""
CONFIG_16 = "class VllmConfig:\n    pass\n"
ENVS_16 = 'V2 = lambda: bool(int(os.getenv("VLLM_USE_V2_MODEL_RUNNER", "0")))'


def test_an_architecture_list_and_its_fallbacks_are_read_from_the_source() -> None:
    choice = runners.parse(CONFIG_22, "9.9.0")
    assert choice.architectures == ("Qwen3ForCausalLM",) and choice.excluded == ("MoE",)
    assert choice.unsupported == (
        "ngram speculative decoding",
        "speculative method other than eagle / mtp",
    )
    assert choice.default_is_mrv2("Qwen3ForCausalLM")
    assert not choice.default_is_mrv2("LlamaForCausalLM")
    assert choice.mrv2_default() == "Qwen3ForCausalLM (except MoE models)"
    assert choice.v1_configurations().startswith("every other architecture; MoE models; ")


def test_without_an_architecture_list_every_model_defaults_to_mrv2() -> None:
    choice = runners.parse(CONFIG_33, "9.9.0")
    assert choice.architectures is None and choice.default_is_mrv2("LlamaForCausalLM")
    assert choice.unsupported == ("dual batch overlap",)  # from the method it extends with
    assert choice.v1_configurations() == (
        "configurations MRV2 does not support (dual batch overlap); VLLM_USE_V2_MODEL_RUNNER=0 "
        "(`vllm/config/vllm.py` of v9.9.0)"
    )


def test_a_pin_whose_config_makes_no_choice_runs_v1_unless_opted_in() -> None:
    choice = runners.parse(CONFIG_16, "9.9.0", ENVS_16)
    assert choice.opt_in and not choice.default_is_mrv2("Qwen3ForCausalLM")
    assert choice.v1_configurations().startswith("every model unless VLLM_USE_V2_MODEL_RUNNER=1")


@pytest.mark.parametrize(
    "text, envs, message",
    [
        (CONFIG_16, None, "defines no _get_v2_model_runner_unsupported_features"),
        (CONFIG_16, ENVS_16.replace('"0"', '"1"'), "defines no _get_v2_model_runner_unsupported"),
        (
            CONFIG_22.replace("DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES", "V2_ARCHS"),
            None,
            "has _is_default_v2_model_runner_model but no DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES",
        ),
    ],
)
def test_a_source_without_what_decides_the_runner_is_a_named_error(text, envs, message) -> None:
    with pytest.raises(runners.RunnerSourceError, match=message):
        runners.parse(text, "9.9.0", envs)


def test_a_pin_without_the_source_is_a_named_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sdist, "cache_dir", lambda: tmp_path / "no-cache")
    with pytest.raises(runners.RunnerSourceError, match="no vllm/config/vllm.py in build/9.9.0"):
        runners.read("9.9.0", tmp_path)


def test_the_local_models_architecture_is_tinymodels() -> None:
    source = (Path(body.__file__).parent / "tinymodel.py").read_text()
    assert f'"architectures": ["{body.LOCAL_MODEL_ARCHITECTURE}"]' in source


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.22.0", "0.33.0"])
def test_the_real_pins_runner_choice(version, tmp_path) -> None:
    sdist.fetch(version)
    choice = runners.read(version, tmp_path)  # no build tree there: the cached sdist
    if version == "0.22.0":
        assert choice.architectures == ("Qwen3ForCausalLM",)
        assert choice.excluded == ("pooling", "MoE", "quantized")
        assert "ngram/ngram_gpu speculative decoding" in choice.unsupported
    else:
        assert choice.architectures is None and "dual batch overlap" in choice.unsupported
