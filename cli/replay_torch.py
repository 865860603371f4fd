# replay.py — one PyTorch op call that fumi recorded (a case a `dump` rule wrote:
# <out>/cases/<pid>-<op>-<index>/call.json and the raw tensors t<i>.bin) made again alone: its
# recorded inputs and arguments loaded, the op called through torch.ops (under autocast when
# the program ran it under autocast), and each of its floating outputs written in the recorded
# layout as DIR/replayed-t<i>.bin, i being the recorded output's index in call.json.
#
#   python3 replay.py CASE DIR
#
# `fumi replay CASE` writes this file into its output directory and runs it under libfumi, so
# that the call is checked as in the program; it runs without fumi too (a reproducer to attach
# to a bug report: it needs only this file, the case directory and the same PyTorch).
# Exit status 0, or 2 with the reason on stderr when the case cannot be replayed.
import ast
import json
import os
import sys

try:
    import torch
except ImportError as e:
    sys.stderr.write("fumi replay: %s has no PyTorch (%s); set FUMI_REPLAY_PYTHON to the "
                     "program's Python\n" % (sys.executable, e))
    sys.exit(2)

DTYPES = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16,
          "bf16": torch.bfloat16}
# The integer and boolean tensors of a call (call.json's aux_tensors), by PyTorch's names.
AUX_DTYPES = {"int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
              "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}


class CannotReplay(Exception):
    pass


def span(t):
    """Elements from the first to the last one a recorded tensor's shape and strides reach."""
    if 0 in t["shape"]:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t["shape"], t["strides"]))


def load(case, t):
    """A recorded tensor: its file's bytes viewed with its shape and strides (on the host)."""
    dtype = (AUX_DTYPES if t.get("aux") else DTYPES).get(t["dtype"])
    if dtype is None:
        raise CannotReplay("tensor %s has dtype %s" % (t["name"], t["dtype"]))
    path = os.path.join(case, t["file"])
    try:
        with open(path, "rb") as f:
            data = bytearray(f.read())
    except OSError as e:
        raise CannotReplay("cannot read %s (%s)" % (path, e.strerror))
    elements = span(t)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) < elements * itemsize:
        raise CannotReplay("%s: %d bytes, the tensor spans %d" % (path, len(data),
                                                                  elements * itemsize))
    if elements == 0:
        return torch.empty_strided(t["shape"], t["strides"], dtype=dtype)
    flat = torch.frombuffer(data, dtype=dtype, count=elements)
    return flat.as_strided(t["shape"], t["strides"])


def parse(text, type_name, name):
    """A recorded argument (the text of its IValue) as the schema's type wants it."""
    if text == "None":
        return None
    if "Device" in type_name:
        return torch.device(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    special = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}
    if text in special:
        return special[text]
    if text.startswith("[") and text.endswith("]"):
        items = [s.strip() for s in text[1:-1].split(",") if s.strip()]
        return [parse(s, type_name, name) for s in items]
    raise CannotReplay("argument %s = %s (%s) cannot be read back" % (name, text, type_name))


def schema_of(op):
    name, _, overload = op.partition(".")
    for s in torch._C._jit_get_schemas_for_operator(name):
        if s.overload_name == overload:
            return s
    raise CannotReplay("this PyTorch has no operator %s" % op)


def callable_of(op):
    name, _, overload = op.partition(".")
    ns, _, base = name.partition("::")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, overload or "default")


