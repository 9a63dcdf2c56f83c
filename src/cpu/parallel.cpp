#include "cpu/parallel.hpp"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace heed::cpu {
namespace {

thread_local bool t_inside_job = false;

class ThreadPool {
 public:
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  void run(int workers, std::int64_t tasks, const std::function<void(std::int64_t, int)>& body) {
    std::lock_guard submit(submit_mutex_);
    grow(workers - 1);
    next_task_.store(0);
    error_ = nullptr;
    {
      std::lock_guard lock(mutex_);
      body_ = &body;
      tasks_ = tasks;
      helpers_ = workers - 1;
      pending_ = workers - 1;
      ++generation_;
    }
    wake_.notify_all();
    work(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void grow(int helpers) {
    while (static_cast<int>(threads_.size()) < helpers) {
      const int worker = static_cast<int>(threads_.size()) + 1;
      // The new thread must wait for the job about to be posted, not the last one seen.
      threads_.emplace_back([this, worker, seen = generation_] { loop(worker, seen); });
    }
  }

  void loop(int worker, std::uint64_t seen) {
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        if (worker > helpers_) continue;
      }
      work(worker);
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_all();
    }
  }

  void work(int worker) {
    t_inside_job = true;
    try {
      for (std::int64_t task = next_task_++; task < tasks_; task = next_task_++) (*body_)(task, worker);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_task_.store(tasks_);
    }
    t_inside_job = false;
  }

  std::mutex submit_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> threads_;
  const std::function<void(std::int64_t, int)>* body_ = nullptr;
  std::int64_t tasks_ = 0;
  int helpers_ = 0;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::atomic<std::int64_t> next_task_{0};
  std::exception_ptr error_;
};

}  // namespace

void parallel_for(int workers, std::int64_t tasks, const std::function<void(std::int64_t, int)>& body) {
  if (tasks <= 0) return;
  if (workers <= 1 || tasks == 1 || t_inside_job) {
    for (std::int64_t task = 0; task < tasks; ++task) body(task, 0);
    return;
  }
  static ThreadPool pool;
  pool.run(workers, tasks, body);
}

}  // namespace heed::cpu
