"""deploy/kubernetes/ checked without a cluster: every manifest against the Kubernetes 1.29
(the oldest we support: native sidecars) and 1.37 schemas, strictly; then what the schemas
miss: the Indexed Job's shape and labels, whole GPUs in limits, images, the loopback wiring of
worker -> adapter -> vLLM, the probes, the Secret and ConfigMap keys the containers read, the
volumes, and every `streameval` command line (manifests and README) against the real CLI.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from streameval.adapters.registry import build_adapter
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.locations import CACHE_ENV, STORE_ENV
from tests.test_compose import check_streameval, cli_command, dockerfile

REPO = Path(__file__).resolve().parent.parent
K8S = REPO / "deploy" / "kubernetes"
README = K8S / "README.md"
VERSIONS = ("1.29.0", "1.37.0")
LOOPBACK = "127.0.0.1"
# Kubernetes substitutes $(VAR) in command and args from the container's env.
ENV_REFERENCE = re.compile(r"\$\((\w+)\)")
# What an exec probe polls: python3 -c "... urlopen('http://127.0.0.1:PORT/PATH' ..."
PROBE_URL = re.compile(r"http://127\.0\.0\.1:(\d+)(/[\w./-]*)")


def load_documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, document)
        for path in sorted(K8S.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]


DOCUMENTS = load_documents()


def resources(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in DOCUMENTS if doc["kind"] == kind}


JOBS = resources("Job")
SECRETS = resources("Secret")
CONFIG_MAPS = resources("ConfigMap")
CLAIMS = resources("PersistentVolumeClaim")
GPU_JOB = "streameval-worker"
CPU_JOB = "streameval-worker-cpu"


def pod(job: str) -> dict[str, Any]:
    return JOBS[job]["spec"]["template"]["spec"]


def containers(job: str) -> dict[str, dict[str, Any]]:
    """Every container of the Job's pod, init containers (the sidecars) first."""
    spec = pod(job)
    everything = spec.get("initContainers", []) + spec["containers"]
    named = {container["name"]: container for container in everything}
    assert len(named) == len(everything), f"{job}: two containers share a name"
    return named


