// Unit tier: one rank's Ring (daemon/job/ring.hpp), the slot state machine, driven without a
// segment file, a socket or a process: headers live in plain arrays, the job is a few
// recorded callbacks, and "workers" are this test calling begin_sample/sample_done.
// Fan-out, replanning after a resume, detach, lease reclaim after a consumer dies, drain and
// bad releases.
#include <catch2/catch.hpp>

#include <new>

#include <deque>
#include <vector>

#include "job/ring.hpp"

using stoker::job::AttachResult;
using stoker::job::BatchPos;
using stoker::job::Ring;
using stoker::job::RingConfig;
using stoker::job::RingHooks;
using stoker::job::RingMemory;
using stoker::job::RingStatus;
using stoker::job::SlotBatch;
using stoker::sched::WorkItem;
using stoker::proto::SlotState;

namespace {

// Epoch e's stream is 1000*e + 0..samples-1, so an id tells its epoch and place.
class FakeJob final : public RingHooks {
 public:
  explicit FakeJob(std::uint32_t samples) : samples_(samples) {}

  std::vector<std::uint32_t> epoch_ids(std::uint64_t epoch, std::uint64_t /*consumed*/) override {
    if (out_of_memory_for > 0 && epoch == out_of_memory_epoch) {  // the machine, not the job
      --out_of_memory_for;
      throw std::bad_alloc();
    }
    std::vector<std::uint32_t> ids(samples_);
    for (std::uint32_t i = 0; i < samples_; ++i) ids[i] = static_cast<std::uint32_t>(1000 * epoch) + i;
    return ids;
  }
  bool stopped() const override { return false; }
  void planned(std::uint32_t slot, std::uint32_t position, std::uint32_t generation, std::uint32_t id,
               std::vector<WorkItem>& out) override {
    out.push_back(WorkItem{nullptr, 0, slot, position, generation});
    planned_ids.push_back(id);
  }
  std::uint32_t settle(const SlotBatch& batch) override { return batch.count; }
  bool mixes() const override { return false; }
  void mix(const SlotBatch&) override {}
  bool copy_to_device(std::uint32_t, std::uint32_t, std::uint64_t, std::uint64_t,
                      stoker::delivery::DeviceRing&) override {
    return false;
  }
  void published() override { ++published_count; }
  void notify() override {}
  void epoch_failed(std::uint64_t, std::size_t, const std::vector<std::string>&) override {}
  void epoch_done(std::uint64_t epoch) override { done_epochs.push_back(epoch); }

  std::vector<std::uint32_t> planned_ids;
  std::vector<std::uint64_t> done_epochs;
  std::uint64_t out_of_memory_epoch = 0;  // epoch_ids of it throws std::bad_alloc ...
  int out_of_memory_for = 0;              // ... this many times
  int published_count = 0;

 private:
  std::uint32_t samples_;
};

// A ring of `slots` slots of batch_size 2 over `samples` samples, with its headers in memory.
struct Fixture {
  Fixture(std::uint32_t slots, std::uint32_t readers, std::uint32_t samples = 10)
      : job(samples), slot_headers(slots) {
    RingMemory memory;
    memory.header = &ring_header;
    for (auto& h : slot_headers) memory.slots.push_back(&h);
    RingConfig cfg;
    cfg.job_name = "t";
    cfg.slots = slots;
    cfg.readers = readers;
    cfg.batch_size = 2;
    ring = std::make_unique<Ring>(cfg, std::move(memory), job);
  }

