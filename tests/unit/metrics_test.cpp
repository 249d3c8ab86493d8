// Unit tier of the operations code: the server.metrics* / log_interval_s keys, the Prometheus
// text writer, the windowed rate, and the HTTP responder's answer to well-formed and garbage
// request heads (the socket side is exercised against a real daemon in metrics_serve_test).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "config/config.hpp"
#include "control/metrics_text.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using Catch::StartsWith;
using stoker::config::ConfigError;
using stoker::config::parse_config;
using namespace stoker::control;

namespace {

const fs::path kBase = fs::path(STOKER_TEST_DATA_DIR) / "configs";

std::string with_server(const std::string& server_lines) {
  return "server:\n" + server_lines +
         "jobs:\n"
         "  train:\n"
         "    source: {root: .}\n"
         "    batch_size: 4\n"
         "    pipeline:\n"
         "      - decode: {}\n"
         "      - random_resized_crop: {size: 32}\n"
         "    output: {dtype: uint8, layout: NCHW}\n";
}

std::string refusal(const std::string& yaml) {
  try {
    parse_config(yaml, "test.yaml", kBase);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("server.metrics takes a loopback HOST:PORT and refuses others unless allowed", "[metrics][config]") {
  auto cfg = parse_config(with_server("  metrics: \"127.0.0.1:9400\"\n  log_interval_s: 30\n"), "test.yaml", kBase);
  CHECK(cfg.server.metrics_host == "127.0.0.1");
  CHECK(cfg.server.metrics_port == 9400);
  CHECK(cfg.server.log_interval_s == 30);
  CHECK(cfg.server.metrics_textfile.empty());

  cfg = parse_config(with_server("  metrics: localhost:0\n"), "test.yaml", kBase);
  CHECK(cfg.server.metrics_host == "127.0.0.1");  // no name lookups at run time
  CHECK(cfg.server.metrics_port == 0);
  cfg = parse_config(with_server("  metrics: \"[::1]:9401\"\n"), "test.yaml", kBase);
  CHECK(cfg.server.metrics_host == "::1");
  cfg = parse_config(with_server("  metrics: 127.0.0.2:1\n"), "test.yaml", kBase);  // all of 127/8
  CHECK(cfg.server.metrics_port == 1);

  // Off the loopback: refused at its line, the way out named.
  CHECK_THAT(refusal(with_server("  metrics: \"0.0.0.0:9400\"\n")),
             StartsWith("test.yaml:2:12: server.metrics: ") && Contains("not a loopback") &&
                 Contains("metrics_allow_remote"));
  CHECK_THAT(refusal(with_server("  metrics: \"[::]:9400\"\n")), Contains("not a loopback"));
  cfg = parse_config(with_server("  metrics_allow_remote: true\n  metrics: \"0.0.0.0:9400\"\n"), "test.yaml", kBase);
  CHECK(cfg.server.metrics_host == "0.0.0.0");
  // Key order does not matter.
  cfg = parse_config(with_server("  metrics: \"10.1.2.3:9400\"\n  metrics_allow_remote: true\n"), "test.yaml", kBase);
  CHECK(cfg.server.metrics_host == "10.1.2.3");

  CHECK_THAT(refusal(with_server("  metrics: 9400\n")), Contains("server.metrics: expected HOST:PORT"));
  CHECK_THAT(refusal(with_server("  metrics: \"127.0.0.1:\"\n")), Contains("expected HOST:PORT"));
  CHECK_THAT(refusal(with_server("  metrics: \"127.0.0.1:65536\"\n")), Contains("port must be 0..65535"));
  CHECK_THAT(refusal(with_server("  metrics: \"127.0.0.1:-1\"\n")), Contains("port must be 0..65535"));
  CHECK_THAT(refusal(with_server("  metrics: \"metrics.example:80\"\n")), Contains("numeric IPv4/IPv6"));
  CHECK_THAT(refusal(with_server("  metrics_textfile: \"\"\n")), Contains("server.metrics_textfile: must not be empty"));
  CHECK_THAT(refusal(with_server("  log_interval_s: -1\n")), Contains("server.log_interval_s: must be within"));
  CHECK_THAT(refusal(with_server("  metrics_allow_remote: maybe\n")), Contains("server.metrics_allow_remote"));
  CHECK_THAT(refusal(with_server("  metric: \"127.0.0.1:1\"\n")), Contains("did you mean 'metrics'"));

  cfg = parse_config(with_server("  metrics_textfile: prom\n"), "test.yaml", kBase);
  CHECK(cfg.server.metrics_textfile == kBase / "prom");  // relative to the config file
}

TEST_CASE("metrics text escapes label values and writes each family's HELP and TYPE once", "[metrics]") {
  MetricsText m;
  m.family("stoker_x_total", "counter", "An x.");
  m.sample("stoker_x_total", {{"job", "a\"b\\c\nd"}}, 3);
  m.sample("stoker_x_total", {{"job", "plain"}, {"rank", "0"}}, 0.5);
  m.family("stoker_y", "gauge", "A y.");
  m.sample("stoker_y", {}, 1e12);
  m.sample("stoker_y", {{"k", "nan"}}, std::nan(""));
  CHECK(m.str() ==
        "# HELP stoker_x_total An x.\n# TYPE stoker_x_total counter\n"
        "stoker_x_total{job=\"a\\\"b\\\\c\\nd\"} 3\n"
        "stoker_x_total{job=\"plain\",rank=\"0\"} 0.5\n"
        "# HELP stoker_y A y.\n# TYPE stoker_y gauge\n"
        "stoker_y 1000000000000\n"
        "stoker_y{k=\"nan\"} NaN\n");
}

TEST_CASE("counter window gives the rate over its span", "[metrics]") {
  using namespace std::chrono;
  CounterWindow w(seconds(10));
  const auto t0 = steady_clock::time_point{} + hours(1);
  CHECK(w.rate("a") == 0);  // nothing sampled
  w.sample(t0, {{"a", 0}});
  CHECK(w.rate("a") == 0);  // one sample: no span
  w.sample(t0 + seconds(2), {{"a", 1}, {"b", 4}});
  CHECK(w.rate("a") == Approx(0.5));
  CHECK(w.rate("b") == Approx(2.0));  // absent at the start: counted from 0
  for (int s = 3; s <= 30; ++s) w.sample(t0 + seconds(s), {{"a", 1.0 + (s - 2) * 3.0}});
  CHECK(w.rate("a") == Approx(3.0));  // the old slope has left the window
  CHECK(w.rate("missing") == 0);
}

// A consumer that connected 2 s ago and has waited all of it is waiting 100% of its time, not
// 20% of the daemon's 10 s window (stokerctl top's WAIT%, stoker_consumer_wait_ratio).
TEST_CASE("counter window's rate since an instant counts only the time after it", "[metrics]") {
  using namespace std::chrono;
  CounterWindow w(seconds(10));
  const auto t0 = steady_clock::time_point{} + hours(1);
  for (int s = 0; s <= 8; ++s) w.sample(t0 + seconds(s), {});
  w.sample(t0 + seconds(9), {{"wait", 1.0}});
  w.sample(t0 + seconds(10), {{"wait", 2.0}});
  CHECK(w.rate("wait") == Approx(0.2));                              // diluted by the 8 s before
  CHECK(w.rate_since("wait", t0 + seconds(8)) == Approx(1.0));       // connected at 8 s
  CHECK(w.rate_since("wait", t0 - seconds(30)) == Approx(0.2));      // long connected: the window caps it
  CHECK(w.rate_since("wait", t0 + seconds(10)) == 0);                // no time yet
  CHECK(w.rate_since("missing", t0) == 0);
}

TEST_CASE("the HTTP responder answers GET /metrics and refuses everything else", "[metrics][http]") {
  const std::string doc = "stoker_up 1\n";
  const std::string ok = metrics_http_response("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", doc);
  CHECK_THAT(ok, StartsWith("HTTP/1.0 200 OK\r\n") && Contains("Content-Type: text/plain; version=0.0.4") &&
                     Contains("Content-Length: 12\r\n"));
  CHECK(ok.substr(ok.size() - doc.size()) == doc);
  CHECK_THAT(metrics_http_response("GET /metrics?name[]=x HTTP/1.0\n\n", doc), StartsWith("HTTP/1.0 200"));
  const std::string head = metrics_http_response("HEAD /metrics HTTP/1.0\r\n\r\n", doc);
  CHECK_THAT(head, StartsWith("HTTP/1.0 200") && Contains("Content-Length: 12"));
  CHECK(head.find("stoker_up") == std::string::npos);
  CHECK_THAT(metrics_http_response("GET / HTTP/1.0\r\n\r\n", doc), StartsWith("HTTP/1.0 404"));
  CHECK_THAT(metrics_http_response("POST /metrics HTTP/1.0\r\n\r\n", doc), StartsWith("HTTP/1.0 405"));
  CHECK_THAT(metrics_http_response("GET /metrics\r\n\r\n", doc), StartsWith("HTTP/1.0 400"));
  CHECK_THAT(metrics_http_response("GET  /metrics HTTP/1.0\r\n\r\n", doc), StartsWith("HTTP/1.0 400"));
  CHECK_THAT(metrics_http_response("\r\n\r\n", doc), StartsWith("HTTP/1.0 400"));
  CHECK_THAT(metrics_http_response("", doc), StartsWith("HTTP/1.0 400"));

  // Random bytes: always a complete 4xx response (never the document, never a crash).
  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) {
    std::string junk(rng() % 300, '\0');
    for (char& c : junk) c = static_cast<char>(rng() % 4 == 0 ? " /\r\nGETHP"[rng() % 10] : rng());
    const std::string r = metrics_http_response(junk, doc);
    REQUIRE_THAT(r, StartsWith("HTTP/1.0 4"));
    REQUIRE(r.find("\r\n\r\n") != std::string::npos);
  }
}

TEST_CASE("the textfile is replaced atomically and a missing folder is reported", "[metrics]") {
  const fs::path dir = fs::temp_directory_path() / ("stoker-metrics-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  REQUIRE(write_metrics_textfile(dir, "stoker_a 1\n").ok());
  REQUIRE(write_metrics_textfile(dir, "stoker_a 2\n").ok());
  std::ifstream in(dir / "stoker.prom");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "stoker_a 2\n");
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);  // no temporary left behind
  fs::remove_all(dir);
  const stoker::base::Status failed = write_metrics_textfile(dir, "stoker_a 3\n");
  CHECK_FALSE(failed.ok());
  CHECK_THAT(failed.message(), Contains(dir.string()));
  CHECK(resident_memory_bytes() > 0);
}
