#include "runtime/process_executor.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "core/shm_communicator.h"
#include "core/status.h"
#include "runtime/in_process_executor.h"
#include "runtime/step_codec.h"

namespace pagoda {
namespace {

// Virtual size of the shared result memory: sparse, so only the pages a step writes exist.
constexpr size_t kSharedBytes = size_t{64} << 30;
// -tp N: each rank's slot of the collectives' shared memory (core/shm_communicator.h); larger
// messages go through in chunks of it.
constexpr size_t kCollectiveSlotBytes = size_t{4} << 20;
// -tp N: how long the other ranks may stay silent once one has exited or failed before they are
// killed (a rank in an NCCL collective with a dead peer never returns).
constexpr int kSurvivorGraceMs = 10000;

enum class Msg : uint32_t {
  kReady = 1,     // worker -> parent: ExecutorInfo
  kError,         // worker -> parent: kind (uint32) + message
  kOk,            // worker -> parent: a reply's payload
  kDeviceMemory,  // parent -> worker; reply: has (bool), free, total (uint64)
  kProfile,       // max_tokens, max_num_seqs, max_model_len, block_size; reply: seconds
  kInitKv,        // num_blocks, block_size
  kCapture,       // max_num_seqs; reply: count
  kLaunch,        // a StepPlan; reply: kResult once the step is done (or kError)
  kResult,        // worker -> parent: the result header (spans in shared memory)
  kExport,        // block; reply: bytes
  kImport,        // block + bytes
  kSaveBlocks,    // block ids, bytes per block; reply: the blocks' bytes, in order
  kLoadBlocks,    // block ids, then the blocks' bytes in order
  kShutdown,
};

struct Header {
  Msg type;
  uint32_t reserved;
  uint64_t size;
};

enum class ErrorKind : uint32_t { kInternal, kInvalidArgument, kNotFound };

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Internal(fmt::format("worker socket: send failed: {}", std::strerror(errno)));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

/// False at a clean end of stream before any byte of the message.
bool read_all(int fd, char* p, size_t n, bool allow_eof) {
  const size_t total = n;
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && allow_eof && n == total) return false;
    if (r <= 0) throw Internal("the worker process exited (its socket closed)");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void send_message(int fd, Msg type, const std::string& payload) {
  const Header h{type, 0, payload.size()};
  write_all(fd, reinterpret_cast<const char*>(&h), sizeof(h));
  write_all(fd, payload.data(), payload.size());
}

/// The next message; false at a clean end of stream.
bool receive_message(int fd, Msg& type, std::string& payload, bool allow_eof = false) {
  Header h{};
  if (!read_all(fd, reinterpret_cast<char*>(&h), sizeof(h), allow_eof)) return false;
  PAGODA_CHECK(h.size < (size_t{1} << 36), "worker socket: a message of {} bytes", h.size);
  payload.resize(h.size);
  read_all(fd, payload.data(), payload.size(), false);
  type = h.type;
  return true;
}

std::string error_payload(const std::exception& e) {
  codec::Writer w;
  ErrorKind kind = ErrorKind::kInternal;
  if (dynamic_cast<const InvalidArgument*>(&e) != nullptr) kind = ErrorKind::kInvalidArgument;
  if (dynamic_cast<const NotFound*>(&e) != nullptr) kind = ErrorKind::kNotFound;
  w.put(kind);
  w.put_string(e.what());
  return w.bytes();
}

[[noreturn]] void rethrow(const std::string& payload) {
  codec::Reader r(payload.data(), payload.size());
  const auto kind = r.get<ErrorKind>();
  const std::string what = r.get_string();
  if (kind == ErrorKind::kInvalidArgument) throw InvalidArgument(what);
  if (kind == ErrorKind::kNotFound) throw NotFound(what);
  throw Internal(fmt::format("worker: {}", what));
}

/// The child's loop: serve the parent until it shuts down or goes away. Rank `rank` of
/// options.tensor_parallel_size (group: their shared memory when more than one); rank 0 alone
/// writes the step results, and any rank's error aborts the group (its peers would otherwise
/// wait for it in a collective).
void serve(int fd, char* shared, const ExecutorOptions& options, int rank,
           const std::shared_ptr<ShmGroup>& group) {
  const int world = options.tensor_parallel_size;
  ExecutorOptions rank_options = options;
  std::unique_ptr<ShmCommunicator> comm;
  if (world > 1) {
    if (rank != 0) spdlog::set_level(spdlog::level::warn);  // rank 0 logs for the group
    comm = std::make_unique<ShmCommunicator>(group, rank);
    rank_options.load.tensor_parallel = {rank, world, comm.get(),
                                         options.decode_context_parallel_size};
    if (rank_options.num_threads == 0) {  // all cores: shared among the ranks
      const auto cores = static_cast<int>(std::thread::hardware_concurrency());
      rank_options.num_threads = std::max(1, cores / world);
    }
  }
  std::unique_ptr<InProcessExecutor> ex;
  try {
    ex = std::make_unique<InProcessExecutor>(rank_options);
    codec::Writer w;
    codec::write_info(w, ex->info());
    send_message(fd, Msg::kReady, w.bytes());
  } catch (const std::exception& e) {
    if (comm) comm->abort(e.what());
    send_message(fd, Msg::kError, error_payload(e));
    return;
  }
  Msg type{};
  std::string in;
  while (receive_message(fd, type, in, /*allow_eof=*/true)) {
    if (type == Msg::kShutdown) return;
    codec::Reader r(in.data(), in.size());
    codec::Writer w;
    try {
      switch (type) {
        case Msg::kDeviceMemory: {
          const auto memory = ex->device_memory();
          w.put<bool>(memory.has_value());
          w.put<uint64_t>(memory ? memory->first : 0);
          w.put<uint64_t>(memory ? memory->second : 0);
          break;
        }
        case Msg::kProfile: {
          const auto max_tokens = r.get<int64_t>();
          const auto max_num_seqs = r.get<int32_t>();
          const auto max_model_len = r.get<int64_t>();
          const auto block_size = r.get<int32_t>();
          w.put<double>(ex->profile_run(max_tokens, max_num_seqs, max_model_len, block_size));
          break;
        }
        case Msg::kInitKv: {
          const auto num_blocks = r.get<int64_t>();
          ex->init_kv_cache(num_blocks, r.get<int32_t>());
          break;
        }
        case Msg::kCapture:
          w.put<int32_t>(ex->capture_graphs(r.get<int32_t>()));
          break;
        case Msg::kLaunch: {
          ex->launch(codec::read_plan(r));
          const StepResult result = ex->wait();
          const size_t logits_bytes = result.logits.size() * sizeof(float);
          const size_t hidden_offset = (logits_bytes + 4095) / 4096 * 4096;
          PAGODA_CHECK(hidden_offset + result.hidden_states.size() * sizeof(float) <= kSharedBytes,
                       "a step's results outgrow the {} GiB of shared memory", kSharedBytes >> 30);
          if (rank == 0 && !result.logits.empty())
            std::memcpy(shared, result.logits.data(), logits_bytes);
          if (rank == 0 && !result.hidden_states.empty()) {
            std::memcpy(shared + hidden_offset, result.hidden_states.data(),
                        result.hidden_states.size() * sizeof(float));
          }
          codec::write_result(w, result);
          type = Msg::kResult;
          break;
        }
        case Msg::kExport: {
          const auto block = r.get<int32_t>();
          const auto size = r.get<uint64_t>();
          std::vector<std::byte> bytes(size);
          ex->export_kv_block(block, bytes);
          w.bytes().append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          break;
        }
        case Msg::kImport: {
          const auto block = r.get<int32_t>();
          const auto bytes = r.get_vector<std::byte>();
          ex->import_kv_block(block, bytes);
          break;
        }
        case Msg::kSaveBlocks: {
          const auto blocks = r.get_vector<int32_t>();
          const auto block_bytes = r.get<uint64_t>();
          PAGODA_CHECK(blocks.empty() || block_bytes <= (size_t{1} << 36) / blocks.size(),
                       "save_kv_blocks: {} blocks of {} bytes", blocks.size(), block_bytes);
          std::string& out = w.bytes();
          out.resize(blocks.size() * block_bytes);
          ex->save_kv_blocks(blocks, std::as_writable_bytes(std::span(out)));
          break;
        }
        case Msg::kLoadBlocks: {
          const auto blocks = r.get_vector<int32_t>();
          const auto bytes = r.get_vector<std::byte>();
          ex->load_kv_blocks(blocks, bytes);
          break;
        }
        default:
          throw Internal(fmt::format("unknown message {}", static_cast<uint32_t>(type)));
      }
      send_message(fd, type == Msg::kResult ? Msg::kResult : Msg::kOk, w.bytes());
    } catch (const std::exception& e) {
      if (comm) comm->abort(e.what());
      send_message(fd, Msg::kError, error_payload(e));
    }
  }
}

/// A worker process: rank `rank` of the group, its socket.
struct Worker {
  int fd = -1;
  pid_t pid = 0;
  bool reaped = false;
};

/// The parent's side: every call goes to each rank and waits for each rank's reply; rank 0's
/// reply is the answer (the ranks compute the same results). With several ranks any failure is
/// the group's: a rank that exits, or an error (which aborted the group's collectives), stops
/// the executor, and every later call throws the first failure's message, naming the rank.
class ProcessExecutor final : public Executor {
 public:
  ProcessExecutor(const ExecutorOptions& options, std::vector<Worker> workers, char* shared,
                  std::shared_ptr<ShmGroup> group)
      : workers_(std::move(workers)), shared_(shared), group_(std::move(group)) {
    const std::string ready = collect(Msg::kReady);  // or a worker's load error
    codec::Reader r(ready.data(), ready.size());
    info_ = codec::read_info(r);
    info_.tensor_parallel_size = static_cast<int>(workers_.size());
    config_ = load_model_config(options.model_dir);
  }

