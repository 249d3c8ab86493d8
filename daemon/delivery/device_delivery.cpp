#include "delivery/device_delivery.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "log/log.hpp"
#include "image/output_writer.hpp"

namespace stoker::delivery {

PeerProcess::PeerProcess(std::int32_t pid) : pid_(pid) {
#ifdef SYS_pidfd_open
  if (pid > 0) pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
}

PeerProcess::~PeerProcess() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool PeerProcess::alive() const {
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;  // readable once the process has exited
  }
  if (pid_ <= 0) return false;
  return ::kill(pid_, 0) == 0 || errno == EPERM;
}

DeviceDelivery::DeviceDelivery(std::unique_ptr<device::Backend> backend, std::string why_not)
    : backend_(std::move(backend)), why_not_(std::move(why_not)) {
  if (backend_) reaper_ = std::thread([this] { reaper_loop(); });
}

DeviceDelivery::~DeviceDelivery() { shutdown(); }

std::string DeviceDelivery::describe() {
  if (!backend_) return "unavailable: " + why_not_;
  const auto devs = backend_->devices().devices;
  std::string out = std::string(device::to_string(backend_->kind())) + ", " +
                    (backend_->version().empty() ? "" : backend_->version() + ", ") +
                    std::to_string(devs.size()) + " device(s)";
  for (const auto& d : devs) out += (d.ordinal == 0 ? ": " : ", ") + d.name + " " + device::uuid_string(d.uuid);
  return out;
}

base::Result<std::shared_ptr<DeviceRing>> DeviceDelivery::open_ring(const DeviceRingRequest& req,
                                                                    const std::uint8_t uuid_bytes[16],
                                                                    std::uint32_t client_backend) {
  if (!backend_) {
    return base::Status::error("device output was requested but this stokerd serves host batches only: " +
                               why_not_);
  }
  const auto kind = static_cast<device::BackendKind>(client_backend);
  if (kind != backend_->kind()) {
    return base::Status::error(std::string("device output was requested through the ") + device::to_string(kind) +
                               " backend but stokerd runs the " + device::to_string(backend_->kind()) +
                               " backend (set STOKER_DEVICE_BACKEND alike for both)");
  }
  if (req.normalize) {
    if (base::Status can = backend_->can_normalize(); !can) {
      return base::Status::error("job '" + req.job_name + "' sets device_normalize, but " + can.message());
    }
  }
  device::Uuid uuid;
  std::memcpy(uuid.data(), uuid_bytes, 16);
  const auto devs = backend_->devices().devices;
  int ordinal = -1;
  std::string seen;
  for (const auto& d : devs) {
    if (d.uuid == uuid) ordinal = d.ordinal;
    seen += (seen.empty() ? "" : ", ") + device::uuid_string(d.uuid);
  }
  if (ordinal < 0) {
    return base::Status::error("GPU " + device::uuid_string(uuid) + " is not visible to stokerd (it sees " +
                               (seen.empty() ? std::string("none") : seen) +
                               "); check CUDA_VISIBLE_DEVICES of the daemon's service");
  }

  base::MutexLock lock(mu_);
  if (!opened_[ordinal]) {
    if (base::Status open = backend_->open_device(ordinal); !open) {
      opened_.erase(ordinal);
      return open;
    }
    opened_[ordinal] = true;
    stoker::log::info("device delivery: using {} for the first time", device::uuid_string(uuid));
  }
  // The segment is page-locked once per job, at its first device consumer (never for jobs
  // that only serve host batches).
  if (registered_.count(req.job) == 0) {
    void* base = req.segment_base;
    if (base::Status reg = backend_->register_host(ordinal, base, req.segment_size, true); !reg) {
      return base::Status::error("cannot page-lock job '" + req.job_name +
                                 "''s shared memory for device copies: " + reg.message());
    }
    registered_[req.job] = {ordinal, base};
  }

  DeviceRingPlan plan;
  plan.slots = req.slots;
  plan.batch_size = req.batch_size;
  plan.host_image_bytes = req.host.sample_bytes();
  plan.device_image_bytes = plan.host_image_bytes;
  plan.device_dtype = req.host.dtype;
  plan.label_bytes = req.label_bytes;
  if (req.normalize) {
    const image::PipelineSpec& out = *req.normalize;
    const image::OutputWriter tables(out);
    plan.normalize = true;
    plan.device_dtype = out.dtype;
    plan.device_image_bytes = out.sample_bytes();
    plan.spec.out_dtype = static_cast<std::uint32_t>(out.dtype);
    plan.spec.layout = static_cast<std::uint32_t>(out.layout);
    plan.spec.channels = 3;
    plan.spec.height = out.out_height;
    plan.spec.width = out.out_width;
    for (int c = 0; c < 3; ++c) {
      for (int v = 0; v < 256; ++v) {
        float f = tables.table_f32(c, v);
        std::uint32_t bits = 0;
        std::memcpy(&bits, &f, 4);
        plan.spec.table[c][v] = out.dtype == proto::DType::kFloat16 ? tables.table_f16(c, v) : bits;
      }
    }
  }
  base::Result<std::shared_ptr<DeviceRing>> ring = DeviceRing::create(*backend_, ordinal, uuid, plan, next_alloc_id_++);
  if (!ring) return ring.status().prefixed("cannot allocate the device ring on " + device::uuid_string(uuid));
  rings_.push_back(*ring);
  return ring;
}

