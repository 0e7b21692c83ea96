"""Container files, checked without a container engine: compose structure, Dockerfile rules, and the image's
exact command (entrypoint + environment) run here on the exported tiny model."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.service.harness import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions per build stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), args.strip()))
    return stages


def test_dockerfile_is_multi_stage_and_the_runtime_has_no_torch() -> None:
    stages = dockerfile_stages()
    assert len(stages) == 2
    build, runtime = stages
    assert " AS export" in build[0][1] and "torch==2.13.0" in " ".join(a for i, a in build if i == "RUN")
    assert any(i == "RUN" and "transduce export" in a and "--dtype ${MODEL_DTYPE}" in a for i, a in build)
    assert ("ARG", "MODEL_DTYPE=float32") in build
    assert "nvidia/cuda" in runtime[0][1] and "runtime" in runtime[0][1]
    runs = " ".join(a for i, a in runtime if i == "RUN")
    assert "torch" not in runs and "build-essential" not in runs and "gcc" not in runs
    assert "pip install --no-cache-dir --no-deps ." in runs  # the code; its dependencies are a layer of their own
    instructions = dict(runtime)
    user, _, group = instructions["USER"].partition(":")  # numeric: Kubernetes' runAsNonRoot refuses a name
    assert user.isdigit() and int(user) != 0 and (not group or group.isdigit())
    assert "useradd --create-home --uid " + user in runs  # (with a home, for libraries that want one)
    lines = (ROOT / ".dockerignore").read_text().splitlines()  # the build context: what the COPYs name, no .venv
    ignored = [line for line in lines if line and not line.startswith("#")]
    assert ignored[:6] == ["*", "!pyproject.toml", "!constraints.txt", "!README.md", "!LICENSE", "!transduce/"]
    assert instructions["HEALTHCHECK"].endswith('CMD ["transduce", "health"]')  # GET /health/ready (below)
    assert instructions["STOPSIGNAL"] == "SIGTERM"
    assert instructions["ENTRYPOINT"] == '["transduce", "serve"]'
    assert any(i == "COPY" and a.startswith("--from=export") for i, a in runtime)
    for instruction, _ in build + runtime:  # only known instructions (a typo would break `docker build`)
        assert instruction in {
            "FROM",
            "RUN",
            "COPY",
            "ENV",
            "WORKDIR",
            "USER",
            "EXPOSE",
            "HEALTHCHECK",
            "STOPSIGNAL",
            "ENTRYPOINT",
            "CMD",
            "ARG",
            "LABEL",
        }


def test_dependencies_are_installed_from_pyproject_before_the_code_is_copied(tmp_path: Path) -> None:
    """Each stage installs what pyproject.toml lists (the runtime: the base dependencies, the export: and torch's)
    in a layer that only pyproject.toml feeds, so a code change rebuilds no dependency; each command is run here."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    expected = [project["dependencies"] + project["optional-dependencies"]["torch"], project["dependencies"]]
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for stage, wanted in zip(dockerfile_stages(), expected, strict=True):
        copies = [a for i, a in stage if i == "COPY" and not a.startswith("--from=")]
        assert copies[0] == "pyproject.toml constraints.txt ./", copies  # nothing else before the dependencies' layer
        first_code = stage.index(("COPY", copies[1]))
        (install,) = [(n, a) for n, (i, a) in enumerate(stage) if i == "RUN" and "requirements.txt" in a]
        assert stage.index(("COPY", copies[0])) < install[0] < first_code
        command = shlex.split(install[1].split(">", 1)[0])  # python3 -c "...": what it writes to requirements.txt
        assert command[:2] == ["python3", "-c"]
        listed = subprocess.run([sys.executable, "-c", command[2]], cwd=tmp_path, capture_output=True, text=True)
        assert listed.returncode == 0 and listed.stdout.splitlines() == wanted, listed.stderr
        assert "pip install --no-cache-dir -r /tmp/requirements.txt -c constraints.txt" in install[1]


def test_pyproject_base_dependencies_have_no_torch() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith(("torch", "onnx>", "onnx=", "transformers")) for d in project["dependencies"])
    assert any(d.startswith("onnxruntime-gpu") for d in project["dependencies"])


CONSTRAINTS = ROOT / "constraints.txt"
UPDATE_CONSTRAINTS = "TRANSDUCE_UPDATE_CONSTRAINTS"
UNPINNED = {"transduce", "torch", "setuptools"}  # torch: pyproject pins it (the CPU build's version is 2.13.0+cpu)


