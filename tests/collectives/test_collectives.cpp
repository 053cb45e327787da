// Collectives over threads as ranks (inproc): exact closed-form results for p in {1,2,3,5,8}
// and n in {0, 1, odd, large}, bit-identical on every rank, wire cost checked literally, and a
// dead or silent peer turned into an error within the deadline on every survivor.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "paco/collectives/collectives.hpp"
#include "paco/testing/archetypes.hpp"
#include "world.hpp"

using namespace paco;
using namespace std::chrono_literals;

namespace {

// Wraps a transport and counts the bytes and messages this rank sends.
template <net::Transport T>
struct counting {
  using request = typename T::request;
  T& t;
  std::size_t bytes = 0, messages = 0;
  int rank() const { return t.rank(); }
  int size() const { return t.size(); }
  request send(int peer, net::tag_t tag, std::span<const std::byte> b, net::deadline d) {
    bytes += b.size();
    ++messages;
    return t.send(peer, tag, b, d);
  }
  request recv(int peer, net::tag_t tag, std::span<std::byte> b, net::deadline d) {
    return t.recv(peer, tag, b, d);
  }
  void cancel_all() { t.cancel_all(); }
};
static_assert(net::Transport<counting<net::inproc>>);

// x_r[i] = (r + 1) * (i % 97 + 1): integer-valued floats whose sum over r is exact.
float value(int r, std::size_t i) {
  return float((r + 1) * int(i % 97 + 1));
}
float total(int p, std::size_t i) {
  return float(p * (p + 1) / 2 * int(i % 97 + 1));
}

const int ps[] = {1, 2, 3, 5, 8};
const std::size_t ns[] = {0, 1, 7, 1001, 262147};

std::vector<int> reversed_order(int p) {
  std::vector<int> o(p);
  for (int i = 0; i < p; ++i) o[i] = (p - 1 - i + 2) % p;  // a non-trivial permutation
  return o;
}

}  // namespace

// The collectives work over the minimal archetype (p = 1) too.
TEST_CASE("collectives compile over the transport archetype", "[collectives]") {
  paco::testing::transport_archetype t;
  std::vector<float> x(5, 1.0f);
  REQUIRE(collectives::allreduce_ring(t, std::span<float>(x)).ok());
  REQUIRE(collectives::broadcast(t, std::span<float>(x), 0).ok());
  REQUIRE(collectives::barrier(t).ok());
  REQUIRE(x[0] == 1.0f);
}

TEST_CASE("allreduce_ring: exact sums, bit-identical, p x n x chunk x order", "[collectives]") {
  for (int p : ps)
    for (std::size_t n : ns)
      for (std::size_t chunk : {std::size_t(12), std::size_t(1) << 20})
        for (bool permuted : {false, true}) {
          auto order = reversed_order(p);
          std::vector<std::vector<float>> out(p);
          std::vector<std::string> err(p);
          std::vector<std::size_t> sent(p);
          paco::testing::inproc_world::run(p, [&](net::inproc& t) {
            int r = t.rank();
            std::vector<float> x(n);
            for (std::size_t i = 0; i < n; ++i) x[i] = value(r, i);
            counting<net::inproc> c{t};
            collectives::collective_options o{.chunk_bytes = chunk};
            if (permuted) o.order = order;
            auto st = collectives::allreduce_ring(c, std::span<float>(x), o);
            if (!st) err[r] = st.error().what();
            sent[r] = c.bytes;
            out[r] = std::move(x);
          });
          INFO("p=" << p << " n=" << n << " chunk=" << chunk << " permuted=" << permuted);
          for (int r = 0; r < p; ++r) {
            INFO("rank " << r << ": " << err[r]);
            REQUIRE(err[r].empty());
            REQUIRE(out[r].size() == n);
            for (std::size_t i = 0; i < n; ++i)
              if (out[r][i] != total(p, i)) FAIL("element " << i << " = " << out[r][i]);
            REQUIRE((n == 0 || std::memcmp(out[r].data(), out[0].data(), n * 4) == 0));
            // Cost: exactly cost() when p divides n; else within whole-element blocks.
            REQUIRE(sent[r] <= std::size_t(2 * (p - 1)) * ((n + p - 1) / p) * 4);
            if (n % p == 0) REQUIRE(sent[r] == collectives::allreduce_ring.cost(n * 4, p).bytes);
          }
        }
}

