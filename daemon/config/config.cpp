// The config document: reading the file, the one-document and empty-file checks, the top
// level (`server`, `jobs`: names, duplicates, a daemon that could serve nothing) and the entry
// points of config.hpp. Each section has its file (sections.hpp lists them), and all share the
// YAML reader of yaml_reader.hpp.
//
// Invariant: every failure leaves through ConfigError (never a yaml-cpp exception), so that
// main can print "FILE:LINE:COL: key.path: message" for any bad input whatsoever.
#include "config/config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "config/sections.hpp"
#include "config/yaml_reader.hpp"

namespace stoker::config {

namespace fs = std::filesystem;

ConfigError::ConfigError(const std::string& file, Mark mark, const std::string& key_path,
                         const std::string& message)
    : std::runtime_error(file + ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column) +
                         ": " + key_path + ": " + message),
      file_(file),
      mark_(mark),
      key_path_(key_path) {}

namespace {

// Line (1-based) of the first line that is neither blank, a comment nor a document marker;
// 0 when there is none.
std::size_t first_content_line(const std::string& text) {
  std::size_t line = 0, pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    ++line;
    const std::string_view l(text.data() + pos, end - pos);
    const std::size_t first = l.find_first_not_of(" \t\r");
    if (first != std::string_view::npos && l[first] != '#' && l.substr(first, 3) != "---" &&
        l.substr(first, 3) != "...") {
      return line;
    }
    pos = end + 1;
  }
  return 0;
}

// Line of a `---` marker that starts a second document (one after content), or 0.
std::size_t second_document(const std::string& text) {
  std::size_t line = 0, pos = 0;
  bool content = false;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    ++line;
    const std::string_view l(text.data() + pos, end - pos);
    const bool marker = l.substr(0, 3) == "---" && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
    if (marker && content) return line;
    const std::size_t first = l.find_first_not_of(" \t\r");
    if (!marker && first != std::string_view::npos && l[first] != '#') content = true;
    pos = end + 1;
  }
  return 0;
}

Config parse_config_as(const std::string& yaml_text, const std::string& file_name, const fs::path& base_dir,
                       bool client_job, const std::vector<std::string>& client_buckets = {}) {
  const Reader r(file_name, client_job, client_buckets);
  // One document, read with YAML::Load: yaml-cpp 0.7's LoadAll never returns on some inputs
  // (",a", "---\n---\n,,": it loops allocating ~1 GB/s), which would wedge a daemon reloading
  // its config. A second document is found by its marker instead (second_document()).
  if (const std::size_t line = second_document(yaml_text); line != 0) {
    throw ConfigError(file_name, Mark{static_cast<int>(line), 1}, "(top)", "one YAML document expected, found a second one here");
  }
  YAML::Node doc;
  try {
    doc = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const Mark at = parse_error_mark(yaml_text, e);
    const bool moved = at.line != mark_of(e.mark).line || at.column != mark_of(e.mark).column;
    throw ConfigError(file_name, at, "(yaml)", moved ? e.msg + ": the bracket here is never closed" : e.msg);
  }
  if (doc.IsNull()) {
    if (const std::size_t line = first_content_line(yaml_text); line != 0) {
      throw ConfigError(file_name, Mark{static_cast<int>(line), 1}, "(top)",
                        "expected a mapping with 'jobs' (and optionally 'server'); this line does not start one");
    }
    throw ConfigError(file_name, Mark{1, 1}, "(top)", "the config is empty");
  }
  try {
    const Value top{doc, "", mark_of(doc)};
    if (!top.node.IsMap()) r.fail(top.at, "(top)", "expected a mapping with 'jobs' (and optionally 'server')");
    const Fields f(r, top, {"server", "jobs"});

    Config cfg;
    cfg.file = file_name;
    if (auto* s = f.get("server")) parse_server(r, *s, base_dir, cfg.server);

    const Value& jobs = f.need("jobs");
    // `jobs: {}` is a daemon for client-defined jobs only (Loader.from_folder/from_dataset
    // define theirs at run time); with client_jobs off it could never serve anything.
    if (!jobs.node.IsMap()) r.fail(jobs, "expected a mapping of job names to jobs ({} for client-defined jobs only)");
    if (jobs.node.size() == 0 && !cfg.server.client_jobs) {
      r.fail(jobs, "no jobs and server.client_jobs: false: this stokerd could serve nothing (define a job, or "
                   "allow client-defined jobs)");
    }
    std::set<std::string> names;
    for (const auto& kv : jobs.node) {
      const Mark name_at = mark_of(kv.first);
      if (!kv.first.IsScalar()) r.fail(name_at, "jobs", "job names must be plain words, got " + describe(kv.first));
      const std::string name = kv.first.Scalar();
      // yaml-cpp keeps both entries of a repeated key, so a copy-pasted job is caught here.
      if (!names.insert(name).second) r.fail(name_at, "jobs." + name, "duplicate job name");
      const Mark m = mark_of(kv.second);
      const Value body{kv.second, "jobs." + name, kv.second.IsNull() || m.line == 0 ? name_at : m};
      cfg.jobs.push_back(parse_job(r, name, name_at, body, base_dir));
    }
    return cfg;
  } catch (const YAML::Exception& e) {
    // Not expected (every access above is checked first); kept so that no yaml-cpp exception
    // can escape as something other than a ConfigError.
    throw ConfigError(file_name, mark_of(e.mark), "(yaml)", e.msg);
  }
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& file_name, const fs::path& base_dir) {
  return parse_config_as(yaml_text, file_name, base_dir, /*client_job=*/false);
}

JobConfig parse_client_job(const std::string& yaml_text, const std::string& origin,
                           const std::vector<std::string>& client_buckets) {
  // Relative paths would resolve from "/", which is never what the client meant: refuse them
  // by resolving from a folder that cannot exist.
  Config cfg = parse_config_as(yaml_text, origin, "/nonexistent-relative-path-in-a-client-job", /*client_job=*/true,
                               client_buckets);
  try {
    const YAML::Node doc = YAML::Load(yaml_text);  // parsed once already: it is valid YAML
    if (doc.IsMap() && doc["server"]) {
      throw ConfigError(origin, mark_of(doc["server"]), "server", "a client-defined job cannot set server keys");
    }
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin, mark_of(e.mark), "(yaml)", e.msg);
  }
  if (cfg.jobs.size() != 1) {
    throw ConfigError(origin, Mark{1, 1}, "jobs", "a client defines exactly one job, got " + std::to_string(cfg.jobs.size()));
  }
  return cfg.jobs.front();
}

Config load_config(const fs::path& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    throw ConfigError(file.string(), Mark{0, 0}, "(file)", "cannot read the config: it is a directory");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw ConfigError(file.string(), Mark{0, 0}, "(file)",
                      std::string("cannot read the config: ") + std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    throw ConfigError(file.string(), Mark{0, 0}, "(file)", "cannot read the config: read error");
  }
  const fs::path base = fs::absolute(file).parent_path();
  return parse_config(ss.str(), file.string(), base);
}

}  // namespace stoker::config