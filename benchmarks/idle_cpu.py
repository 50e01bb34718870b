"""CPU an idle bridge and an idle ``tether worker run`` burn: no messages, no runs.

A reference gateway in its own process, then ``tether bridge run`` (default settings, a fresh
SQLite store, the echo agent) and ``tether worker run`` on the same store, each a real child
process. After ``SETTLE`` seconds (start-up done) each one's CPU (``utime + stime`` from
``/proc/<pid>/stat``) is read over ``SECONDS`` seconds, in ``ROUNDS`` interleaved windows;
printed as a share of one core, per process, with the gateway's beside them. Goal (issue 39):
under 0.5% of a core for the bridge and for the worker. Linux only. ``SECONDS``, ``ROUNDS``,
``SETTLE`` and ``STORE`` (a ``postgresql://`` URL instead of a file) may be set.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

import trio

from bridge_throughput import TOKEN, gateway_process
from tether.bridge import write_token

SECONDS = float(os.environ.get("SECONDS", "30"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SETTLE = float(os.environ.get("SETTLE", "5"))
TICKS = os.sysconf("SC_CLK_TCK")
TETHER = [
    sys.executable,
    "-c",
    "import sys; from tether._cli import main; sys.exit(main(sys.argv[1:]))",
]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tether-idle-") as tmp:
        folder = Path(tmp)
        store = os.environ.get("STORE", str(folder / "bridge.db"))
        async with gateway_process(folder) as (url, gateway_pid):
            bridge_token = folder / "bridge-token"
            write_token(bridge_token, TOKEN)
            env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
            env["TETHER_DATA_DIR"] = str(folder / "data")
            common = ["--store", store, "--log-level", "WARNING"]
            gateway = ["--gateway", url, "--token-file", str(bridge_token)]
            bridge = await trio.lowlevel.open_process(
                [*TETHER, "bridge", "run", *gateway, *common],
                env=env,
                stderr=(folder / "bridge.log").open("wb"),
            )
            await trio.sleep(2.0)  # the bridge creates and migrates the store first
            worker = await trio.lowlevel.open_process(
                [*TETHER, "worker", "run", *common],
                env=env,
                stderr=(folder / "worker.log").open("wb"),
            )
            procs = {"bridge": bridge.pid, "worker run": worker.pid, "gateway": gateway_pid}
            try:
                await trio.sleep(SETTLE)
                shares: dict[str, list[float]] = {name: [] for name in procs}
                for _ in range(ROUNDS):
                    before = {name: cpu_seconds(pid) for name, pid in procs.items()}
                    start = trio.current_time()
                    await trio.sleep(SECONDS / ROUNDS)
                    wall = trio.current_time() - start
                    for name, pid in procs.items():
                        shares[name].append((cpu_seconds(pid) - before[name]) / wall)
                for proc, name in ((bridge, "bridge"), (worker, "worker")):
                    if proc.poll() is not None:
                        log = (folder / f"{name}.log").read_text()
                        raise RuntimeError(f"the {name} exited early:\n{log}")
            finally:
                for proc in (worker, bridge):
                    proc.terminate()
                    with trio.CancelScope(shield=True):
                        await proc.wait()
    kind = "PostgreSQL" if store.startswith("postgresql") else "SQLite"
    print(f"idle CPU, {kind} store, {ROUNDS} windows of {SECONDS / ROUNDS:.0f} s (goal < 0.5%):")
    for name, values in shares.items():
        spread = f"{min(values):.2%}-{max(values):.2%}"
        print(f"  {name:<11} median {statistics.median(values):6.2%} of a core ({spread})")


if __name__ == "__main__":
    trio.run(main)
