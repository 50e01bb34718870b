"""Ctrl-C from the first moment: a shell starts a background job (``tether demo &``) with
SIGINT ignored, and a signal ignored is lost; the runtime answers SIGINT all the same once it
runs, so the command's first seconds (imports, set-up) answer it too."""

from __future__ import annotations

import signal
import threading


def answer_ctrl_c() -> None:
    """Turn an inherited "ignore SIGINT" back into Python's KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (an embedding program's choice)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
