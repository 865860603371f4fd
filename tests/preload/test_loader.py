"""libfumi's dlopen wrapper keeps the loader's view of the caller: a library that dlopens a
dependency by a bare name only its own RUNPATH reaches still finds it under LD_PRELOAD."""
import os
import unittest

from fumitest import run

RP_MAIN = os.environ.get("RP_MAIN")


class Runpath(unittest.TestCase):
    def test_runpath_of_the_real_caller(self):
        plain = run([RP_MAIN], preload=False)
        self.assertEqual(plain.stdout, "from main: not found\nvia opener: 42\n", plain.stderr)
        r = run([RP_MAIN], policy="version: 1\nrules: []\n")
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(r.stdout, plain.stdout)

    def test_python_imports_under_fumi(self):
        # Python's extension modules are dlopened relative to their own paths.
        r = run(["/usr/bin/python3", "-c", "import json, ctypes, decimal; print('ok')"])
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(r.stdout, "ok\n")


if __name__ == "__main__":
    unittest.main()
