#pragma once
// Model arguments that name a Hugging Face Hub repository (`pagoda serve org/name`): the HF_*
// environment variables of huggingface_hub, read here once into a hub::HubConfig, and the
// resolution of --model / --tokenizer to a local directory (hub/hub.h does the work).
#include <string>

#include "hub/hub.h"
#include "pagoda/engine_args.h"

namespace pagoda::cli {

struct EngineFlags;

/// huggingface_hub's settings from the environment:
///   cache   --download-dir, else HF_HUB_CACHE (or the older HUGGINGFACE_HUB_CACHE), else
///           $HF_HOME/hub, HF_HOME defaulting to $XDG_CACHE_HOME/huggingface, then
///           ~/.cache/huggingface
///   HF_ENDPOINT (default https://huggingface.co), HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE:
///   1/ON/YES/TRUE), HF_HUB_DOWNLOAD_TIMEOUT (seconds of silence, default 60)
///   token   HF_TOKEN (or HUGGING_FACE_HUB_TOKEN), else the file HF_TOKEN_PATH (default
///           $HF_HOME/token, which `huggingface-cli login` writes)
/// A progress bar goes to stderr when it is a terminal, log lines otherwise; none with
/// HF_HUB_DISABLE_PROGRESS_BARS.
[[nodiscard]] hub::HubConfig hub_config_from_env(const std::string& download_dir);

/// The local directory for a model argument: the argument itself when it exists on disk (a
/// --revision is then ignored, with a warning), the Hub snapshot when it has the shape of a repo
/// id, and otherwise the argument unchanged (the loader then says it does not exist).
/// `weights`: whether the safetensors are needed (not for --load-format dummy or a tokenizer).
[[nodiscard]] std::string resolve_model_argument(const std::string& argument,
                                                 const std::string& revision, bool weights,
                                                 const hub::HubConfig& config);

/// args.model and args.tokenizer through resolve_model_argument, with --revision,
/// --tokenizer-revision and --download-dir of `flags`.
void resolve_model_sources(EngineArgs& args, const EngineFlags& flags);

}  // namespace pagoda::cli
