// AWS-style credentials, found in the order the AWS tools use:
//   1. the environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//   2. the shared credentials file: AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials,
//      its profile AWS_PROFILE (else "default");
//   3. none: requests go unsigned (a public bucket, or an https:// server).
// The region is AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1; the endpoint a source's
// `endpoint:`, else AWS_ENDPOINT_URL, else AWS's regional one.
//
// Invariant: the secret key and the session token appear in no string this layer builds for
// a person: not in `source`, not in an error, not in a log line. describe() is what names the
// credentials anywhere.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "base/status.hpp"

namespace stoker::objstore {

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  // Where they came from, for errors: "environment (AWS_ACCESS_KEY_ID)",
  // "credentials file /root/.aws/credentials, profile 'default'", or "none (unsigned requests)".
  std::string source = "none (unsigned requests)";
  // The credentials file they were read from ("" for the environment or none): the fetcher
  // re-reads them when it changes.
  std::string file;
  bool empty() const { return access_key.empty(); }
  // Where they came from and nothing of their values: all any message says about them.
  std::string describe() const;
};

// Reads an environment variable; nullopt when unset. Tests pass their own.
using EnvLookup = std::function<std::optional<std::string>(const char*)>;
EnvLookup process_env();

// The chain above. An error (naming the variable, or the file and line, never a value) for a
// half-given pair (a key id without its secret), an unreadable file that was named
// explicitly, or a named profile the file lacks.
base::Result<Credentials> resolve_credentials(const EnvLookup& env);

std::string resolve_region(const EnvLookup& env);
// `configured`: the source's `endpoint:` ("" when not given). No trailing '/'.
std::string resolve_endpoint(const std::string& configured, const std::string& region, const EnvLookup& env);

}  // namespace stoker::objstore
