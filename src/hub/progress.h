#pragma once
// How a download shows its progress on a terminal or in a log.
#include <cstdint>
#include <cstdio>
#include <string>

#include "hub/hub.h"

namespace pagoda::hub {

/// "1.5 GiB", "12.0 MiB", "512 B".
[[nodiscard]] std::string format_bytes(uint64_t bytes);

/// One line of progress: "model.safetensors  12.0 MiB / 50.0 MiB  24%  5.1 MiB/s", the rate
/// over this run's bytes (a resumed part excluded).
[[nodiscard]] std::string progress_line(const DownloadProgress& p);

/// A callback that redraws one line per file on `out` when `tty` (a progress bar on stderr), and
/// otherwise logs a line when a file ends and every `log_interval_s` while it downloads.
[[nodiscard]] ProgressCallback make_progress_printer(std::FILE* out, bool tty,
                                                     double log_interval_s = 10);

}  // namespace pagoda::hub
