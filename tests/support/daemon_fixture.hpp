// Starts a real stokerd process for integration and fault tests. Each fixture gets its own
// temporary folder, socket and therefore its own segment names, so `ctest -j` is safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace stoker::test {

// A fresh temporary folder, removed with everything in it on destruction.
struct JobSpec {
  std::string name = "demo";
  std::string root;                  // default: tests/data/demo
  std::string source;                // raw YAML mapping replacing the imagefolder source
  int batch_size = 8;
  int consumers = 1;
  int prefetch = 3;
  bool shuffle = true;
  std::string shuffle_yaml;          // raw value of `shuffle:` replacing the bool ("{window_shards: 2}")
  int seed = 7;
  bool drop_last = false;
  std::string on_error;              // empty: default
  int out_size = 32;                 // small outputs keep tests fast
  bool random_crop = true;           // else resize + center crop
  std::string dtype = "uint8";
  std::string extra;                 // raw YAML appended to the job
  std::string pipeline_yaml;         // raw `pipeline:` + `output:` YAML replacing the ones above
};

// tests/data/demo: 4 classes x 16 photos of ~300-500 px, what JobSpec's default root serves.
inline constexpr int kDemoSamples = 64;

// Writes a config file for the given jobs (workers = `workers`) and returns its path.
// `server_extra`: more `server:` keys, each line indented by two spaces.
std::filesystem::path write_config(const std::filesystem::path& dir, const std::vector<JobSpec>& jobs,
                                   int workers, const std::string& server_extra = "");

class Daemon {
 public:
  // Starts stokerd with `config` on `socket`, waits until it accepts connections.
  // Throws std::runtime_error (with the daemon's log) if it exits or does not come up in 20 s.
  Daemon(const std::filesystem::path& config, const std::string& socket,
         const std::vector<std::string>& extra_args = {});
  ~Daemon();  // SIGTERM + wait if still running

  int pid() const { return pid_; }
  // Sends SIGTERM and returns the exit code (or 128+signal).
  int stop();
  // SIGKILL, as a crash would.
  void kill9();
  std::string log() const;  // stdout+stderr so far

 private:
  int pid_ = -1;
  std::filesystem::path log_path_;
};

// Starts a program in the background (stdout+stderr to `log`); returns its pid.
int start_program(const std::vector<std::string>& argv, const std::filesystem::path& log);
// Waits up to timeout_s for it (then SIGKILL); exit code or 128+signal.
int wait_program(int pid, int timeout_s);

// Runs a program to completion; returns exit code, fills output (stdout+stderr).
int run_program(const std::vector<std::string>& argv, std::string& output, int timeout_s = 60);

// "/proc/PID/fd/N" of process `pid`'s memfd named `name` (a job's segment), or "" if none.
std::string memfd_of(int pid, const std::string& name);

// Quarantine files of `job` in `state_dir` (<job>-<dataset hash>.quarantine).
std::vector<std::filesystem::path> quarantine_files(const std::filesystem::path& state_dir, const std::string& job);

// Shared-memory objects in /dev/shm whose name contains `part`.
std::vector<std::string> shm_objects_containing(const std::string& part);

std::string bin(const char* name);         // path of a built executable
std::string data_dir();                    // tests/data

}  // namespace stoker::test
