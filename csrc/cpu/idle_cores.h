// How many cores are free for this call's threads. When another process keeps
// a core busy (a vLLM worker, a dataloader, a second rank), a thread placed on
// it is preempted mid-chunk and the whole pass waits at the barrier for it:
// two threads then run slower than one. Linux counts runnable tasks in
// /proc/loadavg (4th field, "running/total"); this process's own running
// threads are subtracted. Other systems assume every core is free.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#if defined(__linux__)
#include <dirent.h>
#endif

namespace dara {

// The count is a snapshot: it is refreshed at most this often, so a stream of
// calls pays for the /proc reads (tens of microseconds) about ten times a second.
constexpr std::chrono::milliseconds kIdleCoresRefresh{100};

#if defined(__linux__)
inline int running_tasks_system() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return 0;
  double l1, l5, l15;
  int running = 0, total = 0;
  const int read = std::fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total);
  std::fclose(f);
  return read == 5 ? running : 0;
}

inline int running_tasks_here() {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return 1;
  int running = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    char path[300], buffer[512];  // path: the prefix plus a d_name of up to 255 bytes
    std::snprintf(path, sizeof(path), "/proc/self/task/%s/stat", entry->d_name);
    FILE* f = std::fopen(path, "r");
    if (!f) continue;
    const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
    std::fclose(f);
    buffer[n] = '\0';
    const char* close = std::strrchr(buffer, ')');  // the state follows the (command name)
    if (close && close[1] == ' ' && close[2] == 'R') ++running;
  }
  closedir(dir);
  return std::max(running, 1);
}
#endif

inline int idle_cores() {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
#if defined(__linux__)
  using Clock = std::chrono::steady_clock;
  static std::atomic<int64_t> stamp{0};
  static std::atomic<int> cached{0};
  const int64_t now = Clock::now().time_since_epoch().count();
  const int64_t refresh = std::chrono::duration_cast<Clock::duration>(kIdleCoresRefresh).count();
  if (cached.load() > 0 && now - stamp.load() < refresh) return cached.load();
  const int elsewhere = std::max(0, running_tasks_system() - running_tasks_here());
  const int idle = std::max(1, cores - elsewhere);
  cached.store(idle);
  stamp.store(now);
  return idle;
#else
  return cores;
#endif
}

}  // namespace dara
