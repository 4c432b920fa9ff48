#!/usr/bin/env python3
"""Backend plugins: `--backend X` loads lib/libpipemesh-backend-X.so beside the
executable's bin/ (runtime/lib/exec/Backend.cpp). pipemesh-run itself needs no CUDA
library; a missing plugin, one of another build, one without entry points, one with a
symbol nothing provides, one that registers nothing and a file that is no library are
each refused by name (the fakes: runtime/tests/FakeBackendPlugin.c, built into
PIPEMESH_TEST_PLUGINS). In a CUDA build the real plugin loads: on a machine without a
GPU the refusal comes from inside it.
"""
import os
import shutil
import subprocess
import unittest

import common
from common import mtp

PLUGINS = os.environ.get("PIPEMESH_TEST_PLUGINS",
                         os.path.join(common.REPO, "build", "test-plugins"))
DEVICE_LIBRARIES = ("libcudart", "libcublas", "libnccl", "libcuda.so")


class BackendPlugins(common.TempDirTest):
    def setUp(self):
        super().setUp()
        self.plan = self.path("tiny.plan")
        b, _ = mtp.build_tiny_gpt(batch=2, seq=8, vocab=256, embd=16, heads=2, microbatches=1)
        mtp.write_plan(self.plan, b.manifest(), b.weights)
        # A pipemesh-run of its own, with a lib/ of fake plugins beside its bin/.
        os.makedirs(self.path("bin"))
        os.makedirs(self.path("lib"))
        self.exe = self.path("bin", "pipemesh-run")
        shutil.copy2(common.PIPEMESH_RUN, self.exe)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def install(self, fake, name):
        shutil.copy(os.path.join(PLUGINS, fake + ".so"),
                    self.path("lib", f"libpipemesh-backend-{name}.so"))

    def run_backend(self, name):
        env = dict(os.environ)
        env.update(common.MPI_ENV)
        return subprocess.run([self.exe, self.plan, "--steps", "1", "--backend", name],
                              capture_output=True, text=True, timeout=120, env=env)

    def refused(self, name, *texts):
        r = self.run_backend(name)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertTrue(r.stderr.startswith("pipemesh-run: error: "), r.stderr)
        for t in texts:
            self.assertIn(t, r.stderr)
        return r.stderr

    def test_pipemesh_run_needs_no_device_library(self):
        r = subprocess.run(["ldd", common.PIPEMESH_RUN], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for lib in DEVICE_LIBRARIES:
            self.assertNotIn(lib, r.stdout, "pipemesh-run links a CUDA library: a CPU run "
                             "maps it and cannot start where it is not installed")

    def test_missing_plugin_names_the_file_and_what_is_available(self):
        self.install("stale", "stale")
        err = self.refused("tpu", "backend 'tpu' is not available in this build",
                           "available: cpu, stale;",
                           "no plugin " + self.path("lib", "libpipemesh-backend-tpu.so"))
        # A name that is not a plain word is never turned into a path.
        err = self.refused("../bin/x", "backend '../bin/x' is not available in this build")
        self.assertNotIn("no plugin", err)

    def test_version_lists_the_backends_found(self):
        self.install("stale", "stale")
        r = subprocess.run([self.exe, "--version"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.rstrip().endswith("; backends: cpu, stale"), r.stdout)

    def test_plugin_of_another_build(self):
        self.install("stale", "stale")
        self.refused("stale", "libpipemesh-backend-stale.so comes from another build "
                     "(another-build) than this pipemesh-run")

    def test_plugin_without_entry_points(self):
        self.install("empty", "empty")
        self.refused("empty", "is not a PipeMesh backend plugin",
                     "pipemesh_backend_build_id")

    def test_plugin_with_an_unresolved_symbol(self):
        self.install("unresolved", "unresolved")
        self.refused("unresolved", "backend 'unresolved': cannot load its plugin",
                     "pipemesh_function_no_pipemesh_run_has")

    def test_plugin_that_registers_nothing(self):
        self.install("silent", "silent")
        self.refused("silent", "registered no backend of that name")

    def test_file_that_is_no_library(self):
        with open(self.path("lib", "libpipemesh-backend-junk.so"), "w") as f:
            f.write("not an ELF file\n")
        self.refused("junk", "backend 'junk': cannot load its plugin",
                     "libpipemesh-backend-junk.so")

    def test_cuda_plugin_loads(self):
        real = os.path.join(os.path.dirname(os.path.dirname(common.PIPEMESH_RUN)), "lib",
                            "libpipemesh-backend-cuda.so")
        if not os.path.exists(real):
            self.skipTest("this build has no CUDA backend")
        shutil.copy(real, self.path("lib"))
        r = self.run_backend("cuda")
        # The plugin loaded and ran: it trained (a GPU), or it says the machine has none.
        if r.returncode != 0:
            self.assertIn("backend 'cuda' is not available on this machine", r.stderr)
        else:
            self.assertIn("backend cuda", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
