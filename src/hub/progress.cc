#include "hub/progress.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

namespace pagoda::hub {

std::string format_bytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string progress_line(const DownloadProgress& p) {
  std::string line = p.filename + "  " + format_bytes(p.bytes);
  if (p.total) {
    const double pct =
        *p.total > 0 ? 100.0 * static_cast<double>(p.bytes) / static_cast<double>(*p.total) : 100.0;
    line += fmt::format(" / {}  {:3.0f}%", format_bytes(*p.total), pct);
  }
  if (p.elapsed_s > 0 && p.bytes >= p.resumed_from) {
    const double rate = static_cast<double>(p.bytes - p.resumed_from) / p.elapsed_s;
    line += fmt::format("  {}/s", format_bytes(static_cast<uint64_t>(rate)));
  }
  if (p.resumed_from > 0) line += fmt::format("  (resumed at {})", format_bytes(p.resumed_from));
  return line;
}

ProgressCallback make_progress_printer(std::FILE* out, bool tty, double log_interval_s) {
  struct State {
    std::string file;
    double last_log = 0;
    size_t width = 0;
  };
  auto state = std::make_shared<State>();
  return [out, tty, log_interval_s, state](const DownloadProgress& p) {
    if (p.filename != state->file) {
      state->file = p.filename;
      state->last_log = 0;
      state->width = 0;
    }
    const std::string line = progress_line(p);
    if (tty) {
      std::string bar;
      if (p.total && *p.total > 0) {
        constexpr int kWidth = 24;
        const int filled = static_cast<int>(
            kWidth * std::min(1.0, static_cast<double>(p.bytes) / static_cast<double>(*p.total)));
        bar.reserve(kWidth + 3);
        bar.push_back('[');
        bar.append(static_cast<size_t>(filled), '#');
        bar.append(static_cast<size_t>(kWidth - filled), '.');
        bar.append("] ");
      }
      const std::string shown = bar + line;
      const size_t pad = state->width > shown.size() ? state->width - shown.size() : 0;
      state->width = shown.size();
      std::fprintf(out, "\r%s%*s%s", shown.c_str(), static_cast<int>(pad), "", p.done ? "\n" : "");
      std::fflush(out);
    } else if (p.done || p.elapsed_s - state->last_log >= log_interval_s) {
      state->last_log = p.elapsed_s;
      spdlog::info("download {}{}", line, p.done ? "  done" : "");
    }
  };
}

}  // namespace pagoda::hub
