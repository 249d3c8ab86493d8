#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <string>

#include "source/dataset.hpp"

namespace stoker::source {
namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

Dataset read_file_list(const std::filesystem::path& list, const std::filesystem::path& root) {
  std::ifstream in(list);
  if (!in) throw SourceError(list.string() + ": cannot read the file list");
  struct Line {
    std::string path, label;
    std::size_t number;
  };
  std::vector<Line> lines;
  std::string text;
  std::size_t number = 0, labelled = 0;
  auto where = [&](std::size_t n) { return list.string() + ":" + std::to_string(n) + ": "; };
  while (std::getline(in, text)) {
    ++number;
    const std::string t = trim(text);
    if (t.empty() || t[0] == '#') continue;
    const auto sep = t.find_first_of(",\t");
    Line l{trim(t.substr(0, sep)), sep == std::string::npos ? std::string() : trim(t.substr(sep + 1)), number};
    if (l.path.empty()) throw SourceError(where(number) + "empty path");
    if (sep != std::string::npos) {
      if (l.label.empty()) throw SourceError(where(number) + "empty label after the separator");
      if (l.label.find_first_of(",\t") != std::string::npos) {
        throw SourceError(where(number) + "expected 'path' or 'path,label', found more fields");
      }
      ++labelled;
    }
    if (labelled != 0 && labelled != lines.size() + 1) {
      throw SourceError(where(number) + "labels must be given on every line or on none (this line " +
                        (sep == std::string::npos ? "has none" : "has one") + ", earlier ones do not agree)");
    }
    lines.push_back(std::move(l));
  }
  if (lines.empty()) throw SourceError(list.string() + ": the file list holds no samples");

  Dataset d;
  d.samples.reserve(lines.size());
  auto full = [&](const std::string& p) {
    const std::filesystem::path path(p);
    return (path.is_absolute() ? path : root / path).lexically_normal().string();
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
    if (max_label > 1000000) throw SourceError(list.string() + ": labels above 1,000,000 (use class names instead)");
    for (std::int64_t c = 0; c <= max_label; ++c) d.classes.push_back(std::to_string(c));
    for (const auto& l : lines) d.samples.push_back({full(l.path), std::stoll(l.label)});
    return d;
  }
  // Class names: given, or the parent folder of each path.
  std::map<std::string, std::int64_t> index;
  std::vector<std::string> names;
  names.reserve(lines.size());
  for (const auto& l : lines) {
    std::string name = given ? l.label : std::filesystem::path(l.path).parent_path().filename().string();
    if (name.empty()) throw SourceError(where(l.number) + "no label and no parent folder to take the class from");
    index.emplace(name, 0);
    names.push_back(std::move(name));
  }
  std::int64_t k = 0;
  for (auto& [name, i] : index) {
    i = k++;
    d.classes.push_back(name);
  }
  for (std::size_t i = 0; i < lines.size(); ++i) d.samples.push_back({full(lines[i].path), index[names[i]]});
  return d;
}

}  // namespace stoker::source
