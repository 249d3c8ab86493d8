// Fuzz harness: the /metrics responder's answer to any request head (Beast's request parser
// behind metrics_http_response, metrics_http_request.cpp, which the server feeds too). Every
// input must give one complete HTTP/1.0 response: a status line, headers ending in a blank
// line, and a body of exactly Content-Length bytes; the document only for 200.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "control/metrics_text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string document = "# TYPE stoker_up gauge\nstoker_up 1\n";
  const std::string_view head(reinterpret_cast<const char*>(data), size);
  const std::string r = stoker::control::metrics_http_response(head, document);
  if (r.rfind("HTTP/1.0 ", 0) != 0) std::abort();
  const std::size_t end = r.find("\r\n\r\n");
  if (end == std::string::npos) std::abort();
  const std::size_t cl = r.find("Content-Length: ");
  if (cl == std::string::npos || cl > end) std::abort();
  const std::size_t length = std::strtoull(r.c_str() + cl + 16, nullptr, 10);
  const bool head_request = head.rfind("HEAD ", 0) == 0;
  if (!head_request && r.size() - end - 4 != length) std::abort();
  if (r.rfind("HTTP/1.0 200", 0) == 0 && length != document.size()) std::abort();
  return 0;
}
