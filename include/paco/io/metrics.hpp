#pragma once
// metrics_log: one JSON object per line (JSONL), flushed per record, for plotting and tooling.

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "paco/core/error.hpp"

namespace paco::io {

class metrics_log {
 public:
  metrics_log() = default;
  // Opens path for appending (or truncating). Errors: io.
  static result<metrics_log> open(const std::filesystem::path& path, bool append = false) {
    std::error_code ec;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    metrics_log m;
    m.f_ = std::fopen(path.c_str(), append ? "a" : "w");
    if (!m.f_) return error(errc::io, "cannot open metrics file '" + path.string() + "'");
    return m;
  }
  metrics_log(metrics_log&& o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
  metrics_log& operator=(metrics_log&& o) noexcept {
    std::swap(f_, o.f_);
    return *this;
  }
  ~metrics_log() {
    if (f_) std::fclose(f_);
  }
  // Appends one record. No-op on a default-constructed log.
  void write(const nlohmann::json& record) {
    if (!f_) return;
    std::string s = record.dump();
    s += '\n';
    std::fwrite(s.data(), 1, s.size(), f_);
    std::fflush(f_);
  }

 private:
  std::FILE* f_ = nullptr;
};

}  // namespace paco::io
