// commands.cpp — `fumi report`, `fumi policy`, `fumi plugins`, `fumi env`.
#include "commands.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "paths.h"
#include "plugin_loader.h"
#include "policy.h"
#include "event_report.h"
#include "settings.h"

namespace fumi::cli {

namespace {

std::string padRight(const std::string& s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}

// Print rows as columns separated by two spaces; the last column is not padded.
void printTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return;
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      if (c) line += "  ";
      line += (c + 1 == r.size()) ? r[c] : padRight(r[c], width[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

}  // namespace

int printDiagnostics(const std::vector<fumi::Diagnostic>& diagnostics) {
  int errors = 0;
  for (const fumi::Diagnostic& d : diagnostics) {
    if (d.severity == fumi::Diagnostic::Severity::kError) ++errors;
    std::cerr << d.str() << "\n";
  }
  return errors;
}

int reportCommand(const std::string& dir, const std::string& format, bool all) {
  size_t nfiles = 0;
  report::Report rep = report::readDirectory(absolutePath(dir), &nfiles);
  if (nfiles == 0) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      std::cerr << "fumi report: " << dir << ": no such directory\n";
    } else {
      std::cerr << "fumi report: no event files (events-*.jsonl) in " << dir << "\n";
    }
    return 1;
  }
  if (format != "text") {
    // Malformed lines are in the document (JSON "errors", the page's Errors); say so on stderr
    // too: the document itself goes to a file.
    for (const report::MalformedLine& m : rep.malformed) {
      std::cerr << "fumi report: warning: " << m.str() << " (skipped)\n";
    }
  }
  report::TextOptions options;
  options.all = all;
  if (format == "json") {
    std::cout << report::toJson(rep).dump(2) << "\n";
  } else if (format == "html") {
    std::cout << report::formatHtml(rep, options, absolutePath(dir));  // one self-contained page
  } else {
    std::cout << "Report of " << absolutePath(dir) << " (" << nfiles << " event file"
              << (nfiles == 1 ? "" : "s") << ")\n\n";
    std::cout << report::formatText(rep, options);
  }
  return 0;
}

int policyCheckCommand(const std::string& file) {
  fumi::PolicyResult result = fumi::parsePolicyFile(file);
  const int errors = printDiagnostics(result.diagnostics);
  if (!result.ok() || errors > 0) {
    std::cerr << file << ": failed (" << std::max(errors, 1) << " error" << (errors > 1 ? "s" : "")
              << ")\n";
    return 1;
  }
  std::cout << file << ": ok (" << result.policy->rules.size() << " rules)\n";
  return 0;
}

int policyDefaultCommand() {
  const char* text = fumi::embeddedDefaultPolicy();
  std::string s = text ? text : "";
  std::cout << s;
  if (!s.empty() && s.back() != '\n') std::cout << "\n";
  return 0;
}

int pluginsCommand(const std::vector<std::string>& dirs) {
  const std::string builtin = builtinPluginDir();
  const std::vector<std::string> search = fumi::pluginSearchPath(dirs, builtin);
  std::cout << "Plugin search path:\n";
  for (const std::string& d : search) {
    std::error_code ec;
    const bool exists = std::filesystem::is_directory(d, ec);
    std::cout << "  " << d << (exists ? "" : "  (not found)") << (d == builtin ? "  (built-in)" : "")
              << "\n";
  }
  std::cout << "\n";

  const std::vector<fumi::PluginLibrary> libs = fumi::discoverPlugins(search);
  std::vector<std::vector<std::string>> rows = {{"NAME", "ABI", "PATH", "DESCRIPTION"}};
  std::vector<const fumi::PluginLibrary*> failed;
  for (const fumi::PluginLibrary& lib : libs) {
    if (!lib.error.empty() || lib.plugin == nullptr) {
      failed.push_back(&lib);
      continue;
    }
    rows.push_back({lib.name, std::to_string(lib.abi_version), lib.path, lib.description});
  }
  if (rows.size() == 1) {
    std::cout << "No usable plugins found.\n";
  } else {
    printTable(std::cout, rows);  // the free-form description last, unpadded
  }
  if (!failed.empty()) {
    std::cout << "\nLibraries that could not be used:\n";
    for (const fumi::PluginLibrary* lib : failed) {
      std::cout << "  " << (lib->path.empty() ? lib->name : lib->path) << ": " << lib->error << "\n";
    }
  }
  return 0;
}

int envCommand() {
  std::vector<std::vector<std::string>> rows = {{"VARIABLE", "DEFAULT", "CURRENT", "DESCRIPTION"}};
  for (const fumi::SettingInfo* s = fumi::settingTable(); s != nullptr && s->env != nullptr; ++s) {
    const char* cur = std::getenv(s->env);
    std::string def = (s->default_value && *s->default_value) ? s->default_value : "(empty)";
    rows.push_back({s->env, def, cur ? std::string(cur) : "(unset)",
                    s->description ? s->description : ""});
  }
  printTable(std::cout, rows);
  return 0;
}

}  // namespace fumi::cli
