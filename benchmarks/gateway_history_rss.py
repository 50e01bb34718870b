"""What reading a room's history costs the reference gateway in memory (issue #48).

A real ``tether gateway serve`` process; a room of 200 messages of 32,000 characters, each
answered with a reply of 1,000,000 characters (what the protocol allows). Then six clients read
``GET /v1/messages?room=R&limit=200`` at once. Printed: the gateway's resident memory before
the reads, its peak while they run (sampled every 5 ms from /proc) and after, and the size of
one response. Before issue #48 each response held every body whole (38 MB each).

    uv run python benchmarks/gateway_history_rss.py [--messages 200] [--readers 6]

(``PYTHONPATH=<an older checkout>/src`` in front measures that checkout's gateway.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOM = "big"


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def fill(url: str, token: str, messages: int) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=auth, timeout=120) as http:
        for i in range(messages):
            text = f"{i:05d}" + "x" * 31_995  # the longest text a message may have
            sent = http.post("/v1/messages", json={"room": ROOM, "text": text, "id": f"m{i}"})
            sent.raise_for_status()
        done = 0
        while done < messages:
            polled = http.get("/v1/tasks", params={"wait": 1, "limit": 100})
            for task in polled.raise_for_status().json()["tasks"]:
                id = task["id"]
                http.post(
                    f"/v1/tasks/{id}/ack", json={"id": id, "durable": True}
                ).raise_for_status()
                reply = "y" * 1_000_000
                http.post("/v1/results", json={"id": id, "body": reply}).raise_for_status()
                done += 1


def read_all(url: str, token: str, readers: int, messages: int) -> list[int]:
    sizes: list[int] = []

    def one() -> None:
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=auth, timeout=300) as http:
            answer = http.get("/v1/messages", params={"room": ROOM, "limit": messages})
            answer.raise_for_status()
            sizes.append(len(answer.content))

    threads = [threading.Thread(target=one) for _ in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--readers", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        token_file = Path(tmp) / "token"
        argv = [sys.executable, "-m", "tether", "gateway", "serve", "--port", "0"]
        argv += ["--token-file", str(token_file), "--db", str(Path(tmp) / "gateway.db")]
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        ) as gateway:
            try:
                assert gateway.stdout is not None
                first = gateway.stdout.readline()  # "tether gateway: http://127.0.0.1:PORT/ ..."
                url = first.split()[2].rstrip("/")
                token = token_file.read_text().strip()
                fill(url, token, args.messages)
                time.sleep(1.0)
                before = rss_mib(gateway.pid)
                peak = before
                stop = threading.Event()

                def sample() -> None:
                    nonlocal peak
                    while not stop.is_set():
                        peak = max(peak, rss_mib(gateway.pid))
                        time.sleep(0.005)

                sampler = threading.Thread(target=sample)
                sampler.start()
                began = time.perf_counter()
                sizes = read_all(url, token, args.readers, args.messages)
                took = time.perf_counter() - began
                stop.set()
                sampler.join()
                time.sleep(1.0)
                after = rss_mib(gateway.pid)
            finally:
                gateway.terminate()
                gateway.wait(30)
    print(
        f"{args.readers} concurrent reads of {args.messages} messages: gateway RSS "
        f"{before:.0f} MiB before, {peak:.0f} MiB peak, {after:.0f} MiB after; "
        f"one response {max(sizes) / 2**20:.2f} MiB; {took:.2f} s"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
