#include "control/metrics_http_request.hpp"

#include <cstdint>
#include <limits>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include "control/metrics_text.hpp"

namespace stoker::control {

namespace http = boost::beast::http;

MetricsRequestReader::MetricsRequestReader() {
  parser_.header_limit(static_cast<std::uint32_t>(kMetricsMaxRequestBytes));
  // The body is never read: the answer is given at the end of the head and the rest is
  // discarded unparsed. So a declared Content-Length must not refuse the request by itself
  // (a POST with a body is answered 405, as it always was, not 413): the body limit is the
  // largest length. (Not boost::none: Beast 1.74 compares the length with the optional, and
  // every number is greater than none.)
  parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
}

std::optional<MetricsAnswer> MetricsRequestReader::feed(std::string_view bytes) {
  const std::size_t searched = pending_.size() < 3 ? 0 : pending_.size() - 3;
  pending_.reserve(pending_.size() + bytes.size());
  for (const char c : bytes) {
    if (c == '\n' && !after_cr_) pending_.push_back('\r');
    pending_.push_back(c);
    after_cr_ = c == '\r';
  }
  // Nothing is answered before the head ends (or grows too long), however wrong its start:
  // an unfinished head gets no answer and is dropped at the server's head timeout.
  const std::size_t end = pending_.find("\r\n\r\n", searched);
  if (end == std::string::npos) {
    if (pending_.size() >= kMetricsMaxRequestBytes) return MetricsAnswer{431, false};
    return std::nullopt;
  }
  boost::beast::error_code ec;
  parser_.put(boost::asio::buffer(pending_.data(), end + 4), ec);  // the whole head at once
  pending_.clear();
  if (ec == http::error::header_limit) return MetricsAnswer{431, false};
  if (ec || !parser_.is_header_done()) return MetricsAnswer{400, false};
  const auto& request = parser_.get();
  const bool head_only = request.method() == http::verb::head;
  if (request.method() != http::verb::get && !head_only) return MetricsAnswer{405, false};
  std::string_view target(request.target().data(), request.target().size());
  target = target.substr(0, target.find('?'));  // Prometheus may add ?name[]=...; all is served
  if (target != "/metrics") return MetricsAnswer{404, head_only};
  return MetricsAnswer{200, head_only};
}

MetricsReply metrics_reply(const MetricsAnswer& answer, const std::string& document) {
  std::string_view body;
  const char* type = "text/plain; charset=utf-8";
  switch (answer.status) {
    case 200: body = document, type = kMetricsContentType; break;
    case 404: body = "stokerd serves /metrics only\n"; break;
    case 405: body = "only GET /metrics\n"; break;
    case 431: body = "request head over 4096 bytes\n"; break;
    default: body = "bad request line\n"; break;
  }
  http::response_header<> h;
  h.version(10);
  h.result(static_cast<unsigned>(answer.status));
  h.set(http::field::content_type, type);
  h.set(http::field::content_length, std::to_string(body.size()));
  h.set(http::field::connection, "close");
  http::fields::writer w(h, h.version(), h.result_int());
  MetricsReply reply{boost::beast::buffers_to_string(w.get()), answer.head_only ? std::string_view() : body};
  return reply;
}

std::string metrics_http_response(std::string_view head, const std::string& document) {
  MetricsRequestReader reader;
  const MetricsAnswer answer = reader.feed(head).value_or(MetricsRequestReader::unfinished());
  const MetricsReply reply = metrics_reply(answer, document);
  std::string out = reply.head;
  out.append(reply.body);
  return out;
}

}  // namespace stoker::control
