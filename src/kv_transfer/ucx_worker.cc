#include "kv_transfer/ucx_worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/status.h"

namespace pagoda::kv_transfer {

UcxWorker::UcxWorker(const UcxOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) {
    throw Error(fmt::format("UCX: cannot read its configuration ({})", ucs_status_string(status)));
  }
  if (!options.tls.empty()) {
    status = ucp_config_modify(config, "TLS", options.tls.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      throw InvalidArgument(fmt::format("UCX transports (ucx_tls) '{}' refused: {}", options.tls,
                                        ucs_status_string(status)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.name = "pagoda-kv-transfer";
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) {
    throw InvalidArgument(fmt::format("UCX cannot start with transports (ucx_tls) '{}': {}",
                                      options.tls.empty() ? "UCX's default" : options.tls,
                                      ucs_status_string(status)));
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(context_, &wp, &worker_);
  if (status == UCS_OK) status = ucp_worker_get_efd(worker_, &worker_fd_);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (status != UCS_OK || wake_fd_ < 0) {
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw Error(fmt::format("UCX: cannot create a worker with an event fd ({})",
                            ucs_status_string(status)));
  }
}

UcxWorker::~UcxWorker() {
  stop();
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
  ::close(wake_fd_);
}

void UcxWorker::set_am_handler(unsigned id, ucp_am_recv_callback_t cb, void* arg) {
  ucp_am_handler_param_t p{};
  p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                 UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  p.id = id;
  p.flags = UCP_AM_FLAG_WHOLE_MSG;
  p.cb = cb;
  p.arg = arg;
  const ucs_status_t status = ucp_worker_set_am_recv_handler(worker_, &p);
  if (status != UCS_OK) {
    throw Error(
        fmt::format("UCX: cannot set an active message handler ({})", ucs_status_string(status)));
  }
}

void UcxWorker::start(std::function<Clock::time_point()> tick) {
  tick_ = std::move(tick);
  thread_ = std::thread([this] { loop(); });
}

void UcxWorker::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  (void)::write(wake_fd_, &one, sizeof one);
}

void UcxWorker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    tasks_.clear();
  }
  const uint64_t one = 1;
  (void)::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void UcxWorker::loop() {
  for (;;) {
    std::vector<std::function<void()>> tasks;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      tasks.swap(tasks_);
    }
    for (auto& task : tasks) task();
    while (ucp_worker_progress(worker_) != 0) {
    }
    const Clock::time_point next = tick_();
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      if (!tasks_.empty()) continue;
    }
    // Sleep until the worker has an event, a task is posted, or `tick` is due. Example: tick
    // due in 2.3 ms sleeps 3 ms; one due already does not sleep. At most a second at a time.
    const auto until = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
    wait(std::clamp(until, std::chrono::milliseconds(0), std::chrono::milliseconds(1000)));
  }
}

void UcxWorker::wait(std::chrono::milliseconds timeout) {
  if (timeout.count() == 0) return;
  // UCS_ERR_BUSY: events arrived since the last progress; progress again instead of sleeping.
  if (ucp_worker_arm(worker_) != UCS_OK) return;
  pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  (void)::poll(fds, 2, static_cast<int>(timeout.count()));
  uint64_t count = 0;
  (void)::read(wake_fd_, &count, sizeof count);
}

void UcxWorker::drain(const std::function<bool()>& idle, int max_rounds) {
  for (int idle_rounds = 0; !idle() && idle_rounds < max_rounds;) {
    if (ucp_worker_progress(worker_) != 0) {
      idle_rounds = 0;
      continue;
    }
    ++idle_rounds;
    wait(std::chrono::milliseconds(5));
  }
}

namespace {

void on_request_done(void* request, ucs_status_t status, void* user_data) {
  auto* then = static_cast<std::function<void(ucs_status_t)>*>(user_data);
  ucp_request_free(request);
  (*then)(status);
  delete then;
}

}  // namespace

void ucx_call(ucp_request_param_t base,
              const std::function<ucs_status_ptr_t(const ucp_request_param_t&)>& start,
              std::function<void(ucs_status_t)> then) {
  auto* owned = new std::function<void(ucs_status_t)>(std::move(then));
  base.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  base.cb.send = on_request_done;
  base.user_data = owned;
  const ucs_status_ptr_t request = start(base);
  if (UCS_PTR_IS_PTR(request)) return;  // on_request_done runs it
  (*owned)(UCS_PTR_STATUS(request));    // UCS_OK when NULL: it ended at once
  delete owned;
}

}  // namespace pagoda::kv_transfer
