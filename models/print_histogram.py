#!/usr/bin/python3
"""Prints the op-type histogram of ONNX models (for reviewing what an exporter produced).

    print_histogram.py model.onnx [more.onnx ...]

Also lists inputs/outputs, initializers (count, bytes, and which are Identity aliases of
another initializer: torch.onnx deduplicates equal tensors that way) and ops outside the
set PipeMesh's importer is expected to handle, so a surprise shows at a glance. External
data is not loaded: this works on shapes-only files and huge models alike.
"""
import collections
import sys

import numpy as np
import onnx

# Ops the importer is expected to handle (see models/README.md).
KNOWN_OPS = set("""Constant Identity Cast Shape Gather Unsqueeze Squeeze Concat Reshape Slice
Range ConstantOfShape Expand Equal Not Less Where Add Sub Mul Div Pow Sqrt Tanh Erf ReduceMean
ReduceSum LayerNormalization MatMul Gemm Split Transpose Softmax Dropout SoftmaxCrossEntropyLoss
LogSoftmax NegativeLogLikelihoodLoss""".split())


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def describe(path, out=sys.stdout):
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    opsets = ", ".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in m.opset_import)
    print(f"== {path}  (ir {m.ir_version}, opset {opsets}, producer {m.producer_name} "
          f"{m.producer_version})", file=out)
    for kind, vals in (("inputs", g.input), ("outputs", g.output)):
        print(f"  {kind}: " + ", ".join(f"{v.name}{_dims(v)}" for v in vals), file=out)
    nbytes = sum(int(np.prod(t.dims)) * np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.data_type]).itemsize
                 for t in g.initializer)
    external = sum(t.data_location == onnx.TensorProto.EXTERNAL for t in g.initializer)
    print(f"  initializers: {len(g.initializer)} ({nbytes:,} bytes, {external} external)", file=out)
    inits = {t.name for t in g.initializer}
    aliases = [(n.output[0], n.input[0]) for n in g.node if n.op_type == "Identity" and n.input[0] in inits]
    if aliases:
        print(f"  Identity aliases of initializers: {len(aliases)}", file=out)
        for dst, src in aliases:
            print(f"    {dst} = {src}", file=out)
    hist = collections.Counter(n.op_type for n in g.node)
    print(f"  nodes: {len(g.node)}", file=out)
    for op, n in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"    {op:28s}{n:5d}", file=out)
    unknown = sorted(set(hist) - KNOWN_OPS)
    if unknown:
        print(f"  ops outside the expected set: {', '.join(unknown)}", file=out)
    return hist


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        describe(p)
