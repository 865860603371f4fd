"""libfumi.so exports exactly the hooked symbols and the fumi_* API (nothing from yaml-cpp,
spdlog, fmt, libbacktrace or C++ template instantiations), and links no CUDA or torch library."""
import os
import subprocess
import unittest

from fumitest import BUILD, LIBFUMI, SOURCE


def hook_table_names():
    names = set()
    hooks = os.path.join(SOURCE, "interposer", "hooks")
    for f in os.listdir(hooks):
        if f.endswith(".def"):
            for line in open(os.path.join(hooks, f)):
                for row in ("FUMI_HOOK(", "FUMI_PASS_HOOK("):
                    if line.startswith(row):
                        names.add(line[len(row):].split(",")[0].strip())
    return names


class Exports(unittest.TestCase):
    def test_export_list(self):
        out = subprocess.run(["nm", "-D", "--defined-only", LIBFUMI], capture_output=True,
                             text=True, check=True).stdout
        exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
        expected = hook_table_names() | {
            "fumi_version", "fumi_plugin_abi_version", "dlopen", "dlsym", "_exit", "exit",
            "__libc_start_main", "sigaction",
            "signal", "execve", "execv", "execvp", "execvpe", "fexecve", "execl", "execlp",
            "execle"}
        self.assertIn("sgemm_", expected)
        if "cublasGemmEx" in expected:  # CUDA build: CUPTI clients' entry points too
            self.assertIn("cuptiSubscribe_v2", expected)
        self.assertEqual(exported, expected)
        with open(os.path.join(BUILD, "libfumi.exports")) as f:
            self.assertEqual({l.strip() for l in f if l.strip()}, expected)

    def test_no_cuda_or_torch_dependency(self):
        out = subprocess.run(["readelf", "-d", LIBFUMI], capture_output=True, text=True,
                             check=True).stdout
        needed = [l for l in out.splitlines() if "NEEDED" in l]
        self.assertTrue(needed)
        for lib in ("cuda", "cublas", "cudnn", "cupti", "torch", "c10", "python", "spdlog", "fmt"):
            self.assertFalse([l for l in needed if lib in l], (lib, needed))


if __name__ == "__main__":
    unittest.main()
