#include "objstore/object_url.hpp"

#include <cctype>

namespace stoker::objstore {

namespace {

constexpr std::string_view kS3 = "s3://", kHttps = "https://", kHttp = "http://";

bool starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

bool looks_like_url(std::string_view s) { return starts(s, kS3) || starts(s, kHttps) || starts(s, kHttp); }

std::string ObjectUrl::text() const {
  if (scheme == Scheme::kS3) return std::string(kS3) + bucket + (key.empty() ? "" : "/" + key);
  return bucket + "/" + key;
}

std::string ObjectUrl::join(std::string_view rel) const {
  if (looks_like_url(rel)) return std::string(rel);
  const std::string whole = text();
  const std::size_t slash = whole.rfind('/');
  // s3://bucket (no key) has its last '/' inside "s3://": the folder is the bucket itself.
  const std::size_t head = scheme == Scheme::kS3 ? kS3.size() : bucket.size();
  const std::string folder = slash != std::string::npos && slash >= head ? whole.substr(0, slash + 1) : whole + "/";
  while (starts(rel, "./")) rel.remove_prefix(2);
  return folder + std::string(rel);
}

std::optional<ObjectUrl> parse_object_url(std::string_view s, std::string& why) {
  ObjectUrl u;
  std::string_view rest;
  if (starts(s, kS3)) {
    u.scheme = Scheme::kS3;
    rest = s.substr(kS3.size());
  } else if (starts(s, kHttps)) {
    u.scheme = Scheme::kHttps;
    rest = s.substr(kHttps.size());
  } else if (starts(s, kHttp)) {
    u.scheme = Scheme::kHttp;
    rest = s.substr(kHttp.size());
  } else {
    why = "not an s3://, https:// or http:// URL";
    return std::nullopt;
  }
  // An s3:// key is opaque (it is percent-encoded when sent): a space, '#' or '?' is part of
  // the key, as ListObjectsV2 gives keys of any ImageFolder ("cat photos/IMG 1.jpg"). An
  // http(s):// URL is sent as written, so it must be one already.
  const bool web = u.scheme != Scheme::kS3;
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || (web && c == ' ')) {
      why = web ? "a URL must not hold spaces or control characters" : "an s3:// URL must not hold control characters";
      return std::nullopt;
    }
  }
  if (web && s.find('#') != std::string_view::npos) {
    why = "a URL must not hold a fragment ('#')";
    return std::nullopt;
  }
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  // user:password@host would put a secret in every log line that names the object.
  if (authority.find('@') != std::string_view::npos) {
    why = "credentials in a URL are refused (give them through AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
          "or a credentials file)";
    return std::nullopt;
  }
  if (authority.empty()) {
    why = u.scheme == Scheme::kS3 ? "no bucket after s3://" : "no host in the URL";
    return std::nullopt;
  }
  if (u.scheme == Scheme::kS3) {
    for (const char c : authority) {
      if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
            c == '.')) {
        why = "bucket '" + std::string(authority) + "' holds a character a bucket name cannot (a-z 0-9 . -)";
        return std::nullopt;
      }
    }
    u.bucket = std::string(authority);
  } else {
    u.bucket = std::string(s.substr(0, s.size() - rest.size())) + std::string(authority);
    if (s.find('?') != std::string_view::npos) {
      why = "a URL source must not hold a query ('?')";
      return std::nullopt;
    }
  }
  u.key = slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1));
  return u;
}

std::string uri_encode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace stoker::objstore
