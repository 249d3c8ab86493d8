// What the /metrics endpoint answers to the bytes a peer sent: a request head read with
// Boost.Beast's parser (bounded by header_limit), and the HTTP/1.0 response that goes back.
// No sockets here: the server (metrics_http.cpp) feeds it what it reads, and the pure
// metrics_http_response() (metrics_text.hpp; tests and the fuzz harness) feeds it one buffer,
// so the fuzz tier exercises the very parsing code the server runs.
//
// Only the head is ever parsed: the answer is decided when it ends, and whatever follows it (a
// body, a pipelined request) is never handed to the parser (the server discards it while it
// lingers). Line ends: Beast wants CRLF; a bare LF is read as CRLF (RFC 9112 §2.2 lets a
// recipient do so, and the responder always has), so the head limit counts such an LF twice.
// Beast is stricter than the hand-written request-line reader it replaced: a version other
// than HTTP/1.0 or HTTP/1.1, or a malformed header field (no colon, control bytes, obs-fold,
// a bad Content-Length), is now a 400 where the old code looked at the request line only.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

namespace stoker::control {

// The longest request head taken (CRLF line ends counted); longer: 431.
inline constexpr std::size_t kMetricsMaxRequestBytes = 4096;

// The verdict on one request: 200 (the document), 400, 404, 405 or 431. head_only: a HEAD
// request (the headers of the response, not its body).
struct MetricsAnswer {
  int status = 400;
  bool head_only = false;
};

// The bytes of a response: `head` (status line and headers, through the blank line) and then
// `body`, which views either the document or a static message (it lives as long as they do).
struct MetricsReply {
  std::string head;
  std::string_view body;
};

// Reads one request head, fed in pieces as they arrive.
class MetricsRequestReader {
 public:
  MetricsRequestReader();
  // Takes the next bytes from the peer. The answer once the head is complete (its blank line
  // seen) or has reached kMetricsMaxRequestBytes without ending (431), else nullopt: more is
  // needed. Not called again after it answered.
  std::optional<MetricsAnswer> feed(std::string_view bytes);
  // The input ended before the head did: 400.
  static MetricsAnswer unfinished() { return MetricsAnswer{400, false}; }

 private:
  boost::beast::http::request_parser<boost::beast::http::empty_body> parser_;
  // The head so far, LF already made CRLF; handed to the parser whole once its blank line is
  // here (at most kMetricsMaxRequestBytes are ever kept).
  std::string pending_;
  bool after_cr_ = false;  // the last byte taken was '\r' (a following '\n' is already CRLF)
};

// The response for `answer`: 200 serves `document` (Content-Length its size, no body for HEAD).
MetricsReply metrics_reply(const MetricsAnswer& answer, const std::string& document);

}  // namespace stoker::control