  ~ProcessExecutor() override {
    try {
      if (in_flight_ && recorded_failure().empty()) (void)wait();
    } catch (const std::exception& e) {
      spdlog::debug("worker shutdown: {}", e.what());
    }
    for (Worker& w : workers_) {
      try {
        send_message(w.fd, Msg::kShutdown, "");
      } catch (const std::exception& e) {
        spdlog::debug("worker shutdown: {}", e.what());
      }
      ::close(w.fd);
    }
    for (Worker& w : workers_) reap(w);
    ::munmap(shared_, kSharedBytes);
  }

  const ModelConfig& config() const override { return config_; }
  const ExecutorInfo& info() const override { return info_; }

  std::optional<std::pair<size_t, size_t>> device_memory() override {
    const std::string reply = call(Msg::kDeviceMemory, "");
    codec::Reader r(reply.data(), reply.size());
    const bool has = r.get<bool>();
    const auto free = r.get<uint64_t>();
    const auto total = r.get<uint64_t>();
    if (!has) return std::nullopt;
    return std::make_pair(static_cast<size_t>(free), static_cast<size_t>(total));
  }

  double profile_run(int64_t max_tokens, int max_num_seqs, int64_t max_model_len,
                     int block_size) override {
    codec::Writer w;
    w.put<int64_t>(max_tokens);
    w.put<int32_t>(max_num_seqs);
    w.put<int64_t>(max_model_len);
    w.put<int32_t>(block_size);
    const std::string reply = call(Msg::kProfile, w.bytes());
    codec::Reader r(reply.data(), reply.size());
    return r.get<double>();
  }

