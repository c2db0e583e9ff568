#include "runtime/process_executor.h"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "core/logging.h"
#include "core/status.h"
#include "runtime/in_process_executor.h"
#include "runtime/step_codec.h"

namespace pagoda {
namespace {

// Virtual size of the shared result memory: sparse, so only the pages a step writes exist.
constexpr size_t kSharedBytes = size_t{64} << 30;

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

/// The child's loop: serve the parent until it shuts down or goes away.
void serve(int fd, char* shared, const ExecutorOptions& options) {
  std::unique_ptr<InProcessExecutor> ex;
  try {
    ex = std::make_unique<InProcessExecutor>(options);
    codec::Writer w;
    codec::write_info(w, ex->info());
    send_message(fd, Msg::kReady, w.bytes());
  } catch (const std::exception& e) {
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
          if (!result.logits.empty()) std::memcpy(shared, result.logits.data(), logits_bytes);
          if (!result.hidden_states.empty()) {
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
      send_message(fd, Msg::kError, error_payload(e));
    }
  }
}

/// The parent's side.
class ProcessExecutor final : public Executor {
 public:
  ProcessExecutor(const ExecutorOptions& options, int fd, pid_t pid, char* shared)
      : fd_(fd), pid_(pid), shared_(shared) {
    const std::string ready = expect(Msg::kReady);  // or the worker's load error
    codec::Reader r(ready.data(), ready.size());
    info_ = codec::read_info(r);
    config_ = load_model_config(options.model_dir);
  }

  ~ProcessExecutor() override {
    try {
      if (in_flight_) (void)wait();
      send_message(fd_, Msg::kShutdown, "");
    } catch (const std::exception& e) {
      spdlog::debug("worker shutdown: {}", e.what());
    }
    ::close(fd_);
    reap();
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
    if (plan.fill_late) {  // no overlap across the process boundary: complete the rows first
      plan.fill_late(plan);
      plan.fill_late = nullptr;
    }
    codec::Writer w;
    codec::write_plan(w, plan);
    send_message(fd_, Msg::kLaunch, w.bytes());
    in_flight_ = true;
  }

  StepResult wait() override {
    PAGODA_CHECK(in_flight_, "wait without launch");
    in_flight_ = false;
    const std::string payload = expect(Msg::kResult);
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
    codec::Writer w;
    w.put<int32_t>(block);
    w.put<uint64_t>(out.size());
    const std::string reply = call(Msg::kExport, w.bytes());
    PAGODA_CHECK(reply.size() == out.size(), "export_kv_block: {} bytes for {}", reply.size(),
                 out.size());
    std::memcpy(out.data(), reply.data(), out.size());
  }

  void import_kv_block(int32_t block, std::span<const std::byte> in) override {
    codec::Writer w;
    w.put<int32_t>(block);
    w.put_vector(std::vector<std::byte>(in.begin(), in.end()));
    (void)call(Msg::kImport, w.bytes());
  }

  void save_kv_blocks(std::span<const int32_t> blocks, std::span<std::byte> out) override {
    if (blocks.empty()) return;
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
    codec::Writer w;
    w.put_vector(std::vector<int32_t>(blocks.begin(), blocks.end()));
    w.put<uint64_t>(in.size());
    w.bytes().append(reinterpret_cast<const char*>(in.data()), in.size());
    (void)call(Msg::kLoadBlocks, w.bytes());
  }

 private:
  /// The next message, which must be `want` (an error message is rethrown).
  std::string expect(Msg want) {
    Msg type{};
    std::string payload;
    (void)receive_message(fd_, type, payload);
    if (type == Msg::kError) rethrow(payload);
    PAGODA_CHECK(type == want, "worker: message {} where {} was expected",
                 static_cast<uint32_t>(type), static_cast<uint32_t>(want));
    return payload;
  }

  std::string call(Msg type, const std::string& payload) {
    PAGODA_CHECK(!in_flight_, "a worker call while a step is in flight");
    send_message(fd_, type, payload);
    return expect(Msg::kOk);
  }

  /// Waits for the worker to exit (it does once the socket closes), killing it after 30 s.
  void reap() {
    for (int i = 0; i < 3000; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) != 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    (void)::waitpid(pid_, nullptr, 0);
  }

  ModelConfig config_;
  ExecutorInfo info_;
  int fd_;
  pid_t pid_;
  char* shared_;
  bool in_flight_ = false;
};

}  // namespace

std::unique_ptr<Executor> start_process_executor(const ExecutorOptions& options) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    throw Internal(fmt::format("socketpair: {}", std::strerror(errno)));
  const int memfd = ::memfd_create("pagoda-step-results", MFD_CLOEXEC);
  if (memfd < 0 || ::ftruncate(memfd, static_cast<off_t>(kSharedBytes)) != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    if (memfd >= 0) ::close(memfd);
    throw Internal(fmt::format("shared memory for the worker: {}", std::strerror(errno)));
  }
  void* shared =
      ::mmap(nullptr, kSharedBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd, 0);
  ::close(memfd);  // the mapping keeps it
  if (shared == MAP_FAILED) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Internal(fmt::format("mmap of the worker's shared memory: {}", std::strerror(errno)));
  }
  std::fflush(nullptr);  // the child must not write the parent's buffered output again
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    ::munmap(shared, kSharedBytes);
    throw Internal(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(fds[0]);
    try {
      serve(fds[1], static_cast<char*>(shared), options);
    } catch (const std::exception& e) {
      spdlog::error("worker: {}", e.what());
    }
    ::_exit(0);  // no atexit handlers or destructors of the parent's objects
  }
  ::close(fds[1]);
  try {
    return std::make_unique<ProcessExecutor>(options, fds[0], pid, static_cast<char*>(shared));
  } catch (...) {
    ::close(fds[0]);
    (void)::waitpid(pid, nullptr, 0);
    ::munmap(shared, kSharedBytes);
    throw;
  }
}

}  // namespace pagoda
