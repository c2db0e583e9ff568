#pragma once
// The CPU communicator: the ranks are processes on one machine that share one memory segment.
//
// How it works. create_shm_group() maps an anonymous shared segment before the ranks are forked,
// so every rank inherits it: a control block (a process-shared, robust mutex and condition
// variable, a barrier generation counter, each rank's pid and the group's failure) and one slot of
// slot_bytes per rank. A collective moves its data through the slots in chunks of slot_bytes:
// each rank copies its chunk into its own slot, waits at the barrier, reads what it needs from
// every slot (all_reduce_sum: the sum in rank order, so every rank computes identical bits;
// all_gather: every slot; broadcast: the root's), and waits at the barrier again before the slots
// are reused. Waiting is a timed condition wait: every kLivenessPollMs the waiter checks that
// each peer's process still lives (/proc/<pid>/stat, a zombie counts as dead), so a rank that
// dies fails the others' collectives with a message naming it instead of hanging them. A rank
// that dies holding the mutex is seen through the robust mutex (EOWNERDEAD). Once failed, the
// group stays failed: every later collective throws the first failure's message.
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

#include "core/communicator.h"

namespace pagoda {

/// The shared segment of a group of `world_size` ranks; created by the process that forks the
/// ranks, before it forks them. Unmapped when the last copy of the handle goes (in each process).
class ShmGroup {
 public:
  /// world_size in [1, kMaxRanks]; slot_bytes > 0 (rounded up to 64). Internal on failure.
  [[nodiscard]] static std::shared_ptr<ShmGroup> create(int world_size, size_t slot_bytes);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  static constexpr int kMaxRanks = 64;

  [[nodiscard]] int world_size() const;
  /// Records rank's process (the parent does right after fork; the rank does it again itself).
  void set_pid(int rank, pid_t pid);
  /// The group's failure message, empty while it has none (e.g. for the parent's report).
  [[nodiscard]] std::string failure() const;

 private:
  friend class ShmCommunicator;
  ShmGroup(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  void* base_;
  size_t bytes_;
};

class ShmCommunicator final : public Communicator {
 public:
  /// Rank `rank` of the group (in the rank's own process); registers the process's pid.
  ShmCommunicator(std::shared_ptr<ShmGroup> group, int rank);

  static constexpr int kLivenessPollMs = 50;

  int rank() const override { return rank_; }
  int world_size() const override;
  void all_reduce_sum(void* data, int64_t count, DType dtype) override;
  void all_gather(const void* in, void* out, size_t bytes) override;
  void all_gather_range(const void* in, void* out, size_t bytes, int first, int count) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override { wait_all("barrier"); }
  void abort(const std::string& why) override;

 private:
  /// The barrier under every collective; throws Internal naming the failed rank.
  void wait_all(const char* what);
  [[nodiscard]] std::byte* slot(int rank) const;

  std::shared_ptr<ShmGroup> group_;
  int rank_;
};

}  // namespace pagoda