def image_packages() -> dict[str, str]:
    """What `pip install .[torch]` installs here (the Docker image's two stages), each at its installed version:
    the requirements of the base and torch extras, followed through every package's own."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    wanted = [Requirement(r) for r in metadata.requires("transduce") or ()]
    stack = [r for r in wanted if r.marker is None or r.marker.evaluate({"extra": "torch"})]
    while stack:
        requirement = stack.pop()
        name = canonicalize_name(requirement.name)
        if name in found or name in UNPINNED:
            continue
        found[name] = metadata.version(requirement.name)
        for text in metadata.requires(requirement.name) or ():
            needed = Requirement(text)
            extras = requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in extras):
                stack.append(needed)
    return found


def test_constraints_pin_what_the_image_installs_as_tested_here() -> None:
    """The Docker image installs with constraints.txt, and CI (`.ci/run`) does too, so the image runs the versions
    the suite passed with, not whatever PyPI has on the day it is built. The pins are the installed versions of
    every package serving and export need (torch's own dependencies aside: torch comes from PyTorch's index first);
    TRANSDUCE_UPDATE_CONSTRAINTS=1 rewrites the file from this environment. Linux x86_64 only: the image's platform
    (elsewhere other packages are installed, onnxruntime for onnxruntime-gpu on macOS say)."""
    import platform

    if (sys.platform, platform.machine()) != ("linux", "x86_64"):
        pytest.skip("constraints.txt is the Docker image's, made on Linux x86_64")
    installed = image_packages()
    pins = {**installed, "onnxruntime": "1.31.1"}  # the CPU build, installed on ARM and macOS instead of -gpu
    text = CONSTRAINTS.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    expected = header + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
    if os.environ.get(UPDATE_CONSTRAINTS) == "1":
        CONSTRAINTS.write_text(expected)
    assert text == expected, f"constraints.txt is not this environment's: {UPDATE_CONSTRAINTS}=1 rewrites it"
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text_requirement in project["dependencies"] + project["optional-dependencies"]["torch"]:
        requirement = Requirement(text_requirement)
        if requirement.name not in UNPINNED:  # each direct dependency pinned, within what pyproject asks
            assert requirement.specifier.contains(pins[requirement.name], prereleases=True), requirement


def test_one_onnxruntime_build_installs_on_each_platform_and_has_a_wheel_there() -> None:
    """onnxruntime-gpu 1.31.1 has wheels for Linux x86_64, Linux aarch64 (manylinux_2_34) and Windows x64 only (pip
    download, 2026-11-27): `pip install transduce` failed on macOS and Windows on ARM; there the CPU build is taken."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtimes = [Requirement(d) for d in project["dependencies"] if d.startswith("onnxruntime")]
    gpu_wheels = {("linux", "x86_64"), ("linux", "aarch64"), ("win32", "AMD64")}
    for platform, machine in (
        ("linux", "x86_64"),
        ("linux", "aarch64"),
        ("darwin", "arm64"),
        ("win32", "AMD64"),
        ("win32", "ARM64"),
    ):
        env = {"sys_platform": platform, "platform_machine": machine}
        (chosen,) = [r for r in runtimes if r.marker is not None and r.marker.evaluate(env)]
        assert str(chosen.specifier) == "==1.31.1"
        assert chosen.name == ("onnxruntime-gpu" if (platform, machine) in gpu_wheels else "onnxruntime"), env


