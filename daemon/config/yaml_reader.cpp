// The YAML reader every section of the config shares (yaml_reader.hpp says what it holds):
// positions, key paths, "did you mean", typed getters and the unknown-key check of Fields.
#include "config/yaml_reader.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <unistd.h>

namespace stoker::config {
namespace {

std::string index(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// Edit distance counting a swap of neighbours as one edit (the commonest typo), for
// "did you mean" on misspelt keys and values.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

Mark mark_of(const YAML::Node& n) {
  if (!n.IsDefined()) return Mark{0, 0};
  const YAML::Mark m = n.Mark();
  if (m.is_null()) return Mark{0, 0};
  return Mark{m.line + 1, m.column + 1};
}

Mark mark_of(const YAML::Mark& m) {
  if (m.is_null()) return Mark{0, 0};
  return Mark{m.line + 1, m.column + 1};
}

Mark parse_error_mark(std::string_view text, const YAML::Exception& e) {
  const bool map_flow = e.msg == YAML::ErrorMsg::END_OF_MAP_FLOW;
  if ((!map_flow && e.msg != YAML::ErrorMsg::END_OF_SEQ_FLOW) || e.mark.is_null()) return mark_of(e.mark);
  struct Open {
    char bracket;
    Mark at;
  };
  std::vector<Open> open;
  int line = 1, column = 1;
  char quote = 0;  // inside '...' or "..."
  const std::size_t end = std::min(text.size(), static_cast<std::size_t>(std::max(e.mark.pos, 0)));
  for (std::size_t i = 0; i < end; ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == '\\' && quote == '"') {
        ++i, ++column;
      } else if (c == quote) {
        quote = 0;
      }
    } else if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
      while (i + 1 < end && text[i + 1] != '\n') ++i;  // a comment, to the end of its line
    } else if ((c == '\'' || c == '"') && (i == 0 || std::string_view(" \t\n[{,:").find(text[i - 1]) != std::string_view::npos)) {
      quote = c;
    } else if (c == '[' || c == '{') {
      open.push_back({c, Mark{line, column}});
    } else if ((c == ']' || c == '}') && !open.empty() && open.back().bracket == (c == ']' ? '[' : '{')) {
      open.pop_back();
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  const char wanted = map_flow ? '{' : '[';
  for (auto it = open.rbegin(); it != open.rend(); ++it) {
    if (it->bracket == wanted) return it->at;
  }
  return mark_of(e.mark);
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string quoted_list(std::initializer_list<std::string_view> words) {
  return quoted_list(std::span<const std::string_view>(words.begin(), words.size()));
}

std::string quoted_list(std::span<const std::string_view> words) {
  std::string list;
  for (auto w : words) list += (list.empty() ? "" : ", ") + std::string(w);
  return list;
}

// Close enough: 1 edit for words of up to 3 letters, 2 up to 8, 3 beyond.
std::string closest(std::string_view word, std::initializer_list<std::string_view> options) {
  return closest(word, std::span<const std::string_view>(options.begin(), options.size()));
}

std::string closest(std::string_view word, std::span<const std::string_view> options) {
  const std::size_t limit = word.size() <= 3 ? 1 : word.size() <= 8 ? 2 : 3;
  std::string best;
  std::size_t best_d = limit + 1;
  for (auto o : options) {
    const std::size_t d = edit_distance(word, o);
    if (d < best_d) best_d = d, best = std::string(o);
  }
  return best;
}

std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

std::filesystem::path resolve(const std::filesystem::path& p, const std::filesystem::path& base_dir) {
  std::filesystem::path r = (p.is_relative() ? base_dir / p : p).lexically_normal();
  if (!r.has_filename() && r.has_relative_path()) r = r.parent_path();
  return r;
}

std::string Reader::text(const Value& v) const {
  const std::string raw = v.node.IsScalar() ? v.node.Scalar() : std::string();
  std::string out;
  for (std::size_t i = 0; i < raw.size();) {
    if (raw.compare(i, 2, "${") != 0) {
      out += raw[i++];
      continue;
    }
    if (client_job_) {
      // stokerd's environment is not the client's, and may hold what the client must not
      // see (a token, a path): the client expands its own variables before it sends.
      fail(v, "'" + raw + "': a client-defined job cannot use ${...} (it would read stokerd's environment, "
              "not yours); expand the variable in the client");
    }
    const std::size_t end = raw.find('}', i);
    if (end == std::string::npos) fail(v, "unterminated ${ in '" + raw + "'");
    std::string name = raw.substr(i + 2, end - i - 2), fallback;
    const std::size_t dash = name.find(":-");
    const bool has_default = dash != std::string::npos;
    if (has_default) fallback = name.substr(dash + 2), name = name.substr(0, dash);
    const bool name_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    });
    if (!name_ok) fail(v, "'${" + raw.substr(i + 2, end - i - 2) + "}' is not ${NAME} or ${NAME:-default}");
    const char* env = std::getenv(name.c_str());
    if (env == nullptr || (*env == '\0' && has_default)) {
      if (!has_default) {
        fail(v, "environment variable " + name + " is not set (the value is '" + raw +
                    "'; set it, or write ${" + name + ":-default})");
      }
      out += fallback;
    } else {
      out += env;
    }
    i = end + 1;
  }
  return out;
}

namespace {
std::atomic<std::uint64_t> pinned_job_memory_budget{0};
}  // namespace

std::uint64_t job_memory_budget() {
  if (const std::uint64_t pinned = pinned_job_memory_budget.load(); pinned != 0) return pinned;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{1} << 30;  // unknown: 1 GiB, not everything
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 4;
}

void set_job_memory_budget_for_testing(std::uint64_t bytes) { pinned_job_memory_budget.store(bytes); }

std::string budget_words() {
  return std::to_string(job_memory_budget() >> 20) +
         " MiB, a quarter of this machine's memory: what one job may take when it starts";
}

std::uint64_t Reader::integer(const Value& v, std::uint64_t lo, std::uint64_t hi) const {
  // Decimal only: yaml-cpp's own conversion reads "010" as octal 8, which no user means.
  const std::string s = text(v);
  std::string_view digits = s;
  const bool negative = !digits.empty() && digits.front() == '-';
  if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
  std::uint64_t x = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), x);
  const bool all_digits = !digits.empty() && end == digits.data() + digits.size() &&
                          std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!v.node.IsScalar() || !all_digits) fail(v, "expected an integer, got " + describe(v.node));
  const std::string range = "must be between " + std::to_string(lo) + " and " + std::to_string(hi);
  if (ec == std::errc::result_out_of_range) fail(v, range + ", got " + s);
  if ((negative && x != 0) || x < lo || x > hi) fail(v, range + ", got " + s);
  return x;
}

