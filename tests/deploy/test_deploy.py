"""The deployment files under deploy/: the Dockerfile and the Kubernetes manifests.

No Docker engine or cluster is at hand, so the Dockerfile is linted with hadolint and checked for
what a user relies on, and the manifests are validated offline against a pinned Kubernetes
schema (kubernetes-validate, strict) and checked for what makes the workers work. Both tools come
with the `dev` extra; a missing tool fails the test rather than skipping it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
HADOLINT_CONFIG = DEPLOY / ".hadolint.yaml"
WORKERS = DEPLOY / "k8s" / "workers.yaml"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))

KUBERNETES_VERSION = "1.33.0"
# The Ascend Device Plugin's extended resource for Atlas training / 800I A2 servers (MindCluster).
NPU_RESOURCE = "huawei.com/Ascend910"
INSTALL_HINT = "install the dev extra: .venv/bin/pip install -e '.[dev]'"


# --- helpers ---------------------------------------------------------------------------------


def _tool(name: str) -> str:
    """Path of a console script from the dev extra: beside this Python first, then on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"`{name}` not found; {INSTALL_HINT}", pytrace=False)
    return found


def _kubernetes_validate() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        pytest.fail(f"kubernetes-validate is not installed; {INSTALL_HINT}", pytrace=False)
    return kubernetes_validate


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs; comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    return out


def _dockerfile() -> list[tuple[str, str]]:
    return _instructions(DOCKERFILE.read_text())


def _last(instruction: str) -> str:
    found = [args for keyword, args in _dockerfile() if keyword == instruction]
    assert found, f"{DOCKERFILE.name} has no {instruction}"
    return found[-1]


def _arg_defaults() -> dict[str, str]:
    defaults = {}
    for keyword, args in _dockerfile():
        if keyword == "ARG" and "=" in args:
            name, _, value = args.partition("=")
            defaults[name] = value
    return defaults


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _job() -> dict[str, Any]:
    jobs = [doc for doc in _documents(WORKERS) if doc.get("kind") == "Job"]
    assert len(jobs) == 1, f"{WORKERS.name} should hold exactly one Job"
    return jobs[0]


def _worker_container() -> dict[str, Any]:
    containers = _job()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "the worker pod should run one container"
    container: dict[str, Any] = containers[0]
    return container


def _option(args: list[str], flag: str) -> str:
    assert flag in args, f"worker args {args} lack {flag}"
    position = args.index(flag)
    assert position + 1 < len(args), f"{flag} has no value in {args}"
    return args[position + 1]


