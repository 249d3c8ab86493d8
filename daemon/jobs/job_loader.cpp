#include "jobs/job_loader.hpp"

#include <algorithm>
#include <new>

#include <spdlog/spdlog.h>

namespace stoker::jobs {

std::string client_job_out_of_memory(const std::string& job_name) {
  return "job " + job_name + ": refused: this machine has not the memory to build it (std::bad_alloc); reduce "
         "epoch_size, batch_size, prefetch, the output size or the ranks served";
}

using job::Job;
using sched::WorkQueue;

JobLoader::~JobLoader() {
  std::vector<std::thread> threads;
  {
    base::MutexLock lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

bool JobLoader::busy() const {
  base::MutexLock lock(mu_);
  return threads_.size() > finished_.size();
}

void JobLoader::finish(LoadResult r) {
  {
    base::MutexLock lock(mu_);
    if (r.kind == LoadResult::Kind::kReload) reloading_ = false;
    done_.push_back(std::move(r));
    finished_.push_back(std::this_thread::get_id());
  }
  wake_();
}

bool JobLoader::reload(std::filesystem::path file, std::filesystem::path state_dir,
                       std::map<std::string, std::string> serving) {
  base::MutexLock lock(mu_);
  if (reloading_) return false;
  reloading_ = true;
  threads_.emplace_back([this, file = std::move(file), state_dir = std::move(state_dir),
                         serving = std::move(serving)] {
    LoadResult r;
    r.kind = LoadResult::Kind::kReload;
    try {
      config::Config cfg = config::load_config(file);
      for (const auto& jc : cfg.jobs) {
        const auto it = serving.find(jc.name);
        if (it != serving.end() && it->second == jc.definition) {
          r.prepared.emplace_back();  // unchanged: keeps serving, not loaded again
        } else {
          r.prepared.emplace_back(prepare_job(jc, state_dir, cfg.file.string()));
        }
      }
      r.config = std::move(cfg);
    } catch (const config::ConfigError& e) {
      r.error = e.what();
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    finish(std::move(r));
  });
  return true;
}

void JobLoader::define(std::string key, config::JobConfig job, std::filesystem::path state_dir, std::string origin,
                       std::shared_ptr<const source::ReadAs> read_as) {
  base::MutexLock lock(mu_);
  threads_.emplace_back([this, key = std::move(key), job = std::move(job), state_dir = std::move(state_dir),
                         origin = std::move(origin), read_as = std::move(read_as)] {
    LoadResult r;
    r.kind = LoadResult::Kind::kDefine;
    r.definition = key;
    try {
      r.job = prepare_job(job, state_dir, origin, read_as);
    } catch (const config::ConfigError& e) {
      r.error = e.what();
    } catch (const std::bad_alloc&) {
      // A client's request is refused, never the daemon's end (issue #34, C1).
      r.error = client_job_out_of_memory(job.name);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    finish(std::move(r));
  });
}

std::vector<LoadResult> JobLoader::take_done() {
  std::vector<LoadResult> out;
  std::vector<std::thread> finished;
  {
    base::MutexLock lock(mu_);
    out.swap(done_);
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (std::find(finished_.begin(), finished_.end(), it->get_id()) != finished_.end()) {
        std::erase(finished_, it->get_id());
        finished.push_back(std::move(*it));
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& t : finished) t.join();  // each has returned from finish(): joins at once
  return out;
}

}  // namespace stoker::jobs
