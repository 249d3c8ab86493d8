#include "device_mapping.hpp"

#include <cstring>

#include "base/mutex.hpp"

#include "connection.hpp"

namespace stoker::client {

std::shared_ptr<device::Backend> importer_backend() {
  // Made once per process; a failure is remembered (its reason repeated to every caller).
  static base::Mutex mu;
  static std::shared_ptr<device::Backend> backend STOKER_GUARDED_BY(mu);
  static std::string why_not STOKER_GUARDED_BY(mu);
  base::MutexLock lock(mu);
  if (!backend && why_not.empty()) {
    if (device::BackendResult made = device::make_importer_backend(); made) {
      backend = std::move(made).value();
    } else {
      why_not = made.status().message();
    }
    if (!backend && why_not.empty()) why_not = "no device backend";
  }
  if (!backend) {
    throw Failure{STOKER_ERR_REFUSED, "device output was requested but this process cannot use a device: " + why_not};
  }
  return backend;
}

DeviceMapping::DeviceMapping(std::shared_ptr<device::Backend> backend, int ordinal,
                             const std::uint8_t* msg, std::size_t n, std::uint32_t slot_count,
                             std::uint32_t batch_size, std::uint64_t label_bytes)
    : backend_(std::move(backend)), ordinal_(ordinal), batch_size_(batch_size), label_bytes_(label_bytes) {
  proto::DeviceRingMsg m;
  if (n < sizeof m) throw Failure{STOKER_ERR_PROTOCOL, "device ring message too short"};
  std::memcpy(&m, msg, sizeof m);
  const std::size_t want = sizeof m + std::size_t{slot_count} * sizeof(proto::DeviceSlotHandles);
  const auto dtype = static_cast<proto::DType>(m.dtype);
  const bool dtype_ok = dtype == proto::DType::kUInt8 || dtype == proto::DType::kFloat16 ||
                        dtype == proto::DType::kFloat32;
  // Everything that becomes an address is checked against the allocation's size here, once.
  if (n != want || m.header.size != n || m.slot_count != slot_count || !dtype_ok ||
      m.backend != static_cast<std::uint32_t>(backend_->kind()) || m.slot_stride == 0 ||
      m.image_bytes == 0 || m.labels_offset < m.image_bytes * batch_size ||
      m.labels_offset + label_bytes * batch_size > m.slot_stride ||
      m.slot_stride > m.alloc_bytes / (slot_count == 0 ? 1 : slot_count)) {
    throw Failure{STOKER_ERR_PROTOCOL, "stokerd sent an inconsistent device ring description"};
  }
  dtype_ = dtype;
  normalized_ = (m.flags & proto::kDeviceNormalized) != 0;
  alloc_bytes_ = m.alloc_bytes;
  slot_stride_ = m.slot_stride;
  image_bytes_ = m.image_bytes;
  labels_offset_ = m.labels_offset;
  alloc_id_ = m.alloc_id;

  device::IpcHandle h;
  std::memcpy(h.data(), m.mem_handle, 64);
  base::Result<void*> mem = backend_->open_memory(ordinal_, h, alloc_bytes_);
  if (!mem) {
    throw Failure{STOKER_ERR_INTERNAL, "cannot open the device ring stokerd shared: " + mem.status().message()};
  }
  base_ = *mem;
  for (std::uint32_t s = 0; s < slot_count; ++s) {
    proto::DeviceSlotHandles sh;
    std::memcpy(&sh, msg + sizeof m + s * sizeof sh, sizeof sh);
    std::memcpy(h.data(), sh.ready_event, 64);
    base::Result<device::EventId> ready = backend_->open_event(ordinal_, h);
    base::Status st = ready.status();
    if (ready) {
      ready_.push_back(*ready);
      std::memcpy(h.data(), sh.release_event, 64);
      base::Result<device::EventId> release = backend_->open_event(ordinal_, h);
      st = release.status();
      if (release) release_.push_back(*release);
    }
    if (!st) {
      close_all();
      throw Failure{STOKER_ERR_INTERNAL, "cannot open the device ring's events: " + st.message()};
    }
  }
}

DeviceMapping::~DeviceMapping() { close_all(); }

void DeviceMapping::close_all() {
  // Work the trainer queued on the batches (and our release fences after it) must be done
  // before the handles go: a teardown-only host wait.
  // Teardown: a failed wait has nobody to report to; the handles go either way.
  for (auto e : release_) (void)backend_->synchronize_event(ordinal_, e);
  for (auto e : ready_) backend_->close_event(ordinal_, e);
  for (auto e : release_) backend_->close_event(ordinal_, e);
  ready_.clear();
  release_.clear();
  if (base_ != nullptr) backend_->close_memory(ordinal_, base_);
  base_ = nullptr;
}

void* DeviceMapping::images(std::uint32_t slot) const {
  return static_cast<std::uint8_t*>(base_) + slot_stride_ * slot;
}

void* DeviceMapping::labels(std::uint32_t slot) const {
  return static_cast<std::uint8_t*>(base_) + slot_stride_ * slot + labels_offset_;
}

base::Status DeviceMapping::acquire(std::uint32_t slot, device::StreamId stream) {
  if (slot >= ready_.size()) return base::Status::error("slot outside the device ring");
  if (base::Status w = backend_->stream_wait(ordinal_, stream, ready_[slot]); !w) return w;
  backend_->annotate_read_begin(ordinal_, images(slot), slot_stride_, stream);
  return {};
}

base::Status DeviceMapping::wait_copied(std::uint32_t slot, device::StreamId stream) {
  if (slot >= ready_.size()) return base::Status::error("slot outside the device ring");
  if (base::Status w = backend_->stream_wait(ordinal_, stream, ready_[slot]); !w) return w;
  return {};
}

base::Status DeviceMapping::release(std::uint32_t slot, device::StreamId stream) {
  if (slot >= release_.size()) return base::Status::error("slot outside the device ring");
  backend_->annotate_read_end(ordinal_, images(slot), slot_stride_, stream);
  if (base::Status r = backend_->record(ordinal_, release_[slot], stream); !r) return r;
  return {};
}

base::Status DeviceMapping::copy_to_host(std::uint32_t slot, std::uint32_t count, void* images_out,
                                         void* labels_out, device::StreamId stream) {
  if (count > batch_size_) count = batch_size_;
  if (images_out != nullptr) {
    if (base::Status s = backend_->copy_to_host(ordinal_, stream, images_out, images(slot), image_bytes_ * count); !s) {
      return s;
    }
  }
  if (labels_out != nullptr) {
    return backend_->copy_to_host(ordinal_, stream, labels_out, labels(slot), label_bytes_ * count);
  }
  return {};
}

}  // namespace stoker::client
