// The torch version a process runs, as the adapter reads it before attaching.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "torch/torch_version.h"

using fumi::torch_version::fromSoname;
using fumi::torch_version::fromVersionPy;
using fumi::torch_version::ofLibrary;

TEST(TorchVersion, FromTheLibraryNameOrVersionPy) {
  EXPECT_EQ(fromSoname("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13").str(), "1.13");
  EXPECT_FALSE(fromSoname("/opt/v/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so").known());
  EXPECT_FALSE(fromSoname("/a.so.2/libtorch_cpu.so").known());  // a directory's name, not its own
  EXPECT_EQ(fromVersionPy("__version__ = '2.11.0+cu130'\ndebug = False\n").str(), "2.11");
  EXPECT_EQ(fromVersionPy("git_version = 'abc'\n__version__ = \"2.4.1\"\n").str(), "2.4");
  EXPECT_FALSE(fromVersionPy("__version__ = 'nightly'\n").known());
  EXPECT_FALSE(fromVersionPy("").known());
  // A wheel's layout: <torch>/lib/libtorch_cpu.so beside <torch>/version.py.
  const auto dir = std::filesystem::temp_directory_path() / "fumi-torch-version-test";
  std::filesystem::create_directories(dir / "lib");
  std::ofstream(dir / "version.py") << "from typing import Optional\n__version__ = '2.9.0+cpu'\n";
  EXPECT_EQ(ofLibrary((dir / "lib" / "libtorch_cpu.so").string()).str(), "2.9");
  std::filesystem::remove(dir / "version.py");
  EXPECT_FALSE(ofLibrary((dir / "lib" / "libtorch_cpu.so").string()).known());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(ofLibrary("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13").str(), "1.13");
}
