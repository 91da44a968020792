"""python -m fragscope_record [options] -- SCRIPT ARGS...  (argparse only: no torch here)."""

import argparse
import os
import runpy
import sys

from . import naming

DEFAULT_MAX_ENTRIES = 1000000  # recorder.DEFAULT_MAX_ENTRIES, repeated so --help needs no import

DESCRIPTION = """\
Runs an unmodified PyTorch script with CUDA memory-history recording on from CUDA init, and
writes, for FragScope (fragscope-cli import / File > Open):

  at each out-of-memory error  OUT/NAME.oom.pickle  (.oom2, ... for later ones)
  at exit                      OUT/NAME.pickle      (the whole trace)
  every K optimizer steps      OUT/NAME.stepN.pickle  (--every-steps K)

each with NAME.stats.json (memory_stats(), allocator config and settings, per-process memory
fraction and cap, device total, the OOM message), NAME.summary.txt (memory_summary()) and
NAME.env.json (Python, PyTorch build and how it was installed, CUDA, cuDNN, NCCL, driver, GPUs,
allocator variables, package list and its hash).

Under torchrun (RANK / LOCAL_RANK set) every rank writes NAME.rankR.* and the ranks together
keep OUT/fragscope-job.json, the job manifest that lists them.
"""

EPILOG = """\
examples:
  python -m fragscope_record --out runs -- train.py --batch-size 16
  python -m fragscope_record --every-steps 100 -- -m mypackage.train
  torchrun --nproc-per-node 8 -m fragscope_record --out runs -- train.py
"""


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a whole number, got %r" % text)
    if value < 1:
        raise argparse.ArgumentTypeError("expected at least 1, got %d" % value)
    return value


def non_negative_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a whole number, got %r" % text)
    if value < 0:
        raise argparse.ArgumentTypeError("expected 0 or more, got %d" % value)
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m fragscope_record", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] -- SCRIPT.py ARGS... | -m MODULE ARGS...")
    parser.add_argument("--out", default="fragscope-recordings", metavar="DIR",
                        help="folder for the recordings (default: %(default)s)")
    parser.add_argument("--name", metavar="NAME",
                        help="job name that starts every file name (default: the script's name)")
    parser.add_argument("--max-entries", type=positive_int, default=DEFAULT_MAX_ENTRIES, metavar="N",
                        help="trace entries kept per device (default: %(default)s); a trace that "
                             "fills them loses its start and no longer replays exactly")
    parser.add_argument("--stacks", choices=("python", "all", "none"), default="python",
                        help="stacks recorded with each allocation: python (default), all "
                             "(python + C++, slower) or none")
    parser.add_argument("--every-steps", type=non_negative_int, default=0, metavar="K",
                        help="also write a set every K optimizer steps (default: 0, never)")
    parser.add_argument("target", nargs=argparse.REMAINDER,
                        help="the script and its arguments, after --")
    return parser


def parse(argv):
    """(options, is_module, target, script_args); SystemExit(2) with a message on bad input."""
    parser = build_parser()
    if "--" in argv:
        split = argv.index("--")
        options = parser.parse_args(argv[:split])
        rest = argv[split + 1:]
    else:
        options = parser.parse_args(argv)
        rest = options.target
    if options.target and "--" in argv:
        parser.error("unexpected arguments before --: %s" % " ".join(options.target))
    if not rest:
        parser.error("no script given: python -m fragscope_record [options] -- train.py ARGS...")
    if rest[0] == "-m":
        if len(rest) < 2:
            parser.error("-m needs a module name")
        return options, True, rest[1], rest[2:]
    if rest[0].startswith("-"):
        parser.error("expected a script or -m MODULE after --, got %r" % rest[0])
    if not os.path.isfile(rest[0]):
        parser.error("no such script: %s" % rest[0])
    return options, False, rest[0], rest[1:]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    options, is_module, target, script_args = parse(argv)
    name = options.name or naming.job_name_for(target, is_module=is_module)

    from . import recorder  # imports torch only now

    command = [sys.executable, "-m", "fragscope_record"] + list(argv)
    try:
        active = recorder.start(out=options.out, name=name, max_entries=options.max_entries,
                                stacks=options.stacks, every_steps=options.every_steps,
                                command=command, at_exit=False)
    except (ImportError, RuntimeError) as error:
        sys.stderr.write("fragscope-record: cannot record: %s\n" % error)
        return 2

    # The script sees itself as the program: its argv, its folder first on sys.path.
    if is_module:
        sys.argv = [target] + list(script_args)
        sys.path.insert(0, os.getcwd())
    else:
        sys.argv = [target] + list(script_args)
        sys.path[0] = os.path.dirname(os.path.abspath(target))
    status = 0
    try:
        if is_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as error:
        active.note_exception(error)
        code = error.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, int) and code is not None:
            sys.stderr.write("%s\n" % code)
    except BaseException as error:  # the script failed: record why, write the set, re-raise
        active.note_exception(error)
        active.finish()
        _report(active)
        raise
    active.finish()
    _report(active)
    return status


def _report(active):
    sys.stderr.write("fragscope-record: %s (%s), sets in %s\n" % (
        active.job if active.identity.file_rank is None else "%s rank %d" % (active.job, active.identity.file_rank),
        active.outcome, active.out))
