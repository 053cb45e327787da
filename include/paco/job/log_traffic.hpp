#pragma once
// log_traffic: what a worker (or stage) process's log says it sent to the store, and over which
// rounds: the results table's bytes and its fp32 comparison count the same rounds.
//
// A record of the log (worker-N.jsonl, one JSON object a line) carries the round it completed
// and bytes_sent, the process's bytes since its first start: a process resumed from its
// checkpoint counts on from the checkpoint's figure, one that joined from nothing (no checkpoint:
// a new or wiped machine) counts again from 0. Each round's push sends bytes, so a record whose
// bytes_sent is not above the one before starts such a new life.

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace paco::job {

struct log_traffic {
  double bytes = 0;  // every life's bytes (each life's last record)
  long rounds = 0;   // the rounds they cover: each life from its first logged round to its last
  int lives = 0;     // 0: nothing logged
};

// Requires: nothing (a missing file, empty lines and lines that are no round record with
// numbers for round and bytes_sent are skipped). Ensures: rounds ≥ the records counted.
inline log_traffic traffic_of_log(const std::filesystem::path& log) {
  log_traffic t;
  std::ifstream in(log);
  std::string line;
  bool open = false;  // a life is open
  double last_bytes = 0;
  long first_round = 0, last_round = 0;
  const auto close = [&] {
    if (!open) return;
    t.bytes += last_bytes;
    t.rounds += last_round - first_round + 1;
  };
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("round") || !j.contains("bytes_sent") ||
        !j["round"].is_number_integer() || !j["bytes_sent"].is_number())
      continue;
    const long round = j["round"].get<long>();
    const double bytes = j["bytes_sent"].get<double>();
    if (!open || bytes <= last_bytes) {  // a new life (a continued count only grows)
      close();
      open = true;
      ++t.lives;
      first_round = round;
    }
    last_bytes = bytes;
    last_round = round;
  }
  close();
  return t;
}

}  // namespace paco::job
