// The CPU reference's only threading primitive: run independent work items on std::threads.
// Items write disjoint outputs, so results never depend on the thread count or the schedule.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace moekit::cpu {

/// Threads to use for `items` work items when the caller asked for `requested` (0 = all cores).
inline int thread_count(int requested, std::int64_t items) {
  int n = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  if (n < 1) n = 1;
  return static_cast<int>(std::min<std::int64_t>(n, std::max<std::int64_t>(items, 1)));
}

/// Calls fn(i) for i in [0, items), spread over threads; the first exception is rethrown here.
template <class Fn>
void parallel_for(std::int64_t items, int requested_threads, Fn&& fn) {
  const int threads = thread_count(requested_threads, items);
  if (threads <= 1) {
    for (std::int64_t i = 0; i < items; ++i) fn(i);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    try {
      for (std::int64_t i = next.fetch_add(1); i < items; i = next.fetch_add(1)) fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(items);  // stop handing out work
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace moekit::cpu