def test_compose_reserves_the_gpu_and_has_a_cpu_profile() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    gpu = compose["services"]["transduce"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["environment"]["TRANSDUCE_DEVICE"] == "cuda"
    cpu = compose["services"]["transduce-cpu"]
    assert cpu["profiles"] == ["cpu"] and "deploy" not in cpu and cpu["environment"]["TRANSDUCE_DEVICE"] == "cpu"
    for service in (gpu, cpu):
        assert service["build"]["args"]["MODEL_DTYPE"] == "${TRANSDUCE_MODEL_DTYPE:-float32}"
        assert service["ports"] == ["${TRANSDUCE_HOST_PORT:-5000}:5000"]
        # a .env file's settings reach the server, but never where it listens (the port mapping's other end)
        assert service["env_file"] == [{"path": ".env", "required": False}] and service["init"] is True
        assert (service["environment"]["TRANSDUCE_HOST"], service["environment"]["TRANSDUCE_PORT"]) == ("0.0.0.0", 5000)
        assert service["build"]["args"]["INT8_WEIGHT_BITS"] == "${TRANSDUCE_INT8_WEIGHT_BITS:-7}"
        assert service["healthcheck"]["test"] == ["CMD", "transduce", "health"]
        assert service["restart"] == "unless-stopped"
        assert int(service["stop_grace_period"].rstrip("s")) > 30  # longer than the default drain grace
        assert all(key.startswith("TRANSDUCE_") for key in service["environment"])


def runtime_tree(dest: Path) -> Path:
    """The files the runtime stage COPYs from the build context (not --from=export), placed as the image has them."""
    for instruction, args in dockerfile_stages()[1]:
        if instruction != "COPY" or args.startswith("--from="):
            continue
        *sources, target = args.split()
        for source in sources:
            place = dest / target / Path(source).name if target.endswith("/") else dest / target
            place.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, place, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(ROOT / source, place)
    return dest


def test_the_runtime_stage_copies_only_what_serving_imports(tmp_path: Path) -> None:
    tree = runtime_tree(tmp_path / "app")
    copied = {p.relative_to(tree / "transduce").parts[0] for p in (tree / "transduce").iterdir()}
    assert {"engine", "service", "cli.py", "serve_cli.py"} <= copied
    assert not copied & {"model", "export", "training", "bench", "interop", "weights"}


def test_the_image_command_serves_the_exported_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Same entrypoint and ENV as the runtime stage, on a copy of only the code the runtime stage copies; only the
    model path and port are this machine's."""
    runtime = dockerfile_stages()[1]
    env = {}
    for instruction, args in runtime:
        if instruction == "ENV":
            env.update(dict(part.split("=", 1) for part in shlex.split(args)))
    port = free_port()
    env.update({"TRANSDUCE_MODEL_DIR": str(tiny_model_dir), "TRANSDUCE_PORT": str(port), "TRANSDUCE_HOST": "127.0.0.1"})
    env.pop("PATH", None)
    env["PYTHONPATH"] = str(runtime_tree(tmp_path / "app"))  # found before the editable install of the whole package
    entrypoint = yaml.safe_load(dict(runtime)["ENTRYPOINT"])
    assert entrypoint[0] == "transduce"
    command = [
        sys.executable,
        "-c",
        "import sys, transduce.cli; print(transduce.cli.__file__, file=sys.stderr); sys.exit(transduce.cli.main())",
        *entrypoint[1:],
    ]
    proc = subprocess.Popen(
        command, env={**os.environ, **env}, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout_s=60)
        r = httpx.post(url + "/translate", json={"q": "Hello world.", "source": "en", "target": "de"}, timeout=30)
        assert r.status_code == 200 and r.json()["translatedText"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()[-2000:]
    assert out.decode().splitlines()[0] == str(tmp_path / "app" / "transduce" / "cli.py")  # the copy ran, not ROOT


def test_the_healthchecks_reach_a_server_that_asks_health_callers_for_a_key(tmp_path: Path) -> None:
    """The image's and compose's health checks are `transduce health`, run here from a copy of the image's code: it
    asks /health/ready on TRANSDUCE_PORT with the first key of TRANSDUCE_API_KEYS, else of the key file (a shell
    check with curl read no key file, so under TRANSDUCE_PROTECT_HEALTH with only a key file it never passed)."""
    from tests.service.harness import FakeTranslator, live_server

    docker = json.loads(dict(dockerfile_stages()[1])["HEALTHCHECK"].split(" CMD ", 1)[1])
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert docker == ["transduce", "health"]
    assert all(s["healthcheck"]["test"] == ["CMD", *docker] for s in compose["services"].values())
    app = runtime_tree(tmp_path / "app")
    keys = tmp_path / "keys"
    keys.write_text("# the team's\nfile-key 10\n")

    def health(*args: str, **variables: str) -> tuple[int, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSDUCE_")}
        env.update(PYTHONPATH=str(app), **variables)
        code = "import sys, transduce.cli; sys.exit(transduce.cli.main())"
        done = subprocess.run([sys.executable, "-c", code, *docker[1:], *args], env=env, capture_output=True, text=True)
        return done.returncode, done.stderr

    with live_server(FakeTranslator(), api_keys="k1", api_keys_file=str(keys), protect_health=True) as url:
        port = url.rsplit(":", 1)[1]
        assert health(TRANSDUCE_PORT=port, TRANSDUCE_API_KEYS=" , k1 ,k2") == (0, "")
        assert health(TRANSDUCE_PORT=port, TRANSDUCE_API_KEYS_FILE=str(keys)) == (0, "")  # the file's first key
        assert health(TRANSDUCE_PORT=port, TRANSDUCE_HOST="0.0.0.0", TRANSDUCE_API_KEYS="k1")[0] == 0
        status, err = health(TRANSDUCE_PORT=port)  # no key: 401
        assert status == 1 and err == f"transduce health: {url}/health/ready answered 401: " + (
            "an API key is required: pass api_key in the body or 'Authorization: Bearer KEY'\n"
        )
        assert health("--url", url, TRANSDUCE_PORT="1", TRANSDUCE_API_KEYS="k1") == (0, "")  # serve --port elsewhere
    status, err = health(TRANSDUCE_PORT=port, TRANSDUCE_API_KEYS="k1")  # the server is gone
    assert status == 1 and err.startswith(f"transduce health: cannot reach {url}/health/ready: ")
    status, err = health(TRANSDUCE_PORT="abc")
    assert status == 2 and err.startswith("transduce health: the server's settings are invalid: ")
    import http.server
    import threading

    class Odd(http.server.BaseHTTPRequestHandler):  # another server's 503: a JSON list, not an object
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = b"[1, 2]"
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    odd = http.server.HTTPServer(("127.0.0.1", 0), Odd)
    threading.Thread(target=odd.serve_forever, daemon=True).start()
    try:
        status, err = health("--url", f"http://127.0.0.1:{odd.server_port}")  # ('list' has no 'get': a traceback)
    finally:
        odd.shutdown()
    assert (status, err) == (
        1,
        f"transduce health: http://127.0.0.1:{odd.server_port}/health/ready answered 503: [1, 2]\n",
    )
    for bad in ("http://[::1", "http://127.0.0.1:99999", "127.0.0.1:5000"):  # httpx's InvalidURL was a traceback
        status, err = health("--url", bad)
        assert status == 2 and err.startswith("transduce health: --url must be a server's http:// or https:// "), err
        assert len(err.splitlines()) == 1 and repr(bad) in err
