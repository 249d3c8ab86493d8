// Object URLs, where a source takes a path: `s3://BUCKET/KEY` (signed, sent to an S3-compatible
// endpoint with path-style addressing) and `https://HOST/PATH` (any server answering GET with
// Range, unsigned). `http://` is accepted too, for loopback test servers and plain-HTTP
// gateways inside a cluster; it is never used for signed s3:// requests unless the endpoint
// itself says http://.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace stoker::objstore {

enum class Scheme : unsigned char { kS3, kHttps, kHttp };

struct ObjectUrl {
  Scheme scheme = Scheme::kS3;
  std::string bucket;  // s3: the bucket; http(s): "scheme://host[:port]"
  std::string key;     // s3: the key (may be empty: the bucket); http(s): the path without its leading '/'
  // The URL as a person wrote it; names the object in logs and errors (holds no secret: a
  // URL with user:password@ is refused by parse_object_url).
  std::string text() const;
  // "s3://bucket/key" with `rel` resolved against this URL's folder (the part up to the last
  // '/'); an absolute URL in `rel` is returned as it is.
  std::string join(std::string_view rel) const;
};

// Whether `s` is meant as a URL (starts with s3://, https:// or http://), so a config refuses a
// malformed URL by name instead of looking for a local file called "s3:".
bool looks_like_url(std::string_view s);

// Parses a URL; nullopt with `why` set for a malformed one (no bucket, user info, a fragment,
// a bad character). `why` never repeats user info.
std::optional<ObjectUrl> parse_object_url(std::string_view s, std::string& why);

// RFC 3986 percent-encoding of everything but unreserved characters (and '/' when
// keep_slash): the form SigV4's canonical request expects the path and query in.
std::string uri_encode(std::string_view s, bool keep_slash);

}  // namespace stoker::objstore
