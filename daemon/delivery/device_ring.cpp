#include "delivery/device_ring.hpp"

#include <cstring>

#include "log/log.hpp"

namespace stoker::delivery {

namespace {
constexpr std::uint64_t kDeviceAlign = 256;  // cudaMalloc's alignment; float4 stores need 16
constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

DeviceRing::DeviceRing(device::Backend& backend, int device, const device::Uuid& uuid,
                       const DeviceRingPlan& plan, std::uint64_t alloc_id)
    : backend_(backend), device_(device), uuid_(uuid), plan_(plan), alloc_id_(alloc_id) {
  labels_offset_ = align_up(plan.device_image_bytes * plan.batch_size, kDeviceAlign);
  slot_stride_ = align_up(labels_offset_ + plan.label_bytes * plan.batch_size, kDeviceAlign);
}

base::Result<std::shared_ptr<DeviceRing>> DeviceRing::create(device::Backend& backend, int device,
                                                             const device::Uuid& uuid,
                                                             const DeviceRingPlan& plan,
                                                             std::uint64_t alloc_id) {
  std::shared_ptr<DeviceRing> r(new DeviceRing(backend, device, uuid, plan, alloc_id));
  base::Status status;  // ok until the first error; what was made before it is released below
  {
    // Not shared yet: the lock only lets the analysis see every write of guarded state.
    base::MutexLock lock(r->mu_);
    // Everything is allocated here, with the ring: nothing is allocated on the copy path.
    if (auto st = backend.create_stream(device); st) {
      r->stream_ = *st;
      r->have_stream_ = true;
    } else {
      status = st.status();
    }
    if (status) {
      if (auto mem = backend.allocate(device, r->slot_stride_ * plan.slots); mem) {
        r->memory_ = *mem;
      } else {
        status = mem.status();
      }
    }
    if (status && plan.normalize) {
      if (auto staging = backend.allocate(device, plan.host_image_bytes * plan.batch_size); staging) {
        r->staging_ = *staging;
      } else {
        status = staging.status();
      }
    }
    for (std::uint32_t s = 0; status && s < plan.slots; ++s) {
      auto ready = backend.create_ipc_event(device);
      if (!ready) {
        status = ready.status();
        break;
      }
      r->ready_.push_back(ready->event);
      r->ready_handles_.push_back(ready->handle);
      auto release = backend.create_ipc_event(device);
      if (!release) {
        status = release.status();
        break;
      }
      r->release_.push_back(release->event);
      r->release_handles_.push_back(release->handle);
    }
    r->copied_.assign(plan.slots, 0);
  }
  if (!status) {
    r->release_resources();  // nothing was handed to a peer yet
    return status;
  }
  return r;
}

DeviceRing::~DeviceRing() {
  if (!released_) {
    stoker::log::debug("device ring {}: left to the driver (its consumer may still map it)", alloc_id_);
  }
}

base::Status DeviceRing::copy_slot(std::uint32_t s, const std::uint8_t* images, std::uint32_t count,
                                   const void* labels) {
  base::MutexLock lock(mu_);
  if (released_ || s >= plan_.slots) return base::Status::error("device ring released");
  const std::uint64_t dst = slot_stride_ * s;
  base::Status st = backend_.stream_wait(device_, stream_, release_[s]);
  if (st && count > 0) {
    if (plan_.normalize) {
      st = backend_.copy_to_device(stream_, staging_, 0, images, plan_.host_image_bytes * count);
      if (st) st = backend_.normalize(stream_, memory_, dst, staging_, 0, count, plan_.spec);
    } else {
      st = backend_.copy_to_device(stream_, memory_, dst, images, plan_.host_image_bytes * count);
    }
    if (st) st = backend_.copy_to_device(stream_, memory_, dst + labels_offset_, labels, plan_.label_bytes * count);
  }
  if (st) st = backend_.record(device_, ready_[s], stream_);
  copied_[s] = 1;
  return st;
}

void DeviceRing::wait_host_read(std::uint32_t s) {
  base::MutexLock lock(mu_);
  if (released_ || s >= plan_.slots || !copied_[s]) return;
  if (!backend_.event_done(device_, ready_[s])) {
    if (base::Status w = backend_.synchronize_event(device_, ready_[s]); !w) {
      stoker::log::error("device ring {}: waiting for slot {}'s copy failed: {}", alloc_id_, s, w.message());
    }
  }
  copied_[s] = 0;
}

void DeviceRing::synchronize() {
  base::MutexLock lock(mu_);
  if (released_ || !have_stream_) return;
  if (base::Status w = backend_.synchronize_stream(device_, stream_); !w) {
    stoker::log::error("device ring {}: synchronize failed: {}", alloc_id_, w.message());
  }
  std::fill(copied_.begin(), copied_.end(), 0);
}

void DeviceRing::release_resources() {
  synchronize();
  base::MutexLock lock(mu_);
  if (released_) return;
  released_ = true;
  for (auto e : ready_) backend_.destroy_event(device_, e);
  for (auto e : release_) backend_.destroy_event(device_, e);
  ready_.clear();
  release_.clear();
  if (memory_.ptr != nullptr) backend_.free(memory_);
  if (staging_.ptr != nullptr) backend_.free(staging_);
  if (have_stream_) backend_.destroy_stream(device_, stream_);
  have_stream_ = false;
}

std::vector<std::uint8_t> DeviceRing::message() const {
  std::vector<std::uint8_t> out(sizeof(proto::DeviceRingMsg) +
                                sizeof(proto::DeviceSlotHandles) * plan_.slots);
  auto m = proto::make_message<proto::DeviceRingMsg>(proto::MsgType::kDeviceRing);
  m.header.size = static_cast<std::uint32_t>(out.size());
  m.backend = static_cast<std::uint32_t>(backend_.kind());
  m.dtype = static_cast<std::uint32_t>(plan_.device_dtype);
  m.alloc_bytes = memory_.bytes;
  m.slot_stride = slot_stride_;
  m.image_bytes = plan_.device_image_bytes;
  m.labels_offset = labels_offset_;
  m.slot_count = plan_.slots;
  m.flags = plan_.normalize ? proto::kDeviceNormalized : 0;
  std::memcpy(m.device_uuid, uuid_.data(), 16);
  std::memcpy(m.mem_handle, memory_.handle.data(), 64);
  m.alloc_id = alloc_id_;
  std::memcpy(out.data(), &m, sizeof m);
  for (std::uint32_t s = 0; s < plan_.slots; ++s) {
    proto::DeviceSlotHandles h{};
    std::memcpy(h.ready_event, ready_handles_[s].data(), 64);
    std::memcpy(h.release_event, release_handles_[s].data(), 64);
    std::memcpy(out.data() + sizeof m + s * sizeof h, &h, sizeof h);
  }
  return out;
}

}  // namespace stoker::delivery
