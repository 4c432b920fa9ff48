# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "PIPEMESH"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.pipemesh_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%models", os.path.join(config.pipemesh_src_root, "models")))
# Debian's python3-onnx / python3-torch belong to /usr/bin/python3.
config.substitutions.append(("%python", "/usr/bin/python3"))

llvm_config.with_system_environment(["HOME", "TMPDIR"])
llvm_config.use_default_substitutions()

tool_dirs = [config.pipemesh_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["pipemesh-opt"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.pipemesh_tools_dir, append_path=True)
