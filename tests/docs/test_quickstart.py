"""The Quickstart page runs as written, from a folder outside the repository (issue 32.4).

The wheel is built (``uv build``) and installed into a fresh environment; the page's agent is
saved in a folder of its own; the page's ``tether gateway serve`` and ``tether bridge run``
commands run there with that environment's ``tether`` and no ``PYTHONPATH``; the page's curl
commands send the message and wait for the reply. Two flags are added so parallel runs never
share a port: the gateway's ``--port 0`` (the last ``--port`` wins) and the bridge's
``--gateway`` with the port the gateway printed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from support.docs_blocks import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "quickstart.md"
DEFAULT_URL = "http://127.0.0.1:8765"
EXPECTED_REPLY = "You said 2 word(s). Backwards: tnega olleh"


def page_commands() -> list[str]:
    """Every ``$`` command of the page's console blocks, in order."""
    commands = []
    for block in blocks(PAGE):
        if block.lang == "console":
            commands += [
                line.removeprefix("$ ").split("  #", 1)[0].strip()
                for line in block.code.replace("\\\n", " ").splitlines()
                if line.startswith("$ ")
            ]
    return commands


def page_output(block_with: str) -> list[str]:
    """The output lines (no ``$``) of the console block containing ``block_with``."""
    (block,) = [b for b in blocks(PAGE) if b.lang == "console" and block_with in b.code]
    return [line for line in block.code.splitlines() if line and not line.startswith("$ ")]


def agent_source(page: Path) -> str:
    (agent,) = [b.code for b in blocks(page) if b.lang == "python" and "def factory" in b.code]
    return agent


def one(commands: list[str], start: str) -> str:
    (found,) = [c for c in commands if c.startswith(start)]
    return found


def test_the_readme_and_the_page_show_the_same_agent_and_commands() -> None:
    assert agent_source(ROOT / "README.md") == agent_source(PAGE)
    readme = [
        line.removeprefix("$ ").split("  #", 1)[0].strip()
        for b in blocks(ROOT / "README.md")
        if b.lang == "console"
        for line in b.code.splitlines()
        if line.startswith("$ ")
    ]
    for start in ("tether gateway serve", "tether bridge run"):
        assert one(readme, start) == one(page_commands(), start)


def run(*args: str | Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=240, check=True, **kwargs
    )


def first_lines(stream: IO[str], n: int) -> list[str]:
    return [stream.readline().rstrip("\n") for _ in range(n)]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def curl_with_json() -> bool:
    """Whether a curl with ``--json`` (7.82 and later) is installed."""
    if shutil.which("curl") is None:
        return False
    first = run("curl", "--version").stdout.split()
    version = tuple(int(n) for n in re.findall(r"\d+", first[1])[:2]) if len(first) > 1 else ()
    return version >= (7, 82)


def curl_or_httpx(script: list[str], cwd: Path, env: dict[str, str]) -> list[Any]:
    """Run the page's ``TOKEN=...`` and curl lines in bash (when curl takes ``--json``), else
    make the same requests with httpx; returns each response's JSON."""
    if curl_with_json():
        out = run("bash", "-ec", "\n".join(script), cwd=cwd, env=env).stdout
        decoder, docs, at = json.JSONDecoder(), [], 0
        while at < len(out):
            doc, at = decoder.raw_decode(out, at)
            docs.append(doc)
        return docs
    token = (cwd / "tether-data" / "gateway" / "token").read_text().strip()
    answers = []
    for line in script[1:]:
        words = shlex.split(line.replace("$TOKEN", token))
        url = next(w for w in words if w.startswith("http"))
        headers = dict(words[i + 1].split(": ", 1) for i, w in enumerate(words) if w == "-H")
        if "--json" in words:
            body = json.loads(words[words.index("--json") + 1])
            answers.append(httpx.post(url, json=body, headers=headers, timeout=30).json())
        else:
            answers.append(httpx.get(url, headers=headers, timeout=30).json())
    return answers


@pytest.mark.slow
def test_the_quickstart_runs_as_written_from_a_folder_of_its_own(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs uv (it builds the wheel)")
    commands = page_commands()
    gateway_cmd = one(commands, "tether gateway serve")
    bridge_cmd = one(commands, "tether bridge run")
    curl_script = [c for c in commands if c.startswith(("TOKEN=", "curl "))]
    assert len(curl_script) == 3, curl_script
    assert curl_script[0].startswith("TOKEN="), curl_script

    # 1. install: the wheel, into a fresh environment
    run(uv, "build", "--wheel", "--out-dir", tmp_path / "dist", ROOT)
    (wheel,) = (tmp_path / "dist").glob("tether-*.whl")
    venv = tmp_path / "venv"
    run(uv, "venv", "--quiet", "--python", sys.executable, venv)
    run(uv, "pip", "install", "--quiet", "--python", venv / "bin" / "python", wheel)

    # 2. the agent, in a folder of its own
    project = tmp_path / "myproject"
    project.mkdir()
    (project / "myagent.py").write_text(agent_source(PAGE))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv)}
    assert shutil.which("tether", path=env["PATH"]) == str(venv / "bin" / "tether")

    # 3. the gateway and the bridge, each as the page starts it
    gateway = subprocess.Popen(
        [*shlex.split(gateway_cmd), "--port", "0"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    processes.append(gateway)
    assert gateway.stdout is not None
    where, link = first_lines(gateway.stdout, 2)
    url = where.split()[2].rstrip("/")
    token = (project / "tether-data" / "gateway" / "token").read_text().strip()
    assert link == (
        f"tether gateway: chat page {url}/ (paste the token from tether-data/gateway/token; "
        "it opens everything: give people a --user-token-file)"
    )
    assert token not in where + link

    bridge_log = tmp_path / "bridge.log"
    with open(bridge_log, "w") as log:
        bridge = subprocess.Popen(
            [*shlex.split(bridge_cmd), "--gateway", url],
            cwd=project,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
    processes.append(bridge)

    # 4. the message, with the page's curl commands
    script = [line.replace(DEFAULT_URL, url) for line in curl_script]
    sent, answered = curl_or_httpx(script, project, env)
    assert sent == {"id": "hello-1", "status": "queued"}
    assert (answered["status"], answered["reply"]) == ("answered", EXPECTED_REPLY)
    # the transcript on the page shows what really came back
    shown = page_output("curl")
    assert shown[0] == json.dumps(sent)
    assert f'"reply": "{EXPECTED_REPLY}"' in shown[1]

    # 5. the chat page the link opens
    page = httpx.get(f"{url}/", timeout=30)
    assert page.status_code == 200
    assert "<title>tether gateway</title>" in page.text

    # Ctrl+C stops each gracefully
    for process in (bridge, gateway):
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    lines = bridge_log.read_text().splitlines()
    assert lines[0] == (
        f"tether: agent module myagent from the working directory ({project / 'myagent.py'}; "
        "added to the import path, as python -m does)"
    )
    banner = r"tether bridge: http://127\.0\.0\.1:\d+ -> tether-data/bridge/custody\.db, "
    assert re.match(banner, lines[1]), lines[1]
    assert not [line for line in lines if "Traceback" in line]
