// Runs an independent Python oracle (python3-jsonschema, a reference parse, the jinja2 renderer)
// from a test: `python3 <args>` with a text on stdin, its stdout's lines back.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace spindle::testing {

// Runs `python3 <args>` with `input` on stdin; the lines it prints (without their '\n'). A failing
// run fails the test and returns what it printed. Each call uses its own temporary folder, so
// concurrent calls from one process do not collide.
inline std::vector<std::string> run_python(const std::string& args, const std::string& input) {
  namespace fs = std::filesystem;
  static std::atomic<int> counter{0};
  const fs::path dir =
      fs::temp_directory_path() / ("spindle_python_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(dir);
  std::ofstream(dir / "in.txt") << input;
  const std::string cmd = "python3 " + args + " < " + (dir / "in.txt").string() + " > " + (dir / "out.txt").string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(dir / "out.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  fs::remove_all(dir);
  return lines;
}

}  // namespace spindle::testing
