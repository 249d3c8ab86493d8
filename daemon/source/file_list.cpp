#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <unistd.h>

#include "objstore/object_url.hpp"
#include "source/dataset.hpp"

namespace stoker::source {
namespace {

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// A relative path that lexically_normal would leave as it is: no empty, "." or ".." part.
// (Checked first because normalizing through std::filesystem::path costs ~1 us a line.)
bool plain_relative(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.back() == '/') return false;
  std::size_t at = 0;
  while (at <= p.size()) {
    const std::size_t end = std::min(p.find('/', at), p.size());
    const std::string_view part = p.substr(at, end - at);
    if (part.empty() || part == "." || part == "..") return false;
    at = end + 1;
  }
  return true;
}

}  // namespace

namespace {

// The list's bytes, from a descriptor checked readable by `as` (read_access.hpp).
std::string read_list_as(const std::filesystem::path& list, const ReadAs& as) {
  const base::Result<int> opened = open_checked(list.string(), as, /*directory=*/false);
  if (!opened) throw SourceError(list.string() + ": cannot read the file list: " + opened.status().message());
  const int fd = *opened;
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      throw SourceError(list.string() + ": cannot read the file list");
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

// The list's text as a dataset. `list_name` names it in errors ("FILE:LINE: ..."). `url_root`
// (a list in object storage, issue #35): `root` is a URL; an entry is a URL, or a plain
// relative key below root (no '.', '..' or empty part: keys are not normalized as paths are).
Dataset parse_file_list(const std::string& text, const std::string& list_name, const std::filesystem::path& root,
                        bool url_root);

Dataset read_file_list_unsettled(const std::filesystem::path& list, const std::filesystem::path& root,
                                 const ReadAs* as) {
  // The whole list at once (a 1.28M-line list is ~50 MB), lines as views into it.
  std::string text;
  if (as != nullptr) {
    text = read_list_as(list, *as);
  } else {
    std::ifstream in(list, std::ios::binary);
    if (!in) throw SourceError(list.string() + ": cannot read the file list");
    in.seekg(0, std::ios::end);
    const auto size = in.tellg();
    in.seekg(0);
    if (size > 0) text.resize(static_cast<std::size_t>(size));
    if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) {
      throw SourceError(list.string() + ": cannot read the file list");
    }
  }
  return parse_file_list(text, list.string(), root, /*url_root=*/false);
}

Dataset parse_file_list(const std::string& text, const std::string& list_name, const std::filesystem::path& root,
                        bool url_root) {
  struct Line {
    std::string_view path, label;
    std::size_t number;
  };
  std::vector<Line> lines;
  std::size_t number = 0, labelled = 0;
  auto where = [&](std::size_t n) { return list_name + ":" + std::to_string(n) + ": "; };
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = std::min(text.find('\n', at), text.size());
    const std::string_view raw(text.data() + at, nl - at);
    at = nl + 1;
    ++number;
    const std::string_view t = trim(raw);
    if (t.empty() || t[0] == '#') continue;
    const auto sep = t.find_first_of(",\t");
    Line l{trim(t.substr(0, sep)), sep == std::string_view::npos ? std::string_view() : trim(t.substr(sep + 1)), number};
    if (l.path.empty()) throw SourceError(where(number) + "empty path");
    if (url_root && !plain_relative(l.path) && !objstore::looks_like_url(l.path)) {
      throw SourceError(where(number) + "an entry of a list in object storage is a key relative to the root (no '.', "
                                        "'..' or empty part) or a URL");
    }
    if (sep != std::string_view::npos) {
      if (l.label.empty()) throw SourceError(where(number) + "empty label after the separator");
      if (l.label.find_first_of(",\t") != std::string_view::npos) {
        throw SourceError(where(number) + "expected 'path' or 'path,label', found more fields");
      }
      ++labelled;
    }
    if (labelled != 0 && labelled != lines.size() + 1) {
      throw SourceError(where(number) + "labels must be given on every line or on none (this line " +
                        (sep == std::string_view::npos ? "has none" : "has one") + ", earlier ones do not agree)");
    }
    lines.push_back(l);
  }
  if (lines.empty()) throw SourceError(list_name + ": the file list holds no samples");

