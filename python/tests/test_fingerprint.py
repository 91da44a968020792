import json
import os

import fake_torch
from fragscope_record import fingerprint


def write_conda_meta(prefix, records):
    folder = os.path.join(prefix, "conda-meta")
    os.makedirs(folder, exist_ok=True)
    for i, record in enumerate(records):
        with open(os.path.join(folder, "p%d.json" % i), "w") as f:
            f.write(record if isinstance(record, str) else json.dumps(record))
    with open(os.path.join(folder, "history"), "w") as f:
        f.write("==> not json\n")


CONDA_RECORDS = [
    {"name": "pytorch", "version": "2.4.1", "build": "py3.11_cuda12.1_cudnn9.1.0_0",
     "channel": "https://conda.anaconda.org/pytorch/linux-64"},
    {"name": "python", "version": "3.11.9", "build": "h955ad1f_0", "channel": "pkgs/main/linux-64"},
    {"name": "numpy", "version": "1.26.4", "build": "py311h08b1b3b_0", "schannel": "conda-forge"},
    "{broken",
]


def test_conda_meta_is_read_like_conda_list_export(tmp_path):
    prefix = str(tmp_path)
    write_conda_meta(prefix, CONDA_RECORDS)
    packages = fingerprint.read_conda_meta(prefix)
    assert [p["name"] for p in packages] == ["numpy", "python", "pytorch"]
    assert packages[2]["channel"] == "pytorch"
    assert packages[1]["channel"] == "pkgs/main"
    assert packages[0]["channel"] == "conda-forge"
    dists = [{"name": "numpy", "version": "1.26.4", "installer": "conda"},
             {"name": "Flash_Attn", "version": "2.6.3", "installer": "pip"}]
    kind, lines = fingerprint.package_list(packages, dists)
    assert kind == "conda-export"
    assert lines == ["flash-attn=2.6.3=pypi_0", "numpy=1.26.4=py311h08b1b3b_0",
                     "python=3.11.9=h955ad1f_0", "pytorch=2.4.1=py3.11_cuda12.1_cudnn9.1.0_0"]


def test_no_conda_meta_means_pip_freeze(tmp_path):
    assert fingerprint.read_conda_meta(str(tmp_path)) is None
    dists = [{"name": "torch", "version": "2.11.0+cu130", "installer": "pip"},
             {"name": "Jinja2", "version": "3.1.4", "installer": "pip"}]
    kind, lines = fingerprint.package_list(None, dists)
    assert kind == "pip-freeze"
    assert lines == ["Jinja2==3.1.4", "torch==2.11.0+cu130"]


def test_package_hash_is_the_sha256_of_the_lines():
    import hashlib
    assert fingerprint.package_hash(["a==1", "b==2"]) == hashlib.sha256(b"a==1\nb==2\n").hexdigest()
    assert fingerprint.package_hash(["a==1"]) != fingerprint.package_hash(["a==2"])


def test_torch_install_kinds():
    conda = [{"name": "pytorch", "version": "2.4.1", "build": "py3.11_cuda12.1_0", "channel": "pytorch"}]
    torch_conda = [{"name": "torch", "version": "2.4.1", "installer": "conda"}]
    info = fingerprint.torch_install(conda, torch_conda)
    assert (info["kind"], info["channel"], info["build"]) == ("conda", "pytorch", "py3.11_cuda12.1_0")
    # A pip wheel inside a conda environment is a pip wheel.
    info = fingerprint.torch_install(conda, [{"name": "torch", "version": "2.4.1+cu121", "installer": "pip"}])
    assert info["kind"] == "pip"
    assert fingerprint.torch_install(None, [{"name": "torch", "version": "2.11.0", "installer": "uv"}])["kind"] == "pip"
    editable = {"name": "torch", "version": "2.12.0a0", "installer": "pip",
                "direct_url": {"url": "file:///src/pytorch", "dir_info": {"editable": True}}}
    assert fingerprint.torch_install(None, [editable])["kind"] == "source"
    assert fingerprint.torch_install(None, [])["kind"] == "source"


def test_version_texts():
    assert fingerprint.cudnn_version_text(8902) == "8.9.2"
    assert fingerprint.cudnn_version_text(91900) == "9.19.0"
    assert fingerprint.cudnn_version_text(None) is None
    assert fingerprint.cuda_version_text(12010) == "12.1"
    assert fingerprint.cuda_version_text(13000) == "13.0"
    assert fingerprint.cuda_version_text(0) is None


def test_driver_version_from_proc_text():
    text = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Fri Oct 10 2025\n"
            "GCC version:  gcc version 12.2.0\n")
    assert fingerprint.parse_proc_driver_version(text) == "580.159.04"
    open_text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build\n"
    assert fingerprint.parse_proc_driver_version(open_text) == "550.54.14"
    assert fingerprint.parse_proc_driver_version("garbage") is None


def test_allocator_variables_only_those_set():
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HOME": "/root",
           "CUDA_VISIBLE_DEVICES": "1"}
    assert fingerprint.allocator_environment(env) == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUDA_VISIBLE_DEVICES": "1"}


def test_conda_info(tmp_path):
    prefix = str(tmp_path / "envs" / "train")
    write_conda_meta(prefix, CONDA_RECORDS[:1])
    with open(os.path.join(prefix, ".condarc"), "w") as f:
        f.write("channels:\n  - pytorch\n  - nvidia\nshow_channel_urls: true\n")
    info = fingerprint.conda_info(prefix, {"CONDA_DEFAULT_ENV": "train", "CONDA_PREFIX": prefix})
    assert info == {"prefix": prefix, "env_name": "train", "channels": ["pytorch", "nvidia"]}
    assert fingerprint.conda_info(str(tmp_path), {}) is None


def test_collect_with_torch(tmp_path):
    torch, _ = fake_torch.make()
    write_conda_meta(str(tmp_path), CONDA_RECORDS)
    env = fingerprint.collect(torch, prefix=str(tmp_path), environ={"PYTORCH_CUDA_ALLOC_CONF": "x"})
    assert env["format"] == "fragscope-env/1"
    assert env["torch"]["version"] == "2.11.0+cu130"
    assert env["torch"]["git_version"] == "abc123"
    assert env["torch"]["cudnn"] == "9.19.0"
    assert env["torch"]["nccl"] == "2.27.7"
    assert env["gpus"] == [{"index": 0, "name": "Fake GPU", "total_memory": 80 * 2**30,
                            "compute_capability": "9.0", "multiprocessors": 132}]
    assert env["allocator_env"] == {"PYTORCH_CUDA_ALLOC_CONF": "x"}
    assert env["packages"]["format"] == "conda-export"
    assert env["packages"]["sha256"] == fingerprint.package_hash(env["packages"]["list"])
    assert env["packages"]["count"] == len(env["packages"]["list"])
    json.dumps(env)  # all of it is JSON