void DeviceDelivery::retire(std::shared_ptr<DeviceRing> ring, std::shared_ptr<PeerProcess> peer) {
  if (!ring) return;
  base::MutexLock lock(mu_);
  retired_.push_back(Retired{std::move(ring), std::move(peer)});
}

bool DeviceDelivery::mark_unmapped(std::uint64_t alloc_id, std::int32_t pid) {
  base::MutexLock lock(mu_);
  for (auto& r : retired_) {
    if (r.ring->alloc_id() == alloc_id && r.peer && r.peer->pid() == pid) {
      r.ring->unmapped.store(true);
      return true;
    }
  }
  return false;
}

void DeviceDelivery::reap() {
  base::MutexLock lock(mu_);
  bool handed = false;
  for (auto it = retired_.begin(); it != retired_.end();) {
    const bool done = it->ring->unmapped.load() || !it->peer || !it->peer->alive();
    if (done && it->ring.use_count() == 1) {  // no slot refers to it any more
      to_free_.push_back(std::move(it->ring));
      it = retired_.erase(it);
      handed = true;
    } else {
      ++it;
    }
  }
  if (handed) reaper_cv_.notify_all();
}

void DeviceDelivery::reaper_loop() {
  base::MutexLock lock(mu_);
  for (;;) {
    while (!stopping_ && to_free_.empty()) reaper_cv_.wait(lock);
    if (to_free_.empty()) return;
    auto ring = std::move(to_free_.front());
    to_free_.pop_front();
    lock.unlock();
    const auto id = ring->alloc_id();
    const auto bytes = ring->device_bytes();
    ring->release_resources();
    stoker::log::debug("device ring {} freed ({} bytes)", id, bytes);
    ring.reset();
    lock.lock();
    ++freed_;
  }
}

void DeviceDelivery::forget_job(const void* job) {
  base::MutexLock lock(mu_);
  auto it = registered_.find(job);
  if (it == registered_.end() || !backend_) return;
  // Rings that copied from this segment: their copies must be done before it is unregistered
  // (the job settled its slots' copies; a retired ring's last copy is waited for here too).
  for (auto& w : rings_) {
    if (auto r = w.lock()) r->synchronize();
  }
  backend_->unregister_host(it->second.first, it->second.second);
  registered_.erase(it);
}

void DeviceDelivery::shutdown() {
  {
    base::MutexLock lock(mu_);
    if (shut_down_ || !backend_) return;
  }
  reap();
  {
    base::MutexLock lock(mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  base::MutexLock lock(mu_);
  shut_down_ = true;
  // Rings whose consumer may still map them are left to the driver (freed when stokerd
  // exits); their copies must still finish before the segments they read are unmapped.
  for (auto& w : rings_) {
    if (auto r = w.lock()) r->synchronize();
  }
  if (!retired_.empty()) {
    stoker::log::info("device delivery: {} ring(s) left mapped by live consumers at exit", retired_.size());
  }
  retired_.clear();
  for (auto& [job, reg] : registered_) backend_->unregister_host(reg.first, reg.second);
  registered_.clear();
}

std::size_t DeviceDelivery::live_rings() {
  base::MutexLock lock(mu_);
  return retired_.size() + to_free_.size();
}

std::uint64_t DeviceDelivery::rings_freed() {
  base::MutexLock lock(mu_);
  return freed_;
}

}  // namespace stoker::delivery
