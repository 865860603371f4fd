// commands.h — the subcommands of the `fumi` CLI; main.cpp parses the command line and calls
// these. Each returns the process exit status (documented in docs/cli.md).
#pragma once

#include <string>
#include <vector>

#include "policy.h"

namespace fumi::cli {

// Print policy diagnostics to stderr, one "file:line:col: severity: message" per line.
// Returns the number of errors among them.
int printDiagnostics(const std::vector<fumi::Diagnostic>& diagnostics);

struct RunOptions {
  std::string policy;                // --policy; empty: not given
  std::string out;                   // --out; empty: not given
  std::vector<std::string> command;  // the program and its arguments
};

// `fumi run`: the child's exit status (128+signal when killed), 2 on a bad policy or setup
// problem, 127 when the command cannot be executed.
int runCommand(const RunOptions& options);

// `fumi report DIR`: 0, or 1 when DIR holds no event files. `all`: list the ops only counted too.
int reportCommand(const std::string& dir, const std::string& format, bool all);

// `fumi policy check FILE`: 0 when there is no error (warnings allowed), 1 otherwise.
int policyCheckCommand(const std::string& file);
// `fumi policy default`: prints the embedded default policy; 0.
int policyDefaultCommand();

// `fumi plugins`: lists the plugins of the search path; 0.
int pluginsCommand(const std::vector<std::string>& dirs);

// `fumi env`: prints the environment variable table; 0.
int envCommand();

}  // namespace fumi::cli
