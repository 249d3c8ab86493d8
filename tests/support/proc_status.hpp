// One field of a /proc status file (/proc/PID/status, /proc/self/task/TID/status): the text
// after `key:` and its blanks ("S (sleeping)", "1234 kB", "17"); empty when the file or the
// key is missing (a thread or process that has ended).
#pragma once

#include <fstream>
#include <string>

namespace stoker::test {

inline std::string proc_status_field(const std::string& status_file, const std::string& key) {
  std::ifstream in(status_file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) {
      const auto at = line.find_first_not_of(" \t", key.size() + 1);
      return at == std::string::npos ? std::string() : line.substr(at);
    }
  }
  return "";
}

}  // namespace stoker::test
