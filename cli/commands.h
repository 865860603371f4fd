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

struct ReplayOptions {
  std::string case_dir;  // <out>/cases/<pid>-<op>-<call index>
  std::string policy;    // --policy; empty: the case's check, metric and tolerance
  std::string out;       // --out; empty: <case>/replay
};

// `fumi replay CASE`: 0 when the recorded finding comes back (the recorded verdict again), 1
// when it does not, 2 when the case cannot be replayed.
int replayCommand(const ReplayOptions& options);
// `fumi replay-call CASE DIR` (hidden): the replay's child for CPU BLAS cases, run preloaded by
// replayCommand: the recorded call made again, its output written into DIR as
// replayed-t<i>.bin; 0, or 2 on a bad case.
int replayCallCommand(const std::string& case_dir, const std::string& out_dir);

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
