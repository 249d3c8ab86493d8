#include "objstore/credentials.hpp"

#include <cstdlib>
#include <fstream>
#include <string_view>

namespace stoker::objstore {

namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

std::optional<std::string> nonempty(const EnvLookup& env, const char* name) {
  auto v = env(name);
  if (v && v->empty()) v.reset();
  return v;
}

}  // namespace

std::string Credentials::describe() const { return source; }

EnvLookup process_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

base::Result<Credentials> resolve_credentials(const EnvLookup& env) {
  const auto id = nonempty(env, "AWS_ACCESS_KEY_ID");
  const auto secret = nonempty(env, "AWS_SECRET_ACCESS_KEY");
  if (id && secret) {
    Credentials c;
    c.access_key = *id;
    c.secret_key = *secret;
    c.session_token = nonempty(env, "AWS_SESSION_TOKEN").value_or("");
    c.source = "environment (AWS_ACCESS_KEY_ID)";
    return c;
  }
  if (id || secret) {
    return base::Status::error(std::string(id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                                              : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not") +
                               " (give both, or neither to use the credentials file)");
  }
  const auto named_file = nonempty(env, "AWS_SHARED_CREDENTIALS_FILE");
  std::string file;
  if (named_file) {
    file = *named_file;
  } else if (const auto home = nonempty(env, "HOME")) {
    file = *home + "/.aws/credentials";
  }
  const auto named_profile = nonempty(env, "AWS_PROFILE");
  const std::string profile = named_profile.value_or("default");
  std::ifstream in(file);
  if (file.empty() || !in) {
    if (named_file) return base::Status::error("AWS_SHARED_CREDENTIALS_FILE names " + file + ", which cannot be read");
    if (named_profile) return base::Status::error("AWS_PROFILE is '" + profile + "' but there is no credentials file " + file);
    return Credentials{};
  }
  // INI: [profile] sections of `key = value` lines; '#' and ';' start comments.
  Credentials c;
  bool in_profile = false, seen = false;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[') {
      if (t.back() != ']') return base::Status::error(file + ":" + std::to_string(n) + ": malformed section header");
      in_profile = trim(std::string_view(t).substr(1, t.size() - 2)) == profile;
      seen = seen || in_profile;
      continue;
    }
    if (!in_profile) continue;
    const auto eq = t.find('=');
    // The line is not quoted back: it may be a secret with a typo in its key.
    if (eq == std::string::npos) return base::Status::error(file + ":" + std::to_string(n) + ": expected key = value");
    const std::string key = trim(std::string_view(t).substr(0, eq));
    const std::string value = trim(std::string_view(t).substr(eq + 1));
    if (key == "aws_access_key_id") c.access_key = value;
    if (key == "aws_secret_access_key") c.secret_key = value;
    if (key == "aws_session_token") c.session_token = value;
  }
  if (!seen) {
    if (named_profile) return base::Status::error(file + ": no profile [" + profile + "] (AWS_PROFILE)");
    return Credentials{};
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    return base::Status::error(file + ": profile [" + profile + "] lacks aws_access_key_id or aws_secret_access_key");
  }
  c.source = "credentials file " + file + ", profile '" + profile + "'";
  c.file = file;
  return c;
}

std::string resolve_region(const EnvLookup& env) {
  if (auto r = nonempty(env, "AWS_REGION")) return *r;
  if (auto r = nonempty(env, "AWS_DEFAULT_REGION")) return *r;
  return "us-east-1";
}

std::string resolve_endpoint(const std::string& configured, const std::string& region, const EnvLookup& env) {
  std::string e = configured;
  if (e.empty()) e = nonempty(env, "AWS_ENDPOINT_URL").value_or("https://s3." + region + ".amazonaws.com");
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

}  // namespace stoker::objstore
