// blocking round_loop's checkpoints (train/replica_file.hpp): a run of three ranks over inproc,
// stopped after round k and resumed from its checkpoints, ends bit-identical to one never
// stopped (fp32 and int8 with error feedback, outer Nesterov), also when one rank's newest
// file is missing; a missing, foreign or other-config checkpoint, a fresh run over existing
// files, a codec whose state a file does not hold and a failed write are errors naming the
// file (or the rank), on every rank.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "paco/core/hash.hpp"
#include "paco/net/inproc.hpp"
#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/store/compression.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_loop.hpp"

using namespace paco;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using worker_t = train::path_worker<nn::gpt, optim::adamw>;
using rank_t = train::round_loop<net::inproc, train::path_worker<nn::gpt, optim::adamw>,
                                 outer::nesterov, train::blocking>;

struct checkpoint_setup {
  nn::gpt model{{.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2}};
  std::vector<path::level_span> levels = *path::split_gpt_levels(model.layout(), 2, 1);
  train::inner_config icfg{.batch = 2, .ctx = 16, .steps = 3};
  std::vector<io::token_stream> shards;
  static constexpr int K = 3, R = 5;
  checkpoint_setup() {
    icfg.schedule = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup = 2, .total = R * 3};
    for (int r = 0; r < K; ++r) shards.push_back(testing::synthetic_stream(70 + r, 3000, 3 + r, 3));
  }
};

struct outcome {
  std::vector<std::vector<float>> theta;  // per rank, at the end
  std::vector<status> st;                 // per rank: the first error
  std::vector<long> rounds;               // per rank: rounds_done() at the end
};

// K ranks: open the checkpoints in dir (unless empty) with `resume`, then rounds up to `until`,
// saving each when dir is given.
outcome run(const checkpoint_setup& s, int until, const fs::path& dir, bool resume,
            const std::string& compress = "", const std::string& config = "run=1") {
  outcome out{std::vector<std::vector<float>>(checkpoint_setup::K),
              std::vector<status>(checkpoint_setup::K, status{}),
              std::vector<long>(checkpoint_setup::K, 0)};
  auto world = net::inproc::world(checkpoint_setup::K);
  std::vector<std::thread> th;
  for (int r = 0; r < checkpoint_setup::K; ++r)
    th.emplace_back([&, r] {
      std::vector<compress::module_codec> codec;
      if (!compress.empty())
        codec.push_back(
            std::move(*train::diloco_codec(*store::parse_compression(compress), s.model)));
      worker_t w(r, s.model, s.levels, std::vector<int>(s.levels.size(), 0), optim::adamw{}, s.icfg,
                 s.shards[std::size_t(r)], 40u + std::uint64_t(r));
      s.model.init(w.state(), 6);
      rank_t rep(world[std::size_t(r)], w, outer::nesterov{}, {}, {}, std::move(codec));
      const fs::path& d = dir;
      status st;
      if (!d.empty()) st = rep.open_checkpoints(d, config, resume, 30s);
      while (st && rep.rounds_done() < until) {
        st = rep.run(1, 30s);
        if (st && !d.empty()) st = rep.save_round(d, config, 2);
      }
      out.st[std::size_t(r)] = st;
      out.rounds[std::size_t(r)] = rep.rounds_done();
      const auto p = w.state().get(plane::param);
      out.theta[std::size_t(r)].assign(p.begin(), p.end());
    });
  for (auto& t : th) t.join();
  return out;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("paco_test_resumable_" + name);
  fs::remove_all(d);
  return d;
}

void require_ok(const outcome& o) {
  for (int r = 0; r < checkpoint_setup::K; ++r) {
    INFO("rank " << r << ": " << o.st[std::size_t(r)].error().what());
    REQUIRE(o.st[std::size_t(r)].ok());
  }
}

}  // namespace

