"""An outside agent program for the file-exchange test (run with ``sys.executable``).

It knows nothing of tether: it watches ``<root>/outbox``, parses each message (``key: value``
headers, a blank line, the body; values use backslash escapes), and answers through
``<root>/results/<id>.txt`` written to a temporary name and renamed. Ids listed after the root
get a wrong first line once (to be refused); a ``header.delay`` header delays the answer.
Stops when ``<root>/stop`` exists.
"""

from __future__ import annotations

import json
import os
import sys
import time


def unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = value[i + 1]
        if nxt == "x":
            out.append(chr(int(value[i + 2 : i + 4], 16)))
            i += 4
        elif nxt == "u":
            out.append(chr(int(value[i + 2 : i + 6], 16)))
            i += 6
        else:
            out.append({"\\": "\\", "n": "\n", "r": "\r"}[nxt])
            i += 2
    return "".join(out)


def main() -> None:
    root = sys.argv[1]
    wrong_once = set(sys.argv[2:])
    outbox, results = os.path.join(root, "outbox"), os.path.join(root, "results")
    due: dict[str, float] = {}
    while not os.path.exists(os.path.join(root, "stop")):
        for name in sorted(os.listdir(outbox)):
            if name.startswith(".") or not name.endswith(".txt"):
                continue
            task_id = name[:-4]
            if os.path.exists(os.path.join(results, name)):
                continue
            try:
                with open(os.path.join(outbox, name), encoding="utf-8") as f:
                    text = f.read()
            except FileNotFoundError:
                continue  # archived meanwhile
            head, _, body = text.partition("\n\n")
            headers = dict(line.split(": ", 1) for line in head.split("\n"))
            headers = {k: unescape(v) for k, v in headers.items()}
            delay = float(headers.get("header.delay", "0"))
            if time.monotonic() < due.setdefault(task_id, time.monotonic() + delay):
                continue
            first = f"task: {headers['task']}"
            if task_id in wrong_once:
                wrong_once.discard(task_id)
                first = "task: somebody-else"
            answer = f"{first}\nanswered-by: {os.getpid()}\n\n" + json.dumps(
                {"body": body, "headers": headers}, sort_keys=True
            )
            tmp = os.path.join(results, f".{name}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(answer)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(results, name))
        time.sleep(0.02)


if __name__ == "__main__":
    main()
