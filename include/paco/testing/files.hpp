#pragma once
// Files for tests: a fresh directory of the test's own, and whole files written and read back.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace paco::testing {

// Requires: name is a file name (no '/'). Ensures: an empty directory
// <temp>/paco_test_<name>_<pid> exists (whatever was there before is removed) and is returned.
inline std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("paco_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// Ensures: p holds exactly `text` (its parent directories created).
inline void write_file(const std::filesystem::path& p, const std::string& text) {
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// Ensures: p's bytes ("" when it cannot be read).
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace paco::testing
