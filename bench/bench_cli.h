// Command-line parsing shared by the bench tools: CLI11, as `spindle` parses its own flags. --help
// prints the usage and exits 0; an unknown flag, a missing value or a value out of its range
// prints CLI11's message naming the flag and exits with CLI11's code, before any work starts
// (no benchmark runs, no model is written, on arguments it cannot honour).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>

namespace spindle::bench {

inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
}

}  // namespace spindle::bench
