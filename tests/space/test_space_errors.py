"""Malformed files: one SpaceError whose one-line message names the file and the field."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.space import SpaceError, load_space, value_problem

WriteSpace = Callable[..., Path]

INT = "{name: max_num_seqs, type: int, low: 4, high: 256, baseline: 128}"
ENV = "name: x, env: VLLM_X"  # a parameter of no known range: a variable

CASES = {
    "yaml_syntax": ("parameters: [\n  - {name: a", r"invalid YAML at line \d+, column \d+: "),
    "not_mapping": ("- a\n- b\n", "expected a mapping at the top level"),
    "unknown_type": (
        "parameters:\n  - {name: max_num_seqs, type: integer, low: 1, high: 2, baseline: 1}",
        r"parameters\[0\]: unknown type 'integer'",
    ),
    "missing_type": (
        "parameters:\n  - {name: max_num_seqs, low: 1, high: 2, baseline: 1}",
        r"parameters\[0\]: `type` is required",
    ),
    "low_gt_high": (
        f"parameters:\n  - {INT}\n  - {{name: block_size, type: int, low: 512, high: 256,"
        " baseline: 256}",
        r"parameters\[1\]\.low: must be <= high \(got 512 > 256\)",
    ),
    "unknown_option": (
        "parameters:\n  - {name: max_num_seq, type: int, low: 1, high: 2, baseline: 1}",
        r"parameters\[0\]\.name: unknown vLLM option 'max_num_seq' "
        r"\(did you mean 'max_num_seqs'\?\)",
    ),
    "unknown_fixed_option": (
        f"fixed: {{max-model-length: 1024}}\nparameters:\n  - {INT}",
        r"fixed\.max_model_length: unknown vLLM option",
    ),
    "baseline_off_grid": (
        "parameters:\n  - {name: block_size, type: int, low: 32, high: 256, step: 32,"
        " baseline: 100}",
        r"parameters\[0\]\.baseline: must be on the step grid",
    ),
    "baseline_out_of_range": (
        "parameters:\n  - {name: max_num_seqs, type: int, low: 4, high: 8, baseline: 128}",
        r"parameters\[0\]\.baseline: must be within \[4, 8\] \(got 128\)",
    ),
    "baseline_not_a_choice": (
        "parameters:\n  - {name: kv_cache_dtype, type: categorical, choices: [auto, fp8],"
        " baseline: fp16}",
        r"parameters\[0\]\.baseline: must be one of the choices \[auto, fp8\] \(got fp16\)",
    ),
    "missing_baseline": (
        "parameters:\n  - {name: enforce_eager, type: bool}",
        r"parameters\[0\]\.baseline: required field missing",
    ),
    "unknown_field": (
        f"parameters:\n  - {INT}\n  - {{name: enforce_eager, type: bool, baseline: true,"
        " default: true}",
        r"parameters\[1\]\.default: unknown field",
    ),
    "wrong_value_type": (
        "parameters:\n  - {name: max_num_seqs, type: int, low: four, high: 8, baseline: 8}",
        r"parameters\[0\]\.low: expected a whole number",
    ),
    "duplicate_name": (
        f"parameters:\n  - {INT}\n  - {INT}",
        r"parameters\[1\]\.name: name 'max_num_seqs' is already used by parameters\[0\]",
    ),
    "fixed_and_tuned": (
        f"fixed: {{max-num-seqs: 8}}\nparameters:\n  - {INT}",
        r"parameters\[0\]\.name: option 'max_num_seqs' is both fixed and tuned",
    ),
    "same_option_twice": (
        f"parameters:\n  - {INT}\n  - {{name: seqs, option: max_num_seqs, type: int, low: 1,"
        " high: 2, baseline: 1}",
        r"parameters\[1\]\.option: option 'max_num_seqs' is already used by parameters\[0\]",
    ),
    "scale_on_float": (
        "parameters:\n  - {name: gpu_memory_utilization, type: float, low: 0.5, high: 0.9,"
        " scale: 2, baseline: 0.9}",
        r"parameters\[0\]\.scale: only int parameters take a scale",
    ),
    "log_and_step": (
        "parameters:\n  - {name: block_size, type: int, low: 32, high: 256, step: 32,"
        " log: true, baseline: 128}",
        r"parameters\[0\]\.log: log and step > 1 cannot be combined",
    ),
    "option_and_env": (
        "parameters:\n  - {name: x, option: block_size, env: X, type: bool, baseline: true}",
        r"parameters\[0\]\.env: set either `option` or `env`, not both",
    ),
    "unknown_variant": (
        "variants: {a: {}}\nparameters:\n  - {name: v, type: categorical, variants: true,"
        " choices: [a, b], baseline: a}",
        r"parameters\[0\]\.choices\[1\]: unknown variant 'b' \(variants: a\)",
    ),
    "variant_overrides_tuned": (
        f"variants: {{a: {{max_num_seqs: 4}}}}\nparameters:\n  - {INT}\n"
        "  - {name: v, type: categorical, variants: true, choices: [a], baseline: a}",
        r"variants\.a\.max_num_seqs: option 'max_num_seqs' is also tuned by parameters\[0\]",
    ),
    "bad_platform": (
        f"platform: tpu\nparameters:\n  - {INT}",
        r"platform: expected 'cpu', 'cuda', 'ascend' or 'any'",
    ),
    "no_parameters": ("name: x\n", r"parameters: required field missing"),
    "dotted_unknown_option": (
        "parameters:\n  - {name: g, option: compilation_confg.cudagraph_mode, type: categorical,"
        " choices: [null, FULL], baseline: null}",
        r"parameters\[0\]\.option: unknown vLLM option 'compilation_confg' "
        r"\(did you mean 'compilation_config'\?\)",
    ),
    "dotted_empty_key": (
        "parameters:\n  - {name: g, option: compilation_config., type: categorical,"
        " choices: [null, FULL], baseline: null}",
        r"parameters\[0\]\.option: empty key in 'compilation_config\.'",
    ),
    # Keys of one dict option may be tuned apart (they merge); a key and its dict may not.
    "dotted_key_and_its_dict": (
        "parameters:\n  - {name: g, option: compilation_config.cudagraph_mode,"
        " type: categorical, choices: [null, FULL], baseline: null}\n"
        "  - {name: m, option: compilation_config, type: categorical,"
        " choices: [null, '{}'], baseline: null}",
        r"parameters\[1\]\.option: option 'compilation_config' is already used by "
        r"parameters\[0\]",
    ),
    "dotted_same_key_twice": (
        "parameters:\n  - {name: g, option: compilation_config.mode,"
        " type: categorical, choices: [null, NONE], baseline: null}\n"
        "  - {name: m, option: compilation_config.mode, type: categorical,"
        " choices: [null, NONE], baseline: null}",
        r"parameters\[1\]\.option: option 'compilation_config\.mode' is already used by "
        r"parameters\[0\]",
    ),
    "only_if_unknown_parameter": (
        "parameters:\n  - {name: k, type: int, low: 1, high: 4, baseline: 2,"
        " option: speculative_config.num_speculative_tokens, only_if: {method: [ngram]}}",
        r"parameters\[0\]\.only_if: no other parameter named 'method'",
    ),
    "only_if_impossible_value": (
        "parameters:\n  - {name: method, option: speculative_config.method,"
        " type: categorical, choices: [null, ngram], baseline: null}\n"
        "  - {name: k, type: int, low: 1, high: 4, baseline: 2,"
        " option: speculative_config.num_speculative_tokens, only_if: {method: [eagle]}}",
        r"parameters\[1\]\.only_if: 'method' cannot be eagle",
    ),
    "only_if_cycle": (
        "parameters:\n  - {name: enable_prefix_caching, type: bool, baseline: true,"
        " only_if: {enable_chunked_prefill: [true]}}\n"
        "  - {name: enable_chunked_prefill, type: bool, baseline: true,"
        " only_if: {enable_prefix_caching: [true]}}",
        r"parameters\[0\]\.only_if: only_if goes round in a cycle: enable_prefix_caching -> "
        r"enable_chunked_prefill -> enable_prefix_caching",
    ),
    "dotted_and_fixed_dict": (
        "fixed: {compilation_config: {cudagraph_capture_sizes: [1, 2]}}\nparameters:\n"
        "  - {name: g, option: compilation_config.cudagraph_mode, type: categorical,"
        " choices: [null, FULL], baseline: null}",
        r"parameters\[0\]\.option: option 'compilation_config' is both fixed and tuned",
    ),
    "count_above_int32": (
        "parameters:\n  - {name: max_num_batched_tokens, type: int, low: 512,"
        " high: 100000000000000000000000, baseline: 2048}",
        r"parameters\[0\]\.high: max_num_batched_tokens must be <= 2,147,483,647 "
        r"\(got 100000000000000000000000\)",
    ),
    "count_below_one": (
        "parameters:\n  - {name: max_num_seqs, type: int, low: -8, high: 64, baseline: 8}",
        r"parameters\[0\]\.low: max_num_seqs must be >= 1 \(got -8\)",
    ),
    "fraction_above_one": (
        "parameters:\n  - {name: gpu_memory_utilization, type: float, low: 0.5, high: 1.5,"
        " baseline: 0.9}",
        r"parameters\[0\]\.high: gpu_memory_utilization must be in \(0, 1\] \(got 1\.5\)",
    ),
    "fraction_zero_choice": (
        "parameters:\n  - {name: gpu_memory_utilization, type: categorical, choices: [0.9, 0],"
        " baseline: 0.9}",
        r"parameters\[0\]\.choices\[1\]: gpu_memory_utilization must be in \(0, 1\]",
    ),
    "scaled_count_below_one": (
        "parameters:\n  - {name: kv_cache_mib, option: kv_cache_memory_bytes, type: int,"
        " scale: 1048576, low: 0, high: 512, step: 128, baseline: 256}",
        r"parameters\[0\]\.low: kv_cache_memory_bytes must be >= 1 \(got 0 = 0\)",
    ),
    "cpu_binding_tuned_on_ascend": (
        "platform: ascend\nparameters:\n  - {name: bind, type: bool, baseline: true,"
        " option: additional_config.enable_cpu_binding}",
        r"parameters\[0\]\.option: 'additional_config\.enable_cpu_binding' cannot be tuned: "
        r"vllm-ascend pins each worker",
    ),
    "visible_devices_tuned": (
        "parameters:\n  - {name: gpus, env: CUDA_VISIBLE_DEVICES, type: categorical,"
        " choices: ['0', '1'], baseline: '0'}",
        r"parameters\[0\]\.env: 'CUDA_VISIBLE_DEVICES' cannot be tuned: each trial's lease sets "
        r"it \(narrow the pool with --devices\)",
    ),
    "unknown_graph_mode_on_ascend": (
        "platform: ascend\nparameters:\n  - {name: g, option: compilation_config.cudagraph_mode,"
        " type: categorical, choices: [null, FULL, FULLGRAPH], baseline: null}",
        r"parameters\[0\]\.choices\[2\]: unknown mode 'FULLGRAPH' \(vLLM's modes: ",
    ),
    # Issue 45: a float bound that is not finite passed here and failed in the sampler.
    "float_high_inf": (
        f"parameters:\n  - {{{ENV}, type: float, low: 0.5, high: .inf, baseline: 1}}",
        r"parameters\[0\]\.high: expected a finite number$",
    ),
    "float_low_minus_inf": (
        f"parameters:\n  - {{{ENV}, type: float, low: -.inf, high: 1, baseline: 1}}",
        r"parameters\[0\]\.low: expected a finite number$",
    ),
    "float_step_nan": (
        f"parameters:\n  - {{{ENV}, type: float, low: 0, high: 1, step: .nan, baseline: 1}}",
        r"parameters\[0\]\.step: expected a finite number$",
    ),
    "float_baseline_inf": (
        f"parameters:\n  - {{{ENV}, type: float, low: 0, high: 1, baseline: .inf}}",
        r"parameters\[0\]\.baseline: expected a finite number$",
    ),
    "float_past_2_53": (
        f"parameters:\n  - {{{ENV}, type: float, low: 0, high: 1.0e+300, baseline: 1}}",
        r"parameters\[0\]\.high: expected a number from -9,007,199,254,740,992 to ",
    ),
    "int_past_2_53": (
        f"parameters:\n  - {{{ENV}, type: int, low: 1, high: {2**60}, baseline: 1}}",
        rf"parameters\[0\]\.high: expected a number .* \(got {2**60}\)$",
    ),
    "int_step_past_2_53": (
        f"parameters:\n  - {{{ENV}, type: int, low: 1, high: 1, step: {2**60}, baseline: 1}}",
        r"parameters\[0\]\.step: expected a number from",
    ),
    "scaled_past_2_53": (
        f"parameters:\n  - {{{ENV}, type: int, low: 1, high: 2, scale: {2**60}, baseline: 1}}",
        r"parameters\[0\]\.low: expected a number .* \(got 1 = 1\.15292e\+18\)",
    ),
    "choice_nan": (
        f"parameters:\n  - {{{ENV}, type: categorical, choices: [1, .nan], baseline: 1}}",
        r"parameters\[0\]\.choices\[1\]: expected a finite number \(got nan\)",
    ),
    # Issue 45: values that look alike were taken as distinct, launched twice, shown the same.
    "choice_true_and_text_true": (
        "parameters:\n  - {name: enforce_eager, type: categorical, choices: [true, 'true'],"
        " baseline: true}",
        r'parameters\[0\]\.choices\[1\]: "true" and choices\[0\] true are one value to the '
        r"engine and in every table: give it once$",
    ),
    "choice_one_and_one_point_oh": (
        f"parameters:\n  - {{{ENV}, type: categorical, choices: [2, 1, 1.0], baseline: 1}}",
        r"parameters\[0\]\.choices\[2\]: 1\.0 and choices\[1\] 1 are one value",
    ),
    "choice_one_and_text_one": (
        f"parameters:\n  - {{{ENV}, type: categorical, choices: [1, '1'], baseline: 1}}",
        r'parameters\[0\]\.choices\[1\]: "1" and choices\[0\] 1 are one value',
    ),
    "choice_text_true_in_capitals": (
        f"parameters:\n  - {{{ENV}, type: categorical, choices: ['TRUE', true], baseline: true}}",
        r'parameters\[0\]\.choices\[1\]: true and choices\[0\] "TRUE" are one value',
    ),
    "choice_given_twice": (
        f"parameters:\n  - {{{ENV}, type: categorical, choices: [a, b, a], baseline: a}}",
        r"parameters\[0\]\.choices\[2\]: duplicate choice a$",
    ),
    "variable_unset_twice": (
        f"parameters:\n  - {{{ENV}, type: categorical, choices: [null, ''], baseline: null}}",
        r'parameters\[0\]\.choices\[1\]: "" and choices\[0\] null are one value',
    ),
    # A fixed option is bounded as a tuned one is.
    "fixed_count_zero": (
        "fixed: {max_num_seqs: 0}\nparameters:\n  - "
        f"{{{ENV}, type: int, low: 1, high: 2, baseline: 1}}",
        r"fixed\.max_num_seqs: max_num_seqs must be >= 1 \(got 0\)$",
    ),
    "fixed_fraction_inf": (
        "fixed: {gpu_memory_utilization: .inf}\nparameters:\n  - "
        f"{{{ENV}, type: int, low: 1, high: 2, baseline: 1}}",
        r"fixed\.gpu_memory_utilization: gpu_memory_utilization must be in \(0, 1\] \(got inf\)$",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_file(case: str, write_space: WriteSpace) -> None:
    text, pattern = CASES[case]
    path = write_space(text, f"{case}.yaml")
    with pytest.raises(SpaceError) as info:
        load_space(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message
    assert re.search(pattern, message), message


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: Path("/dev/zero"), "/dev/zero: not a file"),
        (lambda p: (os.mkfifo(p / "fifo"), p / "fifo")[1], "fifo: not a file"),
        (lambda p: _sparse(p / "big.yaml", 1024 * 1024 + 1), "larger than 1 MiB"),
        (lambda p: p / ("n" * 256), "has a name of 256 bytes"),
        (lambda p: p / "a\x01.yaml", "holds a control character ('\\x01')"),
    ],
    ids=["device", "fifo", "too-large", "name-too-long", "control-character"],
)
def test_a_space_file_is_read_within_a_bound(tmp_path: Path, make: object, needle: str) -> None:
    # Issue 45: a file from the user was read whole, whatever it was.
    with pytest.raises(SpaceError) as info:
        load_space(make(tmp_path))  # type: ignore[operator]
    assert needle in str(info.value) and "\n" not in str(info.value)


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as out:
        out.truncate(size)  # no disk taken
    return path


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpaceError, match=rf"^{path}: file not found$"):
        load_space(path)


def test_unknown_shipped_name() -> None:
    with pytest.raises(SpaceError, match=r"^no-such-space: no such file or shipped .*cpu"):
        load_space("no-such-space")


def test_several_problems_are_counted(write_space: WriteSpace) -> None:
    text = "parameters:\n  - {name: a_b, type: int, low: 9, high: 1, baseline: 1}"
    with pytest.raises(SpaceError) as info:
        load_space(write_space(text))
    message = str(info.value)
    assert "parameters[0].low: must be <= high" in message
    assert message.endswith("(and 1 more)")


def test_a_value_a_parameter_cannot_take_is_blamed_with_the_parameters_values() -> None:
    # Issue 45: `predict --set max_num_seqs=100000` blamed the space file and gave no range.
    space = load_space("cpu-quick")
    values = {p.name: p.describe_values() for p in space.parameters}
    assert values["max_num_seqs"].startswith("a whole number from 4 to 128")
    assert value_problem(space.parameters, "max_num_seqs", 100000) == (
        f"100000 is not a value of max_num_seqs, which is {values['max_num_seqs']}"
    )
    assert value_problem(space.parameters, "max_num_seqs", 64) is None
    assert value_problem(space.parameters, "max_num_seqs", float("inf")) is not None  # no crash
    assert value_problem(space.parameters, "enable_prefix_caching", "yes") == (
        "yes is not a value of enable_prefix_caching, which is true or false"
    )
    assert "not a parameter of the space (max_num_seqs" in str(
        value_problem(space.parameters, "max_num_seq", 8)
    )
