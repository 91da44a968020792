"""Experiment files (the JSON format of engine/workload, see experiments/README.md), resolved to
one concrete training run: a variant's or sweep point's dotted `set` keys applied, defaults
filled in, and the micro-batch shapes drawn exactly as engine/workload draws them.

This module does not import torch, so `torch_runner.py --plan` works on machines without it.
"""
import copy
import json
import math
import random

# Defaults of engine/workload/workload.h (GptModel, Training, SeqLenSpec), so a key left out of
# the file means the same thing to the simulator and to the real run.
MODEL_DEFAULTS = dict(kind="gpt", layers=8, hidden=1024, heads=16, ffn_mult=4, vocab=8192,
                      tied_embeddings=False, bias=True, dropout=0.1, residual_dropout=False,
                      attention="eager", positions=0, final_layernorm=False)
SEQ_LEN_DEFAULTS = dict(kind="fixed", value=1024, min=32, max=2048, median=492.749, sigma=0.6,
                        seed=7, values=[], round_to=1, collation="per_batch")
TRAINING_DEFAULTS = dict(batch_size=8, steps=20, grad_accum=1, precision="bf16-autocast",
                         checkpointing="none", checkpoint_every=1, compile=False,
                         optimizer="adamw", fused=False, hold_logits=True, empty_cache_every=0)
# training.batch_size_growth: every `every_steps` optimizer steps the micro-batch grows by `add`.
GROWTH_DEFAULTS = dict(every_steps=1, add=0)

PRECISIONS = ("fp32", "bf16-autocast", "fp16-autocast", "bf16")
ATTENTIONS = ("eager", "sdpa")
CHECKPOINTING = ("none", "blocks", "ffn")
OPTIMIZERS = ("sgd", "adam", "adamw")
SEQ_KINDS = ("fixed", "uniform", "lognormal", "list")
COLLATIONS = ("per_batch", "pad_to_max", "pack")


