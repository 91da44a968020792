import pytest

from fragscope_record import naming


def test_job_name_from_script_and_module():
    assert naming.job_name_for("scripts/train.py") == "train"
    assert naming.job_name_for("/abs/path/finetune_llama.py") == "finetune_llama"
    assert naming.job_name_for("pkg.sub.train", is_module=True) == "train"
    assert naming.job_name_for("my script!.py") == "my_script"
    assert naming.sanitize("...") == "run"


def test_single_process_names():
    identity = naming.process_identity({})
    assert not identity.multi_process
    assert naming.set_base("train", identity, "exit") == "train"
    assert naming.set_base("train", identity, "oom", 1) == "train.oom"
    assert naming.set_base("train", identity, "oom", 3) == "train.oom3"
    assert naming.set_base("train", identity, "step", 200) == "train.step200"
    assert naming.set_files("out/train.oom") == {
        "snapshot": "out/train.oom.pickle", "stats": "out/train.oom.stats.json",
        "summary": "out/train.oom.summary.txt", "env": "out/train.oom.env.json"}


def test_torchrun_ranks_name_the_files():
    identity = naming.process_identity({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"})
    assert identity.multi_process
    assert (identity.rank, identity.local_rank, identity.world_size) == (5, 1, 8)
    assert naming.set_base("train", identity, "exit") == "train.rank5"
    assert naming.set_base("train", identity, "oom", 1) == "train.rank5.oom"


def test_local_rank_alone_names_the_files():
    identity = naming.process_identity({"LOCAL_RANK": "3"})
    assert identity.multi_process and identity.file_rank == 3
    assert naming.process_base("job", identity) == "job.rank3"


def test_slurm_and_mpi_fallbacks():
    slurm = naming.process_identity({"SLURM_NTASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "0"})
    assert (slurm.rank, slurm.local_rank, slurm.world_size) == (2, 0, 4)
    lone_slurm = naming.process_identity({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"})
    assert not lone_slurm.multi_process
    mpi = naming.process_identity({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                                   "OMPI_COMM_WORLD_SIZE": "2"})
    assert (mpi.rank, mpi.local_rank, mpi.world_size) == (1, 1, 2)


def test_garbage_rank_variables_are_ignored():
    identity = naming.process_identity({"RANK": "zero", "WORLD_SIZE": "1"})
    assert not identity.multi_process


def test_unknown_moment_is_refused():
    with pytest.raises(ValueError):
        naming.moment_suffix("later")
    with pytest.raises(ValueError):
        naming.moment_suffix("step")