  // Runs every queued item (and those its completion plans) as a worker would, all good.
  // Planning stops when the slots are full, so a few rounds drain the queue; a ring that
  // keeps planning (freeing what nobody released) fails here instead of looping for ever.
  void work() {
    for (int n = 0; !queue.empty(); ++n) {
      REQUIRE(n < 1000);
      const WorkItem item = queue.front();
      queue.pop_front();
      (void)ring->begin_sample(item);
      std::vector<WorkItem> more;
      ring->sample_done(item, true, nullptr, more);
      queue.insert(queue.end(), more.begin(), more.end());
    }
  }
  void add(std::vector<WorkItem>& items) {
    queue.insert(queue.end(), items.begin(), items.end());
    items.clear();
  }
  void start() {
    std::vector<WorkItem> items;
    ring->start(items);
    add(items);
  }
  AttachResult attach(std::uint32_t reader, BatchPos at) {
    std::vector<WorkItem> items;
    auto r = ring->attach(reader, at, nullptr, items);
    REQUIRE(r.ok());
    add(items);
    return *r;
  }
  // Takes the reader's next batch; it must be (epoch, batch).
  stoker::proto::BatchMsg take(std::uint32_t reader, BatchPos want) {
    auto msg = ring->take(reader);
    REQUIRE(msg.has_value());
    CHECK(msg->epoch == want.epoch);
    CHECK(msg->batch_index == want.batch);
    return *msg;
  }
  bool release(std::uint32_t reader, const stoker::proto::BatchMsg& m) {
    std::vector<WorkItem> items;
    const bool ok = ring->release(reader, m.slot, m.generation, items);
    add(items);
    return ok;
  }
  RingStatus status() { return ring->status(5); }

  FakeJob job;
  stoker::proto::RingHeader ring_header{};
  std::vector<stoker::proto::SlotHeader> slot_headers;
  std::unique_ptr<Ring> ring;
  std::deque<WorkItem> queue;
};

}  // namespace

TEST_CASE("ring: planning fills every free slot in order and mirrors states into the headers", "[ring]") {
  Fixture f(3, 1);
  f.start();
  CHECK(f.queue.size() == 6);
  CHECK(f.job.planned_ids == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5});
  CHECK(f.status().filling == 3);
  for (const auto& h : f.slot_headers) CHECK(h.state == static_cast<std::uint32_t>(SlotState::kFilling));
  f.work();
  CHECK(f.status().ready == 3);
  CHECK(f.ring_header.batches_published == 3);
  CHECK(f.job.published_count == 3);
  for (const auto& h : f.slot_headers) {
    CHECK(h.state == static_cast<std::uint32_t>(SlotState::kReady));
    CHECK(h.count == 2);
  }
}

TEST_CASE("ring: fan-out: every reader takes every batch, a slot is freed once all have released it", "[ring]") {
  Fixture f(2, 2);
  f.start();
  f.work();
  CHECK(f.attach(0, {0, 0}) == AttachResult::kAttached);
  CHECK(f.attach(1, {0, 0}) == AttachResult::kAttached);

  const auto a0 = f.take(0, {0, 0});
  const auto a1 = f.take(0, {0, 1});
  CHECK_FALSE(f.ring->take(0).has_value());  // batch 2 not planned: no slot is free
  REQUIRE(f.release(0, a0));
  CHECK(f.queue.empty());  // reader 1 still needs batch 0: its slot is kept
  CHECK(f.status().free == 0);
  CHECK(f.ring_header.batches_released == 0);

  const auto b0 = f.take(1, {0, 0});
  CHECK(b0.slot == a0.slot);
  CHECK(b0.generation == a0.generation);
  CHECK(f.status().leased == 2);  // batch 0 by reader 1 (reader 0 released it), batch 1 by reader 0
  REQUIRE(f.release(1, b0));
  CHECK(f.ring_header.batches_released == 1);
  CHECK(f.queue.size() == 2);  // freed and planned again: batch 2
  CHECK(f.job.planned_ids.back() == 5);
  f.work();

  const auto b1 = f.take(1, {0, 1});
  CHECK(b1.slot == a1.slot);
  f.take(0, {0, 2});
  f.take(1, {0, 2});
  CHECK(f.status().leased == 2);
}

TEST_CASE("ring: a resume elsewhere drops ready batches and replans from there", "[ring]") {
  Fixture f(2, 1);
  f.start();
  f.work();
  REQUIRE(f.status().ready == 2);  // batches 0 and 1; the ring holds or plans 0..2
  const auto before = f.ring_header.batches_published;

  CHECK(f.attach(0, {0, 3}) == AttachResult::kAttached);
  CHECK(f.status().ready == 0);
  CHECK(f.status().filling == 2);
  // Batch 3 is positions 6 and 7 of the epoch, batch 4 positions 8 and 9.
  CHECK(std::vector<std::uint32_t>(f.job.planned_ids.end() - 4, f.job.planned_ids.end()) ==
        std::vector<std::uint32_t>{6, 7, 8, 9});
  f.work();
  CHECK(f.ring_header.batches_published == before + 2);
  const auto m = f.take(0, {0, 3});
  CHECK(m.count == 2);
  f.take(0, {0, 4});
  CHECK((m.flags & stoker::proto::kBatchLastInEpoch) == 0);
}

