#!/usr/bin/env python3
"""Optional extra oracle: checks the fixtures with a newer onnx and onnxruntime.

Not needed by anything (Debian has neither a new-enough onnx nor onnxruntime): it exists so
that, where PyPI is reachable, the opset 18+ fixtures get a real checker and every fixture
gets a second, independent evaluator besides onnx_eval.py.

    python3 -m venv /tmp/ortvenv && /tmp/ortvenv/bin/pip install onnx onnxruntime numpy
    /tmp/ortvenv/bin/python models/check_fixtures_ort.py [models/fixtures]
"""
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2 import external_weights_as_inputs  # noqa: E402  (needs only onnx + numpy)

TOL = 1e-4


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    failed = passed = 0
    for path in sorted(glob.glob(os.path.join(d, "*.onnx"))):
        name = os.path.basename(path)
        ref_path = path[:-5] + ".npz"
        try:
            if not os.path.exists(ref_path):  # shapes-only: no weights to run
                m = external_weights_as_inputs(onnx.load(path, load_external_data=False))
                onnx.checker.check_model(m)
                onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
                print(f"ok   {name}: checker + strict shape inference (no weights)")
                passed += 1
                continue
            onnx.checker.check_model(path, full_check=True)
            ref = np.load(ref_path)
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feeds = {i.name: ref[i.name] for i in sess.get_inputs()}
            names = [o.name for o in sess.get_outputs()]
            errs = {n: float(np.abs(v - ref[n]).max()) for n, v in zip(names, sess.run(names, feeds))}
            ok = max(errs.values()) < TOL
            print(f"{'ok  ' if ok else 'FAIL'} {name}: " + " ".join(f"{k}={v:.1e}" for k, v in errs.items()))
            passed += ok
            failed += not ok
        except Exception as e:  # report every fixture, not just the first failure
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