def env_values(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as it starts, read from the provided Secret/ConfigMap."""
    values = {}
    for variable in container.get("env", []):
        source = variable.get("valueFrom")
        if source is None:
            values[variable["name"]] = variable["value"]
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            values[variable["name"]] = SECRETS[ref["name"]]["stringData"][ref["key"]]
        else:
            ref = source["configMapKeyRef"]
            values[variable["name"]] = CONFIG_MAPS[ref["name"]]["data"][ref["key"]]
    return values


def words(container: dict[str, Any]) -> list[str]:
    """command + args with $(VAR) expanded, as the container runs them."""
    env = env_values(container)
    raw = container.get("command", []) + container.get("args", [])
    return [ENV_REFERENCE.sub(lambda m: env[m.group(1)], word) for word in raw]


def option(container: dict[str, Any], name: str) -> str:
    command = words(container)
    return command[command.index(name) + 1]


def container_ports(container: dict[str, Any]) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container.get("ports", [])}


def probed(container: dict[str, Any], probe: str) -> tuple[int, str]:
    """(port, path) a probe polls; kubelet's httpGet or an exec probe on loopback."""
    spec = container[probe]
    if "httpGet" in spec:
        port = spec["httpGet"]["port"]
        port = container_ports(container)[port] if isinstance(port, str) else port
        return port, spec["httpGet"]["path"]
    (match,) = PROBE_URL.findall(" ".join(spec["exec"]["command"]))
    return int(match[0]), match[1]


def gpus(container: dict[str, Any]) -> int:
    """The container's GPUs: whole, in limits, and requests (if any) equal to limits."""
    resources_ = container.get("resources", {})
    limits, requests = resources_.get("limits", {}), resources_.get("requests", {})
    asked = {key for key in (*limits, *requests) if key.endswith("/gpu")}
    for key in asked:
        count = limits.get(key)
        assert type(count) is int and count >= 1, f"{container['name']}: {key}={count!r}"
        assert requests.get(key, count) == count, f"{container['name']}: requests != limits"
    return sum(limits[key] for key in asked)


# --------------------------------------------------------------------------- schemas


def test_the_manifests_are_the_documented_resources():
    found = {(name, doc["kind"], doc["metadata"]["name"]) for name, doc in DOCUMENTS}
    assert found == {
        ("secret.example.yaml", "Secret", "streameval"),
        ("configmap.yaml", "ConfigMap", "streameval-run"),
        ("storage.example.yaml", "PersistentVolumeClaim", "streameval-hf-cache"),
        ("storage.example.yaml", "PersistentVolumeClaim", "streameval-data"),
        ("worker-job.yaml", "Job", GPU_JOB),
        ("worker-job-cpu.yaml", "Job", CPU_JOB),
    }
    # The README's table names every file.
    table = set(re.findall(r"^\| `([\w.-]+\.yaml)` \|", README.read_text(), re.MULTILINE))
    assert table == {path.name for path in K8S.glob("*.yaml")}
    # No namespace written in: `kubectl -n` chooses it.
    assert all("namespace" not in doc["metadata"] for _, doc in DOCUMENTS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "document", [doc for _, doc in DOCUMENTS], ids=[f"{f}:{d['kind']}" for f, d in DOCUMENTS]
)
def test_every_manifest_validates_strictly(document, version):
    assert kubernetes_validate.validate(document, version, strict=True) == version.rsplit(".", 1)[0]


def test_strict_validation_rejects_an_unknown_field():
    """The validator used above does catch a misspelt field (it would not without strict)."""
    job = copy.deepcopy(JOBS[GPU_JOB])
    job["spec"]["template"]["spec"]["containers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.37.0", strict=True)
    kubernetes_validate.validate(job, "1.37.0", strict=False)


# --------------------------------------------------------------------------- the Jobs


def test_jobs_are_indexed_and_end_when_their_worker_exits():
    assert set(JOBS) == {GPU_JOB, CPU_JOB}
    for name, job in JOBS.items():
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed", name
        assert type(spec["completions"]) is int and spec["completions"] >= 1, name
        # All pods at once (one per GPU), and equal so the Job can be resized in place.
        assert spec["parallelism"] == spec["completions"], name
        # A crashed worker's sessions go back to the queue when its lease expires: a failed
        # pod is replaced once for its index, and one bad node does not fail the whole Job.
        assert spec["backoffLimitPerIndex"] == 1 and "backoffLimit" not in spec, name
        assert pod(name)["restartPolicy"] == "Never", name  # backoffLimitPerIndex needs it
        # The generated selector, and labels that find the Job and its pods alike.
        assert "selector" not in spec and "manualSelector" not in spec, name
        labels = spec["template"]["metadata"]["labels"]
        assert job["metadata"]["labels"] == labels, name
        assert labels["app.kubernetes.io/name"] == "streameval", name
        # The worker is the pod's one ordinary container; the servers are native sidecars,
        # each gating the next by its startup probe.
        assert [c["name"] for c in pod(name)["containers"]] == ["worker"], name
        for sidecar in pod(name)["initContainers"]:
            assert sidecar["restartPolicy"] == "Always", (name, sidecar["name"])
            assert "startupProbe" in sidecar and "readinessProbe" in sidecar, sidecar["name"]
    assert [c["name"] for c in pod(GPU_JOB)["initContainers"]] == ["vllm", "adapter"]
    assert [c["name"] for c in pod(CPU_JOB)["initContainers"]] == ["adapter"]
    assert JOBS[GPU_JOB]["spec"]["completions"] == 8


def test_gpus_are_whole_and_one_per_pod():
    used = {name: {c: gpus(spec) for c, spec in containers(name).items()} for name in JOBS}
    assert used == {
        GPU_JOB: {"vllm": 1, "adapter": 0, "worker": 0},
        CPU_JOB: {"adapter": 0, "worker": 0},
    }
    vllm = containers(GPU_JOB)["vllm"]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 1
    # One model instance spans the pod's GPUs.
    assert int(option(vllm, "--tensor-parallel-size")) == gpus(vllm)
    assert pod(GPU_JOB)["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "tolerations" not in pod(CPU_JOB)


def test_the_gpu_check_refuses_fractions_strings_and_requests_alone():
    for resources_ in (
        {"limits": {"nvidia.com/gpu": 0.5}},
        {"limits": {"nvidia.com/gpu": "1"}},
        {"requests": {"nvidia.com/gpu": 1}},
        {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 1}},
    ):
        with pytest.raises(AssertionError):
            gpus({"name": "x", "resources": resources_})


def built_images() -> set[str]:
    """The tags docker/'s build instructions give (`docker build ... -t NAME .`)."""
    names = set()
    for path in (REPO / "docker").glob("*Dockerfile"):
        names |= set(re.findall(r"^#.*docker build .*-t ([\w./-]+) \.$", path.read_text(), re.M))
    return names


def vllm_image() -> str:
    """The vLLM image the adapter image is built on."""
    arguments = [a for i, a in dockerfile(REPO / "docker" / "adapter.Dockerfile") if i == "ARG"]
    (base,) = [a.split("=", 1)[1] for a in arguments if a.startswith("BASE_IMAGE=")]
    return base


def test_every_image_is_ours_or_the_vllm_image():
    assert {"streameval-core", "streameval-adapter"} <= built_images()
    images = {name: {c: spec["image"] for c, spec in containers(name).items()} for name in JOBS}
    assert images == {
        GPU_JOB: {
            "vllm": vllm_image(),
            "adapter": "streameval-adapter:latest",
            "worker": "streameval-core:latest",
        },
        CPU_JOB: {"adapter": "streameval-core:latest", "worker": "streameval-core:latest"},
    }
    assert vllm_image() == "vllm/vllm-openai:latest"
    for job in images.values():
        for image in job.values():
            name = image.rsplit(":", 1)[0]
            assert name in built_images() or image == vllm_image(), image


# --------------------------------------------------------------------------- wiring


def test_the_worker_reaches_the_adapter_and_the_adapter_vllm_on_loopback():
    for name in JOBS:
        parts = containers(name)
        adapter, worker = parts["adapter"], parts["worker"]
        assert option(adapter, "--host") == LOOPBACK
        port = int(option(adapter, "--port"))
        assert container_ports(adapter) == {"adapter": port}
        assert option(worker, "--adapter-url") == f"ws://{LOOPBACK}:{port}/ws"
        assert "hostNetwork" not in pod(name)
        for container in parts.values():
            assert all("hostPort" not in p for p in container.get("ports", []))
    vllm, adapter = containers(GPU_JOB)["vllm"], containers(GPU_JOB)["adapter"]
    assert words(vllm)[:2] == ["vllm", "serve"]
    assert option(vllm, "--host") == LOOPBACK
    vllm_port = int(option(vllm, "--port"))
    assert container_ports(vllm) == {"vllm": vllm_port}
    assert f"base_url=http://{LOOPBACK}:{vllm_port}/v1" in words(adapter)


def test_the_adapters_are_built_from_their_command_lines():
    """The GPU adapter's command, with the ConfigMap's values, builds the `openai` adapter
    for the model vLLM serves, and vLLM accepts as many images as it sends."""
    vllm, adapter = containers(GPU_JOB)["vllm"], containers(GPU_JOB)["adapter"]
    command = words(adapter)
    assert command[:4] == ["streameval", "adapter", "serve", "openai"]
    options = [command[i + 1] for i, word in enumerate(command) if word == "-A"]
    built = build_adapter("openai", option(adapter, "--config"), options)
    model = CONFIG_MAPS["streameval-run"]["data"]["MODEL"]
    assert built.config.model == model == words(vllm)[2]  # `vllm serve MODEL`
    assert "--model" not in words(vllm)
    limit = json.loads(option(vllm, "--limit-mm-per-prompt"))
    assert limit["image"] >= built.config.qa_max_frames
    cpu = words(containers(CPU_JOB)["adapter"])
    assert cpu[:4] == ["streameval", "adapter", "serve", "reference"]
    build_adapter("reference", None, [])


def test_probes_poll_the_health_routes_on_the_ports_the_servers_listen_on():
    routes = {"vllm": "/health", "adapter": "/healthz"}
    for name in JOBS:
        for sidecar in pod(name)["initContainers"]:
            port = int(option(sidecar, "--port"))
            for probe in ("startupProbe", "readinessProbe"):
                assert probed(sidecar, probe) == (port, routes[sidecar["name"]]), sidecar
                assert port in container_ports(sidecar).values()
    # Loading the weights may take long: the startup probes wait 30 minutes for vLLM and for
    # an adapter that loads a model itself (its /healthz answers 503 `loading` meanwhile).
    for sidecar in ("vllm", "adapter"):
        startup = containers(GPU_JOB)[sidecar]["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] == 1800, sidecar
    # The probed route is the one the adapter serves.
    with AdapterProcess("always") as served:
        reply = httpx.get(f"http://{served.host}:{served.port}{routes['adapter']}")
        assert reply.status_code == 200


def test_env_comes_from_the_provided_secret_and_config_map():
    for name in JOBS:
        for container in containers(name).values():
            defined = [variable["name"] for variable in container.get("env", [])]
            for variable in container.get("env", []):
                source = variable.get("valueFrom", {})
                if "secretKeyRef" in source:
                    ref = source["secretKeyRef"]
                    assert ref["key"] in SECRETS[ref["name"]]["stringData"], ref
                if "configMapKeyRef" in source:
                    ref = source["configMapKeyRef"]
                    assert ref["key"] in CONFIG_MAPS[ref["name"]]["data"], ref
            # An undefined $(VAR) would reach the program as the literal text.
            raw = " ".join(container.get("command", []) + container.get("args", []))
            assert set(ENV_REFERENCE.findall(raw)) <= set(defined), container["name"]
        worker = {v["name"]: v for v in containers(name)["worker"]["env"]}
        assert worker[STORE_ENV]["valueFrom"] == {
            "secretKeyRef": {"name": "streameval", "key": STORE_ENV}
        }
        assert worker["RUN_ID"]["valueFrom"] == {
            "configMapKeyRef": {"name": "streameval-run", "key": "RUN_ID"}
        }
        assert option(containers(name)["worker"], "--run") == "REPLACE-WITH-RUN-ID"
        # The store URL stays out of the command line.
        assert "--store" not in words(containers(name)["worker"])
        assert worker[CACHE_ENV]["value"] == "/cache"
    # Placeholders only: a shared PostgreSQL store, and no credentials in the repository.
    secret = SECRETS["streameval"]["stringData"]
    assert set(secret) == {STORE_ENV, "HF_TOKEN"}
    assert secret[STORE_ENV].startswith("postgresql+psycopg://")
    assert "REPLACE-ME" in secret[STORE_ENV] and secret["HF_TOKEN"] == ""
    assert set(CONFIG_MAPS["streameval-run"]["data"]) == {"RUN_ID", "MODEL", "ADAPTER_CONFIG"}


def test_volumes_exist_and_are_mounted_where_they_are_read():
    for name in JOBS:
        volumes = {volume["name"]: volume for volume in pod(name)["volumes"]}
        for container in containers(name).values():
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, (name, mount)
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in CLAIMS, volume
        mounts = {m["mountPath"]: m for m in containers(name)["worker"]["volumeMounts"]}
        assert volumes[mounts["/cache"]["name"]] == {"name": "cache", "emptyDir": {}}
    gpu = containers(GPU_JOB)
    vllm_mounts = {m["mountPath"]: m["name"] for m in gpu["vllm"]["volumeMounts"]}
    assert vllm_mounts == {"/root/.cache/huggingface": "hf-cache", "/dev/shm": "dshm"}
    worker_mounts = {m["mountPath"]: m for m in gpu["worker"]["volumeMounts"]}
    assert worker_mounts["/data"] == {"name": "data", "mountPath": "/data", "readOnly": True}
    # Every pod on every node shares the cache and the data.
    assert all(claim["spec"]["accessModes"] == ["ReadWriteMany"] for claim in CLAIMS.values())
    assert "volumeMounts" not in containers(CPU_JOB)["adapter"]


# --------------------------------------------------------------------------- the CLI


def readme_invocations() -> list[list[str]]:
    """The `streameval` command lines of the README's shell blocks, continuations joined."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.DOTALL)
    lines = re.sub(r"\\\n", " ", "".join(blocks)).splitlines()
    return [shlex.split(line)[1:] for line in lines if line.strip().startswith("streameval ")]


def test_the_manifests_streameval_commands_exist_with_their_options():
    invocations = [
        words(container)[1:]
        for name in JOBS
        for container in containers(name).values()
        if words(container)[0] == "streameval"
    ]
    assert {cli_command(invocation)[1] for invocation in invocations} == {
        ("adapter", "serve"),
        ("worker",),
    }
    for invocation in invocations:
        check_streameval(invocation)


def test_the_readmes_streameval_commands_exist_with_their_options():
    invocations = readme_invocations()
    assert [words[0] for words in invocations] == ["run", "score", "run", "score"]
    for invocation in invocations:
        check_streameval(invocation)
    creates = [words for words in invocations if words[0] == "run"]
    assert all("--detach" in words and "--store" in words for words in creates)


def test_the_readme_applies_files_that_exist():
    applied = re.findall(r"-f (deploy/kubernetes/[\w.-]+)", README.read_text())
    assert sorted(set(applied)) == [
        "deploy/kubernetes/configmap.yaml",
        "deploy/kubernetes/secret.example.yaml",
        "deploy/kubernetes/storage.example.yaml",
        "deploy/kubernetes/worker-job-cpu.yaml",
        "deploy/kubernetes/worker-job.yaml",
    ]
    assert all((REPO / path).is_file() for path in applied)