TEST_CASE(
    "blocking round_loop: stopped after round k and resumed, bit-identical to a run never "
    "stopped",
    "[train][diloco][resume]") {
  const checkpoint_setup s;
  for (const std::string compress : {"", "int8"}) {
    INFO("compress '" << compress << "'");
    const auto whole = run(s, checkpoint_setup::R, {}, false, compress);
    require_ok(whole);
    REQUIRE(whole.theta[0] == whole.theta[1]);
    REQUIRE(whole.theta[1] == whole.theta[2]);
    arena<host> init(s.model.layout());
    s.model.init(init, 6);
    const auto p0 = init.get(plane::param);
    REQUIRE(!std::equal(p0.begin(), p0.end(), whole.theta[0].begin()));
    for (int k : {1, 3}) {
      INFO("stopped after " << k << " rounds");
      const auto dir = fresh_dir("kat");
      const auto first = run(s, k, dir, false, compress);
      require_ok(first);
      // The newest two rounds of each rank are on disk.
      for (int r = 0; r < checkpoint_setup::K; ++r) {
        auto want = k == 1 ? std::vector<long>{0} : std::vector<long>{long(k) - 2, long(k) - 1};
        REQUIRE(train::replica_rounds(dir, r) == want);
      }
      const auto second = run(s, checkpoint_setup::R, dir, true, compress);
      require_ok(second);
      for (int r = 0; r < checkpoint_setup::K; ++r) {
        REQUIRE(second.rounds[std::size_t(r)] == checkpoint_setup::R);
        REQUIRE(second.theta[std::size_t(r)] == whole.theta[std::size_t(r)]);  // bit for bit
      }
      fs::remove_all(dir);
    }
  }
}

TEST_CASE(
    "blocking round_loop: a rank whose newest file is missing resumes the group one round "
    "earlier, still bit-identical",
    "[train][diloco][resume]") {
  const checkpoint_setup s;
  const auto whole = run(s, checkpoint_setup::R, {}, false);
  require_ok(whole);
  const auto dir = fresh_dir("skew");
  require_ok(run(s, 3, dir, false));
  fs::remove(train::replica_file(dir, 1, 2));  // killed between the ranks' writes of round 2
  const auto second = run(s, checkpoint_setup::R, dir, true);
  require_ok(second);
  for (int r = 0; r < checkpoint_setup::K; ++r)
    REQUIRE(second.theta[std::size_t(r)] == whole.theta[std::size_t(r)]);
  fs::remove_all(dir);
}

TEST_CASE(
    "blocking round_loop: missing, foreign and other-config checkpoints fail every rank, "
    "the file named",
    "[train][diloco][resume]") {
  const checkpoint_setup s;
  const auto dir = fresh_dir("errors");
  SECTION("no checkpoint at all") {
    const auto o = run(s, checkpoint_setup::R, dir, true);
    for (int r = 0; r < checkpoint_setup::K; ++r) {
      const auto& e = o.st[std::size_t(r)].error();
      REQUIRE(e.code == errc::not_found);
      REQUIRE(e.message.find("no checkpoint of rank " + std::to_string(r) + " in '" + dir.string() +
                             "'") != std::string::npos);
      REQUIRE(o.rounds[std::size_t(r)] == 0);
    }
  }
  SECTION("one rank without its files") {
    require_ok(run(s, 2, dir, false));
    for (long k : train::replica_rounds(dir, 2)) fs::remove(train::replica_file(dir, 2, k));
    const auto o = run(s, checkpoint_setup::R, dir, true);
    REQUIRE(o.st[2].error().message.find("no checkpoint of rank 2") == 0);
    for (int r : {0, 1}) {
      REQUIRE(o.st[std::size_t(r)].error().code == errc::not_found);
      REQUIRE(o.st[std::size_t(r)].error().message.find("rank 2: no checkpoint of rank 2") == 0);
    }
  }
  SECTION("a file of another rank") {
    require_ok(run(s, 2, dir, false));
    fs::copy_file(train::replica_file(dir, 0, 1), train::replica_file(dir, 1, 1),
                  fs::copy_options::overwrite_existing);
    const auto o = run(s, checkpoint_setup::R, dir, true);
    const auto& e = o.st[1].error();
    REQUIRE(e.code == errc::mismatch);
    REQUIRE(e.message == "checkpoint '" + train::replica_file(dir, 1, 1).string() +
                             "' was written with rank 0, expected 1");
    REQUIRE(o.st[0].error().message == "rank 1: " + e.message);
    REQUIRE(o.st[2].error().message == "rank 1: " + e.message);
  }
  SECTION("a file of another configuration") {
    require_ok(run(s, 2, dir, false, "", "lr=0.002 inner=3"));
    const auto o = run(s, checkpoint_setup::R, dir, true, "", "lr=0.001 inner=3");
    const auto& e = o.st[0].error();
    REQUIRE(e.code == errc::mismatch);
    REQUIRE(e.message == "'" + train::replica_file(dir, 0, 1).string() +
                             "' was written with lr = 0.002, this run has 0.001");
    for (int r = 1; r < checkpoint_setup::K; ++r)
      REQUIRE(o.st[std::size_t(r)].error().message.find("' was written with lr = 0.002") !=
              std::string::npos);
  }
  SECTION("a fresh run over existing checkpoints") {
    require_ok(run(s, 2, dir, false));
    const auto o = run(s, checkpoint_setup::R, dir, false);
    for (int r = 0; r < checkpoint_setup::K; ++r) {
      const auto& e = o.st[std::size_t(r)].error();
      REQUIRE(e.code == errc::invalid_argument);
      REQUIRE(e.message.find("checkpoint '" + train::replica_file(dir, r, 1).string() +
                             "' exists") == 0);
    }
  }
  SECTION("a codec whose state a checkpoint does not hold") {
    const auto o = run(s, checkpoint_setup::R, dir, false, "powersgd:2");
    for (auto& st : o.st) {
      REQUIRE(st.error().code == errc::unsupported);
      REQUIRE(st.error().message.find("compress = powersgd:2 keeps PowerSGD's warm-started Q") ==
              0);
    }
    REQUIRE(train::checkpointable(store::parse_compression("lgreco:int")->spec).error().code ==
            errc::unsupported);
    REQUIRE(train::checkpointable(store::parse_compression("topk:0.1")->spec).ok());
  }
  fs::remove_all(dir);
}

