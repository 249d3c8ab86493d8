#include "server/quarantine.hpp"

#include <fstream>

#include <spdlog/spdlog.h>

namespace stoker::server {

Quarantine::Quarantine(std::filesystem::path file) : file_(std::move(file)) {
  std::ifstream in(file_);
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    std::string path = line.substr(0, tab);
    if (!path.empty()) paths_.insert(std::move(path));
  }
}

Quarantine::~Quarantine() {
  if (out_ != nullptr) std::fclose(out_);
}

bool Quarantine::contains(const std::string& path) const {
  std::lock_guard lock(mu_);
  return paths_.count(path) != 0;
}

std::size_t Quarantine::size() const {
  std::lock_guard lock(mu_);
  return paths_.size();
}

bool Quarantine::add(const std::string& path, const char* kind, const std::string& reason) {
  std::lock_guard lock(mu_);
  if (!paths_.insert(path).second) return false;
  if (out_ == nullptr) {
    std::error_code ec;
    if (file_.has_parent_path()) std::filesystem::create_directories(file_.parent_path(), ec);
    out_ = std::fopen(file_.c_str(), "a");
    if (out_ == nullptr) {
      spdlog::warn("cannot append to quarantine file {}; bad files will be retried next start",
                   file_.string());
      return true;
    }
  }
  std::string clean = reason;
  for (char& c : clean) {
    if (c == '\t' || c == '\n') c = ' ';
  }
  std::fprintf(out_, "%s\t%s\t%s\n", path.c_str(), kind, clean.c_str());
  std::fflush(out_);
  return true;
}

}  // namespace stoker::server