TEST_CASE("ring: a resume at a batch the ring holds keeps it, earlier ones are freed", "[ring]") {
  Fixture f(2, 1);
  f.start();
  f.work();
  const auto planned = f.job.planned_ids.size();
  CHECK(f.attach(0, {0, 1}) == AttachResult::kAttached);
  CHECK(f.job.planned_ids.size() == planned + 2);  // batch 0's slot freed, batch 2 planned there
  CHECK(f.job.planned_ids.back() == 5);
  f.work();
  f.take(0, {0, 1});
  f.take(0, {0, 2});
}

TEST_CASE("ring: a resume while batches fill marks them stale, they are freed when their workers finish",
          "[ring]") {
  Fixture f(2, 1);
  f.start();  // items not run yet: both slots FILLING
  CHECK(f.attach(0, {1, 0}) == AttachResult::kAttached);
  CHECK(f.status().filling == 2);
  f.work();  // the stale batches finish, are dropped, and epoch 1 is planned in their place
  CHECK(f.ring_header.batches_published == 2);  // only epoch 1's
  const auto m = f.take(0, {1, 0});
  CHECK(m.epoch == 1);
  f.take(0, {1, 1});
  CHECK(f.job.planned_ids.back() == 1003);
}

TEST_CASE("ring: a later reader out of step with its group is refused with a reason", "[ring]") {
  Fixture f(2, 2);
  f.start();
  f.work();
  CHECK(f.attach(0, {0, 0}) == AttachResult::kAttached);
  std::vector<WorkItem> items;
  auto r = f.ring->attach(1, {0, 4}, nullptr, items);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("reader 1 of rank 0 of job 't' asks for epoch 0 batch 4") == 0);
  CHECK(items.empty());
  CHECK(f.attach(0, {0, 0}) == AttachResult::kBusy);
}

TEST_CASE("ring: a detached reader's leases are reclaimed, batches the others need are kept", "[ring]") {
  Fixture f(2, 2);
  f.start();
  f.work();
  f.attach(0, {0, 0});
  f.attach(1, {0, 0});
  const auto m0 = f.take(1, {0, 0});
  f.take(1, {0, 1});

  std::vector<WorkItem> items;
  CHECK(f.ring->detach(1, items) == nullptr);
  f.add(items);
  auto st = f.status();
  CHECK(st.leased == 0);
  CHECK(st.ready == 2);  // reader 0 has not taken them: kept
  CHECK(f.queue.empty());
  CHECK_FALSE(f.release(1, m0));  // its lease is gone

  // Reader 0 flows on alone: a slot is freed once reader 0 alone is past it.
  const auto a0 = f.take(0, {0, 0});
  REQUIRE(f.release(0, a0));
  CHECK(f.queue.size() == 2);
  f.work();
  f.take(0, {0, 1});
  f.take(0, {0, 2});
}

TEST_CASE("ring: a dead consumer's leases are reclaimed and the next one resumes after them", "[ring]") {
  Fixture f(2, 1);
  f.start();
  f.work();
  f.attach(0, {0, 0});
  const auto m0 = f.take(0, {0, 0});
  CHECK(f.status().leased == 1);
  CHECK(f.slot_headers[m0.slot].state == static_cast<std::uint32_t>(SlotState::kLeased));

  std::vector<WorkItem> items;
  (void)f.ring->detach(0, items);  // the consumer died holding batch 0
  f.add(items);
  auto st = f.status();
  CHECK(st.leased == 0);
  CHECK_FALSE(st.attached);
  CHECK(f.ring_header.batches_released == 1);  // batch 0 was taken: consumed, freed
  CHECK(f.queue.size() == 2);                  // and planned again (batch 2)
  CHECK_FALSE(f.release(0, m0));               // the dead consumer's lease is void
  f.work();

  CHECK(f.attach(0, {0, 1}) == AttachResult::kAttached);
  f.take(0, {0, 1});
}

