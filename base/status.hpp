// Errors as values: a Status (ok, or an error message for a person) and a Result<T> (a value,
// or the Status saying why there is none). They replace `bool f(..., std::string& why)`:
//
//   base::Status open_ring(...);                 // was: bool open_ring(..., std::string& why)
//   if (base::Status s = open_ring(...); !s) return s.prefixed("job 'x'");
//
//   base::Result<Segment> r = Segment::create(...);
//   if (!r) log(r.status().message()); else use(*r);
//
// Messages follow the project's rule: they name the file, key, argument or peer concerned.
// Both are [[nodiscard]]: an ignored error is a compile warning.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace stoker::base {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  // The error message; empty when ok.
  const std::string& message() const { return message_; }
  // "context: message" (ok stays ok), for adding what the caller knows.
  Status prefixed(std::string_view context) const& {
    return ok() ? Status() : Status(std::string(context) + ": " + message_);
  }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit, as `return value;` reads
  Result(Status error) : status_(std::move(error)) {  // NOLINT: `return Status::error(...)`
    if (status_.ok()) status_ = Status::error("internal error: Result made from an ok Status");
  }

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Status& status() const { return status_; }  // ok when a value is held

  // Only with a value (checked by std::optional in debug builds of libstdc++).
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace stoker::base