  void init_kv_cache(int64_t num_blocks, int block_size) override {
    codec::Writer w;
    w.put<int64_t>(num_blocks);
    w.put<int32_t>(block_size);
    (void)call(Msg::kInitKv, w.bytes());
  }

  int capture_graphs(int max_num_seqs) override {
    codec::Writer w;
    w.put<int32_t>(max_num_seqs);
    const std::string reply = call(Msg::kCapture, w.bytes());
    codec::Reader r(reply.data(), reply.size());
    return r.get<int32_t>();
  }

  void launch(StepPlan plan) override {
    PAGODA_CHECK(!in_flight_, "launch while a step is in flight");
    throw_if_failed();
    if (plan.fill_late) {  // no overlap across the process boundary: complete the rows first
      plan.fill_late(plan);
      plan.fill_late = nullptr;
    }
    codec::Writer w;
    codec::write_plan(w, plan);
    send_all(Msg::kLaunch, w.bytes());
    in_flight_ = true;
  }

  StepResult wait() override {
    PAGODA_CHECK(in_flight_, "wait without launch");
    in_flight_ = false;
    const std::string payload = collect(Msg::kResult);
    codec::Reader r(payload.data(), payload.size());
    codec::ResultHeader h = codec::read_result(r);
    auto* base = reinterpret_cast<float*>(shared_);
    const size_t hidden_offset = (h.logits_elems * sizeof(float) + 4095) / 4096 * 4096;
    h.result.logits = {base, h.logits_elems};
    h.result.hidden_states = {reinterpret_cast<float*>(shared_ + hidden_offset), h.hidden_elems};
    return std::move(h.result);
  }

