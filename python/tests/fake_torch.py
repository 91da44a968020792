"""A stand-in for the parts of torch the recorder calls, so its flow (start before the script,
sets at OOM / step / exit, file names, manifest) is tested without a GPU."""
import types


class OutOfMemoryError(RuntimeError):
    pass


class Props:
    name = "Fake GPU"
    total_memory = 80 * 2**30
    major, minor = 9, 0
    multi_processor_count = 132


def make():
    calls = []
    state = {"observer": None, "fraction": None, "history": None, "trace": []}
    torch = types.ModuleType("torch")
    torch.__version__ = "2.11.0+cu130"
    torch.__file__ = "/fake/site-packages/torch/__init__.py"
    torch.OutOfMemoryError = OutOfMemoryError
    torch.version = types.SimpleNamespace(cuda="13.0", git_version="abc123", hip=None, debug=False)
    torch.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 91900))

    cuda = types.SimpleNamespace()
    cuda.init = lambda: calls.append("init")
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_properties = lambda d: Props()
    cuda.mem_get_info = lambda d=None: (70 * 2**30, Props.total_memory)
    cuda.memory_stats = lambda d=None: {"num_ooms": len([t for t in state["trace"] if t == "oom"]),
                                        "allocation.all.current": len(state["trace"])}
    cuda.memory_summary = lambda d=None: "|  fake summary  |\n"
    cuda.get_allocator_backend = lambda: "native"
    cuda.nccl = types.SimpleNamespace(version=lambda: (2, 27, 7))
    cuda._utils = types.SimpleNamespace(_get_device_index=lambda d: int(d))

    def set_fraction(fraction, device=None):
        calls.append(("fraction", fraction))
        state["fraction"] = fraction

    cuda.set_per_process_memory_fraction = set_fraction

    def record(enabled="all", context="all", stacks="all", max_entries=None):
        calls.append(("record", enabled, context, stacks, max_entries))
        state["history"] = enabled

    def snapshot():
        return {"segments": [], "device_traces": [list(state["trace"])],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}

    cuda.memory = types.SimpleNamespace(_record_memory_history=record, _snapshot=snapshot,
                                        set_per_process_memory_fraction=set_fraction)
    torch.cuda = cuda

    def attach(observer):
        calls.append("attach")
        state["observer"] = observer

    torch._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=attach)
    hooks = []
    # Like torch.optim, which deletes its submodule names: the hook lives in the module
    # torch.optim.optimizer (make() returns it for sys.modules).
    torch.optim = types.SimpleNamespace(Optimizer=object)
    optimizer_module = types.ModuleType("torch.optim.optimizer")
    optimizer_module.register_optimizer_step_post_hook = hooks.append

    def alloc():
        state["trace"].append("alloc")

    def oom(requested=2**30):
        state["trace"].append("oom")
        limit = int(state["fraction"] * Props.total_memory) if state["fraction"] else Props.total_memory
        state["observer"](0, requested, limit, 5 * 2**30)
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.\nmore")

    def step():
        for hook in hooks:
            hook(None, (), {})

    helpers = types.SimpleNamespace(calls=calls, state=state, alloc=alloc, oom=oom, step=step,
                                    modules={"torch.optim.optimizer": optimizer_module})
    return torch, helpers
