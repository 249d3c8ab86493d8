// An independent check of an AWS Signature Version 4 request signature, written from AWS's
// specification ("Create a signed AWS API request": canonical request, string to sign, the
// derived signing key) the way S3 checks one: the path and query are decoded and encoded again
// by the specification's rules, so a request whose sent form differs from the canonical one S3
// computes fails here as it would there. s3rver, the tests' S3 server, does not verify
// signatures; this is what stands in for AWS, MinIO or Ceph doing so (objstore_sigv4_test).
#pragma once

#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace stoker::test {

inline std::string hex(const unsigned char* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += d[p[i] >> 4];
    out += d[p[i] & 15];
  }
  return out;
}

inline std::string sha256_hex(const std::string& s) {
  unsigned char h[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), h);
  return hex(h, sizeof h);
}

inline std::string hmac(const std::string& key, const std::string& msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &n);
  return std::string(reinterpret_cast<char*>(out), n);
}

inline std::string percent_decode(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The specification's encoding: every byte but A-Z a-z 0-9 - . _ ~ as %XY (upper-case hex);
// '/' kept in a path.
inline std::string spec_encode(const std::string& s, bool keep_slash) {
  static const char* d = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += d[c >> 4];
      out += d[c & 15];
    }
  }
  return out;
}

inline std::string trim(std::string v) {
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
  std::size_t a = 0;
  while (a < v.size() && (v[a] == ' ' || v[a] == '\t')) ++a;
  return v.substr(a);
}

// "" when `head` (a request line and headers, as HttpStub hands them over) carries a valid
// SigV4 signature made with `secret`; otherwise what is wrong. `canonical` (when given) gets
// the canonical request computed, for the failure's message.
inline std::string sigv4_problem(const std::string& head, const std::string& secret, std::string* canonical = nullptr) {
  const std::size_t line_end = head.find("\r\n");
  const std::string request_line = head.substr(0, line_end);
  const std::size_t sp1 = request_line.find(' '), sp2 = request_line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) return "malformed request line";
  const std::string method = request_line.substr(0, sp1);
  const std::string target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::map<std::string, std::string> headers;  // lower-case name -> trimmed value
  for (std::size_t at = line_end + 2; at < head.size();) {
    const std::size_t e = head.find("\r\n", at);
    if (e == std::string::npos || e == at) break;
    const std::string l = head.substr(at, e - at);
    const std::size_t colon = l.find(':');
    if (colon != std::string::npos) {
      std::string name = l.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      headers[name] = trim(l.substr(colon + 1));
    }
    at = e + 2;
  }
  const auto auth_it = headers.find("authorization");
  if (auth_it == headers.end()) return "no Authorization header";
  const std::string& auth = auth_it->second;
  if (auth.rfind("AWS4-HMAC-SHA256 ", 0) != 0) return "not AWS4-HMAC-SHA256: " + auth.substr(0, 20);
  auto field = [&](const std::string& name) -> std::string {
    const std::size_t p = auth.find(name + "=");
    if (p == std::string::npos) return {};
    const std::size_t v = p + name.size() + 1;
    return trim(auth.substr(v, auth.find(',', v) - v));
  };
  const std::string credential = field("Credential"), signed_headers = field("SignedHeaders"),
                    signature = field("Signature");
  // Credential = KEY/DATE/REGION/SERVICE/aws4_request
  std::vector<std::string> scope_parts;
  for (std::size_t a = 0, b; a <= credential.size(); a = b + 1) {
    b = credential.find('/', a);
    if (b == std::string::npos) b = credential.size();
    scope_parts.push_back(credential.substr(a, b - a));
  }
  if (scope_parts.size() != 5 || scope_parts[4] != "aws4_request") return "malformed Credential: " + credential;
  const std::string amz_date = headers.count("x-amz-date") ? headers["x-amz-date"] : "";
  if (amz_date.size() != 16 || amz_date.substr(0, 8) != scope_parts[1]) return "x-amz-date does not match the scope";
  const std::string payload = headers.count("x-amz-content-sha256") ? headers["x-amz-content-sha256"] : "";
  if (payload.empty()) return "no x-amz-content-sha256 (S3 requires it)";
  for (const char* must : {"host", "x-amz-date", "x-amz-content-sha256"}) {
    if ((";" + signed_headers + ";").find(std::string(";") + must + ";") == std::string::npos) {
      return std::string("SignedHeaders lacks ") + must + ": " + signed_headers;
    }
  }
  // Canonical URI and query, decoded and encoded again by the specification's rules.
  const std::size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string canonical_uri = spec_encode(percent_decode(path), /*keep_slash=*/true);
  std::vector<std::pair<std::string, std::string>> params;
  if (q != std::string::npos) {
    const std::string query = target.substr(q + 1);
    for (std::size_t a = 0, b; a <= query.size(); a = b + 1) {
      b = query.find('&', a);
      if (b == std::string::npos) b = query.size();
      const std::string kv = query.substr(a, b - a);
      if (kv.empty()) continue;
      const std::size_t eq = kv.find('=');
      const std::string k = percent_decode(kv.substr(0, eq));
      const std::string v = eq == std::string::npos ? "" : percent_decode(kv.substr(eq + 1));
      params.emplace_back(spec_encode(k, false), spec_encode(v, false));
    }
  }
  std::sort(params.begin(), params.end());
  std::string canonical_query;
  for (const auto& [k, v] : params) canonical_query += (canonical_query.empty() ? "" : "&") + k + "=" + v;
  std::string canonical_headers;
  for (std::size_t a = 0, b; a <= signed_headers.size(); a = b + 1) {
    b = signed_headers.find(';', a);
    if (b == std::string::npos) b = signed_headers.size();
    const std::string name = signed_headers.substr(a, b - a);
    if (!headers.count(name)) return "signed header " + name + " is not in the request";
    canonical_headers += name + ":" + headers[name] + "\n";
  }
  const std::string creq = method + "\n" + canonical_uri + "\n" + canonical_query + "\n" + canonical_headers + "\n" +
                           signed_headers + "\n" + payload;
  if (canonical != nullptr) *canonical = creq;
  const std::string scope = scope_parts[1] + "/" + scope_parts[2] + "/" + scope_parts[3] + "/aws4_request";
  const std::string to_sign = "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + sha256_hex(creq);
  const std::string key =
      hmac(hmac(hmac(hmac("AWS4" + secret, scope_parts[1]), scope_parts[2]), scope_parts[3]), "aws4_request");
  const std::string mac = hmac(key, to_sign);
  const std::string expected = hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  if (expected != signature) return "signature " + signature + " is not the expected " + expected;
  return {};
}

}  // namespace stoker::test
