// An exported model leaves paco whole: nn::save_gpt writes a self-describing file, nn::load_gpt
// reads it back bit for bit, and examples/torch/score_exported.py loads it into PyTorch and
// reproduces paco's bits/byte (the one scorer) on a few documents.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "paco/core/rng.hpp"
#include "paco/io/atomic_file.hpp"
#include "paco/nn/gpt_file.hpp"
#include "paco/route/evaluate.hpp"

using namespace paco;
namespace fs = std::filesystem;

TEST_CASE("an exported GPT loads back bit for bit and scores the same in PyTorch",
          "[parity][export]") {
  const std::string src = PACO_SOURCE_DIR;
  for (bool tie : {false, true}) {
    INFO("tie_weights " << tie);
    const fs::path dir = fs::temp_directory_path() /
                         ("paco_export_" + std::to_string(::getpid()) + (tie ? "_tied" : ""));
    fs::create_directories(dir);
    nn::gpt model({.vocab = 256, .ctx = 32, .d = 32, .layers = 2, .heads = 4, .tie_weights = tie});
    arena<host> a(model.layout());
    model.init(a, 5);
    const float* theta = a.get(plane::param).data();
    REQUIRE(nn::save_gpt(dir / "model.safetensors", model, theta, {{"path", "(0,1)"}}).ok());

    auto back = nn::load_gpt(dir / "model.safetensors");
    REQUIRE(back.ok());
    REQUIRE(back->config.tie_weights == tie);
    REQUIRE(back->metadata.at("path") == "(0,1)");
    for (auto& t : model.tensors())
      REQUIRE(std::equal(theta + t.offset, theta + t.offset + t.size(),
                         back->theta.begin() + std::ptrdiff_t(t.offset)));

    // Three documents: shorter than the context, a few windows, many windows.
    const std::vector<std::string> docs = {
        "a short one.",
        "The quick brown fox jumps over the lazy dog; the dog does not mind at all.",
        std::string(300, ' ')};
    std::vector<std::vector<std::int32_t>> seqs;
    rng r(9);
    std::vector<std::string> files;
    for (std::size_t i = 0; i < docs.size(); ++i) {
      std::string text = docs[i];
      if (i == 2)
        for (auto& c : text) c = char('a' + r.below(26));
      seqs.emplace_back(text.begin(), text.end());
      for (auto& v : seqs.back()) v = std::int32_t((unsigned char)v);
      files.push_back((dir / ("doc" + std::to_string(i) + ".txt")).string());
      REQUIRE(io::write_file_atomic(files.back(), text).ok());
    }
    const auto rule = *route::sliding_window::make(32);
    auto ws = model.make_workspace({4, 32});
    route::nll paco_nll;
    for (auto& s : seqs) paco_nll += route::sequence_nll(model, theta, s, 1, s.size(), rule, ws);

    // PyTorch's bits/byte of the model at `path` (a paco-gpt-1 file or a Hugging Face directory).
    auto torch_bpb = [&](const fs::path& path) {
      std::string cmd = "OMP_NUM_THREADS=1 /usr/bin/python3 " + src +
                        "/examples/torch/score_exported.py " + path.string();
      for (auto& f : files) cmd += " " + f;
      cmd += " > " + (dir / "torch.out").string() + " 2>&1";
      const int rc = std::system(cmd.c_str());
      std::ifstream in(dir / "torch.out");
      const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      INFO(out);
      REQUIRE(rc == 0);
      std::smatch m;
      REQUIRE(std::regex_search(out, m,
                                std::regex(R"("bits_per_byte": ([0-9.eE+-]+), "bytes": (\d+))")));
      REQUIRE(std::stoul(m[2]) == paco_nll.tokens);
      return std::stod(m[1]);
    };
    const double bpb = paco_nll.bits_per_token();
    INFO("paco " << bpb);
    REQUIRE(std::abs(torch_bpb(dir / "model.safetensors") - bpb) < 1e-4 * bpb);

    // The Hugging Face GPT-2 layout: GPT2LMHeadModel's names, Conv1D weights as (in, out).
    REQUIRE(nn::save_gpt_hf(dir / "hf", model, theta).ok());
    auto hf = io::load_safetensors(dir / "hf" / "model.safetensors");
    REQUIRE(hf.ok());
    REQUIRE(hf->metadata.at("format") == "pt");
    REQUIRE(hf->tensors.count("lm_head.weight") == (tie ? 0u : 1u));
    const auto& qkv = hf->tensors.at("transformer.h.1.attn.c_attn.weight");
    REQUIRE(qkv.shape == std::vector<std::size_t>{32, 96});
    std::size_t off = 0;
    for (auto& t : model.tensors())
      if (t.name == "h.1.attn.c_attn.weight") off = t.offset;
    for (std::size_t o : {0u, 5u, 95u})
      for (std::size_t i : {0u, 7u, 31u})
        REQUIRE(qkv.values[i * 96 + o] == theta[off + o * 32 + i]);
    REQUIRE(std::abs(torch_bpb(dir / "hf") - bpb) < 1e-4 * bpb);
    // A byte-level model's tokenizer, checked against GPT-2's byte map re-derived in Python.
    const std::string tok_check =
        "/usr/bin/python3 " +
        (fs::path(PACO_SOURCE_DIR) / "tests" / "parity" / "byte_tokenizer_check.py").string() +
        " " + (dir / "hf").string() + " 2>&1";
    FILE* pipe = ::popen(tok_check.c_str(), "r");
    REQUIRE(pipe);
    std::string said;
    char line[512];
    while (std::fgets(line, sizeof line, pipe)) said += line;
    INFO(said);
    REQUIRE(::pclose(pipe) == 0);
    REQUIRE(said == "ok\n");
    fs::remove_all(dir);
  }
}

TEST_CASE("a model file that is not one, or whose config is damaged, is refused by name",
          "[parity][export]") {
  const fs::path dir =
      fs::temp_directory_path() / ("paco_export_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nn::gpt model({.vocab = 16, .ctx = 8, .d = 8, .layers = 1, .heads = 2});
  arena<host> a(model.layout());
  model.init(a, 1);
  // A safetensors file of another format.
  REQUIRE(io::save_safetensors(dir / "other.safetensors", {}, {{"format", "paco-store-1"}}).ok());
  auto other = nn::load_gpt(dir / "other.safetensors");
  REQUIRE(!other.ok());
  REQUIRE(other.error().message.find("not a paco-gpt-1 file") != std::string::npos);
  // A config with a field out of range: heads must divide d.
  REQUIRE(nn::gpt_config_from_json(
              R"({"vocab":16,"ctx":8,"d":8,"layers":1,"heads":3,"mlp_mult":4,"tie_weights":false})")
              .error()
              .message.find("heads") != std::string::npos);
  REQUIRE(!nn::gpt_config_from_json("{\"vocab\":16}").ok());
  REQUIRE(!nn::gpt_config_from_json("not json").ok());
  // A missing file.
  REQUIRE(nn::load_gpt(dir / "nope.safetensors").error().code == errc::not_found);
  fs::remove_all(dir);
}
