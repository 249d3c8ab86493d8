// A real S3-compatible server for tests: s3rver (scripts/setup.sh --test installs it into the
// clone's .deps/node/; STOKER_S3RVER names another), started on loopback on a free port with
// its data in a folder of the test's, one bucket created at start, stopped at the end.
// Objects are uploaded with put(), a SigV4-signed path-style PUT (s3rver checks signatures
// against its fixed credentials S3RVER / S3RVER, which kAccessKey / kSecretKey are).
// available() is false when s3rver is not installed: the test says so (WARN) and returns.
#pragma once

#include <curl/curl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "daemon_fixture.hpp"

namespace stoker::test {

class S3Server {
 public:
  static constexpr const char* kAccessKey = "S3RVER";
  static constexpr const char* kSecretKey = "S3RVER";

  static std::string executable() {
    if (const char* e = std::getenv("STOKER_S3RVER"); e != nullptr && *e != 0) return e;
    return std::string(STOKER_SOURCE_DIR) + "/.deps/node/node_modules/.bin/s3rver";
  }
  static bool available() { return ::access(executable().c_str(), X_OK) == 0; }
  static std::string missing_message() {
    return "s3rver is not installed (" + executable() + "): run scripts/setup.sh --test; the s3:// check is skipped";
  }

  S3Server(const std::filesystem::path& dir, const std::string& bucket) : bucket_(bucket), dir_(dir) {
    std::filesystem::create_directories(dir / "s3rver");
    start(0);
  }
  ~S3Server() { stop(); }
  S3Server(const S3Server&) = delete;
  S3Server& operator=(const S3Server&) = delete;

  // The server killed (SIGKILL: no goodbye to open connections) and, after `down`, started
  // again on the same port with the same data folder: its objects are still there.
  void kill_and_restart(std::chrono::milliseconds down) {
    ::kill(pid_, SIGKILL);
    (void)wait_program(pid_, 10);
    pid_ = -1;
    std::this_thread::sleep_for(down);
    start(port_);
  }

 private:
  void start(int port) {
    log_ = dir_ / ("s3rver-" + std::to_string(starts_++) + ".log");
    pid_ = start_program({executable(), "-d", (dir_ / "s3rver").string(), "-a", "127.0.0.1", "-p",
                          std::to_string(port), "--configure-bucket", bucket_},
                         log_);
    port_ = 0;
    const std::regex listening("listening on 127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 200 && port_ == 0; ++i) {
      std::ifstream in(log_);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      std::smatch m;
      if (std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (port_ == 0) {
      stop();
      throw std::runtime_error("s3rver did not start in 10 s; its log: " + log_.string());
    }
  }

 public:
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Uploads `bytes` as `key` of the bucket; throws with the HTTP status on failure.
  void put(const std::string& key, const std::string& bytes) const {
    CURL* e = curl_easy_init();
    const std::string url = endpoint() + "/" + bucket_ + "/" + key;
    curl_slist* h = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    struct Body {
      const std::string* s;
      std::size_t at = 0;
    } body{&bytes};
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(bytes.size()));
    curl_easy_setopt(e, CURLOPT_READDATA, &body);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, +[](char* out, std::size_t one, std::size_t n, void* u) -> std::size_t {
      auto* b = static_cast<Body*>(u);
      const std::size_t k = std::min(one * n, b->s->size() - b->at);
      std::copy_n(b->s->data() + b->at, k, out);
      b->at += k;
      return k;
    });
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, +[](char*, std::size_t one, std::size_t n, void*) { return one * n; });
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
    curl_easy_setopt(e, CURLOPT_USERNAME, kAccessKey);
    curl_easy_setopt(e, CURLOPT_PASSWORD, kSecretKey);
    const CURLcode rc = curl_easy_perform(e);
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    if (rc != CURLE_OK || code != 200) {
      throw std::runtime_error("PUT " + url + ": " + curl_easy_strerror(rc) + ", HTTP " + std::to_string(code));
    }
  }

 private:
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      (void)wait_program(pid_, 10);
      pid_ = -1;
    }
  }

  std::string bucket_;
  std::filesystem::path log_;
  std::filesystem::path dir_;
  int starts_ = 0;
  int pid_ = -1;
  int port_ = 0;
};

}  // namespace stoker::test
