// main.cpp — the `fumi` command line: parses arguments with CLI11 and dispatches to the
// subcommands of commands.h. Usage and exit codes: docs/cli.md.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"

#ifndef FUMI_VERSION_STRING
#define FUMI_VERSION_STRING "unknown"
#endif

namespace {

constexpr int kUsageError = 2;

// `fumi run [options] -- CMD...`: CLI11 does not split a subcommand's arguments at "--" the way
// `run` needs, so find that "--" here. It counts only before the command's first word; a "--"
// after it belongs to the command. Returns the index of the "--" in argv, or -1.
int findRunSeparator(int argc, char** argv) {
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;  // top-level flags (--help, --version)
  if (i >= argc || std::strcmp(argv[i], "run") != 0) return -1;
  for (int j = i + 1; j < argc; ++j) {
    const char* a = argv[j];
    if (std::strcmp(a, "--") == 0) return j;
    if (std::strcmp(a, "--policy") == 0 || std::strcmp(a, "--out") == 0) {
      ++j;  // skip the option's value
      continue;
    }
    if (a[0] != '-') return -1;  // the command starts here
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fumi — runtime precision checker for numerical libraries (LD_PRELOAD)", "fumi"};
  app.set_version_flag("--version", std::string("fumi ") + FUMI_VERSION_STRING);
  app.require_subcommand(1);

  // fumi run
  fumi::cli::RunOptions run_opts;
  CLI::App* run = app.add_subcommand(
      "run", "Run CMD with libfumi preloaded, then print a summary of its events");
  run->add_option("--policy", run_opts.policy, "Policy YAML file (validated before running)")
      ->type_name("FILE");
  run->add_option("--out", run_opts.out,
                  "Output directory (default: $FUMI_OUT, else the policy's report.dir, else fumi-out)")
      ->type_name("DIR");
  run->prefix_command();  // everything from the command's first word on is the command
  run->footer(
      "Usage: fumi run [--policy FILE] [--out DIR] [--] CMD ARGS...\n"
      "Everything from CMD on (or after --) is the command and its arguments. Exit status: the\n"
      "command's (128+N when killed by signal N); 2: bad policy or setup; 127: cannot execute.");

  // fumi report
  std::string report_dir, report_format = "text";
  bool report_all = false;
  CLI::App* rep = app.add_subcommand("report", "Aggregate the event files of an output directory");
  rep->add_option("DIR", report_dir, "Output directory of a run")->required();
  rep->add_option("--format", report_format, "text, json or html (one self-contained page)")
      ->type_name("FORMAT")
      ->check(CLI::IsMember({"text", "json", "html"}))
      ->capture_default_str();
  rep->add_flag("--all", report_all,
                "List the ops that were only counted, not checked, in the table");

  // fumi replay
  fumi::cli::ReplayOptions replay_opts;
  CLI::App* replay = app.add_subcommand(
      "replay", "Run one recorded call (a case a `dump` rule wrote) again alone, under its check");
  replay->add_option("CASE", replay_opts.case_dir, "Case directory: <out>/cases/<pid>-<op>-<index>")
      ->required();
  replay->add_option("--policy", replay_opts.policy,
                     "Policy YAML file (default: the case's check, metric and tolerance)")
      ->type_name("FILE");
  replay->add_option("--out", replay_opts.out, "Output directory (default: CASE/replay)")
      ->type_name("DIR");
  replay->footer("Exit status: 0 the recorded finding came back, 1 it did not, 2 the case cannot "
                 "be replayed\n(PyTorch ops; CPU BLAS: sgemm_, dgemm_, cblas_sgemm, "
                 "cblas_dgemm, sgemv_, dgemv_).");
  std::string replay_case, replay_dir;
  CLI::App* replay_call = app.add_subcommand("replay-call", "");  // the replay's child, hidden
  replay_call->group("");
  replay_call->add_option("CASE", replay_case)->required();
  replay_call->add_option("DIR", replay_dir)->required();

  // fumi policy check|default
  std::string policy_file;
  CLI::App* policy = app.add_subcommand("policy", "Validate or print policies");
  policy->require_subcommand(1);
  CLI::App* pcheck = policy->add_subcommand("check", "Validate a policy file");
  pcheck->add_option("FILE", policy_file, "Policy YAML file")->required();
  CLI::App* pdefault = policy->add_subcommand("default", "Print the embedded default policy");

  // fumi plugins
  std::vector<std::string> plugin_dirs;
  CLI::App* plugins = app.add_subcommand("plugins", "List the check plugins that can be found");
  plugins->add_option("--dir", plugin_dirs, "Extra plugin directory (repeatable)")
      ->type_name("DIR")
      ->allow_extra_args(false);

  // fumi env
  CLI::App* env = app.add_subcommand("env", "List the environment variables fumi reads");

  if (argc <= 1) {
    std::cerr << app.help();
    return kUsageError;
  }

  // Split `fumi run ... -- CMD...` before CLI11 sees it.
  std::vector<std::string> after_separator;
  int parse_argc = argc;
  const int sep = findRunSeparator(argc, argv);
  if (sep >= 0) {
    parse_argc = sep;
    for (int k = sep + 1; k < argc; ++k) after_separator.emplace_back(argv[k]);
  }

  try {
    app.parse(parse_argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kUsageError;
  }

  if (run->parsed()) {
    run_opts.command = sep >= 0 ? after_separator : run->remaining();
    return fumi::cli::runCommand(run_opts);
  }
  if (rep->parsed()) return fumi::cli::reportCommand(report_dir, report_format, report_all);
  if (replay->parsed()) return fumi::cli::replayCommand(replay_opts);
  if (replay_call->parsed()) return fumi::cli::replayCallCommand(replay_case, replay_dir);
  if (pcheck->parsed()) return fumi::cli::policyCheckCommand(policy_file);
  if (pdefault->parsed()) return fumi::cli::policyDefaultCommand();
  if (plugins->parsed()) return fumi::cli::pluginsCommand(plugin_dirs);
  if (env->parsed()) return fumi::cli::envCommand();
  std::cerr << app.help();
  return kUsageError;
}