TEST_CASE("ring: drain stops planning, drained_for once nothing at or past the reader is filling or ready",
          "[ring]") {
  Fixture f(2, 1);
  f.start();
  f.attach(0, {0, 0});
  // Finish only slot 0's batch; slot 1 is still filling.
  std::deque<WorkItem> rest;
  for (const auto& item : f.queue) (item.slot == 0 ? rest.push_front(item) : rest.push_back(item));
  f.queue.clear();
  for (int i = 0; i < 2; ++i) {
    std::vector<WorkItem> more;
    f.ring->sample_done(rest.front(), true, nullptr, more);
    rest.pop_front();
    CHECK(more.empty());
  }
  const auto m0 = f.take(0, {0, 0});
  f.ring->drain();
  CHECK_FALSE(f.ring->drained_for(0));  // batch 1 still filling
  f.queue = rest;
  f.work();
  CHECK_FALSE(f.ring->drained_for(0));  // batch 1 ready, not taken

  const auto m1 = f.take(0, {0, 1});
  CHECK(f.ring->drained_for(0));  // both taken: nothing more comes
  REQUIRE(f.release(0, m0));
  REQUIRE(f.release(0, m1));
  CHECK(f.queue.empty());  // freed but never planned again
  CHECK(f.status().free == 2);
  CHECK_FALSE(f.ring->take(0).has_value());
  CHECK(f.ring->drained_for(0));
}

TEST_CASE("ring: bad releases are refused and change nothing", "[ring]") {
  Fixture f(2, 2);
  f.start();
  f.work();
  f.attach(0, {0, 0});
  f.attach(1, {0, 0});
  const auto m = f.take(0, {0, 0});
  std::vector<WorkItem> items;
  CHECK_FALSE(f.ring->release(0, 2, m.generation, items));           // no such slot
  CHECK_FALSE(f.ring->release(0, m.slot, m.generation + 1, items));  // wrong generation
  CHECK_FALSE(f.ring->release(1, m.slot, m.generation, items));      // not leased by reader 1
  CHECK_FALSE(f.ring->release(0, 1 - m.slot, m.generation, items));  // READY, not leased
  CHECK_FALSE(f.ring->release(64, m.slot, m.generation, items));     // no such reader
  CHECK(items.empty());
  CHECK(f.status().leased == 1);
  REQUIRE(f.ring->release(0, m.slot, m.generation, items));
  CHECK_FALSE(f.ring->release(0, m.slot, m.generation, items));      // twice
}

TEST_CASE("ring: an epoch is reported done once, when the last of its samples is done (issue #34 D3)", "[ring]") {
  Fixture f(3, 1, 5);  // batches of 2, 2 and 1: one epoch fills the three slots
  f.start();
  CHECK(f.job.done_epochs.empty());  // planned, not done
  f.work();
  CHECK(f.job.done_epochs == std::vector<std::uint64_t>{0});
  f.attach(0, {0, 0});
  for (std::uint64_t b = 0; b < 3; ++b) REQUIRE(f.release(0, f.take(0, {0, b})));
  CHECK(f.job.done_epochs == std::vector<std::uint64_t>{0});  // epoch 1 planned, its samples not done
  f.work();
  CHECK(f.job.done_epochs == std::vector<std::uint64_t>{0, 1});
}

TEST_CASE("ring: out of memory planning the next epoch plans nothing, and a retry plans it once memory is back",
          "[ring]") {
  Fixture f(2, 1, 4);  // two batches per epoch
  f.job.out_of_memory_epoch = 1;
  f.job.out_of_memory_for = 2;
  f.start();
  f.work();
  CHECK(f.attach(0, {0, 0}) == AttachResult::kAttached);
  const auto a = f.take(0, {0, 0});
  REQUIRE(f.release(0, a));  // its slot is free: planning epoch 1 fails (no throw out of the ring)
  CHECK(f.queue.empty());
  CHECK(f.status().free == 1);
  f.take(0, {0, 1});
  CHECK_FALSE(f.ring->take(0).has_value());

  std::vector<WorkItem> items;
  f.ring->retry_planning(items);  // still out of memory
  CHECK(items.empty());
  f.ring->retry_planning(items);  // memory is back
  CHECK(items.size() == 2);
  f.add(items);
  f.work();
  f.take(0, {1, 0});
  f.ring->retry_planning(items);  // nothing failed since: nothing to do
  CHECK(items.empty());
}
