// What every benchmark program of daemon/bench needs and used to write again: the files of a
// folder read into memory once (one sized read per file, as the daemon's workers read), thread
// CPU time, a timed round of "one sample at a time", and the median of interleaved rounds.
//
// Rounds are interleaved (every measurement's round 1, then every round 2, ...) so that a
// neighbour's load on a shared machine slows all measurements alike; the median is reported.
// Only ratios measured side by side in one run are quoted (docs/PERFORMANCE.md).
#pragma once

#include <time.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace stoker::bench {

using Bytes = std::vector<std::uint8_t>;
using Files = std::vector<Bytes>;

enum class Walk { kTop, kRecursive };

// Regular files under `dir` in sorted order; with `jpeg_only`, those named *.jpg/*.jpeg in any
// case (ImageNet's own files are ".JPEG").
inline std::vector<std::filesystem::path> list_files(const std::filesystem::path& dir, Walk walk,
                                                     bool jpeg_only) {
  namespace fs = std::filesystem;
  std::vector<fs::path> paths;
  auto take = [&](const fs::directory_entry& e) {
    if (!e.is_regular_file()) return;
    if (jpeg_only) {
      std::string ext = e.path().extension().string();
      for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (ext != ".jpg" && ext != ".jpeg") return;
    }
    paths.push_back(e.path());
  };
  if (walk == Walk::kRecursive) {
    for (const auto& e : fs::recursive_directory_iterator(dir)) take(e);
  } else {
    for (const auto& e : fs::directory_iterator(dir)) take(e);
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// The whole file in one sized read; false when it cannot be opened.
inline bool read_file(const std::filesystem::path& p, Bytes& out) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (f == nullptr) return false;
  out.resize(std::filesystem::file_size(p));
  out.resize(std::fread(out.data(), 1, out.size(), f));
  std::fclose(f);
  return true;
}

inline Files read_files(const std::vector<std::filesystem::path>& paths) {
  Files files;
  for (const auto& p : paths) {
    Bytes b;
    if (read_file(p, b)) files.push_back(std::move(b));
  }
  return files;
}

inline double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

inline double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One timed round: `one(file, n)` over the files in turn for at least `seconds` of `clock` and
// at least one pass; returns calls per second of that clock.
template <class F>
double timed_round(const Files& files, double seconds, F&& one, double (*clock)() = &wall_s) {
  std::size_t n = 0;
  const double t0 = clock();
  double el = 0;
  do {
    one(files[n % files.size()], n);
    ++n;
    el = clock() - t0;
  } while (el < seconds || n < files.size());
  return static_cast<double>(n) / el;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline std::size_t total_bytes(const Files& files) {
  std::size_t bytes = 0;
  for (const auto& f : files) bytes += f.size();
  return bytes;
}

}  // namespace stoker::bench
