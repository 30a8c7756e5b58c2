// The on-disk cache of validation outcomes, so a restart costs milliseconds.
//
// One JSON file per key under <dir>/attention-<hash>.json, where the key is the build id, the
// device fingerprint and the attention shape (with dtypes). A changed key means a new file, so the
// backends are validated again. A corrupt or foreign file is ignored with a warning and rewritten.
// Pass, mismatch and crash outcomes are kept; timeouts and errors (often transient) are not.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "attn/select/validation.h"
#include "attn/select/attention_selection.h"

namespace spindle::attn {

class ValidationCache {
 public:
  ValidationCache(std::filesystem::path dir, std::string key);

  // $SPINDLE_CACHE_DIR, else $XDG_CACHE_HOME/spindle, else $HOME/.cache/spindle.
  static std::filesystem::path default_dir();
  // The key for this build, device and shape.
  static std::string make_key(std::string_view build_id, std::string_view device_fingerprint,
                              const attn::AttentionShape& shape);

  const std::filesystem::path& path() const { return path_; }
  // A cached outcome; with timing, only one that was timed.
  std::optional<attn::ValidationOutcome> find(const std::string& backend, bool timing) const;
  void store(const std::string& backend, const attn::ValidationOutcome& outcome);
  // Writes the file atomically (temp file + rename); a failure is logged, never fatal.
  void save() const;

  // Wraps a validator: answers from the cache when it can, remembers new outcomes.
  BackendValidator wrap(BackendValidator inner);
  int num_hits() const { return num_hits_; }
  int num_misses() const { return num_misses_; }

 private:
  void load();

  std::filesystem::path path_;
  std::string key_;
  std::map<std::string, attn::ValidationOutcome> outcomes_;
  int num_hits_ = 0;
  int num_misses_ = 0;
};

}  // namespace spindle::attn