  bool in_flight() const override { return in_flight_; }

  void export_kv_block(int32_t block, std::span<std::byte> out) override {
    one_rank("export_kv_block");
    codec::Writer w;
    w.put<int32_t>(block);
    w.put<uint64_t>(out.size());
    const std::string reply = call(Msg::kExport, w.bytes());
    PAGODA_CHECK(reply.size() == out.size(), "export_kv_block: {} bytes for {}", reply.size(),
                 out.size());
    std::memcpy(out.data(), reply.data(), out.size());
  }

  void import_kv_block(int32_t block, std::span<const std::byte> in) override {
    one_rank("import_kv_block");
    codec::Writer w;
    w.put<int32_t>(block);
    w.put_vector(std::vector<std::byte>(in.begin(), in.end()));
    (void)call(Msg::kImport, w.bytes());
  }

  void save_kv_blocks(std::span<const int32_t> blocks, std::span<std::byte> out) override {
    if (blocks.empty()) return;
    one_rank("save_kv_blocks");
    codec::Writer w;
    w.put_vector(std::vector<int32_t>(blocks.begin(), blocks.end()));
    w.put<uint64_t>(out.size() / blocks.size());
    const std::string reply = call(Msg::kSaveBlocks, w.bytes());
    PAGODA_CHECK(reply.size() == out.size(), "save_kv_blocks: {} bytes for {}", reply.size(),
                 out.size());
    std::memcpy(out.data(), reply.data(), out.size());
  }

  void load_kv_blocks(std::span<const int32_t> blocks, std::span<const std::byte> in) override {
    if (blocks.empty()) return;
    one_rank("load_kv_blocks");
    codec::Writer w;
    w.put_vector(std::vector<int32_t>(blocks.begin(), blocks.end()));
    w.put<uint64_t>(in.size());
    w.bytes().append(reinterpret_cast<const char*>(in.data()), in.size());
    (void)call(Msg::kLoadBlocks, w.bytes());
  }

 private:
  [[nodiscard]] int world() const { return static_cast<int>(workers_.size()); }

  /// KV block copies move one rank's bytes: refused with several ranks (the engine refuses the
  /// host KV tier with -tp N before it gets here).
  void one_rank(const char* what) const {
    if (world() > 1) {
      throw InvalidArgument(fmt::format(
          "{}: KV block copies are not supported with --tensor-parallel-size {}", what, world()));
    }
  }

  void throw_if_failed() const {
    if (std::string f = recorded_failure(); !f.empty()) throw Internal(f);
  }

  /// Also notices a rank that exited between steps (an idle engine sends it nothing): waitid
  /// with WNOWAIT looks at a child's exit without reaping it. That finding is reported, not
  /// recorded: the engine's own calls read a dying rank's error message first (a rank that fails
  /// to load reports why, then exits), and record that.
  [[nodiscard]] std::string failure() const override {
    if (std::string f = recorded_failure(); !f.empty() || world() == 1) return f;
    for (size_t r = 0; r < workers_.size(); ++r) {
      siginfo_t info{};
      const pid_t pid = workers_[r].pid;
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid) {
        const std::string how = info.si_code == CLD_EXITED
                                    ? fmt::format(", exit status {}", info.si_status)
                                    : fmt::format(", killed by signal {}", info.si_status);
        return fmt::format("tensor-parallel rank {} (pid {}) exited{}; the engine cannot go on", r,
                           pid, how);
      }
    }
    return {};
  }
  [[nodiscard]] std::string recorded_failure() const {
    std::lock_guard lock(failure_mutex_);
    return failure_;
  }
  /// The group's failure: the first one set stays.
  void fail(std::string why) {
    std::lock_guard lock(failure_mutex_);
    if (failure_.empty()) failure_ = std::move(why);
  }

