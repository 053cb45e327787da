#pragma once
// The Transport conformance suite: every line of net/concepts.hpp's semantics, checked over a
// test world W (see world.hpp). Included by test_net.cpp with the list of worlds.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "paco/net/concepts.hpp"

namespace paco::testing {

using namespace std::chrono_literals;

inline std::span<const std::byte> cb(const std::vector<int>& v) {
  return net::as_bytes(std::span<const int>(v));
}
inline std::span<std::byte> wb(std::vector<int>& v) {
  return net::as_writable_bytes(std::span<int>(v));
}

}  // namespace paco::testing

TEMPLATE_TEST_CASE("transport: messages arrive intact, FIFO per tag, tags independent",
                   "[net][conformance]", PACO_TEST_WORLDS) {
  using namespace paco;
  using namespace paco::testing;
  using W = TestType;
  const int p = 3;
  std::vector<std::string> errors(p);
  W::run(p, [&](typename W::transport& t) {
    auto d = net::after(5s);
    int r = t.rank(), right = (r + 1) % p, left = (r + p - 1) % p;
    std::vector<int> a(1000), b(3), big(300000);
    std::iota(a.begin(), a.end(), r * 1000);
    std::iota(b.begin(), b.end(), r * 7);
    std::iota(big.begin(), big.end(), r);
    auto s1 = t.send(right, 1, cb(a), d);
    auto s2 = t.send(right, 2, cb(b), d);
    auto s3 = t.send(right, 1, cb(b), d);
    auto s4 = t.send(right, 3, {}, d);
    auto s5 = t.send(right, 4, cb(big), d);
    std::vector<int> ra(1000), rb(3), rc(3), rbig(300000);
    // Tag 2 before tag 1: tags are matched independently; tag 1 in sending order.
    auto r2 = t.recv(left, 2, wb(rb), d);
    auto r5 = t.recv(left, 4, wb(rbig), d);
    auto r1 = t.recv(left, 1, wb(ra), d);
    auto r3 = t.recv(left, 1, wb(rc), d);
    auto r4 = t.recv(left, 3, {}, d);
    for (auto* q : {&r2, &r5, &r1, &r3, &r4, &s1, &s2, &s3, &s4, &s5})
      if (auto ec = q->wait()) errors[r] += "op failed: " + ec.message() + "; ";
    for (int i = 0; i < 1000; ++i)
      if (ra[i] != left * 1000 + i) {
        errors[r] += "tag 1 payload; ";
        break;
      }
    for (int i = 0; i < 3; ++i)
      if (rb[i] != left * 7 + i || rc[i] != left * 7 + i) {
        errors[r] += "small payload; ";
        break;
      }
    for (int i = 0; i < 300000; ++i)
      if (rbig[i] != left + i) {
        errors[r] += "big payload; ";
        break;
      }
  });
  for (int r = 0; r < p; ++r) {
    INFO(W::name << " rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
}

TEMPLATE_TEST_CASE("transport: size mismatch, bad peer, timeout, cancel, cancel_all",
                   "[net][conformance]", PACO_TEST_WORLDS) {
  using namespace paco;
  using namespace paco::testing;
  using W = TestType;
  std::vector<std::string> errors(2);
  W::run(2, [&](typename W::transport& t) {
    int r = t.rank(), o = 1 - r;
    auto& e = errors[r];
    std::vector<int> four(4, r), three(3);
    // A message of 4 ints into a recv of 3: errc::mismatch.
    auto s = t.send(o, 10, cb(four), net::after(5s));
    auto v = t.recv(o, 10, wb(three), net::after(5s));
    if (v.wait() != errc::mismatch) e += "mismatch not reported; ";
    if (s.wait()) e += "send of mismatched message failed; ";
    if (t.send(r, 1, {}, net::after(1s)).wait() != errc::invalid_argument) e += "self send; ";
    if (t.recv(7, 1, {}, net::after(1s)).wait() != errc::invalid_argument) e += "bad peer; ";
    // Nothing is sent with tag 11: the recv times out at its deadline, not long after.
    auto t0 = net::clock::now();
    auto w = t.recv(o, 11, wb(three), t0 + 200ms);
    auto ec = w.wait();
    auto dt = net::clock::now() - t0;
    if (ec != errc::timeout) e += "timeout not reported: " + ec.message() + "; ";
    if (dt < 190ms || dt > 1000ms) e += "timeout off by " + std::to_string(dt.count()) + "ns; ";
    auto c = t.recv(o, 12, wb(three), net::after(5s));
    c.cancel();
    if (c.wait() != errc::cancelled) e += "cancel; ";
    // cancel_all from another thread aborts a blocked wait.
    auto b = t.recv(o, 13, wb(three), net::after(10s));
    std::thread canceller([&] {
      std::this_thread::sleep_for(50ms);
      t.cancel_all();
    });
    auto t1 = net::clock::now();
    if (b.wait() != errc::cancelled) e += "cancel_all; ";
    canceller.join();
    if (net::clock::now() - t1 > 2s) e += "cancel_all slow; ";
    // Both ranks still talk after all that.
    std::vector<int> x(5, r), y(5);
    auto s2 = t.send(o, 14, cb(x), net::after(5s));
    auto v2 = t.recv(o, 14, wb(y), net::after(5s));
    auto e2 = v2.wait(), e3 = s2.wait();
    if (e2 || e3 || y[0] != o)
      e += "exchange after errors: recv " + e2.message() + ", send " + e3.message() + "; ";
  });
  for (int r = 0; r < 2; ++r) {
    INFO(W::name << " rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
}

TEMPLATE_TEST_CASE("transport: a lost peer completes pending recvs with peer_lost",
                   "[net][conformance]", PACO_TEST_WORLDS) {
  using namespace paco;
  using namespace paco::testing;
  using W = TestType;
  std::vector<std::string> errors(2);
  W::run(2, [&](typename W::transport& t) {
    if (t.rank() == 1) {
      std::vector<int> x(3, 9);
      t.send(0, 1, cb(x), net::after(5s)).wait();
      std::this_thread::sleep_for(100ms);
      W::kill(t);
      return;
    }
    std::vector<int> y(3);
    auto t0 = net::clock::now();
    if (auto ec = t.recv(1, 1, wb(y), net::after(5s)).wait())
      errors[0] += "first recv: " + ec.message();
    auto ec = t.recv(1, 2, wb(y), net::after(5s)).wait();
    if (ec != errc::peer_lost) errors[0] += "expected peer_lost, got " + ec.message();
    if (net::clock::now() - t0 > 4s) errors[0] += "peer loss detected late; ";
  });
  INFO(TestType::name << ": " << errors[0]);
  REQUIRE(errors[0].empty());
}

#include "paco/collectives/collectives.hpp"

TEMPLATE_TEST_CASE("collectives over the transport: exact, bit-identical; dead peer -> error",
                   "[net][conformance][sync]", PACO_TEST_WORLDS) {
  using namespace paco;
  using W = TestType;
  for (int p : {2, 3, 5})
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(999), std::size_t(300001)}) {
      std::vector<std::string> err(p);
      std::vector<std::vector<float>> out(p);
      W::run(p, [&](typename W::transport& t) {
        int r = t.rank();
        std::vector<float> x(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = float((r + 1) * int(i % 89 + 1));
        std::vector<int> order(p);
        for (int i = 0; i < p; ++i) order[i] = p - 1 - i;
        auto st = collectives::allreduce_ring(t, std::span<float>(x),
                                              {.chunk_bytes = 64 * 1024, .order = order});
        if (!st) err[r] += st.error().what();
        std::vector<float> b(n, float(r));
        if (auto s2 = collectives::broadcast(t, std::span<float>(b), p - 1, {.tag = 3}); !s2)
          err[r] += s2.error().what();
        for (std::size_t i = 0; i < n; ++i)
          if (b[i] != float(p - 1)) {
            err[r] += " broadcast";
            break;
          }
        if (auto s3 = collectives::barrier(t, {.tag = 4}); !s3) err[r] += s3.error().what();
        out[r] = std::move(x);
      });
      for (int r = 0; r < p; ++r) {
        INFO(W::name << " p=" << p << " n=" << n << " rank " << r << ": " << err[r]);
        REQUIRE(err[r].empty());
        for (std::size_t i = 0; i < n; ++i)
          if (out[r][i] != float(p * (p + 1) / 2 * int(i % 89 + 1))) FAIL("element " << i);
        REQUIRE((n == 0 || std::memcmp(out[r].data(), out[0].data(), n * 4) == 0));
      }
    }
  // A rank that dies mid-run: every survivor errors within 2x the collective's deadline.
  const int p = 4;
  std::vector<double> took(p, 0);
  std::vector<int> failed(p, 0);
  W::run(p, [&](typename W::transport& t) {
    int r = t.rank();
    std::vector<float> x(1 << 20, 1.0f);
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      W::kill(t);
      return;
    }
    auto t0 = net::clock::now();
    auto st = collectives::allreduce_ring(t, std::span<float>(x),
                                          {.until = t0 + std::chrono::milliseconds(800)});
    took[r] = std::chrono::duration<double>(net::clock::now() - t0).count();
    failed[r] = !st;
  });
  for (int r = 0; r < p; ++r) {
    if (r == 2) continue;
    INFO(W::name << " rank " << r << " took " << took[r]);
    REQUIRE(failed[r]);
    REQUIRE(took[r] < 1.6);
  }
}
