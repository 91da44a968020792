"""The environment fingerprint written as ``NAME.env.json`` (format ``fragscope-env/1``).

The same script behaves differently under a conda build and a pip wheel of the same PyTorch
release, or under another CUDA toolkit or cuDNN: the fingerprint records what decides that.
Everything that needs no GPU is a plain function of its inputs (folders, environment, text) so it
can be tested without torch; `collect` puts it together with what torch reports.
"""

import datetime
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys

FORMAT = "fragscope-env/1"

# Environment variables that change what the caching allocator or the CUDA stack does.
ALLOCATOR_VARIABLES = (
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "PYTORCH_CUDA_MEMORY_CACHING_ALLOCATOR",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUBLAS_WORKSPACE_CONFIG",
    "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT",
    "NCCL_BUFFSIZE",
    "NCCL_NVLS_ENABLE",
    "TORCH_NCCL_AVOID_RECORD_STREAMS",
    "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
)


# --- packages ---------------------------------------------------------------------------------

def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_conda_meta(prefix):
    """The conda packages installed in `prefix` from its ``conda-meta/*.json`` records, as
    dicts with name, version, build and channel (sorted by name); None when `prefix` is no conda
    environment. Unreadable records are skipped: one broken file must not hide the rest."""
    folder = os.path.join(prefix, "conda-meta")
    if not os.path.isdir(folder):
        return None
    packages = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not record.get("name") or not record.get("version"):
            continue
        channel = record.get("channel") or record.get("schannel") or ""
        # "https://conda.anaconda.org/conda-forge/linux-64" -> "conda-forge"
        channel = re.sub(r"^https?://[^/]+/", "", str(channel))
        channel = re.sub(r"/(linux|osx|win|noarch)[-\w]*$", "", channel)
        packages.append({
            "name": str(record["name"]),
            "version": str(record["version"]),
            "build": str(record.get("build", "")),
            "channel": channel,
        })
    packages.sort(key=lambda p: p["name"])
    return packages


def python_distributions(paths=None):
    """Installed Python distributions on `paths` (default sys.path) as dicts with name,
    version and installer (the INSTALLER file: pip, conda, uv, ...), the first of each name."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return []
    seen = {}
    for dist in metadata.distributions(path=paths if paths is not None else sys.path):
        try:
            name = dist.metadata["Name"]
        except Exception:  # noqa: BLE001 - broken metadata: skip the distribution
            name = None
        if not name:
            continue
        key = _canonical(name)
        if key in seen:
            continue
        installer = None
        try:
            installer = (dist.read_text("INSTALLER") or "").strip() or None
        except Exception:  # noqa: BLE001
            installer = None
        direct_url = None
        try:
            text = dist.read_text("direct_url.json")
            direct_url = json.loads(text) if text else None
        except Exception:  # noqa: BLE001
            direct_url = None
        location = None
        try:
            location = str(dist.locate_file(""))
        except Exception:  # noqa: BLE001
            location = None
        seen[key] = {"name": name, "version": dist.version, "installer": installer,
                     "direct_url": direct_url, "location": location}
    return sorted(seen.values(), key=lambda d: _canonical(d["name"]))


def package_list(conda_packages, distributions):
    """The package list as ``conda list --export`` prints it when conda is there
    (``name=version=build``, pip-installed packages as ``name=version=pypi_0``), else as
    ``pip freeze`` does (``name==version``). Returns (format, lines)."""
    if conda_packages is not None:
        lines = ["%s=%s=%s" % (p["name"], p["version"], p["build"]) for p in conda_packages]
        conda_names = {_canonical(p["name"]) for p in conda_packages}
        for dist in distributions:
            if (dist.get("installer") or "").lower() == "conda":
                continue
            if _canonical(dist["name"]) in conda_names:
                continue
            lines.append("%s=%s=pypi_0" % (_canonical(dist["name"]), dist["version"]))
        return "conda-export", sorted(lines, key=str.lower)
    lines = ["%s==%s" % (d["name"], d["version"]) for d in distributions]
    return "pip-freeze", sorted(lines, key=str.lower)


def package_hash(lines):
    """sha256 of the list, one entry a line: equal hashes mean equal package sets."""
    return hashlib.sha256(("\n".join(lines) + "\n").encode("utf-8")).hexdigest()


def torch_install(conda_packages, distributions):
    """How torch was installed: a dict with kind ("conda", "pip", "source" or "unknown"),
    installer, conda channel/build when conda, and the distribution's version."""
    dist = next((d for d in distributions if _canonical(d["name"]) == "torch"), None)
    conda = None
    if conda_packages:
        conda = next((p for p in conda_packages if p["name"] in ("pytorch", "pytorch-gpu", "torch")),
                     None)
    installer = (dist or {}).get("installer")
    info = {"kind": "unknown", "installer": installer, "channel": None, "build": None,
            "version": (dist or {}).get("version")}
    direct = (dist or {}).get("direct_url") or {}
    if conda is not None and (installer is None or installer.lower() == "conda"):
        info.update(kind="conda", channel=conda["channel"] or None, build=conda["build"] or None,
                    version=conda["version"])
    elif dist is not None and (direct.get("dir_info") or {}).get("editable"):
        info["kind"] = "source"
    elif dist is not None and installer and installer.lower() in ("pip", "uv", "poetry", "pdm"):
        info["kind"] = "pip"
    elif dist is None and conda is None:
        info["kind"] = "source"  # importable torch without any installer record: a source build
    return info


# --- driver / CUDA ----------------------------------------------------------------------------

def parse_proc_driver_version(text):
    """The driver version from /proc/driver/nvidia/version's text, or None."""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text or "")
    return match.group(1) if match else None


