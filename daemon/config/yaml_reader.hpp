// Private to daemon/config/: reading a yaml-cpp tree the way every section of the config does.
// A Value is a node with its key path and a position that is never lines away; a Reader turns
// Values into typed settings (integers in decimal, sizes with units, ${ENV} expansion, choices
// with "did you mean"); Fields is one mapping, its keys checked against those allowed.
//
// Invariant: every refusal leaves through Reader::fail, that is as a ConfigError naming
// FILE:LINE:COL and the key path; nothing here lets a yaml-cpp exception out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.hpp"

namespace stoker::config {

inline constexpr std::uint64_t kMaxSide = 16384;  // pixels, per output side (Reader::size)

// "N MiB, a quarter of this machine's memory: what one job may take when it starts": said with
// every bound derived from job_memory_budget() (config.hpp).
std::string budget_words();

// 1-based position of a node (of a yaml-cpp mark); {0, 0} when yaml-cpp has none.
Mark mark_of(const YAML::Node& n);
Mark mark_of(const YAML::Mark& m);

// Where yaml-cpp's parse error `e` really is. For a flow left open (`[` or `{` without its
// closer) yaml-cpp marks the token after the end of the flow, a line or more below; the
// opening bracket is what was forgotten, so this points at it (the innermost one left open
// before `e`'s mark, quotes and comments skipped). Any other error: mark_of(e.mark).
Mark parse_error_mark(std::string_view text, const YAML::Exception& e);

// "a.b" key paths: `path` + "." + `key` (just `key` at the top).
std::string join(const std::string& path, std::string_view key);

// "a, b, c", for the lists of allowed keys and values in messages.
std::string quoted_list(std::initializer_list<std::string_view> words);
std::string quoted_list(std::span<const std::string_view> words);

// The option closest to `word` if it is close enough to be what was meant (a misspelling),
// else "": the "did you mean" of unknown keys, values and steps.
std::string closest(std::string_view word, std::initializer_list<std::string_view> options);
std::string closest(std::string_view word, std::span<const std::string_view> options);

// How a node reads in a message: 'text', a list, a mapping or nothing.
std::string describe(const YAML::Node& n);

// Relative paths are relative to the config file's folder; "a/./" comes out as "a" so that
// messages and comparisons see one spelling.
std::filesystem::path resolve(const std::filesystem::path& p, const std::filesystem::path& base_dir);

// A value in the document, with what is needed to complain about it. `at` is the value's
// own mark, or its key's when the value is empty (yaml-cpp gives an empty value the mark of
// whatever token follows, which may be lines away).
struct Value {
  YAML::Node node;
  std::string path;
  Mark at;
};

class Reader {
 public:
  // `client_job`: the text came from a client (parse_client_job): no value is taken from
  // stokerd's environment and no key may choose where stokerd writes.
  // `client_buckets`: the buckets stokerd lets a client's job read (server.client_job_buckets).
  explicit Reader(std::string file, bool client_job = false, std::vector<std::string> client_buckets = {})
      : file_(std::move(file)), client_job_(client_job), client_buckets_(std::move(client_buckets)) {}
  bool client_job() const { return client_job_; }
  const std::vector<std::string>& client_buckets() const { return client_buckets_; }
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(Mark at, const std::string& path, const std::string& msg) const {
    throw ConfigError(file_, at, path, msg);
  }
  [[noreturn]] void fail(const Value& v, const std::string& msg) const { fail(v.at, v.path, msg); }

  // A scalar's text with ${NAME} and ${NAME:-default} replaced from the environment, so one
  // config serves every node of a multi-node job (torchrun's WORLD_SIZE / GROUP_RANK, SLURM's
  // SLURM_NODEID...). A variable that is unset (and has no default) is refused, naming it.
  std::string text(const Value& v) const;
  // A decimal integer within [lo, hi].
  std::uint64_t integer(const Value& v, std::uint64_t lo, std::uint64_t hi) const;
  // A size in bytes: an integer, or an integer with a binary unit ("8GiB", "512 MiB").
  std::uint64_t bytes(const Value& v, std::uint64_t lo, std::uint64_t hi) const;
  double number(const Value& v) const;  // finite
  bool boolean(const Value& v) const;
  std::string string(const Value& v) const;
  std::string choice(const Value& v, std::initializer_list<std::string_view> options) const;
  std::string choice(const Value& v, std::span<const std::string_view> options) const;
  // Element i of a sequence, marked at the sequence when it has no position of its own.
  Value element(const Value& seq, std::size_t i) const;
  std::vector<double> numbers(const Value& v, std::size_t count) const;  // exactly `count`
  // `size: 224` (square) or `size: [height, width]`, each side 1..kMaxSide.
  std::pair<std::uint32_t, std::uint32_t> size(const Value& v) const;

 private:
  std::string file_;
  bool client_job_ = false;
  std::vector<std::string> client_buckets_;
};

// A mapping whose keys have been checked against those allowed (unknown and repeated keys
// refused); gives each value with its path and a mark that is never lines away.
class Fields {
 public:
  Fields(const Reader& r, const Value& map, std::initializer_list<std::string_view> allowed)
      : Fields(r, map, std::span<const std::string_view>(allowed.begin(), allowed.size())) {}
  Fields(const Reader& r, const Value& map, std::span<const std::string_view> allowed);

  const Value* get(std::string_view key) const;  // nullptr when the key is absent
  const Value& need(std::string_view key) const;  // refused when the key is absent

 private:
  const Reader& r_;
  std::string path_;
  Mark at_;
  std::map<std::string, Value, std::less<>> values_;
};

}  // namespace stoker::config
