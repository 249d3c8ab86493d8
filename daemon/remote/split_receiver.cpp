#include "remote/split_receiver.hpp"

#include <cerrno>
#include <cstring>
#include <string_view>

#include <sys/socket.h>
#include <sys/time.h>

#include <grpcpp/grpcpp.h>

#include "remote/split_frames.hpp"

namespace stoker::remote {

SplitReceiver::SplitReceiver(int fd, std::size_t sample_bytes, std::size_t max_pixels)
    : fd_(fd), sample_bytes_(sample_bytes), max_pixels_(max_pixels) {
  const timeval wait{0, kStallCheckMs * 1000};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
}

FrameRead SplitReceiver::next(SlotClaims& claims, std::string& why) {
  claimed_.clear();
  std::size_t total = 0;
  if (const FrameRead got = read_split_head(fd_, head_, max_pixels_, total, why); got != FrameRead::kFrame) {
    return got;
  }
  reply_.parse_in_place(std::string_view(reinterpret_cast<const char*>(head_.data()), head_.size()));
  if (rest_.size() < total) rest_.resize(total);  // never shrunk: a resize up zero-fills
  if (reply_.kind() != ReplyView::Kind::kResult && reply_.kind() != ReplyView::Kind::kResults) {
    return FrameRead::kFrame;  // the caller says what it was
  }
  // Pixels after the message: the results must claim exactly them, in order (else malformed).
  if (!reply_.attach_pixels(total == 0 ? grpc::Slice() : grpc::Slice(rest_.data(), total, grpc::Slice::STATIC_SLICE))) {
    return FrameRead::kFrame;
  }
  const std::vector<ResultView>& results = reply_.results();
  // A slot is offered only for what can be a sample as it stands; the link decides the rest.
  slots_.assign(results.size(), nullptr);
  claimed_.resize(results.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    const ResultView& r = results[i];
    claimed_[i] = r.error == 0 && !r.compressed && r.pixels.size == sample_bytes_;
  }
  claims.claim(std::span<const ResultView>(results), std::span<char>(claimed_), std::span<std::uint8_t*>(slots_));
  parts_.clear();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const ResultView& r = results[i];
    parts_.push_back({claimed_[i] != 0 ? slots_[i] : rest_.data() + (r.pixels.offset - head_.size()), r.pixels.size});
  }
  next_ = 0;
  for (;;) {
    const int e = receive_parts(fd_, parts_, next_);
    if (e == 0) return FrameRead::kFrame;
    if (e == EAGAIN) {
      give_up_if_overdue(claims);
      continue;
    }
    claims.release(std::span<const ResultView>(results), std::span<const char>(claimed_), 0);
    claimed_.clear();
    why = e < 0 ? "closed inside a frame's pixels" : "reading: " + std::string(std::strerror(e));
    return FrameRead::kCut;
  }
}

void SplitReceiver::give_up_if_overdue(SlotClaims& claims) {
  const std::vector<ResultView>& results = reply_.results();
  const std::span<const ResultView> all(results);
  if (!claims.stalled_too_long(all, std::span<const char>(claimed_), next_)) return;
  // Still claimed here: nothing else writes these slots until release().
  for (std::size_t i = next_; i < results.size(); ++i) {
    if (claimed_[i] == 0) continue;
    std::uint8_t* to = rest_.data() + (results[i].pixels.offset - head_.size());
    const std::size_t came = results[i].pixels.size - parts_[i].iov_len;
    if (came > 0) std::memcpy(to, static_cast<const std::uint8_t*>(parts_[i].iov_base) - came, came);
    parts_[i].iov_base = to + came;
  }
  claims.release(all, std::span<const char>(claimed_), next_);
  for (std::size_t i = next_; i < results.size(); ++i) claimed_[i] = 0;
}

}  // namespace stoker::remote
