"""An outside program for the file exchange that keeps a room's state (issue #34): for each
``outbox/<id>.txt`` it reads ``<id>.conversation.json``, answers with how many messages came
before in the history and the count it keeps in the state, and writes the new state to
``results/<id>.state.json`` before the result file (each by a rename)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(root: Path) -> None:
    while True:
        for task in sorted((root / "outbox").glob("*.txt")):
            id = task.name[: -len(".txt")]
            result = root / "results" / task.name
            if result.exists():
                continue
            try:
                talk = json.loads((root / "outbox" / f"{id}.conversation.json").read_text("utf-8"))
            except FileNotFoundError:
                continue  # answered and archived since the listing (the result moved with it)
            users = sum(1 for turn in talk["history"] if turn["role"] == "user")
            count = talk["state"].get("count", 0) + 1
            write(root / "results" / f"{id}.state.json", json.dumps({"count": count}))
            write(result, f"task: {id}\n\n{users} before; count {count} (v{talk['version']})")
        time.sleep(0.02)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