std::uint64_t Reader::bytes(const Value& v, std::uint64_t lo, std::uint64_t hi) const {
  const std::string s = string(v);
  std::size_t n = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
  std::string unit = s.substr(n);
  unit.erase(0, unit.find_first_not_of(' '));
  static constexpr std::pair<std::string_view, int> kUnits[] = {{"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
  int shift = -1;
  for (const auto& [name, sh] : kUnits) if (unit == name) shift = sh;
  std::uint64_t x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + n, x);
  if (n == 0 || shift < 0 || ec != std::errc()) {
    fail(v, "expected a size in bytes: an integer, or one with KiB, MiB, GiB or TiB (e.g. 8GiB), got '" + s + "'");
  }
  const bool overflow = shift > 0 && x > (UINT64_MAX >> shift);
  const std::uint64_t total = overflow ? UINT64_MAX : x << shift;
  if (total < lo || total > hi) {
    fail(v, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + " bytes, got " + s);
  }
  return total;
}

double Reader::number(const Value& v) const {
  const std::string s = text(v);
  std::string_view t = s;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  double x = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
  if (!v.node.IsScalar() || t.empty() || ec != std::errc() || end != t.data() + t.size() ||
      !std::isfinite(x)) {
    fail(v, "expected a number, got " + describe(v.node));
  }
  return x;
}

bool Reader::boolean(const Value& v) const {
  bool b = false;
  if (!v.node.IsScalar() || !YAML::convert<bool>::decode(YAML::Node(text(v)), b)) {
    fail(v, "expected true or false, got " + describe(v.node));
  }
  return b;
}

std::string Reader::string(const Value& v) const {
  if (!v.node.IsScalar()) fail(v, "expected a string, got " + describe(v.node));
  return text(v);
}

std::string Reader::choice(const Value& v, std::initializer_list<std::string_view> options) const {
  return choice(v, std::span<const std::string_view>(options.begin(), options.size()));
}

std::string Reader::choice(const Value& v, std::span<const std::string_view> options) const {
  const std::string s = string(v);
  for (auto o : options) {
    if (s == o) return s;
  }
  const std::string near = closest(s, options);
  fail(v, "must be one of " + quoted_list(options) + ", got '" + s + "'" +
              (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

Value Reader::element(const Value& seq, std::size_t i) const {
  const YAML::Node n = seq.node[i];
  const Mark m = mark_of(n);
  return Value{n, index(seq.path, i), n.IsNull() || m.line == 0 ? seq.at : m};
}

std::vector<double> Reader::numbers(const Value& v, std::size_t count) const {
  if (!v.node.IsSequence() || v.node.size() != count) {
    fail(v, "expected a list of " + std::to_string(count) + " numbers, got " + describe(v.node) +
                (v.node.IsSequence() ? " of " + std::to_string(v.node.size()) : ""));
  }
  std::vector<double> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(number(element(v, i)));
  return out;
}

std::pair<std::uint32_t, std::uint32_t> Reader::size(const Value& v) const {
  if (v.node.IsSequence()) {
    if (v.node.size() != 2) fail(v, "expected an integer or a list [height, width]");
    return {static_cast<std::uint32_t>(integer(element(v, 0), 1, kMaxSide)),
            static_cast<std::uint32_t>(integer(element(v, 1), 1, kMaxSide))};
  }
  const auto s = static_cast<std::uint32_t>(integer(v, 1, kMaxSide));
  return {s, s};
}

Fields::Fields(const Reader& r, const Value& map, std::span<const std::string_view> allowed)
    : r_(r), path_(map.path), at_(map.at) {
  if (!map.node.IsMap()) r.fail(map, "expected a mapping of keys, got " + describe(map.node));
  for (const auto& kv : map.node) {
    const Mark key_at = mark_of(kv.first);
    if (!kv.first.IsScalar()) r.fail(key_at, path_, "keys must be plain words, got " + describe(kv.first));
    const std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      const std::string near = closest(key, allowed);
      r.fail(key_at, join(path_, key),
             near.empty() ? "unknown key (allowed: " + quoted_list(allowed) + ")"
                          : "unknown key; did you mean '" + near + "'?");
    }
    const Mark m = mark_of(kv.second);
    Value v{kv.second, join(path_, key), kv.second.IsNull() || m.line == 0 ? key_at : m};
    if (!values_.emplace(key, std::move(v)).second) r.fail(key_at, join(path_, key), "duplicate key");
  }
}

const Value* Fields::get(std::string_view key) const {
  const auto it = values_.find(std::string(key));
  return it == values_.end() ? nullptr : &it->second;
}

const Value& Fields::need(std::string_view key) const {
  if (const Value* v = get(key)) return *v;
  r_.fail(at_, join(path_, key), "required key is missing");
}

}  // namespace stoker::config