TEST_CASE("save_replica_file: a write that keeps failing is an error naming the file",
          "[train][resume]") {
  const checkpoint_setup s;
  arena<host> a(s.model.layout());
  s.model.init(a, 1);
  const auto blocker = fs::temp_directory_path() / "paco_test_resumable_blocker";
  fs::remove_all(blocker);
  { std::ofstream(blocker) << "a file where the directory should be"; }
  const auto file = train::replica_file(blocker / "ck", 0, 3);
  const auto t0 = std::chrono::steady_clock::now();
  const rng::state_type at{1, 2, 3, 0xfedcba9876543210ULL};
  const auto st = train::save_replica_file(file, s.model, a, 9, at, 3, 0, 1, "run=1", 3);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(!st.ok());
  REQUIRE(st.error().code == errc::io);
  REQUIRE(st.error().message.find("checkpoint '" + file.string() + "' not written: ") == 0);
  REQUIRE(st.error().message.find("(3 tries)") != std::string::npos);
  REQUIRE(took >= 0.3);  // 100 ms + 200 ms between the attempts
  REQUIRE(train::replica_rounds(blocker, 0).empty());
  fs::remove(blocker);
  // Written and read back: the metadata say rank, size, round.
  const auto dir = fresh_dir("roundtrip");
  REQUIRE(
      train::save_replica_file(train::replica_file(dir, 2, 7), s.model, a, 21, at, 7, 2, 4, "run=1")
          .ok());
  auto ck = train::load_replica_file(train::replica_file(dir, 2, 7), s.model, 2, 4, 7, "run=1");
  REQUIRE(ck);
  REQUIRE(ck->step == 21);
  REQUIRE(ck->round == 7);
  REQUIRE(ck->sampler == at);
  REQUIRE(ck->metadata.at("size") == "4");
  const auto p = a.get(plane::param), q = ck->state.get(plane::param);
  REQUIRE(std::equal(p.begin(), p.end(), q.begin()));
  auto other_size =
      train::load_replica_file(train::replica_file(dir, 2, 7), s.model, 2, 3, 7, "run=1");
  REQUIRE(!other_size);
  REQUIRE(other_size.error().message.find("was written with size 4, expected 3") !=
          std::string::npos);
  auto missing =
      train::load_replica_file(train::replica_file(dir, 2, 8), s.model, 2, 4, 8, "run=1");
  REQUIRE(missing.error().code == errc::not_found);
  REQUIRE(missing.error().message.find(train::replica_file(dir, 2, 8).string()) !=
          std::string::npos);
  fs::remove_all(dir);
}