# --- Dockerfile ------------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    command = [_tool("hadolint"), "--no-color", "--config", str(HADOLINT_CONFIG)]
    result = subprocess.run(
        [*command, "--failure-threshold", "warning", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"hadolint:\n{result.stdout}{result.stderr}"


def test_hadolint_does_report_problems(tmp_path: Path) -> None:
    """Guards the test above against a hadolint that passes everything."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN pip install requests\n")
    result = subprocess.run(
        [_tool("hadolint"), "--no-color", "--failure-threshold", "warning", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "DL3006" in result.stdout


def test_every_hadolint_ignore_says_why() -> None:
    lines = DOCKERFILE.read_text().splitlines()
    for number, line in enumerate(lines):
        if "hadolint ignore=" in line:
            reason = lines[number - 1].strip() if number else ""
            assert reason.startswith("#") and "hadolint ignore" not in reason, (
                f"line {number + 1}: put the reason for `{line.strip()}` on the line above"
            )


def test_entrypoint_runs_autotune() -> None:
    entrypoint = json.loads(_last("ENTRYPOINT"))  # exec form, so `docker run IMG tune ...`
    direct = entrypoint == ["autotune"]
    # A shell that loads the base image's environment first must still hand over the arguments.
    wrapped = entrypoint[:1] == ["/bin/bash"] and any(
        re.search(r'\bexec autotune "\$@"', part) for part in entrypoint
    )
    assert direct or wrapped, f"ENTRYPOINT {entrypoint} does not run autotune with the arguments"


def test_studies_volume_is_declared_and_is_the_default_root() -> None:
    volume = _last("VOLUME")
    paths = json.loads(volume) if volume.startswith("[") else volume.split()
    assert "/studies" in paths
    # The CLI's default --root is `studies`, relative to the working directory.
    assert _last("WORKDIR") == "/"


def test_runs_as_a_non_root_user() -> None:
    user = _last("USER").split(":")[0]
    assert user not in {"root", "0"}
    defaults = _arg_defaults()
    uid = defaults.get(user.removeprefix("${").removesuffix("}"), user)
    assert uid not in {"root", "0"}


def test_base_images_are_the_official_ones_pinned_by_arg() -> None:
    defaults = _arg_defaults()
    bases = [args.split()[0] for keyword, args in _dockerfile() if keyword == "FROM"]
    assert "${VLLM_ASCEND_IMAGE}:${VLLM_ASCEND_TAG}" in bases
    assert "${VLLM_CUDA_IMAGE}:${VLLM_CUDA_TAG}" in bases
    assert defaults["VLLM_ASCEND_IMAGE"] == "quay.io/ascend/vllm-ascend"
    assert defaults["VLLM_CUDA_IMAGE"] == "vllm/vllm-openai"
    for tag in ("VLLM_ASCEND_TAG", "VLLM_CUDA_TAG"):
        assert re.fullmatch(r"v\d+\.\d+\.\d+\S*", defaults[tag]), f"{tag} is not a version"
    assert defaults["VARIANT"] == "ascend"


def test_package_data_reaches_the_image() -> None:
    """The shipped search spaces and vllm_engine_args.txt are package data: a plain install
    carries them, and the build lists the spaces from outside the source tree to prove it."""
    copies = [args.split() for keyword, args in _dockerfile() if keyword == "COPY"]
    sources = {source.rstrip("/") for parts in copies for source in parts[:-1]}
    assert {"pyproject.toml", "README.md", "autotune"} <= sources
    for parts in copies:  # all into the one working directory, the package root
        assert parts[-1] in {"./", f"{parts[0].rstrip('/')}/"}, f"COPY {' '.join(parts)}"
    runs = " ".join(args for keyword, args in _dockerfile() if keyword == "RUN")
    assert re.search(r"pip install --no-cache-dir \.(\s|$)", runs)
    assert "rm -rf /opt/autotune/autotune" in runs and "autotune spaces list" in runs
    kept = {
        line[1:].strip().rstrip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.startswith("!")
    }
    assert sources <= kept, f"{DOCKERIGNORE.name} leaves out {sorted(sources - kept)}"


# --- Kubernetes manifests --------------------------------------------------------------------


def test_there_are_manifests() -> None:
    assert WORKERS in MANIFESTS
    assert len(MANIFESTS) >= 2


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_manifest_matches_the_kubernetes_schema(path: Path) -> None:
    kubernetes_validate = _kubernetes_validate()
    documents = _documents(path)
    assert documents, f"{path.name} is empty"
    for document in documents:
        try:
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            pytest.fail(f"{path.name}: {where}: {error.message}", pytrace=False)
        except kubernetes_validate.SchemaNotFoundError as error:
            pytest.fail(f"{path.name}: {error.message}", pytrace=False)


def test_schema_validation_rejects_a_misspelled_field() -> None:
    """Guards the test above: strict validation must catch what a typo would silently drop."""
    kubernetes_validate = _kubernetes_validate()
    job = _job()
    job["spec"]["completionsMode"] = job["spec"].pop("completionMode")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_workers_are_an_indexed_job_all_running_at_once() -> None:
    spec = _job()["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] >= 1
    assert spec["backoffLimit"] >= 1
    assert spec["template"]["spec"]["restartPolicy"] in {"OnFailure", "Never"}


def test_worker_command_joins_the_study_through_the_secret_url() -> None:
    container = _worker_container()
    args = container["args"]
    assert args[0] == "worker"
    assert _option(args, "--study")
    storage = _option(args, "--storage")
    match = re.fullmatch(r"\$\((\w+)\)", storage)
    assert match, f"--storage {storage!r} should be $(VAR), filled from a Secret"
    env = {item["name"]: item for item in container["env"]}
    reference = env[match.group(1)]["valueFrom"]["secretKeyRef"]
    secrets = [
        doc
        for path in MANIFESTS
        for doc in _documents(path)
        if doc.get("kind") == "Secret" and doc["metadata"]["name"] == reference["name"]
    ]
    assert secrets, f"no example Secret named {reference['name']}"
    url = secrets[0]["stringData"][reference["key"]]
    assert url.startswith("postgresql+psycopg://")
    assert "CHANGE-ME" in url, "the example Secret must hold a placeholder, not a password"


def test_worker_args_are_what_the_cli_accepts(tmp_path: Path) -> None:
    """The Job's args, with a store that holds no such study, fail on the study, not on an
    option the `worker` command lacks."""
    from typer.testing import CliRunner

    from autotune.cli import app

    args = [
        f"sqlite:///{tmp_path / 'none.db'}" if arg.startswith("$(") else arg
        for arg in _worker_container()["args"]
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: no study database at"), result.output


def test_workers_request_npus_from_the_ascend_device_plugin() -> None:
    limits = _worker_container()["resources"]["limits"]
    assert NPU_RESOURCE in limits, f"limits {limits} lack {NPU_RESOURCE}"
    assert int(limits[NPU_RESOURCE]) >= 1


def test_workers_keep_studies_on_a_volume_and_one_per_node() -> None:
    pod = _job()["spec"]["template"]["spec"]
    mounts = {mount["mountPath"]: mount["name"] for mount in _worker_container()["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert "/studies" in mounts
    assert {"emptyDir", "persistentVolumeClaim"} & set(volumes[mounts["/studies"]])
    terms = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert any(term["topologyKey"] == "kubernetes.io/hostname" for term in terms)