TEST_CASE("allreduce_ring: bit-identical for non-integer floats and other reductions",
          "[collectives]") {
  const int p = 5;
  const std::size_t n = 4099;
  std::vector<std::vector<float>> out(p);
  std::vector<std::vector<float>> mx(p);
  paco::testing::inproc_world::run(p, [&](net::inproc& t) {
    int r = t.rank();
    std::vector<float> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = 0.1f * float(r + 1) / float(i % 13 + 3);
      y[i] = float((i * 7 + r * 3) % 11);
    }
    collectives::allreduce_ring(t, std::span<float>(x), {.chunk_bytes = 256});
    collectives::allreduce_ring(t, std::span<float>(y), {.tag = 5}, collectives::maximum{});
    out[r] = x;
    mx[r] = y;
  });
  for (int r = 1; r < p; ++r) REQUIRE(std::memcmp(out[r].data(), out[0].data(), n * 4) == 0);
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < p; ++q) want = std::max(want, float((i * 7 + q * 3) % 11));
      REQUIRE(mx[r][i] == want);
    }
}

TEST_CASE("reduce_scatter and all_gather: own block reduced; all blocks gathered",
          "[collectives]") {
  for (int p : ps)
    for (std::size_t n : ns) {
      std::vector<std::string> err(p);
      paco::testing::inproc_world::run(p, [&](net::inproc& t) {
        int r = t.rank();
        std::vector<double> x(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = value(r, i);
        counting<net::inproc> c{t};
        collectives::collective_options o{.chunk_bytes = 40};
        auto order = reversed_order(p);
        o.order = order;
        if (auto st = collectives::reduce_scatter(c, std::span<double>(x), o); !st) {
          err[r] = st.error().what();
          return;
        }
        auto [off, cnt] = collectives::block_of(n, p, r);
        for (std::size_t i = off; i < off + cnt; ++i)
          if (x[i] != total(p, i)) err[r] = "reduce_scatter element " + std::to_string(i);
        // Cost: exact when p divides n (blocks are balanced in whole elements otherwise).
        std::size_t bound = std::size_t(p - 1) * ((n + p - 1) / p) * 8;
        if (c.bytes > bound) err[r] += " cost exceeded";
        if (n % p == 0 && c.bytes != collectives::reduce_scatter.cost(n * 8, p).bytes)
          err[r] += " cost";
        // all_gather: fill own block with (r, i) values, garbage elsewhere.
        std::vector<std::int32_t> g(n, -1);
        for (std::size_t i = off; i < off + cnt; ++i) g[i] = std::int32_t(r * 1000000 + i);
        if (auto st = collectives::all_gather(t, std::span<std::int32_t>(g), {.chunk_bytes = 8});
            !st) {
          err[r] = st.error().what();
          return;
        }
        for (int q = 0; q < p; ++q) {
          auto [qo, qc] = collectives::block_of(n, p, q);
          for (std::size_t i = qo; i < qo + qc; ++i)
            if (g[i] != std::int32_t(q * 1000000 + i)) err[r] += " all_gather element";
        }
      });
      for (int r = 0; r < p; ++r) {
        INFO("p=" << p << " n=" << n << " rank " << r << ": " << err[r]);
        REQUIRE(err[r].empty());
      }
    }
}

TEST_CASE("broadcast: every rank gets the root's bytes; barrier: nobody leaves early",
          "[collectives]") {
  for (int p : ps)
    for (std::size_t n : ns) {
      int root = (p * 7 + 3) % p;
      std::vector<std::string> err(p);
      std::atomic<int> entered{0};
      paco::testing::inproc_world::run(p, [&](net::inproc& t) {
        int r = t.rank();
        std::vector<float> x(n, r == root ? 0.0f : -1.0f);
        if (r == root)
          for (std::size_t i = 0; i < n; ++i) x[i] = value(r, i);
        if (auto st = collectives::broadcast(t, std::span<float>(x), root, {.chunk_bytes = 1000});
            !st)
          err[r] = st.error().what();
        for (std::size_t i = 0; i < n; ++i)
          if (x[i] != value(root, i)) {
            err[r] += " broadcast element";
            break;
          }
        entered.fetch_add(1);
        if (auto st = collectives::barrier(t, {.tag = 9}); !st) err[r] += st.error().what();
        if (entered.load() != p) err[r] += " left the barrier early";
      });
      for (int r = 0; r < p; ++r) {
        INFO("p=" << p << " n=" << n << " rank " << r << ": " << err[r]);
        REQUIRE(err[r].empty());
      }
    }
}

TEST_CASE("cost(): documented closed forms", "[collectives]") {
  REQUIRE(collectives::allreduce_ring.cost(1000, 4).steps == 6);
  REQUIRE(collectives::allreduce_ring.cost(1000, 4).bytes == 1500);
  REQUIRE(collectives::allreduce_ring.cost(1000, 1).bytes == 0);
  REQUIRE(collectives::reduce_scatter.cost(1000, 4).bytes == 750);
  REQUIRE(collectives::all_gather.cost(1000, 4).steps == 3);
  REQUIRE(collectives::broadcast.cost(1000, 4).bytes == 1000);
  REQUIRE(collectives::barrier.cost(0, 5).steps == 3);
  REQUIRE(collectives::barrier.cost(0, 8).steps == 3);
  REQUIRE(collectives::barrier.cost(0, 1).steps == 0);
}

TEST_CASE("a bad ring order is refused with invalid_argument naming the field", "[collectives]") {
  std::vector<std::string> msg(3);
  paco::testing::inproc_world::run(3, [&](net::inproc& t) {
    std::vector<float> x(10);
    int bad[] = {0, 1, 1};
    auto st = collectives::allreduce_ring(t, std::span<float>(x), {.order = bad});
    if (st.error().code == errc::invalid_argument) msg[t.rank()] = st.error().message;
  });
  for (auto& m : msg) REQUIRE(m.find("collective_options.order") != std::string::npos);
}

TEST_CASE("a dead or silent peer: every survivor errors within 2x the deadline", "[collectives]") {
  for (bool silent : {false, true})
    for (int p : {2, 3, 5}) {
      const auto budget = 300ms;
      int victim = p / 2;
      std::vector<std::string> err(p);
      std::vector<double> took(p);
      paco::testing::inproc_world::run(p, [&](net::inproc& t) {
        int r = t.rank();
        std::vector<float> x(100000, 1.0f);
        if (r == victim) {
          if (!silent) t.close();  // crashed: peers see peer_lost
          return;                  // silent: never sends (peers time out)
        }
        auto t0 = net::clock::now();
        auto st = collectives::allreduce_ring(t, std::span<float>(x), {.until = t0 + budget});
        took[r] = std::chrono::duration<double>(net::clock::now() - t0).count();
        err[r] = st ? "no error" : "";
      });
      for (int r = 0; r < p; ++r) {
        if (r == victim) continue;
        INFO("silent=" << silent << " p=" << p << " rank " << r << " took " << took[r] << " s");
        REQUIRE(err[r].empty());
        REQUIRE(took[r] < 2 * 0.3);
      }
    }
}

TEST_CASE("reduce_into_crc: the reduction of reduce_into and the CRC-32Cs of crc32c, any n",
          "[collectives]") {
  // float + sum takes the fused AVX-512 loop where the CPU has it; the others the blocked one.
  auto check = [](auto zero, auto op) {
    using V = decltype(zero);
    for (std::size_t n : {0, 1, 63, 64, 65, 127, 128, 1000, 4099, 70001}) {
      std::vector<V> a(n), b(n), want(n);
      for (std::size_t i = 0; i < n; ++i) {
        a[i] = V(0.37) * V(i % 1013) - V(50);
        b[i] = V(1.0) / V(i + 3);
      }
      want = a;
      collectives::detail::reduce_into(want.data(), b.data(), n, op);
      for (std::uint32_t seed : {0u, 0xdeadbeefu}) {
        auto got = a;
        std::uint32_t cs = seed, cd = seed ^ 1u, cs_only = seed;
        collectives::detail::reduce_into_crc(got.data(), b.data(), n, op, &cs, &cd);
        auto dst_only = a;
        collectives::detail::reduce_into_crc(dst_only.data(), b.data(), n, op, &cs_only, nullptr);
        INFO("n = " << n << ", bytes of V = " << sizeof(V));
        REQUIRE(std::memcmp(got.data(), want.data(), n * sizeof(V)) == 0);
        REQUIRE(std::memcmp(dst_only.data(), want.data(), n * sizeof(V)) == 0);
        REQUIRE(cs == net::crc32c_reference(seed, std::as_bytes(std::span(b))));
        REQUIRE(cs_only == cs);
        REQUIRE(cd == net::crc32c_reference(seed ^ 1u, std::as_bytes(std::span(want))));
      }
    }
  };
  check(0.0f, collectives::sum{});
  check(0.0, collectives::sum{});
  check(0.0f, collectives::maximum{});
}
