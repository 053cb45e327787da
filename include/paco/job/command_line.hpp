#pragma once
// command_line: the flags of a program's DiPaCo job roles (job/main.hpp run_role runs them), and
// the library's own parser of them (run_main's). A program with its own parser (paco_train's
// CLI11) fills the same struct. Light on purpose: no role is included here.

#include <cstdlib>
#include <string>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::job {

// The roles' flags.
struct command_line {
  std::string role = "launcher";  // launcher, prepare, store, worker
  int worker = 0, stage = 0;
  std::string run_dir, export_dir, peers;
  std::vector<std::string> score;  // --score (repeatable)
  bool resume = false, fresh = false;
  bool results = false;  // --results
};

// Parses argv[1 …]. Errors: invalid_argument naming the flag (unknown, missing its value, a
// role that is not one, a worker id that is not a number).
inline result<command_line> parse_command_line(int argc, const char* const* argv) {
  command_line c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> result<std::string> {
      if (i + 1 >= argc) return error(errc::invalid_argument, a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--resume") {
      c.resume = true;
    } else if (a == "--fresh") {
      c.fresh = true;
    } else if (a == "--results") {
      c.results = true;
    } else if (a == "--role" || a == "--run-dir" || a == "--export" || a == "--worker" ||
               a == "--stage" || a == "--peers" || a == "--score") {
      auto v = value();
      if (!v) return v.error();
      if (a == "--role") {
        if (*v != "launcher" && *v != "prepare" && *v != "store" && *v != "worker")
          return error(errc::invalid_argument,
                       "--role " + *v + ": a role is launcher, prepare, store or worker");
        c.role = *v;
      } else if (a == "--run-dir") {
        c.run_dir = *v;
      } else if (a == "--export") {
        c.export_dir = *v;
      } else if (a == "--peers") {
        c.peers = *v;
      } else if (a == "--score") {
        c.score.push_back(*v);
      } else {
        char* end = nullptr;
        const long n = std::strtol(v->c_str(), &end, 10);
        const long least = a == "--worker" ? 1 : 0;
        if (v->empty() || *end || n < least || n > 1 << 20)
          return error(errc::invalid_argument,
                       a + " " + *v + ": not a number ≥ " + std::to_string(least));
        (a == "--worker" ? c.worker : c.stage) = int(n);
      }
    } else {
      return error(
          errc::invalid_argument,
          "unknown argument '" + a +
              "' (--role, --worker, --stage, --peers, --run-dir, --resume, --fresh, --export, "
              "--score, --results)");
    }
  }
  return c;
}

}  // namespace paco::job
