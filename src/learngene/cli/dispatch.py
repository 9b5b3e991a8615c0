"""``learngene.cli.main``: parse, run the command (its module's ``run``), and turn every input error into one line.

Errors caused by input (missing files, impossible sizes, data that do not fit) print one line and exit
with code 2; outputs are written atomically, so a failed run leaves no partial file. Torch and the
library are imported only after the arguments parse, so ``--help`` and usage errors answer at once.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Sequence

from ..errors import LearngeneError, assigned
from ..host.threads import prepare_environment
from .parser import COMMANDS, EXIT_USAGE, build_parser

# each command's process under torchrun (learngene.training.distributed.start_process), where not a "member" of the
# process group: "alone" writes many files without rank-0 guards, or only prints, so torchrun is refused;
# compare's ranks are independent "worker"s that share a grid
PROCESS_ROLES = {"demo": "alone", "bench": "alone", "inspect": "alone", "methods": "alone", "compare": "worker"}


def handler(args: argparse.Namespace):
    """The command's ``run``: the function of its module (:data:`~learngene.cli.parser.COMMANDS`) that runs it."""
    return COMMANDS[args.command].run


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv_given = argv
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a one-line usage error already printed
        return int(exc.code or 0)
    args.command_line = shlex.join(["learngene", *argv])  # what reports name as the command that made them
    args.run_command = main  # how a command that runs others (bench's gpu-smoke) runs them, without importing main
    try:
        prepare_environment(getattr(args, "threads", None))  # before torch loads: libgomp reads it then
    except LearngeneError as exc:  # printed here: the usual path (_fail) imports torch
        print(f"learngene {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if taken := _existing_output(args):  # refused before torch loads: at once, not after seconds of imports
        print(
            f"learngene {args.command}: error: {taken!r} already exists; pass {assigned('overwrite', True, '')} to "
            "replace it",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        return _run(args, entry_point=argv_given is None)
    except KeyboardInterrupt:  # before the handlers are in place (importing torch) or after they are restored
        if argv_given is None:
            _ignore_signals()
        print(f"learngene {args.command}: stopped by SIGINT; nothing was saved", file=sys.stderr)
        return 130


def _existing_output(args: argparse.Namespace) -> str | None:
    """The first output the command would write that exists already, without --overwrite (None: none)."""
    if not hasattr(args, "overwrite") or args.overwrite:
        return None
    for name in ("out", "gene_out", "plot"):
        path = getattr(args, name, None)
        if name == "out" and getattr(args, "format", None) == "hub":
            continue  # a folder: its own checks say whether a file or a folder is in the way
        # a directory where a file goes gets its own message later
        if path and os.path.lexists(path) and not os.path.isdir(path):
            return os.fspath(path)
    return None


def _run(args: argparse.Namespace, entry_point: bool) -> int:
    from ..formats.atomic import os_error_message
    from ..training import distributed as dist
    from ..training.loop import CHECKPOINT
    from ..training.run_dirs import release_run_dirs

    finished = interrupted = False
    previous_handlers = _stop_on_signals()
    try:
        dist.start_process(  # the one place the CLI sets torch's CPU threads
            PROCESS_ROLES.get(args.command, "member"),
            device=getattr(args, "device", "auto"),
            threads=getattr(args, "threads", None),
            sets_threads=hasattr(args, "threads"),
        )
        handler(args)(args)
        finished = True
    except LearngeneError as exc:
        return _fail(args, str(exc))
    except OSError as exc:  # the place, not the program: a full or read-only disk, permissions, a name too long
        if isinstance(exc, BrokenPipeError):  # output piped into e.g. `head`, which stopped reading
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush does not fail too
            return 1
        return _fail(args, os_error_message(exc))
    except MemoryError:
        return _fail(
            args, "out of memory; choose smaller sizes (--depth, --embed-dim, --img-size) or a smaller --batch-size"
        )
    except KeyboardInterrupt as exc:
        # stopping now: a further Ctrl-C (a second one 50 ms later) must not break the clean-up or the
        # interpreter's exit (an atexit traceback) with a KeyboardInterrupt of its own
        interrupted = _ignore_signals()
        print(f"learngene {args.command}: {_interruption_message(args, exc)}", file=sys.stderr)
        return 143 if _signal_name(exc) == "SIGTERM" else 130
    finally:
        # the process's own command line (entry_point) exits next: once interrupted, it stays deaf to signals
        if previous_handlers is not None and not (interrupted and entry_point):
            signal.signal(signal.SIGINT, previous_handlers[0])
            signal.signal(signal.SIGTERM, previous_handlers[1])
        release_run_dirs(failed=not finished, resumable=CHECKPOINT)
        dist.destroy(sync=finished)
    return 0


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a training loop, handled like Ctrl-C (SIGINT)."""


def _signal_name(exc: KeyboardInterrupt) -> str:
    from ..training.loop import RunInterrupted

    if isinstance(exc, RunInterrupted):
        return exc.signame
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"


def _interruption_message(args: argparse.Namespace, exc: KeyboardInterrupt) -> str:
    """One line: what stopped the run, what was saved, and the command that continues it."""
    from ..formats.atomic import quote
    from ..training.loop import RunInterrupted

    said = f"stopped by {_signal_name(exc)}"
    continues = (
        "rerun the same command with --resume to continue"
        if hasattr(args, "resume")
        else "rerun the same command to continue (finished stages are kept)"
    )
    if isinstance(exc, RunInterrupted):
        if exc.checkpoint is not None:
            return f"{said} after step {exc.step}; checkpoint written to {quote(exc.checkpoint)}; {continues}"
        return f"{said} after step {exc.step}; nothing was saved (give --run-dir to make a run resumable)"
    if getattr(args, "run_dir", None):
        return f"{said} outside a training step; {continues} from the last checkpoint in {quote(args.run_dir)}"
    return f"{said}; nothing was saved"


def _stop_on_signals():
    """SIGINT and SIGTERM: a running training loop finishes its step, checkpoints and stops (train.RunInterrupted);
    anywhere else, or at a second signal, the command stops at once."""
    from ..training.loop import request_stop

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        if not request_stop(name):
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    try:
        previous_int = signal.signal(signal.SIGINT, on_signal)
        previous_term = signal.signal(signal.SIGTERM, on_signal)
        return previous_int, previous_term
    except ValueError:  # not the main thread (e.g. main() called from a worker thread): leave signals alone
        return None


def _ignore_signals() -> bool:
    """Ignore SIGINT and SIGTERM from now on (the main thread only); True."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass
    return True


def _clear_progress_bars() -> None:
    """Close the bars an error interrupted, so that the one-line error starts a line of its own."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _fail(args: argparse.Namespace, message: str) -> int:
    """Print the one-line error (a name holding a newline cannot split it) and give the usage exit code."""
    from ..training import distributed as dist

    _clear_progress_bars()
    where = f" (rank {dist.rank()})" if dist.is_distributed() else ""
    one_line = message.replace("\r", "\\r").replace("\n", "\\n")
    print(f"learngene {args.command}{where}: error: {one_line}", file=sys.stderr)
    return EXIT_USAGE
