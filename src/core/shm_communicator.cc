#include "core/shm_communicator.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "core/half.h"
#include "core/status.h"

namespace pagoda {
namespace {

/// The control block at the start of the segment; the slots follow at kSlotsOffset.
struct Control {
  pthread_mutex_t mutex;  // process-shared, robust
  pthread_cond_t cond;    // process-shared, CLOCK_MONOTONIC
  int32_t world_size;
  int32_t arrived;      // ranks at the barrier of the current generation
  uint64_t generation;  // barriers completed
  uint64_t slot_bytes;
  int32_t failed;  // 0: none; 1: failed, `failure` says why (naming the rank when it is known)
  char failure[512];
  pid_t pids[ShmGroup::kMaxRanks];  // 0 until registered
};

constexpr size_t kSlotsOffset = (sizeof(Control) + 4095) / 4096 * 4096;

Control& control(void* base) { return *static_cast<Control*>(base); }

/// Whether process `pid` still runs: gone, or a zombie (state Z / X in /proc/<pid>/stat), is dead.
/// Example line: "1234 (pagoda) S 1 ...": the state is the first field after the last ')'.
bool process_alive(pid_t pid) {
  if (pid <= 0) return true;  // not registered yet
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!f || !std::getline(f, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

/// Records the group's first failure (the mutex held) and wakes every waiter.
void fail_locked(Control& c, const std::string& why) {
  if (c.failed == 0) {
    c.failed = 1;
    const size_t n = std::min(why.size(), sizeof(c.failure) - 1);
    std::memcpy(c.failure, why.data(), n);
    c.failure[n] = '\0';
  }
  pthread_cond_broadcast(&c.cond);
}

/// A rank died holding the mutex (EOWNERDEAD): the group fails naming the ranks that no longer
/// live (the mutex held).
void fail_owner_dead(Control& c) {
  pthread_mutex_consistent(&c.mutex);
  std::string dead;
  for (int r = 0; r < c.world_size; ++r) {
    if (!process_alive(c.pids[r]))
      dead +=
          fmt::format("{}tensor-parallel rank {} (pid {})", dead.empty() ? "" : ", ", r, c.pids[r]);
  }
  fail_locked(c, fmt::format("{} exited inside a collective",
                             dead.empty() ? "a tensor-parallel rank" : dead));
}

/// Locks the group's mutex; a rank that died holding it fails the group (EOWNERDEAD).
void lock(Control& c) {
  const int rc = pthread_mutex_lock(&c.mutex);
  if (rc == EOWNERDEAD) {
    fail_owner_dead(c);
    return;
  }
  if (rc != 0) throw Internal(fmt::format("tensor-parallel group: mutex: {}", std::strerror(rc)));
}

}  // namespace

std::shared_ptr<ShmGroup> ShmGroup::create(int world_size, size_t slot_bytes) {
  PAGODA_CHECK(world_size >= 1 && world_size <= kMaxRanks, "ShmGroup of {} ranks (1..{})",
               world_size, kMaxRanks);
  PAGODA_CHECK(slot_bytes > 0, "ShmGroup with empty slots");
  slot_bytes = (slot_bytes + 63) / 64 * 64;
  const size_t bytes = kSlotsOffset + slot_bytes * static_cast<size_t>(world_size);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    throw Internal(
        fmt::format("tensor-parallel group: mmap of {} bytes: {}", bytes, std::strerror(errno)));
  }
  Control& c = *new (base) Control{};
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&c.mutex, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c.cond, &ca);
  pthread_condattr_destroy(&ca);
  c.world_size = world_size;
  c.slot_bytes = slot_bytes;
  return std::shared_ptr<ShmGroup>(new ShmGroup(base, bytes));
}

ShmGroup::~ShmGroup() { ::munmap(base_, bytes_); }

int ShmGroup::world_size() const { return control(base_).world_size; }

void ShmGroup::set_pid(int rank, pid_t pid) {
  PAGODA_CHECK(rank >= 0 && rank < world_size(), "set_pid: rank {} of {}", rank, world_size());
  __atomic_store_n(&control(base_).pids[rank], pid, __ATOMIC_RELEASE);
}

std::string ShmGroup::failure() const {
  Control& c = control(base_);
  lock(c);
  std::string out = c.failed != 0 ? std::string(c.failure) : std::string();
  pthread_mutex_unlock(&c.mutex);
  return out;
}

ShmCommunicator::ShmCommunicator(std::shared_ptr<ShmGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  PAGODA_CHECK(group_ != nullptr, "ShmCommunicator without a group");
  group_->set_pid(rank, ::getpid());
}

int ShmCommunicator::world_size() const { return group_->world_size(); }

std::byte* ShmCommunicator::slot(int rank) const {
  const Control& c = control(group_->base_);
  return static_cast<std::byte*>(group_->base_) + kSlotsOffset +
         static_cast<size_t>(rank) * c.slot_bytes;
}

void ShmCommunicator::abort(const std::string& why) {
  Control& c = control(group_->base_);
  lock(c);
  fail_locked(c, fmt::format("tensor-parallel rank {} failed: {}", rank_, why));
  pthread_mutex_unlock(&c.mutex);
}

void ShmCommunicator::wait_all(const char* what) {
  Control& c = control(group_->base_);
  lock(c);
  auto throw_failure = [&] {
    const std::string message = c.failure;
    pthread_mutex_unlock(&c.mutex);
    throw Internal(message);
  };
  if (c.failed != 0) throw_failure();
  const uint64_t generation = c.generation;
  if (++c.arrived == c.world_size) {
    c.arrived = 0;
    ++c.generation;
    pthread_cond_broadcast(&c.cond);
    pthread_mutex_unlock(&c.mutex);
    return;
  }
  while (c.generation == generation) {
    timespec deadline{};
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += int64_t{kLivenessPollMs} * 1000000;
    deadline.tv_sec += deadline.tv_nsec / 1000000000;
    deadline.tv_nsec %= 1000000000;
    const int rc = pthread_cond_timedwait(&c.cond, &c.mutex, &deadline);
    if (rc == EOWNERDEAD) fail_owner_dead(c);
    if (c.failed != 0) throw_failure();
    if (c.generation != generation || rc != ETIMEDOUT) continue;
    for (int r = 0; r < c.world_size; ++r) {
      const pid_t pid = __atomic_load_n(&c.pids[r], __ATOMIC_ACQUIRE);
      if (r == rank_ || process_alive(pid)) continue;
      fail_locked(c, fmt::format("tensor-parallel rank {} (pid {}) exited; rank {} was in {}", r,
                                 pid, rank_, what));
      throw_failure();
    }
  }
  pthread_mutex_unlock(&c.mutex);
}

void ShmCommunicator::all_reduce_sum(void* data, int64_t count, DType dtype) {
  PAGODA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16,
               "all_reduce_sum of {}: only f32 and bf16", dtype_name(dtype));
  const size_t esize = dtype_size(dtype);
  const int world = world_size();
  const int64_t chunk = static_cast<int64_t>(control(group_->base_).slot_bytes / esize);
  auto* bytes = static_cast<std::byte*>(data);
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t n = std::min(chunk, count - first);
    std::byte* mine = bytes + static_cast<size_t>(first) * esize;
    std::memcpy(slot(rank_), mine, static_cast<size_t>(n) * esize);
    wait_all("all_reduce_sum");
    // Rank order, the same on every rank: ((s_0 + s_1) + s_2) + ...
    if (dtype == DType::kF32) {
      auto* out = reinterpret_cast<float*>(mine);
      const auto* s0 = reinterpret_cast<const float*>(slot(0));
      for (int64_t i = 0; i < n; ++i) out[i] = s0[i];
      for (int r = 1; r < world; ++r) {
        const auto* s = reinterpret_cast<const float*>(slot(r));
        for (int64_t i = 0; i < n; ++i) out[i] += s[i];
      }
    } else {
      auto* out = reinterpret_cast<uint16_t*>(mine);
      for (int64_t i = 0; i < n; ++i) {
        float acc = bf16_to_float(reinterpret_cast<const uint16_t*>(slot(0))[i]);
        for (int r = 1; r < world; ++r)
          acc += bf16_to_float(reinterpret_cast<const uint16_t*>(slot(r))[i]);
        out[i] = float_to_bf16(acc);
      }
    }
    wait_all("all_reduce_sum");
  }
}