  void send_all(Msg type, const std::string& payload) {
    throw_if_failed();
    for (int r = 0; r < world(); ++r) {
      try {
        send_message(workers_[static_cast<size_t>(r)].fd, type, payload);
      } catch (const Internal&) {
        rank_exited(r);
      }
    }
  }

  /// A rank's socket closed: the group fails naming it (with its exit status when it is known).
  [[noreturn]] void rank_exited(int r) {
    Worker& w = workers_[static_cast<size_t>(r)];
    std::string how;
    int status = 0;
    // Its socket closes only as it exits (serve() returns into _exit), so this wait is short.
    if (!w.reaped && ::waitpid(w.pid, &status, 0) == w.pid) {
      w.reaped = true;
      how = WIFSIGNALED(status) ? fmt::format(", killed by signal {}", WTERMSIG(status))
                                : fmt::format(", exit status {}", WEXITSTATUS(status));
    }
    if (world() == 1) throw Internal("the worker process exited (its socket closed)");
    fail(fmt::format("tensor-parallel rank {} (pid {}) exited{}; the engine cannot go on", r, w.pid,
                     how));
    throw Internal(recorded_failure());
  }

  /// Each rank's reply, which must be `want`; returns rank 0's. A rank's error is rethrown (the
  /// first in rank order; with several ranks it stops the group).
  std::string collect(Msg want) {
    throw_if_failed();
    std::string answer, error;
    int error_rank = -1, exited = -1;
    // The replies in the order they come (poll), so that a rank that exits is seen while another
    // still waits for it: a rank in a collective with a dead or failed peer either fails it (the
    // CPU group's and the host-staged communicator's liveness checks and abort) or, in an NCCL
    // collective, waits for ever; once a rank has exited or failed, the ranks still silent after
    // kSurvivorGraceMs are killed.
    std::vector<bool> replied(workers_.size(), false);
    for (size_t left = workers_.size(); left > 0;) {
      std::vector<pollfd> fds;
      std::vector<int> ranks;
      for (int r = 0; r < world(); ++r) {
        if (replied[static_cast<size_t>(r)]) continue;
        fds.push_back({workers_[static_cast<size_t>(r)].fd, POLLIN, 0});
        ranks.push_back(r);
      }
      const bool failing = exited >= 0 || error_rank >= 0;
      const int ready = ::poll(fds.data(), fds.size(), failing ? kSurvivorGraceMs : -1);
      if (ready < 0 && errno == EINTR) continue;
      PAGODA_CHECK(ready >= 0, "poll of the workers' sockets: {}", std::strerror(errno));
      if (ready == 0) {  // a rank exited or failed and these are stuck waiting for it
        for (const int r : ranks) {
          spdlog::error("tensor-parallel rank {} (pid {}) is stuck after rank {} {}: killed", r,
                        workers_[static_cast<size_t>(r)].pid, exited >= 0 ? exited : error_rank,
                        exited >= 0 ? "exited" : "failed");
          ::kill(workers_[static_cast<size_t>(r)].pid, SIGKILL);
        }
        break;
      }
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const int r = ranks[i];
        replied[static_cast<size_t>(r)] = true;
        --left;
        Msg type{};
        std::string payload;
        try {
          (void)receive_message(fds[i].fd, type, payload);
        } catch (const Internal&) {
          if (exited < 0 || r < exited) exited = r;
          continue;
        }
        if (type == Msg::kError) {
          if (error_rank < 0 || r < error_rank) {
            error_rank = r;
            error = std::move(payload);
          }
          continue;
        }
        PAGODA_CHECK(type == want, "worker {}: message {} where {} was expected", r,
                     static_cast<uint32_t>(type), static_cast<uint32_t>(want));
        if (r == 0) answer = std::move(payload);
      }
    }
    if (exited >= 0) rank_exited(exited);
    if (error_rank >= 0) {
      if (world() == 1) rethrow(error);
      try {
        rethrow(error);
      } catch (const std::exception& e) {
        fail(fmt::format("tensor-parallel rank {}: {}", error_rank, e.what()));
        throw;
      }
    }
    return answer;
  }