class ExperimentError(Exception):
    """Bad experiment input; the message names the file and the JSON path."""


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ExperimentError(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        raise ExperimentError(f"{path}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}")


def set_dotted(doc, dotted, value, where):
    """doc["a"]["b"] = value for dotted "a.b", creating objects on the way."""
    parts = dotted.split(".")
    node = doc
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ExperimentError(f"{where}: '{dotted}': '{part}' is not an object")
        node = child
    node[parts[-1]] = value


def sweep_points(doc):
    """The cartesian product of `sweep` as a list of (name, {dotted: value}), in key order."""
    sweep = doc.get("sweep") or {}
    points = [("", {})]
    for key, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise ExperimentError(f"sweep.{key}: expected a non-empty list of values")
        points = [((name + "," if name else "") + f"{key}={json.dumps(v)}", dict(s, **{key: v}))
                  for name, s in points for v in values]
    return points if sweep else []


def resolve(doc, path, variant=None, overrides=()):
    """The experiment with one variant (by name) or sweep point (by its name) applied, then the
    `--set` overrides (dotted=JSON value)."""
    doc = copy.deepcopy(doc)
    if not isinstance(doc, dict):
        raise ExperimentError(f"{path}: expected a JSON object at the top level")
    run_name = doc.get("name", "experiment")
    if variant:
        chosen = None
        for i, v in enumerate(doc.get("variants") or []):
            if isinstance(v, dict) and v.get("name") == variant:
                chosen = v.get("set") or {}
                if not isinstance(chosen, dict):
                    raise ExperimentError(f"{path}: variants[{i}].set: expected an object")
        if chosen is None:
            for name, s in sweep_points(doc):
                if name == variant:
                    chosen = s
        if chosen is None:
            names = [v.get("name") for v in doc.get("variants") or [] if isinstance(v, dict)]
            names += [n for n, _ in sweep_points(doc)]
            raise ExperimentError(f"{path}: no variant or sweep point named '{variant}'"
                                  f" (have: {', '.join(map(str, names)) or 'none'})")
        for key, value in chosen.items():
            set_dotted(doc, key, value, f"{path}: variant '{variant}'")
        run_name = f"{run_name}/{variant}"
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep:
            raise ExperimentError(f"--set {item}: expected KEY=JSON")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text  # a bare word is a string: --set training.precision=bf16
        set_dotted(doc, key, value, f"--set {item}")
    doc.pop("variants", None)
    doc.pop("sweep", None)

    model = dict(MODEL_DEFAULTS, **_object(doc, "model", path))
    training = dict(TRAINING_DEFAULTS, **_object(doc, "training", path))
    seq = training.get("seq_len", {})
    if not isinstance(seq, dict):
        raise ExperimentError(f"{path}: training.seq_len: expected an object")
    training["seq_len"] = dict(SEQ_LEN_DEFAULTS, **seq)
    training["compile"] = compile_spec(training["compile"], path)
    growth = training.get("batch_size_growth")
    if growth is not None and not isinstance(growth, dict):
        raise ExperimentError(f"{path}: training.batch_size_growth: expected an object")
    training["batch_size_growth"] = dict(GROWTH_DEFAULTS, **(growth or {}))
    allocator = _object(doc, "allocator", path)
    _check(path, "model.kind", model["kind"], ("gpt",))
    _check(path, "model.attention", model["attention"], ATTENTIONS)
    _check(path, "training.precision", training["precision"], PRECISIONS)
    _check(path, "training.checkpointing", training["checkpointing"], CHECKPOINTING)
    _check(path, "training.optimizer", training["optimizer"], OPTIMIZERS)
    _check(path, "training.seq_len.kind", training["seq_len"]["kind"], SEQ_KINDS)
    _check(path, "training.seq_len.collation", training["seq_len"]["collation"], COLLATIONS)
    for key in ("layers", "hidden", "heads", "ffn_mult", "vocab"):
        _positive(path, "model." + key, model[key])
    for key in ("batch_size", "steps", "grad_accum", "checkpoint_every"):
        _positive(path, "training." + key, training[key])
    if model["hidden"] % model["heads"]:
        raise ExperimentError(f"{path}: model.hidden ({model['hidden']}) must be a multiple of "
                              f"model.heads ({model['heads']})")
    if training["seq_len"]["kind"] == "list" and not training["seq_len"]["values"]:
        raise ExperimentError(f"{path}: training.seq_len.values: expected a non-empty list")
    return dict(name=run_name, alloc_conf=str(allocator.get("alloc_conf", "")),
                device=doc.get("device") or {}, parallel=_object(doc, "parallel", path),
                model=model, training=training)


def compile_spec(value, path):
    """`compile`: true/false (true = every non-attention module kind) or {layernorm, mlp, loss}."""
    if isinstance(value, bool):
        return dict(layernorm=value, mlp=value, loss=False)
    if isinstance(value, dict):
        unknown = set(value) - {"layernorm", "mlp", "loss"}
        if unknown:
            raise ExperimentError(f"{path}: training.compile: unknown key '{sorted(unknown)[0]}'"
                                  " (expected layernorm, mlp, loss)")
        return dict(layernorm=bool(value.get("layernorm", False)),
                    mlp=bool(value.get("mlp", False)), loss=bool(value.get("loss", False)))
    raise ExperimentError(f"{path}: training.compile: expected true/false or an object")


def micro_batches(training):
    """Every micro-batch's (batch_size, seq_len), in order, drawn with CPython's `random` the way
    engine/workload/sequence_lengths.cpp reproduces it."""
    spec = training["seq_len"]
    rng = random.Random(spec["seed"])

    def draw():
        if spec["kind"] == "uniform":
            return rng.randint(spec["min"], spec["max"])
        if spec["kind"] == "lognormal":
            x = rng.lognormvariate(math.log(spec["median"]), spec["sigma"])
            return min(spec["max"], max(spec["min"], int(x)))
        return spec["value"]

    def round_up(v):
        m = spec["round_to"]
        return v if m <= 1 else (v + m - 1) // m * m

    out = []
    for step in range(training["steps"]):
        growth = training["batch_size_growth"]
        batch = training["batch_size"] + (step // growth["every_steps"]) * growth["add"]
        for _ in range(training["grad_accum"]):
            if spec["kind"] == "list":
                length = spec["values"][len(out) % len(spec["values"])]
            elif spec["collation"] == "pack":
                length = spec["value"] if spec["kind"] == "fixed" else spec["max"]
            elif spec["collation"] == "pad_to_max":
                length = max(draw() for _ in range(batch))
            else:
                length = draw()
            out.append(dict(batch_size=batch, seq_len=round_up(length)))
    return out


def _object(doc, key, path):
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ExperimentError(f"{path}: {key}: expected an object")
    return value


def _check(path, key, value, allowed):
    if value not in allowed:
        raise ExperimentError(f"{path}: {key}: '{value}' is not one of {', '.join(allowed)}")


def _positive(path, key, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ExperimentError(f"{path}: {key}: expected a positive integer, got {value!r}")