def cuda_version_text(value):
    """CUDA's integer versions (12010, 13000) as "12.1", "13.0"; None stays None."""
    if value is None or value <= 0:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def cudnn_version_text(value):
    """cuDNN's integer version as "major.minor.patch" (8902 -> 8.9.2, 91900 -> 9.19.0)."""
    if value is None:
        return None
    value = int(value)
    if value >= 10000:  # cuDNN 9+: major*10000 + minor*100 + patch
        return "%d.%d.%d" % (value // 10000, (value % 10000) // 100, value % 100)
    return "%d.%d.%d" % (value // 1000, (value % 1000) // 100, value % 100)


def driver_version():
    """The NVIDIA driver version: /proc/driver/nvidia/version, else nvidia-smi; None if absent."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            found = parse_proc_driver_version(f.read())
            if found:
                return found
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=15)
        line = out.stdout.strip().splitlines()
        return line[0].strip() if out.returncode == 0 and line else None
    except (OSError, subprocess.SubprocessError):
        return None


def _loaded_library(stem):
    """The path of a loaded shared library whose file name starts with `stem`, from
    /proc/self/maps (Linux), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rstrip().split(" ")[-1]
                if os.path.basename(path).startswith(stem):
                    return path
    except OSError:
        pass
    return None


def _ctypes_version(library, function):
    try:
        import ctypes
        lib = ctypes.CDLL(library)
        value = ctypes.c_int(0)
        if getattr(lib, function)(ctypes.byref(value)) == 0:
            return value.value
    except (OSError, AttributeError):
        pass
    return None


def cuda_driver_and_runtime():
    """(driver's CUDA version, CUDA runtime version loaded in this process) as "13.0" texts."""
    driver = cuda_version_text(_ctypes_version("libcuda.so.1", "cuDriverGetVersion"))
    runtime_lib = _loaded_library("libcudart.so")
    runtime = cuda_version_text(_ctypes_version(runtime_lib, "cudaRuntimeGetVersion")) if runtime_lib else None
    return driver, runtime


# --- everything -------------------------------------------------------------------------------

def allocator_environment(environ=None):
    environ = os.environ if environ is None else environ
    return {key: environ[key] for key in ALLOCATOR_VARIABLES if key in environ}


def conda_info(prefix, environ=None):
    """The conda environment this Python runs in, or None."""
    environ = os.environ if environ is None else environ
    if not os.path.isdir(os.path.join(prefix, "conda-meta")):
        return None
    channels = []
    try:
        with open(os.path.join(prefix, ".condarc"), encoding="utf-8") as f:
            in_channels = False
            for line in f:
                if re.match(r"^channels\s*:", line):
                    in_channels = True
                elif in_channels and re.match(r"^\s*-\s*", line):
                    channels.append(re.sub(r"^\s*-\s*", "", line).strip())
                elif in_channels and line.strip():
                    in_channels = False
    except OSError:
        pass
    name = environ.get("CONDA_DEFAULT_ENV")
    if not name or environ.get("CONDA_PREFIX") not in (None, prefix):
        name = os.path.basename(prefix.rstrip("/")) or "base"
    return {"prefix": prefix, "env_name": name, "channels": channels}


def torch_build(torch):
    """What the imported torch was built with."""
    version = getattr(torch, "version", None)
    cudnn = None
    try:
        cudnn = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - no cuDNN in this build
        cudnn = None
    nccl = None
    try:
        raw = torch.cuda.nccl.version()
        nccl = ".".join(str(part) for part in raw) if isinstance(raw, tuple) else str(raw)
    except Exception:  # noqa: BLE001 - no NCCL in this build
        nccl = None
    return {
        "version": str(torch.__version__),
        "git_version": getattr(version, "git_version", None),
        "cuda": getattr(version, "cuda", None),
        "hip": getattr(version, "hip", None),
        "debug": bool(getattr(version, "debug", False)),
        "cudnn": cudnn_version_text(cudnn),
        "nccl": nccl,
    }


def gpus(torch):
    found = []
    try:
        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return found
    for index in range(count):
        try:
            props = torch.cuda.get_device_properties(index)
        except Exception:  # noqa: BLE001
            continue
        found.append({
            "index": index,
            "name": props.name,
            "total_memory": int(props.total_memory),
            "compute_capability": "%d.%d" % (props.major, props.minor),
            "multiprocessors": int(props.multi_processor_count),
        })
    return found


def collect(torch=None, prefix=None, environ=None):
    """The whole fingerprint as a JSON-ready dict. `torch` may be None (then no build or GPU
    part)."""
    prefix = sys.prefix if prefix is None else prefix
    environ = os.environ if environ is None else environ
    conda_packages = read_conda_meta(prefix)
    distributions = python_distributions()
    list_format, lines = package_list(conda_packages, distributions)
    install = torch_install(conda_packages, distributions)
    torch_part = torch_build(torch) if torch is not None else None
    if torch_part is not None:
        torch_part["install"] = install
        torch_part["location"] = os.path.dirname(getattr(torch, "__file__", "") or "") or None
    driver_cuda, runtime = cuda_driver_and_runtime()
    return {
        "format": FORMAT,
        "recorded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "torch": torch_part,
        "cuda": {"driver": driver_version(), "driver_cuda": driver_cuda, "runtime": runtime},
        "gpus": gpus(torch) if torch is not None else [],
        "allocator_env": allocator_environment(environ),
        "conda": conda_info(prefix, environ),
        "packages": {"format": list_format, "count": len(lines), "sha256": package_hash(lines),
                     "list": lines},
    }