  std::string call(Msg type, const std::string& payload) {
    PAGODA_CHECK(!in_flight_, "a worker call while a step is in flight");
    send_all(type, payload);
    return collect(Msg::kOk);
  }

  /// Waits for a worker to exit (it does once the socket closes), killing it after 30 s.
  static void reap(Worker& w) {
    if (w.reaped) return;
    for (int i = 0; i < 3000; ++i) {
      if (::waitpid(w.pid, nullptr, WNOHANG) != 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(w.pid, SIGKILL);
    (void)::waitpid(w.pid, nullptr, 0);
  }

  ModelConfig config_;
  ExecutorInfo info_;
  std::vector<Worker> workers_;  // [tensor_parallel_size], by rank
  char* shared_;
  std::shared_ptr<ShmGroup> group_;   // null with one rank
  mutable std::mutex failure_mutex_;  // failure_ is read by other threads (serve's watch)
  std::string failure_;               // several ranks: the group's failure, empty while none
  bool in_flight_ = false;
};

}  // namespace

std::unique_ptr<Executor> start_process_executor(const ExecutorOptions& options) {
  const int world = options.tensor_parallel_size;
  PAGODA_CHECK(world >= 1 && world <= ShmGroup::kMaxRanks, "{} worker processes", world);
  const int memfd = ::memfd_create("pagoda-step-results", MFD_CLOEXEC);
  if (memfd < 0 || ::ftruncate(memfd, static_cast<off_t>(kSharedBytes)) != 0) {
    if (memfd >= 0) ::close(memfd);
    throw Internal(fmt::format("shared memory for the worker: {}", std::strerror(errno)));
  }
  void* shared =
      ::mmap(nullptr, kSharedBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd, 0);
  ::close(memfd);  // the mapping keeps it
  if (shared == MAP_FAILED) {
    throw Internal(fmt::format("mmap of the worker's shared memory: {}", std::strerror(errno)));
  }
  const std::shared_ptr<ShmGroup> group =
      world > 1 ? ShmGroup::create(world, kCollectiveSlotBytes) : nullptr;
  std::vector<Worker> workers;
  auto undo = [&] {  // closing a socket ends its worker
    for (Worker& w : workers) {
      ::close(w.fd);
      (void)::waitpid(w.pid, nullptr, 0);
    }
    ::munmap(shared, kSharedBytes);
  };
  for (int rank = 0; rank < world; ++rank) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      const std::string what = std::strerror(errno);
      undo();
      throw Internal(fmt::format("socketpair: {}", what));
    }
    std::fflush(nullptr);  // the child must not write the parent's buffered output again
    const pid_t pid = ::fork();
    if (pid < 0) {
      const std::string what = std::strerror(errno);
      ::close(fds[0]);
      ::close(fds[1]);
      undo();
      throw Internal(fmt::format("fork: {}", what));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(fds[0]);
      for (const Worker& w : workers) ::close(w.fd);  // the earlier ranks' parent ends
      try {
        serve(fds[1], static_cast<char*>(shared), options, rank, group);
      } catch (const std::exception& e) {
        spdlog::error("worker {}: {}", rank, e.what());
      }
      ::_exit(0);  // no atexit handlers or destructors of the parent's objects
    }
    ::close(fds[1]);
    if (group) group->set_pid(rank, pid);
    workers.push_back({fds[0], pid});
  }
  try {
    return std::make_unique<ProcessExecutor>(options, workers, static_cast<char*>(shared), group);
  } catch (...) {
    undo();
    throw;
  }
}

}  // namespace pagoda
