"""Shared helpers of the pipemesh-run tests (run with /usr/bin/python3).

The binary comes from the PIPEMESH_RUN environment variable (ctest sets it
to the built target) or defaults to build/bin/pipemesh-run.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PIPEMESH_RUN = os.environ.get("PIPEMESH_RUN", os.path.join(REPO, "build", "bin", "pipemesh-run"))


def runtime_blas_core():
    """The OpenBLAS core pipemesh-run's sums run on (`--version`; it picks one
    itself for a CPU its OpenBLAS does not know), or None."""
    try:
        out = subprocess.run([PIPEMESH_RUN, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"OpenBLAS core (\w+)", out)
    return m.group(1) if m else None


# The PyTorch references sum in the runtime's order: Debian's numpy and torch
# call the system OpenBLAS, which on a CPU that OpenBLAS 0.3.21 does not know
# takes its generic Prescott kernels where pipemesh-run takes SkylakeX's, and
# the bf16 storage tests compare which elements round which way. Set before
# numpy is imported (it loads OpenBLAS).
if "OPENBLAS_CORETYPE" not in os.environ and "numpy" not in sys.modules:
    _core = runtime_blas_core()
    if _core:
        os.environ["OPENBLAS_CORETYPE"] = _core

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "runtime", "tools"))

import make_test_plan as mtp  # noqa: E402

# Open MPI as root in containers and more ranks than cores in CI.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}


def run(args, np_=None, timeout=300, env=None):
    """Runs pipemesh-run (under mpirun -np np_ when given); returns CompletedProcess."""
    cmd = [PIPEMESH_RUN] + [str(a) for a in args]
    e = dict(os.environ)
    e.update(MPI_ENV)
    if env:
        e.update(env)
    if np_ is not None:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--allow-run-as-root"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)


# llm.c's shard formats: (magic, version) by token type.
SHARD_HEADERS = {np.uint16: (20240520, 1), np.uint32: (20240801, 7)}


def write_shard(path, tokens, dtype=np.uint16):
    tokens = np.asarray(tokens, dtype=dtype)
    header = np.zeros(256, np.int32)
    header[0], header[1] = SHARD_HEADERS[dtype]
    header[2] = len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], np.int32)
    dtype = next(t for t, h in SHARD_HEADERS.items() if h == (header[0], header[1]))
    return np.frombuffer(data[1024:], dtype)[: header[2]].astype(np.int64)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pipemesh-run-test-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_tiny_plan(self, name="tiny.plan", **gpt):
        """make_test_plan's tiny GPT (build_tiny_gpt's arguments) as a plan in the
        test's folder; returns its path."""
        b, _ = mtp.build_tiny_gpt(**gpt)
        path = self.path(name)
        mtp.write_plan(path, b.manifest(), b.weights)
        return path

    def check_ok(self, r):
        self.assertEqual(r.returncode, 0, f"pipemesh-run failed:\n{r.stdout}\n{r.stderr}")
        return r

    def check_fails(self, r, *needles):
        self.assertNotEqual(r.returncode, 0, f"pipemesh-run should have failed:\n{r.stdout}\n{r.stderr}")
        self.assertIn("pipemesh-run: error:", r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr)
        self.assertNotIn("Segmentation", r.stderr)
        return r


def main():
    unittest.main(verbosity=2)
