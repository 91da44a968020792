import os
import subprocess
import sys

import pytest

from fragscope_record import cli

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_without_torch(*args):
    """python -m fragscope_record ARGS with `import torch` made to fail."""
    code = ("import sys; sys.modules['torch'] = None; sys.argv = ['fragscope_record'] + %r; "
            "import runpy; runpy.run_module('fragscope_record', run_name='__main__')" % (list(args),))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=PACKAGE_ROOT, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))


def test_help_works_without_torch():
    result = run_without_torch("--help")
    assert result.returncode == 0, result.stderr
    for option in ("--out", "--max-entries", "--stacks", "--every-steps", "NAME.env.json",
                   "fragscope-job.json"):
        assert option in result.stdout


def test_bad_arguments_are_usage_errors_without_torch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    for args, message in [(["--every-steps", "-1", "--", str(script)], "expected 0 or more"),
                          (["--max-entries", "0", "--", str(script)], "expected at least 1"),
                          (["--stacks", "cpp", "--", str(script)], "invalid choice"),
                          (["--"], "no script given"),
                          (["--", "missing.py"], "no such script"),
                          (["--", "-m"], "-m needs a module name")]:
        result = run_without_torch(*args)
        assert result.returncode == 2, args
        assert message in result.stderr, (args, result.stderr)


def test_without_torch_a_run_is_refused_clearly(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    result = run_without_torch("--", str(script))
    assert result.returncode == 2
    assert "cannot record" in result.stderr


def test_parse_splits_options_from_the_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    options, is_module, target, rest = cli.parse(
        ["--out", "runs", "--every-steps", "5", "--", str(script), "--lr", "3e-4", "--out", "x"])
    assert (options.out, options.every_steps, options.stacks, is_module) == ("runs", 5, "python", False)
    assert target == str(script)
    assert rest == ["--lr", "3e-4", "--out", "x"]
    options, is_module, target, rest = cli.parse(["--stacks", "none", "--", "-m", "pkg.train", "--x"])
    assert (options.stacks, is_module, target, rest) == ("none", True, "pkg.train", ["--x"])


def test_parse_without_double_dash(tmp_path):
    # torchrun's argparse may drop "--" before passing the rest on.
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    options, _, target, rest = cli.parse(["--out", "o", str(script), "--epochs", "2"])
    assert (options.out, target, rest) == ("o", str(script), ["--epochs", "2"])


def test_stray_arguments_before_double_dash(tmp_path):
    with pytest.raises(SystemExit):
        cli.parse(["stray", "--", "train.py"])