  Dataset d;
  d.samples.reserve(lines.size());
  // Names are kept relative to the root when every path is below it, else absolute.
  std::string root_s = url_root ? root.string() : root.lexically_normal().string();
  while (root_s.size() > 1 && root_s.back() == '/') root_s.pop_back();
  auto normal = [&](std::string_view p) {
    if (url_root) return objstore::looks_like_url(p) ? std::string(p) : root_s + "/" + std::string(p);
    const std::filesystem::path path(p);
    return (path.is_absolute() ? path : root / path).lexically_normal().string();
  };
  bool below_root = !root_s.empty() && root_s != "/";
  for (const auto& l : lines) {
    if (!below_root) break;
    if (plain_relative(l.path)) continue;
    const std::string full = normal(l.path);
    below_root = full.size() > root_s.size() + 1 && full.compare(0, root_s.size(), root_s) == 0 &&
                 full[root_s.size()] == '/';
  }
  d.root = below_root ? root_s : std::string();
  auto add = [&](const Line& l, std::int64_t label) {
    if (below_root && plain_relative(l.path)) {
      d.add(l.path, label);
    } else {
      const std::string full = normal(l.path);
      d.add(below_root ? std::string_view(full).substr(root_s.size() + 1) : std::string_view(full), label);
    }
  };

  const bool given = labelled != 0;
  bool numeric = given;
  std::int64_t max_label = -1;
  for (const auto& l : lines) {
    if (!given) break;
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(l.label.data(), l.label.data() + l.label.size(), v);
    if (ec != std::errc() || end != l.label.data() + l.label.size() || v < 0) {
      numeric = false;
      break;
    }
    max_label = std::max(max_label, v);
  }
  if (given && numeric) {
    if (max_label > 1000000) throw SourceError(list_name + ": labels above 1,000,000 (use class names instead)");
    for (std::int64_t c = 0; c <= max_label; ++c) d.classes.push_back(std::to_string(c));
    for (const auto& l : lines) {
      std::int64_t v = 0;
      std::from_chars(l.label.data(), l.label.data() + l.label.size(), v);
      add(l, v);
    }
    return d;
  }
  // Class names: given, or the parent folder of each path.
  std::map<std::string, std::int64_t, std::less<>> index;
  auto class_of = [&](const Line& l) -> std::string_view {
    if (given) return l.label;
    const std::string_view p = l.path;
    const std::size_t slash = p.rfind('/');
    if (slash == std::string_view::npos || slash == 0) return {};
    const std::string_view parent = p.substr(0, slash);
    return parent.substr(parent.rfind('/') == std::string_view::npos ? 0 : parent.rfind('/') + 1);
  };
  for (const auto& l : lines) {
    std::string_view name = class_of(l);
    if (name.empty() || name == "." || name == "..") {
      // What std::filesystem says the parent folder's name is, for the odd cases.
      const std::string fallback = given ? std::string() : std::filesystem::path(l.path).parent_path().filename().string();
      if (fallback.empty()) throw SourceError(where(l.number) + "no label and no parent folder to take the class from");
      index.emplace(fallback, 0);
      continue;
    }
    index.emplace(std::string(name), 0);
  }
  std::int64_t k = 0;
  for (auto& [name, i] : index) {
    i = k++;
    d.classes.push_back(name);
  }
  for (const auto& l : lines) {
    std::string_view name = class_of(l);
    std::string fallback;
    if (name.empty() || name == "." || name == "..") {
      fallback = std::filesystem::path(l.path).parent_path().filename().string();
      name = fallback;
    }
    add(l, index.find(name)->second);
  }
  return d;
}

}  // namespace

Dataset read_object_file_list(const std::string& list, const std::string& root,
                              std::shared_ptr<objstore::Fetcher> fetcher) {
  std::string why;
  const std::optional<objstore::ObjectUrl> url = objstore::parse_object_url(list, why);
  if (!url) throw SourceError(list + ": " + why);
  std::string root_url = root;
  if (root_url.empty()) {
    root_url = url->join("");  // the list's folder
    while (!root_url.empty() && root_url.back() == '/') root_url.pop_back();
  }
  objstore::FetchResult got = fetcher->get(*url, /*use_cache=*/false);
  if (!got.ok()) throw SourceError(got.message);
  const std::string text(got.body.begin(), got.body.end());
  Dataset d = parse_file_list(text, list, root_url, /*url_root=*/true);
  d.object_sources.push_back(ObjectSource{list, std::move(fetcher)});
  d.root_source = 0;
  settle(d);
  return d;
}

Dataset read_file_list(const std::filesystem::path& list, const std::filesystem::path& root, const ReadAs* as) {
  Dataset d = read_file_list_unsettled(list, root, as);
  settle(d);
  return d;
}

}  // namespace stoker::source