void ShmCommunicator::all_gather(const void* in, void* out, size_t bytes) {
  all_gather_range(in, out, bytes, 0, world_size());
}

void ShmCommunicator::all_gather_range(const void* in, void* out, size_t bytes, int first,
                                       int count) {
  PAGODA_CHECK(first >= 0 && count >= 0 && first + count <= world_size(),
               "all_gather of ranks [{}, {}) of {}", first, first + count, world_size());
  const size_t chunk = control(group_->base_).slot_bytes;
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  for (size_t at = 0; at < bytes; at += chunk) {
    const size_t n = std::min(chunk, bytes - at);
    std::memcpy(slot(rank_), src + at, n);
    wait_all("all_gather");
    for (int r = 0; r < count; ++r)
      std::memcpy(dst + static_cast<size_t>(r) * bytes + at, slot(first + r), n);
    wait_all("all_gather");
  }
}

void ShmCommunicator::broadcast(void* data, size_t bytes, int root) {
  PAGODA_CHECK(root >= 0 && root < world_size(), "broadcast from rank {} of {}", root,
               world_size());
  const size_t chunk = control(group_->base_).slot_bytes;
  auto* p = static_cast<std::byte*>(data);
  for (size_t first = 0; first < bytes; first += chunk) {
    const size_t n = std::min(chunk, bytes - first);
    if (rank_ == root) std::memcpy(slot(root), p + first, n);
    wait_all("broadcast");
    if (rank_ != root) std::memcpy(p + first, slot(root), n);
    wait_all("broadcast");
  }
}

}  // namespace pagoda