def arguments(case, desc, schema, device):
    """The op's positional and keyword arguments, from the recorded tensors (by their schema
    names: `self`, `weight`, `tensors[0]` ...) and the recorded text of the others."""
    inputs = {t["name"]: t for t in desc["tensors"] if t["role"] == "input"}
    inputs.update({t["name"]: dict(t, aux=True) for t in desc.get("aux_tensors", [])})
    args = desc.get("args", {})

    def tensor(label):
        t = load(case, inputs[label])
        return t if device.type == "cpu" else move(t, device)

    positional, keyword = [], {}
    for a in schema.arguments:
        type_name = str(a.type)
        key = "device_arg" if a.name == "device" else a.name
        if a.name in inputs:
            value = tensor(a.name)
        elif a.name + "[0]" in inputs:
            value, k = [], 0
            while "%s[%d]" % (a.name, k) in inputs:
                value.append(tensor("%s[%d]" % (a.name, k)))
                k += 1
        elif key in args:
            value = parse(args[key], type_name, a.name)
        elif "Tensor" in type_name:
            raise CannotReplay(
                "argument %s (%s) was not recorded: fumi records a call's floating, integer "
                "and boolean tensors (a complex or quantized one, an empty list or a list with "
                "None elements is not replayable)" % (a.name, type_name))
        else:
            raise CannotReplay("argument %s (%s) was not recorded" % (a.name, type_name))
        if a.kwarg_only:
            keyword[a.name] = value
        else:
            positional.append(value)
    return positional, keyword


def move(t, device):
    """t on `device` with its strides (overlapping ones too): its span moved, then viewed."""
    base = t.as_strided((t.storage().size(),), (1,), 0) if t.numel() else t
    return base.to(device).as_strided(t.shape, t.stride())


def floating_outputs(result):
    """The op's floating tensors in the order fumi describes them (returns in order, lists
    element by element, undefined and non-floating tensors left out)."""
    values = result if isinstance(result, (tuple, list)) else (result,)
    out = []
    for v in values:
        for t in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(t, torch.Tensor) and t.dtype in DTYPES.values():
                out.append(t)
    return out


def write(path, t, like):
    """t written in the recorded layout `like` (shape and strides), as the span of its file."""
    elements = span(like)
    flat = torch.zeros(elements, dtype=t.dtype)
    if elements:
        flat.as_strided(like["shape"], like["strides"]).copy_(t.cpu())
    raw = flat.view(torch.uint8) if elements else torch.empty(0, dtype=torch.uint8)
    with open(path, "wb") as f:
        f.write(raw.numpy().tobytes())


def replay(case, out_dir):
    path = os.path.join(case, "call.json")
    try:
        with open(path) as f:
            desc = json.load(f)
    except (OSError, ValueError) as e:
        raise CannotReplay("cannot read %s (%s)" % (path, e))
    if desc.get("backend") != "torch":
        raise CannotReplay("%s is no PyTorch case" % path)
    if desc.get("args", {}).get("complex") == "1":
        raise CannotReplay("complex calls cannot be replayed yet (fumi records their real views)")
    device = torch.device(desc.get("args", {}).get("device", "cpu"))
    if device.type not in ("cpu", "cuda"):
        raise CannotReplay("calls on %s cannot be replayed (CPU and CUDA only)" % device)
    op = desc["op"]
    schema = schema_of(op)
    positional, keyword = arguments(case, desc, schema, device)
    fn = callable_of(op)
    autocast = desc.get("autocast")
    with torch.no_grad():
        if autocast:
            with torch.autocast(device.type, dtype=DTYPES[autocast]):
                result = fn(*positional, **keyword)
        else:
            result = fn(*positional, **keyword)
    recorded = [(i, t) for i, t in enumerate(desc["tensors"]) if t["role"] == "output"]
    got = floating_outputs(result)
    if len(got) != len(recorded):
        raise CannotReplay("the op returned %d floating tensors, the case records %d"
                           % (len(got), len(recorded)))
    for (i, like), t in zip(recorded, got):
        if list(t.shape) != like["shape"] or DTYPES[like["dtype"]] != t.dtype:
            raise CannotReplay("output %s is %s %s, recorded %s %s" % (
                like["name"], t.dtype, list(t.shape), like["dtype"], like["shape"]))
        write(os.path.join(out_dir, "replayed-t%d.bin" % i), t, like)


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: %s CASE DIR\n" % sys.argv[0])
        return 2
    try:
        replay(sys.argv[1], sys.argv[2])
    except CannotReplay as e:
        sys.stderr.write("fumi replay: %s: %s\n" % (sys.argv[1], e))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
