// A job's `source:` — where its samples come from: an ImageFolder tree (`root`), a file list
// (`list`, formerly `file`, with an optional `root`) or tar shards (`shards`). Roots and lists
// must exist when the config is read, so a typo is refused with its line rather than found when
// the job starts (a client's job: when it is loaded, as its user); tar shards are opened (and
// their braces expanded) when the job indexes them.
//
// Object storage (issue #35): a shard pattern, a file list (and its root) may be an s3:// or
// https:// URL, an ImageFolder root an s3:// URL (objstore/fetcher.hpp); `endpoint` names an
// S3-compatible server for s3:// URLs, `cache: {path, bytes}` a local cache of what is fetched.
// A client-defined job is refused a URL unless it names a bucket of server.client_job_buckets
// (stokerd's credentials would read for whoever asked), and may not set endpoint or cache.
#include <algorithm>
#include <optional>
#include <string>
#include <system_error>

#include "config/sections.hpp"
#include "objstore/object_url.hpp"

namespace stoker::config {

namespace fs = std::filesystem;

void parse_source(const Reader& r, const Value& section, const fs::path& base_dir, SourceConfig& out,
                  bool mixture_entry) {
  const Fields src = mixture_entry
                         ? Fields(r, section, {"type", "root", "list", "file", "shards", "endpoint", "addressing", "cache", "weight", "name"})
                         : Fields(r, section, {"type", "root", "list", "file", "shards", "endpoint", "addressing", "cache"});
  if (auto* v = src.get("type")) out.type = r.choice(*v, {"imagefolder", "filelist", "tar"});
  // A client's working folder means nothing to stokerd (and its job's paths are not looked at
  // here, below): a relative path is refused by name.
  const auto absolute = [&](const Value& v, const fs::path& given) {
    if (r.client_job() && given.is_relative()) {
      r.fail(v, "a client-defined job's paths must be absolute, got '" + given.string() + "'");
    }
  };
  // A URL where a path is taken: checked here so a typo is refused with its line; a client's
  // job may not use one at all. Returns whether `text` is a URL.
  const auto url = [&](const Value& v, const std::string& text) {
    if (!objstore::looks_like_url(text)) return false;
    std::string why;
    // The URL is not quoted back: a refused one may hold user:password@.
    const std::optional<objstore::ObjectUrl> parsed = objstore::parse_object_url(text, why);
    if (!parsed) r.fail(v, why);
    if (r.client_job()) {
      // stokerd's credentials would read for whoever asked: only buckets its config names, and
      // never an https:// URL (stokerd would fetch any address a user gives it).
      const auto& allowed = r.client_buckets();
      const bool listed = parsed->scheme == objstore::Scheme::kS3 &&
                          std::find(allowed.begin(), allowed.end(), parsed->bucket) != allowed.end();
      if (!listed) {
        r.fail(v, parsed->scheme == objstore::Scheme::kS3
                      ? "a client-defined job may read only the buckets stokerd's server.client_job_buckets names; "
                        "bucket '" + parsed->bucket + "' is not one (stokerd's credentials would read it for whoever asked)"
                      : "a client-defined job cannot read from http(s):// URLs (stokerd would fetch any address for "
                        "whoever asked); put the source in stokerd's config");
      }
    }
    return true;
  };
  bool any_url = false;
  bool list_is_url = false;  // a file list in object storage
  if (out.type == "tar") {
    // shards: one pattern or a list of them; braces are expanded (and shards opened) when the
    // source is indexed, which names the key on failure through root_mark.
    const Value& shards = src.need("shards");
    auto add = [&](const Value& v) {
      const std::string text = r.string(v);
      if (text.empty()) r.fail(v, "must not be empty");
      if (url(v, text)) {
        any_url = true;
        out.shards.push_back(text);
        return;
      }
      const fs::path given = text;
      absolute(v, given);
      out.shards.push_back(resolve(given, base_dir).string());
    };
    if (shards.node.IsSequence()) {
      if (shards.node.size() == 0) r.fail(shards, "expected at least one shard pattern");
      for (std::size_t i = 0; i < shards.node.size(); ++i) add(r.element(shards, i));
    } else {
      add(shards);
    }
    out.root_mark = shards.at;
    out.root_key = "shards";
    for (const char* k : {"root", "list", "file"}) {
      if (const Value* v = src.get(k)) r.fail(*v, std::string("not a key of type: tar (shards name the files)"));
    }
  } else if (const Value* v = src.get("shards")) {
    r.fail(*v, "only for type: tar");
  }
  const Value* list_v = src.get("list");
  if (const Value* alias = src.get("file"); alias != nullptr && out.type != "tar") {
    // `file` is the older name of `list`, still accepted; both at once would say two things.
    if (list_v != nullptr) r.fail(*alias, "give the file list as 'list' only ('file' is its older name)");
    list_v = alias;
  }
  if (out.type == "filelist") {
    // list: the list; root: what relative paths in it are relative to (default: its folder).
    const Value& file = list_v != nullptr ? *list_v : src.need("list");
    if (url(file, r.string(file))) {
      // A list in object storage: kept as written; its entries are keys below `root` (a URL,
      // default the list's folder) or URLs, fetched when the job loads.
      any_url = true;
      list_is_url = true;
      out.file = r.string(file);
      out.root_mark = file.at;
      out.root_key = src.get("list") != nullptr ? "list" : "file";
    }
  }
  if (out.type == "filelist" && !list_is_url) {
    const Value& file = list_v != nullptr ? *list_v : src.need("list");
    const fs::path list = r.string(file);
    if (list.empty()) r.fail(file, "must not be empty");
    absolute(file, list);
    out.file = resolve(list, base_dir);
    out.root_mark = file.at;
    out.root_key = src.get("list") != nullptr ? "list" : "file";
    std::error_code fec;
    if (!r.client_job() && !fs::is_regular_file(out.file, fec)) {
      r.fail(file, out.file.string() + " is not an existing file");
    }
  } else if (list_v != nullptr && out.type != "tar" && out.type != "filelist") {
    r.fail(*list_v, "only for type: filelist");
  }
  if (out.type != "tar") {
    const Value* root_v = src.get("root");
    if (list_is_url && root_v == nullptr) {
      // The list's folder.
      std::string why;
      std::string folder = objstore::parse_object_url(out.file.string(), why)->join("");
      while (folder.back() == '/') folder.pop_back();
      out.root = folder;
    } else if (root_v != nullptr && objstore::looks_like_url(r.string(*root_v))) {
      // An ImageFolder in a bucket, or the root of a list in object storage: kept as written
      // without trailing '/' (a key prefix), never resolved or looked at here.
      const Value& root = *root_v;
      std::string text = r.string(root);
      (void)url(root, text);
      if (out.type == "imagefolder" && text.rfind("s3://", 0) != 0) {
        r.fail(root, "an ImageFolder root in object storage must be an s3:// URL (an https:// server has no listing)");
      }
      if (out.type == "filelist" && !list_is_url) {
        r.fail(root, "a local file list's root must be a local folder (put the list in object storage too, or give "
                     "its entries as URLs)");
      }
      while (text.back() == '/' && text.size() > 5) text.pop_back();
      out.root = text;
      if (out.type == "imagefolder") out.root_mark = root.at;
      any_url = true;
    } else if (list_is_url) {
      r.fail(*root_v, "the root of a file list in object storage must be a URL (s3:// or https://), or left out "
                      "(the list's folder)");
    } else {
      if (root_v == nullptr && out.type == "filelist") {
        out.root = out.file.parent_path();
      } else {
        const Value& root = root_v != nullptr ? *root_v : src.need("root");
        const fs::path given = r.string(root);
        if (given.empty()) r.fail(root, "must not be empty");
        absolute(root, given);
        out.root = resolve(given, base_dir);
        if (out.type != "filelist") out.root_mark = root.at;
      }
      const Value& root = root_v != nullptr ? *root_v : *list_v;
      // A client's job is looked at when it is loaded, with its user's permissions, where a
      // path missing and one that user may not reach get the same refusal: looked at here, as
      // stokerd, "not an existing directory" would tell them what folders they cannot list
      // hold (issue #34, D4).
      std::error_code ec;
      if (!r.client_job() && !fs::is_directory(out.root, ec)) {
        r.fail(root, out.root.string() + " is not an existing directory" +
                         (ec && ec != std::errc::no_such_file_or_directory ? " (" + ec.message() + ")" : ""));
      }
    }
  }
  if (const Value* v = src.get("endpoint")) {
    const std::string e = r.string(*v);
    if (!any_url) r.fail(*v, "only for a source in object storage (s3:// shards or root)");
    if (r.client_job()) {
      r.fail(*v, "a client-defined job reads its buckets through stokerd's own endpoint (AWS_ENDPOINT_URL); it "
                 "cannot name another server for stokerd's credentials");
    }
    if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0) {
      r.fail(*v, "expected an http:// or https:// URL (scheme, host and port of an S3-compatible server), got '" + e + "'");
    }
    if (e.find('@') != std::string::npos) r.fail(*v, "credentials in a URL are refused (give them through AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)");
    out.endpoint = e;
  }
  if (const Value* v = src.get("addressing")) {
    // How the bucket is named in requests: path-style or virtual-host (objstore::Addressing).
    const std::string a = r.string(*v);
    if (!any_url) r.fail(*v, "only for a source in object storage (s3:// shards or root)");
    if (a != "path" && a != "virtual") {
      r.fail(*v, "expected path (ENDPOINT/BUCKET/KEY: MinIO, Ceph) or virtual (BUCKET.HOST/KEY: AWS), got '" + a + "'");
    }
    out.addressing = a;
  }
  if (const Value* v = src.get("cache")) {
    // cache: {path: DIR, bytes: SIZE}; DIR's owner and mode are checked when the job loads.
    if (!any_url) r.fail(*v, "only for a source in object storage (s3:// or https:// shards, or an s3:// root)");
    if (r.client_job()) r.fail(*v, "a client-defined job cannot choose where stokerd writes (a cache is for stokerd's config)");
    const Fields c(r, *v, {"path", "bytes"});
    const Value& p = c.need("path");
    const fs::path dir = r.string(p);
    if (dir.empty()) r.fail(p, "must name a folder");
    out.cache_path = resolve(dir, base_dir);
    out.cache_bytes = r.bytes(c.need("bytes"), std::uint64_t{1} << 20, std::uint64_t{1} << 50);
  }
}

}  // namespace stoker::config
