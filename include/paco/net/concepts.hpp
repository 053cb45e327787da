#pragma once
// Transport: the concept every byte mover models (inproc threads, Boost.Asio TCP, MPI).
// A transport moves untyped bytes between ranks 0..size()-1, tagged with a 32-bit tag; typed
// data and reductions are the collectives' business (paco::collectives). Every operation carries a
// deadline, can be cancelled, and reports failure as a std::error_code in paco's category
// (paco::errc): timeout, peer_lost, cancelled, mismatch, corrupt, protocol, auth, version, ...
//
// Semantics shared by every model (the conformance suite in tests/net checks each line):
// - send(peer, tag, bytes, d) starts sending; `bytes` must stay alive and unmodified until the
//   returned request completes (wait() returned or test() was true). Zero-length messages are
//   allowed. Sending to oneself is not (errc::invalid_argument).
// - recv(peer, tag, bytes, d) completes when a message from `peer` with `tag` was written into
//   `bytes`; a message whose length differs from bytes.size() completes the recv with
//   errc::mismatch. Messages from one peer with one tag are matched in the order they were sent
//   and recvs in the order they were posted (FIFO per (peer, tag)).
// - request.wait() blocks until the operation completed or its deadline passed; it returns {}
//   or the error. After wait() returns, the transport no longer touches the buffer.
// - request.cancel() and transport.cancel_all() complete pending operations with
//   errc::cancelled (cancel_all may be called from another thread to abort a collective).
// - a peer that closed or crashed completes operations on it with errc::peer_lost.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

namespace paco::net {

using clock = std::chrono::steady_clock;
// The point in time by which an operation must have completed.
using deadline = clock::time_point;
// A message tag. Collectives take a base tag so that concurrent collectives do not mix.
using tag_t = std::uint32_t;

// The deadline `d` from now. Ensures: returns clock::now() + d.
inline deadline after(clock::duration d) {
  return clock::now() + d;
}

// An in-flight send or recv. Requires of models: movable, default-constructible (an empty
// request is complete with no error); wait() blocks at most until the operation's deadline.
template <class R>
concept Request = std::movable<R> && std::default_initializable<R> && requires(R& r) {
  { r.wait() } -> std::same_as<std::error_code>;  // blocks; {} on success
  { r.test() } -> std::same_as<bool>;             // non-blocking: complete?
  r.cancel();                                     // completes a pending op with cancelled
};

// A transport between size() ranks. See the file comment for the exact semantics.
template <class T>
concept Transport = requires(T& t, const T& ct, int peer, tag_t tag, std::span<const std::byte> out,
                             std::span<std::byte> in, deadline d) {
  typename T::request;
  requires Request<typename T::request>;
  { ct.rank() } -> std::same_as<int>;
  { ct.size() } -> std::same_as<int>;
  { t.send(peer, tag, out, d) } -> std::same_as<typename T::request>;
  { t.recv(peer, tag, in, d) } -> std::same_as<typename T::request>;
  t.cancel_all();
};

// Bytes of a span of trivially copyable T, for send/recv. Ensures: same address and size.
template <class V>
inline std::span<const std::byte> as_bytes(std::span<V> s) noexcept {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size_bytes()};
}
template <class V>
requires(!std::is_const_v<V>) inline std::span<std::byte> as_writable_bytes(
    std::span<V> s) noexcept {
  return {reinterpret_cast<std::byte*>(s.data()), s.size_bytes()};
}

}  // namespace paco::net
