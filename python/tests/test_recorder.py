"""The recorder's flow with a stand-in torch (fake_torch): what is called when, and which files
a run leaves."""
import json
import time
import os
import signal
import sys

import pytest

import fake_torch
from fragscope_record import cli, recorder


@pytest.fixture
def torch(monkeypatch):
    fake, helpers = fake_torch.make()
    monkeypatch.setitem(sys.modules, "torch", fake)
    for name, module in helpers.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(recorder, "_ACTIVE", None)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(key, raising=False)
    previous = signal.getsignal(signal.SIGTERM)
    saved_argv, saved_path, saved_hook = list(sys.argv), list(sys.path), sys.excepthook
    fake.helpers = helpers
    yield fake
    signal.signal(signal.SIGTERM, previous)
    sys.argv[:], sys.path[:], sys.excepthook = saved_argv, saved_path, saved_hook


def stats(out, name):
    with open(os.path.join(out, name + ".stats.json")) as f:
        return json.load(f)


def test_recording_starts_before_the_script_and_covers_oom_and_exit(torch, tmp_path):
    out = str(tmp_path / "runs")
    rec = recorder.Recorder(torch, out, "train", every_steps=2).start()
    assert torch.helpers.calls[:3] == ["init", ("record", "all", "all", "python", 1000000), "attach"]
    torch.cuda.set_per_process_memory_fraction(0.25)
    torch.helpers.alloc()
    torch.helpers.step()
    torch.helpers.step()
    with pytest.raises(torch.OutOfMemoryError) as error:
        torch.helpers.oom()
    rec.note_exception(error.value)
    rec.finish()
    rec.finish()  # once only
    names = sorted(os.listdir(out))
    for base in ("train", "train.oom", "train.step2"):
        for suffix in (".pickle", ".stats.json", ".summary.txt", ".env.json"):
            assert base + suffix in names
    oom = stats(out, "train.oom")
    assert oom["moment"] == "oom"
    assert oom["outcome"] == "oom: CUDA out of memory. Tried to allocate 1.00 GiB."
    assert oom["oom_message"].endswith("more")
    assert oom["oom"] == {"device": 0, "requested": 2**30, "device_limit": 20 * 2**30,
                          "device_free": 5 * 2**30}
    assert oom["allowed_bytes"] == 20 * 2**30  # 0.25 x the 80 GiB device
    assert oom["per_process_memory_fraction"] == 0.25
    # both optimizer steps' end times, in the trace's clock (µs since the epoch), in order
    ends = oom["step_ends_us"]
    assert len(ends) == 2 and ends[0] <= ends[1]
    assert abs(ends[1] / 1e6 - time.time()) < 60
    assert oom["memory_stats"]["num_ooms"] == 1
    assert oom["history"]["trace_entries"] == 2
    final = stats(out, "train")
    assert final["moment"] == "exit" and final["step"] == 2
    assert final["outcome"].startswith("oom: CUDA out of memory")
    assert stats(out, "train.step2")["memory_stats"]["num_ooms"] == 0
    assert ("record", None, "all", "all", None) == torch.helpers.calls[-1]  # stopped at exit
    with open(os.path.join(out, "train.env.json")) as f:
        assert json.load(f)["format"] == "fragscope-env/1"


def test_stack_modes(torch, tmp_path):
    recorder.Recorder(torch, str(tmp_path), "t", stacks="none").start()
    recorder.Recorder(torch, str(tmp_path), "t", stacks="all").start()
    records = [c for c in torch.helpers.calls if c[0] == "record"]
    assert records == [("record", "all", None, "python", 1000000), ("record", "all", "all", "all", 1000000)]
    with pytest.raises(ValueError):
        recorder.Recorder(torch, str(tmp_path), "t", stacks="cpp")


def test_a_failed_write_does_not_stop_the_script(torch, tmp_path, capsys):
    rec = recorder.Recorder(torch, str(tmp_path), "t").start()
    torch.cuda.memory._snapshot = lambda: (_ for _ in ()).throw(RuntimeError("disk on fire"))
    assert rec.dump("manual", 1) is None
    assert "disk on fire" in capsys.readouterr().err


def test_ranks_write_their_own_sets_and_the_manifest(torch, tmp_path, monkeypatch):
    out = str(tmp_path)
    for rank in (1, 0):  # any order
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        rec = recorder.Recorder(torch, out, "ddp").start()
        torch.helpers.alloc()
        rec.finish()
    assert "ddp.rank0.pickle" in os.listdir(out) and "ddp.rank1.env.json" in os.listdir(out)
    with open(os.path.join(out, "fragscope-job.json")) as f:
        job = json.load(f)
    assert job["job"] == "ddp" and job["world_size"] == 2
    assert [(r["rank"], r["snapshot"], r["stats"]) for r in job["ranks"]] == [
        (0, "ddp.rank0.pickle", "ddp.rank0.stats.json"), (1, "ddp.rank1.pickle", "ddp.rank1.stats.json")]
    assert stats(out, "ddp.rank1")["rank"] == 1


def test_runner_runs_an_unmodified_script_that_ooms(torch, tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch\n"
        "assert sys.argv == [%r, '--bs', '16'], sys.argv\n"
        "torch.cuda.set_per_process_memory_fraction(0.5)\n"
        "torch.helpers.alloc()\n"
        "torch.helpers.oom()\n" % str(script))
    out = str(tmp_path / "o")
    with pytest.raises(torch.OutOfMemoryError):
        cli.main(["--out", out, "--", str(script), "--bs", "16"])
    assert torch.helpers.calls[0] == "init"  # recording was on before the script ran
    final = stats(out, "train")
    assert final["outcome"].startswith("oom: CUDA out of memory")
    assert final["allowed_bytes"] == 40 * 2**30
    assert final["command"][-4:] == ["--", str(script), "--bs", "16"]
    assert stats(out, "train.oom")["oom_message"]
    assert "train (oom: CUDA out of memory" in capsys.readouterr().err


def test_runner_passes_the_exit_status_on(torch, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import sys\nsys.exit(3)\n")
    assert cli.main(["--out", str(tmp_path), "--name", "named", "--", str(script)]) == 3
    assert stats(str(tmp_path), "named")["outcome"] == "exit status 3"
