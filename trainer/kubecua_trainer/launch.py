"""torchrun for a trainer pod: SIGTERM goes to the workers, and the agent exits as they do.

    python -m kubecua_trainer.launch [torchrun options] --module kubecua_trainer run CONFIG

Plain torchrun turns a SIGTERM (a suspend, an eviction) into an exception in its agent: it passes
the signal on, kills the workers 30 s later whatever they are doing, and exits 1, which a Job
counts as a failed pod. Here torch's agent is told not to handle SIGTERM (its
--signals-to-handle, read from PET_SIGNALS_TO_HANDLE); this process forwards it to each worker
(a process group of its own), and the agent keeps monitoring them. The workers checkpoint the last
completed step and exit 0 (any other code would make the agent count a failed worker), the agent
sees every worker succeed, and this process then exits 143 (128 + SIGTERM): stopped, not
finished, so a Job never counts a stopped pod as a completed index (the operator's Job ignores
143 in its podFailurePolicy, so the replacement resumes without using up backoffLimit). A run
that finishes all its steps exits 0; the pod's whole termination grace period is the
checkpoint's. A worker that fails still fails the agent as before (exit 1).
SIGINT, SIGHUP and SIGQUIT keep torchrun's own handling. A SIGTERM before any worker started
(the agent waiting in the rendezvous for the other pods) exits 143 at once: no step ran here.
That wait is in C++ and does not return to Python, so Python's handler would only run when the
rendezvous ends; the signal is therefore acted on by a thread woken through
signal.set_wakeup_fd, which the interpreter's C-level handler writes to at once. Limit: a
SIGTERM that lands after the workers' last step also exits 143 (the workers' exit codes cannot
tell this process apart); the replacement pod resumes from the final checkpoint, has no step
left to run, and exits 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

from kubecua_trainer.cli import STOPPED  # 143: the exit code of a stop, as the CLI alone

# torchrun's default list without SIGTERM, which this module handles instead.
AGENT_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"
sigterms: list[int] = []  # SIGTERMs this process received


def children(pid: int) -> list[int]:
    """The direct children of a process (Linux: /proc/<pid>/task/<tid>/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
    return found


_signalled: set[int] = set()  # workers already sent SIGTERM (the thread and the handler race)
_lock = threading.RLock()  # re-entrant: a second SIGTERM can land in the handler itself


def forward_sigterm() -> None:
    """Send SIGTERM on to every worker, or stop at once when none has started."""
    with _lock:
        workers = children(os.getpid())
        if not workers:  # no worker started yet: no step was run here, nothing to save
            os.write(2, b"kubecua launch: SIGTERM before any worker started; exiting 143\n")
            os._exit(STOPPED)  # the main thread may be blocked in C++ (the rendezvous)
        for pid in set(workers) - _signalled:
            _signalled.add(pid)
            try:
                os.killpg(pid, signal.SIGTERM)  # torch starts each worker in a session of its own
            except ProcessLookupError:  # forked, not yet its own group (or already gone)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Python-level handler: runs whenever the main thread gets back to Python (a fallback for
    the wake-up thread, and what installs the C-level handler that writes the wake-up fd)."""
    sigterms.append(signum)
    forward_sigterm()


def watch_wakeups(sock: socket.socket) -> None:
    """Act on SIGTERM as soon as it arrives, whatever the main thread is blocked in."""
    while data := sock.recv(64):
        if signal.SIGTERM in data:
            sigterms.append(signal.SIGTERM)
            forward_sigterm()


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.run import main as torchrun

    os.environ.setdefault("PET_SIGNALS_TO_HANDLE", AGENT_SIGNALS)
    if "SIGTERM" in os.environ["PET_SIGNALS_TO_HANDLE"]:
        sys.exit("error: PET_SIGNALS_TO_HANDLE must leave SIGTERM out (this launcher forwards it)")
    signal.signal(signal.SIGTERM, on_sigterm)
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=watch_wakeups, args=(reader,), name="sigterm", daemon=True).start()
    torchrun(argv)  # returns only when every worker exited 0 (a failure raises, exit 1)
    if sigterms:
        sys.exit(STOPPED)


if __name__ == "__main__":
    main()
